package cdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/providertest"
)

// The Cosmos DB-specific properties of the provider (ARCHITECTURE.md's
// Rules), each shown on the in-memory Cosmos DB with its request counter
// and faults.

// newRulesProvider is a provider on acct, long polling unless cfg says
// otherwise, closed when the test ends.
func newRulesProvider(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config) *cdb.CosmosProvider {
	t.Helper()
	cfg.Client = acct.Client()
	p, err := cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// rulesContext bounds a test that would otherwise hang: two minutes on the
// host the tests were tuned on (idle, 2 cores, -race), longer in proportion
// on a slower one (internal/hostspeed). A 150-key turn of 64 KB values
// takes about 20 s there and outlasted a fixed two minutes with three test
// binaries and the npm server sharing the machine.
func rulesContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(2*time.Minute))
	t.Cleanup(cancel)
	return ctx
}

// requestLog records the requests an account serves, through a fault that
// never fires.
type requestLog struct {
	mu   sync.Mutex
	reqs []cdb.FakeRequest
}

func logRequests(acct *cdb.FakeAccount) *requestLog {
	l := &requestLog{}
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reqs = append(l.reqs, r)
		return false
	}})
	return l
}

func (l *requestLog) take() []cdb.FakeRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

func (l *requestLog) ops() []string {
	var ops []string
	for _, r := range l.take() {
		ops = append(ops, r.Operation)
	}
	return ops
}

func pokeItem(instance string) cdb.WorkItem {
	return cdb.ExternalRaisedMessage{Instance: instance, Name: "poke", Data: "{}"}
}

// fanOut is a turn of n ActivityScheduled events (ids from 2) and the n
// matching ActivityExecuteMessage items.
func fanOut(instance string, n int) ([]cdb.Event, []cdb.WorkItem) {
	var events []cdb.Event
	var work []cdb.WorkItem
	for i := 0; i < n; i++ {
		id := uint64(i + 2)
		events = append(events, cdb.Event{EventID: id, InstanceID: instance, ExecutionID: 1, DuroxideVersion: "0.1.29",
			Kind: cdb.ActivityScheduled{Name: "Work", Input: fmt.Sprintf(`{"n":%d}`, i)}})
		work = append(work, cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: id, Name: "Work", Input: fmt.Sprintf(`{"n":%d}`, i)})
	}
	return events, work
}

func countDocs(t *testing.T, p *cdb.CosmosProvider, instance, docType string) int {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk AND c.type = @t",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}, {Name: "@t", Value: docType}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	var n int
	require.NoError(t, json.Unmarshal(res.Items[0], &n))
	return n
}

// One ack, one batch: a turn of 300 events and 300 activities commits in
// one batch of at most 100 operations; the activities folded into the
// outbox all become fetchable; a failure of that batch leaves nothing
// behind.
func TestR1OneAckOneBatch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "r1")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r1"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	log := logRequests(acct)
	events, work := fanOut("r1", 300)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))

	var batches []cdb.FakeRequest
	for _, r := range log.take() {
		if r.Operation == "Batch" && !isRelayBatch(r) { // after the commit, its relay delivers the overflow
			batches = append(batches, r)
		}
	}
	require.Len(t, batches, 1, "the turn commits in exactly one transactional batch")
	var ops []json.RawMessage
	require.NoError(t, json.Unmarshal(batches[0].Body, &ops))
	assert.LessOrEqual(t, len(ops), cdb.MaxBatchOperations)
	t.Logf("the commit batch had %d operations", len(ops))

	history, err := p.Read(ctx, "r1")
	require.NoError(t, err)
	assert.Len(t, history, 301, "OrchestrationStarted and the 300 scheduled events")

	seen := map[string]bool{}
	for {
		w, wtoken, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		if w == nil {
			break
		}
		act := w.(cdb.ActivityExecuteMessage)
		assert.False(t, seen[act.Input], "activity %s fetched twice", act.Input)
		seen[act.Input] = true
		require.NoError(t, p.AckWorkItem(ctx, wtoken, nil))
	}
	assert.Len(t, seen, 300, "every activity becomes fetchable")
}

