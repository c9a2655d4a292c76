package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// How a chain takes its completions in (ARCHITECTURE.md, Chained turns):
// it is handed over at a gap in its completions (completionCoalescing
// since the last one), at once when the completion that ends its fan-in
// comes, and by a maximum hold when its completions keep trickling in; a
// chained turn holds as many completions as its commit batch has room
// for. These tests run on a clock of their own, which stands still but
// where they move it: only the rule under test hands the chain over.

// chainLoopTicks is long enough, in real time, for the chain loop (every
// coalescing interval) to have looked at the chains a few times.
const chainLoopTicks = 4 * cdb.CompletionCoalescingForTest

// noTurnYet says no turn of p is ready now: a fetch that does not wait
// finds none (the chained instance is locked, its completions claimed).
func noTurnYet(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, msg string) {
	t.Helper()
	time.Sleep(chainLoopTicks)
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	if item != nil {
		t.Fatalf("%s: a turn of %d messages was handed over (token %s)", msg, len(item.Messages), token)
	}
}

// A fan-in of fifty whose activities run here is one chained turn: more
// completions than MaxMessagesPerTurn (40 by default), which bounds what a
// fetch's lock batch claims, but not what a chain claims, whose turn
// consumes them in its commit batch, which has room for them. Before, the
// turn took 40 and left 10 for another turn.
func TestAChainedFanInOfFiftyTakesOneTurnForItsCompletions(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	const n = 50
	got := chainedFanOut(ctx, t, p, "fifty", n)
	for _, w := range got {
		ackActivity(ctx, t, p, w)
	}
	acct.ResetCounts()
	turn := eventuallyTurn(ctx, t, p, "the chained turn, once the last completion came")
	require.Len(t, turn.item.Messages, n, "every completion of the fan-in in one turn")
	assert.Empty(t, acct.Counts().ByOperation, "the turn is the chain's completions: no query, no lock batch")
	require.NoError(t, p.AckOrchestrationItem(ctx, turn.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "fifty"), "none left for another turn")
	assert.Empty(t, instanceDocOf(t, p, "fifty")["lockToken"], "released by the turn's ack")
}

// Completions that come closer together than the coalescing gap keep the
// chain waiting, however long since the first; the one that ends the
// fan-in hands it over at once, without waiting for a gap after it.
// Before, the chain was handed over a coalescing interval after its
// first completion, with two of three.
func TestTheCompletionThatEndsAChainedFanInIsHandedOverWithoutWaitingTheGap(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "three", 3)
	step := cdb.CompletionCoalescingForTest * 4 / 5 // within the gap

	ackActivity(ctx, t, p, got[0])
	clock.Advance(step)
	ackActivity(ctx, t, p, got[1])
	clock.Advance(step)
	noTurnYet(ctx, t, p, "the completions came within the gap of each other, and one still runs")

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	ackActivity(ctx, t, p, got[2]) // the clock stands still from here
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Len(t, next.item.Messages, 3, "the whole fan-in, handed over as its last completion came")
}

// A chain whose completions keep coming within the gap of each other is
// handed over once it held its first completion the maximum hold, with
// what it has: the completions it holds wait no longer than that, and its
// lock stays far from its expiry. Before, it was handed over a coalescing
// interval after its first completion.
func TestAChainWhoseCompletionsKeepTricklingIsHandedOverByTheMaximumHold(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "trickle", 10)
	hold := cdb.ChainMaxHoldForTest(time.Minute)
	step := cdb.CompletionCoalescingForTest * 4 / 5 // within the gap
	require.Greater(t, hold, 2*step, "the hold spans a few gaps")

	acked := 0
	for held := time.Duration(0); held+step < hold; held += step {
		ackActivity(ctx, t, p, got[acked])
		acked++
		clock.Advance(step)
	}
	noTurnYet(ctx, t, p, "completions keep coming, within the hold")

	clock.Advance(step) // past the hold, still within the gap of the last
	turn := eventuallyTurn(ctx, t, p, "the chained turn, at the maximum hold")
	assert.Len(t, turn.item.Messages, acked, "the completions that came within the hold")
	assert.Less(t, acked, len(got), "while others still run")
}

// An activity of a chained instance that a worker of this process takes
// after the chain began is waited for too: the fan-in ends when no
// activity of the instance runs here, not when those the commit locked
// for this process's workers are done (a turn started then would be one
// a completion while more are in flight here).
func TestAChainAwaitsAnActivityAWorkerHereTookAfterItBegan(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	token := lockedStart(ctx, t, p, "later")
	first, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	require.NoError(t, ackScheduling(ctx, t, p, token, "later", activities("later", 2)...))
	early := first()
	require.NoError(t, early.err)
	require.NotNil(t, early.item)
	require.True(t, p.HoldsOrchestration("later"), "chained for the activity locked for the waiting worker")
	late := eventuallyWork(ctx, t, p, "the other activity, taken by a worker of this process after the chain began")
	require.NotNil(t, late.item)

	ackActivity(ctx, t, p, early)
	noTurnYet(ctx, t, p, "the other activity still runs here")
	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	ackActivity(ctx, t, p, late)
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Len(t, next.item.Messages, 2, "both completions, handed over as the last came")
}
