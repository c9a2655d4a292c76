package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Instances the tests start from, built through the provider alone: a
// start is enqueued and fetched, and the first turn's ack creates the
// instance.

// CreateInstance enqueues a start, fetches it (lockLong) and acks
// OrchestrationStarted with TestOrch metadata, leaving a Running instance
// with no pending messages.
func CreateInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	item, token := enqueueAndFetchOrchestration(ctx, t, p, StartItem(instance))
	require.Equal(t, instance, item.Instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{StartedEvent(instance, cdb.InitialExecutionID)}, nil, nil, TestOrchMetadata(), nil))
}

// CreateInstanceWithParent enqueues a start whose parent is parent.
func CreateInstanceWithParent(ctx context.Context, t *testing.T, p cdb.Provider, instance, parent string) {
	t.Helper()
	start := StartItem(instance).(cdb.StartOrchestrationMessage)
	start.ParentInstance = ptr(parent)
	start.ParentID = ptr(uint64(1))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start, 0))
}

// createCompletedInstance is a root TestOrch instance whose first turn
// completes it with output "done".
func createCompletedInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	createCompletedInstanceWithParent(ctx, t, p, instance, nil)
}

// createCompletedInstanceWithParent is createCompletedInstance under parent
// when parent is not nil: the start and OrchestrationStarted carry
// parent_instance = parent and parent_id = 1, and the metadata stores the
// parent link.
func createCompletedInstanceWithParent(ctx context.Context, t *testing.T, p cdb.Provider, instance string, parent *string) {
	t.Helper()
	start := StartItem(instance).(cdb.StartOrchestrationMessage)
	started := orchestrationStarted("TestOrch", "1.0.0", "{}")
	if parent != nil {
		start.ParentInstance = ptr(*parent)
		start.ParentID = ptr(uint64(1))
		started.ParentInstance = ptr(*parent)
		started.ParentID = ptr(uint64(1))
	}
	_, token := enqueueAndFetchOrchestration(ctx, t, p, start)
	var parentLink *string
	if parent != nil {
		parentLink = ptr(*parent)
	}
	metadata := TestOrchMetadata()
	metadata.Status = ptr(cdb.StatusCompleted)
	metadata.Output = ptr("done")
	metadata.ParentInstanceID = parentLink
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{newEvent(1, instance, 1, started)}, nil, nil, metadata, nil))
}

// createTerminalInstance starts a root TestOrch instance and acks its first
// turn with status and output (no terminal event in the history, as in
// duroxide's helpers).
func createTerminalInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, status cdb.InstanceStatus, output string) {
	t.Helper()
	_, token := enqueueAndFetchOrchestration(ctx, t, p, StartItem(instance))
	metadata := TestOrchMetadata()
	metadata.Status = ptr(status)
	metadata.Output = ptr(output)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent(instance, 1)}, nil, nil, metadata, nil))
}

// createFailedInstance is a root TestOrch instance that failed on its first
// turn.
func createFailedInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	createTerminalInstance(ctx, t, p, instance, cdb.StatusFailed, "error: something went wrong")
}

// createCancelledInstance is a root TestOrch instance cancelled on its first
// turn: a cancelled orchestration is stored as Failed with a cancellation
// output.
func createCancelledInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	createTerminalInstance(ctx, t, p, instance, cdb.StatusFailed, "cancelled: user requested cancellation")
}

// createChildInstance enqueues a TestOrch start with parent_instance =
// parent and no parent_id, then the first turn (5s lock) acks a ChildOrch
// OrchestrationStarted and completes the child with output "done", storing
// the parent link.
func createChildInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance, parent string) {
	t.Helper()
	start := StartItem(instance).(cdb.StartOrchestrationMessage)
	start.ParentInstance = ptr(parent)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start, 0))
	_, token := fetchOrchestration(ctx, t, p, 5*time.Second, "the child's start must be fetchable")
	started := orchestrationStarted("ChildOrch", "1.0.0", "{}")
	started.ParentInstance = ptr(parent)
	metadata := orchestrationMetadata("ChildOrch", "1.0.0")
	metadata.Status = ptr(cdb.StatusCompleted)
	metadata.Output = ptr("done")
	metadata.ParentInstanceID = ptr(parent)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{newEvent(1, instance, cdb.InitialExecutionID, started)}, nil, nil, metadata, nil))
}

// createMultiExecutionInstance is a TestOrch continue-as-new chain of n
// executions, 1..n-1 ContinuedAsNew and n Completed.
func createMultiExecutionInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64) {
	t.Helper()
	createExecutionChain(ctx, t, p, instance, n, "TestOrch", cdb.StatusCompleted)
}

// createRunningMultiExecutionInstance is a LongRunning chain of n
// executions, 1..n-1 ContinuedAsNew and n still Running.
func createRunningMultiExecutionInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64) {
	t.Helper()
	createExecutionChain(ctx, t, p, instance, n, "LongRunning", cdb.StatusRunning)
}

// createExecutionChain starts execution 1 from StartItem and each later one
// from a ContinueAsNew of name; each turn acks OrchestrationStarted (event
// 1) of name into its own execution with status ContinuedAsNew, or
// lastStatus for the last one.
func createExecutionChain(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64, name string, lastStatus cdb.InstanceStatus) {
	t.Helper()
	for exec := uint64(1); exec <= n; exec++ {
		status := cdb.StatusContinuedAsNew
		if exec == n {
			status = lastStatus
		}
		var item cdb.WorkItem = StartItem(instance)
		if exec > 1 {
			item = cdb.ContinueAsNewMessage{
				Instance:           instance,
				Orchestration:      name,
				Input:              "{}",
				Version:            ptr("1.0.0"),
				CarryForwardEvents: []cdb.CarryForwardEvent{},
			}
		}
		_, token := enqueueAndFetchOrchestration(ctx, t, p, item)
		metadata := orchestrationMetadata(name, "1.0.0")
		metadata.Status = ptr(status)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, exec,
			[]cdb.Event{newEvent(1, instance, exec, orchestrationStarted(name, "1.0.0", "{}"))}, nil, nil, metadata, nil))
	}
}
