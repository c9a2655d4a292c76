package providertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// queueSemanticsTests is duroxide's provider_validation/queue_semantics.rs:
// FIFO order, peek-lock, delayed visibility and orphan dropping.
func queueSemanticsTests() []Test {
	return []Test{
		{Name: "TestWorkerQueueFIFOOrdering", Run: testWorkerQueueFIFOOrdering},
		{Name: "TestWorkerPeekLockSemantics", Run: testWorkerPeekLockSemantics},
		{Name: "TestWorkerAckAtomicity", Run: testWorkerAckAtomicity},
		{Name: "TestTimerDelayedVisibility", Run: testTimerDelayedVisibility},
		{Name: "TestLostLockTokenHandling", Run: testLostLockTokenHandling},
		{Name: "TestWorkerItemImmediateVisibility", Run: testWorkerItemImmediateVisibility},
		{Name: "TestWorkerDelayedVisibilitySkipsFutureItems", Run: testWorkerDelayedVisibilitySkipsFutureItems},
		{Name: "TestOrphanQueueMessagesDropped", Run: testOrphanQueueMessagesDropped},
	}
}

// qsRequireActivity asserts that item is an ActivityExecuteMessage and returns it.
func qsRequireActivity(t *testing.T, item cdb.WorkItem) cdb.ActivityExecuteMessage {
	t.Helper()
	activity, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "expected ActivityExecuteMessage, got %T", item)
	return activity
}

// qsCreateTestOrch is the instance setup queue_semantics.rs writes out:
// enqueue the start, fetch it and ack OrchestrationStarted with default
// metadata.
func qsCreateTestOrch(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong, "the start of %s must be fetchable", instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent(instance, 1)}, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// Worker items come back in enqueue order.
func testWorkerQueueFIFOOrdering(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	for i := uint64(0); i < 5; i++ {
		require.NoError(t, p.EnqueueForWorker(ctx,
			activityExecute("instance-A", 1, i, fmt.Sprintf("Activity%d", i), fmt.Sprintf("input%d", i))))
	}
	for i := uint64(0); i < 5; i++ {
		item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
		require.NotNil(t, item, "item %d must be fetchable", i)
		activity := qsRequireActivity(t, item)
		require.Equal(t, i, activity.ID)
		require.Equal(t, fmt.Sprintf("Activity%d", i), activity.Name)
	}
	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.Nil(t, item, "the worker queue must be empty")
}

// A fetched worker item stays invisible until acked, and is gone
// after the ack.
func testWorkerPeekLockSemantics(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("instance-A", 1, 1, "Activity1", "input1")))
	item, token := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item)
	qsRequireActivity(t, item)

	second, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.Nil(t, second, "a locked item must not be fetched again")

	require.NoError(t, p.AckWorkItem(ctx, token, activityCompleted("instance-A", 1, 1, "result1")))

	after, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.Nil(t, after, "the acked item must be gone")
}

// A worker ack deletes the item and enqueues its completion in one
// step.
func testWorkerAckAtomicity(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	qsCreateTestOrch(ctx, t, p, "instance-A")

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("instance-A", 1, 1, "Activity1", "input1")))
	item, token := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item)
	require.NoError(t, p.AckWorkItem(ctx, token, activityCompleted("instance-A", 1, 1, "result1")))

	after, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.Nil(t, after, "the worker queue must be empty after the ack")

	orch, _ := fetchOrchestration(ctx, t, p, lockLong, "the completion must be on the orchestrator queue")
	require.Equal(t, "instance-A", orch.Instance)
	require.Len(t, orch.Messages, 1)
	require.IsType(t, cdb.ActivityCompletedMessage{}, orch.Messages[0])
}

// A TimerFired enqueued with a delay is invisible until the delay
// has passed.
func testTimerDelayedVisibility(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	qsCreateTestOrch(ctx, t, p, "instance-A")

	delay := 5 * time.Second
	require.NoError(t, p.EnqueueForOrchestrator(ctx,
		cdb.TimerFiredMessage{Instance: "instance-A", ExecutionID: 1, ID: 1, FireAtMs: 0}, delay))

	early, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.Nil(t, early, "the timer must not be visible before its delay")

	time.Sleep(5100 * time.Millisecond)

	item, _ := fetchOrchestration(ctx, t, p, lockLong, "the timer must be visible after its delay")
	require.Equal(t, "instance-A", item.Instance)
	require.Len(t, item.Messages, 1)
	require.IsType(t, cdb.TimerFiredMessage{}, item.Messages[0])
}

// A worker item whose lock token was lost is redelivered after
// the lock expires.
func testLostLockTokenHandling(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("instance-A", 1, 1, "Activity1", "input1")))
	item, _ := fetchWorkIfAny(ctx, t, p, lock)
	require.NotNil(t, item)
	// The token is dropped without an ack (a crashed worker).

	locked, _ := fetchWorkIfAny(ctx, t, p, lock)
	require.Nil(t, locked, "the item must stay locked")

	time.Sleep(lock + 100*time.Millisecond)

	again, _ := fetchWorkIfAny(ctx, t, p, lock)
	require.NotNil(t, again, "the item must be redelivered after its lock expired")
	qsRequireActivity(t, again)
}

