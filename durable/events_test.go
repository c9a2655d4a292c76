package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// turns drives one execution of fn turn by turn through the engine, from a
// start stamped stamp, keeping its history as the store would.
type turns struct {
	t       *testing.T
	fn      OrchestrationFunc
	history []cdb.Event
}

func newTurns(t *testing.T, fn OrchestrationFunc, stamp string) *turns {
	start := started("")
	start.DuroxideVersion = stamp
	return &turns{t: t, fn: fn, history: []cdb.Event{start}}
}

// run runs a turn over messages and appends what it wrote to the history.
func (d *turns) run(messages ...cdb.WorkItem) turn {
	d.t.Helper()
	env := testEnv()
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: 1, name: "Orch", version: "1.0.0", fn: d.fn,
		persisted: d.history, batch: readBatch(testInstance, messages, readHistory(d.history), env.log),
	}, env)
	require.NoError(d.t, err)
	d.history = append(d.history, out.delta...)
	return out
}

// fire is the firing of the execution's n-th timer (from 0).
func (d *turns) fire(n int) cdb.TimerFiredMessage {
	d.t.Helper()
	var ids []uint64
	for _, ev := range d.history {
		if _, ok := ev.Kind.(cdb.TimerCreated); ok {
			ids = append(ids, ev.EventID)
		}
	}
	require.Greater(d.t, len(ids), n, "timer %d was never created", n)
	return cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: ids[n]}
}

// eventsOfWithIDs lists the ids of the history's events of kind T.
func eventsOfWithIDs[T cdb.EventKind](history []cdb.Event) []uint64 {
	var ids []uint64
	for _, ev := range history {
		if _, ok := ev.Kind.(T); ok {
			ids = append(ids, ev.EventID)
		}
	}
	return ids
}

func raised(name, data string) cdb.ExternalRaisedMessage {
	return cdb.ExternalRaisedMessage{Instance: testInstance, Name: name, Data: data}
}

// approvalAfterAStep runs a timer (the order's other work), then waits for
// "approve" with a timeout, as the order workflow did.
func approvalAfterAStep(ctx *OrchestrationContext, _ string) (string, error) {
	if _, err := ctx.ScheduleTimer(time.Minute).Await(); err != nil {
		return "", err
	}
	approval, err := ctx.WaitForEvent("approve", WithEventTimeout(time.Hour)).Await()
	if errors.Is(err, ErrEventTimeout) {
		return "approval timed out", nil
	}
	return "approved by " + approval, err
}

// TestWaitForEventReceivesAnEventRaisedWhileATimerRuns: the approval comes
// while the orchestration still sleeps; the wait that comes afterwards
// receives it, in the same turn.
func TestWaitForEventReceivesAnEventRaisedWhileATimerRuns(t *testing.T) {
	d := newTurns(t, approvalAfterAStep, DuroxideVersion)
	d.run()
	require.Equal(t, turnContinue, d.run(raised("approve", "alice")).result.kind)
	out := d.run(d.fire(0))
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "approved by alice", out.result.output)
	assert.Equal(t, []string{"OrchestrationStarted", "TimerCreated", "ExternalEvent", "TimerFired",
		"ExternalSubscribed", "TimerCreated", "OrchestrationCompleted"}, kinds(d.history))
	requireReplaysAsRecorded(t, d.history, approvalAfterAStep)
}

// requireReplaysAsRecorded replays a finished execution's history without
// its terminal event: the same output, and no event appended.
func requireReplaysAsRecorded(t *testing.T, history []cdb.Event, fn OrchestrationFunc) {
	t.Helper()
	want, ended := outcomeOf(history[len(history)-1])
	require.True(t, ended)
	res, err := Replay(context.Background(), testInstance, history[0].ExecutionID, history[:len(history)-1], nil, fn)
	require.NoError(t, err)
	assert.Equal(t, want, withoutDelta(res))
	assert.Empty(t, res.Delta, "replay appended history")
}

