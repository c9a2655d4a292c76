package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// VisibleAtReporting checks the Go-only times a provider may hand back with
// what it fetches, which duroxide has not: OrchestrationItem.VisibleAt and
// ActivityExecuteMessage.VisibleAt, when the work became takeable, from
// which a runtime measures schedule-to-start. Run it with RunModule on a
// provider that reports them.
func VisibleAtReporting() Module {
	return Module{Name: "visible_at", Tests: []Test{
		{Name: "TestAnOrchestrationItemIsTakeableFromItsEnqueue", Run: TestAnOrchestrationItemIsTakeableFromItsEnqueue},
		{Name: "TestADelayedOrchestrationItemIsTakeableFromItsDueTime", Run: TestADelayedOrchestrationItemIsTakeableFromItsDueTime},
		{Name: "TestAWorkItemIsTakeableFromItsEnqueue", Run: TestAWorkItemIsTakeableFromItsEnqueue},
		{Name: "TestAnAbandonedWorkItemIsTakeableFromItsDelaysEnd", Run: TestAnAbandonedWorkItemIsTakeableFromItsDelaysEnd},
		{Name: "TestAContinueAsNewIsTakeableFromItsAck", Run: TestAContinueAsNewIsTakeableFromItsAck},
	}}
}

// visibleAtSlack is how far from the provider's clock, read around an
// enqueue, the item's time may lie: a provider may stamp it with a
// sequence's millisecond or its writer's clock (the Cosmos provider does),
// close to but not exactly the clock read.
const visibleAtSlack = time.Second

// visibleAtDelay is the delay of the delayed items: longer than
// visibleAtSlack, so a time still at the enqueue fails.
const visibleAtDelay = 1500 * time.Millisecond

// providerClock reads the provider's own clock: its ServiceTime when it has
// one (the Cosmos provider's, the store's time), else this process's.
func providerClock(p cdb.Provider) func() time.Time {
	if c, ok := p.(interface{ ServiceTime() time.Time }); ok {
		return c.ServiceTime
	}
	return time.Now
}

// assertAround asserts at lies between before and after, give or take
// visibleAtSlack (at is in milliseconds, so before is taken to its ms).
func assertAround(t *testing.T, at, before, after time.Time, what string) {
	t.Helper()
	require.False(t, at.IsZero(), "%s: VisibleAt is reported", what)
	assert.False(t, at.Before(before.Truncate(time.Millisecond).Add(-visibleAtSlack)), "%s: VisibleAt %v is not before the enqueue (%v)", what, at, before)
	assert.False(t, at.After(after.Add(visibleAtSlack)), "%s: VisibleAt %v is not after the enqueue (%v)", what, at, after)
}

// TestAnOrchestrationItemIsTakeableFromItsEnqueue: a batch enqueued without
// a delay is takeable from its enqueue.
func TestAnOrchestrationItemIsTakeableFromItsEnqueue(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	now := providerClock(p)
	before := now()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("visible-now"), 0))
	after := now()
	waitPastSlack(ctx, t)
	item, _ := fetchOrchestration(ctx, t, p, lockLong, "the start is queued")
	assertAround(t, item.VisibleAt, before, after, "a start")
}

// TestADelayedOrchestrationItemIsTakeableFromItsDueTime: a message enqueued
// with a delay is takeable from its due time, not from its enqueue.
func TestADelayedOrchestrationItemIsTakeableFromItsDueTime(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	now := providerClock(p)
	before := now()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("visible-later"), visibleAtDelay))
	after := now()
	item := awaitOrchestration(ctx, t, p)
	assertAround(t, item.VisibleAt, before.Add(visibleAtDelay), after.Add(visibleAtDelay), "a delayed start")
	assert.False(t, item.VisibleAt.Before(before.Truncate(time.Millisecond).Add(visibleAtDelay)),
		"VisibleAt %v is at least the due time %v", item.VisibleAt, before.Add(visibleAtDelay))
}

