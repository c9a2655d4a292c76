package durable

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Engine tests: one turn at a time on hand-built histories, no provider.

const testInstance = "inst"

var testClock = time.UnixMilli(1_700_000_000_000)

func testEnv() turnEnv {
	return turnEnv{
		now:             func() time.Time { return testClock },
		log:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		parentExecution: func(context.Context, string, string) uint64 { return 1 },
	}
}

func ev(id uint64, kind cdb.EventKind) cdb.Event {
	return newEvent(testInstance, 1, id, nil, 0, kind)
}

func evFrom(id, source uint64, kind cdb.EventKind) cdb.Event {
	return newEvent(testInstance, 1, id, ptr(source), 0, kind)
}

func started(input string) cdb.Event {
	return ev(1, cdb.OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: input})
}

func startMessage(input string) cdb.StartOrchestrationMessage {
	return cdb.StartOrchestrationMessage{Instance: testInstance, Orchestration: "Orch", Input: input, ExecutionID: 1}
}

// turnOn runs one turn of fn against persisted history and messages.
func turnOn(t *testing.T, fn OrchestrationFunc, persisted []cdb.Event, messages ...cdb.WorkItem) turn {
	t.Helper()
	env := testEnv()
	h := readHistory(persisted)
	b := readBatch(testInstance, messages, h, env.log)
	executionID := uint64(1)
	if b.continueAsNew {
		executionID, persisted = 2, nil
	}
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: executionID, name: "Orch", version: "1.0.0",
		fn: fn, persisted: persisted, batch: b,
	}, env)
	require.NoError(t, err)
	return out
}

// kinds lists the delta's event types with their ids, for compact asserts.
func kinds(events []cdb.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Kind.Type()
	}
	return out
}

func requireNondeterminism(t *testing.T, out turn) {
	t.Helper()
	require.Equal(t, turnFailed, out.result.kind)
	cfg, ok := out.result.details.(cdb.ConfigurationError)
	require.True(t, ok, "want a configuration error, got %#v", out.result.details)
	assert.Equal(t, cdb.ConfigNondeterminism, cfg.Kind)
	last := out.delta[len(out.delta)-1]
	failedEv, ok := last.Kind.(cdb.OrchestrationFailed)
	require.True(t, ok, "the terminal event comes last")
	assert.Equal(t, out.result.details, failedEv.Details)
}

func callA(ctx *OrchestrationContext, input string) (string, error) {
	return ctx.ScheduleActivity("A", input).Await()
}

func TestTurnFirstTurnStartsExecutionAndSchedulesActivity(t *testing.T) {
	out := turnOn(t, callA, nil, startMessage("x"))

	assert.Equal(t, turnContinue, out.result.kind)
	assert.Equal(t, []string{"OrchestrationStarted", "ActivityScheduled"}, kinds(out.delta))
	assert.Equal(t, []uint64{1, 2}, []uint64{out.delta[0].EventID, out.delta[1].EventID})
	assert.Equal(t, DuroxideVersion, out.delta[0].DuroxideVersion)
	require.Len(t, out.workerItems, 1)
	assert.Equal(t, cdb.ActivityExecuteMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Name: "A", Input: "x"}, out.workerItems[0])

	md := executionMetadata(out.delta)
	assert.Equal(t, "Orch", *md.OrchestrationName)
	assert.Equal(t, "1.0.0", *md.OrchestrationVersion)
	assert.Equal(t, duroxideSemver, *md.PinnedDuroxideVersion)
	assert.Nil(t, md.Status, "a running turn keeps the status")
	assert.Nil(t, md.ParentInstanceID)
}

func TestTurnReplayDeliversCompletionAndCompletes(t *testing.T) {
	history := []cdb.Event{started("x"), ev(2, cdb.ActivityScheduled{Name: "A", Input: "x"})}
	out := turnOn(t, callA, history, cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "done"})

	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "done", out.result.output)
	assert.Equal(t, []string{"ActivityCompleted", "OrchestrationCompleted"}, kinds(out.delta))
	assert.Equal(t, uint64(3), out.delta[0].EventID, "ids continue after the history")
	assert.Equal(t, uint64(2), *out.delta[0].SourceEventID)
	assert.Empty(t, out.workerItems)
	md := executionMetadata(out.delta)
	assert.Equal(t, statusCompleted, *md.Status)
	assert.Equal(t, "done", *md.Output)
	assert.Nil(t, md.PinnedDuroxideVersion, "pinned only on an execution's first turn")
}