// TestWaitForEventTakesEventsInArrivalOrderOnce: two events raised before
// any wait go to two waits in arrival order, each to one wait, also when
// the waits are awaited in the other order; a third wait gets nothing.
func TestWaitForEventTakesEventsInArrivalOrderOnce(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(time.Minute).Await(); err != nil {
			return "", err
		}
		first, second := ctx.WaitForEvent("E"), ctx.WaitForEvent("E")
		r := ctx.Join(second, first)
		_, err := ctx.WaitForEvent("E", WithEventTimeout(time.Minute)).Await()
		return fmt.Sprintf("%s,%s|%v", r[1].Value, r[0].Value, errors.Is(err, ErrEventTimeout)), nil
	}
	d := newTurns(t, fn, DuroxideVersion)
	d.run()
	d.run(raised("E", "1"), raised("E", "2"))
	require.Equal(t, turnContinue, d.run(d.fire(0)).result.kind, "the third wait waits")
	out := d.run(d.fire(1))
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "1,2|true", out.result.output)
	requireReplaysAsRecorded(t, d.history, fn)
}

// TestATimedOutWaitLeavesALaterEventToTheNextWait: the timeout's error is
// ErrEventTimeout; an event raised after it, while the orchestration sends
// a reminder, goes to the next wait, once.
func TestATimedOutWaitLeavesALaterEventToTheNextWait(t *testing.T) {
	var timeoutErr error
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		_, err := ctx.WaitForEvent("approve", WithEventTimeout(time.Minute)).Await()
		if !errors.Is(err, ErrEventTimeout) {
			return "", fmt.Errorf("first wait: want a timeout, got %v", err)
		}
		timeoutErr = err
		if _, err := ctx.ScheduleActivity("Remind", "").Await(); err != nil {
			return "", err
		}
		late, err := ctx.WaitForEvent("approve").Await()
		if err != nil {
			return "", err
		}
		_, again := ctx.WaitForEvent("approve", WithEventTimeout(time.Minute)).Await()
		return late + "|" + fmt.Sprint(errors.Is(again, ErrEventTimeout)), nil
	}
	d := newTurns(t, fn, DuroxideVersion)
	d.run()
	require.Equal(t, turnContinue, d.run(d.fire(0)).result.kind)
	assert.EqualError(t, timeoutErr, `durable: wait for event "approve": durable: timed out waiting for the event`)
	d.run(raised("approve", "late"))
	remind := eventsOfWithIDs[cdb.ActivityScheduled](d.history)[0]
	require.Equal(t, turnContinue, d.run(cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: remind}).result.kind,
		"the third wait waits")
	out := d.run(d.fire(1))
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "late|true", out.result.output, "the late event goes to the second wait only")
	assert.Len(t, eventsOf[cdb.ExternalSubscribedCancelled](d.history), 2, "the timed-out waits are dropped")
	requireReplaysAsRecorded(t, d.history, fn)
}

// TestASelectLoserConsumesNoEvent: a wait matched to a buffered event that
// loses a Select (the activity, first in argument order, is done too)
// leaves the event to the next wait; so does a wait with a timeout.
func TestASelectLoserConsumesNoEvent(t *testing.T) {
	for name, opts := range map[string][]EventOption{"plain": nil, "with a timeout": {WithEventTimeout(time.Hour)}} {
		t.Run(name, func(t *testing.T) { selectLoserConsumesNoEvent(t, opts) })
	}
}

