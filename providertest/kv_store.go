package providertest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// kvStoreTests is duroxide's provider_validation/kv_store.rs: the KV events
// of an ack's history delta (KeyValueSet, KeyValueCleared, KeyValuesCleared)
// land in the current execution's kv_delta, which GetKVValue reads over
// kv_store; a terminal turn (Completed, ContinuedAsNew, Failed) merges the
// delta into kv_store, which alone seeds the fetch snapshot. KV is
// instance-scoped: pruning keeps it, deleting the instance (and its parent)
// removes it.
func kvStoreTests() []Test {
	return []Test{
		{Name: "TestKVSetAndGet", Run: testKVSetAndGet},
		{Name: "TestKVOverwrite", Run: testKVOverwrite},
		{Name: "TestKVClearSingle", Run: testKVClearSingle},
		{Name: "TestKVClearAll", Run: testKVClearAll},
		{Name: "TestKVGetNonexistent", Run: testKVGetNonexistent},
		{Name: "TestKVSnapshotInFetch", Run: testKVSnapshotInFetch},
		{Name: "TestKVSnapshotAfterClearSingle", Run: testKVSnapshotAfterClearSingle},
		{Name: "TestKVSnapshotAfterClearAll", Run: testKVSnapshotAfterClearAll},
		{Name: "TestKVExecutionIDTracking", Run: testKVExecutionIDTracking},
		{Name: "TestKVCrossExecutionOverwrite", Run: testKVCrossExecutionOverwrite},
		{Name: "TestKVCrossExecutionRemoveReadd", Run: testKVCrossExecutionRemoveReadd},
		{Name: "TestKVPrunePreservesOverwritten", Run: testKVPrunePreservesOverwritten},
		{Name: "TestKVPrunePreservesAllKeys", Run: testKVPrunePreservesAllKeys},
		{Name: "TestKVInstanceIsolation", Run: testKVInstanceIsolation},
		{Name: "TestKVDeleteInstanceCascades", Run: testKVDeleteInstanceCascades},
		{Name: "TestKVClearNonexistentKey", Run: testKVClearNonexistentKey},
		{Name: "TestKVGetUnknownInstance", Run: testKVGetUnknownInstance},
		{Name: "TestKVSetAfterClear", Run: testKVSetAfterClear},
		{Name: "TestKVEmptyValue", Run: testKVEmptyValue},
		{Name: "TestKVLargeValue", Run: testKVLargeValue},
		{Name: "TestKVSpecialCharsInKey", Run: testKVSpecialCharsInKey},
		{Name: "TestKVSnapshotEmpty", Run: testKVSnapshotEmpty},
		{Name: "TestKVSnapshotCrossExecution", Run: testKVSnapshotCrossExecution},
		{Name: "TestKVPruneCurrentExecutionProtected", Run: testKVPruneCurrentExecutionProtected},
		{Name: "TestKVDeleteInstanceWithChildren", Run: testKVDeleteInstanceWithChildren},
		{Name: "TestKVClearIsolation", Run: testKVClearIsolation},
		{Name: "TestKVDeltaSnapshotExcludesCurrentExecution", Run: testKVDeltaSnapshotExcludesCurrentExecution},
		{Name: "TestKVDeltaSnapshotIncludesCompletedExecution", Run: testKVDeltaSnapshotIncludesCompletedExecution},
		{Name: "TestKVDeltaClientReadsMerged", Run: testKVDeltaClientReadsMerged},
		{Name: "TestKVDeltaTombstoneOverridesStore", Run: testKVDeltaTombstoneOverridesStore},
		{Name: "TestKVDeltaClearAllTombstonesStore", Run: testKVDeltaClearAllTombstonesStore},
		{Name: "TestKVDeltaMergedOnCompletion", Run: testKVDeltaMergedOnCompletion},
		{Name: "TestKVDeltaMergedOnCAN", Run: testKVDeltaMergedOnCAN},
		{Name: "TestKVDeltaDeleteInstanceCascades", Run: testKVDeltaDeleteInstanceCascades},
		{Name: "TestKVDeltaPruneUntouchedKeySurvives", Run: testKVDeltaPruneUntouchedKeySurvives},
	}
}

// ---------------------------------------------------------------------------
// Helpers (kv_store.rs's poke_item, ack_with_delta, continue_as_new and
// complete_instance, plus Go conveniences)
// ---------------------------------------------------------------------------

