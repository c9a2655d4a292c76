package cdb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A lock handed out outlives the runtime's first renewal (R19): a lock
// made ready ahead of its fetch (an item locked in an earlier commit, a
// chain kept while its activities ran) goes out with nearly its whole
// timeout, renewed first otherwise, and the provider says how long it has
// left (cdb.LockRemainingReporter).

// storedUntil is the lockedUntil of a stored document.
func storedUntil(t *testing.T, doc map[string]any) time.Time {
	t.Helper()
	ms, ok := doc["lockedUntil"].(float64)
	require.True(t, ok, "a lockedUntil: %v", doc["lockedUntil"])
	return time.UnixMilli(int64(ms))
}

// An eager item is locked for its patience (how long it may wait ready:
// a poll interval here) on top of its lock timeout; one whose wait used
// that and more than the hand-out slack is renewed before it goes out:
// before, one with three quarters of its lock left went out as it was,
// and a runtime renewing its buffer before the timeout renewed after
// another process could take the item.
func TestAReadyItemIsHandedOutWithItsWholeLock(t *testing.T) {
	clock := newTestClock()
	ctx, p := readyItemOf(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now}), cdb.Config{PollInterval: time.Hour, Now: clock.Now}, "slow")
	clock.Advance(time.Hour + 5*time.Second) // a wait in the ready list past its patience (the give-back not come yet)
	item, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	left, ok := p.WorkItemLockRemaining(token)
	require.True(t, ok)
	assert.Equal(t, time.Minute, left, "renewed for a whole timeout as it went out")
	assert.Equal(t, clock.Now().Add(time.Minute).UnixMilli(), storedUntil(t, workDocs(t, p, "slow")[0]).UnixMilli())

	_, ok = p.WorkItemLockRemaining("work_unknown")
	assert.False(t, ok, "a token this provider does not hold")
}

// A chained turn whose activities took longer than the hand-out slack is
// renewed before it goes out.
func TestAChainedTurnIsHandedOutWithItsWholeLock(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now}), cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "kept", 1)
	clock.Advance(5 * time.Second) // the activity ran for five seconds
	ackActivity(ctx, t, p, got[0])
	turn := eventuallyTurn(ctx, t, p, "the chained turn")
	left, ok := p.OrchestrationLockRemaining(turn.token)
	require.True(t, ok)
	assert.Equal(t, time.Minute, left, "renewed for a whole timeout as it went out")
	assert.Equal(t, clock.Now().Add(time.Minute).UnixMilli(), storedUntil(t, instanceDocOf(t, p, "kept")).UnixMilli())
}

func TestALockJustTakenIsHandedOutAsItIs(t *testing.T) {
	clock := newTestClock()
	ctx, p := readyItemOf(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now}), cdb.Config{PollInterval: time.Hour, Now: clock.Now}, "fresh")
	clock.Advance(500 * time.Millisecond)
	before := workDocs(t, p, "fresh")[0]["_etag"]
	_, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	left, _ := p.WorkItemLockRemaining(token)
	assert.Equal(t, time.Minute+time.Hour-500*time.Millisecond, left, "its lock timeout and its patience (a poll interval here), less its wait")
	assert.Equal(t, before, workDocs(t, p, "fresh")[0]["_etag"], "no renewal: it went out with all but the slack")
}
