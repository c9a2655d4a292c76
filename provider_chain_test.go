package cdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Chained turns (ARCHITECTURE.md, Chained turns): a turn that locked its
// activities eagerly keeps its instance locked to this process, the
// activities' completions are written claimed with that lock, and the next
// turn takes them without a request, or with one query of the partition
// when this process last read it a poll interval ago.

// chainedFanOut is p's instance, whose first turn scheduled n activities
// for n waiting worker fetches of p; it returns what the workers took.
func chainedFanOut(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string, n int) []fetchedWork {
	t.Helper()
	token := lockedStart(ctx, t, p, instance)
	results := make([]func() fetchedWork, n)
	acts := make([]cdb.ActivityExecuteMessage, n)
	for i := range results {
		results[i], _ = waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
		acts[i] = activity(instance, uint64(i+2), "")
	}
	require.NoError(t, ackScheduling(ctx, t, p, token, instance, acts...))
	got := make([]fetchedWork, n)
	for i, result := range results {
		got[i] = result()
		require.NoError(t, got[i].err)
		require.NotNil(t, got[i].item)
	}
	return got
}

// instanceDocOf is instance's instance document as stored.
func instanceDocOf(t *testing.T, p *cdb.CosmosProvider, instance string) map[string]any {
	t.Helper()
	resp, err := p.Container().ReadItem(context.Background(), cdb.NewPartitionKeyString(instance), "inst", nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	return doc
}

// messageDocs are the orchestrator messages of instance as stored.
func messageDocs(t *testing.T, p *cdb.CosmosProvider, instance string) []map[string]any {
	t.Helper()
	return storedDocs(t, p, instance, "msg")
}

func TestATurnWhoseActivitiesRunHereKeepsItsInstanceForTheirCompletions(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "kept", 2)

	inst := instanceDocOf(t, p, "kept")
	chain, _ := inst["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "the commit kept the lock: %v", inst["lockToken"])

	ackActivity(ctx, t, p, got[0])
	msgs := messageDocs(t, p, "kept")
	require.Len(t, msgs, 1)
	assert.Equal(t, chain, msgs[0]["lockToken"], "written claimed with the kept lock, as the lock batch would claim it")
	assert.EqualValues(t, 1, msgs[0]["attempts"])
	assert.Equal(t, inst["lockedUntil"], msgs[0]["lockedUntil"], "they expire together")

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	ackActivity(ctx, t, p, got[1])
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Len(t, next.item.Messages, 2, "both completions in one turn")
	assert.Equal(t, uint32(1), next.attempts)
	assert.Equal(t, chain, next.token, "the kept lock is the turn's")
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "kept"))
	assert.Empty(t, instanceDocOf(t, p, "kept")["lockToken"], "released by the turn's ack")
}

// A turn that schedules nothing keeps its instance's lock too while this
// process's workers still run activities of it: their completions come here.
func TestATurnKeepsItsInstanceWhileItsActivitiesStillRunHere(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "slow", 2)
	ackActivity(ctx, t, p, got[0])
	second := eventuallyTurn(ctx, t, p, "the first completion's turn, after the coalescing delay")
	require.Len(t, second.item.Messages, 1)
	require.NoError(t, p.AckOrchestrationItem(ctx, second.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	chain, _ := instanceDocOf(t, p, "slow")["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "kept for the activity still running here")

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	acct.ResetCounts()
	ackActivity(ctx, t, p, got[1])
	third := turn()
	require.NoError(t, third.err)
	require.NotNil(t, third.item)
	assert.Equal(t, chain, third.token)
	assert.Len(t, third.item.Messages, 1)
	assert.Equal(t, map[string]int64{"Batch": 1}, acct.Counts().ByOperation,
		"the worker ack; the chained turn takes the completion its chain claimed, within a poll interval of the fetch's query")
}

// A chain no completion reaches within its window is given back, so what
// another process sends the instance is not kept from it for a lock's
// length.
func TestAChainNoCompletionReachesIsGivenBack(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: 100 * time.Millisecond})
	chainedFanOut(ctx, t, p, "idle", 1) // the activity never completes

	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "idle", Name: "go", Data: "{}"}, 0))
	require.Eventually(t, func() bool { return instanceDocOf(t, p, "idle")["lockToken"] == "" }, 10*time.Second, 10*time.Millisecond,
		"the chain is given back after its window, a poll interval")
	got := eventuallyTurn(ctx, t, other, "the other process takes the instance")
	require.NotNil(t, got.item)
	assert.Equal(t, uint32(1), got.attempts, "the give-back counts no attempt")
	assert.Len(t, got.item.Messages, 1)
}