func TestR1FailedCommitLeavesNothingBehind(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "r1b")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r1b"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)

	// Something already holds the id the turn's history document takes, so
	// one operation of the commit fails and the batch must roll back.
	_, err = p.Container().CreateItem(ctx, cdb.NewPartitionKeyString("r1b"), []byte(`{"id":"h|1|2","pk":"r1b","type":"squatter"}`), nil)
	require.NoError(t, err)
	before := acct.Counts()

	events, work := fanOut("r1b", 300)
	err = p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrDuplicateEvent, "the squatter holds the turn's first history id")

	assert.Equal(t, 0, countDocs(t, p, "r1b", "work"), "no activity was written")
	assert.Equal(t, 0, countDocs(t, p, "r1b", "outbox"), "no outbox was written")
	assert.Equal(t, 1, countDocs(t, p, "r1b", "msg"), "the poke is still queued")
	history, err := p.Read(ctx, "r1b")
	require.NoError(t, err)
	assert.Len(t, history, 1, "no event was appended")
	again, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, again, "the failed commit did not release the lock")
	assert.Equal(t, before.ByOperation["Batch"]+1, acct.Counts().ByOperation["Batch"], "one batch was tried, and nothing else written")
}

// Outbox: the connection drops right after the parent's commit, and the
// process dies before delivering; the child's start still arrives, exactly
// once, through another process's reconciler.
func TestR2OutboxDeliversAfterALostResponseAndACrash(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem("parent"), 0))
	_, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)

	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1,
		Match: func(r cdb.FakeRequest) bool { return r.Operation == "Batch" && r.PartitionKey == `["parent"]` }})
	removeChildFault := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultDropConnection,
		Match: func(r cdb.FakeRequest) bool {
			return r.Operation == "CreateItem" && r.PartitionKey == `["parent::child"]`
		}})

	child := cdb.StartOrchestrationMessage{Instance: "parent::child", Orchestration: "Child", Input: "{}",
		ParentInstance: ptrTo("parent"), ParentID: ptrTo(uint64(2)), ExecutionID: 1}
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{providertest.StartedEvent("parent", 1)}, nil, []cdb.WorkItem{child}, providertest.TestOrchMetadata(), nil),
		"the commit happened; the lost response is resolved by reading it back")
	require.NoError(t, a.Close(), "the process dies with the child's start undelivered")
	assert.Equal(t, 0, countDocs(t, a, "parent::child", "msg"))
	assert.Equal(t, 1, countDocs(t, a, "parent", "outbox"))

	removeChildFault()
	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, OutboxMinAge: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, b.ReconcileOutbox(ctx))
	require.NoError(t, b.ReconcileOutbox(ctx), "reconciling again is harmless")
	assert.Equal(t, 1, countDocs(t, b, "parent::child", "msg"), "the child's start arrived exactly once")
	assert.Equal(t, 0, countDocs(t, b, "parent", "outbox"), "the delivered outbox is gone")

	item, _, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "parent::child", item.Instance)
	assert.Equal(t, "Child", item.OrchestrationName)
}

func ptrTo[T any](v T) *T { return &v }

