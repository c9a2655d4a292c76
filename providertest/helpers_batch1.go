package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Helpers shared by the atomicity, error_handling, instance_creation,
// instance_locking and lock_expiration ports. The b1 prefix keeps them apart
// from helpers other modules add to the package.

// b1Event is duroxide's Event::with_event_id(id, instance, execution, None,
// kind): an event stamped now by this duroxide version.
func b1Event(eventID uint64, instance string, executionID uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            kind,
	}
}

// b1Started is an OrchestrationStarted kind with input "{}" and no parent.
func b1Started(name, version string) cdb.OrchestrationStarted {
	return cdb.OrchestrationStarted{Name: name, Version: version, Input: "{}"}
}

// b1StartedEvent is event eventID of instance's execution 1: the
// OrchestrationStarted of TestOrch 1.0.0 the tests ack on first turns.
func b1StartedEvent(eventID uint64, instance string) cdb.Event {
	return b1Event(eventID, instance, cdb.InitialExecutionID, b1Started("TestOrch", "1.0.0"))
}

// b1Metadata is ExecutionMetadata with only the name and version set.
func b1Metadata(name, version string) cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{OrchestrationName: ptr(name), OrchestrationVersion: ptr(version)}
}

// b1ActivityExecute is the ActivityExecute the lock tests enqueue:
// "TestActivity" with input "test", execution 1, no session and no tag.
func b1ActivityExecute(instance string, id uint64) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{
		Instance:    instance,
		ExecutionID: cdb.InitialExecutionID,
		ID:          id,
		Name:        "TestActivity",
		Input:       "test",
	}
}

// b1ActivityCompleted is an ActivityCompleted for execution 1.
func b1ActivityCompleted(instance string, id uint64, result string) cdb.ActivityCompletedMessage {
	return cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: cdb.InitialExecutionID, ID: id, Result: result}
}

// b1FetchOrch is fetch_orchestration_item(lock, 0, None).unwrap().unwrap():
// the fetch must succeed and return work.
func b1FetchOrch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err, msgAndArgs...)
	require.NotNil(t, item, msgAndArgs...)
	return item, token
}

// b1FetchOrchNone is fetch_orchestration_item(lock, 0, None).unwrap().is_none():
// the fetch must succeed and return no work.
func b1FetchOrchNone(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err, msgAndArgs...)
	require.Nil(t, item, msgAndArgs...)
}

// b1FetchWork is fetch_work_item(lock, 0, None, &TagFilter::default())
// .unwrap().unwrap().
func b1FetchWork(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (cdb.WorkItem, string) {
	t.Helper()
	item, token, _, err := p.FetchWorkItem(ctx, lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err, msgAndArgs...)
	require.NotNil(t, item, msgAndArgs...)
	return item, token
}

// b1FetchWorkNone is fetch_work_item(lock, 0, None, &TagFilter::default())
// .unwrap().is_none().
func b1FetchWorkNone(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) {
	t.Helper()
	item, _, _, err := p.FetchWorkItem(ctx, lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err, msgAndArgs...)
	require.Nil(t, item, msgAndArgs...)
}

// b1ReadOrEmpty is read(instance).unwrap_or_default(), where duroxide's
// default stands for an instance that is not there: here only
// cdb.ErrInstanceNotFound reads as an empty history, and any other error
// fails the test rather than passing for "no events".
func b1ReadOrEmpty(ctx context.Context, t *testing.T, p cdb.Provider, instance string) []cdb.Event {
	t.Helper()
	events, err := p.Read(ctx, instance)
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return nil
	}
	require.NoError(t, err, "Read(%s): only not-found reads as an empty history", instance)
	return events
}

// b1ActivityCompletedIDs is the ids of the ActivityCompleted messages of a
// batch, in batch order.
func b1ActivityCompletedIDs(messages []cdb.WorkItem) []uint64 {
	ids := []uint64{}
	for _, m := range messages {
		if ac, ok := m.(cdb.ActivityCompletedMessage); ok {
			ids = append(ids, ac.ID)
		}
	}
	return ids
}
