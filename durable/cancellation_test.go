package durable

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// compensatingOrder charges, waits for an approval and, when cancelled
// meanwhile, refunds the charge before it ends.
func compensatingOrder(ctx *OrchestrationContext, _ string) (string, error) {
	ctx.HandleCancellation(time.Minute)
	receipt, err := ctx.ScheduleActivity("Charge", "order-1").Await()
	if err != nil {
		return "", err
	}
	if _, err := ctx.WaitForEvent("approval").Await(); err != nil {
		if errors.Is(err, ErrCancelled) {
			_, refundErr := ctx.ScheduleActivity("Refund", receipt).Await()
			return "", errors.Join(err, refundErr)
		}
		return "", err
	}
	return "shipped", nil
}

var cancelOrder = cdb.CancelInstanceMessage{Instance: testInstance, Reason: "customer called"}

func TestACancellationRequestReachesCodeThatHandlesIt(t *testing.T) {
	first := turnOn(t, compensatingOrder, nil, startMessage(""))
	charged := turnOn(t, compensatingOrder, first.delta,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "receipt-7"})
	history := append(append([]cdb.Event{}, first.delta...), charged.delta...)

	cancelled := turnOn(t, compensatingOrder, history, cancelOrder)

	require.Equal(t, turnContinue, cancelled.result.kind, "the code compensates before the end")
	assert.Equal(t, []string{"OrchestrationCancelRequested", "TimerCreated", "ActivityScheduled", "ExternalSubscribedCancelled"},
		kinds(cancelled.delta))
	request := cancelled.delta[0]
	grace := cancelled.delta[1].Kind.(cdb.TimerCreated)
	assert.Equal(t, request.TimestampMs+uint64(time.Minute.Milliseconds()), grace.FireAtMs, "the grace counts from the request")
	assert.Equal(t, cdb.ActivityScheduled{Name: "Refund", Input: "receipt-7"}, cancelled.delta[2].Kind)
	assert.Equal(t, cdb.ExternalSubscribedCancelled{Reason: cancelRequestedReason}, cancelled.delta[3].Kind)
	assert.Equal(t, []cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: testInstance, ExecutionID: 1,
		ID: cancelled.delta[2].EventID, Name: "Refund", Input: "receipt-7"}}, cancelled.workerItems)
	assert.Equal(t, []cdb.WorkItem{cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1,
		ID: cancelled.delta[1].EventID, FireAtMs: grace.FireAtMs}}, cancelled.orchestratorItems)

	history = append(history, cancelled.delta...)
	refunded := turnOn(t, compensatingOrder, history,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: cancelled.delta[2].EventID, Result: "refunded"})
	require.Equal(t, turnCancelled, refunded.result.kind)
	assert.Equal(t, []string{"ActivityCompleted", "OrchestrationFailed"}, kinds(refunded.delta))
	assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "customer called"}},
		refunded.delta[1].Kind.(cdb.OrchestrationFailed).Details, "it ends as cancelled, whatever the code returned")
}

func TestTheGraceEndsACompensationThatDoesNotFinish(t *testing.T) {
	first := turnOn(t, compensatingOrder, nil, startMessage(""))
	charged := turnOn(t, compensatingOrder, first.delta,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "receipt-7"})
	history := append(append([]cdb.Event{}, first.delta...), charged.delta...)
	cancelled := turnOn(t, compensatingOrder, history, cancelOrder)
	history = append(history, cancelled.delta...)
	graceTimer, refund := cancelled.delta[1], cancelled.delta[2]

	out := turnOn(t, compensatingOrder, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1,
		ID: graceTimer.EventID, FireAtMs: graceTimer.Kind.(cdb.TimerCreated).FireAtMs})

	require.Equal(t, turnCancelled, out.result.kind)
	assert.Equal(t, []string{"TimerFired", "ActivityCancelRequested", "OrchestrationFailed"}, kinds(out.delta))
	assert.Equal(t, ptr(refund.EventID), out.delta[1].SourceEventID, "the refund still running is cancelled")
	assert.Equal(t, []cdb.ScheduledActivityIdentifier{{Instance: testInstance, ExecutionID: 1, ActivityID: refund.EventID}}, out.cancelled)
	assert.Equal(t, "canceled: customer called", out.delta[2].Kind.(cdb.OrchestrationFailed).Details.DisplayMessage())
}

// A request that comes before the code called HandleCancellation ends the
// execution at once, as one without it would.
func TestARequestBeforeHandleCancellationEndsTheExecutionAtOnce(t *testing.T) {
	late := func(ctx *OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.WaitForEvent("ready").Await(); err != nil {
			return "", err
		}
		ctx.HandleCancellation(time.Minute)
		return ctx.WaitForEvent("approval").Await()
	}
	first := turnOn(t, late, nil, startMessage(""))

	out := turnOn(t, late, first.delta, cancelOrder)

	require.Equal(t, turnCancelled, out.result.kind)
	assert.Equal(t, []string{"OrchestrationCancelRequested", "ExternalSubscribedCancelled", "OrchestrationFailed"}, kinds(out.delta))
}

