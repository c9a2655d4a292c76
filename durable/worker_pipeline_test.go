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

// A worker slot runs its next activities while the acks of those before
// are under way, up to Options.WorkerAcksInFlight of them: with one slot,
// two acks in flight and every ack held, the slot runs three activities,
// two acks have begun, and the third waits for a place.
func TestAWorkerSlotRunsTheNextActivitiesWhileTheirAcksAreUnderWay(t *testing.T) {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	p := &heldAcks{Provider: mem, arrived: make(chan string, 3), release: make(chan struct{})}
	h := newHarness(t, p)
	ran := make(chan string, 3)
	h.activity("Echo", func(_ ActivityContext, in string) (string, error) {
		ran <- in
		return in, nil
	})
	h.orchestration("Three", func(ctx *OrchestrationContext, _ string) (string, error) {
		var out string
		for _, r := range ctx.Join(ctx.ScheduleActivity("Echo", "a"), ctx.ScheduleActivity("Echo", "b"), ctx.ScheduleActivity("Echo", "c")) {
			if r.Err != nil {
				return "", r.Err
			}
			out += r.Value
		}
		return out, nil
	})
	h.run(func(o *Options) { o.WorkerConcurrency, o.WorkerAcksInFlight = 1, 2 })
	released := false
	t.Cleanup(func() { // before the runtime's shutdown, which waits for the acks
		if !released {
			close(p.release) // a failed check: let the runtime stop
		}
	})
	h.start("three", "Three", "")

	var held, done []string
	for range 2 {
		held = append(held, receive(t, p.arrived, "an ack"))
	}
	for range 3 {
		done = append(done, receive(t, ran, "an activity, while two acks are held"))
	}
	assert.ElementsMatch(t, []string{"a", "b", "c"}, done, "the slot ran every activity meanwhile")
	assert.ElementsMatch(t, done[:2], held, "the first two activities' acks are the ones under way")
	select {
	case third := <-p.arrived:
		t.Fatalf("a third ack (%s) began while two were under way", third)
	case <-time.After(100 * time.Millisecond):
	}

	close(p.release)
	released = true
	assert.Equal(t, "abc", h.completed("three"))
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

// heldCommits holds every orchestration ack until released, and says the
// instance of each one as it arrives.
type heldCommits struct {
	cdb.Provider
	arrived chan string
	release chan struct{}
	tokens  map[string]string // lock token → instance
	mu      chan struct{}
}

func (p *heldCommits) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	item, token, attempt, err := p.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
	if item != nil {
		p.mu <- struct{}{}
		p.tokens[token] = item.Instance
		<-p.mu
	}
	return item, token, attempt, err
}

func (p *heldCommits) AckOrchestrationItem(ctx context.Context, token string, executionID uint64, history []cdb.Event,
	workerItems, orchestratorItems []cdb.WorkItem, md cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	p.mu <- struct{}{}
	instance := p.tokens[token]
	<-p.mu
	p.arrived <- instance
	<-p.release
	return p.Provider.AckOrchestrationItem(ctx, token, executionID, history, workerItems, orchestratorItems, md, cancelled)
}

// An orchestration dispatcher runs its next turns while the commits of
// those before are under way, up to Options.OrchestrationAcksInFlight of
// them: with one dispatcher, two commits in flight and every commit held,
// three instances' first turns run, two commits have begun, and the third
// waits for a place.
func TestAnOrchestrationDispatcherRunsTheNextTurnsWhileTheirCommitsAreUnderWay(t *testing.T) {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	p := &heldCommits{Provider: mem, arrived: make(chan string, 3), release: make(chan struct{}),
		tokens: map[string]string{}, mu: make(chan struct{}, 1)}
	h := newHarness(t, p)
	ran := make(chan string, 3)
	h.orchestration("Once", func(ctx *OrchestrationContext, in string) (string, error) {
		if !ctx.IsReplaying() {
			ran <- in
		}
		return in, nil
	})
	h.run(func(o *Options) { o.OrchestrationConcurrency, o.OrchestrationAcksInFlight = 1, 2 })
	released := false
	t.Cleanup(func() { // before the runtime's shutdown, which waits for the commits
		if !released {
			close(p.release) // a failed check: let the runtime stop
		}
	})
	for _, id := range []string{"a", "b", "c"} {
		h.start(id, "Once", id)
	}

	var held, done []string
	for range 2 {
		held = append(held, receive(t, p.arrived, "a commit"))
	}
	for range 3 {
		done = append(done, receive(t, ran, "a turn, while two commits are held"))
	}
	assert.ElementsMatch(t, []string{"a", "b", "c"}, done, "the dispatcher ran every turn meanwhile")
	assert.ElementsMatch(t, done[:2], held, "the first two turns' commits are the ones under way")
	select {
	case third := <-p.arrived:
		t.Fatalf("a third commit (%s) began while two were under way", third)
	case <-time.After(100 * time.Millisecond):
	}

	close(p.release)
	released = true
	for _, id := range []string{"a", "b", "c"} {
		assert.Equal(t, id, h.completed(id))
	}
}
