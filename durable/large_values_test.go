package durable

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// skewableClock is the wall clock moved ahead by a test.
type skewableClock struct {
	mu    sync.Mutex
	ahead time.Duration
}

func (c *skewableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

func (c *skewableClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead += d
}

// End to end: an orchestration continues as new with an input of 900 KB,
// its ContinueAsNew message waits in the outbox, and that delivery keeps
// failing for longer than 30 s (the provider's clock is moved past it). A
// message enqueued meanwhile must reach the new execution: before, the
// fetch handed it over without the ContinueAsNew message, and the runtime
// consumed it as the finished execution's.
//
// The message is a queue event (EnqueueEvent, DequeueEvent), which waits
// for its reader. An unbuffered external event (RaiseEvent,
// WaitForEventUnbuffered) would not do: it reaches only a subscription
// recorded before it, and it arrives
// here in the new execution's first batch, ahead of the subscription that
// execution's first turn records, so it is rightly not delivered; and the
// clock's jump expires the lock of any turn then running, whose batch the
// next holder takes again with every message that arrived since.
//
// Nothing in a continue-as-new turn of this runtime fills the commit
// batch (the activities it scheduled are cancelled, not sent; a large
// input is written once), so the ContinueAsNew message goes to the outbox
// the way a commit the store refuses as too large sends it there: planned
// again with half the budget each time.
func TestAQueueEventEnqueuedWhileAContinueAsNewWaitsInAnOutboxReachesTheNextExecution(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := &skewableClock{}
	p, err := cdb.NewProvider(context.Background(), cdb.Config{
		Client: acct.Client(), PollInterval: 20 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond,
		OutboxMinAge: 50 * time.Millisecond, Now: clock.Now,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	next := "next:" + strings.Repeat("n", 900*1024)
	tooLarge := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusRequestEntityTooLarge, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && len(r.Body) > len(next)
	}})
	defer tooLarge()
	var refusals atomic.Int32
	refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		// The relay delivers it alone, or in a batch with its outbox's
		// progress (a PATCH of /delivered).
		relayed := r.Operation == "CreateItem" && bytes.Contains(r.Body, []byte(`"relayed":true`)) && !bytes.HasPrefix(r.Body, []byte(`{"id":"op|`)) ||
			r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`/delivered`))
		hit := relayed && bytes.Contains(r.Body, []byte(`"type":"msg"`)) && bytes.Contains(r.Body, []byte("ContinueAsNew"))
		if hit {
			refusals.Add(1)
		}
		return hit
	}})
	defer refuse()

	looking := &lookingProvider{CosmosProvider: p}
	h := newHarness(t, looking)
	h.orchestration("Eternal", func(ctx *OrchestrationContext, input string) (string, error) {
		if input == next {
			return ctx.DequeueEvent("inbox").Await()
		}
		return ctx.ContinueAsNew(next)
	})
	h.run()
	h.start("eternal", "Eternal", "first")
	// The bounds below only keep a broken run from hanging: planning and
	// replanning a turn of a megabyte takes seconds under -race on a
	// loaded machine.
	require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) {
		st, err := h.client.GetStatus(h.ctx, "eternal")
		return err == nil && st.State == StateContinuedAsNew, err
	}), "the first execution continues as new")
	tooLarge()
	require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) { return refusals.Load() > 0, nil }),
		"the ContinueAsNew message waits in the outbox: its delivery is refused")

	clock.advance(31 * time.Second)
	require.NoError(t, h.client.EnqueueEvent(h.ctx, "eternal", "inbox", `"meanwhile"`))
	looking.watch()
	require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) { return looking.looks.Load() >= 2, nil }),
		"the runtime fetches while the delivery keeps failing")
	refuse()
	st, err := h.client.WaitForCompletion(h.ctx, "eternal", time.Minute)
	require.NoError(t, err, "the new execution receives the message enqueued while its start waited in an outbox")
	require.Equal(t, StateCompleted, st.State)
	require.Equal(t, `"meanwhile"`, st.Output)
}

// lookingProvider counts the orchestration fetches that began once watch
// was called and have returned: each of them looked at the queue as it was
// then.
type lookingProvider struct {
	*cdb.CosmosProvider
	watching atomic.Bool
	looks    atomic.Int32
}

func (p *lookingProvider) watch() { p.watching.Store(true) }

func (p *lookingProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	watched := p.watching.Load()
	item, token, attempts, err := p.CosmosProvider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
	if watched {
		p.looks.Add(1)
	}
	return item, token, attempts, err
}
