package durable

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Refusals: what the runtime commits when the provider or the store refuses
// a turn or a result.

// eachFaultyProvider runs body on a faultyProvider around each in-process
// provider.
func eachFaultyProvider(t *testing.T, body func(t *testing.T, p *faultyProvider, h *harness)) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			p := &faultyProvider{Provider: pc.new(t)}
			body(t, p, newHarness(t, p))
		})
	}
}

// A first turn the provider refuses for good fails the orchestration
// visibly: its status is Failed with the refusal as cause, its name and
// version are recorded, listings show it among the failed, and
// WaitForCompletion returns.
func TestARefusedFirstTurnReadsAsFailed(t *testing.T) {
	eachFaultyProvider(t, func(t *testing.T, p *faultyProvider, h *harness) {
		p.ackErr = cdb.Permanent("ack_orchestration_item", "the turn is too large")
		p.failAcks.Store(1) // the first turn's ack
		echoOrchestration(h)
		h.run()
		h.start("refused-first", "Echoes", "hi")
		st := h.wait("refused-first")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, cdb.InfrastructureError{Operation: "ack_orchestration_item", Message: "the turn is too large"}, st.Error)

		admin, ok := h.provider.Admin()
		require.True(t, ok)
		info, err := admin.GetInstanceInfo(h.ctx, "refused-first")
		require.NoError(t, err)
		assert.Equal(t, "Echoes", info.OrchestrationName)
		assert.Equal(t, "1.0.0", info.OrchestrationVersion, "the registered version that ran")
		assert.Equal(t, cdb.StatusFailed, info.Status)
		failed, err := h.client.ListInstancesByStatus(h.ctx, cdb.StatusFailed)
		require.NoError(t, err)
		assert.Contains(t, failed, "refused-first")
		all, err := h.client.ListInstances(h.ctx)
		require.NoError(t, err)
		assert.Contains(t, all, "refused-first")
		history, err := h.client.ReadHistory(h.ctx, "refused-first")
		require.NoError(t, err)
		require.Len(t, history, 2, "the start, then the failure")
		started, ok := history[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok)
		assert.Equal(t, "hi", started.Input)
	})
}

// startsExecutionOf reports a turn that starts an execution of instance
// and does not fail it (the runtime's failure of a refused turn does).
func startsExecutionOf(instance string, delta []cdb.Event) bool {
	if len(delta) == 0 || delta[0].InstanceID != instance || hasEvent[cdb.OrchestrationFailed](delta) {
		return false
	}
	_, ok := delta[0].Kind.(cdb.OrchestrationStarted)
	return ok
}

// For a child: the parent of a child whose first turn is refused learns of
// the failure instead of waiting for ever, and the child reads as failed
// with its name.
func TestARefusedFirstTurnOfAChildFailsItsParent(t *testing.T) {
	eachFaultyProvider(t, func(t *testing.T, p *faultyProvider, h *harness) {
		refusal := cdb.Permanent("ack_orchestration_item", "the child's turn is too large")
		p.refuseTurn = func(_ uint64, delta []cdb.Event) error {
			if startsExecutionOf("child-of-refused", delta) {
				return refusal
			}
			return nil
		}
		echoOrchestration(h)
		h.orchestration("Parent", func(ctx *OrchestrationContext, in string) (string, error) {
			return ctx.ScheduleSubOrchestration("Echoes", in, WithInstanceID("child-of-refused")).Await()
		})
		h.run()
		h.start("parent-of-refused", "Parent", "hi")
		// An infrastructure failure is a system failure: it fails the
		// parent's receiving turn too, with the same cause.
		parent := h.wait("parent-of-refused")
		require.Equal(t, StateFailed, parent.State)
		assert.Contains(t, parent.Error.DisplayMessage(), "the child's turn is too large")
		st := h.wait("child-of-refused")
		require.Equal(t, StateFailed, st.State)
		admin, ok := h.provider.Admin()
		require.True(t, ok)
		info, err := admin.GetInstanceInfo(h.ctx, "child-of-refused")
		require.NoError(t, err)
		assert.Equal(t, "Echoes", info.OrchestrationName)
	})
}

