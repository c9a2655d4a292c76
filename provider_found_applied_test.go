package cdb_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// A commit found applied by reads, its own answer lost (or an earlier
// try's), is followed by what follows any commit: every item some try of
// the ack locked for this process's fetches is handed out or given back,
// and its announcements and end watches run.

// singleAttemptProvider is a provider on acct whose client tries each
// request once, so a test counts the reads that resolve a lost answer.
func singleAttemptProvider(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config) *cdb.CosmosProvider {
	t.Helper()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Retry: cdb.RetryOptions{MaxAttempts: 1}})
	require.NoError(t, err)
	cfg.Client = client
	p, err := cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// failInstanceReads makes the next n reads of instance's document from
// its primary (a batch of one Read) fail with 503, as reads during an
// outage do.
func failInstanceReads(acct *cdb.FakeAccount, instance string, n int) {
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 503, Times: n, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && r.PartitionKey == `["`+instance+`"]` &&
			strings.Contains(string(r.Body), `"operationType":"Read","id":"inst"`)
	}})
}

// failInstanceReadsWhile makes every read of instance's document from its
// primary fail with 503 until the returned flag is cleared.
func failInstanceReadsWhile(acct *cdb.FakeAccount, instance string) *atomic.Bool {
	var failing atomic.Bool
	failing.Store(true)
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 503, Times: 1 << 20, Match: func(r cdb.FakeRequest) bool {
		return failing.Load() && r.Operation == "Batch" && r.PartitionKey == `["`+instance+`"]` &&
			strings.Contains(string(r.Body), `"operationType":"Read","id":"inst"`)
	}})
	return &failing
}

// failOnce makes the first request match picks fail with 503, and counts
// the requests it failed.
func failOnce(acct *cdb.FakeAccount, match func(cdb.FakeRequest) bool) *atomic.Int64 {
	var failed atomic.Int64
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 503, Times: 1, Match: func(r cdb.FakeRequest) bool {
		if !match(r) {
			return false
		}
		failed.Add(1)
		return true
	}})
	return &failed
}

// commitAnswerReads is how many reads of the instance a commit whose answer
// was lost makes before it tells its caller it cannot tell.
const commitAnswerReads = 5

// within waits up to d for f's result; ok false when it did not come.
func within[T any](d time.Duration, f func() T) (v T, ok bool) {
	got := make(chan T, 1)
	go func() { got <- f() }()
	select {
	case v = <-got:
		return v, true
	case <-time.After(d):
		return v, false
	}
}

// A start's first turn whose answer was lost, and whose reads failed until
// the start's settle found it committed, hands its activity to the fetch
// it was locked for: before, the item stayed locked for nobody for a
// worker lock's length.
func TestAFirstTurnFoundCommittedLateHandsOutItsActivity(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem("late"), 0) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)

	loseFirstResponse(acct, "Batch", `"resourceBody":{"id":"inst"`)
	failInstanceReads(acct, "late", commitAnswerReads)
	require.NoError(t, ackScheduling(ctx, t, p, got.token, "late", activity("late", 2, "")), "found committed by the start's settle")
	require.NoError(t, <-started)

	work, ok := within(10*time.Second, worker)
	require.True(t, ok, "the activity the commit locked for the waiting fetch was never handed out")
	require.NoError(t, work.err)
	require.NotNil(t, work.item)
	assert.Equal(t, uint64(2), work.item.(cdb.ActivityExecuteMessage).ID)
}

// An ack resolved on the runtime's retry (its first try's answer lost and
// its reads failed), whose retry locks fewer items than the first try
// did, makes every item the first try locked ready: before, those the
// retry did not lock stayed locked for nobody for a worker lock's length.
func TestAnAckFoundCommittedOnItsRetryHandsOutWhatItsFirstTryLocked(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	const poll = time.Second
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: poll, Now: clock.Now})
	token := lockedStart(ctx, t, p, "retried")
	first, stopFirst := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	second, stopSecond := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	// The workers go away while the first try is planned: its items are
	// locked for them all the same, and wait ready.
	cdb.AfterAckPlannedForTest(p, func() {
		cdb.AfterAckPlannedForTest(p, nil)
		stopFirst()
		stopSecond()
		require.Nil(t, first().item)
		require.Nil(t, second().item)
	})
	loseFirstResponse(acct, "Batch", "ActivityExecute")
	failInstanceReads(acct, "retried", commitAnswerReads)
	acts := []cdb.ActivityExecuteMessage{activity("retried", 2, ""), activity("retried", 3, "")}
	err := ackScheduling(ctx, t, p, token, "retried", acts...)
	require.Error(t, err)
	require.True(t, cdb.IsRetryable(err), "cannot tell yet: %v", err)
	for _, item := range workDocs(t, p, "retried") {
		require.NotEmpty(t, item["lockToken"], "the first try locked %v for this process", item["id"])
	}

	clock.Advance(3 * poll) // no fetch for a while: the retry locks nothing
	require.NoError(t, ackScheduling(ctx, t, p, token, "retried", acts...), "the retry finds the first try committed")
	var ids []uint64
	for range acts {
		work, ok := within(10*time.Second, func() fetchedWork {
			item, token, attempts, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
			return fetchedWork{item, token, attempts, err}
		})
		require.True(t, ok, "an item the first try locked is handed out")
		require.NoError(t, work.err)
		require.NotNil(t, work.item, "an item the first try locked is handed out")
		ids = append(ids, work.item.(cdb.ActivityExecuteMessage).ID)
	}
	assert.ElementsMatch(t, []uint64{2, 3}, ids)
}

