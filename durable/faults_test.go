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

// Provider faults the dispatchers must survive, on the in-memory provider
// behind a wrapper that injects them.

// faultyProvider wraps a provider; its hooks, when set, replace calls.
type faultyProvider struct {
	cdb.Provider
	failAcks     atomic.Int32 // acks still to fail
	ackErr       error
	loseLock     bool // a failed ack releases the lock first, as an expiry would
	acks         atomic.Int32
	failFetches  atomic.Int32 // orchestration fetches still to fail
	ignoreFilter bool         // fetch as if no capability filter were given
	abandons     atomic.Int32 // successful orchestration abandons
	maxAttempt   atomic.Uint32
	turnsFetched chan string // instance of every orchestration item fetched, when set
	// refuseTurn, when set, refuses the acks it returns an error for,
	// given the turn's execution and events, before the count-based faults.
	refuseTurn func(executionID uint64, delta []cdb.Event) error
}

func newFaultyProvider(t *testing.T) *faultyProvider {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	return &faultyProvider{Provider: mem}
}

func (p *faultyProvider) AckOrchestrationItem(ctx context.Context, token string, executionID uint64, delta []cdb.Event,
	workerItems, orchItems []cdb.WorkItem, md cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	p.acks.Add(1)
	if p.refuseTurn != nil {
		if err := p.refuseTurn(executionID, delta); err != nil {
			return err
		}
	}
	if p.failAcks.Add(-1) >= 0 {
		if p.loseLock {
			_ = p.Provider.AbandonOrchestrationItem(ctx, token, 0, false)
		}
		return p.ackErr
	}
	return p.Provider.AckOrchestrationItem(ctx, token, executionID, delta, workerItems, orchItems, md, cancelled)
}

func (p *faultyProvider) FetchOrchestrationItem(ctx context.Context, lock, poll time.Duration,
	filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	if p.failFetches.Add(-1) >= 0 {
		return nil, "", 0, cdb.Retryable("fetch_orchestration_item", "service unavailable")
	}
	if p.ignoreFilter {
		filter = nil
	}
	item, token, attempt, err := p.Provider.FetchOrchestrationItem(ctx, lock, poll, filter)
	if item != nil {
		p.recordAttempt(attempt)
		if p.turnsFetched != nil {
			select {
			case p.turnsFetched <- item.Instance:
			default: // the test reads the first few only
			}
		}
	}
	return item, token, attempt, err
}

// recordAttempt keeps the highest attempt count a fetch returned.
func (p *faultyProvider) recordAttempt(attempt uint32) {
	for {
		seen := p.maxAttempt.Load()
		if attempt <= seen || p.maxAttempt.CompareAndSwap(seen, attempt) {
			return
		}
	}
}

func (p *faultyProvider) AbandonOrchestrationItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	err := p.Provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
	if err == nil {
		p.abandons.Add(1)
	}
	return err
}

func echoOrchestration(h *harness) {
	h.activity("Echo", func(_ ActivityContext, in string) (string, error) { return in, nil })
	h.orchestration("Echoes", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Echo", in).Await()
	})
}

// TestFetchFailuresBackOffAndRecover: retryable fetch failures are
// retried with backoff until the provider recovers.
func TestFetchFailuresBackOffAndRecover(t *testing.T) {
	p := newFaultyProvider(t)
	p.failFetches.Store(2) // backs off 200ms, then 400ms
	h := newHarness(t, p)
	echoOrchestration(h)
	h.run(func(o *Options) { o.OrchestrationConcurrency = 1 })
	h.start("fetch-recovers", "Echoes", "hi")
	assert.Equal(t, "hi", h.completed("fetch-recovers"))
	assert.Negative(t, p.failFetches.Load(), "every injected failure was hit")
}

// TestRetryableAckFailuresAreRetried: a turn whose ack fails with retryable
// errors is committed by a retry.
func TestRetryableAckFailuresAreRetried(t *testing.T) {
	p := newFaultyProvider(t)
	p.ackErr = cdb.Retryable("ack_orchestration_item", "throttled")
	p.failAcks.Store(3)
	h := newHarness(t, p)
	echoOrchestration(h)
	h.run()
	h.start("retried", "Echoes", "hi")
	assert.Equal(t, "hi", h.completed("retried"))
	assert.Negative(t, p.failAcks.Load(), "every injected failure was hit")
}

