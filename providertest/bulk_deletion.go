package providertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// bulkDeletionTests is duroxide's provider_validation/bulk_deletion.rs:
// DeleteInstanceBulk deletes the terminal root instances matching an
// InstanceFilter (ids, completed_before, limit, ANDed), skips running ones,
// and cascades to each root's sub-orchestrations.
func bulkDeletionTests() []Test {
	return []Test{
		{Name: "TestDeleteInstanceBulkFilterCombinations", Run: testDeleteInstanceBulkFilterCombinations},
		{Name: "TestDeleteInstanceBulkSafetyAndLimits", Run: testDeleteInstanceBulkSafetyAndLimits},
		{Name: "TestDeleteInstanceBulkCompletedBeforeFilter", Run: testDeleteInstanceBulkCompletedBeforeFilter},
		{Name: "TestDeleteInstanceBulkCascadesToChildren", Run: testDeleteInstanceBulkCascadesToChildren},
	}
}

func testDeleteInstanceBulkFilterCombinations(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	for i := 0; i < 5; i++ {
		createCompletedInstance(ctx, t, p, fmt.Sprintf("bulk-del-filter-%d", i))
	}

	// By ids.
	res, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs: &[]string{"bulk-del-filter-0", "bulk-del-filter-1"},
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.InstancesDeleted, "Should delete 2 instances by ID")

	require.False(t, instanceExists(ctx, t, admin, "bulk-del-filter-0"))
	require.False(t, instanceExists(ctx, t, admin, "bulk-del-filter-1"))
	require.True(t, instanceExists(ctx, t, admin, "bulk-del-filter-2"))

	// Unknown ids delete nothing.
	res, err = admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs: &[]string{"does-not-exist-1", "does-not-exist-2"},
	})
	require.NoError(t, err)
	require.Equal(t, uint64(0), res.InstancesDeleted, "Non-existent IDs should return 0 deleted")

	// An empty filter deletes every remaining terminal instance.
	res, err = admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.InstancesDeleted, uint64(3), "Empty filter should delete remaining terminal instances")

	require.False(t, instanceExists(ctx, t, admin, "bulk-del-filter-2"))
	require.False(t, instanceExists(ctx, t, admin, "bulk-del-filter-3"))
	require.False(t, instanceExists(ctx, t, admin, "bulk-del-filter-4"))
}

func testDeleteInstanceBulkSafetyAndLimits(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	createCompletedInstance(ctx, t, p, "bulk-del-safe-completed-1")
	createCompletedInstance(ctx, t, p, "bulk-del-safe-completed-2")
	CreateInstance(ctx, t, p, "bulk-del-safe-running-1")
	CreateInstance(ctx, t, p, "bulk-del-safe-running-2")

	// Running instances are skipped.
	res, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs: &[]string{
			"bulk-del-safe-completed-1",
			"bulk-del-safe-completed-2",
			"bulk-del-safe-running-1",
			"bulk-del-safe-running-2",
		},
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.InstancesDeleted, "Should only delete completed instances")
	require.True(t, instanceExists(ctx, t, admin, "bulk-del-safe-running-1"), "Running instance should not be deleted")
	require.True(t, instanceExists(ctx, t, admin, "bulk-del-safe-running-2"), "Running instance should not be deleted")

	// Iterative batching with a limit.
	for i := 0; i < 4; i++ {
		createCompletedInstance(ctx, t, p, fmt.Sprintf("bulk-del-batch-%d", i))
	}

	res1, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{Limit: ptr(uint32(2))})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res1.InstancesDeleted, "First batch should delete 2")

	res2, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{Limit: ptr(uint32(2))})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res2.InstancesDeleted, "Second batch should delete 2")

	res3, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{Limit: ptr(uint32(2))})
	require.NoError(t, err)
	require.Equal(t, uint64(0), res3.InstancesDeleted, "Third batch should delete 0 (all gone)")
}

