package durable

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// losersInReverse schedules two futures of each kind and a timer, then
// selects with the later schedule of each kind first, so Select drops the
// losers against their id order.
func losersInReverse(ctx *OrchestrationContext, _ string) (string, error) {
	a1, a2 := ctx.ScheduleActivity("A", "1"), ctx.ScheduleActivity("A", "2")                 // 2, 3
	w1, w2 := ctx.WaitForEvent("x"), ctx.WaitForEvent("y")                                   // 4, 5
	q1, q2 := ctx.DequeueEvent("q"), ctx.DequeueEvent("r")                                   // 6, 7
	c1, c2 := ctx.ScheduleSubOrchestration("C", "1"), ctx.ScheduleSubOrchestration("C", "2") // 8, 9
	timer := ctx.ScheduleTimer(time.Second)                                                  // 10
	if ctx.Select(q2, c2, w2, a2, q1, c1, w1, a1, timer) != 8 {
		return "", errors.New("the timer lost")
	}
	return "timed out", nil
}

// duroxide 0.1.32 writes the cancellation breadcrumbs of a turn's Select
// losers in id order within each kind (activities, sub-orchestrations,
// external waits, queue waits), whatever order the code dropped them in;
// the side effects follow the same order.
func TestDroppedFutureBreadcrumbsAreInIDOrderWithinEachKind(t *testing.T) {
	first := turnOn(t, losersInReverse, nil, startMessage(""))
	require.Equal(t, turnContinue, first.result.kind)
	out := turnOn(t, losersInReverse, first.delta, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 10})
	require.Equal(t, turnCompleted, out.result.kind, "%#v", out.result.details)

	type crumb struct {
		kind   string
		source uint64
	}
	var crumbs []crumb
	for _, e := range out.delta {
		switch e.Kind.(type) {
		case cdb.ActivityCancelRequested, cdb.SubOrchestrationCancelRequested,
			cdb.ExternalSubscribedCancelled, cdb.QueueSubscriptionCancelled:
			crumbs = append(crumbs, crumb{e.Kind.Type(), *e.SourceEventID})
		}
	}
	assert.Equal(t, []crumb{
		{"ActivityCancelRequested", 2}, {"ActivityCancelRequested", 3},
		{"SubOrchestrationCancelRequested", 8}, {"SubOrchestrationCancelRequested", 9},
		{"ExternalSubscribedCancelled", 4}, {"ExternalSubscribedCancelled", 5},
		{"ExternalSubscribedPersistentCancelled", 6}, {"ExternalSubscribedPersistentCancelled", 7}, // QueueSubscriptionCancelled
	}, crumbs)
	assert.Equal(t, []cdb.ScheduledActivityIdentifier{
		{Instance: testInstance, ExecutionID: 1, ActivityID: 2}, {Instance: testInstance, ExecutionID: 1, ActivityID: 3},
	}, out.cancelled)
	var cancelledChildren []string
	for _, item := range out.orchestratorItems {
		if c, ok := item.(cdb.CancelInstanceMessage); ok {
			cancelledChildren = append(cancelledChildren, c.Instance)
		}
	}
	assert.Equal(t, []string{testInstance + "::sub::8", testInstance + "::sub::9"}, cancelledChildren)
}

// A history recorded with the losers' breadcrumbs in drop order (before
// 0.1.32) replays as recorded: recorded losers are checked as a set.
func TestBreadcrumbsRecordedInDropOrderReplay(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		w1, w2 := ctx.WaitForEvent("x"), ctx.WaitForEvent("y")
		if ctx.Select(w2, w1, ctx.ScheduleTimer(time.Second)) != 2 {
			return "", errors.New("the timer lost")
		}
		return "slept", ctx.ScheduleTimer(time.Second).wait()
	}
	history := []cdb.Event{
		started(""), ev(2, cdb.ExternalSubscribed{Name: "x"}), ev(3, cdb.ExternalSubscribed{Name: "y"}),
		ev(4, cdb.TimerCreated{FireAtMs: 9}), evFrom(5, 4, cdb.TimerFired{FireAtMs: 9}),
		evFrom(6, 3, cdb.ExternalSubscribedCancelled{Reason: "dropped_future"}),
		evFrom(7, 2, cdb.ExternalSubscribedCancelled{Reason: "dropped_future"}),
		ev(8, cdb.TimerCreated{FireAtMs: 10}),
	}
	out := turnOn(t, fn, history, cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: 8, FireAtMs: 10})
	require.Equal(t, turnCompleted, out.result.kind, "%#v", out.result.details)
	assert.Equal(t, []string{"TimerFired", "OrchestrationCompleted"}, kinds(out.delta))
}
