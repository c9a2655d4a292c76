package durable

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Session lock renewals on a store that fails or answers slowly: the
// session stays with its runtime as long as its lock could.

// sessionRenewals wraps a provider and records the session renewals; the
// first one fails with failFirst, or answers only after slowFirst.
type sessionRenewals struct {
	cdb.Provider
	failFirst error
	slowFirst time.Duration

	mu      sync.Mutex
	calls   int
	results []error
	seen    chan struct{} // gets a value after each renewal
}

func newSessionRenewals(t *testing.T) *sessionRenewals {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	return &sessionRenewals{Provider: mem, seen: make(chan struct{}, 64)}
}

func (p *sessionRenewals) RenewSessionLock(ctx context.Context, owners []string, extend, idle time.Duration) (int, error) {
	p.mu.Lock()
	first := p.calls == 0
	p.calls++
	p.mu.Unlock()
	n, err := p.renew(ctx, first, owners, extend, idle)
	p.mu.Lock()
	p.results = append(p.results, err)
	p.mu.Unlock()
	p.seen <- struct{}{}
	return n, err
}

func (p *sessionRenewals) renew(ctx context.Context, first bool, owners []string, extend, idle time.Duration) (int, error) {
	if first && p.failFirst != nil {
		return 0, p.failFirst
	}
	if first && p.slowFirst > 0 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(p.slowFirst):
		}
	}
	return p.Provider.RenewSessionLock(ctx, owners, extend, idle)
}

// waitRenewals waits until n renewals have returned.
func (p *sessionRenewals) waitRenewals(t *testing.T, n int) {
	t.Helper()
	for {
		p.mu.Lock()
		done := len(p.results) >= n
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-p.seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("waited 30s for %d session renewals", n)
		}
	}
}

func (p *sessionRenewals) record() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.results...)
}

// renewalTimers stands in for the session manager's timers: it records
// each delay the manager asks for and fires it when the test says so.
type renewalTimers struct {
	asked chan renewalTimer
}

type renewalTimer struct {
	delay time.Duration
	fire  chan time.Time
}

func newRenewalTimers() *renewalTimers {
	// Buffered, so a manager that asks again while the test has stopped
	// looking (at the end) never blocks its shutdown.
	return &renewalTimers{asked: make(chan renewalTimer, 16)}
}

func (r *renewalTimers) after(d time.Duration) <-chan time.Time {
	timer := renewalTimer{delay: d, fire: make(chan time.Time, 1)}
	r.asked <- timer
	return timer.fire
}

// next returns the next timer the manager asked for.
func (r *renewalTimers) next(t *testing.T) renewalTimer {
	t.Helper()
	select {
	case timer := <-r.asked:
		return timer
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for the session manager to ask for its next renewal")
		return renewalTimer{}
	}
}

// runInSession runs an orchestration whose one session activity returns
// once release returns.
func runInSession(t *testing.T, p cdb.Provider, lockTimeout, buffer time.Duration, release func()) string {
	h := startInSession(t, p, lockTimeout, buffer, release)
	return h.completed("held")
}

// startInSession starts the orchestration of runInSession and returns
// without waiting for it; tweak changes the runtime's options further.
func startInSession(t *testing.T, p cdb.Provider, lockTimeout, buffer time.Duration, release func(), tweak ...func(*Options)) *harness {
	h := newHarness(t, p)
	h.activity("Held", func(_ ActivityContext, in string) (string, error) {
		release()
		return in, nil
	})
	h.orchestration("OneInSession", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Held", in, WithSession("s")).Await()
	})
	h.run(append([]func(*Options){func(o *Options) {
		o.SessionLockTimeout, o.SessionLockRenewalBuffer = lockTimeout, buffer
		o.WorkerLockTimeout = 30 * time.Second // only the session lock is under test
	}}, tweak...)...)
	h.start("held", "OneInSession", "kept")
	return h
}

// A failed session renewal is tried again within the renewal buffer, not a
// whole interval later: the interval leaves only the buffer before the
// locks expire, so one failure would otherwise let every session go. The
// test fires the manager's timers itself and reads the delays it asks
// for, so no check depends on how fast this machine runs.
func TestAFailedSessionRenewalIsRetriedBeforeTheLockExpires(t *testing.T) {
	p := newSessionRenewals(t)
	p.failFirst = cdb.Retryable("renew_session_lock", "request timeout")
	const lockTimeout, buffer = 4 * time.Second, time.Second
	interval := renewalInterval(lockTimeout, buffer)
	timers := newRenewalTimers()
	running, finish := make(chan struct{}), make(chan struct{})
	h := startInSession(t, p, lockTimeout, buffer, func() {
		close(running)
		select {
		case <-finish:
		case <-t.Context().Done():
		}
	}, func(o *Options) { o.sessionRenewalAfter = timers.after })

	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for the session activity to run")
	}
	// The session's lock was taken as the manager began its first wait
	// (both follow the runtime's start): the failed renewal comes an
	// interval into the lock, and the retry must be due before the rest
	// of lockTimeout has passed.
	first := timers.next(t)
	require.Equal(t, interval, first.delay, "the first renewal comes an interval after the start")
	first.fire <- time.Now()
	p.waitRenewals(t, 1)
	require.ErrorIs(t, p.record()[0], p.failFirst, "the first renewal is the injected failure")

	retry := timers.next(t)
	assert.Less(t, first.delay+retry.delay, lockTimeout,
		"the retry is due %s after the failure, %s after the lock was taken; the lock lasts %s", retry.delay, first.delay+retry.delay, lockTimeout)
	retry.fire <- time.Now()
	p.waitRenewals(t, 2)
	assert.NoError(t, p.record()[1], "the retry renewed the session")

	close(finish)
	assert.Equal(t, "kept", h.completed("held"))
}