// kvPoke is kv_store.rs's poke_item: an ExternalRaised "poke" that gives the
// instance a turn.
func kvPoke(instance string) cdb.WorkItem {
	return cdb.ExternalRaisedMessage{Instance: instance, Name: "poke", Data: "{}"}
}

// kvSet is a KeyValueSet event of the given execution.
func kvSet(eventID uint64, instance string, executionID uint64, key, value string, updatedAtMs uint64) cdb.Event {
	return b2Event(eventID, instance, executionID, cdb.KeyValueSet{Key: key, Value: value, LastUpdatedAtMs: updatedAtMs})
}

// kvCleared is a KeyValueCleared event of the given execution.
func kvCleared(eventID uint64, instance string, executionID uint64, key string) cdb.Event {
	return b2Event(eventID, instance, executionID, cdb.KeyValueCleared{Key: key})
}

// kvAllCleared is a KeyValuesCleared event of the given execution.
func kvAllCleared(eventID uint64, instance string, executionID uint64) cdb.Event {
	return b2Event(eventID, instance, executionID, cdb.KeyValuesCleared{})
}

// kvFetchPoke enqueues a poke for instance and fetches it (30s lock, no
// wait); the fetch must yield an item.
func kvFetchPoke(ctx context.Context, t *testing.T, p cdb.Provider, instance, msg string) (*cdb.OrchestrationItem, string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, kvPoke(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, msg)
	return item, token
}

// kvAckWithDelta is kv_store.rs's ack_with_delta: poke, fetch, and ack
// executionID with historyDelta and default metadata.
func kvAckWithDelta(ctx context.Context, t *testing.T, p cdb.Provider, instance string, executionID uint64, historyDelta ...cdb.Event) {
	t.Helper()
	_, token := kvFetchPoke(ctx, t, p, instance, "expected orchestration item")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, executionID, historyDelta, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// kvAckEmpty acks a fetched batch of executionID with nothing in it (the
// tests' clean-up ack after inspecting a snapshot).
func kvAckEmpty(ctx context.Context, t *testing.T, p cdb.Provider, token string, executionID uint64) {
	t.Helper()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, executionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// kvContinueAsNew is kv_store.rs's continue_as_new: a poke turn marks
// execution newExecutionID-1 ContinuedAsNew (merging its kv_delta), then a
// ContinueAsNew work item is fetched and acked as execution newExecutionID
// with its OrchestrationStarted.
func kvContinueAsNew(ctx context.Context, t *testing.T, p cdb.Provider, instance string, newExecutionID uint64) {
	t.Helper()
	prevExecutionID := newExecutionID - 1

	_, token := kvFetchPoke(ctx, t, p, instance, "expected orchestration item to mark ContinuedAsNew")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, prevExecutionID, nil, nil, nil, cdb.ExecutionMetadata{
		Status:               ptr(cdb.StatusContinuedAsNew),
		OrchestrationName:    ptr("TestOrch"),
		OrchestrationVersion: ptr("1.0.0"),
	}, nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ContinueAsNewMessage{
		Instance:           instance,
		Orchestration:      "TestOrch",
		Input:              "{}",
		Version:            ptr("1.0.0"),
		CarryForwardEvents: []cdb.CarryForwardEvent{},
	}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "expected orchestration item for ContinueAsNew")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, newExecutionID,
		[]cdb.Event{b2Event(1, instance, newExecutionID, cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"})},
		nil, nil, cdb.ExecutionMetadata{
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))
}

// kvCompleteInstance is kv_store.rs's complete_instance: a poke turn acks
// OrchestrationCompleted (event 9999, output "done") with status Completed.
func kvCompleteInstance(ctx context.Context, t *testing.T, p cdb.Provider, instance string, executionID uint64) {
	t.Helper()
	_, token := kvFetchPoke(ctx, t, p, instance, "expected orchestration item for completion")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, executionID,
		[]cdb.Event{b2Event(9999, instance, executionID, cdb.OrchestrationCompleted{Output: "done"})},
		nil, nil, cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusCompleted),
			Output:               ptr("done"),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))
}

// kvGet is get_kv_value as duroxide's Option<String>: nil when the key is
// absent.
func kvGet(ctx context.Context, t *testing.T, p cdb.Provider, instance, key string) *string {
	t.Helper()
	value, found, err := p.GetKVValue(ctx, instance, key)
	require.NoError(t, err)
	if !found {
		return nil
	}
	return &value
}

// kvSnapValue is kv_snapshot.get(key).map(|e| e.value): nil when the
// snapshot lacks the key.
func kvSnapValue(item *cdb.OrchestrationItem, key string) *string {
	e, ok := item.KVSnapshot[key]
	if !ok {
		return nil
	}
	return &e.Value
}

