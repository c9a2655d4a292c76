package cdb_test

import (
	"strings"
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

// A chained turn whose activities took longer than its lock's margin
// (half a timeout, chainLockFor) and the hand-out slack is renewed before
// it goes out.
func TestAChainedTurnIsHandedOutWithItsWholeLock(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now}), cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "kept", 1)
	clock.Advance(35 * time.Second) // the activity ran for 35 seconds of the lock's minute
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

// A chained turn that waited for a busy runtime's dispatchers goes out
// with a whole lock and no renewal: the chain keeps its instance for the
// lock timeout beyond the longest it may wait ready (chainLockFor).
func TestAChainedTurnThatWaitedForAFetchGoesOutWithoutARenewal(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: 5 * time.Second, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "waited", 1)
	acct.ResetCounts()
	ackActivity(ctx, t, p, got[0]) // the turn is made ready with no fetch waiting
	// A busy runtime takes it half a poll interval later: past the
	// hand-out slack, within what the chain's lock allows for.
	clock.Advance(2500 * time.Millisecond)
	turn := eventuallyTurn(ctx, t, p, "the chained turn")
	assert.True(t, strings.HasPrefix(turn.token, "lock_chain."), "the chained turn: %q", turn.token)
	assert.Equal(t, map[string]int64{"Batch": 1}, acct.Counts().ByOperation, "the worker ack, and no renewal of the chain's lock")
	left, ok := p.OrchestrationLockRemaining(turn.token)
	require.True(t, ok)
	assert.GreaterOrEqual(t, left, time.Minute-time.Second, "with a whole lock, less the hand-out slack")
}
