package durable

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// heldStatuses is a StatusesReader whose reads wait until released, and
// that records what each read asked for.
type heldStatuses struct {
	mu      sync.Mutex
	asked   [][]string
	release chan struct{}
}

func (h *heldStatuses) ReadOrchestrationStatuses(ctx context.Context, instances []string) (map[string]cdb.OrchestrationStatus, error) {
	h.mu.Lock()
	h.asked = append(h.asked, instances)
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := map[string]cdb.OrchestrationStatus{}
	for _, id := range instances {
		out[id] = cdb.OrchestrationStatus{Found: true, Status: cdb.StatusRunning, CustomStatus: &id, CustomStatusVersion: 1}
	}
	return out, nil
}

func (h *heldStatuses) reads() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.asked)
}

// A lone read goes at once; the reads asked for while it is under way go
// together in one read once it returns, each getting its own instance's
// answer.
func TestStatusReadsAskedWhileOneIsUnderWayGoTogether(t *testing.T) {
	reader := &heldStatuses{release: make(chan struct{})}
	var b statusBatch
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		id  string
		st  cdb.OrchestrationStatus
		err error
	}
	answers := make(chan answer, 11)
	ask := func(id string) {
		go func() {
			st, err := b.status(ctx, id, reader)
			answers <- answer{id, st, err}
		}()
	}
	ask("first")
	require.Eventually(t, func() bool { return len(reader.reads()) == 1 }, 10*time.Second, time.Millisecond)
	var rest []string
	for i := range 10 {
		id := fmt.Sprint("next-", i)
		rest = append(rest, id)
		ask(id)
	}
	ask("next-3") // a second wait on one of them shares its answer
	time.Sleep(20 * time.Millisecond)
	assert.Len(t, reader.reads(), 1, "nothing more is sent while a read is under way")
	close(reader.release)
	for range 12 {
		a := <-answers
		require.NoError(t, a.err)
		assert.Equal(t, a.id, *a.st.CustomStatus, "each gets its own instance's status")
	}
	slices.Sort(rest)
	assert.Equal(t, [][]string{{"first"}, rest}, reader.reads())
}

// A wait whose context ends stops waiting for the batch; the batch goes on
// for the others.
func TestAStatusReadWhoseCallerLeftDoesNotHoldTheBatch(t *testing.T) {
	reader := &heldStatuses{release: make(chan struct{})}
	var b statusBatch
	short, cancelShort := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := b.status(short, "leaving", reader)
		left <- err
	}()
	require.Eventually(t, func() bool { return len(reader.reads()) == 1 }, 10*time.Second, time.Millisecond)
	cancelShort()
	require.ErrorIs(t, <-left, context.Canceled)
	close(reader.release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.status(ctx, "staying", reader)
	require.NoError(t, err)
	assert.True(t, st.Found)
}

// batchedStatuses passes a provider's StatusesReader on, hiding its other
// optional capabilities (its end watches too, so the waits learn ends by
// polling), and counts its reads and the most under way at once.
type batchedStatuses struct {
	cdb.Provider
	reader         cdb.StatusesReader
	mu             sync.Mutex
	sizes          []int
	inFlight, most atomic.Int64
}

func (b *batchedStatuses) ReadOrchestrationStatuses(ctx context.Context, instances []string) (map[string]cdb.OrchestrationStatus, error) {
	n := b.inFlight.Add(1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	defer b.inFlight.Add(-1)
	b.mu.Lock()
	b.sizes = append(b.sizes, len(instances))
	b.mu.Unlock()
	time.Sleep(3 * time.Millisecond) // a round trip, so that waits that did not share would overlap
	return b.reader.ReadOrchestrationStatuses(ctx, instances)
}

func (b *batchedStatuses) largest() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Max(append([]int{0}, b.sizes...))
}

// The waits of one client on many instances read them together: one read
// at a time between them, naming many instances, and every wait sees its
// own instance's end.
func TestTheWaitsOnManyInstancesShareOneRead(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	h.orchestration("Gate", gate)
	h.run()
	reader := &batchedStatuses{Provider: h.provider, reader: h.provider.(cdb.StatusesReader)}
	waiter := NewClient(reader)
	waiter.pollBackoff = pollBackoff{first: time.Millisecond, most: time.Millisecond, longest: time.Millisecond}
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	const waits = 20
	done := map[string]<-chan waitResult{}
	for i := range waits {
		id := fmt.Sprint("gated-", i)
		h.start(id, "Gate", "")
		done[id] = waitInBackground(ctx, waiter, id, time.Minute)
	}
	require.Eventually(t, func() bool { return reader.largest() >= waits/2 }, 20*time.Second, time.Millisecond,
		"a read names many of the instances waited on")
	for id := range done {
		require.NoError(t, h.client.RaiseEvent(h.ctx, id, "go", "open "+id))
	}
	for id, d := range done {
		res := <-d
		require.NoError(t, res.err, id)
		assert.Equal(t, StateCompleted, res.st.State, id)
		assert.Equal(t, "open "+id, res.st.Output, id)
	}
	assert.Equal(t, int64(1), reader.most.Load(), "one read at a time, however many instances are waited on")
}
