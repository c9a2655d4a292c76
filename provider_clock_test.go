package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The processes here share the account's clock (a testClock that stands
// still unless a test moves it). A process whose machine clock is off
// signs and reads time through its client, which learns the service's time
// from the account's answers to within the Date header's second: so its
// writes are visible to the others within a second, wherever its clock is.

// wrongClockProcess is a provider whose machine clock, its client's as
// well as its own (as on a real host), is skew off the account's.
func wrongClockProcess(t *testing.T, acct *cdb.FakeAccount, clock *testClock, skew time.Duration) *cdb.CosmosProvider {
	t.Helper()
	machine := func() time.Time { return clock.Now().Add(skew) }
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Now: machine})
	require.NoError(t, err)
	p, err := cdb.NewProvider(rulesContext(t), cdb.Config{Client: client, ShortPolling: true, Now: machine})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// A process whose clock is ahead runs an activity and raises an event: a
// healthy process sees the completion and the event within the second the
// service's Date tells time to, not when the wrong clock says (found by the
// simulation's BadClock: the instances waiting for them waited that long).
func TestAProcessWhoseClockIsAheadWritesWhatOthersSeeAtOnce(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := rulesContext(t)
			clock := newTestClock()
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
			healthy := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
			ahead := wrongClockProcess(t, acct, clock, skew)
			providertest.CreateInstance(ctx, t, healthy, "waiter")
			require.NoError(t, healthy.EnqueueForOrchestrator(ctx, pokeItem("waiter"), 0))
			item, token, _, err := healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item)
			work := cdb.ActivityExecuteMessage{Instance: "waiter", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}
			require.NoError(t, healthy.AckOrchestrationItem(ctx, token, 1, nil, []cdb.WorkItem{work}, nil, cdb.ExecutionMetadata{}, nil))

			clock.Advance(time.Second) // the Date header's resolution
			got, wtoken, _, err := ahead.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
			require.NoError(t, err)
			require.NotNil(t, got, "the process ahead takes the activity")
			require.NoError(t, ahead.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: "waiter", ExecutionID: 1, ID: 2, Result: "done"}))
			require.NoError(t, ahead.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "waiter", Name: "e", Data: "raised"}, 0))

			clock.Advance(time.Second)
			item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item, "the completion and the event, visible now")
			assert.Equal(t, []string{"ActivityCompleted", "ExternalRaised"}, messageKinds(item))
		})
	}
}

// A delayed message (a timer as the provider sees it) enqueued through a
// process whose clock is off becomes visible to a healthy process when its
// delay has passed on the service's clock: not early (a clock behind), not
// late (a clock ahead).
func TestADelayEnqueuedThroughAWrongClockEndsOnTheServicesTime(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, time.Hour, -10 * time.Minute, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := rulesContext(t)
			clock := newTestClock()
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
			healthy := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
			wrong := wrongClockProcess(t, acct, clock, skew)
			providertest.CreateInstance(ctx, t, healthy, "sleeper")

			require.NoError(t, wrong.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "sleeper", Name: "timer", Data: "due"}, 10*time.Minute))
			item, _, _, err := healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.Nil(t, item, "not due for ten minutes")
			clock.Advance(10*time.Minute - 2*time.Second) // less the Date header's second and then some
			item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.Nil(t, item, "not due yet")
			clock.Advance(3 * time.Second)
			assert.Equal(t, []string{"due"}, consume(ctx, t, healthy, "sleeper"), "due")
		})
	}
}

// A lock taken by a process whose clock is behind holds for its timeout on
// the service's clock: a healthy process does not take the instance over
// while the holder still works on it, and does once the lock expired.
func TestALockTakenThroughAClockBehindHoldsForItsTimeout(t *testing.T) {
	for _, skew := range []time.Duration{-10 * time.Minute, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := rulesContext(t)
			clock := newTestClock()
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
			healthy := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
			behind := wrongClockProcess(t, acct, clock, skew)
			providertest.CreateInstance(ctx, t, healthy, "held")
			require.NoError(t, healthy.EnqueueForOrchestrator(ctx, pokeItem("held"), 0))
			clock.Advance(time.Second)

			item, _, _, err := behind.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item, "the process behind locks the instance for a minute")
			item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.Nil(t, item, "locked")
			clock.Advance(time.Minute - 2*time.Second)
			item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.Nil(t, item, "still locked")
			clock.Advance(3 * time.Second)
			item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item, "the lock expired")
			assert.Equal(t, "held", item.Instance)
		})
	}
}

// atFraction sets clock to ms milliseconds into its current second: where
// the service's Date header, truncated to the second, leaves a corrected
// clock's estimate furthest off.
func atFraction(clock *testClock, ms int) {
	now := clock.Now()
	clock.Advance(now.Truncate(time.Second).Add(time.Duration(ms)*time.Millisecond).Sub(now) + time.Second)
}

