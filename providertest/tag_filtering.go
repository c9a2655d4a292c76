package providertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's provider_validation/tag_filtering.rs: fetch_work_item selects
// worker items by their activity tag according to the TagFilter, and the tag
// survives every path into and through the worker queue.

func tagFilteringTests() []Test {
	return []Test{
		{Name: "TestDefaultOnlyFetchesUntagged", Run: testDefaultOnlyFetchesUntagged},
		{Name: "TestTagsFetchesOnlyMatching", Run: testTagsFetchesOnlyMatching},
		{Name: "TestDefaultAndFetchesUntaggedAndMatching", Run: testDefaultAndFetchesUntaggedAndMatching},
		{Name: "TestNoneFilterReturnsNothing", Run: testNoneFilterReturnsNothing},
		{Name: "TestMultiTagFilter", Run: testMultiTagFilter},
		{Name: "TestTagRoundTripPreservation", Run: testTagRoundTripPreservation},
		{Name: "TestAnyFilterFetchesEverything", Run: testAnyFilterFetchesEverything},
		{Name: "TestTagSurvivesAbandonAndRefetch", Run: testTagSurvivesAbandonAndRefetch},
		{Name: "TestMultiRuntimeTagIsolation", Run: testMultiRuntimeTagIsolation},
		{Name: "TestTagPreservedThroughAckOrchestrationItem", Run: testTagPreservedThroughAckOrchestrationItem},
	}
}

// tagWorkLock is the 5s worker lock of the single-filter tests.
const tagWorkLock = 5 * time.Second

// tagActivity is tagged_activity: "Activity{id}" of execution 1, without a
// session, tagged with tag (nil = untagged).
func tagActivity(instance string, id uint64, tag *string) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{
		Instance: instance, ExecutionID: 1, ID: id,
		Name: fmt.Sprintf("Activity%d", id), Input: "{}",
		Tag: tag,
	}
}

// tagEnqueue enqueues worker items, failing on an error.
func tagEnqueue(ctx context.Context, t *testing.T, p cdb.Provider, items ...cdb.WorkItem) {
	t.Helper()
	for _, item := range items {
		require.NoError(t, p.EnqueueForWorker(ctx, item))
	}
}

// tagTags is TagFilter::Tags / TagFilter::tags over these tags.
func tagTags(t *testing.T, tags ...string) cdb.TagFilter {
	t.Helper()
	f, err := cdb.TagsFilter(tags...)
	require.NoError(t, err)
	return f
}

// tagFetch is fetch_work_item(lock, ZERO, None, filter), failing on an
// error; a nil item means no work.
func tagFetch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, filter cdb.TagFilter) (cdb.WorkItem, string, uint32) {
	t.Helper()
	item, token, attempt, err := p.FetchWorkItem(ctx, lock, noPoll, nil, filter)
	require.NoError(t, err)
	return item, token, attempt
}

// tagMustFetch is tagFetch(...).expect(msg) followed by the match on
// ActivityExecute.
func tagMustFetch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, filter cdb.TagFilter,
	msgAndArgs ...any) (cdb.ActivityExecuteMessage, string, uint32) {
	t.Helper()
	item, token, attempt := tagFetch(ctx, t, p, lock, filter)
	require.NotNil(t, item, msgAndArgs...)
	activity, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecute, got %T", item)
	return activity, token, attempt
}

// tagRequireTag is assert_eq!(tag.as_deref(), Some(want)).
func tagRequireTag(t *testing.T, want string, activity cdb.ActivityExecuteMessage, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, activity.Tag, msgAndArgs...)
	require.Equal(t, want, *activity.Tag, msgAndArgs...)
}

// DefaultOnly fetches only untagged items.
func testDefaultOnlyFetchesUntagged(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-1", 2, ptr("gpu")),
		tagActivity("inst-1", 3, nil))

	filter := cdb.DefaultOnlyFilter()

	item1, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch first untagged item")
	require.Equal(t, uint64(1), item1.ID)
	require.Nil(t, item1.Tag)

	item2, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch second untagged item")
	require.Equal(t, uint64(3), item2.ID)
	require.Nil(t, item2.Tag)

	none, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.Nil(t, none, "No more untagged items should be available")
}

// Tags fetches only items tagged with one of its tags.
func testTagsFetchesOnlyMatching(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-1", 2, ptr("gpu")),
		tagActivity("inst-1", 3, ptr("cpu")),
		tagActivity("inst-1", 4, ptr("gpu")))

	filter := tagTags(t, "gpu")

	r1, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter)
	require.Equal(t, uint64(2), r1.ID)
	tagRequireTag(t, "gpu", r1)

	r2, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter)
	require.Equal(t, uint64(4), r2.ID)
	tagRequireTag(t, "gpu", r2)

	none, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.Nil(t, none)
}

