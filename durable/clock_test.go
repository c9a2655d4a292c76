package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// On a machine whose clock is years off the account's, the runtime reads
// time through the provider (its default clock is the provider's
// ServiceTime): a timer of ten minutes is due ten minutes from now on the
// account's clock, and fires then, as it would on every other process.
func TestATimerOnAWrongMachineClockIsDueOnTheServicesTime(t *testing.T) {
	account := newManualClock() // the account's time; this machine's is time.Now, years ahead
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: account.Now})
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport()})
	require.NoError(t, err)
	cp, err := cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cp.Close() })

	h := newHarness(t, cp)
	h.orchestration("Sleeper", func(ctx *OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(10 * time.Minute).Await(); err != nil {
			return "", err
		}
		return "woke", nil
	})
	h.run()
	h.start("sleeper", "Sleeper", "")
	history := h.waitForHistory("sleeper", hasEvent[cdb.TimerCreated])
	var fireAt time.Time
	for _, ev := range history {
		if tc, ok := ev.Kind.(cdb.TimerCreated); ok {
			fireAt = time.UnixMilli(int64(tc.FireAtMs))
		}
	}
	due := account.Now().Add(10 * time.Minute)
	assert.WithinDuration(t, due, fireAt, time.Second, "due ten minutes on, on the account's clock")

	account.Advance(10*time.Minute + time.Second)
	assert.Equal(t, "woke", h.completed("sleeper"))
}
