package durable

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Worker-side faults: what a worker does when a lock renewal or an ack
// fails.

// workerFaultProvider wraps a provider and fails worker calls on demand.
type workerFaultProvider struct {
	cdb.Provider
	renewErr      error
	failRenewals  atomic.Int32 // renewals still to fail with renewErr
	renewals      atomic.Int32
	renewed       atomic.Int32 // renewals the provider applied
	refuseResults atomic.Bool  // refuse every ActivityCompleted for good
	acks          atomic.Int32
	beforeAck     func()      // runs before the first ack reaches the store
	lockLostAtAck atomic.Bool // the first ack finds the lock gone
	ackHookOnce   sync.Once
	sessionsKept  atomic.Int32 // session renewals that extended a session
}

func newWorkerFaultProvider(t *testing.T, inner cdb.Provider) *workerFaultProvider {
	if inner == nil {
		mem := memprovider.New(memprovider.Options{LongPolling: true})
		t.Cleanup(func() { _ = mem.Close() })
		inner = mem
	}
	return &workerFaultProvider{Provider: inner}
}

func (p *workerFaultProvider) RenewWorkItemLock(ctx context.Context, token string, extend time.Duration) error {
	p.renewals.Add(1)
	if p.failRenewals.Add(-1) >= 0 {
		return p.renewErr
	}
	err := p.Provider.RenewWorkItemLock(ctx, token, extend)
	if err == nil {
		p.renewed.Add(1)
	}
	return err
}

func (p *workerFaultProvider) RenewSessionLock(ctx context.Context, owners []string, extend, idle time.Duration) (int, error) {
	n, err := p.Provider.RenewSessionLock(ctx, owners, extend, idle)
	if n > 0 {
		p.sessionsKept.Add(1)
	}
	return n, err
}

func (p *workerFaultProvider) AckWorkItem(ctx context.Context, token string, completion cdb.WorkItem) error {
	p.acks.Add(1)
	if _, ok := completion.(cdb.ActivityCompletedMessage); ok && p.refuseResults.Load() {
		return cdb.Permanent("ack_work_item", "the completion is 2.5 MB; a document holds at most 2 MB")
	}
	if p.beforeAck != nil {
		p.ackHookOnce.Do(p.beforeAck)
	}
	if p.lockLostAtAck.CompareAndSwap(true, false) {
		_ = p.Provider.AbandonWorkItem(ctx, token, 0, false) // the lock is gone; the item goes back
		return &cdb.ProviderError{Op: "ack_work_item", Message: "the work item's lock expired", Err: cdb.ErrInvalidLockToken}
	}
	return p.Provider.AckWorkItem(ctx, token, completion)
}

// slowEcho registers the orchestration SlowEcho, which returns what its
// activity Slow (the handler given) returns for its input.
func slowEcho(h *harness, slow ActivityFunc) {
	h.activity("Slow", slow)
	h.orchestration("SlowEcho", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Slow", in).Await()
	})
}

// countedEcho is an activity that returns its input and counts its runs.
func countedEcho(runs *atomic.Int32) ActivityFunc {
	return func(_ ActivityContext, in string) (string, error) {
		runs.Add(1)
		return in, nil
	}
}

// A retryable renewal error (a 408 or 503 the provider could not resolve)
// is retried, not read as a lost lock: the retry is what keeps the lock,
// and the activity finishes with its result.
func TestRetryableLockRenewalErrorDoesNotDropTheActivity(t *testing.T) {
	output, runs, acks := runThroughAFailedRenewal(t, cdb.Retryable("renew_work_item_lock", "request timeout"))
	assert.Equal(t, "kept", output)
	assert.Equal(t, int32(1), runs, "the activity ran once")
	assert.Equal(t, int32(1), acks, "one ack, never refused")
}

