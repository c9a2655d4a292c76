package durable

import (
	"context"
	"sync"
	"time"
)

// sessionTracker counts the activities in flight per session across this
// runtime's worker slots, so the runtime holds at most
// MaxSessionsPerRuntime distinct sessions, and says when its slots last
// took or ended one (on the runtime's clock and on the machine's).
type sessionTracker struct {
	mu                   sync.Mutex
	inFlight             map[string]int
	lastSeen, lastSeenAt time.Time
}

func newSessionTracker() *sessionTracker { return &sessionTracker{inFlight: map[string]int{}} }

// touch notes session work taken or ended now; called with t.mu held.
func (t *sessionTracker) touch(now time.Time) {
	t.lastSeen, t.lastSeenAt = now, time.Now()
}

// quietFor says no session work is in flight and none was taken or ended
// within d before now, on the runtime's clock and on the machine's.
func (t *sessionTracker) quietFor(now time.Time, d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.inFlight) > 0 {
		return false
	}
	return t.lastSeen.IsZero() || (now.Sub(t.lastSeen) >= d && time.Since(t.lastSeenAt) >= d)
}

// distinct is the number of sessions with work in flight.
func (t *sessionTracker) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.inFlight)
}

// acquire counts an activity of the session until release is called; now
// is the runtime's clock.
func (t *sessionTracker) acquire(session string, now func() time.Time) (release func()) {
	t.mu.Lock()
	t.inFlight[session]++
	t.touch(now())
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.touch(now())
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

// sessionsMayBeBusy says a session of owners may be busy (not idle), so a
// renewal may have one to renew: sessions are claimed by this runtime's
// slots, and a session no activity of which was taken or ended for an
// idle timeout is idle, so with owners of its own (no WorkerNodeID) the
// runtime knows every one. A stable WorkerNodeID may hold sessions an
// earlier run of the process claimed, busy for an idle timeout after they
// last ran. A lock's length is added to each for the claim's own time.
// Without this, a runtime that never ran a session queried every
// partition key range every renewal interval.
func (r *Runtime) sessionsMayBeBusy() bool {
	window := r.opts.SessionIdleTimeout + r.opts.SessionLockTimeout
	now := r.opts.Now()
	if r.opts.WorkerNodeID != "" && (now.Sub(r.startedAt) < window || time.Since(r.startedAtReal) < window) {
		return true
	}
	return !r.sessions.quietFor(now, window)
}

// renewSessions renews the busy sessions of owners once. The call may take
// as long as a session lock lasts: a slow store that answers after the
// renewal interval has still kept the sessions, and cutting the call at the
// interval would give them up while their locks stand.
func (r *Runtime) renewSessions(live context.Context, owners []string) error {
	if !r.sessionsMayBeBusy() {
		return nil
	}
	ctx, cancel := context.WithTimeout(live, r.opts.SessionLockTimeout)
	defer cancel()
	_, err := r.provider.RenewSessionLock(ctx, owners, r.opts.SessionLockTimeout, r.opts.SessionIdleTimeout)
	return err
}