// kvPrune is prune_executions(instance, keep_last = 1).
func kvPrune(ctx context.Context, t *testing.T, admin cdb.ProviderAdmin, instance string) {
	t.Helper()
	_, err := admin.PruneExecutions(ctx, instance, cdb.PruneOptions{KeepLast: ptr(uint32(1))})
	require.NoError(t, err)
}

// ---------------------------------------------------------------------------
// Set, overwrite, clear, get
// ---------------------------------------------------------------------------

func testKVSetAndGet(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-set")

	kvAckWithDelta(ctx, t, p, "kv-set", 1, kvSet(100, "kv-set", 1, "counter", "42", 0))

	require.Equal(t, ptr("42"), kvGet(ctx, t, p, "kv-set", "counter"))
}

func testKVOverwrite(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-over")

	kvAckWithDelta(ctx, t, p, "kv-over", 1, kvSet(100, "kv-over", 1, "status", "old", 0))
	require.Equal(t, ptr("old"), kvGet(ctx, t, p, "kv-over", "status"), "initial value should be 'old'")

	kvAckWithDelta(ctx, t, p, "kv-over", 1, kvSet(101, "kv-over", 1, "status", "new", 0))
	require.Equal(t, ptr("new"), kvGet(ctx, t, p, "kv-over", "status"))
}

func testKVClearSingle(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-clr1")

	kvAckWithDelta(ctx, t, p, "kv-clr1", 1, kvSet(100, "kv-clr1", 1, "remove_me", "x", 0))
	require.Equal(t, ptr("x"), kvGet(ctx, t, p, "kv-clr1", "remove_me"), "value should be set before clearing")

	kvAckWithDelta(ctx, t, p, "kv-clr1", 1, kvCleared(101, "kv-clr1", 1, "remove_me"))
	require.Nil(t, kvGet(ctx, t, p, "kv-clr1", "remove_me"))
}

func testKVClearAll(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-clra")

	kvAckWithDelta(ctx, t, p, "kv-clra", 1,
		kvSet(100, "kv-clra", 1, "a", "1", 0),
		kvSet(101, "kv-clra", 1, "b", "2", 0))
	require.Equal(t, ptr("1"), kvGet(ctx, t, p, "kv-clra", "a"), "key 'a' should be set")
	require.Equal(t, ptr("2"), kvGet(ctx, t, p, "kv-clra", "b"), "key 'b' should be set")

	kvAckWithDelta(ctx, t, p, "kv-clra", 1, kvAllCleared(102, "kv-clra", 1))
	require.Nil(t, kvGet(ctx, t, p, "kv-clra", "a"))
	require.Nil(t, kvGet(ctx, t, p, "kv-clra", "b"))
}

func testKVGetNonexistent(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-none")

	require.Nil(t, kvGet(ctx, t, p, "kv-none", "nope"))
}

// ---------------------------------------------------------------------------
// The fetch snapshot
// ---------------------------------------------------------------------------

func testKVSnapshotInFetch(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-fetch")

	kvAckWithDelta(ctx, t, p, "kv-fetch", 1,
		kvSet(100, "kv-fetch", 1, "x", "10", 0),
		kvSet(101, "kv-fetch", 1, "y", "20", 0))
	// Completing execution 1 merges its delta into kv_store.
	kvCompleteInstance(ctx, t, p, "kv-fetch", 1)

	// A completed instance still yields its batch.
	item, token := kvFetchPoke(ctx, t, p, "kv-fetch", "expected orchestration item")
	require.Len(t, item.KVSnapshot, 2)
	require.Equal(t, ptr("10"), kvSnapValue(item, "x"))
	require.Equal(t, ptr("20"), kvSnapValue(item, "y"))

	kvAckEmpty(ctx, t, p, token, 1)
}

func testKVSnapshotAfterClearSingle(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-fclr1")

	kvAckWithDelta(ctx, t, p, "kv-fclr1", 1,
		kvSet(100, "kv-fclr1", 1, "keep", "yes", 0),
		kvSet(101, "kv-fclr1", 1, "remove", "bye", 0))
	kvAckWithDelta(ctx, t, p, "kv-fclr1", 1, kvCleared(102, "kv-fclr1", 1, "remove"))
	kvCompleteInstance(ctx, t, p, "kv-fclr1", 1)

	item, token := kvFetchPoke(ctx, t, p, "kv-fclr1", "expected orchestration item")
	require.Len(t, item.KVSnapshot, 1)
	require.Equal(t, ptr("yes"), kvSnapValue(item, "keep"))
	require.Nil(t, kvSnapValue(item, "remove"))

	kvAckEmpty(ctx, t, p, token, 1)
}

