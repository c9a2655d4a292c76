package providertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's provider_validation/capability_filtering.rs: fetch filters on
// the current execution's pinned duroxide version (in the selection, before
// locking and before history is decoded), ack stores the pin from
// ExecutionMetadata, and corrupted history comes back as history_error.

func capabilityFilteringTests() []Test {
	return []Test{
		{Name: "TestFetchWithFilterNoneReturnsAnyItem", Run: testFetchWithFilterNoneReturnsAnyItem},
		{Name: "TestFetchWithCompatibleFilterReturnsItem", Run: testFetchWithCompatibleFilterReturnsItem},
		{Name: "TestFetchWithIncompatibleFilterSkipsItem", Run: testFetchWithIncompatibleFilterSkipsItem},
		{Name: "TestFetchFilterSkipsIncompatibleSelectsCompatible", Run: testFetchFilterSkipsIncompatibleSelectsCompatible},
		{Name: "TestFetchFilterDoesNotLockSkippedInstances", Run: testFetchFilterDoesNotLockSkippedInstances},
		{Name: "TestFetchFilterNullPinnedVersionAlwaysCompatible", Run: testFetchFilterNullPinnedVersionAlwaysCompatible},
		{Name: "TestFetchFilterBoundaryVersions", Run: testFetchFilterBoundaryVersions},
		{Name: "TestPinnedVersionStoredViaAckMetadata", Run: testPinnedVersionStoredViaAckMetadata},
		{Name: "TestPinnedVersionImmutableAcrossAckCycles", Run: testPinnedVersionImmutableAcrossAckCycles},
		{Name: "TestContinueAsNewExecutionGetsOwnPinnedVersion", Run: testContinueAsNewExecutionGetsOwnPinnedVersion},
		{Name: "TestFilterWithEmptySupportedVersionsReturnsNothing", Run: testFilterWithEmptySupportedVersionsReturnsNothing},
		{Name: "TestConcurrentFilteredFetchNoDoubleLock", Run: testConcurrentFilteredFetchNoDoubleLock},
		{Name: "TestAckStoresPinnedVersionViaMetadataUpdate", Run: testAckStoresPinnedVersionViaMetadataUpdate},
		{Name: "TestProviderUpdatesPinnedVersionWhenTold", Run: testProviderUpdatesPinnedVersionWhenTold},
		{Name: "TestFetchCorruptedHistoryFilteredVsUnfiltered", Run: testFetchCorruptedHistoryFilteredVsUnfiltered},
		{Name: "TestFetchDeserializationErrorIncrementsAttemptCount", Run: testFetchDeserializationErrorIncrementsAttemptCount},
		{Name: "TestFetchDeserializationErrorEventuallyReachesPoison", Run: testFetchDeserializationErrorEventuallyReachesPoison},
		{Name: "TestFetchFilterAppliedBeforeHistoryDeserialization", Run: testFetchFilterAppliedBeforeHistoryDeserialization},
		{Name: "TestFetchSingleRangeOnlyUsesFirstRange", Run: testFetchSingleRangeOnlyUsesFirstRange},
		{Name: "TestAckAppendsEventToCorruptedHistory", Run: testAckAppendsEventToCorruptedHistory},
	}
}

// capVer is semver::Version::new.
func capVer(major, minor, patch uint64) cdb.SemanticVersion {
	return cdb.NewSemanticVersion(major, minor, patch)
}

// capFilter is filter_for_range: one inclusive range [min, max].
func capFilter(min, max cdb.SemanticVersion) *cdb.DispatcherCapabilityFilter {
	return &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{{Min: min, Max: max}}}
}

// capStartedEvent is orchestration_started_event: OrchestrationStarted
// (event 1, execution 1) of TestOrch 1.0.0 written by duroxideVersion.
func capStartedEvent(instance, duroxideVersion string) cdb.Event {
	return cdb.Event{
		EventID:         cdb.InitialEventID,
		InstanceID:      instance,
		ExecutionID:     cdb.InitialExecutionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: duroxideVersion,
		Kind:            cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"},
	}
}

