package durable

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An eternal inbox: each execution takes ten messages from a persistent
// queue and continues as new with the running total, while far more
// messages than a batch holds wait behind it. Every message must be taken
// once: a batch after continue-as-new that left out the ContinueAsNew
// message would be consumed as the finished execution's.
func TestSampleInboxContinuesAsNewThroughABacklog(t *testing.T) {
	const total = 100
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Inbox", func(ctx *OrchestrationContext, input string) (string, error) {
			sum, _ := strconv.Atoi(input)
			for i := 0; i < 10; i++ {
				v, err := ctx.DequeueEvent("inbox").Await()
				if err != nil {
					return "", err
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", fmt.Errorf("message %q: %w", v, err)
				}
				sum += n
			}
			if sum >= total*(total+1)/2 {
				return strconv.Itoa(sum), nil
			}
			return ctx.ContinueAsNew(strconv.Itoa(sum))
		})
		// The whole backlog is queued behind the start before any turn runs.
		h.start("inbox-backlog", "Inbox", "0")
		for i := 1; i <= total; i++ {
			require.NoError(t, h.client.EnqueueEvent(h.ctx, "inbox-backlog", "inbox", strconv.Itoa(i)))
		}
		h.run()
		assert.Equal(t, strconv.Itoa(total*(total+1)/2), h.completed("inbox-backlog"), "every message taken once")
	})
}