func testKVSnapshotAfterClearAll(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-fclra")

	kvAckWithDelta(ctx, t, p, "kv-fclra", 1,
		kvSet(100, "kv-fclra", 1, "a", "1", 0),
		kvSet(101, "kv-fclra", 1, "b", "2", 0))
	kvAckWithDelta(ctx, t, p, "kv-fclra", 1, kvAllCleared(102, "kv-fclra", 1))

	item, token := kvFetchPoke(ctx, t, p, "kv-fclra", "expected orchestration item")
	require.Empty(t, item.KVSnapshot, "expected empty snapshot, got: %v", item.KVSnapshot)

	kvAckEmpty(ctx, t, p, token, 1)
}

// ---------------------------------------------------------------------------
// Across executions, and pruning
// ---------------------------------------------------------------------------

func testKVExecutionIDTracking(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-exec")

	kvAckWithDelta(ctx, t, p, "kv-exec", 1, kvSet(100, "kv-exec", 1, "shared", "from_exec_1", 0))
	require.Equal(t, ptr("from_exec_1"), kvGet(ctx, t, p, "kv-exec", "shared"))

	kvContinueAsNew(ctx, t, p, "kv-exec", 2)
	kvAckWithDelta(ctx, t, p, "kv-exec", 2, kvSet(200, "kv-exec", 2, "shared", "from_exec_2", 0))
	require.Equal(t, ptr("from_exec_2"), kvGet(ctx, t, p, "kv-exec", "shared"), "should reflect exec 2 value")

	kvPrune(ctx, t, admin, "kv-exec")
	require.Equal(t, ptr("from_exec_2"), kvGet(ctx, t, p, "kv-exec", "shared"),
		"key must survive pruning because last-writer (exec 2) is not pruned")
}

func testKVCrossExecutionOverwrite(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-xexec")

	kvAckWithDelta(ctx, t, p, "kv-xexec", 1, kvSet(100, "kv-xexec", 1, "k", "v1", 0))
	require.Equal(t, ptr("v1"), kvGet(ctx, t, p, "kv-xexec", "k"), "should see value from exec 1")

	kvContinueAsNew(ctx, t, p, "kv-xexec", 2)
	kvAckWithDelta(ctx, t, p, "kv-xexec", 2, kvSet(200, "kv-xexec", 2, "k", "v2", 0))
	require.Equal(t, ptr("v2"), kvGet(ctx, t, p, "kv-xexec", "k"), "exec 2 should overwrite exec 1 value")
}

func testKVCrossExecutionRemoveReadd(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-xrm")

	kvAckWithDelta(ctx, t, p, "kv-xrm", 1, kvSet(100, "kv-xrm", 1, "cycle", "exec1", 0))
	require.Equal(t, ptr("exec1"), kvGet(ctx, t, p, "kv-xrm", "cycle"))

	kvContinueAsNew(ctx, t, p, "kv-xrm", 2)
	kvAckWithDelta(ctx, t, p, "kv-xrm", 2, kvCleared(200, "kv-xrm", 2, "cycle"))
	require.Nil(t, kvGet(ctx, t, p, "kv-xrm", "cycle"), "key should be cleared in exec 2")

	kvContinueAsNew(ctx, t, p, "kv-xrm", 3)
	kvAckWithDelta(ctx, t, p, "kv-xrm", 3, kvSet(300, "kv-xrm", 3, "cycle", "exec3", 0))
	require.Equal(t, ptr("exec3"), kvGet(ctx, t, p, "kv-xrm", "cycle"), "key should be re-set from exec 3")
}

func testKVPrunePreservesOverwritten(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-prn1")

	kvAckWithDelta(ctx, t, p, "kv-prn1", 1, kvSet(100, "kv-prn1", 1, "survive", "v1", 0))
	kvContinueAsNew(ctx, t, p, "kv-prn1", 2)
	kvAckWithDelta(ctx, t, p, "kv-prn1", 2, kvSet(200, "kv-prn1", 2, "survive", "v2", 0))

	kvPrune(ctx, t, admin, "kv-prn1")
	require.Equal(t, ptr("v2"), kvGet(ctx, t, p, "kv-prn1", "survive"),
		"overwritten key must survive pruning of old execution")
}

