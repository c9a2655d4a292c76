package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// poisonMessageTests is duroxide's provider_validation/poison_message.rs:
// attempt counts start at 1, grow with every fetch, shrink with
// ignore_attempt abandons (never below 0) and are the batch maximum; an
// abandon's delay and attempt undo touch only the messages its fetch
// locked (0.1.32).
func poisonMessageTests() []Test {
	return []Test{
		{Name: "TestOrchestrationAttemptCountStartsAtOne", Run: testOrchestrationAttemptCountStartsAtOne},
		{Name: "TestOrchestrationAttemptCountIncrementsOnRefetch", Run: testOrchestrationAttemptCountIncrementsOnRefetch},
		{Name: "TestWorkerAttemptCountStartsAtOne", Run: testWorkerAttemptCountStartsAtOne},
		{Name: "TestWorkerAttemptCountIncrementsOnLockExpiry", Run: testWorkerAttemptCountIncrementsOnLockExpiry},
		{Name: "TestAttemptCountIsPerMessage", Run: testAttemptCountIsPerMessage},
		{Name: "TestAbandonWorkItemIgnoreAttemptDecrements", Run: testAbandonWorkItemIgnoreAttemptDecrements},
		{Name: "TestAbandonOrchestrationItemIgnoreAttemptDecrements", Run: testAbandonOrchestrationItemIgnoreAttemptDecrements},
		{Name: "TestIgnoreAttemptNeverGoesNegative", Run: testIgnoreAttemptNeverGoesNegative},
		{Name: "TestMaxAttemptCountAcrossMessageBatch", Run: testMaxAttemptCountAcrossMessageBatch},
		{Name: "TestOrchestrationDelayedAbandonPreservesUnlockedRows", Run: testOrchestrationDelayedAbandonPreservesUnlockedRows},
		{Name: "TestOrchestrationIgnoreAttemptPreservesHiddenStart", Run: testOrchestrationIgnoreAttemptPreservesHiddenStart},
	}
}

// pmAckEmpty acks an orchestration turn with nothing in it.
func pmAckEmpty(ctx context.Context, t *testing.T, p cdb.Provider, token string) {
	t.Helper()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil,
		cdb.ExecutionMetadata{}, nil), "ack should succeed")
}

// pmActivity is the TestActivity worker item of instance.
func pmActivity(instance string) cdb.ActivityExecuteMessage {
	return activityExecute(instance, cdb.InitialExecutionID, 1, "TestActivity", "{}")
}

func testOrchestrationAttemptCountStartsAtOne(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("poison-test-1"), 0))
	_, token, attempt := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt, "First fetch should have attempt_count = 1")
	pmAckEmpty(ctx, t, p, token)
}

func testOrchestrationAttemptCountIncrementsOnRefetch(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("poison-test-2"), 0))

	_, token1, attempt1 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token1, 0, false), "abandon should succeed")

	_, token2, attempt2 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt2, "Second fetch should have attempt_count = 2")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token2, 0, false), "abandon should succeed")

	_, token3, attempt3 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(3), attempt3, "Third fetch should have attempt_count = 3")
	pmAckEmpty(ctx, t, p, token3)
}

func testWorkerAttemptCountStartsAtOne(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-test-3"

	require.NoError(t, p.EnqueueForWorker(ctx, pmActivity(inst)))
	item, token, attempt := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AckWorkItem(ctx, token, activityCompleted(inst, cdb.InitialExecutionID, 1, "done")), "ack should succeed")
	require.IsType(t, cdb.ActivityExecuteMessage{}, item)
}