// capTestOrchMetadata is the TestOrch 1.0.0 metadata with the given pin.
func capTestOrchMetadata(pinned *cdb.SemanticVersion) cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{
		OrchestrationName:     ptr("TestOrch"),
		OrchestrationVersion:  ptr("1.0.0"),
		PinnedDuroxideVersion: pinned,
	}
}

// capPing enqueues an ExternalRaised named name, so instance has work again.
func capPing(t *testing.T, p cdb.Provider, instance, name string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(testContext(t),
		cdb.ExternalRaisedMessage{Instance: instance, Name: name, Data: "{}"}, 0))
}

// capFetch fetches with a 30s lock and no poll wait; it fails the test on an
// error and returns a nil item when there is no work.
func capFetch(t *testing.T, p cdb.Provider, filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token, _, err := p.FetchOrchestrationItem(testContext(t), lockLong, noPoll, filter)
	require.NoError(t, err)
	return item, token
}

// capSeedInstanceWithVersion is seed_instance_with_version: enqueue the start
// of instance, fetch until that instance comes up (other instances' locks
// are kept and abandoned afterwards), and ack its first turn pinned at
// pinned, enqueuing a follow-up "ping" in the same ack so the instance has
// work waiting.
func capSeedInstanceWithVersion(t *testing.T, p cdb.Provider, instance string, pinned cdb.SemanticVersion) {
	t.Helper()
	ctx := testContext(t)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0))

	var lockToken string
	var others []string
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "Should have work available")
		if item.Instance == instance {
			lockToken = token
			break
		}
		others = append(others, token)
	}

	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID,
		[]cdb.Event{capStartedEvent(instance, pinned.String())},
		nil,
		[]cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: instance, Name: "ping", Data: "{}"}},
		capTestOrchMetadata(&pinned),
		nil))

	for _, token := range others {
		_ = p.AbandonOrchestrationItem(ctx, token, 0, true) // duroxide ignores these results
	}
}

// capSeedAndCorruptHistory is seed_and_corrupt_history.
func capSeedAndCorruptHistory(t *testing.T, f Factory, p cdb.Provider, instance string, pinned cdb.SemanticVersion) {
	t.Helper()
	capSeedInstanceWithVersion(t, p, instance, pinned)
	require.NoError(t, f.CorruptInstanceHistory(testContext(t), p, instance))
}

func testFetchWithFilterNoneReturnsAnyItem(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-1", capVer(1, 2, 3))

	item, _ := capFetch(t, p, nil)
	assert.NotNil(t, item, "filter=None should return any item")
}

func testFetchWithCompatibleFilterReturnsItem(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-2", capVer(1, 2, 3))

	item, _ := capFetch(t, p, capFilter(capVer(1, 0, 0), capVer(1, 9, 9)))
	assert.NotNil(t, item, "Compatible filter should return item")
}

func testFetchWithIncompatibleFilterSkipsItem(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-3", capVer(1, 2, 3))

	item, _ := capFetch(t, p, capFilter(capVer(2, 0, 0), capVer(2, 9, 9)))
	assert.Nil(t, item, "Incompatible filter should return None")
}

func testFetchFilterSkipsIncompatibleSelectsCompatible(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	capSeedInstanceWithVersion(t, p, "inst-v1", capVer(1, 0, 0))
	capSeedInstanceWithVersion(t, p, "inst-v2", capVer(2, 0, 0))

	// inst-v1 was queued first, so a filter applied after picking the head
	// item would miss inst-v2.
	item, lockToken := capFetch(t, p, capFilter(capVer(2, 0, 0), capVer(2, 9, 9)))
	require.NotNil(t, item, "Should return v2 instance")
	assert.Equal(t, "inst-v2", item.Instance)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))

	item, _ = capFetch(t, p, capFilter(capVer(1, 0, 0), capVer(1, 9, 9)))
	require.NotNil(t, item, "Should return v1 instance")
	assert.Equal(t, "inst-v1", item.Instance)
}