func selectLoserConsumesNoEvent(t *testing.T, opts []EventOption) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		step := ctx.ScheduleActivity("Step", "")
		if _, err := step.Await(); err != nil {
			return "", err
		}
		loser := ctx.WaitForEvent("E", opts...)
		if ctx.Select(step, loser) != 0 {
			return "", errors.New("the finished activity must win")
		}
		if _, err := loser.Await(); !errors.Is(err, ErrFutureCancelled) {
			return "", fmt.Errorf("loser: want ErrFutureCancelled, got %v", err)
		}
		return ctx.WaitForEvent("E").Await()
	}
	d := newTurns(t, fn, DuroxideVersion)
	d.run()
	out := d.run(raised("E", "kept"), cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "done"})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "kept", out.result.output)
	requireReplaysAsRecorded(t, d.history, fn)
}

// legacyEarlyApproval is approvalAfterAStep's history under duroxide's
// semantics, stamped 0.1.32 as this runtime stamped it before buffering:
// the approval came during the timer, reached no one, and the wait timed
// out.
func legacyEarlyApproval(stamp string) []cdb.Event {
	start := started("")
	start.DuroxideVersion = stamp
	return []cdb.Event{
		start,
		ev(2, cdb.TimerCreated{FireAtMs: 60_000}),
		ev(3, cdb.ExternalEvent{Name: "approve", Data: "alice"}),
		evFrom(4, 2, cdb.TimerFired{FireAtMs: 60_000}),
		ev(5, cdb.ExternalSubscribed{Name: "approve"}),
		ev(6, cdb.TimerCreated{FireAtMs: 3_660_000}),
		evFrom(7, 6, cdb.TimerFired{FireAtMs: 3_660_000}),
		evFrom(8, 5, cdb.ExternalSubscribedCancelled{Reason: droppedFutureReason}),
	}
}

// TestALegacyHistoryWithAnUndeliveredEventReplaysUnchanged: an execution
// stamped before buffering keeps duroxide's matching, also for
// WaitForEvent: its early event stays undelivered on replay. The same
// history under this runtime's stamp would decide otherwise, which is why
// the stamp decides.
func TestALegacyHistoryWithAnUndeliveredEventReplaysUnchanged(t *testing.T) {
	for _, stamp := range []string{"0.1.29", "0.1.31", "0.1.32"} {
		res, err := Replay(context.Background(), testInstance, 1, legacyEarlyApproval(stamp), nil, approvalAfterAStep)
		require.NoError(t, err)
		assert.Equal(t, ReplayResult{State: StateCompleted, Output: "approval timed out"}, withoutDelta(res), "stamp %s", stamp)
		assert.Empty(t, res.Delta, "stamp %s: replay appended history", stamp)
	}
	res, err := Replay(context.Background(), testInstance, 1, legacyEarlyApproval(DuroxideVersion), nil, approvalAfterAStep)
	require.NoError(t, err)
	assert.Equal(t, StateFailed, res.State, "under buffering the wait takes the early event and the recorded timeout no longer matches")
}

// TestWaitForEventUnbufferedKeepsDuroxidesSemantics: in an execution that
// buffers, the explicit duroxide form still misses an event raised before
// it, and a continue-as-new does not carry it.
func TestWaitForEventUnbufferedKeepsDuroxidesSemantics(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(time.Minute).Await(); err != nil {
			return "", err
		}
		v, err := ctx.WaitForEventUnbuffered("approve", WithEventTimeout(time.Minute)).Await()
		if errors.Is(err, ErrEventTimeout) {
			return ctx.ContinueAsNew("missed")
		}
		return v, err
	}
	d := newTurns(t, fn, DuroxideVersion)
	d.run()
	d.run(raised("approve", "early"))
	require.Equal(t, turnContinue, d.run(d.fire(0)).result.kind, "the early event is not delivered")
	out := d.run(d.fire(1))
	require.Equal(t, turnContinueAsNew, out.result.kind)
	can := out.orchestratorItems[0].(cdb.ContinueAsNewMessage)
	assert.Empty(t, can.CarryForwardEvents)
}

