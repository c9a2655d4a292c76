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

// A lock handed out with less than its timeout left (made ready ahead of
// its fetch) is first renewed by what it has left, when the provider says
// so (cdb.LockRemainingReporter), and renewed an interval apart from then
// on. The tests fire the runtime's renewal timers themselves and read the
// delays it asks for (renewalTimers), and the provider's clock moves only
// when they move it, so nothing they check depends on this machine's speed.

// earlyLocks wraps the reference provider and hands out every lock with
// only left of it left, as a provider may hand out a lock taken in an
// earlier commit. It hides the reference provider's optional interfaces,
// cdb.LockRemainingReporter among them (reportingEarlyLocks adds it).
type earlyLocks struct {
	cdb.Provider
	mem  *memprovider.Provider
	left time.Duration

	tokens   chan string // each lock handed out
	renewals chan error  // each renewal's result
	acks     chan error  // each ack's result
}

func newEarlyLocks(t *testing.T, clock *manualClock, left time.Duration) *earlyLocks {
	mem := memprovider.New(memprovider.Options{LongPolling: true, Now: clock.Now})
	t.Cleanup(func() { _ = mem.Close() })
	return &earlyLocks{Provider: mem, mem: mem, left: left,
		tokens: make(chan string, 16), renewals: make(chan error, 16), acks: make(chan error, 16)}
}

func (p *earlyLocks) FetchWorkItem(ctx context.Context, _, pollTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	item, token, attempt, err := p.Provider.FetchWorkItem(ctx, p.left, pollTimeout, session, tags)
	if item != nil {
		p.tokens <- token
	}
	return item, token, attempt, err
}

func (p *earlyLocks) FetchOrchestrationItem(ctx context.Context, _, pollTimeout time.Duration,
	filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	item, token, attempt, err := p.Provider.FetchOrchestrationItem(ctx, p.left, pollTimeout, filter)
	if item != nil {
		p.tokens <- token
	}
	return item, token, attempt, err
}

func (p *earlyLocks) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	err := p.Provider.RenewWorkItemLock(ctx, token, extend)
	p.renewals <- err
	return err
}

func (p *earlyLocks) RenewOrchestrationItemLock(ctx context.Context, token string, extend time.Duration) error {
	err := p.Provider.RenewOrchestrationItemLock(ctx, token, extend)
	p.renewals <- err
	return err
}

func (p *earlyLocks) AckWorkItem(ctx context.Context, token string, completion cdb.WorkItem) error {
	err := p.Provider.AckWorkItem(ctx, token, completion)
	p.acks <- err
	return err
}

// reportingEarlyLocks is earlyLocks that says what its locks have left.
type reportingEarlyLocks struct{ *earlyLocks }

var _ cdb.LockRemainingReporter = reportingEarlyLocks{}

func (p reportingEarlyLocks) WorkItemLockRemaining(token string) (time.Duration, bool) {
	return p.mem.WorkItemLockRemaining(token)
}

func (p reportingEarlyLocks) OrchestrationLockRemaining(token string) (time.Duration, bool) {
	return p.mem.OrchestrationLockRemaining(token)
}

// received waits for the next value of ch (30 s at most: only a bound for
// a test that would otherwise hang).
func received[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30s for %s", what)
		var zero T
		return zero
	}
}

// A worker lock of 30 s handed out with 4 s left (buffer 1 s) is first
// renewed 2 s after its fetch (the rule for a 4 s lock), not 29 s after,
// when the lock would long have expired; the renewal extends it by the
// whole timeout, and the next comes 29 s later, as usual. The provider's
// clock moves to the first renewal's due time before the test fires it,
// so the renewal must find the lock still held.
func TestAWorkerLockIsFirstRenewedByWhatItHasLeft(t *testing.T) {
	const timeout, left, buffer = 30 * time.Second, 4 * time.Second, time.Second
	clock := newManualClock()
	p := newEarlyLocks(t, clock, left)
	timers := newRenewalTimers()
	running, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	h := newHarness(t, reportingEarlyLocks{p})
	h.activity("Held", func(_ ActivityContext, in string) (string, error) {
		close(running)
		<-release
		return in, nil
	})
	h.run(func(o *Options) {
		o.WorkerOnly, o.WorkerConcurrency = true, 1 // the worker lock's timers are the only ones
		o.WorkerLockTimeout, o.WorkerLockRenewalBuffer = timeout, buffer
		o.lockRenewalAfter = timers.after
	})
	t.Cleanup(letGo) // before the runtime's shutdown, should the test fail
	require.NoError(t, p.mem.EnqueueForWorker(h.ctx, cdb.ActivityExecuteMessage{Instance: "early", ExecutionID: 1, ID: 1, Name: "Held", Input: "x"}))
	token := received(t, p.tokens, "the activity's fetch")
	received(t, running, "the activity to run")

	firstRenewalFromWhatIsLeft(t, timers, clock, p, func() (time.Duration, bool) { return p.mem.WorkItemLockRemaining(token) }, timeout, left, buffer)

	letGo()
	assert.NoError(t, received(t, p.acks, "the activity's ack"), "the activity was acked under its lock")
}