func testKVPrunePreservesAllKeys(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-prn2")

	kvAckWithDelta(ctx, t, p, "kv-prn2", 1, kvSet(100, "kv-prn2", 1, "orphan", "survives", 0))
	kvContinueAsNew(ctx, t, p, "kv-prn2", 2)
	kvAckWithDelta(ctx, t, p, "kv-prn2", 2, kvSet(200, "kv-prn2", 2, "keeper", "alive", 0))

	require.Equal(t, ptr("survives"), kvGet(ctx, t, p, "kv-prn2", "orphan"))
	require.Equal(t, ptr("alive"), kvGet(ctx, t, p, "kv-prn2", "keeper"))

	kvPrune(ctx, t, admin, "kv-prn2")
	require.Equal(t, ptr("survives"), kvGet(ctx, t, p, "kv-prn2", "orphan"),
		"KV entries must survive execution pruning (instance-scoped lifetime)")
	require.Equal(t, ptr("alive"), kvGet(ctx, t, p, "kv-prn2", "keeper"), "exec 2 key must survive")
}

// ---------------------------------------------------------------------------
// Isolation, deletion, edge values
// ---------------------------------------------------------------------------

func testKVInstanceIsolation(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-iso-a")
	CreateInstance(ctx, t, p, "kv-iso-b")

	kvAckWithDelta(ctx, t, p, "kv-iso-a", 1, kvSet(100, "kv-iso-a", 1, "shared_name", "from_a", 0))
	kvAckWithDelta(ctx, t, p, "kv-iso-b", 1, kvSet(100, "kv-iso-b", 1, "shared_name", "from_b", 0))

	require.Equal(t, ptr("from_a"), kvGet(ctx, t, p, "kv-iso-a", "shared_name"))
	require.Equal(t, ptr("from_b"), kvGet(ctx, t, p, "kv-iso-b", "shared_name"))
}

func testKVDeleteInstanceCascades(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-del")

	kvAckWithDelta(ctx, t, p, "kv-del", 1, kvSet(100, "kv-del", 1, "doomed", "bye", 0))
	// Completed, so it can be deleted without force.
	kvCompleteInstance(ctx, t, p, "kv-del", 1)
	require.Equal(t, ptr("bye"), kvGet(ctx, t, p, "kv-del", "doomed"), "value should exist before deletion")

	_, err := admin.DeleteInstance(ctx, "kv-del", false)
	require.NoError(t, err)
	require.Nil(t, kvGet(ctx, t, p, "kv-del", "doomed"), "KV should be gone after instance deletion")
}

func testKVClearNonexistentKey(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-clrne")

	// Clearing a key that was never set must not fail the ack.
	kvAckWithDelta(ctx, t, p, "kv-clrne", 1, kvCleared(100, "kv-clrne", 1, "never_existed"))
	require.Nil(t, kvGet(ctx, t, p, "kv-clrne", "never_existed"))
}

func testKVGetUnknownInstance(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.Nil(t, kvGet(ctx, t, p, "no-such-instance", "key"))
}

func testKVSetAfterClear(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-sac")

	kvAckWithDelta(ctx, t, p, "kv-sac", 1,
		kvSet(100, "kv-sac", 1, "old_a", "1", 0),
		kvSet(101, "kv-sac", 1, "old_b", "2", 0))
	// Clear all, then set a new key, in the same ack.
	kvAckWithDelta(ctx, t, p, "kv-sac", 1,
		kvAllCleared(102, "kv-sac", 1),
		kvSet(103, "kv-sac", 1, "new_x", "fresh", 0))

	require.Nil(t, kvGet(ctx, t, p, "kv-sac", "old_a"))
	require.Nil(t, kvGet(ctx, t, p, "kv-sac", "old_b"))
	require.Equal(t, ptr("fresh"), kvGet(ctx, t, p, "kv-sac", "new_x"))
}

func testKVEmptyValue(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-empty")

	kvAckWithDelta(ctx, t, p, "kv-empty", 1, kvSet(100, "kv-empty", 1, "blank", "", 0))
	require.Equal(t, ptr(""), kvGet(ctx, t, p, "kv-empty", "blank"), "empty string is a valid value, not None")
}

func testKVLargeValue(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-big")

	// duroxide's doc comment says 64KB; its code stores 16 KiB.
	bigVal := strings.Repeat("x", 16*1024)
	kvAckWithDelta(ctx, t, p, "kv-big", 1, kvSet(100, "kv-big", 1, "payload", bigVal, 0))
	require.Equal(t, ptr(bigVal), kvGet(ctx, t, p, "kv-big", "payload"))
}

