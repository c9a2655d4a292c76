package cdb_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// The relay's batched delivery (relaybatch.go): what a wide fan-out's
// commit could not hold goes into its own partition a transactional batch
// at a time, each with the outbox's progress, so a takeover goes on where
// the last batch ended and a lost answer is settled by reading it back.

// isRelayBatch matches a transactional batch of a relay: entries with the
// outbox's progress, recorded under the condition that the relay owns it.
func isRelayBatch(r cdb.FakeRequest) bool {
	return r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"operationType":"Patch","id":"o|`)) &&
		bytes.Contains(r.Body, []byte(`/delivered`)) && bytes.Contains(r.Body, []byte(`c.owner`))
}

// A fan-out of 500 overflows its commit batch; its worker items are
// delivered in batches of up to 99 with the outbox's progress, not one
// request each, and every activity is queued once.
func TestAWideFanOutsOverflowIsDeliveredInBatchesWithItsProgress(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "wide")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("wide"), 0))
	_, token := fetchFor(ctx, t, p, "wide")
	events, work := fanOut("wide", 500)
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))

	var singles, relayBatches int
	for _, r := range log.take() {
		switch {
		case r.Operation == "CreateItem" && r.PartitionKey == `["wide"]`:
			singles++
		case isRelayBatch(r):
			relayBatches++
			assert.NotContains(t, string(r.Body), `"relayed":true`, "an item a batch delivers once needs no consumed marker")
		}
	}
	assert.Zero(t, singles, "no worker item is delivered on its own")
	assert.Positive(t, relayBatches)
	assert.LessOrEqual(t, relayBatches, 5, "about 400 overflowed items go in batches of 99")

	queued := queuedActivities(ctx, t, p, "wide")
	assert.Len(t, queued, 500)
	require.NoError(t, p.ReconcileOutbox(ctx))
	assert.Zero(t, countDocs(t, p, "wide", "outbox"), "the outbox is delivered and deleted")
}

// The answer to a relay batch is lost after it applied, and the workers
// run every activity stored before the relay tries again. The retry cannot
// apply a second time (its progress condition no longer holds), so the
// activities it carried, consumed and deleted meanwhile, are not created
// again; the relay reads the progress back and goes on, without writing
// anything one item at a time. Every activity runs once.
func TestARelayBatchWhoseAnswerWasLostIsReadBackBeforeGoingOn(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "lost")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("lost"), 0))
	_, token := fetchFor(ctx, t, p, "lost")
	events, work := fanOut("lost", 300)
	var seen atomic.Int32
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return isRelayBatch(r) && seen.Add(1) == 2
	}})
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))
	ran := runActivities(ctx, t, p)
	require.Greater(t, len(ran), 100+99, "the commit's items, and the two first batches', ran")
	require.Less(t, len(ran), 300, "the delivery stopped at the lost answer")

	clock.Advance(time.Hour)
	require.NoError(t, p.ReconcileOutbox(ctx))
	for id, n := range runActivities(ctx, t, p) {
		ran[id] += n
	}
	singles := 0
	for _, r := range log.take() {
		if r.Operation == "CreateItem" && r.PartitionKey == `["lost"]` {
			singles++
		}
	}
	assert.Zero(t, singles, "the lost batch is settled by its progress, not written again item by item")
	assert.Len(t, ran, 300)
	for id, n := range ran {
		assert.Equal(t, 1, n, "activity %d ran %d times", id, n)
	}
	require.NoError(t, p.ReconcileOutbox(ctx))
	assert.Zero(t, countDocs(t, p, "lost", "outbox"))
}

// A relay stops after its first batch (its process dies); another
// process's reconciler takes the outbox over once its beat is old and
// writes only what the first relay had not: no item it delivers is a
// conflict.
func TestARelayTakingOverGoesOnWhereTheLastBatchEnded(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	a := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, a, "taken")
	require.NoError(t, a.EnqueueForOrchestrator(ctx, pokeItem("taken"), 0))
	_, token := fetchFor(ctx, t, a, "taken")
	events, work := fanOut("taken", 500)
	var relayed atomic.Int32
	stop := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusServiceUnavailable, Match: func(r cdb.FakeRequest) bool {
		return isRelayBatch(r) && relayed.Add(1) > 1
	}})
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))
	require.NoError(t, a.Close(), "the relay's process dies after one batch")
	stop()
	before := len(queuedActivities(ctx, t, a, "taken"))
	require.Greater(t, before, 100, "the commit's items and the first batch are stored")
	require.Less(t, before, 500)

	clock.Advance(time.Hour)
	conflicts := 0
	acctLog := logRequests(acct)
	b := newRulesProvider(t, acct, cfg)
	require.NoError(t, b.ReconcileOutbox(ctx))
	for _, r := range acctLog.take() {
		if r.Operation == "CreateItem" && r.PartitionKey == `["taken"]` {
			conflicts++ // the batches never need to fall back to single creates
		}
	}
	assert.Zero(t, conflicts, "the takeover starts past what the first relay's batch stored")
	ran := runActivities(ctx, t, b)
	assert.Len(t, ran, 500)
	for id, n := range ran {
		assert.Equal(t, 1, n, "activity %d ran %d times", id, n)
	}
	assert.Zero(t, countDocs(t, b, "taken", "outbox"))
}

