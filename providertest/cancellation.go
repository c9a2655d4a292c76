package providertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's provider_validation/cancellation.rs: worker items stay
// fetchable and renewable whatever the state of their orchestration, and
// activity cancellation by lock stealing (cancelled_activities deletes the
// worker rows; the worker's ack and renew then fail).

func cancellationTests() []Test {
	return []Test{
		{Name: "TestFetchReturnsRunningStateForActiveOrchestration", Run: testFetchReturnsRunningStateForActiveOrchestration},
		{Name: "TestFetchReturnsTerminalStateWhenOrchestrationCompleted", Run: testFetchReturnsTerminalStateWhenOrchestrationCompleted},
		{Name: "TestFetchReturnsTerminalStateWhenOrchestrationFailed", Run: testFetchReturnsTerminalStateWhenOrchestrationFailed},
		{Name: "TestFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew", Run: testFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew},
		{Name: "TestFetchReturnsMissingStateWhenInstanceDeleted", Run: testFetchReturnsMissingStateWhenInstanceDeleted},
		{Name: "TestRenewReturnsRunningWhenOrchestrationActive", Run: testRenewReturnsRunningWhenOrchestrationActive},
		{Name: "TestRenewReturnsTerminalWhenOrchestrationCompleted", Run: testRenewReturnsTerminalWhenOrchestrationCompleted},
		{Name: "TestRenewReturnsMissingWhenInstanceDeleted", Run: testRenewReturnsMissingWhenInstanceDeleted},
		{Name: "TestAckWorkItemNoneDeletesWithoutEnqueue", Run: testAckWorkItemNoneDeletesWithoutEnqueue},
		{Name: "TestCancelledActivitiesDeletedFromWorkerQueue", Run: testCancelledActivitiesDeletedFromWorkerQueue},
		{Name: "TestAckWorkItemFailsWhenEntryDeleted", Run: testAckWorkItemFailsWhenEntryDeleted},
		{Name: "TestRenewFailsWhenEntryDeleted", Run: testRenewFailsWhenEntryDeleted},
		{Name: "TestCancellingNonexistentActivitiesIsIdempotent", Run: testCancellingNonexistentActivitiesIsIdempotent},
		{Name: "TestBatchCancellationDeletesMultipleActivities", Run: testBatchCancellationDeletesMultipleActivities},
		{Name: "TestSameActivityInWorkerItemsAndCancelledIsNoop", Run: testSameActivityInWorkerItemsAndCancelledIsNoop},
		{Name: "TestOrphanActivityAfterInstanceForceDeletion", Run: testOrphanActivityAfterInstanceForceDeletion},
	}
}

// cancStarted is the OrchestrationStarted (event 1, execution 1) the
// cancellation tests ack: TestOrch at orchestration version "1.0".
func cancStarted(instance string) cdb.Event {
	return newEvent(1, instance, 1, orchestrationStarted("TestOrch", "1.0", "{}"))
}

// cancFetchStart enqueues the start of instance and fetches it (lockLong),
// returning the lock token.
func cancFetchStart(t *testing.T, p cdb.Provider, instance string) string {
	t.Helper()
	_, token := enqueueAndFetchOrchestration(testContext(t), t, p, StartItem(instance))
	return token
}

// cancTrigger enqueues an ExternalRaisedMessage "Trigger" to give instance another
// turn, fetches it (lockLong) and returns the lock token.
func cancTrigger(t *testing.T, p cdb.Provider, instance string) string {
	t.Helper()
	_, token := enqueueAndFetchOrchestration(testContext(t), t, p, cdb.ExternalRaisedMessage{Instance: instance, Name: "Trigger", Data: "{}"})
	return token
}

func cancRunning() cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusRunning)}
}