// Chains that come due together are given back together: one give-back
// at a time, a busy process's chain loop fell behind its chains' windows,
// and chains outlived their locks while their instances waited (at 500
// orchestrations in flight, two thirds of the give-backs met an instance
// another turn had taken and completed meanwhile).
func TestChainsDueTogetherAreGivenBackTogether(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, Now: clock.Now})
	const chains = 4
	for i := range chains {
		chainedFanOut(ctx, t, p, fmt.Sprintf("quiet-%d", i), 1) // the activities never complete
	}
	// A request takes a while from here on: give-backs sent one at a time
	// arrive that far apart.
	const latency = time.Second
	acct.SetLatency(latency)
	var mu sync.Mutex
	var arrivals []time.Time
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "Batch" && strings.Contains(r.PartitionKey, "quiet-") {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
		return false
	}})
	clock.Advance(2 * time.Second) // every chain's window ends at once
	for i := range chains {
		instance := fmt.Sprintf("quiet-%d", i)
		require.Eventually(t, func() bool { return instanceDocOf(t, p, instance)["lockToken"] == "" }, 30*time.Second, 10*time.Millisecond,
			"%s given back", instance)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, arrivals, chains, "one give-back each")
	assert.Less(t, arrivals[chains-1].Sub(arrivals[0]), latency, "every give-back sent before the first was answered")
}

// A turn whose activities are locked eagerly behind a backlog of this
// process's ready items keeps no chain: its workers take them seconds
// later, after the chain's window, and the chain would be given back
// unused, a request for nothing. Its activity is still locked for them.
func TestATurnWhoseActivitiesWaitBehindABacklogKeepsNoChain(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, Now: clock.Now})
	// One worker, taking one item a poll interval, and a fan-out of 8
	// locked ahead for it: it takes one, six wait ready (one is queued).
	token := lockedStart(ctx, t, p, "ahead")
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	require.NoError(t, ackScheduling(ctx, t, p, token, "ahead", activities("ahead", 8)...))
	require.NotNil(t, worker().item)
	assert.True(t, p.HoldsOrchestration("ahead"), "its first activity runs at once: chained")
	clock.Advance(time.Second)

	token = lockedStart(ctx, t, p, "behind")
	require.NoError(t, ackScheduling(ctx, t, p, token, "behind", activity("behind", 2, "")))
	assert.False(t, p.HoldsOrchestration("behind"), "its activity waits about six seconds: not chained")
	assert.Empty(t, instanceDocOf(t, p, "behind")["lockToken"], "released by its commit")
	assert.Equal(t, "w|1|2", storedDocs(t, p, "behind", "work")[0]["id"])
	assert.NotEmpty(t, storedDocs(t, p, "behind", "work")[0]["lockToken"], "locked for this process's workers all the same")
}

// A chained instance is held here (cdb.OrchestrationHolder) while its
// activities run, and no longer once the chain is given back.
func TestAChainedInstanceIsHeldHereUntilItsChainEnds(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: 100 * time.Millisecond})
	chainedFanOut(ctx, t, p, "idle", 1) // the activity never completes
	assert.True(t, p.HoldsOrchestration("idle"), "kept for its activity")
	require.Eventually(t, func() bool { return !p.HoldsOrchestration("idle") }, 10*time.Second, 10*time.Millisecond,
		"let go after the chain's window")
	assert.Empty(t, instanceDocOf(t, p, "idle")["lockToken"], "given back in the store first")
}

// Anything this process sends a chained instance makes the chained turn
// due at once, with the completions it has.
func TestAMessageFromThisProcessTakesTheChainedTurnAtOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "poked", 2)
	ackActivity(ctx, t, p, got[0])

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	acct.ResetCounts()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "poked", Name: "go", Data: "{}"}, 0))
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	kinds := []string{}
	for _, m := range next.item.Messages {
		kinds = append(kinds, m.Kind())
	}
	assert.ElementsMatch(t, []string{"ActivityCompleted", "ExternalRaised"}, kinds)
	assert.Equal(t, uint32(1), next.attempts)
}

