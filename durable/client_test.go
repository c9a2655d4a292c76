package durable

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// historyOnly hides a provider's StatusReader, so a client on it reads the
// status from the history.
type historyOnly struct{ cdb.Provider }

// GetStatus reads the same status through a StatusReader (one request on
// the Cosmos provider) as from the history: running with a custom status,
// completed, failed, continued as new, unknown.
func TestGetStatusFromAStatusReaderMatchesTheHistory(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Progress", func(ctx *OrchestrationContext, input string) (string, error) {
			half := "half way"
			ctx.SetCustomStatus(&half)
			switch input {
			case "fail":
				return "", errors.New("boom")
			case "wait":
				return ctx.WaitForEvent("go").Await()
			case "again":
				return ctx.ContinueAsNew("wait")
			}
			return "done:" + input, nil
		})
		h.run()
		for id, input := range map[string]string{"ok": "x", "bad": "fail", "waiting": "wait", "next": "again"} {
			require.NoError(t, h.client.StartOrchestration(h.ctx, id, "Progress", input))
		}
		_, err := h.client.WaitForCompletion(h.ctx, "ok", time.Minute)
		require.NoError(t, err)
		_, err = h.client.WaitForCompletion(h.ctx, "bad", time.Minute)
		require.NoError(t, err)
		slow := NewClient(historyOnly{h.provider})
		for _, id := range []string{"waiting", "next"} {
			require.Eventually(t, func() bool {
				st, err := slow.GetStatus(h.ctx, id)
				return err == nil && st.State == StateRunning && st.CustomStatus != nil
			}, time.Minute, 5*time.Millisecond, "%s runs and has set its custom status", id)
		}
		for _, id := range []string{"ok", "bad", "waiting", "next", "nobody"} {
			want, err := slow.GetStatus(h.ctx, id)
			require.NoError(t, err)
			got, err := h.client.GetStatus(h.ctx, id)
			require.NoError(t, err)
			assert.Equal(t, want, got, "status of %s", id)
		}
	})
}
