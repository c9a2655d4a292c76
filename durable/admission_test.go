package durable

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// The continue-as-new admission window (admission.go), on the in-memory
// reference provider: it hands out a batch of an execution that continued
// as new without the successor's start whenever that start is not visible
// yet, which is the window the runtime must bridge.

func TestAContinueAsNewBeatsADuplicateStartInEitherOrder(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := readHistory([]cdb.Event{
		newEvent("i", 1, 1, nil, 0, cdb.OrchestrationStarted{Name: "Loop", Version: "1.0.0"}),
		newEvent("i", 1, 2, nil, 0, cdb.OrchestrationContinuedAsNew{Input: "next"}),
	})
	start := cdb.StartOrchestrationMessage{Instance: "i", Orchestration: "Other", Input: "duplicate", ExecutionID: 1}
	can := cdb.ContinueAsNewMessage{Instance: "i", Orchestration: "Loop", Input: "next"}
	queued := cdb.QueueEventMessage{Instance: "i", Name: "q", Data: "late"}
	for name, messages := range map[string][]cdb.WorkItem{
		"start first": {start, can, queued},
		"start last":  {can, queued, start},
	} {
		t.Run(name, func(t *testing.T) {
			b := readBatch("i", messages, h, log)
			assert.True(t, b.continueAsNew, "the successor starts")
			assert.Equal(t, can, b.start)
			assert.Equal(t, "Loop", b.name)
			assert.Equal(t, "next", b.input)
			assert.Equal(t, []cdb.WorkItem{queued}, b.completions, "the duplicate start is no completion")
		})
	}
}

func TestWindowInputsAreTheInstancesNotTheFinishedExecutions(t *testing.T) {
	const finished = 1
	for _, c := range []struct {
		name string
		msg  cdb.WorkItem
		want bool
	}{
		{"queue message", cdb.QueueEventMessage{Instance: "i", Name: "q"}, true},
		{"event", cdb.ExternalRaisedMessage{Instance: "i", Name: "e"}, true},
		{"cancellation", cdb.CancelInstanceMessage{Instance: "i"}, true},
		{"duplicate start", cdb.StartOrchestrationMessage{Instance: "i", Orchestration: "O", ExecutionID: 1}, true},
		{"activity of the finished execution", cdb.ActivityCompletedMessage{Instance: "i", ExecutionID: finished, ID: 2}, false},
		{"activity of the successor", cdb.ActivityCompletedMessage{Instance: "i", ExecutionID: finished + 1, ID: 2}, true},
		{"failed activity of the successor", cdb.ActivityFailedMessage{Instance: "i", ExecutionID: finished + 1, ID: 2}, true},
		{"timer of the finished execution", cdb.TimerFiredMessage{Instance: "i", ExecutionID: finished, ID: 3}, false},
		{"timer of the successor", cdb.TimerFiredMessage{Instance: "i", ExecutionID: finished + 1, ID: 3}, true},
		{"child of the finished execution", cdb.SubOrchestrationCompletedMessage{ParentInstance: "i", ParentExecutionID: finished, ParentID: 4}, false},
		{"child of the successor", cdb.SubOrchestrationFailedMessage{ParentInstance: "i", ParentExecutionID: finished + 1, ParentID: 4}, true},
	} {
		assert.Equal(t, c.want, holdsInstanceInputs([]cdb.WorkItem{c.msg}, finished), c.name)
	}
}

// abandonCall is one AbandonOrchestrationItem a runtime made.
type abandonCall struct {
	delay         time.Duration
	ignoreAttempt bool
}

// abandonRecorder records a provider's orchestration abandons.
type abandonRecorder struct {
	cdb.Provider
	mu    sync.Mutex
	calls []abandonCall
}

func (p *abandonRecorder) AbandonOrchestrationItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	p.mu.Lock()
	p.calls = append(p.calls, abandonCall{delay: delay, ignoreAttempt: ignoreAttempt})
	p.mu.Unlock()
	return p.Provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt)
}

func (p *abandonRecorder) abandons() []abandonCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]abandonCall(nil), p.calls...)
}