// A process that dies with a chained instance leaves it, and the
// completions claimed with it, to any fetch once the lock expires, the
// attempt counted.
func TestAChainedInstanceOfAProcessThatDiedRunsElsewhereOnceItsLockExpires(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, crash := crashableProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("orphan"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, 500*time.Millisecond, 0, nil)
	require.NoError(t, err)
	worker, _ := waitingWorker(ctx, t, p, 300*time.Millisecond, cdb.DefaultOnlyFilter())
	other, _ := waitingWorker(ctx, t, p, 300*time.Millisecond, cdb.DefaultOnlyFilter())
	require.NoError(t, ackScheduling(ctx, t, p, token, "orphan", activity("orphan", 2, ""), activity("orphan", 3, "")))
	first, second := worker(), other()
	require.NoError(t, first.err)
	require.NoError(t, second.err)
	ackActivity(ctx, t, p, first)
	require.NotEmpty(t, messageDocs(t, p, "orphan")[0]["lockToken"], "claimed with the chain")
	crash()

	survivor := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	got := eventuallyTurn(ctx, t, survivor, "the chain expires")
	require.NotNil(t, got.item)
	assert.Equal(t, "orphan", got.item.Instance)
	assert.Equal(t, uint32(2), got.attempts, "the chained turn's attempt is counted")
	assert.Len(t, got.item.Messages, 1, "the completion claimed with the chain is in the batch")
}

// A worker ack writing into a chain holds the chained turn back until it
// answers: a completion claimed after the turn read its batch would stay
// hidden until the lock expired.
func TestAChainedTurnWaitsForTheWorkerAckWritingIntoIt(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var hold holdingTransport
	hold.next = acct.Transport()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: &hold})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: client, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	got := chainedFanOut(ctx, t, p, "racing", 2)

	inAck, release := hold.holdNext(`["racing"]`)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		ackActivity(ctx, t, p, got[0])
	}()
	<-inAck
	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	turns := make(chan fetchedTurn, 1)
	go func() { turns <- turn() }()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "racing", Name: "go", Data: "{}"}, 0))
	var next fetchedTurn
	select {
	case next = <-turns: // handed over while the ack was under way: the batch lacks its completion
	case <-time.After(500 * time.Millisecond):
		close(release)
		next = <-turns
	}
	if !isClosed(release) {
		close(release)
	}
	<-acked
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Len(t, next.item.Messages, 2, "the event and the completion whose ack was under way")
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "racing"), "nothing left claimed")
}

// A chain that the provider's Close finds is given back, not left locked
// for the lock's length.
func TestAChainIsGivenBackAtClose(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), PollInterval: time.Hour})
	require.NoError(t, err)
	got := chainedFanOut(ctx, t, p, "closing", 2)
	ackActivity(ctx, t, p, got[0])
	require.NoError(t, p.Close())

	inst := instanceDocOf(t, p, "closing")
	assert.Empty(t, inst["lockToken"], "released")
	for _, m := range messageDocs(t, p, "closing") {
		assert.Empty(t, m["lockToken"], "its claimed completion released too")
		assert.EqualValues(t, 0, m["attempts"], "no attempt counted")
	}
}

// A worker ack writing into a chain whose answer is lost is resolved by a
// read, and its completion, claimed with the chain, reaches the chained
// turn; nothing stays claimed after the turn's ack.
func TestAChainedCompletionWhoseAckAnswerWasLostReachesTheChainedTurn(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "lost-ack", 1)

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	loseFirstResponse(acct, "Batch", "ActivityCompleted")
	ackActivity(ctx, t, p, got[0])
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.True(t, strings.HasPrefix(next.token, "lock_chain."), "the chained turn: %s", next.token)
	require.Len(t, next.item.Messages, 1)
	assert.Equal(t, "ActivityCompleted", next.item.Messages[0].Kind())
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "lost-ack"), "consumed, not left claimed")
}

