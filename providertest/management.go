package providertest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// managementTests is duroxide's provider_validation/management.rs: the
// listing and inspection methods of ProviderAdmin, and the provider's
// GetInstanceStats (history size, KV store and delta, carry-forward events).
func managementTests() []Test {
	return []Test{
		{Name: "TestListInstances", Run: testListInstances},
		{Name: "TestListInstancesByStatus", Run: testListInstancesByStatus},
		{Name: "TestListExecutions", Run: testListExecutions},
		{Name: "TestGetInstanceInfo", Run: testGetInstanceInfo},
		{Name: "TestGetExecutionInfo", Run: testGetExecutionInfo},
		{Name: "TestGetSystemMetrics", Run: testGetSystemMetrics},
		{Name: "TestGetQueueDepths", Run: testGetQueueDepths},
		{Name: "TestGetInstanceStatsNonexistent", Run: testGetInstanceStatsNonexistent},
		{Name: "TestGetInstanceStatsHistory", Run: testGetInstanceStatsHistory},
		{Name: "TestGetInstanceStatsKV", Run: testGetInstanceStatsKV},
		{Name: "TestGetInstanceStatsCarryForward", Run: testGetInstanceStatsCarryForward},
		{Name: "TestGetInstanceStatsKVDeltaOnly", Run: testGetInstanceStatsKVDeltaOnly},
		{Name: "TestGetInstanceStatsKVMerged", Run: testGetInstanceStatsKVMerged},
	}
}

func testListInstances(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	for i := 0; i < 3; i++ {
		CreateInstance(ctx, t, p, fmt.Sprintf("mgmt-inst-%d", i))
	}

	instances, err := admin.ListInstances(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(instances), 3, "Should list all created instances")
	for i := 0; i < 3; i++ {
		require.Contains(t, instances, fmt.Sprintf("mgmt-inst-%d", i), "Should include instance mgmt-inst-%d", i)
	}
}

func testListInstancesByStatus(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem("mgmt-completed"))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, "mgmt-completed", 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusCompleted),
			Output:               ptr("done"),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))

	completed, err := admin.ListInstancesByStatus(ctx, cdb.StatusCompleted)
	require.NoError(t, err)
	require.Contains(t, completed, "mgmt-completed", "Should list completed instance")
}

func testListExecutions(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem("mgmt-multi-exec"))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, "mgmt-multi-exec", 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{}, nil))

	executions, err := admin.ListExecutions(ctx, "mgmt-multi-exec")
	require.NoError(t, err)
	require.Contains(t, executions, uint64(1), "Should list execution 1")
}

func testGetInstanceInfo(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem("mgmt-info"))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, "mgmt-info", 1, admStarted("InfoOrch", "2.0.0", "test"))}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("InfoOrch"), OrchestrationVersion: ptr("2.0.0")}, nil))

	info, err := admin.GetInstanceInfo(ctx, "mgmt-info")
	require.NoError(t, err)
	require.Equal(t, "mgmt-info", info.InstanceID)
	require.Equal(t, "InfoOrch", info.OrchestrationName)
	require.Equal(t, "2.0.0", info.OrchestrationVersion)
	require.Equal(t, uint64(1), info.CurrentExecutionID)
}

func testGetExecutionInfo(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem("mgmt-exec-info"))
	// The event's instance id is "mgmt-bulk-del" in duroxide's
	// management.rs too (a copy-paste slip, kept): the ack stores the delta
	// under the locked instance.
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, "mgmt-bulk-del", 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted), Output: ptr("result")}, nil))

	info, err := admin.GetExecutionInfo(ctx, "mgmt-exec-info", 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.ExecutionID)
	require.Equal(t, cdb.StatusCompleted, info.Status)
	require.Equal(t, ptr("result"), info.Output)
}