// The same for an instance lock: a turn's lock handed out with 4 s of 30 s
// left is first renewed 2 s after its fetch, then every 29 s.
func TestAnOrchestrationLockIsFirstRenewedByWhatItHasLeft(t *testing.T) {
	const timeout, left, buffer = 30 * time.Second, 4 * time.Second, time.Second
	clock := newManualClock()
	p := newEarlyLocks(t, clock, left)
	timers := newRenewalTimers()
	running, release := make(chan struct{}), make(chan struct{})
	var runningOnce, releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	h := newHarness(t, reportingEarlyLocks{p})
	h.orchestration("HeldTurn", func(_ *OrchestrationContext, in string) (string, error) {
		runningOnce.Do(func() { close(running) })
		<-release // a turn that takes a while
		return in, nil
	})
	h.run(func(o *Options) {
		o.WorkerTagFilter = cdb.NoneFilter() // the instance lock's timers are the only ones
		o.OrchestrationConcurrency = 1
		o.OrchestratorLockTimeout, o.OrchestratorLockRenewalBuffer = timeout, buffer
		o.lockRenewalAfter = timers.after
	})
	t.Cleanup(letGo) // before the runtime's shutdown, should the test fail
	h.start("early-turn", "HeldTurn", "x")
	token := received(t, p.tokens, "the turn's fetch")
	received(t, running, "the turn to run")

	firstRenewalFromWhatIsLeft(t, timers, clock, p, func() (time.Duration, bool) { return p.mem.OrchestrationLockRemaining(token) }, timeout, left, buffer)

	letGo()
	assert.Equal(t, "x", h.completed("early-turn"))
}

// A provider that does not say what its locks have left keeps today's
// schedule: the first renewal comes an interval after the fetch.
func TestALockOfAProviderThatDoesNotReportIsFirstRenewedAnIntervalOn(t *testing.T) {
	const timeout, buffer = 30 * time.Second, time.Second
	clock := newManualClock()
	p := newEarlyLocks(t, clock, timeout)
	timers := newRenewalTimers()
	running, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	h := newHarness(t, p)
	h.activity("Held", func(_ ActivityContext, in string) (string, error) {
		close(running)
		<-release
		return in, nil
	})
	h.run(func(o *Options) {
		o.WorkerOnly, o.WorkerConcurrency = true, 1
		o.WorkerLockTimeout, o.WorkerLockRenewalBuffer = timeout, buffer
		o.lockRenewalAfter = timers.after
	})
	t.Cleanup(letGo) // before the runtime's shutdown, should the test fail
	require.NoError(t, p.mem.EnqueueForWorker(h.ctx, cdb.ActivityExecuteMessage{Instance: "plain", ExecutionID: 1, ID: 1, Name: "Held", Input: "x"}))
	received(t, running, "the activity to run")

	assert.Equal(t, renewalInterval(timeout, buffer), timers.next(t).delay, "an interval after the fetch")

	letGo()
	assert.NoError(t, received(t, p.acks, "the activity's ack"))
}

// firstRenewalFromWhatIsLeft checks a lock handed out with left of timeout:
// its first renewal is due by the renewal rule applied to left, before the
// lock expires; fired, it finds the lock held and extends it by the whole
// timeout (remaining says what the lock has left), and later renewals come
// an interval apart.
func firstRenewalFromWhatIsLeft(t *testing.T, timers *renewalTimers, clock *manualClock, p *earlyLocks, remaining func() (time.Duration, bool), timeout, left, buffer time.Duration) {
	t.Helper()
	first := timers.next(t)
	assert.Equal(t, renewalInterval(left, buffer), first.delay, "the renewal rule applied to what is left")
	require.Less(t, first.delay, left, "the first renewal is due before the lock handed out expires")
	clock.Advance(first.delay)
	first.fire <- time.Now()
	require.NoError(t, received(t, p.renewals, "the first renewal"), "the first renewal found the lock held")
	got, ok := remaining()
	require.True(t, ok)
	assert.Equal(t, timeout, got, "the renewal extended the lock by the whole timeout")
	assert.Equal(t, renewalInterval(timeout, buffer), timers.next(t).delay, "later renewals come an interval apart")
}
