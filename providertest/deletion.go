package providertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// deletionTests is duroxide's provider_validation/deletion.rs: deleting
// terminal and (forced) running instances, cascading over sub-orchestration
// trees, the tree primitives (ListChildren, GetParentID, GetInstanceTree,
// DeleteInstancesAtomic with its orphan check), and the safety properties
// of deletion: a turn in flight cannot ack the instance back to life, and a
// stale worker cannot complete into a recreated instance.
func deletionTests() []Test {
	return []Test{
		{Name: "TestDeleteTerminalInstances", Run: testDeleteTerminalInstances},
		{Name: "TestDeleteRunningRejectedForceSucceeds", Run: testDeleteRunningRejectedForceSucceeds},
		{Name: "TestDeleteNonexistentInstance", Run: testDeleteNonexistentInstance},
		{Name: "TestDeleteCleansQueuesAndLocks", Run: testDeleteCleansQueuesAndLocks},
		{Name: "TestCascadeDeleteHierarchy", Run: testCascadeDeleteHierarchy},
		{Name: "TestForceDeletePreventsAckRecreation", Run: testForceDeletePreventsAckRecreation},
		{Name: "TestListChildren", Run: testListChildren},
		{Name: "TestDeleteGetParentID", Run: testDeleteGetParentID},
		{Name: "TestDeleteGetInstanceTree", Run: testDeleteGetInstanceTree},
		{Name: "TestDeleteInstancesAtomic", Run: testDeleteInstancesAtomic},
		{Name: "TestDeleteInstancesAtomicForce", Run: testDeleteInstancesAtomicForce},
		{Name: "TestDeleteInstancesAtomicOrphanDetection", Run: testDeleteInstancesAtomicOrphanDetection},
		{Name: "TestStaleActivityAfterDeleteRecreate", Run: testStaleActivityAfterDeleteRecreate},
	}
}