// A commit that chains its instance and whose answer is lost is resolved
// by a read; the chain is kept and its completions reach the chained turn.
func TestAChainingCommitWhoseAnswerWasLostKeepsItsChain(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	token := lockedStart(ctx, t, p, "lost-commit")
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	loseFirstResponse(acct, "Batch", "ActivityExecute")
	require.NoError(t, ackScheduling(ctx, t, p, token, "lost-commit", activity("lost-commit", 2, "")))
	chain, _ := instanceDocOf(t, p, "lost-commit")["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "the commit applied, chained: %q", chain)

	got := worker()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	ackActivity(ctx, t, p, got)
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Equal(t, chain, next.token, "the chain the resolved commit wrote")
	assert.Len(t, next.item.Messages, 1)
}

// A chained turn within a poll interval of this process's last read of the
// instance's messages takes only the completions its chain claimed: what
// another process sent meanwhile is left queued for the next turn, and taken
// by it once the chain ends.
func TestAChainedTurnSoonAfterTheInstanceWasReadTakesOnlyItsCompletions(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "soon", 1)
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "soon", Name: "go", Data: "{}"}, 0))

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	acct.ResetCounts()
	ackActivity(ctx, t, p, got[0])
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Equal(t, []string{"ActivityCompleted"}, messageKinds(next.item))
	assert.Equal(t, map[string]int64{"Batch": 1}, acct.Counts().ByOperation, "the worker ack alone")
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))

	after := eventuallyTurn(ctx, t, other, "the event, once the chain ended")
	assert.Equal(t, []string{"ExternalRaised"}, messageKinds(after.item))
	assert.Equal(t, uint32(1), after.attempts)
}

// While this process holds an instance through chained turns, it reads the
// instance's messages at least once a poll interval: a chained turn that
// comes a poll interval or more after the last read (here the third turn,
// two chains after the fetch that read it) takes what another process sent
// as well as its completions.
func TestAChainedTurnAPollIntervalAfterTheInstanceWasReadTakesWhatOthersSent(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	const poll = 10 * time.Second // the chain's window too: a lock of a minute allows 15 s
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: poll, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "long", 2)

	clock.Advance(poll * 6 / 10)
	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	ackActivity(ctx, t, p, got[0])
	clock.Advance(2 * cdb.CompletionCoalescingForTest) // the second activity still runs: the turn goes after the coalescing delay
	second := turn()
	require.NoError(t, second.err)
	require.NotNil(t, second.item)
	assert.Equal(t, []string{"ActivityCompleted"}, messageKinds(second.item))
	require.NoError(t, p.AckOrchestrationItem(ctx, second.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	chain, _ := instanceDocOf(t, p, "long")["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "kept for the activity still running here: %q", chain)

	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "long", Name: "go", Data: "{}"}, 0))
	clock.Advance(poll * 5 / 10) // 1.1 poll intervals since the fetch's query; half the second chain's window
	third, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	acct.ResetCounts()
	ackActivity(ctx, t, p, got[1])
	next := third()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Equal(t, chain, next.token, "the chained turn")
	assert.ElementsMatch(t, []string{"ActivityCompleted", "ExternalRaised"}, messageKinds(next.item))
	assert.Equal(t, map[string]int64{"Batch": 2, "Query": 1}, acct.Counts().ByOperation,
		"the worker ack, the chained turn's query of the partition and its claim of the event; the chain's lock, "+
			"kept five seconds, needs no renewal before it goes to the runtime (R19, chainLockFor)")
}

// The read a poll interval is counted to when a fetch takes the chained
// turn, not to when it was made ready: a runtime busy with other turns may
// take it later, and the turn then reads what another process sent.
func TestAChainedTurnTakenAPollIntervalAfterTheReadTakesWhatOthersSent(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	const poll = 10 * time.Second
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: poll, Now: clock.Now})
	got := chainedFanOut(ctx, t, p, "late-take", 1)
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "late-take", Name: "go", Data: "{}"}, 0))

	clock.Advance(poll * 6 / 10)
	ackActivity(ctx, t, p, got[0]) // the turn is made ready with no fetch waiting
	clock.Advance(poll * 5 / 10)   // 1.1 poll intervals since the read, half of one since the turn was ready
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.True(t, strings.HasPrefix(token, "lock_chain."), "the chained turn: %q", token)
	assert.ElementsMatch(t, []string{"ActivityCompleted", "ExternalRaised"}, messageKinds(item))
}

