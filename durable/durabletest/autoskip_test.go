package durabletest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/durable/durabletest"
)

// skipContext bounds a test that, without the skipping, would wait
// forever for a clock nobody moves.
func skipContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startRuntime runs a runtime of registry on provider and the clock, shut
// down when the test ends.
func startRuntime(t *testing.T, provider cdb.Provider, clock *durabletest.Clock, registry *durable.Registry, opts durable.Options) *durable.Runtime {
	t.Helper()
	opts.MinPollInterval, opts.LongPollTimeout = 10*time.Millisecond, 100*time.Millisecond
	rt, err := durable.Start(context.Background(), provider, registry, clock.Options(opts))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Shutdown(ctx))
	})
	return rt
}

// register is a registry with one orchestration, named name.
func register(t *testing.T, name string, fn durable.OrchestrationFunc) *durable.Registry {
	t.Helper()
	registry := durable.NewRegistry()
	require.NoError(t, registry.RegisterOrchestration(name, fn))
	return registry
}

// completes waits for instance to complete and returns its output.
func completes(ctx context.Context, t *testing.T, client *durable.Client, instance string) string {
	t.Helper()
	st, err := client.WaitForCompletion(ctx, instance, time.Minute)
	require.NoError(t, err)
	require.Equal(t, durable.StateCompleted, st.State, "%s: %s", instance, st.Output)
	return st.Output
}

// A day-long timer fires with no Advance, and the clock lands exactly on
// it: the skip goes to the timer's due time, not past it.
func TestAutoSkipFiresADayLongTimer(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	provider := durabletest.NewProvider(t, clock)
	client := startRuntime(t, provider, clock, register(t, "Sleeper", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(24 * time.Hour).Await(); err != nil {
			return "", err
		}
		return "woke", nil
	}), durable.Options{}).Client()
	clock.AutoSkip(t, provider)

	require.NoError(t, client.StartOrchestration(ctx, "sleeper", "Sleeper", ""))
	assert.Equal(t, "woke", completes(ctx, t, client, "sleeper"))
	assert.Equal(t, 24*time.Hour, clock.Now().Sub(start), "the clock stops at the timer")
}

// A retry policy's backoffs of hours pass with no Advance: the activity
// fails twice, waits two hours and then four, and succeeds on its third
// attempt, six hours on.
func TestAutoSkipRunsARetryPolicyWithBackoffsOfHours(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	provider := durabletest.NewProvider(t, clock)
	registry := register(t, "Charge", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Card", "", durable.WithRetry(durable.RetryPolicy{
			MaxAttempts: 3, FirstInterval: 2 * time.Hour, BackoffCoefficient: 2,
		})).Await()
	})
	var attempts atomic.Int32
	require.NoError(t, registry.RegisterActivity("Card", func(durable.ActivityContext, string) (string, error) {
		if attempts.Add(1) < 3 {
			return "", errors.New("declined")
		}
		return "charged", nil
	}))
	client := startRuntime(t, provider, clock, registry, durable.Options{}).Client()
	clock.AutoSkip(t, provider)

	require.NoError(t, client.StartOrchestration(ctx, "charge", "Charge", ""))
	assert.Equal(t, "charged", completes(ctx, t, client, "charge"))
	assert.EqualValues(t, 3, attempts.Load())
	assert.Equal(t, 6*time.Hour, clock.Now().Sub(start), "two backoffs, of two hours and four")
}

// slowActivity registers an activity that runs 200 ms of real time and
// returns how far the test clock moved meanwhile; runs counts its runs.
func slowActivity(t *testing.T, registry *durable.Registry, clock *durabletest.Clock, runs *atomic.Int32) {
	require.NoError(t, registry.RegisterActivity("Slow", func(durable.ActivityContext, string) (string, error) {
		runs.Add(1)
		began := clock.Now()
		time.Sleep(200 * time.Millisecond)
		return clock.Now().Sub(began).String(), nil
	}))
}

// raceActivityAndTimer is an orchestration that schedules an hour's timer
// and the Slow activity together, and returns the activity's output once
// both are done.
func raceActivityAndTimer(ctx *durable.OrchestrationContext, _ string) (string, error) {
	timer := ctx.ScheduleTimer(time.Hour)
	moved, err := ctx.ScheduleActivity("Slow", "").Await()
	if err != nil {
		return "", err
	}
	if _, err := timer.Await(); err != nil {
		return "", err
	}
	return moved, nil
}

// An activity that takes real time holds its lock, so the clock stands
// still while it runs though an hour's timer is pending: it runs once,
// sees no time pass, and the timer fires after it.
func TestAutoSkipWaitsForAnActivityRunningInRealTime(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	provider := durabletest.NewProvider(t, clock)
	registry := register(t, "Race", raceActivityAndTimer)
	var runs atomic.Int32
	slowActivity(t, registry, clock, &runs)
	client := startRuntime(t, provider, clock, registry, durable.Options{}).Client()
	clock.AutoSkip(t, provider)

	require.NoError(t, client.StartOrchestration(ctx, "race", "Race", ""))
	assert.Equal(t, "0s", completes(ctx, t, client, "race"), "the clock stood still while the activity ran")
	assert.EqualValues(t, 1, runs.Load(), "no skip expired the activity's lock")
	assert.Equal(t, time.Hour, clock.Now().Sub(start))
}

