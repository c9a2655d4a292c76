package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Helpers shared by the management, deletion, prune and bulk_deletion
// ports: the private helpers of duroxide's deletion.rs, prune.rs and
// bulk_deletion.rs. Names carry an adm prefix so they cannot collide with
// helpers other ports add to the package.

// admEvent is duroxide's Event::with_event_id(id, instance, execution, None,
// kind): an event stamped now by this duroxide version.
func admEvent(eventID uint64, instance string, executionID uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            kind,
	}
}

// admStarted is an OrchestrationStarted kind without parent, carry-forward
// events or initial custom status.
func admStarted(name, version, input string) cdb.OrchestrationStarted {
	return cdb.OrchestrationStarted{Name: name, Version: version, Input: input}
}

// admNowMs is duroxide's now_millis(): wall-clock milliseconds since the
// Unix epoch.
func admNowMs() uint64 { return uint64(time.Now().UnixMilli()) }

// admFetch is fetch_orchestration_item(lock, 0, None).unwrap().unwrap().
func admFetch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "expected an orchestration item")
	return item, token
}

// admEnqueueAndFetch enqueues item for the orchestrator and fetches the
// next orchestration item with a 30s lock, which must exist.
func admEnqueueAndFetch(ctx context.Context, t *testing.T, p cdb.Provider, item cdb.WorkItem) (*cdb.OrchestrationItem, string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, item, 0))
	return admFetch(ctx, t, p, lockLong)
}

// admCreateCompletedInstance is deletion.rs's (and bulk_deletion.rs's)
// create_completed_instance: a root TestOrch instance whose first turn
// completes it with output "done".
func admCreateCompletedInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	admCreateCompletedInstanceWithParent(ctx, t, p, instance, nil)
}

// admCreateCompletedInstanceWithParent is create_completed_instance_with_parent
// (deletion.rs takes Option<&str>, bulk_deletion.rs "" for none; both do the
// same): with a parent, the start and OrchestrationStarted carry
// parent_instance = parent and parent_id = 1, and the metadata stores the
// parent link.
func admCreateCompletedInstanceWithParent(ctx context.Context, t *testing.T, p cdb.Provider, instance string, parent *string) {
	t.Helper()
	start := StartItem(instance)
	started := admStarted("TestOrch", "1.0.0", "{}")
	if parent != nil {
		start = cdb.StartOrchestrationMessage{
			Instance:       instance,
			Orchestration:  "TestOrch",
			Input:          "{}",
			Version:        ptr("1.0.0"),
			ParentInstance: ptr(*parent),
			ParentID:       ptr(uint64(1)),
			ExecutionID:    cdb.InitialExecutionID,
		}
		started.ParentInstance = ptr(*parent)
		started.ParentID = ptr(uint64(1))
	}
	_, token := admEnqueueAndFetch(ctx, t, p, start)
	var parentLink *string
	if parent != nil {
		parentLink = ptr(*parent)
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, instance, 1, started)}, nil, nil,
		cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusCompleted),
			Output:               ptr("done"),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
			ParentInstanceID:     parentLink,
		}, nil))
}

// admCreateTerminalInstance starts a root TestOrch instance and acks its
// first turn with status and output (no terminal event in the history, as
// in duroxide's helpers).
func admCreateTerminalInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, status cdb.InstanceStatus, output string) {
	t.Helper()
	_, token := admEnqueueAndFetch(ctx, t, p, StartItem(instance))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, instance, 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{
			Status:               ptr(status),
			Output:               ptr(output),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))
}

// admCreateFailedInstance is deletion.rs's create_failed_instance.
func admCreateFailedInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	admCreateTerminalInstance(ctx, t, p, instance, cdb.StatusFailed, "error: something went wrong")
}

// admCreateCancelledInstance is deletion.rs's create_cancelled_instance: a
// cancelled orchestration is stored as Failed with a cancellation output.
func admCreateCancelledInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	admCreateTerminalInstance(ctx, t, p, instance, cdb.StatusFailed, "cancelled: user requested cancellation")
}

// admCreateChildInstance is deletion.rs's create_child_instance: mod.rs's
// create_instance_with_parent enqueues a TestOrch start with parent_instance
// = parent and no parent_id, then the first turn (5s lock) acks a ChildOrch
// OrchestrationStarted and completes the child with output "done", storing
// the parent link.
func admCreateChildInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance, parent string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{
		Instance:       instance,
		Orchestration:  "TestOrch",
		Input:          "{}",
		Version:        ptr("1.0.0"),
		ParentInstance: ptr(parent),
		ExecutionID:    cdb.InitialExecutionID,
	}, 0))
	_, token := admFetch(ctx, t, p, 5*time.Second)
	started := admStarted("ChildOrch", "1.0.0", "{}")
	started.ParentInstance = ptr(parent)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{admEvent(1, instance, cdb.InitialExecutionID, started)}, nil, nil,
		cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusCompleted),
			Output:               ptr("done"),
			OrchestrationName:    ptr("ChildOrch"),
			OrchestrationVersion: ptr("1.0.0"),
			ParentInstanceID:     ptr(parent),
		}, nil))
}

// admCreateMultiExecutionInstance is prune.rs's
// create_multi_execution_instance: a TestOrch continue-as-new chain of n
// executions, 1..n-1 ContinuedAsNew and n Completed.
func admCreateMultiExecutionInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64) {
	t.Helper()
	admCreateExecutionChain(ctx, t, p, instance, n, "TestOrch", cdb.StatusCompleted)
}

// admCreateRunningMultiExecutionInstance is prune.rs's
// create_running_multi_execution_instance: a LongRunning chain of n
// executions, 1..n-1 ContinuedAsNew and n still Running.
func admCreateRunningMultiExecutionInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64) {
	t.Helper()
	admCreateExecutionChain(ctx, t, p, instance, n, "LongRunning", cdb.StatusRunning)
}

// admCreateExecutionChain is the loop both prune.rs helpers share: execution
// 1 starts from start_item, each later one from a ContinueAsNew of name; each
// turn acks OrchestrationStarted (event 1) of name into its own execution
// with status ContinuedAsNew, or lastStatus for the last one.
func admCreateExecutionChain(ctx context.Context, t *testing.T, p cdb.Provider, instance string, n uint64, name string, lastStatus cdb.InstanceStatus) {
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
		_, token := admEnqueueAndFetch(ctx, t, p, item)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, exec,
			[]cdb.Event{admEvent(1, instance, exec, admStarted(name, "1.0.0", "{}"))}, nil, nil,
			cdb.ExecutionMetadata{
				Status:               ptr(status),
				OrchestrationName:    ptr(name),
				OrchestrationVersion: ptr("1.0.0"),
			}, nil))
	}
}

// admExists is get_instance_info(instance).is_ok(), where duroxide means
// "not found" by the error: here only cdb.ErrInstanceNotFound reads as
// absent, and any other error fails the test, so a broken GetInstanceInfo
// cannot pass for a deletion.
func admExists(ctx context.Context, t *testing.T, admin cdb.ProviderAdmin, instance string) bool {
	t.Helper()
	_, err := admin.GetInstanceInfo(ctx, instance)
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return false
	}
	require.NoError(t, err, "GetInstanceInfo(%s): only not-found means absent", instance)
	return true
}