// TestContinueAsNewCarriesUnreadEventsToTheNextWait: an approval raised
// before a continue-as-new that no wait read reaches the next execution's
// WaitForEvent, after the carried queue messages; one the code read is not
// carried. Replaying the next execution decides the same.
func TestContinueAsNewCarriesUnreadEventsToTheNextWait(t *testing.T) {
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		if ctx.ExecutionID() == 1 {
			if _, err := ctx.WaitForEvent("seen").Await(); err != nil {
				return "", err
			}
			return ctx.ContinueAsNew("next")
		}
		approval, err := ctx.WaitForEvent("approve", WithEventTimeout(time.Minute)).Await()
		if err != nil {
			return "", err
		}
		seen, _ := ctx.WaitForEvent("seen", WithEventTimeout(time.Minute)).Await()
		queued, err := ctx.DequeueEvent("q").Await()
		return strings.Join([]string{input, approval, seen, queued}, ","), err
	}
	out := turnOn(t, fn, nil, startMessage("first"),
		raised("approve", "alice"), cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "m"}, raised("seen", "once"))
	require.Equal(t, turnContinueAsNew, out.result.kind)
	can := out.orchestratorItems[0].(cdb.ContinueAsNewMessage)
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "m"}, {Name: carriedEventPrefix + "approve", Data: "alice"}},
		can.CarryForwardEvents, "the read event is not carried")

	next := turnOn(t, fn, out.delta, can)
	require.Equal(t, uint64(2), next.executionID)
	require.Equal(t, turnContinue, next.result.kind, "the second wait times out later")
	fired := cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 2, ID: 0}
	for _, e := range next.delta {
		if _, ok := e.Kind.(cdb.TimerCreated); ok {
			fired.ID = e.EventID // the second wait's timer
		}
	}
	history := next.delta
	last := turnOnExecution2(t, fn, history, fired)
	require.Equal(t, turnCompleted, last.result.kind)
	assert.Equal(t, "next,alice,,m", last.result.output)

	whole := append(append([]cdb.Event{}, history...), last.delta[:len(last.delta)-1]...)
	res, err := Replay(context.Background(), testInstance, 2, whole, nil, fn)
	require.NoError(t, err)
	assert.Equal(t, ReplayResult{State: StateCompleted, Output: "next,alice,,m"}, withoutDelta(res))
	assert.Empty(t, res.Delta)
}

// turnOnExecution2 runs a turn of execution 2 over its persisted history.
func turnOnExecution2(t *testing.T, fn OrchestrationFunc, persisted []cdb.Event, messages ...cdb.WorkItem) turn {
	t.Helper()
	env := testEnv()
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: 2, name: "Orch", version: "1.0.0", fn: fn,
		persisted: persisted, batch: readBatch(testInstance, messages, readHistory(persisted), env.log),
	}, env)
	require.NoError(t, err)
	return out
}

// TestALegacyExecutionCarriesNoEvents: an execution stamped before
// buffering continues as new with its queue messages only, as it did.
func TestALegacyExecutionCarriesNoEvents(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(time.Minute).Await(); err != nil {
			return "", err
		}
		return ctx.ContinueAsNew("next")
	}
	d := newTurns(t, fn, "0.1.32")
	d.run()
	d.run(raised("approve", "alice"), cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "m"})
	out := d.run(d.fire(0))
	require.Equal(t, turnContinueAsNew, out.result.kind)
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "m"}}, out.orchestratorItems[0].(cdb.ContinueAsNewMessage).CarryForwardEvents)
}

func TestBufferedEventsFollowTheStartsStamp(t *testing.T) {
	for stamp, want := range map[string]bool{
		"0.1.29": false, "0.1.31": false, "0.1.32": false, "0.1.32+build.5": false, "0.1.32+cdb.0": false,
		"0.1.32+cdb.1": true, "0.1.32+cdb.2": true, "0.1.33+cdb.1": true, "0.1.30+cdb.1": false, "": false, "junk+cdb.1": false,
	} {
		assert.Equal(t, want, bufferedEventsFor(stamp), "stamp %q", stamp)
	}
	assert.True(t, bufferedEventsFor(DuroxideVersion), "this runtime's own new executions buffer")
}