// Two runtimes on one account, one running the turns and the other the
// activities: the skipper reads the account through the first one's
// provider and still waits for the activity the second one runs, then
// skips each instance's timer in turn.
func TestAutoSkipWatchesEveryRuntimeOnTheAccount(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	account := durabletest.NewAccount(clock)
	turns := durabletest.NewProviderOn(t, clock, account)
	workers := durabletest.NewProviderOn(t, clock, account)

	client := startRuntime(t, turns, clock, register(t, "Race", raceActivityAndTimer),
		durable.Options{WorkerTagFilter: cdb.NoneFilter()}).Client()
	activities := durable.NewRegistry()
	var runs atomic.Int32
	slowActivity(t, activities, clock, &runs)
	startRuntime(t, workers, clock, activities, durable.Options{WorkerOnly: true})
	clock.AutoSkip(t, turns)

	require.NoError(t, client.StartOrchestration(ctx, "race", "Race", ""))
	assert.Equal(t, "0s", completes(ctx, t, client, "race"), "the clock stood still while the other runtime ran the activity")
	assert.EqualValues(t, 1, runs.Load())
	assert.Equal(t, time.Hour, clock.Now().Sub(start))
}

// An instance waiting for an event with no timer leaves nothing to skip
// to: the skipper passes the hour's timer before the wait and then leaves
// the clock where it is until the test raises the event.
func TestAutoSkipLeavesTheClockAloneWhileAnInstanceWaitsForAnEvent(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	provider := durabletest.NewProvider(t, clock)
	client := startRuntime(t, provider, clock, register(t, "Approval", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(time.Hour).Await(); err != nil {
			return "", err
		}
		return ctx.WaitForEvent("approve").Await()
	}), durable.Options{}).Client()
	skipper := clock.AutoSkip(t, provider)

	require.NoError(t, client.StartOrchestration(ctx, "approval", "Approval", ""))
	require.NoError(t, skipper.WaitIdle(ctx))
	assert.Equal(t, time.Hour, clock.Now().Sub(start), "the timer was skipped, and nothing after it")
	st, err := client.GetStatus(ctx, "approval")
	require.NoError(t, err)
	assert.Equal(t, durable.StateRunning, st.State, "the instance waits for its event")

	require.NoError(t, client.RaiseEvent(ctx, "approval", "approve", "yes"))
	assert.Equal(t, "yes", completes(ctx, t, client, "approval"))
	assert.Equal(t, time.Hour, clock.Now().Sub(start))
}

// An event the test raises from AfterFunc two hours on comes before a
// day's deadline: the skipper stops at the callback's time, not at the
// later timer it also sees.
func TestAutoSkipStopsAtAnAfterFuncBeforeALaterTimer(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	provider := durabletest.NewProvider(t, clock)
	client := startRuntime(t, provider, clock, register(t, "Invoice", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		issued, err := ctx.UtcNow()
		if err != nil {
			return "", err
		}
		deadline := ctx.ScheduleTimer(24 * time.Hour)
		paid := ctx.WaitForEvent("paid")
		if ctx.Select(deadline, paid) == 0 {
			return "unpaid", nil
		}
		now, err := ctx.UtcNow()
		if err != nil {
			return "", err
		}
		return "paid after " + now.Sub(issued).String(), nil
	}), durable.Options{}).Client()
	skipper := clock.AutoSkip(t, provider)
	skipper.AfterFunc(2*time.Hour, func() {
		assert.NoError(t, client.RaiseEvent(ctx, "invoice", "paid", ""))
	})

	require.NoError(t, client.StartOrchestration(ctx, "invoice", "Invoice", ""))
	assert.Equal(t, "paid after 2h0m0s", completes(ctx, t, client, "invoice"))
}

// Stop ends the skipping: a timer set after it waits for an Advance, and
// WaitIdle says the skipper has stopped.
func TestAutoSkipStops(t *testing.T) {
	ctx := skipContext(t)
	clock := durabletest.NewClock()
	start := clock.Now()
	provider := durabletest.NewProvider(t, clock)
	client := startSleeper(t, provider, clock)
	skipper := clock.AutoSkip(t, provider)
	skipper.Stop()
	assert.Error(t, skipper.WaitIdle(ctx), "a stopped skipper is never idle")

	require.NoError(t, client.StartOrchestration(ctx, "sleeper", "Sleeper", ""))
	waitForTimerCreated(t, client, "sleeper")
	time.Sleep(200 * time.Millisecond) // a skipper still running would have skipped by now
	assert.Equal(t, start, clock.Now(), "the clock stays where Stop left it")

	clock.Advance(time.Hour)
	assert.Equal(t, "woke", completes(ctx, t, client, "sleeper"))
}
