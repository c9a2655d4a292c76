package durable

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
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

// Issue 21, defect 2, end to end: an orchestration continues as new with an
// input of 900 KB in a turn that also schedules an activity of 1.2 MB, so
// its ContinueAsNew message waits in the outbox, and that delivery keeps
// failing for longer than 30 s (the provider's clock is moved past it).
// An event raised meanwhile must reach the new execution: before, the
// fetch handed it over without the ContinueAsNew message, and the runtime
// consumed it as the finished execution's.
func TestAnEventRaisedWhileAContinueAsNewWaitsInAnOutboxReachesTheNextExecution(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := &skewableClock{}
	p, err := cdb.NewProvider(context.Background(), cdb.Config{
		Client: acct.Client(), PollInterval: 20 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond,
		OutboxMinAge: 50 * time.Millisecond, Now: clock.Now,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && bytes.Contains(r.Body, []byte(`"relayed":true`)) &&
			bytes.Contains(r.Body, []byte(`"type":"msg"`)) && bytes.Contains(r.Body, []byte("ContinueAsNew")) && !bytes.HasPrefix(r.Body, []byte(`{"id":"op|`))
	}})
	defer refuse()

	h := newHarness(t, p)
	h.activity("Big", func(_ ActivityContext, input string) (string, error) { return "", nil })
	next := "next:" + strings.Repeat("n", 900*1024)
	h.orchestration("Eternal", func(ctx *OrchestrationContext, input string) (string, error) {
		if input == next {
			return ctx.WaitForEvent("go").Await()
		}
		ctx.ScheduleActivity("Big", strings.Repeat("a", 1200*1024))
		return ctx.ContinueAsNew(next)
	})
	h.run()
	h.start("eternal", "Eternal", "first")
	require.NoError(t, poll(h.ctx, 30*time.Second, func() (bool, error) {
		st, err := h.client.GetStatus(h.ctx, "eternal")
		return err == nil && st.State == StateContinuedAsNew, err
	}), "the first execution continues as new")

	clock.advance(31 * time.Second)
	require.NoError(t, h.client.RaiseEvent(h.ctx, "eternal", "go", `"meanwhile"`))
	time.Sleep(time.Second) // the runtime fetches while the delivery keeps failing
	refuse()
	st, err := h.client.WaitForCompletion(h.ctx, "eternal", 20*time.Second)
	require.NoError(t, err, "the new execution receives the event raised while its start waited in an outbox")
	require.Equal(t, StateCompleted, st.State)
	require.Equal(t, `"meanwhile"`, st.Output)
}