// Locks: two processes on one account fetch the same instance: one wins; when
// its lock expires the other takes over, and the first one's ack fails.
// Both processes share a clock the test moves, so the lock cannot expire
// while the two race (a loaded machine made two winners of a 300 ms lock)
// and expires exactly when the test says.
func TestR3TwoProcessesOneLock(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: 10 * time.Millisecond, Now: clock.Now})
	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: 10 * time.Millisecond, Now: clock.Now})
	require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem("shared"), 0))

	const lock = 300 * time.Millisecond
	type result struct {
		item  *cdb.OrchestrationItem
		token string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, p := range []*cdb.CosmosProvider{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item, token, _, err := p.FetchOrchestrationItem(ctx, lock, 0, nil)
			assert.NoError(t, err)
			results[i] = result{item, token}
		}()
	}
	wg.Wait()
	winners := 0
	winner, loser := a, b
	var winnerToken string
	for i, r := range results {
		if r.item != nil {
			winners++
			winnerToken = r.token
			if i == 1 {
				winner, loser = b, a
			}
		}
	}
	require.Equal(t, 1, winners, "exactly one process holds the instance")

	clock.Advance(lock - time.Millisecond)
	item, _, _, err := loser.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "until the lock expires the other process cannot take the instance")

	clock.Advance(20 * time.Millisecond) // past the expiry and the 10 ms poll window
	item, token, _, err := loser.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "after the lock expires the other process takes over")
	assert.NotEqual(t, winnerToken, token)

	err = winner.AckOrchestrationItem(ctx, winnerToken, 1, []cdb.Event{providertest.StartedEvent("shared", 1)}, nil, nil, providertest.TestOrchMetadata(), nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the first holder's lock is gone")
	assert.False(t, cdb.IsRetryable(err))
	require.NoError(t, loser.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("shared", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
}

// Bounded fetch: with 10,000 messages queued for other instances, a fetch
// reads a bounded number of documents, and no query that spans partitions
// orders, limits or aggregates.
func TestR4BoundedFetch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 4})
	// No reconciler tick inside the measurement: its filter queries are
	// cross-partition by design.
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	for i := 0; i < 10000; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(fmt.Sprintf("other-%04d", i%2000)), 0))
	}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("mine"), 0))
	log := logRequests(acct)
	acct.ResetCounts()

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	counts := acct.Counts()
	const perRange = 32 // Config.CandidatesPerRange's default
	assert.LessOrEqual(t, counts.DocumentsReturned, int64(4*perRange+10), "documents read: the candidates of each range and the instance's own")
	assert.LessOrEqual(t, counts.Requests, int64(4+2), "one candidate query per range, the lock batch and the load")
	t.Logf("a fetch over a 10,001-message backlog on 4 ranges: %d requests, %d documents returned (%d evaluated by the index-less fake)",
		counts.Requests, counts.DocumentsReturned, counts.DocumentsScanned)

	for _, r := range log.take() {
		if r.Operation != "Query" || r.PartitionKey != "" || r.PartitionKeyRangeID != "" {
			continue
		}
		q := strings.ToUpper(string(r.Body))
		for _, word := range []string{"ORDER BY", "TOP ", "COUNT(", "SUM(", "MAX(", "MIN(", "AVG(", "DISTINCT", "OFFSET"} {
			assert.NotContains(t, q, word, "a cross-partition query must only filter: %s", r.Body)
		}
	}
	assert.Zero(t, counts.CrossPartitionQueries, "the fetch path sends no cross-partition query at all")
}

// Round trips: requests per operation, and an idle process's request rate.
func TestR5RequestBudget(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "budget")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("budget"), 0))

	measure := func(f func()) int64 {
		before := acct.Counts().Requests
		f()
		return acct.Counts().Requests - before
	}
	var token string
	fetchCached := measure(func() {
		var item *cdb.OrchestrationItem
		var err error
		item, token, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Len(t, item.History, 1)
	})
	_, work := fanOut("budget", 1)
	ack := measure(func() {
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{{EventID: 2, InstanceID: "budget", ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Work", Input: `{"n":0}`}}}, work, nil, cdb.ExecutionMetadata{}, nil))
	})
	var wtoken string
	workerFetch := measure(func() {
		var w cdb.WorkItem
		var err error
		w, wtoken, _, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, w)
	})
	workerAck := measure(func() {
		require.NoError(t, p.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: "budget", ExecutionID: 1, ID: 2, Result: "ok"}))
	})
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	fetchFresh := measure(func() {
		item, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Len(t, item.History, 2, "the other process loads the history")
	})
	t.Logf("requests: fetch %d (history cached) / %d (loaded), ack %d, worker fetch %d, worker ack %d", fetchCached, fetchFresh, ack, workerFetch, workerAck)
	assert.LessOrEqual(t, fetchCached, int64(2))
	assert.LessOrEqual(t, fetchFresh, int64(3))
	assert.Equal(t, int64(1), ack)
	assert.LessOrEqual(t, workerFetch, int64(2))
	assert.Equal(t, int64(1), workerAck)
}