func testFetchFilterDoesNotLockSkippedInstances(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-5", capVer(1, 0, 0))

	item, _ := capFetch(t, p, capFilter(capVer(2, 0, 0), capVer(2, 9, 9)))
	require.Nil(t, item, "an incompatible filter must return no work")

	item, _ = capFetch(t, p, capFilter(capVer(0, 0, 0), capVer(1, 9, 9)))
	assert.NotNil(t, item, "Instance should not have been locked by incompatible fetch")
}

func testFetchFilterNullPinnedVersionAlwaysCompatible(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-null"

	// An instance acked without a pin (pre-migration data).
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	item, lockToken := capFetch(t, p, nil)
	require.NotNil(t, item, "the start must be fetchable")
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID,
		[]cdb.Event{capStartedEvent(inst, "0.0.0")}, nil, nil,
		capTestOrchMetadata(nil), nil))

	capPing(t, p, inst, "ping")

	item, _ = capFetch(t, p, capFilter(capVer(99, 0, 0), capVer(99, 9, 9)))
	assert.NotNil(t, item, "NULL pinned version should be always compatible")
}

func testFetchFilterBoundaryVersions(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	filter := capFilter(capVer(1, 0, 0), capVer(1, 9, 99))

	// Lower bound: 1.0.0 is inside.
	capSeedInstanceWithVersion(t, p, "v1-low", capVer(1, 0, 0))
	item, lockToken := capFetch(t, p, filter)
	require.NotNil(t, item, "v1.0.0 should be within [1.0.0, 1.9.99]")
	assert.Equal(t, "v1-low", item.Instance)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))

	// Upper bound: 1.9.99 is inside.
	capSeedInstanceWithVersion(t, p, "v1-high", capVer(1, 9, 99))
	item, lockToken = capFetch(t, p, filter)
	require.NotNil(t, item, "v1.9.99 should be within [1.0.0, 1.9.99]")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))

	// Just outside: 2.0.0, on a second provider so the v1 instances above
	// cannot answer the fetch.
	p2 := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p2, "v2-exact", capVer(2, 0, 0))

	item, _ = capFetch(t, p2, filter)
	assert.Nil(t, item, "v2.0.0 should NOT be within [1.0.0, 1.9.99]")

	item, _ = capFetch(t, p2, nil)
	assert.NotNil(t, item, "v2-exact should be fetchable without filter")
}

func testPinnedVersionStoredViaAckMetadata(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-8", capVer(3, 1, 4))

	item, _ := capFetch(t, p, capFilter(capVer(3, 0, 0), capVer(3, 9, 9)))
	assert.NotNil(t, item, "Version stored via metadata should be filterable")
}

func testPinnedVersionImmutableAcrossAckCycles(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-9"
	capSeedInstanceWithVersion(t, p, inst, capVer(1, 0, 0))

	filter := capFilter(capVer(0, 0, 0), capVer(1, 9, 9))
	item, lockToken := capFetch(t, p, filter)
	require.NotNil(t, item, "the seeded instance must match its pin")
	assert.Equal(t, inst, item.Instance)

	// Second turn: no pin in the metadata.
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID, nil, nil, nil,
		capTestOrchMetadata(nil), nil))

	capPing(t, p, inst, "ping2")

	item, _ = capFetch(t, p, filter)
	assert.NotNil(t, item, "Pinned version should persist across ack cycles")
}

