package providertest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// atomicityTests is duroxide's provider_validation/atomicity.rs.
func atomicityTests() []Test {
	return []Test{
		{Name: "TestAtomicityFailureRollback", Run: testAtomicityFailureRollback},
		{Name: "TestMultiOperationAtomicAck", Run: testMultiOperationAtomicAck},
		{Name: "TestLockReleasedOnlyOnSuccessfulAck", Run: testLockReleasedOnlyOnSuccessfulAck},
		{Name: "TestConcurrentAckPrevention", Run: testConcurrentAckPrevention},
	}
}

// testAtomicityFailureRollback (2.1): an ack that fails (duplicate event id)
// changes nothing and keeps the instance lock.
func testAtomicityFailureRollback(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := b1FetchOrch(ctx, t, p, lockLong)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{b1StartedEvent(1, "instance-A")}, nil, nil, cdb.ExecutionMetadata{}, nil))

	require.Len(t, b1ReadOrEmpty(ctx, t, p, "instance-A"), 1)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token2 := b1FetchOrch(ctx, t, p, lockLong)

	err := p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{b1StartedEvent(1, "instance-A")}, // duplicate event id 1
		nil, nil, cdb.ExecutionMetadata{}, nil)
	require.Error(t, err, "Should reject duplicate event_id")

	require.Len(t, b1ReadOrEmpty(ctx, t, p, "instance-A"), 1, "History should remain unchanged after failed ack")

	// The failed ack must not have released the lock.
	b1FetchOrchNone(ctx, t, p, lockLong, "the lock must still be held after a failed ack")
}

// testMultiOperationAtomicAck (2.2): one ack persists history, worker items
// and orchestrator items together.
func testMultiOperationAtomicAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := b1FetchOrch(ctx, t, p, lockLong)

	history := []cdb.Event{
		b1StartedEvent(1, "instance-A"),
		b1Event(2, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity1", Input: "input1"}),
		b1Event(3, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity2", Input: "input2"}),
		b1Event(4, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity3", Input: "input3"}),
		b1Event(5, "instance-A", 1, cdb.TimerCreated{FireAtMs: 1234567890}),
	}
	workerItems := []cdb.WorkItem{
		cdb.ActivityExecuteMessage{Instance: "instance-A", ExecutionID: 1, ID: 1, Name: "Activity1", Input: "input1"},
		cdb.ActivityExecuteMessage{Instance: "instance-A", ExecutionID: 1, ID: 2, Name: "Activity2", Input: "input2"},
		cdb.ActivityExecuteMessage{Instance: "instance-A", ExecutionID: 1, ID: 3, Name: "Activity3", Input: "input3"},
	}
	orchestratorItems := []cdb.WorkItem{
		cdb.TimerFiredMessage{Instance: "instance-A", ExecutionID: 1, ID: 1, FireAtMs: 1234567890},
		cdb.ExternalRaisedMessage{Instance: "instance-A", Name: "TestEvent", Data: "test-data"},
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, history, workerItems, orchestratorItems,
		cdb.ExecutionMetadata{}, nil))

	// 1. All 5 history events.
	require.Len(t, b1ReadOrEmpty(ctx, t, p, "instance-A"), 5, "All 5 history events should be persisted")

	// 2. Exactly 3 worker items.
	for i := 0; i < 3; i++ {
		b1FetchWork(ctx, t, p, lockLong, "worker item %d of 3 should be fetchable", i+1)
	}
	b1FetchWorkNone(ctx, t, p, lockLong, "only 3 worker items were enqueued")

	// 3. Both orchestrator items, in order, in one batch.
	item, _ := b1FetchOrch(ctx, t, p, lockLong)
	require.Len(t, item.Messages, 2, "Should have TimerFired and ExternalRaised")
	assert.IsType(t, cdb.TimerFiredMessage{}, item.Messages[0])
	assert.IsType(t, cdb.ExternalRaisedMessage{}, item.Messages[1])
}

// testLockReleasedOnlyOnSuccessfulAck (2.3): a failed ack (bogus token) leaves
// the lock in place until it expires.
func testLockReleasedOnlyOnSuccessfulAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lockTimeout := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	b1FetchOrch(ctx, t, p, lockTimeout)

	b1FetchOrchNone(ctx, t, p, lockTimeout, "the instance must be locked")

	err := p.AckOrchestrationItem(ctx, "invalid-lock-token", 1,
		[]cdb.Event{b1StartedEvent(2, "instance-A")}, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.Error(t, err, "an ack with an invalid lock token must fail")

	b1FetchOrchNone(ctx, t, p, lockTimeout, "the lock must still be held")

	time.Sleep(lockTimeout + 100*time.Millisecond)

	item, _ := b1FetchOrch(ctx, t, p, lockTimeout, "the instance must be fetchable after its lock expired")
	assert.Equal(t, "instance-A", item.Instance)
}

// testConcurrentAckPrevention (2.4): two concurrent acks with one token:
// exactly one succeeds.
func testConcurrentAckPrevention(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := b1FetchOrch(ctx, t, p, lockLong)

	results := make([]error, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = p.AckOrchestrationItem(ctx, token, 1,
				[]cdb.Event{b1StartedEvent(1, "instance-A")}, nil, nil, cdb.ExecutionMetadata{}, nil)
		}(i)
	}
	wg.Wait()

	successes, failures := 0, 0
	for _, err := range results {
		if err == nil {
			successes++
		} else {
			failures++
		}
	}
	assert.Equal(t, 1, successes, "Exactly one ack should succeed (results: %v)", results)
	assert.Equal(t, 1, failures, "Exactly one ack should fail (results: %v)", results)
}
