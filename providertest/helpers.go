package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The helpers of duroxide's provider_validation/mod.rs, and small Go
// conveniences the ported tests share.

// lockLong is the 30s lock duroxide's tests use where they never wait for
// expiry.
const lockLong = 30 * time.Second

// noPoll is the poll timeout of a fetch that must not wait.
const noPoll = time.Duration(0)

// testContext is a context bounded well beyond any single test's waits.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }

// StartItem is duroxide's start_item: StartOrchestration of "TestOrch"
// version "1.0.0", input "{}", execution 1.
func StartItem(instance string) cdb.WorkItem {
	return cdb.StartOrchestrationMessage{
		Instance:      instance,
		Orchestration: "TestOrch",
		Input:         "{}",
		Version:       ptr("1.0.0"),
		ExecutionID:   cdb.InitialExecutionID,
	}
}

// StartedEvent is the OrchestrationStarted event (event 1) of a TestOrch
// instance.
func StartedEvent(instance string, executionID uint64) cdb.Event {
	return cdb.Event{
		EventID:         cdb.InitialEventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind: cdb.OrchestrationStarted{
			Name:    "TestOrch",
			Version: "1.0.0",
			Input:   "{}",
		},
	}
}

// TestOrchMetadata is the metadata of an instance's first turn.
func TestOrchMetadata() cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{
		OrchestrationName:    ptr("TestOrch"),
		OrchestrationVersion: ptr("1.0.0"),
	}
}

// CreateInstance is duroxide's create_instance: enqueue a start, fetch it
// (30s lock) and ack OrchestrationStarted with TestOrch metadata, leaving a
// Running instance with no pending messages.
func CreateInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start of %s must be fetchable", instance)
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

// Admin returns p's ProviderAdmin, failing the test clearly if p has none.
func Admin(t *testing.T, p cdb.Provider) cdb.ProviderAdmin {
	t.Helper()
	admin, ok := p.Admin()
	require.True(t, ok, "this test needs the provider's ProviderAdmin (Admin() returned false)")
	return admin
}