func testContinueAsNewExecutionGetsOwnPinnedVersion(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-can"

	// Execution 1 pinned at 1.0.0.
	capSeedInstanceWithVersion(t, p, inst, capVer(1, 0, 0))

	// Execution 1 continues as new.
	item, lockToken := capFetch(t, p, capFilter(capVer(0, 0, 0), capVer(1, 9, 9)))
	require.NotNil(t, item, "execution 1 must match its pin")
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID,
		[]cdb.Event{{
			EventID:         2,
			InstanceID:      inst,
			ExecutionID:     cdb.InitialExecutionID,
			TimestampMs:     uint64(time.Now().UnixMilli()),
			DuroxideVersion: "0.1.29",
			Kind:            cdb.OrchestrationContinuedAsNew{Input: "{}"},
		}},
		nil,
		[]cdb.WorkItem{cdb.ContinueAsNewMessage{
			Instance:           inst,
			Orchestration:      "TestOrch",
			Input:              "{}",
			Version:            ptr("1.0.0"),
			CarryForwardEvents: []cdb.CarryForwardEvent{},
		}},
		cdb.ExecutionMetadata{
			Status:               ptr(cdb.StatusContinuedAsNew),
			OrchestrationName:    ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"),
		},
		nil))

	// The ContinueAsNew turn starts execution 2, pinned at 2.0.0.
	const execution2 = cdb.InitialExecutionID + 1
	item, lockToken2 := capFetch(t, p, nil)
	require.NotNil(t, item, "the ContinueAsNew message must be fetchable")
	started := capStartedEvent(inst, "2.0.0")
	started.ExecutionID = execution2
	v2 := capVer(2, 0, 0)
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken2, execution2,
		[]cdb.Event{started}, nil, nil, capTestOrchMetadata(&v2), nil))

	capPing(t, p, inst, "ping")

	item, lockToken3 := capFetch(t, p, capFilter(capVer(2, 0, 0), capVer(2, 9, 9)))
	require.NotNil(t, item, "Should return item with v2 filter after ContinueAsNew")
	assert.Equal(t, inst, item.Instance)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken3, 0, true))

	item, _ = capFetch(t, p, capFilter(capVer(1, 0, 0), capVer(1, 9, 9)))
	assert.Nil(t, item,
		"v1.x filter must NOT match execution 2 — pinned version should be 2.0.0, not inherited 1.0.0")
}

func testFilterWithEmptySupportedVersionsReturnsNothing(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-empty", capVer(1, 0, 0))

	item, _ := capFetch(t, p, &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{}})
	assert.Nil(t, item, "Empty supported versions should return None")
}

func testConcurrentFilteredFetchNoDoubleLock(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	capSeedInstanceWithVersion(t, p, "inst-conc", capVer(1, 0, 0))

	filter := capFilter(capVer(0, 0, 0), capVer(1, 9, 9))
	first, _ := capFetch(t, p, filter)
	require.NotNil(t, first, "First fetch should succeed")

	second, _ := capFetch(t, p, filter)
	assert.Nil(t, second, "Second fetch should return None (instance locked)")
}

func testAckStoresPinnedVersionViaMetadataUpdate(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-backfill"

	// First turn without a pin (pre-migration).
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	item, lockToken := capFetch(t, p, nil)
	require.NotNil(t, item, "the start must be fetchable")
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID,
		[]cdb.Event{capStartedEvent(inst, "1.2.3")}, nil, nil,
		capTestOrchMetadata(nil), nil))

	capPing(t, p, inst, "ping")

	// A later turn backfills the pin.
	item, lockToken2 := capFetch(t, p, nil)
	require.NotNil(t, item, "the ping must be fetchable")
	backfill := capVer(1, 2, 3)
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken2, cdb.InitialExecutionID, nil, nil, nil,
		capTestOrchMetadata(&backfill), nil))

	capPing(t, p, inst, "ping2")

	item, _ = capFetch(t, p, capFilter(capVer(1, 0, 0), capVer(1, 9, 9)))
	assert.NotNil(t, item, "Backfilled pinned version should be filterable")
}

