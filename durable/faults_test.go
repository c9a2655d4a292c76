package durable

import (
	"context"
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
	failAcks      atomic.Int32 // acks still to fail
	ackErr        error
	failFetches   atomic.Int32 // orchestration fetches still to fail
	ignoreFilter  bool         // fetch as if no capability filter were given
	sessionRenews atomic.Int32
	cleanups      atomic.Int32
}

func newFaultyProvider(t *testing.T) *faultyProvider {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	return &faultyProvider{Provider: mem}
}

func (p *faultyProvider) AckOrchestrationItem(ctx context.Context, token string, executionID uint64, delta []cdb.Event,
	workerItems, orchItems []cdb.WorkItem, md cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	if p.failAcks.Add(-1) >= 0 {
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
	return p.Provider.FetchOrchestrationItem(ctx, lock, poll, filter)
}

func (p *faultyProvider) RenewSessionLock(ctx context.Context, owners []string, extend, idle time.Duration) (int, error) {
	p.sessionRenews.Add(1)
	return p.Provider.RenewSessionLock(ctx, owners, extend, idle)
}

func (p *faultyProvider) CleanupOrphanedSessions(ctx context.Context, idle time.Duration) (int, error) {
	p.cleanups.Add(1)
	return p.Provider.CleanupOrphanedSessions(ctx, idle)
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
	old := newHarness(t, p)
	register(old)
	opts := fastOptions(t)
	opts.SupportedReplayVersions = &cdb.SemverRange{Max: cdb.NewSemanticVersion(0, 1, 0)}
	rt, err = Start(old.ctx, p, old.registry, opts)
	require.NoError(t, err)
	require.NoError(t, old.client.RaiseEvent(old.ctx, "pinned", "go", "ok"))
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, rt.Shutdown(context.Background()))
	st, err := old.client.GetStatus(old.ctx, "pinned")
	require.NoError(t, err)
	assert.Equal(t, StateRunning, st.State)
	assert.Equal(t, int32(1), turns.Load(), "the old runtime ran no turn")

	current := newHarness(t, p)
	register(current)
	current.run()
	assert.Equal(t, "ok", current.completed("pinned"))
}

// TestSessionManagerMaintainsSessions: the session manager renews session
// locks and cleans up orphaned sessions on their intervals.
func TestSessionManagerMaintainsSessions(t *testing.T) {
	p := newFaultyProvider(t)
	h := newHarness(t, p)
	h.run(func(o *Options) {
		o.SessionLockTimeout = 200 * time.Millisecond
		o.SessionCleanupInterval = 50 * time.Millisecond
		o.WorkerLockTimeout = 100 * time.Millisecond
	})
	require.NoError(t, poll(h.ctx, 5*time.Second, func() (bool, error) {
		return p.sessionRenews.Load() >= 2 && p.cleanups.Load() >= 2, nil
	}))
}