func testDeleteInstanceBulkCompletedBeforeFilter(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	// Wall-clock ms before the instances complete; the sleeps keep the
	// cutoffs clear of the completion times at millisecond precision.
	beforeCreation := nowMs()
	time.Sleep(10 * time.Millisecond)

	createCompletedInstance(ctx, t, p, "bulk-del-time-1")
	createCompletedInstance(ctx, t, p, "bulk-del-time-2")

	time.Sleep(10 * time.Millisecond)
	afterCreation := nowMs()

	ids := []string{"bulk-del-time-1", "bulk-del-time-2"}

	// A cutoff before the completions matches nothing.
	res, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs:     &ids,
		CompletedBefore: ptr(beforeCreation),
	})
	require.NoError(t, err)
	require.Equal(t, uint64(0), res.InstancesDeleted,
		"No instances should be deleted - they were completed after the cutoff")

	require.True(t, instanceExists(ctx, t, admin, "bulk-del-time-1"), "Instance 1 should still exist")
	require.True(t, instanceExists(ctx, t, admin, "bulk-del-time-2"), "Instance 2 should still exist")

	// A cutoff after the completions matches both.
	res, err = admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs:     &ids,
		CompletedBefore: ptr(afterCreation),
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.InstancesDeleted,
		"Both instances should be deleted - they were completed before the cutoff")

	require.False(t, instanceExists(ctx, t, admin, "bulk-del-time-1"), "Instance 1 should be deleted")
	require.False(t, instanceExists(ctx, t, admin, "bulk-del-time-2"), "Instance 2 should be deleted")
}

func testDeleteInstanceBulkCascadesToChildren(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	// A parent with one child.
	const parent1 = "bulk-del-cascade-parent1"
	const child1 = "bulk-del-cascade-child1"
	createCompletedInstance(ctx, t, p, parent1)
	createCompletedInstanceWithParent(ctx, t, p, child1, ptr(parent1))

	// A parent with three children.
	const parent2 = "bulk-del-cascade-parent2"
	const child2a = "bulk-del-cascade-child2a"
	const child2b = "bulk-del-cascade-child2b"
	const child2c = "bulk-del-cascade-child2c"
	createCompletedInstance(ctx, t, p, parent2)
	createCompletedInstanceWithParent(ctx, t, p, child2a, ptr(parent2))
	createCompletedInstanceWithParent(ctx, t, p, child2b, ptr(parent2))
	createCompletedInstanceWithParent(ctx, t, p, child2c, ptr(parent2))

	// A standalone instance.
	const standalone = "bulk-del-cascade-standalone"
	createCompletedInstance(ctx, t, p, standalone)

	for _, id := range []string{parent1, child1, parent2, child2a, child2b, child2c, standalone} {
		require.True(t, instanceExists(ctx, t, admin, id))
	}

	// All roots in one request.
	res, err := admin.DeleteInstanceBulk(ctx, cdb.InstanceFilter{
		InstanceIDs: &[]string{parent1, parent2, standalone},
	})
	require.NoError(t, err)
	// 3 roots + 1 child of parent1 + 3 children of parent2.
	require.Equal(t, uint64(7), res.InstancesDeleted, "Should delete all roots and their children")

	require.False(t, instanceExists(ctx, t, admin, parent1), "Parent1 should be deleted")
	require.False(t, instanceExists(ctx, t, admin, child1), "Child1 should be cascade deleted")
	require.False(t, instanceExists(ctx, t, admin, parent2), "Parent2 should be deleted")
	require.False(t, instanceExists(ctx, t, admin, child2a), "Child2a should be cascade deleted")
	require.False(t, instanceExists(ctx, t, admin, child2b), "Child2b should be cascade deleted")
	require.False(t, instanceExists(ctx, t, admin, child2c), "Child2c should be cascade deleted")
	require.False(t, instanceExists(ctx, t, admin, standalone), "Standalone should be deleted")
}