func TestTurnActivityFailureReachesCodeAsTaskFailedError(t *testing.T) {
	var got error
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		_, got = ctx.ScheduleActivity("A", "").Await()
		return "handled", nil
	}
	history := []cdb.Event{started(""), ev(2, cdb.ActivityScheduled{Name: "A"})}
	details := cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "boom"}
	out := turnOn(t, fn, history, cdb.ActivityFailedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Details: details})

	assert.Equal(t, turnCompleted, out.result.kind)
	var tf *TaskFailedError
	require.ErrorAs(t, got, &tf)
	assert.Equal(t, details, tf.Details)
	assert.Equal(t, "boom", got.Error())
}

func TestTurnOrchestrationErrorFailsWithItsMessage(t *testing.T) {
	fn := func(*OrchestrationContext, string) (string, error) { return "", errors.New("nope") }
	out := turnOn(t, fn, nil, startMessage(""))

	require.Equal(t, turnFailed, out.result.kind)
	assert.Equal(t, orchestrationFailure("nope"), out.result.details)
	assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationFailed"}, kinds(out.delta))
	md := executionMetadata(out.delta)
	assert.Equal(t, statusFailed, *md.Status)
	assert.Equal(t, "nope", *md.Output)
}

func TestTurnPanicFailsAsPanicked(t *testing.T) {
	fn := func(*OrchestrationContext, string) (string, error) { panic("kaboom") }
	out := turnOn(t, fn, nil, startMessage(""))

	require.Equal(t, turnFailed, out.result.kind)
	app, ok := out.result.details.(cdb.ApplicationError)
	require.True(t, ok)
	assert.Equal(t, cdb.AppPanicked{}, app.Kind)
	assert.Equal(t, "kaboom", app.Message)
}

func TestTurnNondeterminismWhenCodeSchedulesOtherActivity(t *testing.T) {
	history := []cdb.Event{started("x"), ev(2, cdb.ActivityScheduled{Name: "A", Input: "x"})}
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleActivity("B", input).Await()
	}
	out := turnOn(t, fn, history, cdb.ExternalRaisedMessage{Instance: testInstance, Name: "poke"})

	requireNondeterminism(t, out)
	assert.Contains(t, out.result.details.DisplayMessage(), `history has activity "A", the code scheduled activity "B"`)
	// The in-flight activity is cancelled before the terminal event.
	assert.Equal(t, []string{"ExternalEvent", "ActivityCancelRequested", "OrchestrationFailed"}, kinds(out.delta))
	assert.Equal(t, []cdb.ScheduledActivityIdentifier{{Instance: testInstance, ExecutionID: 1, ActivityID: 2}}, out.cancelled)
}

func TestTurnNondeterminismWhenHistoryHasScheduleCodeDoesNot(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.TimerCreated{FireAtMs: 5})}
	fn := func(*OrchestrationContext, string) (string, error) { return "early", nil }
	out := turnOn(t, fn, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 2, FireAtMs: 5})

	// The code returns before the timer: the run breaks at its return, and
	// the history must not end up with two terminal events either way.
	require.NotEqual(t, turnContinue, out.result.kind)
	terminals := 0
	for _, e := range out.delta {
		if e.IsTerminal() {
			terminals++
		}
	}
	assert.Equal(t, 1, terminals)

	fn2 := func(ctx *OrchestrationContext, _ string) (string, error) {
		return "", ctx.ScheduleTimer(time.Second).wait()
	}
	history2 := []cdb.Event{started(""), ev(2, cdb.ActivityScheduled{Name: "A"})}
	out2 := turnOn(t, fn2, history2, cdb.ExternalRaisedMessage{Instance: testInstance, Name: "poke"})
	requireNondeterminism(t, out2)
}

// wait is Await for futures whose value does not matter.
func (f *Future) wait() error {
	_, err := f.Await()
	return err
}

func TestTurnCompletionWithoutScheduleIsNondeterminism(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.TimerCreated{FireAtMs: 5})}
	out := turnOn(t, callA, history, cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "x"})
	requireNondeterminism(t, out)
	assert.Contains(t, out.result.details.DisplayMessage(), "completion kind mismatch for id=2")

	out = turnOn(t, callA, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 9})
	requireNondeterminism(t, out)
	assert.Contains(t, out.result.details.DisplayMessage(), "no matching schedule for timer completion id=9")
}