// Everything outstanding when the request comes returns ErrCancelled and
// is cancelled (an activity, a child, a timer, an event wait with a
// timeout, a retried activity); a result that had arrived stays.
func TestARequestCancelsTheWorkStillOutstanding(t *testing.T) {
	var seen []string
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.HandleCancellation(time.Minute)
		futures := []*Future{
			ctx.ScheduleActivity("Done", ""),
			ctx.ScheduleActivity("Slow", ""),
			ctx.ScheduleSubOrchestration("Child", ""),
			ctx.ScheduleTimer(time.Hour),
			ctx.WaitForEvent("approval", WithEventTimeout(time.Hour)),
			ctx.ScheduleActivity("Flaky", "", WithRetry(RetryPolicy{MaxAttempts: 3})),
		}
		seen = seen[:0]
		for _, r := range ctx.Join(futures...) {
			switch {
			case r.Err == nil:
				seen = append(seen, "ok:"+r.Value)
			case errors.Is(r.Err, ErrCancelled):
				seen = append(seen, "cancelled")
			default:
				seen = append(seen, "error:"+r.Err.Error())
			}
		}
		return "", nil
	}
	first := turnOn(t, fn, nil, startMessage(""))
	done := first.delta[1]
	require.Equal(t, cdb.ActivityScheduled{Name: "Done"}, done.Kind)

	out := turnOn(t, fn, first.delta,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: done.EventID, Result: "r"}, cancelOrder)

	require.Equal(t, turnCancelled, out.result.kind, "the code returned: the execution ends")
	assert.Equal(t, []string{"ok:r", "cancelled", "cancelled", "cancelled", "cancelled", "cancelled"}, seen)
	assert.ElementsMatch(t, []string{"Slow", "Flaky"}, cancelledActivityNames(first.delta, out.cancelled))
	assert.Contains(t, out.orchestratorItems, cdb.WorkItem(cdb.CancelInstanceMessage{Instance: testInstance + "::sub::4", Reason: "parent canceled"}))
}

func cancelledActivityNames(history []cdb.Event, ids []cdb.ScheduledActivityIdentifier) []string {
	var names []string
	for _, id := range ids {
		for _, ev := range history {
			if s, ok := ev.Kind.(cdb.ActivityScheduled); ok && ev.EventID == id.ActivityID {
				names = append(names, s.Name)
			}
		}
	}
	return names
}

// The request's future loses a Select without being spent: a request that
// comes later still reaches the code.
func TestTheRequestsFutureStaysAfterLosingASelect(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		cancelled := ctx.HandleCancellation(time.Minute)
		if ctx.Select(cancelled, ctx.WaitForEvent("approval")) == 0 {
			return "", errors.New("cancelled before approval")
		}
		reason, err := cancelled.Await()
		return "cancelled after approval: " + reason, err
	}
	first := turnOn(t, fn, nil, startMessage(""))
	approved := turnOn(t, fn, first.delta, cdb.ExternalRaisedMessage{Instance: testInstance, Name: "approval", Data: "yes"})
	require.Equal(t, turnContinue, approved.result.kind)
	history := append(append([]cdb.Event{}, first.delta...), approved.delta...)

	out := turnOn(t, fn, history, cancelOrder)

	require.Equal(t, turnCancelled, out.result.kind)
	assert.True(t, out.result.compensated, "the code saw the request")
}

func TestHandleCancellationRefusesAGraceOfZero(t *testing.T) {
	out := turnOn(t, func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.HandleCancellation(0)
		return "unreached", nil
	}, nil, startMessage(""))

	require.Equal(t, turnFailed, out.result.kind)
	assert.Equal(t, "durable: HandleCancellation needs a grace above zero, got 0s: invalid input", out.result.details.(cdb.ApplicationError).Message)
}

// A parent and its child both handle cancellation: cancelling the parent
// cancels the child, each compensates, and each ends as cancelled; the
// histories replay clean on the code that wrote them.
func TestSampleCancellationWithCompensationInParentAndChild(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		var refunds, releases atomic.Int32
		h.activity("Charge", func(ActivityContext, string) (string, error) { return "receipt-7", nil })
		h.activity("Refund", func(_ ActivityContext, receipt string) (string, error) {
			refunds.Add(1)
			return "refunded " + receipt, nil
		})
		h.activity("Release", func(ActivityContext, string) (string, error) {
			releases.Add(1)
			return "released", nil
		})
		h.orchestration("Reserve", func(ctx *OrchestrationContext, _ string) (string, error) {
			ctx.HandleCancellation(time.Minute)
			_, err := ctx.WaitForEvent("never").Await()
			if errors.Is(err, ErrCancelled) {
				ctx.SetCustomStatus(ptr("releasing"))
				_, err = ctx.ScheduleActivity("Release", "").Await()
			}
			return "", err
		})
		h.orchestration("Order", func(ctx *OrchestrationContext, _ string) (string, error) {
			ctx.HandleCancellation(time.Minute)
			receipt, err := ctx.ScheduleActivity("Charge", "").Await()
			if err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleSubOrchestration("Reserve", "").Await(); !errors.Is(err, ErrCancelled) {
				return "", err
			}
			ctx.SetCustomStatus(ptr("refunding"))
			return ctx.ScheduleActivity("Refund", receipt).Await()
		})
		h.run()
		const order, child = "order-cancel-compensates", "order-cancel-compensates::sub::4"
		h.start(order, "Order", "")
		h.waitForHistory(child, hasEvent[cdb.ExternalSubscribed])

		require.NoError(t, h.client.CancelInstance(h.ctx, order, "customer called"))

		st := h.wait(order)
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "customer called"}}, st.Error)
		assert.Equal(t, ptr("refunding"), st.CustomStatus)
		childStatus := h.wait(child)
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "parent canceled"}}, childStatus.Error)
		assert.Equal(t, ptr("releasing"), childStatus.CustomStatus)
		assert.Equal(t, int32(1), refunds.Load())
		assert.Equal(t, int32(1), releases.Load())
	})
}