// DefaultAnd fetches untagged items and those tagged with one of its tags.
func testDefaultAndFetchesUntaggedAndMatching(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-1", 2, ptr("gpu")),
		tagActivity("inst-1", 3, ptr("cpu")))

	filter, err := cdb.DefaultAndFilter("gpu")
	require.NoError(t, err)

	r1, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch untagged item")
	require.Equal(t, uint64(1), r1.ID)

	r2, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch gpu item")
	require.Equal(t, uint64(2), r2.ID)
	tagRequireTag(t, "gpu", r2)

	none, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.Nil(t, none, "cpu-tagged item should not be fetched by DefaultAnd([gpu])")
}

// None (an orchestrator-only worker) fetches nothing.
func testNoneFilterReturnsNothing(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-1", 2, ptr("gpu")))

	item, _, _ := tagFetch(ctx, t, p, tagWorkLock, cdb.NoneFilter())
	require.Nil(t, item, "TagFilter::None should never return items")
}

// A Tags filter with several tags fetches items matching any of them.
func testMultiTagFilter(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, ptr("gpu")),
		tagActivity("inst-1", 2, ptr("tpu")),
		tagActivity("inst-1", 3, ptr("cpu")),
		tagActivity("inst-1", 4, nil))

	filter := tagTags(t, "gpu", "tpu")

	r1, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch gpu item")
	tagRequireTag(t, "gpu", r1)

	r2, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch tpu item")
	tagRequireTag(t, "tpu", r2)

	// Neither cpu nor untagged.
	none, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.Nil(t, none)
}

// The tag and the name survive enqueue and fetch.
func testTagRoundTripPreservation(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p, tagActivity("inst-1", 1, ptr("gpu")))

	item, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, tagTags(t, "gpu"), "Should fetch tagged item")
	tagRequireTag(t, "gpu", item, "Tag should be preserved")
	require.Equal(t, "Activity1", item.Name)
}

// Any fetches every item, tagged or not.
func testAnyFilterFetchesEverything(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-2", 2, ptr("gpu")),
		tagActivity("inst-3", 3, ptr("cpu")))

	filter := cdb.AnyFilter()

	r1, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.NotNil(t, r1, "Any filter should fetch untagged item")

	r2, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.NotNil(t, r2, "Any filter should fetch gpu-tagged item")

	r3, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.NotNil(t, r3, "Any filter should fetch cpu-tagged item")

	r4, _, _ := tagFetch(ctx, t, p, tagWorkLock, filter)
	require.Nil(t, r4, "Queue should be empty")
}

// The tag survives fetch, abandon and refetch.
func testTagSurvivesAbandonAndRefetch(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, ptr("gpu")),
		tagActivity("inst-1", 2, nil))

	filter := tagTags(t, "gpu")
	item, token, _ := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Should fetch gpu item")
	require.Equal(t, uint64(1), item.ID)
	tagRequireTag(t, "gpu", item)

	require.NoError(t, p.AbandonWorkItem(ctx, token, 0, false))

	item2, token2, attempt := tagMustFetch(ctx, t, p, tagWorkLock, filter, "Abandoned item should reappear")
	require.Equal(t, uint64(1), item2.ID, "Should get the same item back")
	tagRequireTag(t, "gpu", item2, "Tag must survive abandon")
	require.GreaterOrEqual(t, attempt, uint32(2), "Attempt count should increase after abandon")
	require.NotEqual(t, token, token2, "Lock token should differ")

	// DefaultOnly sees only the untagged item, never the gpu one.
	untagged, _, _ := tagMustFetch(ctx, t, p, tagWorkLock, cdb.DefaultOnlyFilter(), "Untagged item should be available")
	require.Equal(t, uint64(2), untagged.ID)
	require.Nil(t, untagged.Tag)
}

