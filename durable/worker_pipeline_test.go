package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// heldAcks holds every worker ack until released, and says which result
// each one carries as it arrives.
type heldAcks struct {
	cdb.Provider
	arrived chan string
	release chan struct{}
}

func (p *heldAcks) AckWorkItem(ctx context.Context, token string, completion cdb.WorkItem) error {
	if c, ok := completion.(cdb.ActivityCompletedMessage); ok {
		p.arrived <- c.Result
	}
	<-p.release
	return p.Provider.AckWorkItem(ctx, token, completion)
}

// A worker slot runs its next activity while the ack of the one before is
// under way, and acks the next one only after that ack: with one slot and
// the first ack held, both handlers run and one ack has begun.
func TestAWorkerSlotRunsTheNextActivityWhileTheLastOnesAckIsUnderWay(t *testing.T) {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	p := &heldAcks{Provider: mem, arrived: make(chan string, 2), release: make(chan struct{})}
	h := newHarness(t, p)
	ran := make(chan string, 2)
	h.activity("Echo", func(_ ActivityContext, in string) (string, error) {
		ran <- in
		return in, nil
	})
	h.orchestration("Two", func(ctx *OrchestrationContext, _ string) (string, error) {
		a, b := ctx.ScheduleActivity("Echo", "a"), ctx.ScheduleActivity("Echo", "b")
		first, err := a.Await()
		if err != nil {
			return "", err
		}
		second, err := b.Await()
		return first + second, err
	})
	h.run(func(o *Options) { o.WorkerConcurrency = 1 })
	released := false
	t.Cleanup(func() { // before the runtime's shutdown, which waits for the acks
		if !released {
			close(p.release) // a failed check: let the runtime stop
		}
	})
	h.start("two", "Two", "")

	held := receive(t, p.arrived, "the first ack")
	first, second := receive(t, ran, "the first activity"), receive(t, ran, "the second activity, while the first ack is held")
	assert.Equal(t, held, first, "the first activity's ack is the one under way")
	assert.ElementsMatch(t, []string{"a", "b"}, []string{first, second}, "the slot ran the second activity meanwhile")
	assert.Empty(t, p.arrived, "the second ack waits for the first")

	close(p.release)
	released = true
	assert.Equal(t, "ab", h.completed("two"))
}

// receive is ch's next value, failing the test after 10 s without one.
func receive(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		require.FailNow(t, "never came: "+what)
		return ""
	}
}