func testKVSpecialCharsInKey(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-chars")

	keys := []struct{ k, v string }{
		{"key with spaces", "v1"},
		{"日本語キー", "v2"},
		{"dotted.key.name", "v3"},
		{"path/like/key", "v4"},
		{"emoji🎉key", "v5"},
	}
	events := make([]cdb.Event, 0, len(keys))
	for i, kv := range keys {
		events = append(events, kvSet(100+uint64(i), "kv-chars", 1, kv.k, kv.v, 0))
	}
	kvAckWithDelta(ctx, t, p, "kv-chars", 1, events...)

	for _, kv := range keys {
		require.Equal(t, ptr(kv.v), kvGet(ctx, t, p, "kv-chars", kv.k), "key '%s' should be retrievable", kv.k)
	}
}

func testKVSnapshotEmpty(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-sempty")

	item, token := kvFetchPoke(ctx, t, p, "kv-sempty", "expected orchestration item")
	require.Empty(t, item.KVSnapshot, "expected empty snapshot for fresh instance")

	kvAckEmpty(ctx, t, p, token, 1)
}

func testKVSnapshotCrossExecution(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-scross")

	kvAckWithDelta(ctx, t, p, "kv-scross", 1, kvSet(100, "kv-scross", 1, "A", "from_exec1", 0))
	// Continue-as-new merges execution 1's delta into kv_store.
	kvContinueAsNew(ctx, t, p, "kv-scross", 2)
	kvAckWithDelta(ctx, t, p, "kv-scross", 2, kvSet(200, "kv-scross", 2, "B", "from_exec2", 0))

	// "A" is in kv_store, so in the snapshot; "B" is only in execution 2's
	// delta, which replay rebuilds, so not.
	item, token := kvFetchPoke(ctx, t, p, "kv-scross", "expected orchestration item")
	require.Len(t, item.KVSnapshot, 1, "snapshot should only contain prior-execution state")
	require.Equal(t, ptr("from_exec1"), kvSnapValue(item, "A"))
	require.Nil(t, kvSnapValue(item, "B"), "current-execution key should not be in snapshot")

	kvAckEmpty(ctx, t, p, token, 2)
}

func testKVPruneCurrentExecutionProtected(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-prncur")

	kvAckWithDelta(ctx, t, p, "kv-prncur", 1, kvSet(100, "kv-prncur", 1, "alive", "yes", 0))

	// keep_last = 1 with a single execution prunes nothing.
	kvPrune(ctx, t, admin, "kv-prncur")
	require.Equal(t, ptr("yes"), kvGet(ctx, t, p, "kv-prncur", "alive"), "current execution KV must survive pruning")
}

func testKVDeleteInstanceWithChildren(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)

	CreateInstance(ctx, t, p, "kv-parent")
	kvAckWithDelta(ctx, t, p, "kv-parent", 1, kvSet(100, "kv-parent", 1, "parent_key", "parent_val", 0))

	// The child: a start naming kv-parent as its parent.
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{
		Instance:       "kv-child",
		Orchestration:  "TestOrch",
		Version:        ptr("1.0.0"),
		Input:          "{}",
		ParentInstance: ptr("kv-parent"),
		ParentID:       ptr(uint64(1)),
		ExecutionID:    cdb.InitialExecutionID,
	}, 0))
	item, childToken, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "expected child orchestration item")
	require.NoError(t, p.AckOrchestrationItem(ctx, childToken, 1,
		[]cdb.Event{b2Event(1, "kv-child", 1, cdb.OrchestrationStarted{
			Name:           "TestOrch",
			Version:        "1.0.0",
			Input:          "{}",
			ParentInstance: ptr("kv-parent"),
			ParentID:       ptr(uint64(1)),
		})},
		nil, nil, cdb.ExecutionMetadata{
			ParentInstanceID:     ptr("kv-parent"),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		}, nil))

	kvAckWithDelta(ctx, t, p, "kv-child", 1, kvSet(100, "kv-child", 1, "child_key", "child_val", 0))

	// Both completed, so they can be deleted without force.
	kvCompleteInstance(ctx, t, p, "kv-child", 1)
	kvCompleteInstance(ctx, t, p, "kv-parent", 1)

	// Deleting the parent cascades to the child.
	_, err = admin.DeleteInstance(ctx, "kv-parent", false)
	require.NoError(t, err)

	require.Nil(t, kvGet(ctx, t, p, "kv-parent", "parent_key"), "parent KV should be removed")
	require.Nil(t, kvGet(ctx, t, p, "kv-child", "child_key"), "child KV should be removed when parent is deleted")
}