func testGetSystemMetrics(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	metrics, err := admin.GetSystemMetrics(ctx)
	require.NoError(t, err)
	baselineInstances := metrics.TotalInstances

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem("mgmt-metrics"))
	// The event's instance id is "mgmt-cancel" in duroxide too (see
	// testGetExecutionInfo).
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{admEvent(1, "mgmt-cancel", 1, admStarted("TestOrch", "1.0.0", "{}"))}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0")}, nil))

	updated, err := admin.GetSystemMetrics(ctx)
	require.NoError(t, err)
	require.Greater(t, updated.TotalInstances, baselineInstances, "total_instances should increase")
	require.Greater(t, updated.TotalEvents, uint64(0), "total_events should be > 0")
}

func testGetQueueDepths(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	depths, err := admin.GetQueueDepths(ctx)
	require.NoError(t, err)
	baselineOrch := depths.OrchestratorQueue

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("mgmt-queue"), 0))

	updated, err := admin.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Greater(t, updated.OrchestratorQueue, baselineOrch, "orchestrator_queue should increase")
}

func testGetInstanceStatsNonexistent(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	stats, err := p.GetInstanceStats(ctx, "no-such-instance")
	require.NoError(t, err)
	require.Nil(t, stats, "non-existent instance should return None")
}

// admStats is get_instance_stats(instance).unwrap().expect(msg).
func admStats(t *testing.T, p cdb.Provider, instance, msg string) cdb.SystemStats {
	t.Helper()
	stats, err := p.GetInstanceStats(testContext(t), instance)
	require.NoError(t, err)
	require.NotNil(t, stats, msg)
	return *stats
}

// admPokeAndAck enqueues an ExternalRaised named name for instance, fetches
// it (30s lock; the item must exist) and acks execution 1 with delta and
// metadata.
func admPokeAndAck(t *testing.T, p cdb.Provider, instance, name, fetchMsg string, delta []cdb.Event, metadata cdb.ExecutionMetadata) {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: name, Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, fetchMsg)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, delta, nil, nil, metadata, nil))
}

func admKVSet(eventID uint64, instance, key, value string, lastUpdatedAtMs uint64) cdb.Event {
	return admEvent(eventID, instance, 1, cdb.KeyValueSet{Key: key, Value: value, LastUpdatedAtMs: lastUpdatedAtMs})
}

func admNoopScheduled(eventID uint64, instance string) cdb.Event {
	return admEvent(eventID, instance, 1, cdb.ActivityScheduled{Name: "Noop", Input: "{}"})
}

func admCompletedDone() cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted), Output: ptr("done")}
}

func testGetInstanceStatsHistory(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	CreateInstance(ctx, t, p, "stats-hist")

	stats := admStats(t, p, "stats-hist", "instance should exist")
	require.GreaterOrEqual(t, stats.HistoryEventCount, uint64(1), "should have at least 1 event")
	require.Greater(t, stats.HistorySizeBytes, uint64(0), "history should have non-zero size")
	require.Equal(t, uint64(0), stats.KVUserKeyCount, "no KV keys set")
	require.Equal(t, uint64(0), stats.KVTotalValueBytes, "no KV value bytes")
	require.Equal(t, uint64(0), stats.QueuePendingCount, "no carry-forward events")
}

func testGetInstanceStatsKV(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "stats-kv"

	CreateInstance(ctx, t, p, inst)

	// KV writes and a Completed status, so kv_delta merges into kv_store.
	admPokeAndAck(t, p, inst, "poke", "expected orchestration item", []cdb.Event{
		admKVSet(100, inst, "k1", "aaa", 0),   // 3 bytes
		admKVSet(101, inst, "k2", "bbbbb", 0), // 5 bytes
		admEvent(102, inst, 1, cdb.OrchestrationCompleted{Output: "done"}),
	}, admCompletedDone())

	stats := admStats(t, p, inst, "instance should exist")
	require.Equal(t, uint64(2), stats.KVUserKeyCount, "should have 2 KV keys")
	require.Equal(t, uint64(8), stats.KVTotalValueBytes, "3 + 5 = 8 bytes")
}