// TestAWorkItemIsTakeableFromItsEnqueue: an activity enqueued for the
// worker is takeable from its enqueue.
func TestAWorkItemIsTakeableFromItsEnqueue(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	now := providerClock(p)
	before := now()
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("visible-work", cdb.InitialExecutionID, 2, "Charge", "{}")))
	after := now()
	waitPastSlack(ctx, t)
	item, _ := fetchWork(ctx, t, p, lockLong, "the activity is queued")
	act, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "an ActivityExecute, got %s", item.Kind())
	assertAround(t, act.VisibleAt, before, after, "an activity")
}

// TestAnAbandonedWorkItemIsTakeableFromItsDelaysEnd: an activity given back
// with a delay is takeable again when the delay ends, so its next fetch's
// VisibleAt is then, not its first enqueue.
func TestAnAbandonedWorkItemIsTakeableFromItsDelaysEnd(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	now := providerClock(p)
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("visible-retry", cdb.InitialExecutionID, 2, "Charge", "{}")))
	_, token := fetchWork(ctx, t, p, lockLong, "the activity is queued")
	before := now()
	require.NoError(t, p.AbandonWorkItem(ctx, token, visibleAtDelay, false))
	after := now()
	act := awaitWork(ctx, t, p)
	assertAround(t, act.VisibleAt, before.Add(visibleAtDelay), after.Add(visibleAtDelay), "an abandoned activity")
	assert.False(t, act.VisibleAt.Before(before.Truncate(time.Millisecond).Add(visibleAtDelay)),
		"VisibleAt %v is at least the delay's end %v", act.VisibleAt, before.Add(visibleAtDelay))
}

// visibleAtPoll is how often the delayed tests look for their item.
const visibleAtPoll = 50 * time.Millisecond

// awaitOrchestration fetches until an orchestration item comes, for an item
// that becomes visible later; the test's context bounds the wait.
func awaitOrchestration(ctx context.Context, t *testing.T, p cdb.Provider) *cdb.OrchestrationItem {
	t.Helper()
	for {
		item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
		require.NoError(t, err)
		if item != nil {
			return item
		}
		sleepOrFail(ctx, t)
	}
}

// awaitWork fetches until an activity comes, as awaitOrchestration.
func awaitWork(ctx context.Context, t *testing.T, p cdb.Provider) cdb.ActivityExecuteMessage {
	t.Helper()
	for {
		item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
		if item != nil {
			act, ok := item.(cdb.ActivityExecuteMessage)
			require.True(t, ok, "an ActivityExecute, got %s", item.Kind())
			return act
		}
		sleepOrFail(ctx, t)
	}
}

// waitPastSlack lets more than visibleAtSlack pass between an enqueue and
// its fetch, so a provider that reports its fetch's time fails.
func waitPastSlack(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-ctx.Done():
		require.FailNow(t, "the test's time ran out", ctx.Err())
	case <-time.After(visibleAtDelay):
	}
}

// sleepOrFail waits visibleAtPoll, failing the test when its time is up.
func sleepOrFail(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-ctx.Done():
		require.FailNow(t, "the delayed item never came", ctx.Err())
	case <-time.After(visibleAtPoll):
	}
}

// TestAContinueAsNewIsTakeableFromItsAck: the ContinueAsNew message a turn
// writes for its own instance is takeable from that turn's ack (the Cosmos
// provider writes it visible from the start, with no due time of its own).
func TestAContinueAsNewIsTakeableFromItsAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	now := providerClock(p)
	const inst = "visible-can"
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong, "the start is queued")
	can := cdb.StatusContinuedAsNew
	before := now()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent(inst, 1), newEvent(2, inst, 1, cdb.OrchestrationContinuedAsNew{Input: "next"})},
		nil, []cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: inst, Orchestration: "TestOrch", Input: "next", Version: ptr("1.0.0")}},
		cdb.ExecutionMetadata{Status: &can, Output: ptr("next")}, nil))
	after := now()
	waitPastSlack(ctx, t)
	item, _ := fetchOrchestration(ctx, t, p, lockLong, "the continue-as-new is queued")
	assertAround(t, item.VisibleAt, before, after, "a continue-as-new")
}