// Round trips: an idle process queries each queue at most once per
// PollInterval of its clock, whatever its dispatcher count. The clock moves
// only when the test moves it, one PollInterval at a time, so the bound is
// exact and no scheduler delay can add or remove a poll window (the
// wall-clock version, "about 1 per second over 3 s", failed when a loaded
// machine started the dispatchers late). Waiting fetches still sleep on
// real timers, of at most a PollInterval of the clock's time; the test
// gives them that between moves.
//
// The runtime gives each worker dispatcher its own session owner, so the
// worker fetches are checked both without a session config and with one
// owner per dispatcher: an idle queue is idle whoever asks.
//
// With process leases (a membership renewed every 20 s here, so not within
// the test), the idle look alternates between the process's share and the
// whole queue: still one query per queue per interval.
func TestR5IdleProcessPollsOncePerIntervalPerQueue(t *testing.T) {
	for _, c := range []struct{ withSessions, leases bool }{{false, false}, {true, false}, {true, true}} {
		withSessions := c.withSessions
		t.Run(fmt.Sprintf("sessions=%v,processLeases=%v", withSessions, c.leases), func(t *testing.T) {
			session := func(int) *cdb.SessionFetchConfig { return nil }
			if withSessions {
				session = func(i int) *cdb.SessionFetchConfig {
					return &cdb.SessionFetchConfig{OwnerID: fmt.Sprintf("worker-%d", i), LockTimeout: time.Minute}
				}
			}
			var leases *cdb.ProcessLeaseOptions
			if c.leases {
				leases = &cdb.ProcessLeaseOptions{LeaseDuration: time.Minute}
			}
			requests, queries, intervals := idleRequests(t, 16, session, leases)
			t.Logf("16 dispatchers per queue, idle for %d poll intervals: %d requests, %d of them queries", intervals, requests, queries)
			assert.Positive(t, queries, "an idle process still polls")
			assert.LessOrEqual(t, queries, int64(2*(intervals+1)), "at most one query per queue per poll interval, whatever the dispatcher count")
			// The rest is the queue bell's: this process's listing (created
			// with the bell document here) and a read of it per interval.
			assert.LessOrEqual(t, requests-queries, int64(intervals+1+3), "at most a read of the bell per poll interval besides")
		})
	}
}

// idleRequests runs dispatchers fetches per queue on an empty store for
// ten poll intervals of a test clock and counts the requests they make.
func idleRequests(t *testing.T, dispatchers int, session func(int) *cdb.SessionFetchConfig, leases *cdb.ProcessLeaseOptions) (requests, queries int64, intervals int) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	const interval = 20 * time.Millisecond
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: interval, ReconcileInterval: time.Hour, Now: clock.Now, ProcessLeases: leases})
	if leases != nil {
		// Another live process fetching the same queues, so this one's
		// idle looks use its share.
		other := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour, ProcessLeases: leases})
		for _, q := range []*cdb.CosmosProvider{p, other} {
			_, _, _, err := q.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			_, _, _, err = q.FetchWorkItem(ctx, time.Minute, 0, session(0), cdb.DefaultOnlyFilter())
			require.NoError(t, err)
		}
		for _, q := range []*cdb.CosmosProvider{p, other, p} {
			require.NoError(t, cdb.RenewProcessLeaseForTest(ctx, q))
		}
		st, err := p.ProcessLeases()
		require.NoError(t, err)
		require.Len(t, st.Shares["orchestrator/*"], 128, "the process's idle looks are at its share")
	}
	_, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err) // warm the partition key range cache
	_, _, _, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)

	const idle = 10 * interval
	before := acct.Counts()
	var wg sync.WaitGroup
	for i := 0; i < dispatchers; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, idle, nil)
			assert.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			_, _, _, err := p.FetchWorkItem(ctx, time.Minute, idle, session(i), cdb.DefaultOnlyFilter())
			assert.NoError(t, err)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(3 * interval): // the waiters wake and look
			clock.Advance(interval)
			intervals++
		}
	}
	after := acct.Counts()
	return after.Requests - before.Requests, after.ByOperation["Query"] - before.ByOperation["Query"], intervals
}

// The Cosmos DB provider's long poll ends by its clock: a fetch with a poll
// timeout of an hour keeps waiting through several polls while its clock is
// short of the hour, and returns no work, by itself, once the clock passes
// it. That is the
// long-poll upper bound of duroxide's long_polling module, checked on the
// long-polling provider without timing it.
func TestLongPollReturnsWhenItsClockPassesThePollTimeout(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	const interval = 20 * time.Millisecond
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: interval, ReconcileInterval: time.Hour, Now: clock.Now})
	type result struct {
		item *cdb.OrchestrationItem
		err  error
	}
	returned := make(chan result, 1)
	go func() {
		item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, time.Hour, nil)
		returned <- result{item, err}
	}()
	// Let it poll a few times, well within the hour: it must keep waiting.
	for polls := acct.Counts().Requests; acct.Counts().Requests < polls+3; {
		select {
		case r := <-returned:
			t.Fatalf("the fetch returned before its poll timeout on the provider's clock: %+v", r)
		case <-time.After(3 * interval):
			clock.Advance(interval) // opens the next poll window
		}
	}
	clock.Advance(time.Hour)
	r := <-returned
	require.NoError(t, r.err, "the poll timeout, not the test's context, ends the fetch")
	assert.Nil(t, r.item)
}