func TestTurnDropsOtherExecutionsAndDuplicateCompletions(t *testing.T) {
	history := []cdb.Event{
		started("x"), ev(2, cdb.ActivityScheduled{Name: "A", Input: "x"}),
		ev(3, cdb.TimerCreated{FireAtMs: 1}), evFrom(4, 3, cdb.TimerFired{FireAtMs: 1}),
	}
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		a := ctx.ScheduleActivity("A", input)
		if err := ctx.ScheduleTimer(time.Millisecond).wait(); err != nil {
			return "", err
		}
		return a.Await()
	}
	out := turnOn(t, fn, history,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 7, ID: 2, Result: "stale"},
		cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 3, FireAtMs: 1},
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "fresh"},
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "again"},
	)
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "fresh", out.result.output)
	assert.Equal(t, []string{"ActivityCompleted", "OrchestrationCompleted"}, kinds(out.delta))
}

func timeoutRace(ctx *OrchestrationContext, _ string) (string, error) {
	work := ctx.ScheduleActivity("Slow", "")
	timeout := ctx.ScheduleTimer(100 * time.Millisecond)
	if ctx.Select(work, timeout) == 1 {
		return "", errors.New("timeout")
	}
	return work.Await()
}

func TestTurnSelectFirstTurnSchedulesBoth(t *testing.T) {
	out := turnOn(t, timeoutRace, nil, startMessage(""))

	assert.Equal(t, turnContinue, out.result.kind)
	assert.Equal(t, []string{"OrchestrationStarted", "ActivityScheduled", "TimerCreated"}, kinds(out.delta))
	require.Len(t, out.orchestratorItems, 1)
	timer := out.orchestratorItems[0].(cdb.TimerFiredMessage)
	assert.Equal(t, uint64(3), timer.ID)
	assert.Equal(t, uint64(testClock.Add(100*time.Millisecond).UnixMilli()), timer.FireAtMs)
}

func TestTurnSelectLoserActivityIsCancelled(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.ActivityScheduled{Name: "Slow"}), ev(3, cdb.TimerCreated{FireAtMs: 9})}
	out := turnOn(t, timeoutRace, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 3, FireAtMs: 9})

	require.Equal(t, turnFailed, out.result.kind)
	assert.Equal(t, "timeout", out.result.details.DisplayMessage())
	assert.Equal(t, []string{"TimerFired", "ActivityCancelRequested", "OrchestrationFailed"}, kinds(out.delta))
	crumb := out.delta[1]
	assert.Equal(t, cdb.ActivityCancelRequested{Reason: "dropped_future"}, crumb.Kind)
	assert.Equal(t, uint64(2), *crumb.SourceEventID)
	assert.Equal(t, []cdb.ScheduledActivityIdentifier{{Instance: testInstance, ExecutionID: 1, ActivityID: 2}}, out.cancelled)
}

func TestTurnSelectWinnerIsFirstInHistory(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.ActivityScheduled{Name: "Slow"}), ev(3, cdb.TimerCreated{FireAtMs: 9})}
	// Both complete in one batch: the activity's completion comes first in
	// the history, so the activity wins even though both are ready.
	out := turnOn(t, timeoutRace, history,
		cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "fast enough"},
		cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 3, FireAtMs: 9})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "fast enough", out.result.output)
	assert.Empty(t, out.cancelled)
}

func TestTurnReplayMustDropTheSameLosers(t *testing.T) {
	// The history dropped the activity of event 2 as a Select loser; code
	// that now awaits it instead has changed.
	history := []cdb.Event{
		started(""), ev(2, cdb.ActivityScheduled{Name: "Slow"}), ev(3, cdb.TimerCreated{FireAtMs: 9}),
		evFrom(4, 3, cdb.TimerFired{FireAtMs: 9}), evFrom(5, 2, cdb.ActivityCancelRequested{Reason: "dropped_future"}),
		ev(6, cdb.TimerCreated{FireAtMs: 10}),
	}
	changed := func(ctx *OrchestrationContext, _ string) (string, error) {
		work := ctx.ScheduleActivity("Slow", "")
		_ = ctx.ScheduleTimer(time.Millisecond).wait()
		_ = ctx.ScheduleTimer(time.Millisecond).wait()
		return work.Await()
	}
	out := turnOn(t, changed, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 6, FireAtMs: 10})
	requireNondeterminism(t, out)
	assert.Contains(t, out.result.details.DisplayMessage(), "cancellation mismatch (activities)")

	same := func(ctx *OrchestrationContext, _ string) (string, error) {
		work := ctx.ScheduleActivity("Slow", "")
		ctx.Select(work, ctx.ScheduleTimer(time.Millisecond))
		return "", ctx.ScheduleTimer(time.Millisecond).wait()
	}
	out = turnOn(t, same, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 6, FireAtMs: 10})
	assert.Equal(t, turnCompleted, out.result.kind)
	assert.Empty(t, out.cancelled, "an already recorded loser is not cancelled again")
}

