package cdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Cosmos DB-specific tests of deletion, the KV store and the admin side.

// startChild creates instance id as a child of parent, through an ack that
// names the parent.
func startChild(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, id, parent string) {
	t.Helper()
	providertest.CreateInstanceWithParent(ctx, t, p, id, parent)
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, id, item.Instance)
	md := providertest.TestOrchMetadata()
	md.ParentInstanceID = &parent
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(id, 1)}, nil, nil, md, nil))
}

func countAllDocs(t *testing.T, p *cdb.CosmosProvider, instance string) int {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	var n int
	require.NoError(t, json.Unmarshal(res.Items[0], &n))
	return n
}

// A delete interrupted right after its first step (the intent and the
// root's mark) already reads as done, and another process's reconciler
// finishes it.
func TestDeleteInterruptedAfterItsFirstStepIsInvisibleAndCompletes(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 2})
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	tree := []string{"root", "root::child", "root::child::leaf"}
	providertest.CreateInstance(ctx, t, a, tree[0])
	startChild(ctx, t, a, tree[1], tree[0])
	startChild(ctx, t, a, tree[2], tree[1])
	require.NoError(t, a.EnqueueForOrchestrator(ctx, pokeItem(tree[2]), 0))

	// Once the intent's batch is sent, the process loses every connection.
	var recorded atomic.Bool
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultDropConnection, Match: func(r cdb.FakeRequest) bool {
		if recorded.Load() {
			return true
		}
		recorded.Store(r.Operation == "Batch" && r.PartitionKey == `["root"]`)
		return false
	}})
	_, err := a.DeleteInstance(ctx, "root", true)
	require.Error(t, err, "the deletion stopped after its first step")
	require.True(t, recorded.Load())
	remove()

	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, OutboxMinAge: time.Millisecond, AbandonedDeletionAge: time.Millisecond})
	for _, id := range tree {
		_, err := b.GetInstanceInfo(ctx, id)
		assert.Error(t, err, "%s reads as deleted", id)
		_, err = b.GetParentID(ctx, id)
		assert.Error(t, err, "%s has no parent to report", id)
	}
	listed, err := b.ListInstances(ctx)
	require.NoError(t, err)
	assert.Empty(t, listed, "no instance of the tree is listed")
	children, err := b.ListChildren(ctx, "root")
	require.NoError(t, err)
	assert.Empty(t, children)
	history, err := b.Read(ctx, "root")
	require.NoError(t, err)
	assert.Empty(t, history)

	time.Sleep(5 * time.Millisecond)
	require.NoError(t, b.ReconcileOutbox(ctx), "the reconciler finishes the deletion")
	for _, id := range tree {
		assert.Zero(t, countAllDocs(t, b, id), "%s's partition is empty", id)
	}
	providertest.CreateInstance(ctx, t, b, "root") // the id is free again
}

// A partition with more documents than one batch holds is deleted in
// several batches.
func TestDeletingALargePartitionTakesSeveralBatches(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "big")
	for i := 0; i < 250; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "big", Name: "e", Data: fmt.Sprint(i)}, 0))
	}
	before := acct.Counts().ByOperation["Batch"]
	res, err := p.DeleteInstance(ctx, "big", true)
	require.NoError(t, err)
	assert.EqualValues(t, 250, res.QueueMessagesDeleted)
	assert.EqualValues(t, 1, res.InstancesDeleted)
	assert.GreaterOrEqual(t, acct.Counts().ByOperation["Batch"]-before, int64(3), "at least three batches of at most 100")
	assert.Zero(t, countAllDocs(t, p, "big"))
}