func testDeleteTerminalInstances(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const completedID = "delete-term-completed"
	admCreateCompletedInstance(ctx, t, p, completedID)
	const failedID = "delete-term-failed"
	admCreateFailedInstance(ctx, t, p, failedID)
	// A cancelled instance is stored as Failed; deletion treats it alike.
	const cancelledID = "delete-term-cancelled"
	admCreateCancelledInstance(ctx, t, p, cancelledID)

	require.True(t, admExists(ctx, t, admin, completedID))
	require.True(t, admExists(ctx, t, admin, failedID))
	require.True(t, admExists(ctx, t, admin, cancelledID))

	res, err := admin.DeleteInstance(ctx, completedID, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Completed instance should be deleted")
	require.GreaterOrEqual(t, res.ExecutionsDeleted, uint64(1), "Should delete at least 1 execution")
	require.GreaterOrEqual(t, res.EventsDeleted, uint64(1), "Should delete at least 1 event")
	require.False(t, admExists(ctx, t, admin, completedID), "Completed instance should not exist after deletion")

	res, err = admin.DeleteInstance(ctx, failedID, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Failed instance should be deleted")
	require.False(t, admExists(ctx, t, admin, failedID), "Failed instance should not exist after deletion")

	res, err = admin.DeleteInstance(ctx, cancelledID, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Cancelled instance should be deleted")
	require.False(t, admExists(ctx, t, admin, cancelledID), "Cancelled instance should not exist after deletion")
}

func testDeleteRunningRejectedForceSucceeds(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const inst = "delete-running-force"
	CreateInstance(ctx, t, p, inst)

	_, err := admin.DeleteInstance(ctx, inst, false)
	require.Error(t, err, "Should reject deletion of running instance")
	require.False(t, cdb.IsRetryable(err), "Error should be permanent")
	require.Contains(t, strings.ToLower(err.Error()), "running", "Error message should mention 'running'")

	require.True(t, admExists(ctx, t, admin, inst), "Instance should still exist after rejected deletion")

	res, err := admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Force delete should succeed")

	require.False(t, admExists(ctx, t, admin, inst), "Instance should not exist after force deletion")
}

func testDeleteNonexistentInstance(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	_, err := admin.DeleteInstance(ctx, "does-not-exist-12345", false)
	require.Error(t, err, "Should return error for non-existent instance")
	require.False(t, cdb.IsRetryable(err), "Error should be permanent")
	require.Contains(t, strings.ToLower(err.Error()), "not found", "Error should mention 'not found'")
}

func testDeleteCleansQueuesAndLocks(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const inst = "delete-queues-locks"

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	// An activity too, for the worker-queue cleanup.
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{
		Instance: inst, ExecutionID: 1, ID: 1, Name: "TestActivity", Input: "{}",
	}))

	_, token := admFetch(ctx, t, p, lockLong)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, inst, 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusCompleted),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))

	res, err := admin.DeleteInstance(ctx, inst, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.QueueMessagesDeleted, uint64(1), "Should have deleted queue messages")

	// The id is reusable (locks cleared): a distinct name and input show
	// the instance is truly new.
	const newOrchName = "ReusedOrch"
	const newInput = `{"reused": true}`
	item, token := admEnqueueAndFetch(ctx, t, p, cdb.StartOrchestrationMessage{
		Instance:      inst,
		Orchestration: newOrchName,
		Version:       ptr("2.0.0"),
		Input:         newInput,
		ExecutionID:   1,
	})
	require.Equal(t, newOrchName, item.OrchestrationName, "Fetched item should have new orchestration name")

	err = p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, inst, 1, admStarted(newOrchName, "2.0.0", newInput))}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr(newOrchName), OrchestrationVersion: ptr("2.0.0")}, nil)
	require.NoError(t, err, "Should be able to recreate instance after deletion (locks cleared)")

	info, err := admin.GetInstanceInfo(ctx, inst)
	require.NoError(t, err)
	require.Equal(t, newOrchName, info.OrchestrationName,
		"Recreated instance should have new orchestration name, not stale data")

	_, err = admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
}

func testCascadeDeleteHierarchy(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	// root -> child1, child2; child1 -> grandchild (3 levels).
	const rootID = "cascade-root"
	const child1ID = "cascade-child1"
	const child2ID = "cascade-child2"
	const grandchildID = "cascade-grandchild"

	admCreateCompletedInstanceWithParent(ctx, t, p, rootID, nil)
	admCreateCompletedInstanceWithParent(ctx, t, p, child1ID, ptr(rootID))
	admCreateCompletedInstanceWithParent(ctx, t, p, child2ID, ptr(rootID))
	admCreateCompletedInstanceWithParent(ctx, t, p, grandchildID, ptr(child1ID))

	require.True(t, admExists(ctx, t, admin, rootID))
	require.True(t, admExists(ctx, t, admin, child1ID))
	require.True(t, admExists(ctx, t, admin, child2ID))
	require.True(t, admExists(ctx, t, admin, grandchildID))

	_, err := admin.DeleteInstance(ctx, child1ID, false)
	require.Error(t, err, "Should not allow direct deletion of sub-orchestration")
	msg := strings.ToLower(err.Error())
	require.True(t,
		strings.Contains(msg, "sub-orchestration") || strings.Contains(msg, "root") || strings.Contains(msg, "parent"),
		"Error should mention sub-orchestration, root, or parent")

	_, err = admin.DeleteInstance(ctx, child1ID, true)
	require.Error(t, err, "Should not allow force deletion of sub-orchestration")

	_, err = admin.DeleteInstance(ctx, grandchildID, false)
	require.Error(t, err, "Should not allow direct deletion of deeply nested sub-orchestration")

	// Deleting the root cascades to every descendant.
	res, err := admin.DeleteInstance(ctx, rootID, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Root should be deleted")
	require.GreaterOrEqual(t, res.ExecutionsDeleted, uint64(4), "Should delete executions from all 4 instances")

	require.False(t, admExists(ctx, t, admin, rootID), "Root should be deleted")
	require.False(t, admExists(ctx, t, admin, child1ID), "Child1 should be cascade deleted")
	require.False(t, admExists(ctx, t, admin, child2ID), "Child2 should be cascade deleted")
	require.False(t, admExists(ctx, t, admin, grandchildID), "Grandchild should be cascade deleted")
}

func testForceDeletePreventsAckRecreation(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const inst = "zombie-prevention"

	// Create the instance.
	_, token := admEnqueueAndFetch(ctx, t, p, StartItem(inst))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, inst, 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0")}, nil))

	// A second turn takes the instance lock.
	_, token2 := admEnqueueAndFetch(ctx, t, p, cdb.ExternalRaisedMessage{Instance: inst, Name: "test-event", Data: "{}"})

	// Force delete while the turn holds the lock.
	res, err := admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Force delete should succeed")

	// The turn's ack must fail: its lock went with the instance.
	err = p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{admEvent(2, inst, 1, cdb.ExternalEvent{Name: "test-event", Data: "{}"})}, nil, nil,
		cdb.ExecutionMetadata{}, nil)
	require.Error(t, err, "CRITICAL: Ack must fail after force delete to prevent zombie recreation")

	require.False(t, admExists(ctx, t, admin, inst), "CRITICAL: Instance must NOT be recreated after force delete")
}

