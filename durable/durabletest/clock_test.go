package durabletest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/durable/durabletest"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// An hour-long timer fires once the test clock is advanced by an hour, on
// the Cosmos DB provider over the in-memory account and on the reference
// provider; until then it has not fired.
func TestAnHourTimerFiresAfterAdvance(t *testing.T) {
	providers := []struct {
		name string
		new  func(t *testing.T, clock *durabletest.Clock) cdb.Provider
	}{
		{"cosmos", func(t *testing.T, clock *durabletest.Clock) cdb.Provider { return durabletest.NewProvider(t, clock) }},
		{"memory", func(t *testing.T, clock *durabletest.Clock) cdb.Provider {
			p := memprovider.New(memprovider.Options{Now: clock.Now})
			t.Cleanup(func() { _ = p.Close() })
			return p
		}},
	}
	for _, pc := range providers {
		t.Run(pc.name, func(t *testing.T) {
			clock := durabletest.NewClock()
			provider := pc.new(t, clock)
			client := startSleeper(t, provider, clock)
			ctx := context.Background()
			require.NoError(t, client.StartOrchestration(ctx, "sleeper", "Sleeper", ""))
			waitForTimerCreated(t, client, "sleeper")

			st, err := client.GetStatus(ctx, "sleeper")
			require.NoError(t, err)
			assert.Equal(t, durable.StateRunning, st.State, "the timer has not fired before the clock moves")

			clock.Advance(time.Hour)
			st, err = client.WaitForCompletion(ctx, "sleeper", time.Minute)
			require.NoError(t, err)
			assert.Equal(t, durable.StateCompleted, st.State)
			assert.Equal(t, "woke", st.Output)
		})
	}
}

// startSleeper runs a runtime on provider and the clock with one
// orchestration, Sleeper, that waits an hour; it must shut down cleanly
// when the test ends.
func startSleeper(t *testing.T, provider cdb.Provider, clock *durabletest.Clock) *durable.Client {
	rt := startSleeperRuntime(t, provider, clock)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Shutdown(ctx))
	})
	return rt.Client()
}

// startSleeperRuntime is startSleeper's runtime, which the test stops.
func startSleeperRuntime(t *testing.T, provider cdb.Provider, clock *durabletest.Clock) *durable.Runtime {
	registry := durable.NewRegistry()
	require.NoError(t, registry.RegisterOrchestration("Sleeper", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(time.Hour).Await(); err != nil {
			return "", err
		}
		return "woke", nil
	}))
	rt, err := durable.Start(context.Background(), provider, registry, clock.Options(durable.Options{
		MinPollInterval: 10 * time.Millisecond, LongPollTimeout: 100 * time.Millisecond,
	}))
	require.NoError(t, err)
	return rt
}

// waitForTimerCreated waits until the instance's history has its timer.
func waitForTimerCreated(t *testing.T, client *durable.Client, instance string) {
	require.Eventually(t, func() bool {
		history, err := client.ReadHistory(context.Background(), instance)
		if err != nil {
			return false
		}
		for _, ev := range history {
			if _, ok := ev.Kind.(cdb.TimerCreated); ok {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
}