func testKVClearIsolation(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-ciso-a")
	CreateInstance(ctx, t, p, "kv-ciso-b")

	kvAckWithDelta(ctx, t, p, "kv-ciso-a", 1, kvSet(100, "kv-ciso-a", 1, "shared", "from_a", 0))
	kvAckWithDelta(ctx, t, p, "kv-ciso-b", 1, kvSet(100, "kv-ciso-b", 1, "shared", "from_b", 0))

	kvAckWithDelta(ctx, t, p, "kv-ciso-a", 1, kvAllCleared(101, "kv-ciso-a", 1))

	require.Nil(t, kvGet(ctx, t, p, "kv-ciso-a", "shared"))
	require.Equal(t, ptr("from_b"), kvGet(ctx, t, p, "kv-ciso-b", "shared"),
		"clearing instance A must not affect instance B")
}

// ---------------------------------------------------------------------------
// The two-table model: kv_delta over kv_store
// ---------------------------------------------------------------------------

func testKVDeltaSnapshotExcludesCurrentExecution(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-ds1")

	// Execution 1, still running.
	kvAckWithDelta(ctx, t, p, "kv-ds1", 1, kvSet(100, "kv-ds1", 1, "counter", "1", 100))

	// The client sees the live state (kv_store + kv_delta) ...
	require.Equal(t, ptr("1"), kvGet(ctx, t, p, "kv-ds1", "counter"),
		"client read should see current-execution value")

	// ... the snapshot only completed executions.
	item, token := kvFetchPoke(ctx, t, p, "kv-ds1", "expected orchestration item")
	require.Empty(t, item.KVSnapshot,
		"snapshot must be empty — counter was set in current execution (not completed), should not be in snapshot. Got: %v",
		item.KVSnapshot)

	kvAckEmpty(ctx, t, p, token, 1)
}

func testKVDeltaSnapshotIncludesCompletedExecution(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-ds2")

	kvAckWithDelta(ctx, t, p, "kv-ds2", 1, kvSet(100, "kv-ds2", 1, "counter", "5", 100))
	kvContinueAsNew(ctx, t, p, "kv-ds2", 2)

	item, token := kvFetchPoke(ctx, t, p, "kv-ds2", "expected orchestration item")
	require.Equal(t, ptr("5"), kvSnapValue(item, "counter"), "snapshot must contain prior-execution value after CAN")

	kvAckEmpty(ctx, t, p, token, 2)
}

func testKVDeltaClientReadsMerged(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-dm")

	kvAckWithDelta(ctx, t, p, "kv-dm", 1,
		kvSet(100, "kv-dm", 1, "color", "red", 100),
		kvSet(101, "kv-dm", 1, "size", "large", 101))
	kvCompleteInstance(ctx, t, p, "kv-dm", 1)

	// Execution 2 (a re-start, not continue-as-new): overwrite color, add shape.
	kvAckWithDelta(ctx, t, p, "kv-dm", 2,
		kvSet(200, "kv-dm", 2, "color", "blue", 200),
		kvSet(201, "kv-dm", 2, "shape", "circle", 201))

	require.Equal(t, ptr("blue"), kvGet(ctx, t, p, "kv-dm", "color"), "delta should override kv_store value")
	require.Equal(t, ptr("large"), kvGet(ctx, t, p, "kv-dm", "size"), "kv_store value should be visible when no delta exists")
	require.Equal(t, ptr("circle"), kvGet(ctx, t, p, "kv-dm", "shape"), "delta-only key should be visible")
}

func testKVDeltaTombstoneOverridesStore(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-dt")

	kvAckWithDelta(ctx, t, p, "kv-dt", 1, kvSet(100, "kv-dt", 1, "temp", "exists", 100))
	kvCompleteInstance(ctx, t, p, "kv-dt", 1)

	kvAckWithDelta(ctx, t, p, "kv-dt", 2, kvCleared(200, "kv-dt", 2, "temp"))

	require.Nil(t, kvGet(ctx, t, p, "kv-dt", "temp"), "tombstone in delta must override kv_store value")
}