// runThroughAFailedRenewal runs an activity whose first lock renewal fails
// with renewErr, and returns the orchestration's output, how often the
// activity ran and how often it was acked. The provider's clock moves only
// inside the activity, past the end of the lock taken at the fetch, each
// step waiting for renewals the provider applied after the failure: an
// activity dropped on the failure is cancelled and runs again, and a
// failure that ends the renewals lets the lock expire, so the ack is
// refused and the activity runs again.
func runThroughAFailedRenewal(t *testing.T, renewErr error) (output string, runs, acks int32) {
	clock := newManualClock()
	p := newWorkerFaultProvider(t, newManualClockProvider(t, clock))
	p.renewErr = renewErr
	p.failRenewals.Store(1)
	h := newHarness(t, p)
	var ran atomic.Int32
	slowEcho(h, func(ctx ActivityContext, in string) (string, error) {
		if ran.Add(1) > 1 {
			return in, nil
		}
		if !awaitCondition(ctx, func() bool { return p.renewals.Load() > 0 }) {
			t.Error("the first renewal was never tried")
		}
		for range 2 { // the harness's worker lock is 1 s: 1.6 s is past the fetch's lock
			if !advanceUntilRenewed(ctx, clock, p, 800*time.Millisecond) {
				t.Error("no renewal applied after the failed one")
			}
		}
		return in, nil
	})
	h.run(lockedByTheTestsClock)
	h.start("renewal-failed", "SlowEcho", "kept")
	return h.completed("renewal-failed"), ran.Load(), p.acks.Load()
}

// An ack that outlasts the worker lock (a multi-MB result on a throttled
// store, say) still commits: the lock is renewed until the ack is done,
// not only while the handler runs, so the activity neither runs twice nor
// ends as poison. The provider's clock moves only here: the ack takes
// three 800 ms steps, more than two lock lifetimes, each of which waits for
// renewals the provider applied (at most 5 s: without them the lock
// expires), so a late renewal on a loaded machine cannot fail the test.
func TestAnAckSlowerThanTheLockStillCommits(t *testing.T) {
	clock := newManualClock()
	p := newWorkerFaultProvider(t, newManualClockProvider(t, clock))
	p.beforeAck = func() {
		for range 3 { // the harness's worker lock is 1 s
			advanceUntilRenewed(context.Background(), clock, p, 800*time.Millisecond)
		}
	}
	h := newHarness(t, p)
	var runs atomic.Int32
	slowEcho(h, countedEcho(&runs))
	h.run(lockedByTheTestsClock)
	h.start("slow-ack", "SlowEcho", "kept")
	assert.Equal(t, "kept", h.completed("slow-ack"))
	assert.Equal(t, int32(1), runs.Load(), "the activity ran once")
	assert.Equal(t, int32(1), p.acks.Load(), "one ack, never refused")
}

// newManualClockProvider is a Cosmos DB provider on a fake account whose
// locks expire by clock.
func newManualClockProvider(t *testing.T, clock *manualClock) cdb.Provider {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cp, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), PollInterval: 20 * time.Millisecond, Now: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Close() })
	return cp
}

// advanceUntilRenewed moves the provider's clock by step, then waits for
// two renewals the provider applied: one may have been under way before
// the clock moved, so only the second surely extended the lock from the
// new time. It says whether they came; when they do not the lock expires,
// which the caller's test sees.
func advanceUntilRenewed(ctx context.Context, clock *manualClock, p *workerFaultProvider, step time.Duration) bool {
	renewed := p.renewed.Load()
	clock.Advance(step)
	return awaitCondition(ctx, func() bool { return p.renewed.Load() >= renewed+2 })
}