// Workers ("runtimes") with different filters on one queue: mutually
// exclusive (DefaultOnly vs tags), partially overlapping (gpu+cpu vs
// cpu+fpga) and fully overlapping (Any) filters each get exactly their
// items. Fetched items stay locked (30s), so each filter sees what is left.
func testMultiRuntimeTagIsolation(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	lock := 30 * time.Second

	tagEnqueue(ctx, t, p,
		tagActivity("inst-1", 1, nil),
		tagActivity("inst-2", 2, ptr("gpu")),
		tagActivity("inst-3", 3, ptr("cpu")),
		tagActivity("inst-4", 4, ptr("fpga")),
		tagActivity("inst-5", 5, ptr("gpu")))

	// Mutually exclusive: DefaultOnly sees only the untagged item.
	defaultFilter := cdb.DefaultOnlyFilter()
	r, _, _ := tagMustFetch(ctx, t, p, lock, defaultFilter, "DefaultOnly should get untagged item")
	require.Equal(t, uint64(1), r.ID)
	require.Nil(t, r.Tag)
	none, _, _ := tagFetch(ctx, t, p, lock, defaultFilter)
	require.Nil(t, none, "No more untagged items")

	// Partial overlap: gpu+cpu takes gpu(2) and cpu(3).
	gpuCPU := tagTags(t, "gpu", "cpu")
	got1, _, _ := tagMustFetch(ctx, t, p, lock, gpuCPU, "gpu+cpu filter should find item")
	got2, _, _ := tagMustFetch(ctx, t, p, lock, gpuCPU, "gpu+cpu filter should find second item")
	fetched := []uint64{got1.ID, got2.ID}
	slices.Sort(fetched)
	require.Equal(t, []uint64{2, 3}, fetched, "gpu+cpu filter should get gpu(2) and cpu(3)")

	// Partial overlap: cpu(3) is locked, so cpu+fpga gets only fpga(4).
	cpuFPGA := tagTags(t, "cpu", "fpga")
	got3, _, _ := tagMustFetch(ctx, t, p, lock, cpuFPGA, "cpu+fpga filter should find fpga item")
	require.Equal(t, uint64(4), got3.ID)
	tagRequireTag(t, "fpga", got3)
	none, _, _ = tagFetch(ctx, t, p, lock, cpuFPGA)
	require.Nil(t, none, "cpu locked + fpga consumed = nothing for cpu+fpga")

	// Full overlap: Any picks up the remaining gpu(5), 1-4 being locked.
	anyFilter := cdb.AnyFilter()
	got4, _, _ := tagMustFetch(ctx, t, p, lock, anyFilter, "Any filter should find remaining gpu item")
	require.Equal(t, uint64(5), got4.ID)
	tagRequireTag(t, "gpu", got4)
	none, _, _ = tagFetch(ctx, t, p, lock, anyFilter)
	require.Nil(t, none, "All items consumed or locked")
}

// Tags on worker items enqueued by ack_orchestration_item are stored, so
// fetch filters on them.
func testTagPreservedThroughAckOrchestrationItem(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	const inst = "tag-ack-inst"
	lock := 30 * time.Second

	// Step 1: an instance with a locked turn.
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(inst), 0))
	orch, lockToken, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, orch, "should get orchestration item")

	// Step 2: the ack schedules one gpu-tagged and one untagged activity.
	gpuActivity := cdb.ActivityExecuteMessage{
		Instance: inst, ExecutionID: 1, ID: 10,
		Name: "GpuWork", Input: `"model-v3"`, Tag: ptr("gpu"),
	}
	cpuActivity := cdb.ActivityExecuteMessage{
		Instance: inst, ExecutionID: 1, ID: 11,
		Name: "CpuWork", Input: `"data"`,
	}
	started := cdb.Event{
		EventID:         1,
		InstanceID:      inst,
		ExecutionID:     1,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"},
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, lockToken, 1,
		[]cdb.Event{started},
		[]cdb.WorkItem{gpuActivity, cpuActivity}, nil,
		cdb.ExecutionMetadata{}, nil))

	// Step 3: DefaultOnly gets only the untagged item.
	cpu, cpuToken, _ := tagMustFetch(ctx, t, p, lock, cdb.DefaultOnlyFilter(), "DefaultOnly should get the untagged activity")
	require.Equal(t, "CpuWork", cpu.Name, "DefaultOnly must return untagged item")
	require.Nil(t, cpu.Tag, "DefaultOnly item must have no tag")
	require.NoError(t, p.AckWorkItem(ctx, cpuToken, nil))

	// Step 4: only the gpu item is left, and DefaultOnly must not see it.
	empty, _, _ := tagFetch(ctx, t, p, lock, cdb.DefaultOnlyFilter())
	require.Nil(t, empty, "DefaultOnly must NOT see gpu-tagged item — got %v", empty)

	// Step 5: Tags([gpu]) gets it, tag intact.
	gpu, _, _ := tagMustFetch(ctx, t, p, lock, tagTags(t, "gpu"), "Tags([gpu]) should get the gpu-tagged activity")
	require.Equal(t, "GpuWork", gpu.Name, "Tags([gpu]) must return gpu item")
	tagRequireTag(t, "gpu", gpu, "tag must be preserved as 'gpu'")
}
