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

// testAtomicityFailureRollback: an ack that fails (duplicate event id)
// changes nothing and keeps the instance lock.
func testAtomicityFailureRollback(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent("instance-A", 1)}, nil, nil, cdb.ExecutionMetadata{}, nil))

	require.Len(t, readOrEmpty(ctx, t, p, "instance-A"), 1)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token2 := fetchOrchestration(ctx, t, p, lockLong)

	err := p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{StartedEvent("instance-A", 1)}, // duplicate event id 1
		nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrDuplicateEvent, "Should reject duplicate event_id")

	require.Len(t, readOrEmpty(ctx, t, p, "instance-A"), 1, "History should remain unchanged after failed ack")

	// The failed ack must not have released the lock.
	fetchNoOrchestration(ctx, t, p, lockLong, "the lock must still be held after a failed ack")
}

// testMultiOperationAtomicAck: one ack persists history, worker items
// and orchestrator items together.
func testMultiOperationAtomicAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)

	history := []cdb.Event{
		StartedEvent("instance-A", 1),
		newEvent(2, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity1", Input: "input1"}),
		newEvent(3, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity2", Input: "input2"}),
		newEvent(4, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity3", Input: "input3"}),
		newEvent(5, "instance-A", 1, cdb.TimerCreated{FireAtMs: 1234567890}),
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
	require.Len(t, readOrEmpty(ctx, t, p, "instance-A"), 5, "All 5 history events should be persisted")

	// 2. Exactly 3 worker items.
	for i := 0; i < 3; i++ {
		fetchWork(ctx, t, p, lockLong, "worker item %d of 3 should be fetchable", i+1)
	}
	fetchNoWork(ctx, t, p, lockLong, "only 3 worker items were enqueued")

	// 3. Both orchestrator items, in order, in one batch.
	item, _ := fetchOrchestration(ctx, t, p, lockLong)
	require.Len(t, item.Messages, 2, "Should have TimerFiredMessage and ExternalRaisedMessage")
	assert.IsType(t, cdb.TimerFiredMessage{}, item.Messages[0])
	assert.IsType(t, cdb.ExternalRaisedMessage{}, item.Messages[1])
}

// testLockReleasedOnlyOnSuccessfulAck: a failed ack (bogus token) leaves
// the lock in place until it expires.
func testLockReleasedOnlyOnSuccessfulAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lockTimeout := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	fetchOrchestration(ctx, t, p, lockTimeout)

	fetchNoOrchestration(ctx, t, p, lockTimeout, "the instance must be locked")

	err := p.AckOrchestrationItem(ctx, "invalid-lock-token", 1,
		[]cdb.Event{newEvent(2, "instance-A", 1, orchestrationStarted("TestOrch", "1.0.0", "{}"))}, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "an ack with an invalid lock token must fail")

	fetchNoOrchestration(ctx, t, p, lockTimeout, "the lock must still be held")

	time.Sleep(lockTimeout + 100*time.Millisecond)

	item, _ := fetchOrchestration(ctx, t, p, lockTimeout, "the instance must be fetchable after its lock expired")
	assert.Equal(t, "instance-A", item.Instance)
}

// testConcurrentAckPrevention: two concurrent acks with one token:
// exactly one succeeds.
func testConcurrentAckPrevention(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)

	results := make([]error, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = p.AckOrchestrationItem(ctx, token, 1,
				[]cdb.Event{StartedEvent("instance-A", 1)}, nil, nil, cdb.ExecutionMetadata{}, nil)
		}(i)
	}
	wg.Wait()

	successes, failures := 0, 0
	for _, err := range results {
		if err == nil {
			successes++
		} else {
			failures++
			assert.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the losing ack's lock went with the winner's")
		}
	}
	assert.Equal(t, 1, successes, "Exactly one ack should succeed (results: %v)", results)
	assert.Equal(t, 1, failures, "Exactly one ack should fail (results: %v)", results)
}
