package durable

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A wait's polls: 5 ms apart at first, ten a second from the first tenth
// of a second, then never further apart than a fifth of the time waited
// nor a second. A minute's wait reads about seventy times, not six
// hundred.
func TestAWaitsPollsSpreadOutAsItLasts(t *testing.T) {
	b := pollBackoff{}.withDefaults()
	delay, elapsed, polls := b.first, time.Duration(0), 1
	var firsts []time.Duration
	for elapsed < time.Minute {
		if len(firsts) < 6 {
			firsts = append(firsts, delay)
		}
		elapsed += delay
		polls++
		assert.LessOrEqual(t, delay, max(b.most, elapsed/5), "an end is seen within a fifth of the time waited (at %s)", elapsed)
		assert.LessOrEqual(t, delay, time.Second, "at %s", elapsed)
		delay = b.next(delay, elapsed)
	}
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond,
		80 * time.Millisecond, 100 * time.Millisecond}, firsts)
	assert.Equal(t, time.Second, delay, "a long wait reads once a second")
	assert.Less(t, polls, 100, "a minute's wait")
}

// concurrentReads counts a provider's history reads (its status reads,
// the StatusReader hidden) and the most under way at once; each takes a
// few milliseconds, so that waits that did not share would overlap.
type concurrentReads struct {
	cdb.Provider
	reads, inFlight, most atomic.Int64
}

func (c *concurrentReads) Read(ctx context.Context, instance string) ([]cdb.Event, error) {
	n := c.inFlight.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	defer c.inFlight.Add(-1)
	defer c.reads.Add(1)
	time.Sleep(3 * time.Millisecond)
	return c.Provider.Read(ctx, instance)
}

// The waits of one client on one instance read it one at a time between
// them, each taking the answers of the reads the others sent since its own
// last look, and all of them see the end.
func TestTheWaitsOnOneInstanceShareTheirReads(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	h.orchestration("Gate", gate)
	h.run()
	h.start("shared", "Gate", "")
	reads := &concurrentReads{Provider: h.provider}
	waiter := NewClient(reads)
	waiter.pollBackoff = pollBackoff{first: time.Millisecond, most: time.Millisecond, longest: time.Millisecond}
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	const waits = 8
	var done []<-chan waitResult
	for range waits {
		done = append(done, waitInBackground(ctx, waiter, "shared", time.Minute))
	}
	require.Eventually(t, func() bool { return reads.reads.Load() >= 30 }, 10*time.Second, time.Millisecond)
	require.NoError(t, h.client.RaiseEvent(h.ctx, "shared", "go", "open"))
	for _, d := range done {
		res := <-d
		require.NoError(t, res.err)
		assert.Equal(t, StateCompleted, res.st.State)
	}
	assert.Equal(t, int64(1), reads.most.Load(), "one read of the instance at a time, however many wait")
}
