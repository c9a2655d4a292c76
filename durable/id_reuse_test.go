package durable

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartingATakenIDIsRefused: a second start of an id whose instance
// has run is refused with ErrInstanceExists and the instance's state;
// IfExistsIgnore makes it a no-op, and a deleted instance's id is free
// again.
func TestStartingATakenIDIsRefused(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Echo", func(_ *OrchestrationContext, in string) (string, error) { return in, nil })
		h.run()
		h.start("taken", "Echo", "first")
		require.Equal(t, "first", h.completed("taken"))

		err := h.client.StartOrchestration(h.ctx, "taken", "Echo", "second")
		require.ErrorIs(t, err, ErrInstanceExists)
		var exists *InstanceExistsError
		require.ErrorAs(t, err, &exists)
		assert.Equal(t, "taken", exists.Instance)
		assert.Equal(t, StateCompleted, exists.Status.State)
		assert.EqualError(t, err, `durable: start orchestration "taken": the instance already exists (Completed)`)

		require.NoError(t, h.client.StartOrchestration(h.ctx, "taken", "Echo", "third", WithIfExists(IfExistsIgnore)))
		assert.Equal(t, "first", h.completed("taken"), "the ignored start did not run")

		if _, err := h.client.DeleteInstance(h.ctx, "taken", false); err != nil {
			require.ErrorIs(t, err, ErrNoAdmin)
			return
		}
		h.start("taken", "Echo", "again")
		assert.Equal(t, "again", h.completed("taken"))
	})
}
