package durable

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/duroxide-go/cdb"
)

// The client's errors wrap the provider's, so a caller tells an unknown
// instance with errors.Is on every provider.
func TestClientErrorsTellAnUnknownInstance(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		_, err := h.client.GetInstanceInfo(h.ctx, "nobody")
		assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
		_, err = h.client.PruneExecutions(h.ctx, "nobody", cdb.PruneOptions{})
		assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)

		st, err := h.client.GetStatus(h.ctx, "nobody")
		assert.NoError(t, err, "GetStatus reports an unknown instance as a state")
		assert.Equal(t, StateNotFound, st.State)
	})
}
