package durable

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// An abandon's delay hides only the batch it abandons (duroxide 0.1.32):
// what the runtime hands back keeps its place only where the runtime keeps
// the lock. These tests pin the two places that matter for a sender.

// twoInOrder takes two events of queue "q" and an activity between them,
// and returns them in the order it got them.
func twoInOrder(ctx *OrchestrationContext, _ string) (string, error) {
	first, err := ctx.DequeueEvent("q").Await()
	if err != nil {
		return "", err
	}
	if _, err := ctx.ScheduleActivity("NoteFirstEvent", first).Await(); err != nil {
		return "", err
	}
	second, err := ctx.DequeueEvent("q").Await()
	if err != nil {
		return "", err
	}
	return first + "," + second, nil
}

// A turn whose commit the store refuses is tried again after a backoff; an
// event raised during the backoff must not be taken before the event of the
// refused turn. The runtime waits the backoff out holding the lock, then
// hands the batch back without a delay (a delayed abandon would let the
// later event overtake it).
func TestARefusedCommitKeepsTheSendersOrder(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	refused := make(chan struct{}, 1)
	acct.InjectFault(cdb.FakeFault{
		Match: func(r cdb.FakeRequest) bool {
			if r.Operation != "Batch" || !bytes.Contains(r.Body, []byte("NoteFirstEvent")) {
				return false
			}
			select {
			case refused <- struct{}{}:
			default:
			}
			return true
		},
		Status: 400, Times: 1,
	})
	h.activity("NoteFirstEvent", func(_ ActivityContext, in string) (string, error) { return in, nil })
	h.orchestration("TwoInOrder", twoInOrder)
	h.run(func(o *Options) { o.UnregisteredBackoffBase = 500 * time.Millisecond })
	h.start("refused-order", "TwoInOrder", "")
	require.NoError(t, h.client.EnqueueEvent(h.ctx, "refused-order", "q", "first"))
	select {
	case <-refused:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn that takes the first event was never committed")
	}
	require.NoError(t, h.client.EnqueueEvent(h.ctx, "refused-order", "q", "second"))
	assert.Equal(t, "first,second", h.completed("refused-order"), "the event of the refused turn goes first")
}

// An event raised while its instance's start is hidden by an abandon's
// delay (a node without the orchestration backed off from it) is handed
// over alone, and the runtime hands it back for the start rather than
// consume it as an instance's that never started.
func TestAnEventBeforeAHiddenStartWaitsForIt(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	without := newCosmosHarness(t, acct)
	backedOff := newSignalOnMessage(t, "orchestration not registered; abandoning with backoff")
	without.orchestration("SomethingElse", func(*OrchestrationContext, string) (string, error) { return "", nil })
	without.run(func(o *Options) {
		o.UnregisteredBackoffBase = 2 * time.Second
		o.Logger = slog.New(backedOff)
	})
	without.start("hidden-start", "TakeOne", "")
	select {
	case <-backedOff.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the node without the orchestration never backed off from its start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, without.rt.Shutdown(ctx))

	with := newCosmosHarness(t, acct)
	with.orchestration("TakeOne", func(ctx *OrchestrationContext, _ string) (string, error) {
		event := ctx.DequeueEvent("q")
		if ctx.Select(event, ctx.ScheduleTimer(10*time.Second)) == 1 {
			return "", fmt.Errorf("the event was lost")
		}
		return event.Await()
	})
	with.run(func(o *Options) { o.UnregisteredBackoffBase = 100 * time.Millisecond })
	require.NoError(t, with.client.EnqueueEvent(with.ctx, "hidden-start", "q", "early"))
	assert.Equal(t, "early", with.completed("hidden-start"))
}

// signalOnMessage closes seen the first time a record with message is
// logged, and logs like testLogHandler.
type signalOnMessage struct {
	testLogHandler
	message string
	once    *sync.Once
	seen    chan struct{}
}

func newSignalOnMessage(t *testing.T, message string) *signalOnMessage {
	return &signalOnMessage{testLogHandler: testLogHandler{t: t}, message: message, once: &sync.Once{}, seen: make(chan struct{})}
}

func (h *signalOnMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.message {
		h.once.Do(func() { close(h.seen) })
	}
	return h.testLogHandler.Handle(ctx, r)
}

func (h *signalOnMessage) WithAttrs(attrs []slog.Attr) slog.Handler {
	with := *h
	with.testLogHandler = *h.testLogHandler.WithAttrs(attrs).(*testLogHandler)
	return &with
}
