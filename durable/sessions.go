package durable

import (
	"context"
	"sync"
	"time"
)

// sessionTracker counts the activities in flight per session across this
// runtime's worker slots, so the runtime holds at most
// MaxSessionsPerRuntime distinct sessions.
type sessionTracker struct {
	mu       sync.Mutex
	inFlight map[string]int
}

func newSessionTracker() *sessionTracker { return &sessionTracker{inFlight: map[string]int{}} }

// distinct is the number of sessions with work in flight.
func (t *sessionTracker) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.inFlight)
}

// acquire counts an activity of the session until release is called.
func (t *sessionTracker) acquire(session string) (release func()) {
	t.mu.Lock()
	t.inFlight[session]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.inFlight[session]--; t.inFlight[session] <= 0 {
			delete(t.inFlight, session)
		}
	}
}

// sessionManager keeps this runtime's sessions: it renews the locks of the
// busy ones (idle ones are left to expire, unpinning them) and periodically
// deletes orphaned sessions. It renews until every worker slot has ended
// (workersDone), not only until fetching stops: a stopping runtime keeps
// the sessions of the activities it still runs, so no other runtime takes
// their next activities meanwhile.
//
// A failed renewal is tried again soon (renewalRetryDelay), not at the next
// interval: the interval leaves only the renewal buffer before the locks
// expire, so waiting it out after one failure would let every session go.
func (r *Runtime) sessionManager(owners []string, workersDone <-chan struct{}) {
	interval := renewalInterval(r.opts.SessionLockTimeout, r.opts.SessionLockRenewalBuffer)
	renew := r.opts.sessionRenewalAfter(interval)
	cleanup := time.NewTicker(r.opts.SessionCleanupInterval)
	defer cleanup.Stop()
	var lastProblem string // report a persistent failure once, not every tick
	report := func(op string, err error) {
		if err == nil {
			lastProblem = ""
			return
		}
		if problem := op + ": " + err.Error(); problem != lastProblem {
			lastProblem = problem
			r.log.Warn("session maintenance failed", "op", op, "error", err)
		}
	}
	// Renewals outlive the work context too, as the activities' own lock
	// renewals do, until the last worker slot ends.
	live, stop := context.WithCancel(context.WithoutCancel(r.workCtx))
	defer stop()
	go func() {
		<-workersDone
		stop()
	}()
	retries := 0
	for {
		select {
		case <-workersDone:
			return
		case <-renew:
			err := r.renewSessions(live, owners)
			report("renew_session_lock", err)
			next := interval
			if err != nil && live.Err() == nil {
				next = renewalRetryDelay(interval, retries)
				retries++
			} else {
				retries = 0
			}
			renew = r.opts.sessionRenewalAfter(next)
		case <-cleanup.C:
			if r.fetchCtx.Err() != nil {
				continue // stopping: only the renewals matter now
			}
			_, err := r.provider.CleanupOrphanedSessions(r.fetchCtx, r.opts.SessionIdleTimeout)
			report("cleanup_orphaned_sessions", err)
		}
	}
}

// renewSessions renews the busy sessions of owners once. The call may take
// as long as a session lock lasts: a slow store that answers after the
// renewal interval has still kept the sessions, and cutting the call at the
// interval would give them up while their locks stand.
func (r *Runtime) renewSessions(live context.Context, owners []string) error {
	ctx, cancel := context.WithTimeout(live, r.opts.SessionLockTimeout)
	defer cancel()
	_, err := r.provider.RenewSessionLock(ctx, owners, r.opts.SessionLockTimeout, r.opts.SessionIdleTimeout)
	return err
}