// A corrected clock reads the service's time only to within the Date
// header's second: a process whose estimate is behind took locks shorter
// than their timeout by the service's clock, and another process could
// take its work while it still ran (the soak's one-holder, a claim 168 ms
// long for a 422 ms lock). A lock runs from the latest the service's time
// may be, so it lasts its timeout however far the estimate is off.
func TestALockTakenThroughACorrectedClockLastsItsTimeoutByTheServicesClock(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	atFraction(clock, 900) // the estimate is 400 ms behind
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	healthy := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	behind := wrongClockProcess(t, acct, clock, -10*time.Minute)
	require.NoError(t, healthy.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "short", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	providertest.CreateInstance(ctx, t, healthy, "short-orch")
	require.NoError(t, healthy.EnqueueForOrchestrator(ctx, pokeItem("short-orch"), 0))
	clock.Advance(time.Second) // visible to the process behind; still 900 ms into a second

	const timeout = 2 * time.Second
	work, _, _, err := behind.FetchWorkItem(ctx, timeout, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, work)
	item, _, _, err := behind.FetchOrchestrationItem(ctx, timeout, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	atLeast := clock.Now().Add(timeout).UnixMilli()
	items := workDocs(t, healthy, "short")
	require.Len(t, items, 1)
	assert.GreaterOrEqual(t, int64(items[0]["lockedUntil"].(float64)), atLeast, "the work claim lasts its timeout by the service's clock")
	assert.GreaterOrEqual(t, int64(instanceDocOf(t, healthy, "short-orch")["lockedUntil"].(float64)), atLeast, "and so does the instance lock")
}

// The other side: a process whose corrected clock is ahead judges another
// process's lock expired by the earliest the service's time may be, so it
// does not take the work while that lock still runs by the service's
// clock.
func TestAProcessWhoseCorrectedClockIsAheadDoesNotTakeALiveLock(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	atFraction(clock, 100) // the estimate is 400 ms ahead
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	healthy := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	ahead := wrongClockProcess(t, acct, clock, 10*time.Minute)
	require.NoError(t, healthy.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "live", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	work, _, _, err := healthy.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, work)

	clock.Advance(800 * time.Millisecond) // 200 ms before the lock ends
	work, _, _, err = ahead.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.Nil(t, work, "the lock still runs by the service's clock")
	clock.Advance(time.Second)
	work, _, _, err = ahead.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.NotNil(t, work, "and is taken once it ended")
}

// A look that finds the queue empty keeps it unqueried for a poll interval
// of the provider's clock or of the machine's, whichever ends first: on a
// clock that stands still (a test's, between its steps) work another
// process writes after that look is still found a poll interval later,
// rather than never.
func TestAnIdleQueueIsLookedAtAgainWhileTheProvidersClockStandsStill(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: 10 * time.Millisecond, Now: clock.Now})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now}) // nothing it writes is announced to p

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the queue is empty: the look closes it for a poll interval")
	require.NoError(t, other.EnqueueForOrchestrator(ctx, providertest.StartItem("written-elsewhere"), 0))

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	item, _, _, err = p.FetchOrchestrationItem(waitCtx, time.Minute, time.Hour, nil)
	require.NoError(t, err, "the clock stands still: only the machine's time ends the idle window")
	require.NotNil(t, item)
	assert.Equal(t, "written-elsewhere", item.Instance)
}

// An instance a look found locked by another process is left out of the
// next looks until that lock would expire, on the provider's clock or, for
// as long, on the machine's: on a clock that stands still, the instance is
// taken once the other process lets it go and that time has passed,
// rather than never.
func TestAnInstanceLeftOutWhileLockedElsewhereComesBackWhileTheProvidersClockStandsStill(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: 10 * time.Millisecond, Now: clock.Now})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now}) // nothing it writes is announced to p
	require.NoError(t, other.EnqueueForOrchestrator(ctx, providertest.StartItem("held-elsewhere"), 0))
	held, token, _, err := other.FetchOrchestrationItem(ctx, 300*time.Millisecond, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, held)
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "held-elsewhere", Name: "go", Data: `"now"`}, 0))

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the event's instance is locked by the other process: left out while its lock lasts")
	require.NoError(t, other.AbandonOrchestrationItem(ctx, token, 0, true))

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	item, _, _, err = p.FetchOrchestrationItem(waitCtx, time.Minute, time.Hour, nil)
	require.NoError(t, err, "the clock stands still: only the machine's time ends the note")
	require.NotNil(t, item)
	assert.Equal(t, "held-elsewhere", item.Instance)
}