func waitGo(ctx *OrchestrationContext, _ string) (string, error) {
	return ctx.WaitForEvent("Go").Await()
}

func TestTurnExternalEventMatchesWaitingSubscription(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.ExternalSubscribed{Name: "Go"})}
	out := turnOn(t, waitGo, history, cdb.ExternalRaisedMessage{Instance: testInstance, Name: "Go", Data: "ok"})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "ok", out.result.output)
}

// TestTurnExternalEventBeforeUnbufferedSubscriptionIsNotDelivered:
// duroxide's subscription semantics, kept by WaitForEventUnbuffered.
func TestTurnExternalEventBeforeUnbufferedSubscriptionIsNotDelivered(t *testing.T) {
	waitGo := func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.WaitForEventUnbuffered("Go").Await()
	}
	out := turnOn(t, waitGo, nil, startMessage(""), cdb.ExternalRaisedMessage{Instance: testInstance, Name: "Go", Data: "early"})
	assert.Equal(t, turnContinue, out.result.kind)
	assert.Equal(t, []string{"OrchestrationStarted", "ExternalEvent", "ExternalSubscribed"}, kinds(out.delta))
}

func TestTurnExternalEventsMatchByArrivalIndex(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		a, b := ctx.WaitForEvent("E"), ctx.WaitForEvent("E")
		r := ctx.Join(b, a)
		return r[1].Value + r[0].Value, nil
	}
	history := []cdb.Event{started(""), ev(2, cdb.ExternalSubscribed{Name: "E"}), ev(3, cdb.ExternalSubscribed{Name: "E"})}
	out := turnOn(t, fn, history,
		cdb.ExternalRaisedMessage{Instance: testInstance, Name: "E", Data: "1"},
		cdb.ExternalRaisedMessage{Instance: testInstance, Name: "E", Data: "2"})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "12", out.result.output, "the first subscription takes the first event")
}

func TestTurnQueueMessageWaitsForSubscriber(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		first, err := ctx.DequeueEvent("q").Await()
		if err != nil {
			return "", err
		}
		second, err := ctx.DequeueEvent("q").Await()
		return first + "," + second, err
	}
	// Both messages arrive before any subscription: the quiescence loop
	// binds each new subscription and resolves it in the same turn.
	out := turnOn(t, fn, nil, startMessage(""),
		cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "a"},
		cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "b"})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "a,b", out.result.output)
}

func TestTurnContinueAsNewCarriesUnconsumedQueueMessages(t *testing.T) {
	status := "half way"
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		ctx.SetCustomStatus(&status)
		if _, err := ctx.DequeueEvent("q").Await(); err != nil {
			return "", err
		}
		return ctx.ContinueAsNew("next", WithVersion("2.0.0"))
	}
	out := turnOn(t, fn, nil, startMessage("first"),
		cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "taken"},
		cdb.QueueEventMessage{Instance: testInstance, Name: "q", Data: "left"},
		cdb.QueueEventMessage{Instance: testInstance, Name: "other", Data: "kept"})

	require.Equal(t, turnContinueAsNew, out.result.kind)
	assert.Equal(t, "OrchestrationContinuedAsNew", kinds(out.delta)[len(out.delta)-1])
	require.Len(t, out.orchestratorItems, 1)
	can := out.orchestratorItems[0].(cdb.ContinueAsNewMessage)
	assert.Equal(t, "next", can.Input)
	assert.Equal(t, "2.0.0", *can.Version)
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "left"}, {Name: "other", Data: "kept"}}, can.CarryForwardEvents)
	assert.Equal(t, &status, can.InitialCustomStatus)
	md := executionMetadata(out.delta)
	assert.Equal(t, statusContinuedAsNew, *md.Status)
	assert.Equal(t, "next", *md.Output)

	// The next execution starts with the carried messages and status.
	next := turnOn(t, func(ctx *OrchestrationContext, input string) (string, error) {
		v, err := ctx.DequeueEvent("q").Await()
		return input + ":" + v + ":" + *ctx.CustomStatus(), err
	}, out.delta, can)
	require.Equal(t, turnCompleted, next.result.kind)
	assert.Equal(t, "next:left:half way", next.result.output)
	assert.Equal(t, uint64(2), next.executionID)
	startedNext := next.delta[0].Kind.(cdb.OrchestrationStarted)
	assert.Equal(t, can.CarryForwardEvents, startedNext.CarryForwardEvents)
}