func testKVDeltaClearAllTombstonesStore(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-dca")

	kvAckWithDelta(ctx, t, p, "kv-dca", 1,
		kvSet(100, "kv-dca", 1, "a", "1", 100),
		kvSet(101, "kv-dca", 1, "b", "2", 101))
	kvCompleteInstance(ctx, t, p, "kv-dca", 1)

	kvAckWithDelta(ctx, t, p, "kv-dca", 2,
		kvAllCleared(200, "kv-dca", 2),
		kvSet(201, "kv-dca", 2, "c", "3", 201))

	require.Nil(t, kvGet(ctx, t, p, "kv-dca", "a"), "clear_all must tombstone kv_store key 'a'")
	require.Nil(t, kvGet(ctx, t, p, "kv-dca", "b"), "clear_all must tombstone kv_store key 'b'")
	require.Equal(t, ptr("3"), kvGet(ctx, t, p, "kv-dca", "c"), "key set after clear_all should be visible")
}

func testKVDeltaMergedOnCompletion(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-dmc")

	kvAckWithDelta(ctx, t, p, "kv-dmc", 1, kvSet(100, "kv-dmc", 1, "result", "42", 100))
	kvCompleteInstance(ctx, t, p, "kv-dmc", 1)

	require.Equal(t, ptr("42"), kvGet(ctx, t, p, "kv-dmc", "result"), "value should be in kv_store after completion merge")
}

func testKVDeltaMergedOnCAN(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "kv-dmc2")

	kvAckWithDelta(ctx, t, p, "kv-dmc2", 1,
		kvSet(100, "kv-dmc2", 1, "version", "1", 100),
		kvSet(101, "kv-dmc2", 1, "progress", "50%", 101))
	// A second turn of execution 1 updates progress.
	kvAckWithDelta(ctx, t, p, "kv-dmc2", 1, kvSet(102, "kv-dmc2", 1, "progress", "100%", 102))

	kvContinueAsNew(ctx, t, p, "kv-dmc2", 2)

	item, token := kvFetchPoke(ctx, t, p, "kv-dmc2", "expected orchestration item")
	require.Equal(t, ptr("1"), kvSnapValue(item, "version"), "version should carry over via kv_store after CAN merge")
	require.Equal(t, ptr("100%"), kvSnapValue(item, "progress"), "latest progress value should carry over")

	kvAckEmpty(ctx, t, p, token, 2)
}

func testKVDeltaDeleteInstanceCascades(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-ddel")

	// Set in the running execution: the value lives in kv_delta only.
	kvAckWithDelta(ctx, t, p, "kv-ddel", 1, kvSet(100, "kv-ddel", 1, "data", "important", 100))
	require.Equal(t, ptr("important"), kvGet(ctx, t, p, "kv-ddel", "data"))

	_, err := admin.DeleteInstance(ctx, "kv-ddel", true)
	require.NoError(t, err)
	require.Nil(t, kvGet(ctx, t, p, "kv-ddel", "data"), "KV delta must be cleaned up on instance deletion")
}

func testKVDeltaPruneUntouchedKeySurvives(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	admin := Admin(t, p)
	CreateInstance(ctx, t, p, "kv-dprn")

	// Execution 1 is the only one ever to touch "stale_config".
	kvAckWithDelta(ctx, t, p, "kv-dprn", 1, kvSet(100, "kv-dprn", 1, "stale_config", "from_exec_1", 100))
	kvContinueAsNew(ctx, t, p, "kv-dprn", 2)
	kvAckWithDelta(ctx, t, p, "kv-dprn", 2, kvSet(200, "kv-dprn", 2, "other", "unrelated", 200))
	// Execution 3 runs and touches neither key.
	kvContinueAsNew(ctx, t, p, "kv-dprn", 3)

	require.Equal(t, ptr("from_exec_1"), kvGet(ctx, t, p, "kv-dprn", "stale_config"))
	require.Equal(t, ptr("unrelated"), kvGet(ctx, t, p, "kv-dprn", "other"))

	// Prune executions 1 and 2, keeping 3.
	kvPrune(ctx, t, admin, "kv-dprn")

	require.Equal(t, ptr("from_exec_1"), kvGet(ctx, t, p, "kv-dprn", "stale_config"),
		"KV key from pruned execution must survive — KV lifetime is instance-scoped")
	require.Equal(t, ptr("unrelated"), kvGet(ctx, t, p, "kv-dprn", "other"),
		"KV key from pruned execution 2 must also survive")

	item, token := kvFetchPoke(ctx, t, p, "kv-dprn", "expected orchestration item")
	require.Equal(t, ptr("from_exec_1"), kvSnapValue(item, "stale_config"),
		"snapshot must include untouched key from pruned execution")
	require.Equal(t, ptr("unrelated"), kvSnapValue(item, "other"),
		"snapshot must include key from pruned execution 2")

	kvAckEmpty(ctx, t, p, token, 3)
}