// Any instance id: instance ids with characters Cosmos DB ids refuse,
// unicode, and 1,000 characters round-trip; ids that cannot be stored are
// refused before any request.
func TestR6AnyInstanceID(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	ids := []string{
		"orders/2026/42", `back\slash`, "what?", "hash#tag", "ünïcödé-日本語-🚀",
		"spaces and %20 percent", strings.Repeat("long-", 200), strings.Repeat("é", 1000),
	}
	for _, id := range ids {
		providertest.CreateInstance(ctx, t, p, id)
		info, err := p.GetInstanceInfo(ctx, id)
		require.NoError(t, err, "%.40q", id)
		assert.Equal(t, id, info.InstanceID)
		history, err := p.Read(ctx, id)
		require.NoError(t, err)
		require.Len(t, history, 1)
		assert.Equal(t, id, history[0].InstanceID)
	}
	listed, err := p.ListInstances(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, ids, listed)

	before := acct.Counts().Requests
	for _, bad := range []string{"", "bad-\xff-utf8", strings.Repeat("x", 70*1024)} {
		err := p.EnqueueForOrchestrator(ctx, providertest.StartItem(bad), 0)
		require.Error(t, err)
		assert.False(t, cdb.IsRetryable(err), "%v", err)
		assert.Contains(t, err.Error(), "instance id")
		assert.ErrorIs(t, fmt.Errorf("caller: %w", err), cdb.ErrInvalidInput)
	}
	assert.Equal(t, before, acct.Counts().Requests, "nothing was sent for ids that cannot be stored")
}

// A batch of an instance whose execution continued as new always holds the
// ContinueAsNew message, even when only older messages made it into the
// candidate page: without it the runtime would take the execution for
// finished and consume the messages meant for the next one.
func TestBatchAfterContinueAsNewHoldsTheContinueAsNewMessage(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, CandidatesPerRange: 1})
	providertest.CreateInstance(ctx, t, p, "eternal")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("eternal"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)

	// A queue message arrives during the turn that continues as new, so it
	// is older than the ContinueAsNew message the turn writes.
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "eternal", Name: "inbox", Data: "keep me"}, 0))
	can := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: "eternal", ExecutionID: 1, Kind: cdb.OrchestrationContinuedAsNew{Input: "next"}}},
		nil, []cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: "eternal", Orchestration: "TestOrch", Input: "next"}},
		cdb.ExecutionMetadata{Status: &can, Output: ptrTo("next")}, nil))

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Contains(t, messageKinds(item), "ContinueAsNew", "the batch holds the ContinueAsNew message")
}

// Outbox, exactly once: a message a relay delivers again after its target
// consumed it (a process died between delivering and deleting its outbox)
// is refused, not processed twice.
func TestR2RedeliveredMessageIsNotProcessedTwice(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("parent"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	child := cdb.StartOrchestrationMessage{Instance: "parent::child", Orchestration: "Child", Input: "{}",
		ParentInstance: ptrTo("parent"), ParentID: ptrTo(uint64(2)), ExecutionID: 1}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("parent", 1)},
		nil, []cdb.WorkItem{child}, providertest.TestOrchMetadata(), nil))

	// Keep a copy of the delivered start, as the outbox still describes it.
	pk := cdb.NewPartitionKeyString("parent::child")
	res, err := p.Container().QueryItems(ctx, "SELECT * FROM c WHERE c.pk = @pk AND c.type = 'msg'",
		[]cdb.QueryParameter{{Name: "@pk", Value: "parent::child"}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	delivered := res.Items[0]

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "parent::child", item.Instance)
	md := cdb.ExecutionMetadata{OrchestrationName: ptrTo("Child"), OrchestrationVersion: ptrTo("1.0.0"), ParentInstanceID: ptrTo("parent")}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("parent::child", 1)}, nil, nil, md, nil))

	// A late relay delivers the same document again: the marker its
	// consumption left refuses the copy.
	_, err = p.Container().CreateItem(ctx, pk, delivered, nil)
	require.True(t, cdb.IsConflict(err), "%v", err)
	again, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, again, "nothing is handed to the runtime")
	assert.Equal(t, 0, countDocs(t, p, "parent::child", "msg"))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("parent::child"), 0))
	next, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, next, "new messages still flow")
	require.Len(t, next.Messages, 1)
	assert.Equal(t, "ExternalRaised", next.Messages[0].Kind())
}

