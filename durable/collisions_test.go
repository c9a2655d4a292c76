package durable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A sub-orchestration whose instance id already names an instance is not
// started: its parent is told with a failure (duroxide 0.1.30 for a
// finished instance, 0.1.32 for a running one), where before the start was
// dropped and the parent waited forever.

// collisionHarness runs "Parent", which awaits a child of the id its input
// names and fails with the child's failure, and "Waiter", which returns the
// data of the event "go" prefixed with its input.
func collisionHarness(t *testing.T, pc providerCase) *harness {
	t.Helper()
	h := newHarness(t, pc.new(t))
	h.orchestration("Waiter", func(ctx *OrchestrationContext, input string) (string, error) {
		data, err := ctx.WaitForEvent("go").Await()
		return input + ":" + data, err
	})
	h.orchestration("Parent", func(ctx *OrchestrationContext, id string) (string, error) {
		return ctx.ScheduleSubOrchestration("Waiter", "from the parent", WithInstanceID(id)).Await()
	})
	h.run()
	return h
}

// waitBounded waits for instance, bounded well below the harness's minute so
// a parent that hangs fails the test soon.
func (h *harness) waitBounded(instance string) Status {
	st, err := h.client.WaitForCompletion(h.ctx, instance, 20*time.Second)
	require.NoError(h.t, err, "instance %s did not finish", instance)
	return st
}

// requireCollision checks that parent failed with the collision its child
// start met, recorded as duroxide records it.
func requireCollision(t *testing.T, h *harness, parent, message string) {
	t.Helper()
	want := cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: message}
	st := h.waitBounded(parent)
	require.Equal(t, StateFailed, st.State)
	assert.Equal(t, want, st.Error)
	history, err := h.client.ReadHistory(h.ctx, parent)
	require.NoError(t, err)
	failures := eventsOf[cdb.SubOrchestrationFailed](history)
	require.Len(t, failures, 1)
	assert.Equal(t, want, failures[0].Details)
}

func TestChildStartOnAFinishedInstanceFailsTheParent(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			h := collisionHarness(t, pc)
			h.start("taken", "Waiter", "first")
			h.waitForHistory("taken", hasEvent[cdb.ExternalSubscribed])
			require.NoError(t, h.client.RaiseEvent(h.ctx, "taken", "go", "done"))
			require.Equal(t, "first:done", h.completed("taken"))

			h.start("p", "Parent", "taken")
			requireCollision(t, h, "p", "sub-orchestration instance id 'taken' already exists and is terminal")
			st, err := h.client.GetStatus(h.ctx, "taken")
			require.NoError(t, err)
			assert.Equal(t, Status{State: StateCompleted, Output: "first:done"}, st, "the finished instance is untouched")
		})
	}
}

func TestChildStartOnARunningInstanceFailsTheParent(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			h := collisionHarness(t, pc)
			h.start("busy", "Waiter", "first")
			h.waitForHistory("busy", hasEvent[cdb.ExternalSubscribed])

			h.start("p", "Parent", "busy")
			requireCollision(t, h, "p", "sub-orchestration instance id 'busy' already exists")

			// The running instance goes on as it was started, with no parent.
			require.NoError(t, h.client.RaiseEvent(h.ctx, "busy", "go", "done"))
			assert.Equal(t, "first:done", h.completed("busy"))
			history, err := h.client.ReadHistory(h.ctx, "busy")
			require.NoError(t, err)
			assert.Nil(t, history[0].Kind.(cdb.OrchestrationStarted).ParentInstance)
		})
	}
}

// The running child's own parent sending the same call again (the same
// parent instance, event id and parent execution) is a redelivery, not a
// collision: it is ignored, as before.
func TestRedeliveredChildStartIsIgnored(t *testing.T) {
	h := collisionHarness(t, testProviders[0])
	h.start("p", "Parent", "kid")
	history := h.waitForHistory("kid", hasEvent[cdb.ExternalSubscribed])
	started := history[0].Kind.(cdb.OrchestrationStarted)
	require.Equal(t, ptr("p"), started.ParentInstance)
	require.Equal(t, ptr(uint64(1)), started.ParentExecutionID)

	require.NoError(t, h.provider.EnqueueForOrchestrator(h.ctx, cdb.StartOrchestrationMessage{
		Instance: "kid", Orchestration: "Waiter", Input: "from the parent", Version: ptr(started.Version),
		ParentInstance: started.ParentInstance, ParentID: started.ParentID, ParentExecutionID: started.ParentExecutionID,
		ExecutionID: cdb.InitialExecutionID,
	}, 0))
	// Let the redelivered start be consumed before the child finishes.
	require.NoError(t, h.client.RaiseEvent(h.ctx, "kid", "nudge", ""))
	h.waitForHistory("kid", func(history []cdb.Event) bool { return len(eventsOf[cdb.ExternalEvent](history)) == 1 })
	require.NoError(t, h.client.RaiseEvent(h.ctx, "kid", "go", "done"))
	assert.Equal(t, "from the parent:done", h.completed("p"))
}