func TestTurnCancelRequestCancelsChildrenAndFails(t *testing.T) {
	child := func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleSubOrchestration("Child", "seed").Await()
	}
	first := turnOn(t, child, nil, startMessage(""))
	require.Len(t, first.orchestratorItems, 1)
	start := first.orchestratorItems[0].(cdb.StartOrchestrationMessage)
	assert.Equal(t, testInstance+"::sub::2", start.Instance)
	assert.Equal(t, testInstance, *start.ParentInstance)
	assert.Equal(t, uint64(2), *start.ParentID)

	out := turnOn(t, child, first.delta, cdb.CancelInstanceMessage{Instance: testInstance, Reason: "user_request"})
	require.Equal(t, turnCancelled, out.result.kind)
	assert.Equal(t, []string{"OrchestrationCancelRequested", "OrchestrationFailed"}, kinds(out.delta))
	details := out.delta[1].Kind.(cdb.OrchestrationFailed).Details
	assert.Equal(t, "canceled: user_request", details.DisplayMessage())
	assert.Equal(t, []cdb.WorkItem{cdb.CancelInstanceMessage{Instance: testInstance + "::sub::2", Reason: "parent canceled"}}, out.orchestratorItems)
}

func TestTurnChildReportsToParent(t *testing.T) {
	msg := cdb.StartOrchestrationMessage{Instance: testInstance, Orchestration: "Orch", Input: "in",
		ParentInstance: ptr("parent"), ParentID: ptr(uint64(7)), ExecutionID: 1}
	echo := func(_ *OrchestrationContext, input string) (string, error) { return "out:" + input, nil }
	out := turnOn(t, echo, nil, msg)

	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, []cdb.WorkItem{cdb.SubOrchestrationCompletedMessage{ParentInstance: "parent", ParentExecutionID: 1, ParentID: 7, Result: "out:in"}}, out.orchestratorItems)
	assert.Equal(t, "parent", *executionMetadata(out.delta).ParentInstanceID)
}

// continuesOnce continues as new once, then returns its input.
func continuesOnce(ctx *OrchestrationContext, input string) (string, error) {
	if input == "first" {
		return ctx.ContinueAsNew("second")
	}
	return "done:" + input, nil
}

// childStart starts testInstance as a child of parent, scheduled by the
// parent's execution parentExecution when it is not nil (duroxide 0.1.30).
func childStart(parent string, parentExecution *uint64) cdb.StartOrchestrationMessage {
	return cdb.StartOrchestrationMessage{Instance: testInstance, Orchestration: "Orch", Input: "first",
		ParentInstance: ptr(parent), ParentID: ptr(uint64(7)), ParentExecutionID: parentExecution, ExecutionID: 1}
}

func TestTurnChildContinueAsNewWritesItsParentIntoTheMessage(t *testing.T) {
	for _, tc := range []struct {
		name            string
		parentExecution *uint64
	}{
		{"with the parent execution", ptr(uint64(3))},
		{"without the parent execution", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := turnOn(t, continuesOnce, nil, childStart("parent", tc.parentExecution))
			require.Equal(t, turnContinueAsNew, first.result.kind)
			require.Len(t, first.orchestratorItems, 1)
			can := first.orchestratorItems[0].(cdb.ContinueAsNewMessage)
			assert.Equal(t, ptr("parent"), can.ParentInstance)
			assert.Equal(t, ptr(uint64(7)), can.ParentID)
			assert.Equal(t, tc.parentExecution, can.ParentExecutionID)
		})
	}
}