func testProviderUpdatesPinnedVersionWhenTold(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-update"
	capSeedInstanceWithVersion(t, p, inst, capVer(1, 0, 0))

	// The provider stores whatever pin the runtime gives it, even a different one.
	item, lockToken := capFetch(t, p, capFilter(capVer(0, 0, 0), capVer(1, 9, 9)))
	require.NotNil(t, item, "the seeded instance must match its pin")
	v2 := capVer(2, 0, 0)
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, cdb.InitialExecutionID, nil, nil, nil,
		capTestOrchMetadata(&v2), nil))

	capPing(t, p, inst, "ping2")

	item, lockToken2 := capFetch(t, p, capFilter(capVer(2, 0, 0), capVer(2, 0, 0)))
	require.NotNil(t, item, "Provider should have updated pinned version to 2.0.0")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken2, 0, true))

	item, _ = capFetch(t, p, capFilter(capVer(1, 0, 0), capVer(1, 0, 0)))
	assert.Nil(t, item, "Should no longer match v1 filter — version was updated to v2")
}

func testFetchCorruptedHistoryFilteredVsUnfiltered(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-corrupt-39"
	capSeedAndCorruptHistory(t, f, p, inst, capVer(1, 0, 0))

	// Part A: the filter excludes the instance, so its history is never decoded.
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, capFilter(capVer(2, 0, 0), capVer(2, 9, 9)))
	require.NoError(t, err, "Filtered fetch should not produce an error for excluded items")
	assert.Nil(t, item, "Filtered fetch should return None for excluded version")

	// Part B: unfiltered, the item comes back with history_error set.
	item, lockToken, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "Should return Ok(Some(...)) with history_error, not Err")
	require.NotNil(t, item, "Should return item with history_error for corrupted history, not None")
	assert.NotNil(t, item.HistoryError, "Corrupted history should set history_error, got None")
	assert.Empty(t, item.History, "History should be empty when deserialization fails")
	assert.Equal(t, inst, item.Instance)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))
}

// capFetchHistoryErrorAndAbandon is one poison-cycle step of tests #41 and
// #42: a fetch with a 50ms lock must return the item with history_error set;
// it is then abandoned keeping the attempt (ignore_attempt = false).
func capFetchHistoryErrorAndAbandon(t *testing.T, p cdb.Provider, which string) {
	t.Helper()
	ctx := testContext(t)
	item, lockToken, _, err := p.FetchOrchestrationItem(ctx, 50*time.Millisecond, noPoll, nil)
	require.NoError(t, err, "%s: expected Ok(Some) with history_error", which)
	require.NotNil(t, item, "%s: expected Ok(Some) with history_error, got None", which)
	require.NotNil(t, item.HistoryError, "%s should have history_error set", which)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, false))
}

func testFetchDeserializationErrorIncrementsAttemptCount(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-deser-41"
	capSeedAndCorruptHistory(t, f, p, inst, capVer(1, 0, 0))

	capFetchHistoryErrorAndAbandon(t, p, "First fetch")
	time.Sleep(100 * time.Millisecond) // past the 50ms lock
	capFetchHistoryErrorAndAbandon(t, p, "Second fetch")

	maxAttempt, err := f.MaxAttemptCount(ctx, p, inst)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, maxAttempt, uint32(2),
		"attempt_count should be >= 2 after two fetch cycles, got %d", maxAttempt)
}

func testFetchDeserializationErrorEventuallyReachesPoison(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-poison-42"
	capSeedAndCorruptHistory(t, f, p, inst, capVer(1, 0, 0))

	const maxAttempts = uint32(5)
	for i := uint32(0); i < maxAttempts; i++ {
		capFetchHistoryErrorAndAbandon(t, p, fmt.Sprintf("Fetch #%d", i+1))
		time.Sleep(100 * time.Millisecond)
	}

	maxAttempt, err := f.MaxAttemptCount(ctx, p, inst)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, maxAttempt, maxAttempts,
		"attempt_count should be >= %d after %d fetch cycles, got %d", maxAttempts, maxAttempts, maxAttempt)
}

