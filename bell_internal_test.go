package cdb

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bellClock is a clock a test moves.
type bellClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *bellClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *bellClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const bellTestPoll = 50 * time.Millisecond

// bellProcess is a long-polling provider on acct, on clock: a listener.
func bellProcess(t *testing.T, acct *FakeAccount, clock *bellClock) *CosmosProvider {
	t.Helper()
	p, err := NewProvider(context.Background(), Config{Client: acct.Client(), Now: clock.Now, PollInterval: bellTestPoll})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

var orchestratorWatch = queueWatch{queue: queueOrchestrator, view: "*"}

// heard lists p at the bell and moves the clock until every writer's view
// has it.
func heard(t *testing.T, clock *bellClock, p *CosmosProvider) {
	t.Helper()
	ctx := context.Background()
	ok, err := p.bell.keepListed(ctx)
	require.NoError(t, err)
	require.False(t, ok, "just listed: a writer's view may not have it")
	clock.Advance(bellViewMaxAge)
	ok, err = p.bell.keepListed(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}

// bellCount reads the counter named queue (queueOrchestrator,
// queueWorker, bellChores).
func bellCount(t *testing.T, p *CosmosProvider, queue string) int64 {
	t.Helper()
	resp, err := p.container.ReadItem(context.Background(), NewPartitionKeyString(bellPartitionKey()), bellDocID, nil)
	if IsNotFound(err) {
		return 0
	}
	require.NoError(t, err)
	var doc bellDoc
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	return doc.count(queue)
}

// An idle look of a listener every writer's view lists queries once, then
// skips its query while the bell is quiet; a write of another process
// rings it, and the next look queries.
func TestAnIdleLookSkipsItsQueryUntilTheBellRings(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	listener := bellProcess(t, acct, clock)
	writer := bellProcess(t, acct, clock)
	heard(t, clock, listener)

	quiet, record := listener.quietBell(ctx, orchestratorWatch)
	require.False(t, quiet, "no query recorded yet: the first look queries")
	record()
	quiet, record = listener.quietBell(ctx, orchestratorWatch)
	require.False(t, quiet, "one query read the count: the next settles it")
	record()
	quiet, _ = listener.quietBell(ctx, orchestratorWatch)
	assert.True(t, quiet, "nothing rang since")

	require.NoError(t, writer.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "rung", Orchestration: "O", Input: "{}"}, 0))
	require.Eventually(t, func() bool { return bellCount(t, listener, queueOrchestrator) > 0 }, 5*time.Second, 5*time.Millisecond, "the write rings the bell")
	clock.Advance(bellTestPoll) // past the listener's cached read
	quiet, record = listener.quietBell(ctx, orchestratorWatch)
	assert.False(t, quiet, "the bell rang: the look queries")
	record()
	quiet, record = listener.quietBell(ctx, orchestratorWatch)
	assert.False(t, quiet, "and so does the next: the query right after a ring may read a replica behind the writer's")
	record()
	quiet, _ = listener.quietBell(ctx, orchestratorWatch)
	assert.True(t, quiet, "settled")
}

// Work written without a ring (by a process of an earlier version, or
// made visible by a lock that expired) is found by the look unrungLookEvery
// poll intervals after the last one that queried.
func TestAQuietBellSkipsLooksForABoundedTime(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	listener := bellProcess(t, acct, clock)
	heard(t, clock, listener)
	for range 2 {
		_, record := listener.quietBell(ctx, orchestratorWatch)
		record()
	}

	clock.Advance(unrungLookEvery*bellTestPoll - time.Millisecond)
	quiet, _ := listener.quietBell(ctx, orchestratorWatch)
	assert.True(t, quiet)
	clock.Advance(time.Millisecond)
	quiet, _ = listener.quietBell(ctx, orchestratorWatch)
	assert.False(t, quiet, "a quiet bell defers a look unrungLookEvery poll intervals at most")
}

// A process alone on the container never rings: nobody else listens.
func TestAProcessNobodyElseListensToDoesNotRing(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	alone := bellProcess(t, acct, clock)
	heard(t, clock, alone)

	acct.ResetCounts()
	require.NoError(t, alone.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "unrung", Orchestration: "O", Input: "{}"}, 0))
	require.Never(t, func() bool { return acct.Counts().ByOperation["PatchItem"] > 0 }, 4*bellTestPoll, 5*time.Millisecond, "no ring sent")
	assert.EqualValues(t, 0, bellCount(t, alone, queueOrchestrator))
}

