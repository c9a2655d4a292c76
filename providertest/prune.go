package providertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// pruneTests is duroxide's provider_validation/prune.rs: PruneExecutions
// and PruneExecutionsBulk delete old executions of continue-as-new chains,
// honour keep_last, never touch the current execution, and bulk pruning
// includes running instances.
func pruneTests() []Test {
	return []Test{
		{Name: "TestPruneOptionsCombinations", Run: testPruneOptionsCombinations},
		{Name: "TestPruneSafety", Run: testPruneSafety},
		{Name: "TestPruneBulk", Run: testPruneBulk},
		{Name: "TestPruneBulkIncludesRunningInstances", Run: testPruneBulkIncludesRunningInstances},
	}
}

func testPruneOptionsCombinations(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	const inst = "prune-options-test"
	createMultiExecutionInstance(ctx, t, p, inst, 4)

	executions, err := admin.ListExecutions(ctx, inst)
	require.NoError(t, err)
	require.Len(t, executions, 4, "Should have 4 executions")

	// keep_last = 2 deletes 2 and keeps 2.
	res, err := admin.PruneExecutions(ctx, inst, cdb.PruneOptions{KeepLast: ptr(uint32(2))})
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.InstancesProcessed)
	after, err := admin.ListExecutions(ctx, inst)
	require.NoError(t, err)
	require.Len(t, after, 2, "Should have 2 executions after prune")
	// The latest ones (3 and 4) stay.
	require.True(t, slices.Contains(after, 3) || slices.Contains(after, 4))

	// Empty options prune every historical execution and keep the current one.
	const inst2 = "prune-options-empty"
	createMultiExecutionInstance(ctx, t, p, inst2, 3)

	info, err := admin.GetInstanceInfo(ctx, inst2)
	require.NoError(t, err)
	currentExec := info.CurrentExecutionID

	_, err = admin.PruneExecutions(ctx, inst2, cdb.PruneOptions{KeepLast: nil, CompletedBefore: nil})
	require.NoError(t, err)

	executions, err = admin.ListExecutions(ctx, inst2)
	require.NoError(t, err)
	require.Len(t, executions, 1, "Only current execution should remain after empty-options prune")
	require.Equal(t, currentExec, executions[0], "The remaining execution should be the current one")
}

func testPruneSafety(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	// The current execution survives even keep_last = 0.
	const inst = "prune-safety-current"
	createMultiExecutionInstance(ctx, t, p, inst, 3)

	_, err := admin.PruneExecutions(ctx, inst, cdb.PruneOptions{KeepLast: ptr(uint32(0))})
	require.NoError(t, err)

	info, err := admin.GetInstanceInfo(ctx, inst)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.CurrentExecutionID, "Current execution should remain")

	// An unknown instance is an error.
	_, err = admin.PruneExecutions(ctx, "does-not-exist-prune", cdb.PruneOptions{KeepLast: ptr(uint32(1))})
	require.ErrorIs(t, err, cdb.ErrInstanceNotFound, "Prune on non-existent instance should error")

	// On a terminal instance, None, Some(0) and Some(1) are equivalent: only
	// the current execution survives.
	for _, c := range []struct {
		label    string
		keepLast *uint32
	}{
		{"None", nil},
		{"Some(0)", ptr(uint32(0))},
		{"Some(1)", ptr(uint32(1))},
	} {
		id := "prune-terminal-" + strings.NewReplacer("(", "", ")", "").Replace(strings.ToLower(c.label))
		createMultiExecutionInstance(ctx, t, p, id, 4)

		info, err := admin.GetInstanceInfo(ctx, id)
		require.NoError(t, err)
		require.Equal(t, cdb.StatusCompleted, info.Status, "Instance should be terminal")
		currentExec := info.CurrentExecutionID

		res, err := admin.PruneExecutions(ctx, id, cdb.PruneOptions{KeepLast: c.keepLast})
		require.NoError(t, err)

		executions, err := admin.ListExecutions(ctx, id)
		require.NoError(t, err)
		require.Len(t, executions, 1, "keep_last=%s: should have exactly 1 execution remaining", c.label)
		require.Equal(t, currentExec, executions[0], "keep_last=%s: remaining execution should be the current one", c.label)
		require.GreaterOrEqual(t, res.ExecutionsDeleted, uint64(3),
			"keep_last=%s: should have deleted 3 historical executions", c.label)
	}
}

func testPruneBulk(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	for i := 0; i < 3; i++ {
		createMultiExecutionInstance(ctx, t, p, fmt.Sprintf("prune-bulk-%d", i), 4)
	}

	// Keep the last execution of two of them.
	res, err := admin.PruneExecutionsBulk(ctx,
		cdb.InstanceFilter{InstanceIDs: &[]string{"prune-bulk-0", "prune-bulk-1"}},
		cdb.PruneOptions{KeepLast: ptr(uint32(1))})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.InstancesProcessed, "Should process 2 instances")
	require.GreaterOrEqual(t, res.ExecutionsDeleted, uint64(4), "Should delete multiple executions across instances")

	exec0, err := admin.ListExecutions(ctx, "prune-bulk-0")
	require.NoError(t, err)
	require.Len(t, exec0, 1, "Instance 0 should have 1 execution")

	exec1, err := admin.ListExecutions(ctx, "prune-bulk-1")
	require.NoError(t, err)
	require.Len(t, exec1, 1, "Instance 1 should have 1 execution")

	// Not in the filter: untouched.
	exec2, err := admin.ListExecutions(ctx, "prune-bulk-2")
	require.NoError(t, err)
	require.Len(t, exec2, 4, "Instance 2 should still have 4 executions")
}

func testPruneBulkIncludesRunningInstances(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	admin := Admin(t, p)

	// A continue-as-new chain whose third execution is still running.
	const inst = "prune-running-inst"
	createRunningMultiExecutionInstance(ctx, t, p, inst, 3)

	executions, err := admin.ListExecutions(ctx, inst)
	require.NoError(t, err)
	require.Len(t, executions, 3, "Should have 3 executions")
	info, err := admin.GetInstanceInfo(ctx, inst)
	require.NoError(t, err)
	require.Equal(t, cdb.StatusRunning, info.Status, "Instance should still be Running")
	require.Equal(t, uint64(3), info.CurrentExecutionID, "Current execution should be 3")

	// keep_last = 1 deletes executions 1 and 2 and keeps 3.
	res, err := admin.PruneExecutionsBulk(ctx,
		cdb.InstanceFilter{InstanceIDs: &[]string{inst}},
		cdb.PruneOptions{KeepLast: ptr(uint32(1))})
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.InstancesProcessed, "Should process the running instance")
	require.Equal(t, uint64(2), res.ExecutionsDeleted, "Should delete 2 historical executions")

	remaining, err := admin.ListExecutions(ctx, inst)
	require.NoError(t, err)
	require.Len(t, remaining, 1, "Should have 1 execution remaining")
	require.Equal(t, uint64(3), remaining[0], "Remaining execution should be the current one (3)")

	info, err = admin.GetInstanceInfo(ctx, inst)
	require.NoError(t, err)
	require.Equal(t, cdb.StatusRunning, info.Status, "Instance should still be Running after prune")
}