// A message that overtakes its instance's start is parked for the start
// instead of being consumed as an unknown instance's, and leaves the queue
// while it waits: the start's fetch brings it back into its batch at once,
// in order, with no attempt spent on being parked.
func TestMessageBeforeItsStartWaitsForTheStart(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstanceMessage{Instance: "late", Reason: "changed my mind"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "no start yet: the cancel waits")
	assert.Equal(t, 1, countDocs(t, p, "late", "msg"), "and is still queued")

	clock.Advance(250 * time.Millisecond)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("late"), 0))
	item, _, attempts, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start's fetch takes the parked cancel with it")
	assert.Equal(t, []string{"CancelInstance", "StartOrchestration"}, messageKinds(item), "the start's batch holds the cancel, in order")
	assert.EqualValues(t, 1, attempts, "parking the cancel cost it no attempt")
}

// Large payloads: a turn bigger than a batch holds commits atomically: its
// events are staged in parts before the commit, which references them; a
// failed commit leaves nothing a reader sees.
func TestR7LargeTurnsStageTheirHistory(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	big := strings.Repeat("x", 1200*1024)

	t.Run("an activity whose input is in history and in its work item", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "r7")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r7"), 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		log := logRequests(acct)
		scheduled := cdb.Event{EventID: 2, InstanceID: "r7", ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Big", Input: big}}
		work := cdb.ActivityExecuteMessage{Instance: "r7", ExecutionID: 1, ID: 2, Name: "Big", Input: big}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{scheduled}, []cdb.WorkItem{work}, nil, cdb.ExecutionMetadata{}, nil),
			"2.4 MB of payload commits: the history goes ahead in a staged part")
		var batches int
		for _, r := range log.take() {
			if r.Operation == "Batch" {
				batches++
			}
		}
		assert.Equal(t, 1, batches, "still one commit batch")

		history, err := p.Read(ctx, "r7")
		require.NoError(t, err)
		require.Len(t, history, 2)
		assert.Equal(t, big, history[1].Kind.(cdb.ActivityScheduled).Input)
		w, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, w)
		assert.Len(t, w.(cdb.ActivityExecuteMessage).Input, len(big))

		other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
		require.NoError(t, other.EnqueueForOrchestrator(ctx, pokeItem("r7"), 0))
		item, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Nil(t, item.HistoryError)
		assert.Len(t, item.History, 2, "a process without the cache loads the staged part")
	})

	t.Run("a turn of several megabytes", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "r7-many")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r7-many"), 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		var events []cdb.Event
		for i := 0; i < 3; i++ {
			events = append(events, cdb.Event{EventID: uint64(i + 2), InstanceID: "r7-many", ExecutionID: 1,
				Kind: cdb.ActivityScheduled{Name: "Big", Input: fmt.Sprintf("%d%s", i, big)}})
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, cdb.ExecutionMetadata{}, nil))
		history, err := p.Read(ctx, "r7-many")
		require.NoError(t, err)
		require.Len(t, history, 4)
		for i := 0; i < 3; i++ {
			assert.Equal(t, fmt.Sprintf("%d%s", i, big), history[i+1].Kind.(cdb.ActivityScheduled).Input)
		}
	})

	t.Run("a failed commit leaves nothing a reader sees", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "r7-fail")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r7-fail"), 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		_, err = p.Container().CreateItem(ctx, cdb.NewPartitionKeyString("r7-fail"), []byte(`{"id":"h|1|2","pk":"r7-fail","type":"squatter"}`), nil)
		require.NoError(t, err)
		scheduled := cdb.Event{EventID: 2, InstanceID: "r7-fail", ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Big", Input: big}}
		require.ErrorIs(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{scheduled}, nil, nil, cdb.ExecutionMetadata{}, nil), cdb.ErrDuplicateEvent,
			"the squatter holds the turn's history id")
		history, err := p.Read(ctx, "r7-fail")
		require.NoError(t, err)
		assert.Len(t, history, 1, "the staged part is not history: nothing references it")
	})
}