// TestReplayRangesIgnoreBuildMetadata: ranges compare duroxide versions as
// the providers' filters do, without build metadata, so a range that ends
// at 0.1.32 still replays this runtime's 0.1.32+cdb.1; a later revision of
// this runtime's rules is left to the runtimes that know it.
func TestReplayRangesIgnoreBuildMetadata(t *testing.T) {
	parse := func(s string) cdb.SemanticVersion {
		v, err := cdb.ParseSemanticVersion(s)
		require.NoError(t, err)
		return v
	}
	upTo032 := cdb.SemverRange{Max: cdb.NewSemanticVersion(0, 1, 32)}
	assert.True(t, replaysPinned(upTo032, parse(DuroxideVersion)))
	assert.True(t, replaysPinned(upTo032, parse("0.1.29")))
	assert.True(t, replaysPinned(cdb.SemverRange{Min: parse("0.1.32+cdb.1"), Max: parse("0.1.32+cdb.1")}, parse("0.1.32")))
	assert.False(t, replaysPinned(upTo032, parse("0.1.33")))
	assert.False(t, replaysPinned(upTo032, parse("0.1.32+cdb.2")), "a newer revision of the rules")
	assert.Equal(t, (Options{}).replayRange().Max.PackedVersion(), parse(DuroxideVersion).PackedVersion(),
		"the providers' filters see 0.1.32")
}

func TestEnqueueEventRefusesTheCarriedEventsPrefix(t *testing.T) {
	c := NewClient(memprovider.New(memprovider.Options{}))
	err := c.EnqueueEvent(context.Background(), "i", carriedEventPrefix+"approve", "x")
	require.ErrorIs(t, err, ErrInvalidInput)
	assert.EqualError(t, err, `durable: enqueue event "i": queue name "__cdb_event:approve" starts with the reserved "__cdb_event:": invalid input`)
}

// TestAnApprovalRaisedWhileAnActivityRunsIsReceived, end to end on every
// provider: the order workflow, whose approval came while the
// order was still being reserved, and a continue-as-new that carries an
// approval raised before it into the next execution's wait.
func TestAnApprovalRaisedWhileAnActivityRunsIsReceived(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		release := make(chan struct{})
		h.activity("Reserve", func(a ActivityContext, in string) (string, error) {
			select {
			case <-release:
			case <-a.Done():
				return "", a.Err()
			}
			return "reserved:" + in, nil
		})
		h.orchestration("Order", func(ctx *OrchestrationContext, in string) (string, error) {
			reserved, err := ctx.ScheduleActivity("Reserve", in).Await()
			if err != nil {
				return "", err
			}
			if in == "carry" && ctx.ExecutionID() == 1 {
				return ctx.ContinueAsNew(in)
			}
			approver, err := ctx.WaitForEvent("approve", WithEventTimeout(time.Minute)).Await()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s approved by %s in execution %d", reserved, approver, ctx.ExecutionID()), nil
		})
		h.run()
		for _, in := range []string{"plain", "carry"} {
			instance := "order-" + in
			h.start(instance, "Order", in)
			h.waitForHistory(instance, hasEvent[cdb.ActivityScheduled])
			require.NoError(t, h.client.RaiseEvent(h.ctx, instance, "approve", "alice"))
			h.waitForHistory(instance, hasEvent[cdb.ExternalEvent])
			release <- struct{}{}
			if in == "carry" {
				h.waitForHistory(instance, func(history []cdb.Event) bool { return history[0].ExecutionID == 2 })
				release <- struct{}{}
			}
			want := map[string]string{
				"plain": "reserved:plain approved by alice in execution 1",
				"carry": "reserved:carry approved by alice in execution 2",
			}[in]
			assert.Equal(t, want, h.completed(instance))
		}
	})
}