// Without HandleCancellation nothing changes: the request ends the
// instance at once and no code runs after it.
func TestSampleCancellationWithoutHandleCancellationRunsNoCode(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		var after atomic.Int32
		h.activity("After", func(ActivityContext, string) (string, error) {
			after.Add(1)
			return "", nil
		})
		h.orchestration("Plain", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, err := ctx.WaitForEvent("approval").Await()
			_, _ = ctx.ScheduleActivity("After", "").Await()
			return "", err
		})
		h.run()
		h.start("plain-cancel", "Plain", "")
		h.waitForHistory("plain-cancel", hasEvent[cdb.ExternalSubscribed])

		require.NoError(t, h.client.CancelInstance(h.ctx, "plain-cancel", "stop"))

		st := h.wait("plain-cancel")
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "stop"}}, st.Error)
		history, err := h.client.ReadHistory(h.ctx, "plain-cancel")
		require.NoError(t, err)
		assert.False(t, hasEvent[cdb.ActivityScheduled](history), "no code ran after the request")
		assert.Zero(t, after.Load())
	})
}

// A process dies (as by kill -9: its requests stop) while the
// compensation runs: the next process on the same account runs it again,
// says so in its log, and the instance ends as cancelled, the refund
// recorded once.
func TestACompensationSurvivesACrash(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	refundStarted := make(chan struct{}, 1)
	var refundsDone, refundDelivery atomic.Int32
	register := func(h *harness, crashing bool) {
		h.activity("Charge", func(ActivityContext, string) (string, error) { return "receipt-7", nil })
		h.activity("Refund", func(ctx ActivityContext, receipt string) (string, error) {
			if crashing {
				refundStarted <- struct{}{}
				<-ctx.Done() // this process dies before the refund ends
				return "", ctx.Err()
			}
			refundsDone.Add(1)
			refundDelivery.Store(int32(ctx.Delivery()))
			return "refunded " + receipt, nil
		})
		h.orchestration("Order", compensatingOrder)
	}
	dead := &killableTransport{next: acct.Transport()}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: dead})
	require.NoError(t, err)
	provider, err := cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	first := newHarness(t, provider)
	register(first, true)
	first.run()
	first.start("order-crash", "Order", "")
	first.waitForHistory("order-crash", hasEvent[cdb.ExternalSubscribed])
	require.NoError(t, first.client.CancelInstance(first.ctx, "order-crash", "customer called"))
	<-refundStarted
	dead.kill()

	second := newCosmosHarness(t, acct)
	register(second, false)
	var logs lockedBuffer
	second.run(func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})

	st := second.wait("order-crash")
	assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "customer called"}}, st.Error)
	assert.Equal(t, int32(1), refundsDone.Load())
	assert.Equal(t, int32(2), refundDelivery.Load(), "the refund's second delivery: the first died with its process")
	history, err := second.client.ReadHistory(second.ctx, "order-crash")
	require.NoError(t, err)
	completed := eventsOf[cdb.ActivityCompleted](history)
	require.Len(t, completed, 2, "the charge and one refund")
	assert.Equal(t, cdb.ActivityCompleted{Result: "refunded receipt-7", Delivery: ptr(uint32(2))}, completed[1],
		"the history says the refund's first run was lost")
	require.NoError(t, NewReplayer(second.registry).ReplayInstance(second.ctx, second.provider, "order-crash"))
	assert.Regexp(t, `msg="running an activity again: [^"]*" runtime=\S+ instance=order-crash execution_id=1 activity=Refund attempt=2 `, logs.String(),
		"the process that took the refund over says it runs it again")
}

// killableTransport reaches the account until kill, and then never again:
// its process is dead to the store, whatever its goroutines still do.
type killableTransport struct {
	next http.RoundTripper
	dead atomic.Bool
}

func (k *killableTransport) kill() { k.dead.Store(true) }

func (k *killableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.dead.Load() {
		return nil, errors.New("the process is dead")
	}
	return k.next.RoundTrip(r)
}

// lockedBuffer is a log's destination that goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