// A wide fan-out whose first activities (those its commit holds) are for
// another kind of worker, in a process whose worker fetches have just been
// taking items: its relay batches write the rest locked for those fetches,
// as many as they take in half a poll interval, and the fetches take them
// without a query or a claim (the lock is the relay's).
func TestAWideFanOutsRelayedItemsAreLockedForThisProcessesFetches(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	warm := lockedStart(ctx, t, p, "warm")
	require.NoError(t, ackScheduling(ctx, t, p, warm, "warm", activities("warm", 16)...))
	require.Len(t, runActivities(ctx, t, p), 16, "the workers' recent pace")
	consume(ctx, t, p, "warm") // its completions

	token := lockedStart(ctx, t, p, "relayed")
	gpu := "gpu"
	acts := make([]cdb.ActivityExecuteMessage, 300)
	for i := range acts {
		acts[i] = activity("relayed", uint64(i+2), "")
		if i < 150 {
			acts[i].Tag = &gpu // more than the commit holds
		}
	}
	log := logRequests(acct)
	require.NoError(t, ackScheduling(ctx, t, p, token, "relayed", acts...))
	locked := 0
	for _, r := range log.take() {
		if isRelayBatch(r) {
			locked += bytes.Count(r.Body, []byte(`"lockToken":"work_relay.`))
		}
	}
	require.Positive(t, locked, "the relay batches locked items for the fetches")
	for i := 0; i < min(locked, 2); i++ {
		w, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, w)
		assert.Nil(t, w.(cdb.ActivityExecuteMessage).Tag)
		assert.True(t, strings.HasPrefix(token, "work_relay."), "the fetch took an item its relay locked for it: %s", token)
	}
	for _, r := range log.take() {
		assert.NotEqual(t, "Query", r.Operation, "a fetch queried for an item its relay locked for it")
	}
}

// The answer to a relay batch that locked items for this process's fetches
// is lost after it applied: the fetches read each lock back before they take
// it (its token is the batch's on every try), and every activity runs once.
func TestARelayBatchWhoseAnswerWasLostIsReadBackBeforeHandOut(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour, Now: clock.Now})
	token := lockedStart(ctx, t, p, "unsure")
	gpu := "gpu"
	acts := make([]cdb.ActivityExecuteMessage, 300)
	for i := range acts {
		acts[i] = activity("unsure", uint64(i+2), "")
		if i < 150 {
			acts[i].Tag = &gpu
		}
	}
	results := make([]func() fetchedWork, 8)
	for i := range results {
		results[i], _ = waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	}
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: isRelayBatch})
	require.NoError(t, ackScheduling(ctx, t, p, token, "unsure", acts...))
	ran := map[uint64]int{}
	for _, result := range results {
		got := result()
		require.NoError(t, got.err)
		require.NotNil(t, got.item)
		act := got.item.(cdb.ActivityExecuteMessage)
		ran[act.ID]++
		require.NoError(t, p.AckWorkItem(ctx, got.token, cdb.ActivityCompletedMessage{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Result: "ok"}))
	}
	clock.Advance(time.Hour) // the relay's retry, and what no fetch took given back
	require.NoError(t, p.ReconcileOutbox(ctx))
	for id, n := range runActivities(ctx, t, p) {
		ran[id] += n
	}
	assert.Len(t, ran, 150, "every default activity ran")
	for id, n := range ran {
		assert.Equal(t, 1, n, "activity %d ran %d times", id, n)
	}
}

// A fan-out wider than its commit batch (its outbox one document) locks,
// in the commit, the items the batch holds for this process's waiting
// fetches, as a narrower one does; before, an outbox made the commit write
// all of them unlocked, to be queried and claimed.
func TestAFanOutWiderThanItsBatchLocksWhatTheBatchHoldsForWaitingFetches(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	token := lockedStart(ctx, t, p, "wider")
	results := make([]func() fetchedWork, 4)
	for i := range results {
		results[i], _ = waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	}
	log := logRequests(acct)
	require.NoError(t, ackScheduling(ctx, t, p, token, "wider", activities("wider", 150)...))
	lockedInCommit := 0
	for _, r := range log.take() {
		if r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"operationType":"Replace","id":"inst"`)) {
			lockedInCommit += bytes.Count(r.Body, []byte(`"lockToken":"work_`))
		}
	}
	assert.Equal(t, len(results), lockedInCommit, "the commit locks an item for each waiting fetch")
	for _, result := range results {
		got := result()
		require.NoError(t, got.err)
		require.NotNil(t, got.item)
	}
}
