package durable

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A start no process has run yet is a state of its own, and every read
// tells it alike: the status and the instance info say Queued (with the
// orchestration the start names), a second start is refused as queued,
// an event raised meanwhile waits for it, and the first turn runs it all.
func TestAQueuedStartReadsQueuedEverywhere(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	h.orchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
		approval, err := ctx.WaitForEvent("approval").Await()
		return input + " approved by " + approval, err
	})
	h.start("order-queued", "Order", "order-1", WithVersion("1.0.0"))

	st, err := h.client.GetStatus(h.ctx, "order-queued")
	require.NoError(t, err)
	assert.Equal(t, Status{State: StateQueued}, st)
	info, err := h.client.GetInstanceInfo(h.ctx, "order-queued")
	require.NoError(t, err)
	assert.Equal(t, cdb.StatusQueued, info.Status)
	assert.Equal(t, "Order", info.OrchestrationName)
	assert.Equal(t, "1.0.0", info.OrchestrationVersion)
	assert.Equal(t, cdb.InitialExecutionID, info.CurrentExecutionID)
	assert.NotZero(t, info.CreatedAt)

	err = h.client.StartOrchestration(h.ctx, "order-queued", "Order", "order-2")
	var exists *InstanceExistsError
	require.True(t, errors.As(err, &exists), "got %v", err)
	assert.Equal(t, StateQueued, exists.Status.State)
	assert.Equal(t, `durable: start orchestration "order-queued": a start of the instance is already queued`, err.Error())
	require.NoError(t, h.client.RaiseEvent(h.ctx, "order-queued", "approval", "ops"))

	h.run()
	assert.Equal(t, "order-1 approved by ops", h.completed("order-queued"))
}

// An id nothing started is still not found, on every read.
func TestAnIdNothingStartedIsNotFound(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	st, err := h.client.GetStatus(h.ctx, "never-started")
	require.NoError(t, err)
	assert.Equal(t, StateNotFound, st.State)
	_, err = h.client.GetInstanceInfo(h.ctx, "never-started")
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
}

// A queued start is deleted as a running instance is: refused without
// force, and with force gone, its id free for a new start.
func TestAQueuedStartIsDeletedWithForce(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	h.orchestration("Order", func(_ *OrchestrationContext, input string) (string, error) { return "done " + input, nil })
	h.start("order-deleted", "Order", "first")

	_, err := h.client.DeleteInstance(h.ctx, "order-deleted", false)
	assert.ErrorIs(t, err, cdb.ErrInstanceRunning)
	assert.ErrorContains(t, err, `instance "order-deleted" is Queued; use force=true to delete it`)
	result, err := h.client.DeleteInstance(h.ctx, "order-deleted", true)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), result.InstancesDeleted)
	st, err := h.client.GetStatus(h.ctx, "order-deleted")
	require.NoError(t, err)
	assert.Equal(t, StateNotFound, st.State)

	h.start("order-deleted", "Order", "second")
	h.run()
	assert.Equal(t, "done second", h.completed("order-deleted"))
}