func testFetchFilterAppliedBeforeHistoryDeserialization(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	capSeedAndCorruptHistory(t, f, p, "inst-order-43", capVer(99, 0, 0))

	// Filtering before decoding gives Ok(None); decoding first would give
	// an item with history_error.
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, capFilter(capVer(1, 0, 0), capVer(2, 0, 0)))
	require.NoError(t, err, "Filter should be applied before deserialization")
	assert.Nil(t, item, "Excluded version should not be returned")

	item, lockToken, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "Unfiltered fetch should return Ok(Some) with history_error, not Err")
	require.NotNil(t, item, "Unfiltered fetch should return item with history_error, not None")
	assert.NotNil(t, item.HistoryError, "Unfiltered fetch of corrupted history should have history_error set")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))
}

func testFetchSingleRangeOnlyUsesFirstRange(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	capSeedInstanceWithVersion(t, p, "inst-range-a", capVer(1, 0, 0))
	capSeedInstanceWithVersion(t, p, "inst-range-b", capVer(3, 0, 0))

	// Phase 1: only the first range counts.
	filter := &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{
		{Min: capVer(1, 0, 0), Max: capVer(1, 5, 0)},
		{Min: capVer(3, 0, 0), Max: capVer(3, 5, 0)},
	}}

	item, lockToken := capFetch(t, p, filter)
	require.NotNil(t, item, "Should return instance A (first range)")
	assert.Equal(t, "inst-range-a", item.Instance,
		"Phase 1: only first range should be used, returning instance A")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, lockToken, 0, true))

	// inst-range-a may come back (it was abandoned); inst-range-b must not.
	item, _ = capFetch(t, p, filter)
	if item != nil {
		assert.Equal(t, "inst-range-a", item.Instance,
			"Phase 1: second range should be ignored; only inst-range-a (first range) should be returned")
	}
}

func testAckAppendsEventToCorruptedHistory(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "inst-ack-corrupt-45"
	capSeedInstanceWithVersion(t, p, inst, capVer(1, 0, 0))
	require.NoError(t, f.CorruptInstanceHistory(ctx, p, inst))

	item, lockToken, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "fetch should succeed")
	require.NotNil(t, item, "fetch should return Some for corrupted instance")
	require.NotNil(t, item.HistoryError, "Corrupted history should produce history_error")
	assert.Empty(t, item.History, "history vec should be empty when history_error is set")

	// The poison path: an OrchestrationFailed at sentinel event id 99999.
	poison := cdb.PoisonError{
		AttemptCount: 4,
		MaxAttempts:  3,
		MessageType: cdb.PoisonFailedDeserialization{
			Instance:    inst,
			ExecutionID: item.ExecutionID,
			Error:       *item.HistoryError,
		},
		Message: *item.HistoryError,
	}
	failed := cdb.Event{
		EventID:         99999,
		InstanceID:      inst,
		ExecutionID:     item.ExecutionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            cdb.OrchestrationFailed{Details: poison},
	}
	metadata := cdb.ExecutionMetadata{
		Status:               ptr(cdb.StatusFailed),
		Output:               ptr(poison.DisplayMessage()),
		OrchestrationName:    ptr(item.OrchestrationName),
		OrchestrationVersion: ptr(item.Version),
	}

	// The ack only inserts the new row; it must not re-read the corrupted ones.
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, item.ExecutionID,
		[]cdb.Event{failed}, nil, nil, metadata, nil),
		"ack should succeed — provider must not re-serialize existing history")

	info, err := Admin(t, p).GetInstanceInfo(ctx, inst)
	require.NoError(t, err, "get_instance_info should succeed")
	assert.Equal(t, cdb.StatusFailed, info.Status, "Execution status should be 'Failed' after poison ack")
	if assert.NotNil(t, info.Output, "Output should contain deserialization error message, got nil") {
		assert.Contains(t, *info.Output, "deserialization failed",
			"Output should contain deserialization error message, got: %q", *info.Output)
	}
}
