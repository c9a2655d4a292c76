package durable

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

func TestQueueRaceRulesFollowTheStartsStamp(t *testing.T) {
	for stamp, want := range map[string]bool{
		"0.1.29": false, "0.1.30": false, "0.1.31": true, "0.1.32": true, "1.0.0": true, "": false, "not-a-version": false,
	} {
		assert.Equal(t, want, queueRaceRulesFor(stamp), "stamp %q", stamp)
	}
	assert.True(t, queueRaceRulesFor(DuroxideVersion), "this runtime stamps 0.1.32: its own new executions follow the queue-race rules")
}

// competition races two dequeues against two timers, the first pair
// before the second: the first timer wins, its dequeue is dropped, and a
// message that arrives next goes to the second dequeue under the
// queue-race rules, to the dropped one under the legacy rules.
func competition(ctx *OrchestrationContext, _ string) (string, error) {
	first, second := ctx.DequeueEvent("q"), ctx.DequeueEvent("q")
	t0, t1 := ctx.ScheduleTimer(30*time.Second), ctx.ScheduleTimer(60*time.Second)
	ctx.Select(first, t0)
	if ctx.Select(second, t1) == 0 {
		return second.Await()
	}
	return "second-timeout", nil
}

// competitionOutcome replays competition stamped stamp over a batch that
// fires the first timer, delivers a message, then fires the second.
func competitionOutcome(t *testing.T, stamp string) ReplayResult {
	t.Helper()
	_, res := raceBetweenTimers(t, "race", "Competition", stamp, competition,
		cdb.QueueEventMessage{Instance: "race", Name: "q", Data: "first"})
	return res
}

// raceBetweenTimers replays fn, an orchestration stamped stamp that
// schedules two timers in its first turn, then a second turn over a batch
// that fires the first timer, delivers arrival, then fires the second. It
// returns the history before the second turn and what that turn decided.
func raceBetweenTimers(t *testing.T, instance, name, stamp string, fn OrchestrationFunc, arrival cdb.WorkItem) ([]cdb.Event, ReplayResult) {
	t.Helper()
	ctx := context.Background()
	start := newEvent(instance, 1, 1, nil, 0, cdb.OrchestrationStarted{Name: name, Version: "1.0.0"})
	start.DuroxideVersion = stamp
	first, err := Replay(ctx, instance, 1, []cdb.Event{start}, nil, fn)
	require.NoError(t, err)
	require.Equal(t, StateRunning, first.State)
	history := append([]cdb.Event{start}, first.Delta...)
	var timers []cdb.WorkItem
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.TimerCreated); ok {
			timers = append(timers, cdb.TimerFiredMessage{Instance: instance, ExecutionID: 1, ID: ev.EventID})
		}
	}
	require.Len(t, timers, 2)
	res, err := Replay(ctx, instance, 1, history, []cdb.WorkItem{timers[0], arrival, timers[1]}, fn)
	require.NoError(t, err)
	return history, res
}

// TestADroppedDequeueLeavesMatchingAtOnceFromV0131: under the queue-race
// rules a Select loser's dequeue takes no message from the moment it is
// dropped; executions stamped before 0.1.31 keep the legacy decision, so
// their recorded histories replay as they were recorded.
func TestADroppedDequeueLeavesMatchingAtOnceFromV0131(t *testing.T) {
	legacy := competitionOutcome(t, "0.1.30")
	assert.Equal(t, ReplayResult{State: StateCompleted, Output: "second-timeout"}, withoutDelta(legacy))
	current := competitionOutcome(t, "0.1.31")
	assert.Equal(t, ReplayResult{State: StateCompleted, Output: "first"}, withoutDelta(current))
}

func withoutDelta(r ReplayResult) ReplayResult {
	r.Delta = nil
	return r
}