func testWorkerAttemptCountIncrementsOnLockExpiry(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	// duroxide's 1 s lock, scaled with the host: a fetch slower than a
	// quarter of its lock renews it before handing it out, and one that
	// outlasts it passes the item over, counting an attempt for nothing.
	shortLock := scaled(time.Second)
	const inst = "poison-test-4"

	require.NoError(t, p.EnqueueForWorker(ctx, pmActivity(inst)))
	_, _, attempt1 := fetchWorkAttempt(ctx, t, p, shortLock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")

	time.Sleep(shortLock + 100*time.Millisecond)

	_, token2, attempt2 := fetchWorkAttempt(ctx, t, p, shortLock)
	require.Equal(t, uint32(2), attempt2, "Second fetch after lock expiry should have attempt_count = 2")
	require.NoError(t, p.AckWorkItem(ctx, token2, activityCompleted(inst, cdb.InitialExecutionID, 1, "done")), "ack should succeed")
}

func testAttemptCountIsPerMessage(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("poison-test-5a", cdb.InitialExecutionID, 1, "Activity1", "{}")))
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("poison-test-5b", cdb.InitialExecutionID, 2, "Activity2", "{}")))

	item1, token1, attempt1 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First item first fetch should have attempt_count = 1")
	item2, token2, attempt2 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt2, "Second item first fetch should have attempt_count = 1")

	activity1, ok := item1.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecuteMessage, got %T", item1)
	activity2, ok := item2.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecuteMessage, got %T", item2)
	require.NotEqual(t, activity1.ID, activity2.ID, "Should be different items")

	require.NoError(t, p.AckWorkItem(ctx, token1, activityCompleted("poison-test-5a", cdb.InitialExecutionID, activity1.ID, "done")), "ack should succeed")
	require.NoError(t, p.AckWorkItem(ctx, token2, activityCompleted("poison-test-5b", cdb.InitialExecutionID, activity2.ID, "done")), "ack should succeed")
}

func testAbandonWorkItemIgnoreAttemptDecrements(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-test-ignore-1"

	require.NoError(t, p.EnqueueForWorker(ctx, pmActivity(inst)))

	_, token1, attempt1 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonWorkItem(ctx, token1, 0, false), "abandon should succeed")

	_, token2, attempt2 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt2, "Second fetch should have attempt_count = 2")
	require.NoError(t, p.AbandonWorkItem(ctx, token2, 0, true), "abandon with ignore_attempt should succeed")

	_, token3, attempt3 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt3, "Third fetch should have attempt_count = 2 (decremented then re-incremented)")
	require.NoError(t, p.AckWorkItem(ctx, token3, activityCompleted(inst, cdb.InitialExecutionID, 1, "done")), "ack should succeed")
}

func testAbandonOrchestrationItemIgnoreAttemptDecrements(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("poison-test-ignore-2"), 0))

	_, token1, attempt1 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token1, 0, false), "abandon should succeed")

	_, token2, attempt2 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt2, "Second fetch should have attempt_count = 2")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token2, 0, true), "abandon with ignore_attempt should succeed")

	_, token3, attempt3 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt3, "Third fetch should have attempt_count = 2 (decremented then re-incremented)")
	pmAckEmpty(ctx, t, p, token3)
}

func testIgnoreAttemptNeverGoesNegative(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-test-never-neg"

	require.NoError(t, p.EnqueueForWorker(ctx, pmActivity(inst)))

	_, token1, attempt1 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonWorkItem(ctx, token1, 0, true), "abandon with ignore_attempt should succeed")

	_, token2, attempt2 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt2, "Second fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonWorkItem(ctx, token2, 0, true), "abandon with ignore_attempt should succeed")

	_, token3, attempt3 := fetchWorkAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt3, "Attempt count should not go below 0 - third fetch should have attempt_count = 1")
	require.NoError(t, p.AckWorkItem(ctx, token3, activityCompleted(inst, cdb.InitialExecutionID, 1, "done")), "ack should succeed")
}