func testFetchReturnsRunningStateForActiveOrchestration(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-running"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testFetchReturnsTerminalStateWhenOrchestrationCompleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-completed"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			cancStarted(inst),
			newEvent(2, inst, 1, cdb.OrchestrationCompleted{Output: "done"}),
		},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusCompleted), Output: ptr("done")},
		nil))

	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testFetchReturnsTerminalStateWhenOrchestrationFailed(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-failed"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			cancStarted(inst),
			newEvent(2, inst, 1, cdb.OrchestrationFailed{Details: cdb.ApplicationError{
				Kind:    cdb.AppOrchestrationFailed{},
				Message: "boom",
			}}),
		},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusFailed)},
		nil))

	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-can"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			cancStarted(inst),
			newEvent(2, inst, 1, cdb.OrchestrationContinuedAsNew{Input: "new-input"}),
		},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusContinuedAsNew), Output: ptr("new-input")},
		nil))

	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testFetchReturnsMissingStateWhenInstanceDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	// A leftover activity of an instance that was never created.
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("inst-missing", 1, 1, "TestActivity", "{}")))

	item, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testRenewReturnsRunningWhenOrchestrationActive(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-renew-run"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.RenewWorkItemLock(ctx, lockToken, lockLong))
}

func testRenewReturnsTerminalWhenOrchestrationCompleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-renew-term"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	// Another turn completes the orchestration without cancelling the activity.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{newEvent(2, inst, 1, cdb.OrchestrationCompleted{Output: "done"})},
		nil, nil,
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted), Output: ptr("done")},
		nil))

	require.NoError(t, p.RenewWorkItemLock(ctx, lockToken, lockLong))
}

func testRenewReturnsMissingWhenInstanceDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("inst-renew-missing", 1, 1, "TestActivity", "{}")))

	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.RenewWorkItemLock(ctx, lockToken, lockLong))
}

func testAckWorkItemNoneDeletesWithoutEnqueue(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("inst-ack-none", 1, 1, "TestActivity", "{}")))

	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	again, _ := fetchWorkIfAny(ctx, t, p, 100*time.Millisecond)
	assert.Nil(t, again, "Worker queue should be empty")

	// A completion, had one been enqueued, would be fetchable here.
	orch, _, _, err := p.FetchOrchestrationItem(ctx, 100*time.Millisecond, noPoll, nil)
	require.NoError(t, err)
	assert.Nil(t, orch, "Orchestrator queue should be empty")
}

func testCancelledActivitiesDeletedFromWorkerQueue(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-cancel-delete"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{
			activityExecute(inst, 1, 1, "Activity1", "{}"),
			activityExecute(inst, 1, 2, "Activity2", "{}"),
			activityExecute(inst, 1, 3, "Activity3", "{}"),
		}, nil,
		cancRunning(), nil))

	// The activities are queued: fetch one, then put it back.
	first, token1 := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, first, "Should have activity in queue")
	require.NoError(t, p.AbandonWorkItem(ctx, token1, 0, false))

	// A later turn cancels activities 1 and 2.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{},
		[]cdb.ScheduledActivityIdentifier{
			{Instance: inst, ExecutionID: 1, ActivityID: 1},
			{Instance: inst, ExecutionID: 1, ActivityID: 2},
		}))

	remaining, _ := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, remaining, "Should have activity 3 remaining")
	act, ok := remaining.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecuteMessage, got %T", remaining)
	assert.Equal(t, uint64(3), act.ID, "Only activity 3 should remain; activities 1 and 2 should be cancelled")

	noMore, _ := fetchWorkIfAny(ctx, t, p, 100*time.Millisecond)
	assert.Nil(t, noMore, "Should have no more activities")
}

func testAckWorkItemFailsWhenEntryDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-ack-stolen"

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute(inst, 1, 1, "TestActivity", "{}")))
	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	// Lock stealing: the row is deleted behind the worker's back.
	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	err := p.AckWorkItem(ctx, lockToken, cdb.ActivityCompletedMessage{Instance: inst, ExecutionID: 1, ID: 1, Result: "done"})
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "ack_work_item should fail when entry already deleted")
	assert.False(t, cdb.IsRetryable(err),
		"Error should be permanent (not retryable) for deleted entry: %v", err)
}

func testRenewFailsWhenEntryDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("inst-renew-stolen", 1, 1, "TestActivity", "{}")))
	item, lockToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	err := p.RenewWorkItemLock(ctx, lockToken, lockLong)
	assert.ErrorIs(t, err, cdb.ErrInvalidLockToken, "renew_work_item_lock should fail when entry deleted")
}

func testCancellingNonexistentActivitiesIsIdempotent(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-cancel-idempotent"

	token := cancFetchStart(t, p, inst)
	err := p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch")},
		[]cdb.ScheduledActivityIdentifier{
			{Instance: inst, ExecutionID: 1, ActivityID: 999},
			{Instance: inst, ExecutionID: 1, ActivityID: 1},
		})
	assert.NoError(t, err, "Cancelling non-existent activities should not error")
}

func testBatchCancellationDeletesMultipleActivities(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-batch-cancel"

	token := cancFetchStart(t, p, inst)
	var activities []cdb.WorkItem
	var cancelled []cdb.ScheduledActivityIdentifier
	for i := uint64(1); i <= 5; i++ {
		activities = append(activities, activityExecute(inst, 1, i, fmt.Sprintf("Activity%d", i), "{}"))
		cancelled = append(cancelled, cdb.ScheduledActivityIdentifier{Instance: inst, ExecutionID: 1, ActivityID: i})
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)}, activities, nil, cancRunning(), nil))

	// One later turn cancels all five.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{}, cancelled))

	remaining, _ := fetchWorkIfAny(ctx, t, p, 100*time.Millisecond)
	assert.Nil(t, remaining, "All activities should be cancelled; worker queue should be empty")
}

func testSameActivityInWorkerItemsAndCancelledIsNoop(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-schedule-then-cancel"

	token := cancFetchStart(t, p, inst)

	// Activity 2 is scheduled and dropped in the same turn: the provider must
	// insert worker_items before deleting cancelled_activities.
	const droppedID = uint64(2)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{
			activityExecute(inst, 1, droppedID, "DroppedActivity", "{}"),
			activityExecute(inst, 1, 3, "NormalActivity", "{}"),
		}, nil,
		cancRunning(),
		[]cdb.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: droppedID}}),
		"ack_orchestration_item should succeed")

	remaining, remainingToken := fetchWorkIfAny(ctx, t, p, lockLong)
	require.NotNil(t, remaining, "Should have the normal activity in queue")
	act, ok := remaining.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecuteMessage, got %#v", remaining)
	assert.Equal(t, uint64(3), act.ID,
		"Only the normal activity (id=3) should remain; the scheduled-then-cancelled activity (id=2) should be gone")
	assert.Equal(t, "NormalActivity", act.Name)

	require.NoError(t, p.AckWorkItem(ctx, remainingToken, nil))

	noMore, _ := fetchWorkIfAny(ctx, t, p, 100*time.Millisecond)
	assert.Nil(t, noMore, "Should have no more activities; the schedule-then-cancel activity should NOT be in queue")
}

func testOrphanActivityAfterInstanceForceDeletion(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-orphan-activity"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent(inst, 1)},
		[]cdb.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "test-input")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0"), Status: ptr(cdb.StatusRunning)},
		nil))

	// Force-delete the running instance while its activity is queued.
	admin := Admin(t, p)
	res, err := admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
	assert.Greater(t, res.InstancesDeleted, uint64(0), "Force delete should remove the instance")

	_, err = admin.GetInstanceInfo(ctx, inst)
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound, "Instance should no longer exist")

	// Either the worker row went with the instance, or it survived; if it
	// survived, running it and acking its (orphaned) completion must succeed.
	item, workerToken := fetchWorkIfAny(ctx, t, p, 5*time.Second)
	if item != nil {
		require.NoError(t, p.AckWorkItem(ctx, workerToken,
			cdb.ActivityCompletedMessage{Instance: inst, ExecutionID: 1, ID: 1, Result: "orphan-result"}),
			"acking the surviving orphan activity with a completion must succeed")
	}
}
