package durable

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Shutdown with activities in flight: a stopping runtime keeps an
// activity's lock renewed while its handler runs, for at most a grace, and
// never releases the item of a handler that has not returned, so no other
// runtime runs it meanwhile.

// exclusiveActivity is an activity that notes whether two runs of it ever
// overlapped. Its first run signals started, then ignores cancellation
// until release is closed.
type exclusiveActivity struct {
	running, calls atomic.Int32
	overlapped     atomic.Bool
	started        chan struct{}
	release        chan struct{}
	releaseOnce    sync.Once
}

func newExclusiveActivity(t *testing.T) *exclusiveActivity {
	a := &exclusiveActivity{started: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(a.letGo) // before the runtimes' shutdowns, should the test fail
	return a
}

func (a *exclusiveActivity) letGo() { a.releaseOnce.Do(func() { close(a.release) }) }

func (a *exclusiveActivity) run(_ ActivityContext, in string) (string, error) {
	if a.running.Add(1) > 1 {
		a.overlapped.Store(true)
	}
	defer a.running.Add(-1)
	if a.calls.Add(1) == 1 {
		close(a.started)
		<-a.release // a handler that finishes its work even when cancelled
	}
	return "done:" + in, nil
}

// registerExclusive registers the activity and an orchestration of it.
func registerExclusive(h *harness, a *exclusiveActivity) {
	h.activity("Exclusive", a.run)
	h.orchestration("RunsExclusive", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Exclusive", in).Await()
	})
}

// startRuntime starts a runtime of the exclusive activity on p, with the
// harness's options (a worker lock of a second, scaled with the host's
// slowness) and tweak's.
func startRuntime(t *testing.T, p cdb.Provider, a *exclusiveActivity, tweak func(*Options)) (*Runtime, *harness) {
	h := newHarness(t, p)
	registerExclusive(h, a)
	opts := fastOptions(t)
	if tweak != nil {
		tweak(&opts)
	}
	rt, err := Start(h.ctx, p, h.registry, opts)
	require.NoError(t, err)
	return rt, h
}

// Runtime A is shut down with a short context while an activity runs, and
// runtime B shares its store. A keeps the activity's lock (renewing it)
// while the handler still runs, so B never runs the activity at the same
// time; once the handler returns, A acks its result and Shutdown returns.
// The test waits, after Shutdown's context ended, for two renewals of A's
// lock (a lock's lifetime: without them the item would have been B's) or
// for B to run the activity.
func TestShutdownKeepsTheLockOfARunningActivity(t *testing.T) {
	p := newWorkerFaultProvider(t, nil)
	act := newExclusiveActivity(t)
	// Locks of two seconds, renewed every second: a loaded machine's late
	// renewal still lands in time.
	twoSecondLocks := func(o *Options) { o.WorkerLockTimeout = 2 * time.Second }
	a, h := startRuntime(t, p, act, func(o *Options) {
		twoSecondLocks(o)
		o.ActivityCancellationGrace = time.Minute
	})
	h.start("shutdown-exclusive", "RunsExclusive", "x")
	<-act.started
	b, _ := startRuntime(t, p, act, twoSecondLocks)
	t.Cleanup(func() { require.NoError(t, b.Shutdown(context.Background())) })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- a.Shutdown(ctx) }()
	<-ctx.Done()
	renewed := p.renewed.Load()
	require.NoError(t, poll(context.Background(), time.Minute, func() (bool, error) {
		return p.renewed.Load() >= renewed+2 || act.overlapped.Load() || act.calls.Load() > 1, nil
	}))
	assert.False(t, act.overlapped.Load(), "the activity ran on B while A's handler was still running")
	assert.Equal(t, int32(1), act.calls.Load(), "B did not run the activity while A held it")
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned while the handler still ran: %v", err)
	default:
	}

	act.letGo()
	err := <-shutdown
	require.ErrorIs(t, err, context.DeadlineExceeded, "Shutdown reports that its context ended")
	assert.Equal(t, "done:x", h.completed("shutdown-exclusive"), "A acked the result its handler returned")
	assert.Equal(t, int32(1), act.calls.Load(), "the activity ran once")
	assert.False(t, act.overlapped.Load())
}