// A worker ack writing into a chain that cannot tell whether it wrote its
// completion (its answer lost, and the read that would tell refused) makes
// the chained turn due, with a query of the partition: the completion,
// claimed with the chain, reaches the chained turn at once instead of
// waiting, claimed, for the lock's expiry after the chain was given back.
func TestAChainedCompletionWhoseAckCannotTellReachesTheChainedTurn(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := chainedFanOut(ctx, t, p, "unsure", 1)

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	loseFirstResponse(acct, "Batch", "ActivityCompleted")
	refuseReads := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && strings.Contains(string(r.Body), `"operationType":"Read"`) // the read-back from the primary
	}})
	act := got[0].item.(cdb.ActivityExecuteMessage)
	completion := cdb.ActivityCompletedMessage{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Result: "ok"}
	err := p.AckWorkItem(ctx, got[0].token, completion)
	require.True(t, cdb.IsOutcomeUnknown(err), "the ack cannot tell: %v", err)
	refuseReads()

	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.True(t, strings.HasPrefix(next.token, "lock_chain."), "the chained turn, not a fetch after the lock expired: %s", next.token)
	assert.Equal(t, []string{"ActivityCompleted"}, messageKinds(next.item))
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "unsure"), "consumed, not left claimed")
}

// A chained turn of an execution pinned at a version the fetching
// dispatcher cannot replay is not handed to it: it is given back, for a
// dispatcher that can (one provider shared by the runtimes of two builds).
// It was handed over without the filter's check; the runtime abandoned it
// as pinned elsewhere, and a Close right after left it locked for a
// lock's length (the simulation's close-gives-back, on a chain's token).
func TestAChainedTurnIsNotHandedToADispatcherThatCannotReplayIt(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	token := lockedStart(ctx, t, p, "pinned")
	work, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	md := providertest.TestOrchMetadata()
	v := cdb.NewSemanticVersion(0, 1, 32)
	md.PinnedDuroxideVersion = &v
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("pinned", 1)},
		[]cdb.WorkItem{activity("pinned", 2, "")}, nil, md, nil))
	w := work()
	require.NotNil(t, w.item)
	chain, _ := instanceDocOf(t, p, "pinned")["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "the commit kept the lock: %q", chain)
	ackActivity(ctx, t, p, w)

	oldBuild := &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{
		{Min: cdb.NewSemanticVersion(0, 0, 1), Max: cdb.NewSemanticVersion(0, 1, 0)}}}
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 300*time.Millisecond, oldBuild)
	require.NoError(t, err)
	assert.Nil(t, item, "not for a dispatcher that cannot replay it")
	assert.Empty(t, instanceDocOf(t, p, "pinned")["lockToken"], "given back, for one that can")

	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, time.Second, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "a dispatcher that can replay it takes it")
	assert.Len(t, item.Messages, 1, "with the completion")
}

// A chain takes a turn's worth of completions (as many as its commit batch
// has room for: two here) and the rest go to the queue; this process's own
// fetches are told, so the rest wait for the instance's release, not for
// an idle look (a poll interval here, up to fifteen of them behind a quiet
// queue bell: the fan-out-50 bench saw 10 of 50 completions wait 26-41 s).
func TestACompletionAChainedTurnHadNoRoomForReachesTheNextTurnAtOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	cdb.SetChainTurnRoomForTest(p, 2)
	got := chainedFanOut(ctx, t, p, "wide", 3)
	for _, w := range got {
		ackActivity(ctx, t, p, w)
	}
	first := eventuallyTurn(ctx, t, p, "the chained turn")
	require.Len(t, first.item.Messages, 2, "a turn's worth of the chain's three completions")

	next, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	require.NoError(t, p.AckOrchestrationItem(ctx, first.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	done := make(chan fetchedTurn, 1)
	go func() { done <- next() }()
	select {
	case second := <-done:
		require.NoError(t, second.err)
		require.NotNil(t, second.item)
		assert.Equal(t, []string{"ActivityCompleted"}, messageKinds(second.item), "the completion the chained turn had no room for")
	case <-time.After(10 * time.Second):
		t.Fatal("the completion left for the next turn waited for an idle look: nothing told this process's waiting fetch")
	}
}