// The attempt count of a batch is the maximum over its messages: a message
// that joins an often-retried batch does not reset it.
func testMaxAttemptCountAcrossMessageBatch(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-batch-test"

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))

	item1, token1, attempt1 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.Len(t, item1.Messages, 1, "Should have 1 message")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token1, 0, false), "abandon should succeed")

	_, token2, attempt2 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt2, "Second fetch should have attempt_count = 2")

	// A completion arrives while the lock is held.
	require.NoError(t, p.EnqueueForOrchestrator(ctx,
		activityCompleted(inst, cdb.InitialExecutionID, 1, "activity result"), 0), "enqueue should succeed")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token2, 0, false), "abandon should succeed")

	// The start is now at attempt 3, the completion at 1: the batch reports 3.
	item3, token3, attempt3 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Len(t, item3.Messages, 2, "Should have 2 messages in the batch")
	require.Equal(t, uint32(3), attempt3,
		"Attempt count should be MAX across messages (3), not the newer message's count (1)")
	pmAckEmpty(ctx, t, p, token3)
}

// pmEvent is an external event for instance.
func pmEvent(instance, name string) cdb.ExternalRaisedMessage {
	return cdb.ExternalRaisedMessage{Instance: instance, Name: name, Data: name + "-data"}
}

// A delayed abandon hides the messages its fetch locked, and only those: a
// message that arrived while the lock was held stays visible, and the next
// fetch hands it over alone.
func testOrchestrationDelayedAbandonPreservesUnlockedRows(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-delayed-abandon"
	CreateInstance(ctx, t, p, inst)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pmEvent(inst, "row1"), 0))
	item1, token1, _ := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, []cdb.WorkItem{pmEvent(inst, "row1")}, item1.Messages, "the first fetch locks row 1")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pmEvent(inst, "row2"), 0), "row 2 arrives while row 1 is locked")
	// The delay must outlast the abandon and the next fetch: duroxide's
	// 5 s, scaled with the host.
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token1, scaled(5*time.Second), false), "abandon should succeed")

	item2, token2, attempt2 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, []cdb.WorkItem{pmEvent(inst, "row2")}, item2.Messages,
		"a row the abandoned fetch did not lock must stay visible, and the delayed row must stay hidden")
	require.Equal(t, uint32(1), attempt2, "row 2 is fetched for the first time")
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, item2.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// An input that arrives while its instance's start is hidden by a delayed
// abandon is visible at once and is handed over alone; abandoning it with
// ignore_attempt leaves the hidden start's attempts as they were, and once
// the delay ends the two come together with the start's count.
func testOrchestrationIgnoreAttemptPreservesHiddenStart(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lock := f.LockTimeout()
	const inst = "poison-hidden-start"

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	_, token1, attempt1 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(1), attempt1, "First fetch should have attempt_count = 1")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token1, 0, false), "abandon should succeed")
	_, token2, attempt2 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, uint32(2), attempt2, "Second fetch should have attempt_count = 2")
	// Hidden for duroxide's second, scaled with the host: the delay must
	// outlast an enqueue and a fetch, which a loaded machine made slower
	// than a second.
	hidden := scaled(time.Second)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token2, hidden, false), "the start is hidden for a second")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pmEvent(inst, "input"), 0))
	input, token3, attempt3 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Len(t, input.Messages, 1, "visible input: the input is fetched alone while the start is hidden")
	require.Equal(t, cdb.WorkItem(pmEvent(inst, "input")), input.Messages[0], "visible input")
	require.Equal(t, uint32(1), attempt3, "the input is fetched for the first time")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token3, 0, true), "abandon with ignore_attempt should succeed")

	time.Sleep(hidden + 100*time.Millisecond)
	joint, token4, attempt4 := fetchOrchestrationAttempt(ctx, t, p, lock)
	require.Equal(t, []cdb.WorkItem{StartItem(inst), pmEvent(inst, "input")}, joint.Messages,
		"the start and the input come together once the delay ends")
	require.Equal(t, uint32(3), attempt4, "the hidden start kept its 2 attempts: the joint fetch is its third")
	pmAckEmpty(ctx, t, p, token4)
}