// TestRetryableAckFailuresExhaustedAreRetriedLater: after its retries an
// ack is abandoned and the batch comes back for another turn.
func TestRetryableAckFailuresExhaustedAreRetriedLater(t *testing.T) {
	p := newFaultyProvider(t)
	p.ackErr = cdb.Retryable("ack_orchestration_item", "throttled")
	p.failAcks.Store(maxAckRetries + 2)
	h := newHarness(t, p)
	echoOrchestration(h)
	h.run()
	h.start("abandoned-then-done", "Echoes", "hi")
	assert.Equal(t, "hi", h.completed("abandoned-then-done"))
	assert.Negative(t, p.failAcks.Load(), "every injected failure was hit: one turn's acks ran out")
	assert.Positive(t, p.abandons.Load(), "the turn whose acks ran out was abandoned")
	assert.GreaterOrEqual(t, p.maxAttempt.Load(), uint32(2), "its batch came back for another turn")
}

// An ack that finds the instance lock gone (expired, or taken by another
// dispatcher) is not a refusal of the turn: the orchestration is not
// failed, no failure is acked with the lost lock, and the batch's next
// holder runs the turn again.
func TestAnAckWithALostLockLeavesTheTurnToTheNextHolder(t *testing.T) {
	p := newFaultyProvider(t)
	p.ackErr = &cdb.ProviderError{Op: "ack_orchestration_item", Message: "instance lock expired", Err: cdb.ErrInvalidLockToken}
	p.loseLock = true
	p.failAcks.Store(1)
	h := newHarness(t, p)
	echoOrchestration(h)
	h.run()
	h.start("lost-lock", "Echoes", "hi")
	assert.Equal(t, "hi", h.completed("lost-lock"))
	assert.Negative(t, p.failAcks.Load(), "the injected failure was hit")
	assert.Equal(t, int32(3), p.acks.Load(), "the lost ack, the first turn again, the completion: no failure ack")
}

// TestPermanentAckFailureFailsOrchestration: a turn the provider refuses
// for good fails its orchestration with an infrastructure error.
func TestPermanentAckFailureFailsOrchestration(t *testing.T) {
	p := newFaultyProvider(t)
	p.ackErr = cdb.Permanent("ack_orchestration_item", "document too large")
	h := newHarness(t, p)
	release := make(chan struct{})
	h.activity("Gate", func(_ ActivityContext, in string) (string, error) {
		<-release
		return in, nil
	})
	h.orchestration("Gated", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Gate", in).Await()
	})
	h.run()
	h.start("refused", "Gated", "hi")
	h.waitForHistory("refused", hasEvent[cdb.ActivityScheduled]) // the first turn commits
	p.failAcks.Store(1)                                          // the completing turn is refused
	close(release)
	st := h.wait("refused")
	require.Equal(t, StateFailed, st.State)
	assert.Equal(t, cdb.InfrastructureError{Operation: "ack_orchestration_item", Message: "document too large"}, st.Error)
}