// The bound, and what it leaves: a handler that outlasts its grace is
// given up, but its item is not released while it may still run. Shutdown
// returns once the grace has ended, the handler still running; its lock is
// no longer renewed and lapses by the store's clock, and only then does
// another runtime run the activity. The store's clock stands still until
// the test moves it, so the lock cannot lapse behind the test's back: B's
// fetches, all begun after Shutdown returned, find nothing however slowly
// they come, and once the clock passes the lock B runs the activity.
func TestShutdownLetsTheLockOfAHandlerPastItsGraceLapse(t *testing.T) {
	clock := newManualClock()
	mem := memprovider.New(memprovider.Options{LongPolling: true, Now: clock.Now})
	t.Cleanup(func() { _ = mem.Close() })
	act := newExclusiveActivity(t)
	a, h := startRuntime(t, mem, act, func(o *Options) {
		lockedByTheTestsClock(o)
		o.ActivityCancellationGrace = 200 * time.Millisecond
	})
	h.start("shutdown-grace", "RunsExclusive", "y")
	<-act.started

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, a.Shutdown(ctx), context.DeadlineExceeded, "Shutdown returns after the grace, the handler still running")
	assert.Equal(t, int32(1), act.running.Load(), "the handler still runs")

	fetches := &workFetches{Provider: mem}
	b, _ := startRuntime(t, fetches, act, lockedByTheTestsClock)
	t.Cleanup(func() { require.NoError(t, b.Shutdown(context.Background())) })
	require.NoError(t, poll(context.Background(), time.Minute, func() (bool, error) {
		return fetches.done.Load() >= 2 || fetches.items.Load() > 0, nil
	}))
	assert.Zero(t, fetches.items.Load(), "B took the item while A's handler ran and its lock stood")
	assert.Equal(t, int32(1), act.calls.Load(), "the activity ran once while its lock stood")

	clock.Advance(2 * time.Second) // past the lock (the harness's worker lock is 1 s)
	assert.Equal(t, "done:y", h.completed("shutdown-grace"), "B ran the activity once its lock lapsed")
	assert.Equal(t, int32(2), act.calls.Load())
}

// workFetches wraps a provider and counts its worker fetches: those that
// returned, and the items they returned.
type workFetches struct {
	cdb.Provider
	done, items atomic.Int32
}

func (p *workFetches) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	item, token, attempt, err := p.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
	if item != nil {
		p.items.Add(1)
	}
	p.done.Add(1)
	return item, token, attempt, err
}

// What else Shutdown must keep: a session stays this runtime's while an
// activity of it still runs here. Runtime A runs the first of two
// activities of one session (its one worker slot busy) and is shut down;
// runtime B shares the store. A keeps renewing the session while its
// handler runs, so B does not take the session's second activity
// meanwhile; once the handler returns, B runs it. The test waits, after
// the shutdown began, for two renewals that kept the session (more than
// its two-second lock: without them B could claim it) or for B to run the
// second activity.
func TestShutdownKeepsTheSessionOfARunningActivity(t *testing.T) {
	p := newWorkerFaultProvider(t, nil)
	var running, calls atomic.Int32
	var overlapped atomic.Bool
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	register := func(h *harness) {
		h.activity("InSession", func(_ ActivityContext, in string) (string, error) {
			if running.Add(1) > 1 {
				overlapped.Store(true)
			}
			defer running.Add(-1)
			if calls.Add(1) == 1 {
				close(started)
				<-release
			}
			return in, nil
		})
		h.orchestration("TwoInSession", func(ctx *OrchestrationContext, _ string) (string, error) {
			first := ctx.ScheduleActivity("InSession", "a", WithSession("kept"))
			second := ctx.ScheduleActivity("InSession", "b", WithSession("kept"))
			a, err := first.Await()
			if err != nil {
				return "", err
			}
			b, err := second.Await()
			return a + b, err
		})
	}
	sessionOptions := func(o *Options) {
		o.WorkerConcurrency = 1
		o.SessionLockTimeout = 2 * time.Second // renewed every second
	}
	ha := newHarness(t, p)
	register(ha)
	optsA := fastOptions(t)
	sessionOptions(&optsA)
	a, err := Start(ha.ctx, p, ha.registry, optsA)
	require.NoError(t, err)
	ha.start("shutdown-session", "TwoInSession", "")
	<-started
	hb := newHarness(t, p)
	register(hb)
	hb.run(sessionOptions)

	shutdown := make(chan error, 1)
	go func() { shutdown <- a.Shutdown(context.Background()) }()
	kept := p.sessionsKept.Load()
	require.NoError(t, poll(context.Background(), time.Minute, func() (bool, error) {
		return p.sessionsKept.Load() >= kept+2 || calls.Load() > 1, nil
	}))
	assert.Equal(t, int32(1), calls.Load(), "B did not take the session's second activity while A ran the first")
	assert.False(t, overlapped.Load())

	letGo()
	require.NoError(t, <-shutdown)
	assert.Equal(t, "ab", hb.completed("shutdown-session"))
	assert.False(t, overlapped.Load())
}