func TestTurnRootContinueAsNewWritesNoParent(t *testing.T) {
	first := turnOn(t, continuesOnce, nil, startMessage("first"))
	require.Len(t, first.orchestratorItems, 1)
	can := first.orchestratorItems[0].(cdb.ContinueAsNewMessage)
	assert.Nil(t, can.ParentInstance)
	assert.Nil(t, can.ParentID)
	assert.Nil(t, can.ParentExecutionID)
}

// The next execution of a child takes its parent from the ContinueAsNew
// when the message names one (duroxide 0.1.30), else from the previous
// execution's start (a message written by 0.1.29), and reports to it.
func TestTurnChildReportsToParentAfterContinueAsNew(t *testing.T) {
	first := turnOn(t, continuesOnce, nil, childStart("parent", ptr(uint64(3))))
	require.Equal(t, turnContinueAsNew, first.result.kind)
	written := first.orchestratorItems[0].(cdb.ContinueAsNewMessage)
	legacy := written
	legacy.ParentInstance, legacy.ParentID, legacy.ParentExecutionID = nil, nil, nil
	elsewhere := written
	elsewhere.ParentInstance, elsewhere.ParentID, elsewhere.ParentExecutionID = ptr("other-parent"), ptr(uint64(9)), nil

	cases := []struct {
		name            string
		previous        []cdb.Event // the previous execution's history, as the batch reads it
		message         cdb.ContinueAsNewMessage
		parent          string
		parentID        uint64
		parentExecution *uint64
		reportsTo       uint64 // the named execution, else testEnv's recovered 1
	}{
		{"the message's parent, with no previous start to read", nil, written, "parent", 7, ptr(uint64(3)), 3},
		{"the previous start's parent, for a 0.1.29 message", first.delta, legacy, "parent", 7, ptr(uint64(3)), 3},
		{"the message's parent over the previous start's", first.delta, elsewhere, "other-parent", 9, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := turnOn(t, continuesOnce, tc.previous, tc.message)
			require.Equal(t, turnCompleted, next.result.kind)
			assert.Equal(t, uint64(2), next.executionID)
			startedNext := next.delta[0].Kind.(cdb.OrchestrationStarted)
			assert.Equal(t, ptr(tc.parent), startedNext.ParentInstance)
			assert.Equal(t, ptr(tc.parentID), startedNext.ParentID)
			assert.Equal(t, tc.parentExecution, startedNext.ParentExecutionID)
			assert.Equal(t, []cdb.WorkItem{cdb.SubOrchestrationCompletedMessage{
				ParentInstance: tc.parent, ParentExecutionID: tc.reportsTo, ParentID: tc.parentID, Result: "done:second",
			}}, next.orchestratorItems)
			assert.Equal(t, tc.parent, *executionMetadata(next.delta).ParentInstanceID)
		})
	}
}

func TestTurnDetachedStartHonouredAtCompletion(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.StartOrchestration("Chained", "W1", "A")
		return "scheduled", nil
	}
	out := turnOn(t, fn, nil, startMessage(""))
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationChained", "OrchestrationCompleted"}, kinds(out.delta))
	assert.Equal(t, []cdb.WorkItem{cdb.StartOrchestrationMessage{Instance: "W1", Orchestration: "Chained", Input: "A", ExecutionID: 1}}, out.orchestratorItems)
}

func TestTurnCustomStatusAndKVAreEventsReplayedInOrder(t *testing.T) {
	status := "busy"
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.SetCustomStatus(&status)
		ctx.SetKV("k", "v1")
		before, _ := ctx.GetKV("k")
		if err := ctx.ScheduleTimer(time.Millisecond).wait(); err != nil {
			return "", err
		}
		ctx.ClearKV("k")
		_, after := ctx.GetKV("k")
		return before + "," + map[bool]string{true: "still", false: "gone"}[after], nil
	}
	first := turnOn(t, fn, nil, startMessage(""))
	assert.Equal(t, []string{"OrchestrationStarted", "CustomStatusUpdated", "KeyValueSet", "TimerCreated"}, kinds(first.delta))

	out := turnOn(t, fn, first.delta, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 4})
	require.Equal(t, turnCompleted, out.result.kind)
	assert.Equal(t, "v1,gone", out.result.output)
	assert.Equal(t, []string{"TimerFired", "KeyValueCleared", "OrchestrationCompleted"}, kinds(out.delta))

	// Code that now sets another key no longer matches its history.
	changed := func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.SetCustomStatus(&status)
		ctx.SetKV("other", "v1")
		return "", ctx.ScheduleTimer(time.Millisecond).wait()
	}
	requireNondeterminism(t, turnOn(t, changed, first.delta, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 4}))
}

