package cdb_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// R17: messages held for a start that has not come (an event raised for a
// mistyped id, a cancel that overtook its start) are parked: they cost the
// requests that park them once, not requests per second, so an idle queue
// stays within one query per PollInterval however many of them there are.

// idleCostWithHeldMessages raises n events for ids that never start and
// drives a provider the way a runtime's dispatcher does (a fetch every
// 100 ms of a test clock, whatever it finds acked) for the given time,
// and returns the requests and RU the account served in the window that
// starts once every event had a first look (2 s in) and ends before any
// of them is handed over.
func idleCostWithHeldMessages(t *testing.T, n int, window time.Duration) (requests int64, ru float64) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, ReconcileInterval: time.Hour, Now: clock.Now})
	for i := 0; i < n; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("never-started-%d", i)), 0))
	}
	const step = 100 * time.Millisecond
	dispatch := func(d time.Duration) {
		for elapsed := time.Duration(0); elapsed < d; elapsed += step {
			item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.Nil(t, item, "nothing is handed over while a start may still come")
			clock.Advance(step)
		}
	}
	dispatch(2 * time.Second)
	before := acct.Counts()
	dispatch(window)
	after := acct.Counts()
	return after.Requests - before.Requests, after.RequestCharge - before.RequestCharge
}

func TestR17IdleCostDoesNotGrowWithMessagesHeldForAStart(t *testing.T) {
	const window = 20 * time.Second
	none, _ := idleCostWithHeldMessages(t, 0, window)
	requests, ru := idleCostWithHeldMessages(t, 10, window)
	per5s := func(v float64) float64 { return v * float64(5*time.Second) / float64(window) }
	t.Logf("idle, no held message: %d requests in %v", none, window)
	t.Logf("idle, 10 held messages: %d requests and %.0f RU in %v (%.0f requests, %.0f RU per 5 s)", requests, ru, window, per5s(float64(requests)), per5s(ru))
	intervals := int64(window / time.Second)
	assert.LessOrEqual(t, requests, intervals+1, "at most one query per PollInterval with 10 held messages")
	assert.Equal(t, none, requests, "held messages cost an idle queue nothing")
}

// Parked messages are reported, with the enqueue time of the oldest, and
// leave the report once their start takes them.
func TestHeldMessagesAreReportedWithTheOldest(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	held, err := p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.Equal(t, cdb.HeldMessages{}, held, "nothing held")

	first := clock.Now()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("typo"), 0))
	clock.Advance(time.Second)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstance{Instance: "late", Reason: "r"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item)

	held, err = p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, held.Parked)
	require.NotNil(t, held.OldestParked)
	assert.Equal(t, first.UnixMilli(), held.OldestParked.UnixMilli(), "the oldest is the first event's enqueue time")
	assert.Zero(t, held.Poison)
	assert.Nil(t, held.OldestPoison)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("late"), 0))
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	held, err = p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, held.Parked, "the cancel joined its start's batch")
}