// A newly enqueued worker item is visible at once.
func testWorkerItemImmediateVisibility(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("test-immediate-vis", 1, 1, "TestActivity", "test")))
	item, token := fetchWorkIfAny(ctx, t, p, lock)
	require.NotNil(t, item, "Newly enqueued worker item should be immediately visible")
	require.Equal(t, "TestActivity", qsRequireActivity(t, item).Name)

	require.NoError(t, p.AckWorkItem(ctx, token, activityCompleted("test-immediate-vis", 1, 1, "done")))
}

// An unlocked item whose visibility lies in the future (abandoned
// with a delay) is skipped until the delay has passed.
func testWorkerDelayedVisibilitySkipsFutureItems(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	// The second item's lock is held across the 600 ms wait for the first
	// one's delay and two more fetches: at a 1 s lock, a loaded machine
	// (or a slow store) let it expire before its ack. No lock is meant to
	// expire here, so the lock is long.
	lock := max(f.LockTimeout(), 5*time.Second)
	const inst = "test-delayed-vis"

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute(inst, 1, 1, "Activity1", "first")))
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute(inst, 1, 2, "Activity2", "second")))

	item1, token1 := fetchWorkIfAny(ctx, t, p, lock)
	require.NotNil(t, item1)
	require.Equal(t, uint64(1), qsRequireActivity(t, item1).ID)

	delay := 500 * time.Millisecond
	// The item is hidden until at least this instant: the store counts
	// the delay from when it handles the abandon, which is later.
	hiddenUntil := time.Now().Add(delay)
	require.NoError(t, p.AbandonWorkItem(ctx, token1, delay, false))

	// Even with the delay run out, the second item is older: it comes first.
	item2, token2 := fetchWorkIfAny(ctx, t, p, lock)
	require.NotNil(t, item2, "Should skip delayed item and fetch second item")
	require.Equal(t, uint64(2), qsRequireActivity(t, item2).ID, "Should skip delayed item and fetch second item")

	none, noneToken := fetchWorkIfAny(ctx, t, p, lock)
	if time.Now().Before(hiddenUntil) {
		require.Nil(t, none, "No items should be available while the first one's delay runs")
	} else {
		// A loaded machine took longer than the delay to get here: the
		// fetch may rightly have found the first item visible again. What
		// stays checked is that it was held at least until its delay ran out.
		t.Logf("the delay ran out before the emptiness check ended; only the redelivery is checked")
	}
	item3, token3 := none, noneToken
	if item3 == nil {
		time.Sleep(time.Until(hiddenUntil) + 100*time.Millisecond)
		item3, token3 = fetchWorkIfAny(ctx, t, p, lock)
	}
	require.NotNil(t, item3, "First item should now be visible after delay")
	require.Equal(t, uint64(1), qsRequireActivity(t, item3).ID, "First item should now be visible after delay")

	require.NoError(t, p.AckWorkItem(ctx, token2, activityCompleted(inst, 1, 2, "done")))
	require.NoError(t, p.AckWorkItem(ctx, token3, activityCompleted(inst, 1, 1, "done")))
}

// QueueMessages for an instance that was never started are
// dropped by the fetch; those for an existing instance are delivered.
func testOrphanQueueMessagesDropped(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := 5 * time.Second

	// Part 1: messages for a non-existent instance are dropped.
	for _, data := range []string{"v1", "v2"} {
		require.NoError(t, p.EnqueueForOrchestrator(ctx,
			cdb.QueueEventMessage{Instance: "orphan-test", Name: "ConfigUpdate", Data: data}, 0))
	}
	first, _, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err)
	require.Nil(t, first, "Expected None for orphan queue messages")
	second, _, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err)
	require.Nil(t, second, "Orphan messages should have been deleted, not left in queue")

	// Part 2: a message for an existing instance is kept.
	CreateInstance(ctx, t, p, "orphan-test-existing")
	require.NoError(t, p.EnqueueForOrchestrator(ctx,
		cdb.QueueEventMessage{Instance: "orphan-test-existing", Name: "ConfigUpdate", Data: "v3"}, 0))

	item, token := fetchOrchestration(ctx, t, p, lock, "Expected orchestration item for existing instance with queued event")
	require.Equal(t, "orphan-test-existing", item.Instance)
	found := false
	for _, m := range item.Messages {
		if qm, ok := m.(cdb.QueueEventMessage); ok && qm.Name == "ConfigUpdate" && qm.Data == "v3" {
			found = true
		}
	}
	require.True(t, found, "QueueEventMessage for existing instance should be included in messages, got: %v", item.Messages)

	require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}