// After a continue-as-new: the refused first turn of the next execution
// fails that execution, not the one that continued as new.
func TestARefusedTurnAfterContinueAsNewFailsTheNewExecution(t *testing.T) {
	eachFaultyProvider(t, func(t *testing.T, p *faultyProvider, h *harness) {
		p.refuseTurn = func(executionID uint64, delta []cdb.Event) error {
			if executionID == 2 && startsExecutionOf("refused-next", delta) {
				return cdb.Permanent("ack_orchestration_item", "the next execution's turn is too large")
			}
			return nil
		}
		h.orchestration("Twice", func(ctx *OrchestrationContext, in string) (string, error) {
			if in == "first" {
				return ctx.ContinueAsNew("second")
			}
			return in, nil
		})
		h.run()
		h.start("refused-next", "Twice", "first")
		st := h.wait("refused-next")
		require.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error.DisplayMessage(), "the next execution's turn is too large")
		first, err := h.client.ReadExecutionHistory(h.ctx, "refused-next", 1)
		require.NoError(t, err)
		assert.True(t, hasEvent[cdb.OrchestrationContinuedAsNew](first), "the first execution continued as new")
		assert.False(t, hasEvent[cdb.OrchestrationFailed](first), "and did not fail")
		second, err := h.client.ReadExecutionHistory(h.ctx, "refused-next", 2)
		require.NoError(t, err)
		require.Len(t, second, 2, "the second execution's start, then its failure")
		started, ok := second[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok)
		assert.Equal(t, "second", started.Input)
	})
}

// storeAnswer is a permanent status a real account gives transiently,
// times times in a row.
type storeAnswer struct{ status, substatus, times int }

// clientRefusalAttempts is how often cdb's client sends a request the
// account refuses with 401 or 403 before it reports the refusal.
const clientRefusalAttempts = 3

// transientStoreRefusals are what a real account answers for a while: 401
// while a clock or token refreshes, 403 while a role assignment
// propagates (once, which the client absorbs, and for longer than the
// client tries), 404/1003 right after a container is created, 400 and 431
// for an oversized header, 413 when its size accounting differs from ours.
var transientStoreRefusals = []storeAnswer{
	{401, 0, 1}, {401, 0, clientRefusalAttempts}, {403, 0, 1}, {403, 0, clientRefusalAttempts},
	{404, 1003, 1}, {400, 0, 1}, {431, 0, 1}, {413, 0, 1},
}

// absorbedByTheClient reports the answers the client retries through by
// itself: the runtime never sees them.
func (a storeAnswer) absorbedByTheClient() bool {
	return a.substatus == cdb.SubStatusOwnerResourceNotFound ||
		(a.status == 401 || a.status == 403) && a.times < clientRefusalAttempts
}

// errorRecorder keeps the ERROR records a runtime logs, beside the test log.
type errorRecorder struct {
	testLogHandler
	mu      *sync.Mutex
	records *[]map[string]any
}

func newErrorRecorder(t *testing.T) *errorRecorder {
	return &errorRecorder{testLogHandler: testLogHandler{t: t}, mu: &sync.Mutex{}, records: &[]map[string]any{}}
}

func (h *errorRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		attrs := map[string]any{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Any()
			return true
		})
		h.mu.Lock()
		*h.records = append(*h.records, attrs)
		h.mu.Unlock()
	}
	return h.testLogHandler.Handle(ctx, r)
}

func (h *errorRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	inner := h.testLogHandler.WithAttrs(attrs).(*testLogHandler)
	return &errorRecorder{testLogHandler: *inner, mu: h.mu, records: h.records}
}

// logged reports whether an ERROR record carried this status and
// substatus.
func (h *errorRecorder) logged(a storeAnswer) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r["status"] == int64(a.status) && r["substatus"] == int64(a.substatus) {
			return true
		}
	}
	return false
}

// A permanent status the store answers on an activity's ack or on a turn's
// commit is not the provider's refusal: neither the activity nor the
// orchestration fails; the work is abandoned with backoff, runs again, and
// completes with its result. The store's answer is logged at ERROR with its
// status and substatus (but for 404/1003 and a short 401 or 403, which the
// client retries itself, and a 413 on a commit, which the provider plans
// again tighter).
func TestTransientStoreRefusalsDoNotFailWork(t *testing.T) {
	for _, answer := range transientStoreRefusals {
		for _, refused := range []string{"activity ack", "turn commit"} {
			t.Run(fmt.Sprintf("%d.%d×%d %s", answer.status, answer.substatus, answer.times, refused), func(t *testing.T) {
				t.Parallel()
				runs, logs := runThroughStoreRefusal(t, answer, refused == "activity ack")
				if answer.absorbedByTheClient() {
					assert.Equal(t, int32(1), runs, "the client retried the refused request itself")
					assert.False(t, logs.logged(answer), "the runtime never saw the refusal")
					return
				}
				if answer.status == 413 && refused == "turn commit" {
					assert.Equal(t, int32(1), runs, "the provider planned the commit tighter itself")
					return
				}
				if refused == "activity ack" {
					assert.Equal(t, int32(2), runs, "the activity whose ack was refused ran again")
				} else {
					assert.Equal(t, int32(1), runs, "the activity ran once")
				}
				assert.True(t, logs.logged(answer), "the store's answer is logged at ERROR with its status and substatus")
			})
		}
	}
}