// continuedWithInput makes instance an execution that continued as new
// (orchestration Loop), with a queue message sent in its last turn, as the
// provider validation suite seeds it; the successor's start is enqueued
// after delay, or never when delay is negative.
func continuedWithInput(t *testing.T, p cdb.Provider, instance string, delay time.Duration) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: instance, Orchestration: "Loop",
		Version: ptr("1.0.0"), ExecutionID: 1}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{
		newEvent(instance, 1, 1, nil, 0, cdb.OrchestrationStarted{Name: "Loop", Version: "1.0.0"}),
		newEvent(instance, 1, 2, nil, 0, cdb.OrchestrationContinuedAsNew{Input: "next"}),
	}, nil, []cdb.WorkItem{cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "late"}},
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusContinuedAsNew), OrchestrationName: ptr("Loop"), OrchestrationVersion: ptr("1.0.0")}, nil))
	if delay >= 0 {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ContinueAsNewMessage{Instance: instance, Orchestration: "Loop", Input: "next",
			Version: ptr("1.0.0"), CarryForwardEvents: []cdb.CarryForwardEvent{{Name: "q", Data: "carried"}}}, delay))
	}
}

// dequeueTwice reads two queue messages in the successor.
func dequeueTwice(ctx *OrchestrationContext, _ string) (string, error) {
	first, err := ctx.DequeueEvent("q").Await()
	if err != nil {
		return "", err
	}
	second, err := ctx.DequeueEvent("q").Await()
	return first + "," + second, err
}

// TestInputsWaitForTheSuccessorsStart: a batch of an execution that
// continued as new, without the successor's start, is given back with the
// unregistered-handler backoff (doubling) and its attempt undone, and its
// input reaches the successor after what the successor carries.
func TestInputsWaitForTheSuccessorsStart(t *testing.T) {
	mem := memprovider.New(memprovider.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	p := &abandonRecorder{Provider: mem}
	continuedWithInput(t, p, "window", 1500*time.Millisecond)
	h := newHarness(t, p)
	h.orchestration("Loop", dequeueTwice)
	h.run(func(o *Options) {
		o.UnregisteredBackoffBase, o.UnregisteredBackoffMax = 100*time.Millisecond, 400*time.Millisecond
	})
	assert.Equal(t, "carried,late", h.completed("window"))
	calls := p.abandons()
	require.GreaterOrEqual(t, len(calls), 3, "the input waited through several holds: %v", calls)
	for i, c := range calls[:3] {
		assert.Equal(t, abandonCall{delay: []time.Duration{100, 200, 400}[i] * time.Millisecond, ignoreAttempt: true}, c, "hold %d", i+1)
	}
	for _, c := range calls[3:] {
		assert.Equal(t, abandonCall{delay: 400 * time.Millisecond, ignoreAttempt: true}, c, "the backoff stops at its maximum")
	}
	old, err := p.ReadWithExecution(h.ctx, "window", 1)
	require.NoError(t, err)
	assert.Len(t, old, 2, "the finished execution is left as it was")
}

// TestHoldsCountAttemptsOnceMaxAttemptsAreSpent: when the successor's start
// never comes, the holds undo the attempt MaxAttempts times and count it
// after that, so the poison path ends the instance instead of holding its
// inputs for ever.
func TestHoldsCountAttemptsOnceMaxAttemptsAreSpent(t *testing.T) {
	mem := memprovider.New(memprovider.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	p := &abandonRecorder{Provider: mem}
	continuedWithInput(t, p, "lost-start", -1)
	h := newHarness(t, p)
	h.orchestration("Loop", dequeueTwice)
	h.run(func(o *Options) {
		o.MaxAttempts = 2
		o.UnregisteredBackoffBase, o.UnregisteredBackoffMax = 10*time.Millisecond, 10*time.Millisecond
	})
	st := h.wait("lost-start")
	require.Equal(t, StateFailed, st.State)
	require.IsType(t, cdb.PoisonError{}, st.Error, "failed as poison")
	var ignored []bool
	for _, c := range p.abandons() {
		ignored = append(ignored, c.ignoreAttempt)
	}
	assert.Equal(t, []bool{true, true, false, false}, ignored,
		"two holds undo the attempt, two count it, and the third fetch is poison")
}