func testGetInstanceStatsCarryForward(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "cf-stats"

	_, token := admEnqueueAndFetch(ctx, t, p, StartItem(inst))

	// OrchestrationStarted carrying 3 pending external events.
	started := admStarted("TestOrch", "1.0.0", "{}")
	started.CarryForwardEvents = []cdb.CarryForwardEvent{
		{Name: "raised-1", Data: `{"data":"a"}`},
		{Name: "raised-2", Data: `{"data":"b"}`},
		{Name: "raised-3", Data: `{"data":"c"}`},
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{admEvent(cdb.InitialEventID, inst, cdb.InitialExecutionID, started)}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), OrchestrationVersion: ptr("1.0.0")}, nil))

	stats := admStats(t, p, inst, "instance should exist")
	require.Equal(t, uint64(3), stats.QueuePendingCount, "should have 3 carry-forward events")
	require.GreaterOrEqual(t, stats.HistoryEventCount, uint64(1), "should have at least 1 event")
	require.Greater(t, stats.HistorySizeBytes, uint64(0), "history should have non-zero size")
	require.Equal(t, uint64(0), stats.KVUserKeyCount, "no KV keys set")
}

func testGetInstanceStatsKVDeltaOnly(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "kv-delta-stats"

	CreateInstance(ctx, t, p, inst)

	// KV writes without a terminal status: the instance stays Running and
	// the values live in kv_delta only.
	admPokeAndAck(t, p, inst, "poke", "expected orchestration item", []cdb.Event{
		admKVSet(100, inst, "dk1", "xxx", 0),    // 3 bytes
		admKVSet(101, inst, "dk2", "yyyyyy", 0), // 6 bytes
		admNoopScheduled(102, inst),
	}, cdb.ExecutionMetadata{})

	stats := admStats(t, p, inst, "instance should exist")
	require.Equal(t, uint64(2), stats.KVUserKeyCount, "should see 2 delta-only KV keys")
	require.Equal(t, uint64(9), stats.KVTotalValueBytes, "3 + 6 = 9 bytes from delta")
	require.Equal(t, uint64(0), stats.QueuePendingCount, "no carry-forward events")
}

func testGetInstanceStatsKVMerged(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "kv-merged-stats"

	CreateInstance(ctx, t, p, inst)

	// Turn 1: write two keys, stay Running.
	admPokeAndAck(t, p, inst, "poke1", "expected orchestration item for turn 1", []cdb.Event{
		admKVSet(100, inst, "mk1", "aaa", 0), // 3 bytes
		admKVSet(101, inst, "mk2", "bb", 0),  // 2 bytes
		admNoopScheduled(102, inst),
	}, cdb.ExecutionMetadata{})

	stats := admStats(t, p, inst, "instance should exist (delta phase)")
	require.Equal(t, uint64(2), stats.KVUserKeyCount, "delta phase: 2 keys")
	require.Equal(t, uint64(5), stats.KVTotalValueBytes, "delta phase: 3 + 2 = 5 bytes")

	// Turn 2: overwrite mk1, then complete (the delta merges into the store).
	admPokeAndAck(t, p, inst, "poke2", "expected orchestration item for turn 2", []cdb.Event{
		admKVSet(200, inst, "mk1", "zzzzz", 1), // 5 bytes, overwrites "aaa"
		admEvent(201, inst, 1, cdb.OrchestrationCompleted{Output: "done"}),
	}, admCompletedDone())

	// Merged: mk1 = "zzzzz" (5), mk2 = "bb" (2).
	stats = admStats(t, p, inst, "instance should exist (merged phase)")
	require.Equal(t, uint64(2), stats.KVUserKeyCount, "merged: still 2 keys (overwrite, not duplicate)")
	require.Equal(t, uint64(7), stats.KVTotalValueBytes, "merged: 5 + 2 = 7 bytes")
	require.Equal(t, uint64(0), stats.QueuePendingCount, "no carry-forward events")
}