// A start's first turn whose answer was lost and whose reads kept failing
// (its outcome cannot be told) committed a chain on its instance; once
// the instance can be read, Close gives that chain back: before, nothing
// knew of it, and the instance stayed locked to the closed process for a
// lock's length.
func TestAChainAFirstTurnOfUnknownOutcomeKeptIsGivenBackAtClose(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem("unknown"), 0) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)

	readsFail := failInstanceReadsWhile(acct, "unknown")
	loseFirstResponse(acct, "Batch", `"resourceBody":{"id":"inst"`)
	require.Error(t, ackScheduling(ctx, t, p, got.token, "unknown", activity("unknown", 2, "")), "whether it committed cannot be told")
	require.Error(t, <-started)
	work, ok := within(10*time.Second, worker)
	require.True(t, ok, "the activity the commit may have locked is read back and handed out")
	require.NoError(t, work.err)
	require.NotNil(t, work.item)

	reader := newRulesProvider(t, acct, cdb.Config{})
	require.Regexp(t, `^lock_chain\.`, instanceDocOf(t, reader, "unknown")["lockToken"], "the commit kept its instance")
	readsFail.Store(false)
	require.NoError(t, p.Close())
	assert.Empty(t, instanceDocOf(t, reader, "unknown")["lockToken"], "the chain is given back at Close")
}

// An ack whose outcome cannot be told (its answer lost, the reads that
// would tell failing), which the runtime then abandons instead of trying
// again (it is stopping), may have committed: the activity that try
// locked for this process is read back and handed out, and the chain it
// kept is given back once the instance can be read (here at Close).
// Before, both stayed locked for nobody until their locks expired.
func TestAnAbandonedAckOfUnknownOutcomeLeavesNothingLocked(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	token := lockedStart(ctx, t, p, "abandoned")
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())

	readsFail := failInstanceReadsWhile(acct, "abandoned")
	loseFirstResponse(acct, "Batch", "ActivityExecute")
	err := ackScheduling(ctx, t, p, token, "abandoned", activity("abandoned", 2, ""))
	require.Error(t, err)
	require.True(t, cdb.IsRetryable(err), "cannot tell yet: %v", err)
	_ = p.AbandonOrchestrationItem(ctx, token, 0, false) // the runtime stops instead of trying again

	work, ok := within(10*time.Second, worker)
	require.True(t, ok, "the activity the commit locked for this process is handed out")
	require.NoError(t, work.err)
	require.NotNil(t, work.item)
	assert.Equal(t, uint64(2), work.item.(cdb.ActivityExecuteMessage).ID)

	reader := newRulesProvider(t, acct, cdb.Config{})
	require.Regexp(t, `^lock_chain\.`, instanceDocOf(t, reader, "abandoned")["lockToken"], "the commit kept its instance")
	readsFail.Store(false)
	require.NoError(t, p.Close())
	assert.Empty(t, instanceDocOf(t, reader, "abandoned")["lockToken"], "the chain is given back at Close")
}

// An ack whose outcome could not be told, tried again only after its lock
// expired, is refused, and no try will tell: what the first try may have
// locked for this process is read back and handed out, as when the
// runtime abandons (before, the item stayed hidden for its lock's length).
func TestAnAckOfUnknownOutcomeRefusedForItsExpiryLeavesNothingLocked(t *testing.T) {
	clock := newTestClock()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("expired"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())

	loseFirstResponse(acct, "Batch", "ActivityExecute")
	failInstanceReads(acct, "expired", commitAnswerReads)
	err = ackScheduling(ctx, t, p, token, "expired", activity("expired", 2, ""))
	require.Error(t, err)
	require.True(t, cdb.IsRetryable(err), "cannot tell yet: %v", err)
	clock.Advance(6 * time.Second)
	err = ackScheduling(ctx, t, p, token, "expired", activity("expired", 2, ""))
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken)

	work, ok := within(10*time.Second, worker)
	require.True(t, ok, "the activity the first try locked for this process is handed out")
	require.NoError(t, work.err)
	require.NotNil(t, work.item)
	assert.Equal(t, uint64(2), work.item.(cdb.ActivityExecuteMessage).ID)
}

// An item locked for this process by a commit whose outcome could not be
// told, which a fetch could not read back (the read failed, or the fetch's
// caller went away), waits ready again: for a later fetch, or to be given
// back (here at Close). Before, it was dropped and stayed locked for nobody
// for a worker lock's length.
func TestAnItemThatCouldNotBeReadBackWaitsReadyAgain(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	worker, stopWorker := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem("unread"), 0) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)

	failInstanceReads(acct, "unread", 2*commitAnswerReads+1)
	workReads := failOnce(acct, func(r cdb.FakeRequest) bool {
		return r.PartitionKey == `["unread"]` && strings.Contains(string(r.Body), `"id":"w|1|2"`) && !strings.Contains(string(r.Body), "resourceBody")
	})
	loseFirstResponse(acct, "Batch", `"resourceBody":{"id":"inst"`)
	require.Error(t, ackScheduling(ctx, t, p, got.token, "unread", activity("unread", 2, "")), "whether it committed cannot be told")
	require.Error(t, <-started)
	require.Eventually(t, func() bool { return workReads.Load() > 0 }, 10*time.Second, time.Millisecond, "the waiting fetch reads the item back")
	stopWorker()
	require.Nil(t, worker().item, "the read back failed: not handed out")

	require.NoError(t, p.Close())
	items := workDocs(t, newRulesProvider(t, acct, cdb.Config{}), "unread")
	require.Len(t, items, 1)
	assert.Empty(t, items[0]["lockToken"], "given back at Close, not left to its lock's expiry")
}
