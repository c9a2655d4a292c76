package durabletest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/durable/durabletest"
)

// Two processes on one account: an instance the first started and took
// to its timer is finished by the second after the first crashed, once
// the clock passes the timer.
func TestAProcessOnTheSameAccountFinishesWhatACrashedOneStarted(t *testing.T) {
	ctx := context.Background()
	clock := durabletest.NewClock()
	account := durabletest.NewAccount(clock)

	crashed := startSleeperRuntime(t, durabletest.NewProviderOn(t, clock, account), clock)
	first := crashed.Client()
	require.NoError(t, first.StartOrchestration(ctx, "sleeper", "Sleeper", ""))
	waitForTimerCreated(t, first, "sleeper")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_ = crashed.Shutdown(cancelled) // a crash: the work in flight is abandoned

	second := startSleeper(t, durabletest.NewProviderOn(t, clock, account), clock)
	clock.Advance(time.Hour)
	st, err := second.WaitForCompletion(ctx, "sleeper", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, durable.StateCompleted, st.State)
	assert.Equal(t, "woke", st.Output)
}