// admThreeLevelTree builds deletion.rs's tree of root (completed) ->
// root::sub::2, root::sub::3 -> root::sub::3::sub::4 (completed children)
// and returns the three descendant ids.
func admThreeLevelTree(t *testing.T, p cdb.Provider, root string) (child1, child2, grandchild string) {
	t.Helper()
	ctx := testContext(t)
	child1 = fmt.Sprintf("%s::sub::2", root)
	child2 = fmt.Sprintf("%s::sub::3", root)
	grandchild = fmt.Sprintf("%s::sub::4", child2)
	admCreateCompletedInstance(ctx, t, p, root)
	admCreateChildInstance(ctx, t, p, child1, root)
	admCreateChildInstance(ctx, t, p, child2, root)
	admCreateChildInstance(ctx, t, p, grandchild, child2)
	return child1, child2, grandchild
}

func testListChildren(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const rootID = "list-children-root"
	child1ID, child2ID, grandchildID := admThreeLevelTree(t, p, rootID)

	children, err := admin.ListChildren(ctx, rootID)
	require.NoError(t, err)
	require.Len(t, children, 2, "Root should have 2 direct children")
	require.Contains(t, children, child1ID, "Should contain child1")
	require.Contains(t, children, child2ID, "Should contain child2")
	require.NotContains(t, children, grandchildID, "Should NOT contain grandchild")

	children, err = admin.ListChildren(ctx, child2ID)
	require.NoError(t, err)
	require.Len(t, children, 1, "child2 should have 1 child")
	require.Contains(t, children, grandchildID, "Should contain grandchild")

	children, err = admin.ListChildren(ctx, grandchildID)
	require.NoError(t, err)
	require.Empty(t, children, "Leaf should have no children")

	children, err = admin.ListChildren(ctx, "non-existent")
	require.NoError(t, err)
	require.Empty(t, children, "Non-existent instance should return empty")

	_, err = admin.DeleteInstance(ctx, rootID, true)
	require.NoError(t, err)
}

func testDeleteGetParentID(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const rootID = "parent-id-root"
	childID := fmt.Sprintf("%s::sub::2", rootID)
	admCreateCompletedInstance(ctx, t, p, rootID)
	admCreateChildInstance(ctx, t, p, childID, rootID)

	parent, err := admin.GetParentID(ctx, rootID)
	require.NoError(t, err)
	require.Nil(t, parent, "Root should have no parent")

	parent, err = admin.GetParentID(ctx, childID)
	require.NoError(t, err)
	require.Equal(t, ptr(rootID), parent, "Child should have root as parent")

	_, err = admin.GetParentID(ctx, "non-existent")
	require.Error(t, err, "Non-existent instance should return error")

	_, err = admin.DeleteInstance(ctx, rootID, true)
	require.NoError(t, err)
}