// A renewal the store answers after the renewal interval, but before the
// session lock would expire, is waited for and keeps the session: it is
// not cut off at the interval.
func TestASlowSessionRenewalIsWaitedForUntilTheLockWouldExpire(t *testing.T) {
	p := newSessionRenewals(t)
	const lockTimeout, buffer = 2 * time.Second, 500 * time.Millisecond
	interval := renewalInterval(lockTimeout, buffer)
	p.slowFirst = interval + interval/2

	out := runInSession(t, p, lockTimeout, buffer, func() { p.waitRenewals(t, 1) })

	assert.Equal(t, "kept", out)
	results := p.record()
	require.NotEmpty(t, results)
	assert.NoError(t, results[0], "a renewal slower than the interval (%s) but within the lock (%s)", p.slowFirst, lockTimeout)
}

// The activities of a session run one after another on its owner's slot,
// each as soon as the slot is free: the owner takes its session's next
// queued item at once, not after a poll interval (it waited one per
// activity: a session ran one activity a second however fast its
// activities were). Two orchestrations share the session, each with a
// fan-out and a sequence, on the default long poll; the poll interval is
// long, so a single wait for it would show.
func TestASessionsActivitiesDoNotWaitForThePollInterval(t *testing.T) {
	const pollInterval = 5 * time.Second
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client(), PollInterval: pollInterval})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	h := newHarness(t, p)
	var mu sync.Mutex
	workers := map[string]bool{}
	h.activity("Step", func(ctx ActivityContext, in string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		workers[ctx.WorkerID()] = true
		return in, nil
	})
	h.orchestration("FanThenSequence", func(ctx *OrchestrationContext, _ string) (string, error) {
		var fan []*Future
		for _, in := range []string{"a", "b", "c"} {
			fan = append(fan, ctx.ScheduleActivity("Step", in, WithSession("gpu-0")))
		}
		for _, r := range ctx.Join(fan...) {
			if r.Err != nil {
				return "", r.Err
			}
		}
		for _, in := range []string{"d", "e"} {
			if _, err := ctx.ScheduleActivity("Step", in, WithSession("gpu-0")).Await(); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	h.run(func(o *Options) {
		o.WorkerConcurrency = 4
		o.LongPollTimeout = 30 * time.Second // the default: a fetch waits in the provider
	})

	h.start("first", "FanThenSequence", "")
	h.start("second", "FanThenSequence", "")
	bound := pollInterval - time.Second // a margin of seconds: both take milliseconds
	for _, instance := range []string{"first", "second"} {
		st, err := h.client.WaitForCompletion(h.ctx, instance, bound)
		require.NoError(t, err, "%s's five session activities end within %s, before a poll interval (%s) could pass", instance, bound, pollInterval)
		assert.Equal(t, "done", st.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, workers, 1, "the session's activities ran on its owner's slot")
}

// A runtime whose slots never ran a session's activity holds no session:
// its owners are its own, so a renewal would query every partition key
// range of the container to find none. The manager's tick passes without
// one. With a stable WorkerNodeID, sessions an earlier run of the process
// claimed may still be busy, so it renews for an idle timeout after its
// start.
func TestARuntimeThatRanNoSessionSendsNoSessionRenewals(t *testing.T) {
	for _, tc := range []struct {
		name, nodeID string
		renewals     int
	}{
		{name: "own owners", renewals: 0},
		{name: "stable WorkerNodeID", nodeID: "node-a", renewals: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSessionRenewals(t)
			timers := newRenewalTimers()
			h := newHarness(t, p)
			h.run(func(o *Options) {
				o.sessionRenewalAfter = timers.after
				o.WorkerNodeID = tc.nodeID
			})
			timers.next(t).fire <- time.Now()
			timers.next(t) // the manager handled the tick and waits again
			p.mu.Lock()
			defer p.mu.Unlock()
			assert.Equal(t, tc.renewals, p.calls)
		})
	}
}