// TestIncompatiblePinnedVersionIsNotReplayed: a runtime that supports only
// older duroxide versions does not replay an execution pinned to a newer
// one even when the provider hands it over; the work stays for a runtime
// that can.
func TestIncompatiblePinnedVersionIsNotReplayed(t *testing.T) {
	p := newFaultyProvider(t)
	var turns atomic.Int32
	register := func(h *harness) {
		h.orchestration("Waits", func(ctx *OrchestrationContext, _ string) (string, error) {
			turns.Add(1)
			return ctx.WaitForEvent("go").Await()
		})
	}
	first := newHarness(t, p)
	register(first)
	rt, err := Start(first.ctx, p, first.registry, fastOptions(t))
	require.NoError(t, err)
	first.start("pinned", "Waits", "")
	first.waitForHistory("pinned", hasEvent[cdb.ExternalSubscribed])
	require.NoError(t, rt.Shutdown(context.Background()))

	p.ignoreFilter = true
	p.turnsFetched = make(chan string, 16)
	abandonsBefore := p.abandons.Load()
	old := newHarness(t, p)
	register(old)
	opts := fastOptions(t)
	opts.SupportedReplayVersions = &cdb.SemverRange{Max: cdb.NewSemanticVersion(0, 1, 0)}
	rt, err = Start(old.ctx, p, old.registry, opts)
	require.NoError(t, err)
	require.NoError(t, old.client.RaiseEvent(old.ctx, "pinned", "go", "ok"))
	// The old runtime is handed the instance (the filter is bypassed) and
	// gives it back: wait for that, not for a fixed time, before checking
	// that no turn ran.
	require.Equal(t, "pinned", <-p.turnsFetched, "the old runtime is handed the pinned instance")
	require.NoError(t, poll(old.ctx, time.Minute, func() (bool, error) {
		return p.abandons.Load() > abandonsBefore, nil
	}), "the old runtime abandons what it cannot replay")
	require.NoError(t, rt.Shutdown(context.Background()))
	p.turnsFetched = nil
	st, err := old.client.GetStatus(old.ctx, "pinned")
	require.NoError(t, err)
	assert.Equal(t, StateRunning, st.State)
	assert.Equal(t, int32(1), turns.Load(), "the old runtime ran no turn")

	current := newHarness(t, p)
	register(current)
	current.run()
	assert.Equal(t, "ok", current.completed("pinned"))
}

// TestSessionManagerMaintainsSessions: the session manager renews the lock
// of a session in use, so it outlives its first lock, and deletes a session
// nobody owns any more. The provider's clock stands still except when the
// test moves it, so no lock lapses behind the test's back.
func TestSessionManagerMaintainsSessions(t *testing.T) {
	clock := newManualClock()
	mem := memprovider.New(memprovider.Options{LongPolling: true, Now: clock.Now})
	t.Cleanup(func() { _ = mem.Close() })
	ctx := context.Background()

	// An orphan: a session whose owner took its one item and vanished.
	orphan := "orphan-session"
	require.NoError(t, mem.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "gone", ExecutionID: 1, ID: 1,
		Name: "Gone", Input: "", SessionID: &orphan}))
	_, token, _, err := mem.FetchWorkItem(ctx, time.Minute, 0,
		&cdb.SessionFetchConfig{OwnerID: "vanished-worker", LockTimeout: time.Second}, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NoError(t, mem.AckWorkItem(ctx, token, nil))
	clock.Advance(2 * time.Second) // its lock has ended
	_, ok := mem.SessionLockedUntil(orphan)
	require.True(t, ok, "the orphan exists until cleaned up")

	h := newHarness(t, mem)
	started := make(chan struct{})
	release := make(chan struct{})
	h.activity("Hold", func(_ ActivityContext, in string) (string, error) {
		close(started)
		<-release
		return in, nil
	})
	h.orchestration("InSession", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Hold", in, WithSession("busy-session")).Await()
	})
	h.run(func(o *Options) {
		o.SessionLockTimeout = time.Second // renewed every 500 ms
		o.SessionCleanupInterval = 50 * time.Millisecond
	})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the runtime's shutdown, should the test fail
	h.start("sessions", "InSession", "held")
	<-started
	firstLock, ok := mem.SessionLockedUntil("busy-session")
	require.True(t, ok)

	// Within the first lock, move the clock so a renewal shows: it extends
	// the lock past where the first one ended.
	clock.Advance(500 * time.Millisecond)
	require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) {
		until, ok := mem.SessionLockedUntil("busy-session")
		return ok && until.After(firstLock), nil
	}), "the session manager renews the session in use")
	require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) {
		_, ok := mem.SessionLockedUntil(orphan)
		return !ok, nil
	}), "the session manager deletes the orphaned session")

	letGo()
	assert.Equal(t, "held", h.completed("sessions"))
}

// manualClock is a provider clock the test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock { return &manualClock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