// A listener not yet listed long enough for every writer's view to have
// it does not skip a look, and what it recorded before is forgotten: a
// writer whose view does not list it may have written without a ring.
func TestAListenerNotYetHeardQueriesEveryLook(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	listener := bellProcess(t, acct, clock)
	for range 3 {
		quiet, record := listener.quietBell(ctx, orchestratorWatch)
		require.False(t, quiet, "listed, but not for long enough")
		record()
	}
	clock.Advance(bellViewMaxAge)
	quiet, _ := listener.quietBell(ctx, orchestratorWatch)
	assert.False(t, quiet, "heard now; its first look queries, as none was recorded while it was not heard")
}

// A writer whose view of the listeners is older than bellViewMaxAge reads
// it again before it decides: it rings for a listener listed since.
func TestAWriterRingsForAListenerListedAfterItsLastRead(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	writer, err := NewProvider(ctx, Config{Client: acct.Client(), Now: clock.Now, PollInterval: bellTestPoll, ShortPolling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	require.NoError(t, writer.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "before", Orchestration: "O", Input: "{}"}, 0))
	require.Eventually(t, func() bool {
		writer.bell.mu.Lock()
		defer writer.bell.mu.Unlock()
		return !writer.bell.viewAt.IsZero()
	}, 5*time.Second, 5*time.Millisecond, "the writer read the view: nobody listens")

	listener := bellProcess(t, acct, clock)
	heard(t, clock, listener)
	require.NoError(t, writer.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "after", Orchestration: "O", Input: "{}"}, 0))
	require.Eventually(t, func() bool { return bellCount(t, listener, queueOrchestrator) > 0 }, 5*time.Second, 5*time.Millisecond, "the writer rings for the new listener")
}

// A view read after the clock's reading (the clock went back) is of
// unknown age: the writer reads it again before it decides, and rings for
// a listener listed since.
func TestAWriterWhoseClockWentBackReadsTheViewAgain(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	writerClock := &bellClock{now: time.Now()}
	writer, err := NewProvider(ctx, Config{Client: acct.Client(), Now: writerClock.Now, PollInterval: bellTestPoll, ShortPolling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })

	clock := &bellClock{now: time.Now()}
	listener := bellProcess(t, acct, clock)
	heard(t, clock, listener)
	writerClock.Advance(-time.Minute)
	require.NoError(t, writer.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "after", Orchestration: "O", Input: "{}"}, 0))
	require.Eventually(t, func() bool { return bellCount(t, listener, queueOrchestrator) > 0 }, 5*time.Second, 5*time.Millisecond, "the writer read the view again and rang")
}

