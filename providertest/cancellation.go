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

// cancEvent is duroxide's Event::with_event_id(event_id, instance,
// execution_id, None, kind): a fresh event stamped now by this duroxide.
func cancEvent(eventID uint64, instance string, executionID uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            kind,
	}
}

// cancStarted is the OrchestrationStarted (event 1, execution 1) the
// cancellation tests ack: TestOrch at orchestration version "1.0".
func cancStarted(instance string) cdb.Event {
	return cancEvent(1, instance, 1, cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0", Input: "{}"})
}

// cancActivity is an untagged, session-less ActivityExecute of execution 1.
func cancActivity(instance string, id uint64, name, input string) cdb.WorkItem {
	return cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: id, Name: name, Input: input}
}

// cancFetchStart enqueues the start of instance and fetches it (30s lock),
// returning the lock token; the fetch must yield an item.
func cancFetchStart(t *testing.T, p cdb.Provider, instance string) string {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start of %s must be fetchable", instance)
	return token
}

// cancTrigger enqueues an ExternalRaised "Trigger" to give instance another
// turn, fetches it (30s lock) and returns the lock token.
func cancTrigger(t *testing.T, p cdb.Provider, instance string) string {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "Trigger", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the trigger of %s must be fetchable", instance)
	return token
}

// cancFetchWork fetches a worker item with the default (untagged) filter,
// no session and no poll wait.
func cancFetchWork(t *testing.T, p cdb.Provider, lock time.Duration) (cdb.WorkItem, string) {
	t.Helper()
	item, token, _, err := p.FetchWorkItem(testContext(t), lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	return item, token
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
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, _ := cancFetchWork(t, p, lockLong)
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
			cancEvent(2, inst, 1, cdb.OrchestrationCompleted{Output: "done"}),
		},
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusCompleted), Output: ptr("done")},
		nil))

	item, _ := cancFetchWork(t, p, lockLong)
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
			cancEvent(2, inst, 1, cdb.OrchestrationFailed{Details: cdb.ApplicationError{
				Kind:    cdb.AppOrchestrationFailed{},
				Message: "boom",
			}}),
		},
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusFailed)},
		nil))

	item, _ := cancFetchWork(t, p, lockLong)
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
			cancEvent(2, inst, 1, cdb.OrchestrationContinuedAsNew{Input: "new-input"}),
		},
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(cdb.StatusContinuedAsNew), Output: ptr("new-input")},
		nil))

	item, _ := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testFetchReturnsMissingStateWhenInstanceDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	// A leftover activity of an instance that was never created.
	require.NoError(t, p.EnqueueForWorker(ctx, cancActivity("inst-missing", 1, "TestActivity", "{}")))

	item, _ := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "Expected to fetch work item")
}

func testRenewReturnsRunningWhenOrchestrationActive(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-renew-run"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)},
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, lockToken := cancFetchWork(t, p, lockLong)
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
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "{}")}, nil,
		cancRunning(), nil))

	item, lockToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	// Another turn completes the orchestration without cancelling the activity.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{cancEvent(2, inst, 1, cdb.OrchestrationCompleted{Output: "done"})},
		nil, nil,
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted), Output: ptr("done")},
		nil))

	require.NoError(t, p.RenewWorkItemLock(ctx, lockToken, lockLong))
}

func testRenewReturnsMissingWhenInstanceDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, cancActivity("inst-renew-missing", 1, "TestActivity", "{}")))

	item, lockToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.RenewWorkItemLock(ctx, lockToken, lockLong))
}

func testAckWorkItemNoneDeletesWithoutEnqueue(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, cancActivity("inst-ack-none", 1, "TestActivity", "{}")))

	item, lockToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	again, _ := cancFetchWork(t, p, 100*time.Millisecond)
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
			cancActivity(inst, 1, "Activity1", "{}"),
			cancActivity(inst, 2, "Activity2", "{}"),
			cancActivity(inst, 3, "Activity3", "{}"),
		}, nil,
		cancRunning(), nil))

	// The activities are queued: fetch one, then put it back.
	first, token1 := cancFetchWork(t, p, lockLong)
	require.NotNil(t, first, "Should have activity in queue")
	require.NoError(t, p.AbandonWorkItem(ctx, token1, 0, false))

	// A later turn cancels activities 1 and 2.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{},
		[]cdb.ScheduledActivityIdentifier{
			{Instance: inst, ExecutionID: 1, ActivityID: 1},
			{Instance: inst, ExecutionID: 1, ActivityID: 2},
		}))

	remaining, _ := cancFetchWork(t, p, lockLong)
	require.NotNil(t, remaining, "Should have activity 3 remaining")
	act, ok := remaining.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecute, got %T", remaining)
	assert.Equal(t, uint64(3), act.ID, "Only activity 3 should remain; activities 1 and 2 should be cancelled")

	noMore, _ := cancFetchWork(t, p, 100*time.Millisecond)
	assert.Nil(t, noMore, "Should have no more activities")
}

func testAckWorkItemFailsWhenEntryDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-ack-stolen"

	require.NoError(t, p.EnqueueForWorker(ctx, cancActivity(inst, 1, "TestActivity", "{}")))
	item, lockToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	// Lock stealing: the row is deleted behind the worker's back.
	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	err := p.AckWorkItem(ctx, lockToken, cdb.ActivityCompletedMessage{Instance: inst, ExecutionID: 1, ID: 1, Result: "done"})
	require.Error(t, err, "ack_work_item should fail when entry already deleted")
	assert.False(t, cdb.IsRetryable(err),
		"Error should be permanent (not retryable) for deleted entry: %v", err)
}

func testRenewFailsWhenEntryDeleted(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	require.NoError(t, p.EnqueueForWorker(ctx, cancActivity("inst-renew-stolen", 1, "TestActivity", "{}")))
	item, lockToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, item, "the activity must be fetchable")

	require.NoError(t, p.AckWorkItem(ctx, lockToken, nil))

	err := p.RenewWorkItemLock(ctx, lockToken, lockLong)
	assert.Error(t, err, "renew_work_item_lock should fail when entry deleted")
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
		activities = append(activities, cancActivity(inst, i, fmt.Sprintf("Activity%d", i), "{}"))
		cancelled = append(cancelled, cdb.ScheduledActivityIdentifier{Instance: inst, ExecutionID: 1, ActivityID: i})
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancStarted(inst)}, activities, nil, cancRunning(), nil))

	// One later turn cancels all five.
	token2 := cancTrigger(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{}, cancelled))

	remaining, _ := cancFetchWork(t, p, 100*time.Millisecond)
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
			cancActivity(inst, droppedID, "DroppedActivity", "{}"),
			cancActivity(inst, 3, "NormalActivity", "{}"),
		}, nil,
		cancRunning(),
		[]cdb.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: droppedID}}),
		"ack_orchestration_item should succeed")

	remaining, remainingToken := cancFetchWork(t, p, lockLong)
	require.NotNil(t, remaining, "Should have the normal activity in queue")
	act, ok := remaining.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecute, got %#v", remaining)
	assert.Equal(t, uint64(3), act.ID,
		"Only the normal activity (id=3) should remain; the scheduled-then-cancelled activity (id=2) should be gone")
	assert.Equal(t, "NormalActivity", act.Name)

	require.NoError(t, p.AckWorkItem(ctx, remainingToken, nil))

	noMore, _ := cancFetchWork(t, p, 100*time.Millisecond)
	assert.Nil(t, noMore, "Should have no more activities; the schedule-then-cancel activity should NOT be in queue")
}

func testOrphanActivityAfterInstanceForceDeletion(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-orphan-activity"

	token := cancFetchStart(t, p, inst)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{cancEvent(1, inst, 1, cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"})},
		[]cdb.WorkItem{cancActivity(inst, 1, "TestActivity", "test-input")}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0"), Status: ptr(cdb.StatusRunning)},
		nil))

	// Force-delete the running instance while its activity is queued.
	admin := Admin(t, p)
	res, err := admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
	assert.Greater(t, res.InstancesDeleted, uint64(0), "Force delete should remove the instance")

	_, err = admin.GetInstanceInfo(ctx, inst)
	assert.Error(t, err, "Instance should no longer exist")

	// Either the worker row went with the instance, or it survived; if it
	// survived, running it and acking its (orphaned) completion must succeed.
	item, workerToken := cancFetchWork(t, p, 5*time.Second)
	if item != nil {
		require.NoError(t, p.AckWorkItem(ctx, workerToken,
			cdb.ActivityCompletedMessage{Instance: inst, ExecutionID: 1, ID: 1, Result: "orphan-result"}),
			"acking the surviving orphan activity with a completion must succeed")
	}
}