// A turn that sets 150 keys and completes the execution (merging them into
// the store) still commits in one batch.
func TestKVHeavyTurnCommitsInOneBatch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "kv")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("kv"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)

	var events []cdb.Event
	for i := 0; i < cdb.MaxKVKeys; i++ {
		events = append(events, cdb.Event{EventID: uint64(i + 2), InstanceID: "kv", ExecutionID: 1,
			Kind: cdb.KeyValueSet{Key: fmt.Sprintf("key-%03d", i), Value: fmt.Sprintf("value-%03d", i), LastUpdatedAtMs: 1}})
	}
	events = append(events, cdb.Event{EventID: uint64(cdb.MaxKVKeys + 2), InstanceID: "kv", ExecutionID: 1, Kind: cdb.OrchestrationCompleted{Output: "done"}})
	completed := cdb.StatusCompleted
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, cdb.ExecutionMetadata{Status: &completed, Output: ptrTo("done")}, nil))
	var batches int
	for _, r := range log.take() {
		if r.Operation == "Batch" {
			batches++
			var ops []json.RawMessage
			require.NoError(t, json.Unmarshal(r.Body, &ops))
			assert.LessOrEqual(t, len(ops), cdb.MaxBatchOperations)
		}
	}
	assert.Equal(t, 1, batches, "the turn, its KV delta and the merge commit together")

	all, err := p.GetKVAllValues(ctx, "kv")
	require.NoError(t, err)
	assert.Len(t, all, cdb.MaxKVKeys)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("kv"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Len(t, item.KVSnapshot, cdb.MaxKVKeys, "the completed execution's keys are in the next fetch's snapshot")
}

// Metrics and queue depths are exact on a container with several partition
// key ranges: counts are taken per range and summed.
func TestMetricsOnSeveralRangesAreExact(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 4})
	// The reconciler's cross-partition look would count in the check below:
	// it does not run in this test (the hour outlasts it).
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	status := map[string]cdb.InstanceStatus{}
	for i := 0; i < 24; i++ {
		id := fmt.Sprintf("m-%02d", i)
		providertest.CreateInstance(ctx, t, p, id)
		status[id] = cdb.StatusRunning
	}
	finish := func(id string, s cdb.InstanceStatus) {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{Status: &s}, nil))
		status[item.Instance] = s
	}
	for i := 0; i < 7; i++ {
		finish(fmt.Sprintf("m-%02d", i), cdb.StatusCompleted)
	}
	for i := 7; i < 10; i++ {
		finish(fmt.Sprintf("m-%02d", i), cdb.StatusFailed)
	}
	for i := 0; i < 5; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("m-%02d", 20+i%4)), 0))
	}
	_, work := fanOut("m-23", 6)
	for _, w := range work {
		require.NoError(t, p.EnqueueForWorker(ctx, w))
	}

	ranges, err := p.Container().ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)
	require.Len(t, ranges, 4)
	crossPartitionBefore := acct.Counts().CrossPartitionQueries
	m, err := p.GetSystemMetrics(ctx)
	require.NoError(t, err)
	var running, completed, failed uint64
	for _, s := range status {
		switch s {
		case cdb.StatusRunning:
			running++
		case cdb.StatusCompleted:
			completed++
		case cdb.StatusFailed:
			failed++
		}
	}
	assert.EqualValues(t, 24, m.TotalInstances)
	assert.Equal(t, running, m.RunningInstances)
	assert.Equal(t, completed, m.CompletedInstances)
	assert.Equal(t, failed, m.FailedInstances)
	assert.EqualValues(t, 24, m.TotalExecutions)
	assert.EqualValues(t, 24, m.TotalEvents, "one OrchestrationStarted each")

	d, err := p.GetQueueDepths(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5, d.OrchestratorQueue)
	assert.Equal(t, 6, d.WorkerQueue)
	assert.Zero(t, acct.Counts().CrossPartitionQueries-crossPartitionBefore, "counts are per range, never a cross-partition aggregate")
}

func TestNotFoundIsRecognisableThroughWrapping(t *testing.T) {
	ctx := context.Background()
	_, p, _ := newWorkerProvider(t)
	_, err := p.GetInstanceInfo(ctx, "nobody")
	require.Error(t, err)
	wrapped := fmt.Errorf("caller: %w", err)
	assert.ErrorIs(t, wrapped, cdb.ErrInstanceNotFound)
	assert.False(t, cdb.IsRetryable(wrapped), "a missing instance does not appear on retry")
	_, err = p.GetParentID(ctx, "nobody")
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
	_, err = p.PruneExecutions(ctx, "nobody", cdb.PruneOptions{})
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
}