func testDeleteGetInstanceTree(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const rootID = "tree-root"
	child1ID, child2ID, grandchildID := admThreeLevelTree(t, p, rootID)

	tree, err := admin.GetInstanceTree(ctx, rootID)
	require.NoError(t, err)
	require.Equal(t, rootID, tree.RootID, "Root ID should match")
	require.Equal(t, 4, tree.Size(), "Tree should have 4 instances")
	require.False(t, tree.IsRootOnly(), "Tree should have children")
	// The order is implementation-defined.
	require.Contains(t, tree.AllIDs, rootID)
	require.Contains(t, tree.AllIDs, child1ID)
	require.Contains(t, tree.AllIDs, child2ID)
	require.Contains(t, tree.AllIDs, grandchildID)

	leafTree, err := admin.GetInstanceTree(ctx, grandchildID)
	require.NoError(t, err)
	require.Equal(t, 1, leafTree.Size(), "Leaf tree should have 1 instance")
	require.True(t, leafTree.IsRootOnly(), "Single instance tree should be root-only")

	_, err = admin.DeleteInstance(ctx, rootID, true)
	require.NoError(t, err)
}

func testDeleteInstancesAtomic(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	ids := []string{"atomic-del-1", "atomic-del-2", "atomic-del-3"}
	for _, id := range ids {
		admCreateCompletedInstance(ctx, t, p, id)
	}
	for _, id := range ids {
		require.True(t, admExists(ctx, t, admin, id))
	}

	res, err := admin.DeleteInstancesAtomic(ctx, ids, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Should report deletion")
	require.GreaterOrEqual(t, res.ExecutionsDeleted, uint64(3), "Should delete at least 3 executions")

	for _, id := range ids {
		require.False(t, admExists(ctx, t, admin, id), "Instance %s should be gone", id)
	}
}

func testDeleteInstancesAtomicForce(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const completedID = "atomic-force-completed"
	const runningID = "atomic-force-running"
	admCreateCompletedInstance(ctx, t, p, completedID)
	CreateInstance(ctx, t, p, runningID) // Running: no terminal status

	ids := []string{completedID, runningID}

	_, err := admin.DeleteInstancesAtomic(ctx, ids, false)
	require.Error(t, err, "Should fail without force when running instance present")

	require.True(t, admExists(ctx, t, admin, completedID))
	require.True(t, admExists(ctx, t, admin, runningID))

	res, err := admin.DeleteInstancesAtomic(ctx, ids, true)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Should delete with force")

	require.False(t, admExists(ctx, t, admin, completedID))
	require.False(t, admExists(ctx, t, admin, runningID))
}

func testDeleteInstancesAtomicOrphanDetection(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const rootID = "orphan-detect-root"
	childID := fmt.Sprintf("%s::sub::2", rootID)
	admCreateCompletedInstance(ctx, t, p, rootID)
	admCreateChildInstance(ctx, t, p, childID, rootID)

	require.True(t, admExists(ctx, t, admin, rootID))
	require.True(t, admExists(ctx, t, admin, childID))

	// Deleting only the root (as if the child were spawned after the tree
	// was read) would orphan the child, so it must fail.
	_, err := admin.DeleteInstancesAtomic(ctx, []string{rootID}, false)
	require.Error(t, err, "CRITICAL: delete_instances_atomic must fail when it would create orphans")
	msg := strings.ToLower(err.Error())
	require.True(t,
		strings.Contains(msg, "child") || strings.Contains(msg, "orphan") || strings.Contains(msg, "tree"),
		"Error should mention child/orphan/tree issue: %v", err)

	// Nothing was deleted.
	require.True(t, admExists(ctx, t, admin, rootID), "Root should still exist after failed delete")
	require.True(t, admExists(ctx, t, admin, childID), "Child should still exist after failed delete")

	_, err = admin.DeleteInstancesAtomic(ctx, []string{rootID, childID}, false)
	require.NoError(t, err, "Delete with complete tree should succeed")

	require.False(t, admExists(ctx, t, admin, rootID), "Root should be deleted")
	require.False(t, admExists(ctx, t, admin, childID), "Child should be deleted")
}

func testStaleActivityAfterDeleteRecreate(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const inst = "stale-activity-recreate"

	// Step 1: create the instance and schedule activity 2.
	_, orchLock := admEnqueueAndFetch(ctx, t, p, StartItem(inst))
	scheduled := admEvent(2, inst, cdb.InitialExecutionID, cdb.ActivityScheduled{Name: "OldActivity", Input: "old-input"})
	scheduled.SourceEventID = ptr(uint64(2))
	require.NoError(t, p.AckOrchestrationItem(ctx, orchLock, cdb.InitialExecutionID,
		[]cdb.Event{
			admEvent(1, inst, cdb.InitialExecutionID, admStarted("TestOrch", "1.0.0", "{}")),
			scheduled,
		},
		[]cdb.WorkItem{cdb.ActivityExecuteMessage{
			Instance: inst, ExecutionID: cdb.InitialExecutionID, ID: 2, Name: "OldActivity", Input: "old-input",
		}}, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0")}, nil))

	// Step 2: a worker fetches the activity and holds its lock.
	workItem, oldWorkerLock, _, err := p.FetchWorkItem(ctx, lockLong, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, workItem, "the activity must be fetchable")

	// Step 3: force delete the instance.
	res, err := admin.DeleteInstance(ctx, inst, true)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(1), "Force delete should succeed")
	require.False(t, admExists(ctx, t, admin, inst), "Instance should be deleted")

	// Step 4: recreate it with the same id, name, version and input.
	_, orchLock2 := admEnqueueAndFetch(ctx, t, p, StartItem(inst))
	require.NoError(t, p.AckOrchestrationItem(ctx, orchLock2, cdb.InitialExecutionID,
		[]cdb.Event{admEvent(1, inst, cdb.InitialExecutionID, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0")}, nil))

	// Step 5: the new instance exists.
	info, err := admin.GetInstanceInfo(ctx, inst)
	require.NoError(t, err)
	require.Equal(t, "TestOrch", info.OrchestrationName)

	// Step 6: the old worker's ack must fail: its row went with the delete.
	err = p.AckWorkItem(ctx, oldWorkerLock, cdb.ActivityCompletedMessage{
		Instance: inst, ExecutionID: cdb.InitialExecutionID, ID: 2, Result: "stale-result-from-old-instance",
	})
	require.Error(t, err, "CRITICAL: Stale activity ack must fail to prevent corruption of recreated instance")

	// Step 7: a probe turn of the new instance sees no stale completion.
	item, lockToken := admEnqueueAndFetch(ctx, t, p, cdb.ExternalRaisedMessage{Instance: inst, Name: "probe-event", Data: "{}"})
	hasStaleCompletion := false
	for _, m := range item.Messages {
		if ac, ok := m.(cdb.ActivityCompletedMessage); ok && strings.Contains(ac.Result, "stale-result") {
			hasStaleCompletion = true
		}
	}
	require.False(t, hasStaleCompletion,
		"CRITICAL: New instance must NOT see stale completion from deleted instance. Messages: %#v", item.Messages)

	// Cleanup; results ignored, as in duroxide.
	_ = p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID, nil, nil, nil,
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted)}, nil)
	_, _ = admin.DeleteInstance(ctx, inst, true)
}