// awaitCondition polls cond until it holds (true), or ctx ends or 5 s
// pass (false).
func awaitCondition(ctx context.Context, cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// After a renewal fails for good the activity is cancelled, but the worker
// never deletes an item it may still hold: it releases it, so an item whose
// lock was not really lost runs again instead of vanishing.
func TestCancelledActivityIsReleasedNotDeleted(t *testing.T) {
	p := newWorkerFaultProvider(t, nil)
	p.renewErr = cdb.Permanent("renew_work_item_lock", "forbidden")
	p.failRenewals.Store(1)
	h := newHarness(t, p)
	var runs atomic.Int32
	slowEcho(h, func(ctx ActivityContext, in string) (string, error) {
		if runs.Add(1) == 1 {
			<-ctx.Done() // the failed renewal cancels it; its result comes within the grace
		}
		return in, nil
	})
	h.run(func(o *Options) { o.ActivityCancellationGrace = time.Minute })
	h.start("released", "SlowEcho", "again")
	assert.Equal(t, "again", h.completed("released"), "the item ran again")
	assert.Equal(t, int32(2), runs.Load())
}

// The same rule when the lock was reported lost: a handler that ignores its
// cancellation past the grace keeps its item. The renewal's refusal may be
// wrong (here the store still holds the lock), so releasing the item would
// let it run again beside the handler; it is left to lapse instead. The
// store's clock stands still until the test moves it. The runtime has one
// worker slot, busy with the handler until the grace ends: its next fetch
// comes after the grace, and finds nothing while the lock stands, however
// late it comes. Once the clock passes the lock, the activity runs again.
func TestALostLockIsNotReleasedWhileItsHandlerRuns(t *testing.T) {
	clock := newManualClock()
	mem := memprovider.New(memprovider.Options{LongPolling: true, Now: clock.Now})
	t.Cleanup(func() { _ = mem.Close() })
	faults := newWorkerFaultProvider(t, mem)
	faults.renewErr = cdb.Permanent("renew_work_item_lock", "lock token not found")
	faults.failRenewals.Store(1)
	p := &workFetches{Provider: faults}
	act := newExclusiveActivity(t)
	h := newHarness(t, p)
	registerExclusive(h, act)
	h.run(lockedByTheTestsClock, func(o *Options) {
		o.WorkerConcurrency = 1
		o.ActivityCancellationGrace = 200 * time.Millisecond
	})
	t.Cleanup(act.letGo) // before the runtime's shutdown, should the test fail
	h.start("lost-lock", "RunsExclusive", "z")
	<-act.started
	fetched := p.done.Load() // the slot's fetches so far; it now runs the handler

	require.NoError(t, poll(context.Background(), time.Minute, func() (bool, error) {
		return p.done.Load() > fetched, nil
	}), "the slot fetches again once the grace has ended")
	assert.Equal(t, int32(1), p.items.Load(), "the item was fetched again while its handler ran and its lock stood")
	assert.Equal(t, int32(1), act.calls.Load())

	clock.Advance(2 * time.Second) // past the lock (the harness's worker lock is 1 s)
	assert.Equal(t, "done:z", h.completed("lost-lock"), "the activity ran again once its lock lapsed")
	assert.Equal(t, int32(2), act.calls.Load())
}

// A result the provider refuses for good (too large to store) fails the
// activity at once, with the refusal as its error, instead of running it
// again until it is poison.
func TestPermanentlyRefusedResultFailsTheActivityOnce(t *testing.T) {
	p := newWorkerFaultProvider(t, nil)
	p.refuseResults.Store(true)
	h := newHarness(t, p)
	var runs atomic.Int32
	slowEcho(h, countedEcho(&runs))
	h.run()
	h.start("refused", "SlowEcho", "big")
	st := h.wait("refused")
	require.Equal(t, StateFailed, st.State)
	assert.Contains(t, st.Error.DisplayMessage(), "a document holds at most 2 MB", "the cause is the activity's error")
	assert.Equal(t, int32(1), runs.Load(), "the activity ran once")
}

// The same on the Cosmos DB provider: an activity output over the document
// limit fails the activity once, with the cause.
func TestOversizedActivityOutputFailsTheActivityOnce(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	var runs atomic.Int32
	h.activity("Huge", func(ActivityContext, string) (string, error) {
		runs.Add(1)
		return strings.Repeat("x", 2<<20+1), nil
	})
	h.orchestration("Huge", func(ctx *OrchestrationContext, in string) (string, error) {
		_, err := ctx.ScheduleActivity("Huge", in).Await()
		if err != nil {
			return "", err
		}
		return "stored", nil
	})
	// A 2 MB result takes a while to encode under -race on a loaded
	// machine; the lock is not what this test is about.
	h.run(func(o *Options) { o.WorkerLockTimeout = 10 * time.Second })
	h.start("huge", "Huge", "")
	st := h.wait("huge")
	require.Equal(t, StateFailed, st.State)
	assert.Contains(t, st.Error.DisplayMessage(), "AckWorkItem", "the refusal is the activity's error")
	assert.Equal(t, int32(1), runs.Load(), "the activity ran once")
}