// runThroughStoreRefusal runs an orchestration of one activity on the
// Cosmos DB provider whose account answers the activity's first ack (or
// else the turn that completes the orchestration) with answer, answer.times times in a row; it
// requires the orchestration completed with the activity's result and
// returns how often the activity ran and what the runtime logged.
func runThroughStoreRefusal(t *testing.T, answer storeAnswer, refuseAck bool) (int32, *errorRecorder) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	refuseBatchWith := func(marker string) {
		acct.InjectFault(cdb.FakeFault{
			Match: func(r cdb.FakeRequest) bool {
				return r.Operation == "Batch" && bytes.Contains(r.Body, []byte(marker))
			},
			Status: answer.status, SubStatus: answer.substatus, Times: answer.times,
		})
	}
	var runs atomic.Int32
	h.activity("Work", func(_ ActivityContext, in string) (string, error) {
		if runs.Add(1) == 1 {
			if refuseAck {
				refuseBatchWith("result-of-" + in) // this run's ack
			} else {
				refuseBatchWith("final-result-of-" + in) // the turn that completes the orchestration
			}
		}
		return "result-of-" + in, nil
	})
	h.orchestration("Works", func(ctx *OrchestrationContext, in string) (string, error) {
		out, err := ctx.ScheduleActivity("Work", in).Await()
		if err != nil {
			return "", err
		}
		return "final-" + out, nil
	})
	logs := newErrorRecorder(t)
	h.run(func(o *Options) {
		o.Logger = slog.New(logs)
		o.UnregisteredBackoffBase = 10 * time.Millisecond
	})
	h.start("store-refusal", "Works", "x")
	require.Equal(t, "final-result-of-x", h.completed("store-refusal"))
	return runs.Load(), logs
}

// On renewals: a permanent status the store answers to a lock renewal (a
// 403 while a role assignment propagates) says nothing about the lock: the
// renewal is tried again, and the activity is neither cancelled nor run
// twice.
func TestAStoreRefusalOfARenewalKeepsTheActivity(t *testing.T) {
	output, runs, acks := runThroughAFailedRenewal(t,
		cdb.ToProviderError("RenewWorkItemLock", &cdb.CosmosError{Operation: "PatchItem", StatusCode: 403}))
	assert.Equal(t, "kept", output)
	assert.Equal(t, int32(1), runs, "the activity ran once")
	assert.Equal(t, int32(1), acks, "one ack, never refused")
}

// A refused first turn, when the start itself is what the provider refuses
// (its input, say): the failure is committed with a start that leaves the
// input out, so the instance still reads as failed, with its name and
// cause.
func TestARefusedStartStillReadsAsFailed(t *testing.T) {
	eachFaultyProvider(t, func(t *testing.T, p *faultyProvider, h *harness) {
		p.refuseTurn = func(_ uint64, delta []cdb.Event) error {
			if len(delta) > 0 {
				if k, ok := delta[0].Kind.(cdb.OrchestrationStarted); ok && k.Input != "" {
					return cdb.Permanent("ack_orchestration_item", "the start's input is too large")
				}
			}
			return nil
		}
		echoOrchestration(h)
		h.run()
		h.start("refused-start", "Echoes", "too large")
		st := h.wait("refused-start")
		require.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error.DisplayMessage(), "the start's input is too large")
		admin, ok := h.provider.Admin()
		require.True(t, ok)
		info, err := admin.GetInstanceInfo(h.ctx, "refused-start")
		require.NoError(t, err)
		assert.Equal(t, "Echoes", info.OrchestrationName)
		assert.Equal(t, cdb.StatusFailed, info.Status)
		history, err := h.client.ReadHistory(h.ctx, "refused-start")
		require.NoError(t, err)
		require.Len(t, history, 2)
		started, ok := history[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok)
		assert.Empty(t, started.Input, "the start without the input it could not store")
	})
}