func TestTurnSeesKVSnapshotOfEarlierExecutions(t *testing.T) {
	env := testEnv()
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		v, ok := ctx.GetKV("k")
		if !ok {
			return "", errors.New("missing")
		}
		return v, nil
	}
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: 1, name: "Orch", version: "1.0.0", fn: fn,
		batch:      readBatch(testInstance, []cdb.WorkItem{startMessage("")}, historyState{}, env.log),
		kvSnapshot: map[string]cdb.KVEntry{"k": {Value: "from before"}},
	}, env)
	require.NoError(t, err)
	assert.Equal(t, "from before", out.result.output)
}

func TestTurnLimitViolationFailsOrchestration(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		ctx.ScheduleActivity("A", "", WithTag(string(make([]byte, cdb.MaxTagNameBytes+1))))
		return "", ctx.ScheduleTimer(time.Second).wait()
	}
	out := turnOn(t, fn, nil, startMessage(""))
	require.Equal(t, turnFailed, out.result.kind)
	assert.Contains(t, out.result.details.DisplayMessage(), "tag size")
	assert.Empty(t, out.workerItems, "the turn's work is not started")
	assert.Equal(t, "OrchestrationFailed", kinds(out.delta)[len(out.delta)-1])
}

func TestTurnSystemFailureFromActivityAbortsTurn(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.ActivityScheduled{Name: "A"})}
	poison := cdb.PoisonError{AttemptCount: 11, MaxAttempts: 10,
		MessageType: cdb.PoisonActivity{Instance: testInstance, ExecutionID: 1, ActivityName: "A", ActivityID: 2}}
	out := turnOn(t, callA, history, cdb.ActivityFailedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Details: poison})
	require.Equal(t, turnFailed, out.result.kind)
	assert.Equal(t, poison, out.result.details)
	assert.Equal(t, []string{"ActivityFailed", "OrchestrationFailed"}, kinds(out.delta))
}

func TestTurnTerminalHistoryRunsNothing(t *testing.T) {
	history := []cdb.Event{started(""), ev(2, cdb.OrchestrationCompleted{Output: "x"})}
	calls := 0
	fn := func(*OrchestrationContext, string) (string, error) { calls++; return "", nil }
	out := turnOn(t, fn, history, cdb.ExternalRaisedMessage{Instance: testInstance, Name: "late"})
	assert.Equal(t, turnContinue, out.result.kind)
	assert.Zero(t, calls)
}

func TestTurnLeavesNoGoroutineBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 50 {
		turnOn(t, timeoutRace, nil, startMessage("")) // suspended at the end of every turn
	}
	assert.True(t, goroutinesSettle(before), "suspended orchestrations must be unwound")
}

func TestTurnAbortSurvivesSwallowedSentinel(t *testing.T) {
	before := runtime.NumGoroutine()
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		func() {
			defer func() { _ = recover() }() // careless code swallowing every panic
			_ = ctx.ScheduleTimer(time.Second).wait()
		}()
		return "", ctx.ScheduleTimer(time.Second).wait()
	}
	out := turnOn(t, fn, nil, startMessage(""))
	assert.Equal(t, turnContinue, out.result.kind)
	assert.True(t, goroutinesSettle(before))
}

// goroutinesSettle waits (up to a second) for the goroutine count to come
// back to at most n. It polls in the calling goroutine: assert.Eventually
// would add goroutines of its own.
func goroutinesSettle(n int) bool {
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func TestChildIDNamesParentExecution(t *testing.T) {
	for _, c := range []struct {
		child string
		exec  uint64
		ok    bool
	}{
		{"p::" + autoChildSuffix(childIDDotted, 1, 2), 1, true},
		{"p::" + autoChildSuffix(childIDDotted, 7, 3), 7, true},
		{"p::" + autoChildSuffix(childIDUnderscored, 7, 3), 7, true},
		{"p::sub::x", 0, false},
		{"explicit-child", 0, false},
		{"q::sub::2", 0, false}, // another parent's child
	} {
		exec, ok := executionFromChildID("p", c.child)
		assert.Equal(t, c.ok, ok, c.child)
		assert.Equal(t, c.exec, exec, c.child)
	}
}