// A claim its fetch's caller cut off (a runtime stopping) is given back to
// the queue, and the bell rung: this process's fetches are stopping, so
// only another process takes the item, and a listener's idle looks skip
// their queries until a ring.
func TestAClaimGivenBackAfterItsFetchWasCutOffRingsTheBell(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	listener := bellProcess(t, acct, clock)
	heard(t, clock, listener)
	writer, err := NewProvider(ctx, Config{Client: acct.Client(), Now: clock.Now, PollInterval: bellTestPoll, ShortPolling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	require.NoError(t, writer.EnqueueForWorker(ctx, ActivityExecuteMessage{Instance: "cut", ExecutionID: 1, ID: 1, Name: "A", Input: "{}"}))
	_, token, _, err := writer.FetchWorkItem(ctx, time.Minute, 0, nil, DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotEmpty(t, token)
	require.Eventually(t, func() bool { return bellCount(t, writer, queueWorker) == 1 }, 5*time.Second, 5*time.Millisecond, "the enqueue rang")

	lock, ok := writer.workLocks.Get(token)
	require.True(t, ok)
	clock.Advance(bellTestPoll) // rings of one queue are at most one a quarter poll interval apart
	cause := context.Canceled
	assert.Equal(t, cause, writer.giveBackCutClaim(ctx, lock.doc, token, cause))
	assert.Eventually(t, func() bool { return bellCount(t, writer, queueWorker) == 2 }, 5*time.Second, 5*time.Millisecond, "the give-back rang")
}

// The reconciler's looks across the container (outboxes, deletion
// intents) skip their queries behind a quiet bell once a look found
// nothing: a write of an outbox or an intent by another process rings the
// chores' counter, and one by this process counts too; an outbox found (a
// live relay's, which may die) is looked for every interval until it is
// gone.
func TestTheReconcilerSkipsItsLooksBehindAQuietBell(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	clock := &bellClock{now: time.Now()}
	leader := bellProcess(t, acct, clock)
	heard(t, clock, leader)
	queries := func() int64 {
		acct.ResetCounts()
		require.NoError(t, leader.outbox.reconcile(ctx))
		return acct.Counts().ByOperation["Query"]
	}
	require.Positive(t, queries(), "the first look queries")
	require.Positive(t, queries(), "so does the second: the count it read is not settled yet")
	assert.Zero(t, queries(), "nothing rang since two looks that found nothing")

	writer, err := NewProvider(ctx, Config{Client: acct.Client(), Now: clock.Now, PollInterval: bellTestPoll, ShortPolling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = writer.Close() })
	clock.Advance(bellTestPoll) // the leader's view is read again
	writer.bell.ring(bellChores, clock.Now())
	require.Eventually(t, func() bool { return bellCount(t, writer, bellChores) == 1 }, 5*time.Second, 5*time.Millisecond, "the ring reached the bell")
	assert.Positive(t, queries(), "another process rang")

	live, err := json.Marshal(outboxDoc{ID: "o|live", PK: instancePartitionKey("held"), Type: docOutbox, Instance: "held",
		CreatedAt: clock.Now().UnixMilli(), Owner: "relay-of-another", BeatAt: clock.Now().UnixMilli()})
	require.NoError(t, err)
	_, err = leader.container.CreateItem(ctx, NewPartitionKeyString(instancePartitionKey("held")), live, nil)
	require.NoError(t, err)
	leader.bell.ring(bellChores, clock.Now()) // this process's own write: nobody else listens to it
	assert.Positive(t, queries(), "this process wrote an outbox")
	assert.Positive(t, queries(), "the last look found an outbox: its relay may die")
	_, err = leader.container.DeleteItem(ctx, NewPartitionKeyString(instancePartitionKey("held")), "o|live", nil)
	require.NoError(t, err)
	assert.Positive(t, queries(), "the look that finds it gone")
	assert.Zero(t, queries(), "nothing since")

	clock.Advance(unrungLookEvery * leader.cfg.ReconcileInterval)
	heard(t, clock, leader) // the listing, renewed as the idle looks would
	assert.Positive(t, queries(), "the unrung look, for a write no ring announced")
}

// A fetch of an idle, heard process waits between its looks, each of which
// skips its query while the bell is quiet. Another process's ring wakes it
// through the watcher: the look comes at once and queries, not at the
// view's next idle look (here, with the provider's clock standing still,
// the machine's bound on an idle window: unrungLookEvery poll intervals).
func TestARingWakesAnIdleFetchBeforeItsNextLook(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 4})
	clock := &bellClock{now: time.Now()}
	const poll = time.Second
	listener, err := NewProvider(ctx, Config{Client: acct.Client(), Now: clock.Now, PollInterval: poll})
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close() })
	writer := bellProcess(t, acct, clock)
	heard(t, clock, listener)
	for range 3 { // a fresh look, then the two that settle the count
		item, _, _, err := listener.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item)
		clock.Advance(poll)
	}

	fetched := make(chan *OrchestrationItem, 1)
	go func() {
		item, _, _, err := listener.FetchOrchestrationItem(ctx, time.Minute, time.Minute, nil)
		assert.NoError(t, err)
		fetched <- item
	}()
	require.Eventually(t, func() bool { return listener.bell.skipping(time.Now()) }, 10*time.Second, 5*time.Millisecond,
		"the fetch's look skipped its query: the bell is quiet")
	require.NoError(t, writer.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "rung", Orchestration: "O", Input: "{}"}, 0))

	idleBound := unrungLookEvery * poll
	select {
	case item := <-fetched:
		require.NotNil(t, item)
		assert.Equal(t, "rung", item.Instance)
	case <-time.After(idleBound / 2):
		t.Fatalf("the fetch did not take the rung work within %s; its next look was due %s after the last", idleBound/2, idleBound)
	}
}
