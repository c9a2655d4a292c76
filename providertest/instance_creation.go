package providertest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// instanceCreationTests is duroxide's provider_validation/instance_creation.rs.
func instanceCreationTests() []Test {
	return []Test{
		{Name: "TestInstanceCreationViaMetadata", Run: testInstanceCreationViaMetadata},
		{Name: "TestNoInstanceCreationOnEnqueue", Run: testNoInstanceCreationOnEnqueue},
		{Name: "TestNullVersionHandling", Run: testNullVersionHandling},
		{Name: "TestSubOrchestrationInstanceCreation", Run: testSubOrchestrationInstanceCreation},
	}
}

// testInstanceCreationViaMetadata: the instance is created by the first ack,
// from its metadata, not on enqueue.
func testInstanceCreationViaMetadata(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))

	// No instance yet: name and execution come from the work item.
	item, token := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, "instance-A", item.Instance)
	assert.Equal(t, "TestOrch", item.OrchestrationName)
	assert.Equal(t, uint64(1), item.ExecutionID)
	assert.Len(t, item.History, 0, "no history yet")

	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{b1Event(1, "instance-A", 1, b1Started("TestOrch", "2.0.0"))},
		nil, nil, b1Metadata("TestOrch", "2.0.0"), nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	item2, token2 := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, "instance-A", item2.Instance)
	assert.Equal(t, "TestOrch", item2.OrchestrationName)
	assert.Equal(t, "2.0.0", item2.Version, "the version comes from the ack's metadata, not the work item")
	assert.Equal(t, uint64(1), item2.ExecutionID)
	assert.Len(t, item2.History, 1, "the OrchestrationStarted event")

	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// testNoInstanceCreationOnEnqueue: a start is fetchable although no instance
// exists yet, and the ack with metadata succeeds.
func testNoInstanceCreationOnEnqueue(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-B"), 0))

	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "Should be able to fetch work item even if instance doesn't exist")
	assert.Equal(t, "instance-B", item.Instance)

	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{b1StartedEvent(1, "instance-B")}, nil, nil, TestOrchMetadata(), nil))
}

// testNullVersionHandling: a start without a version is fetchable, and the
// version stored from the ack's metadata is reported afterwards.
func testNullVersionHandling(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	start := cdb.StartOrchestrationMessage{
		Instance:      "instance-C",
		Orchestration: "TestOrch",
		Input:         "{}",
		Version:       nil, // no version
		ExecutionID:   1,
	}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start, 0))

	item, token := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, "instance-C", item.Instance)

	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{b1Event(1, "instance-C", 1, b1Started("TestOrch", "3.0.0"))},
		nil, nil, b1Metadata("TestOrch", "3.0.0"), nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-C"), 0))
	item2, token2 := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, "3.0.0", item2.Version, "the version comes from the ack's metadata")

	require.NoError(t, p.AckOrchestrationItem(ctx, token2, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// testSubOrchestrationInstanceCreation: a child started by its parent's ack
// is created by its own first ack, from metadata.
func testSubOrchestrationInstanceCreation(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const child = "parent-instance::child-instance"

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("parent-instance"), 0))
	_, parentToken := b1FetchOrch(ctx, t, p, lockLong)
	childStart := cdb.StartOrchestrationMessage{
		Instance:       child,
		Orchestration:  "ChildOrch",
		Input:          "{}",
		ParentInstance: ptr("parent-instance"),
		ParentID:       ptr(uint64(1)),
		ExecutionID:    1,
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, parentToken, 1,
		[]cdb.Event{b1Event(1, "parent-instance", 1, b1Started("ParentOrch", "1.0.0"))},
		nil, []cdb.WorkItem{childStart}, b1Metadata("ParentOrch", "1.0.0"), nil))

	// The child does not exist yet, but its start is fetchable.
	childItem, childToken := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, child, childItem.Instance)
	assert.Equal(t, "ChildOrch", childItem.OrchestrationName)

	childStarted := b1Started("ChildOrch", "1.5.0")
	childStarted.ParentInstance = ptr("parent-instance")
	childStarted.ParentID = ptr(uint64(1))
	require.NoError(t, p.AckOrchestrationItem(ctx, childToken, 1,
		[]cdb.Event{b1Event(1, child, 1, childStarted)},
		nil, nil, b1Metadata("ChildOrch", "1.5.0"), nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{
		Instance:      child,
		Orchestration: "ChildOrch",
		Input:         "{}",
		ExecutionID:   1,
	}, 0))
	childItem2, childToken2 := b1FetchOrch(ctx, t, p, lockLong)
	assert.Equal(t, child, childItem2.Instance)
	assert.Equal(t, "1.5.0", childItem2.Version, "the version comes from the ack's metadata")

	require.NoError(t, p.AckOrchestrationItem(ctx, childToken2, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}