// TestADroppedWaitLeavesMatchingAtOnceFromV0131: the same for events: an
// event raised after a wait was dropped goes to the next wait.
func TestADroppedWaitLeavesMatchingAtOnceFromV0131(t *testing.T) {
	waits := func(ctx *OrchestrationContext, _ string) (string, error) {
		first, second := ctx.WaitForEvent("e"), ctx.WaitForEvent("e")
		t0, t1 := ctx.ScheduleTimer(30*time.Second), ctx.ScheduleTimer(60*time.Second)
		ctx.Select(first, t0)
		if ctx.Select(second, t1) == 0 {
			return second.Await()
		}
		return "second-timeout", nil
	}
	outcome := func(stamp string) ReplayResult {
		_, res := raceBetweenTimers(t, "wait", "Waits", stamp, waits, cdb.ExternalRaisedMessage{Instance: "wait", Name: "e", Data: "raised"})
		return withoutDelta(res)
	}
	assert.Equal(t, ReplayResult{State: StateCompleted, Output: "second-timeout"}, outcome("0.1.30"))
	assert.Equal(t, ReplayResult{State: StateCompleted, Output: "raised"}, outcome("0.1.31"))
}

// TestContinueAsNewCarriesTheUnreadArrivals: under the queue-race rules
// the carried messages are those the code did not read, in arrival order,
// also when one the code never read comes before one it read.
func TestContinueAsNewCarriesTheUnreadArrivals(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := func(id uint64, source *uint64, kind cdb.EventKind) cdb.Event {
		return newEvent("i", 1, id, source, 0, kind)
	}
	history := []cdb.Event{
		ev(1, nil, cdb.OrchestrationStarted{Name: "O", Version: "1.0.0"}),
		ev(2, nil, cdb.QueueSubscribed{Name: "q"}), // held, never awaited
		ev(3, nil, cdb.QueueSubscribed{Name: "q"}), // awaited
		ev(4, nil, cdb.QueueEventDelivered{Name: "q", Data: "m1"}),
		ev(5, nil, cdb.QueueEventDelivered{Name: "q", Data: "m2"}),
		ev(6, nil, cdb.QueueEventDelivered{Name: "other", Data: "o1"}),
	}
	carried := func(cancelled, read map[uint64]bool) []cdb.CarryForwardEvent {
		return unreadQueueMessages(history, cancelled, read, log, "i")
	}
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "m1"}, {Name: "other", Data: "o1"}},
		carried(nil, map[uint64]bool{3: true}), "the held subscription's arrival is carried, the read one is not")
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "m2"}, {Name: "other", Data: "o1"}},
		carried(map[uint64]bool{2: true}, map[uint64]bool{3: true}), "a dropped subscription takes no arrival")
	cancelledInHistory := append(history, ev(7, ptr(uint64(2)), cdb.QueueSubscriptionCancelled{Reason: droppedFutureReason}))
	assert.Equal(t, []cdb.CarryForwardEvent{{Name: "q", Data: "m2"}, {Name: "other", Data: "o1"}},
		unreadQueueMessages(cancelledInHistory, nil, map[uint64]bool{3: true}, log, "i"), "nor does one cancelled in history")
}

// TestReplayOfARecordedHistoryAppendsNothing: Replay of a finished
// execution's history without its terminal event decides the same output
// and appends no event.
func TestReplayOfARecordedHistoryAppendsNothing(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		fn := func(ctx *OrchestrationContext, input string) (string, error) {
			wait, timer := ctx.WaitForEvent("go"), ctx.ScheduleTimer(time.Minute)
			if ctx.Select(wait, timer) == 0 {
				return wait.Await()
			}
			return "timeout", nil
		}
		h.orchestration("Replayed", fn)
		h.run()
		h.start("replayed", "Replayed", "")
		h.waitForHistory("replayed", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "replayed", "go", "went"))
		require.Equal(t, "went", h.completed("replayed"))
		history, err := h.client.ReadHistory(h.ctx, "replayed")
		require.NoError(t, err)
		require.IsType(t, cdb.OrchestrationCompleted{}, history[len(history)-1].Kind)
		res, err := Replay(h.ctx, "replayed", 1, history[:len(history)-1], nil, fn)
		require.NoError(t, err)
		assert.Equal(t, ReplayResult{State: StateCompleted, Output: "went"}, withoutDelta(res))
		assert.Empty(t, res.Delta, "replay appended history")
	})
}
