package cdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Eager activities (ARCHITECTURE.md, Eager activities): a turn's worker
// items that this process's waiting worker fetches will take are written
// locked to it in the commit and handed over without a query or a claim;
// in the store they are exactly items this process claimed.

// fetchedWork is what a worker fetch returned.
type fetchedWork struct {
	item     cdb.WorkItem
	token    string
	attempts uint32
	err      error
}

// waitingWorker runs a long-polling worker fetch in p with lock, as an idle
// dispatcher does, and returns once it waits; result waits for what it took.
func waitingWorker(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, lock time.Duration, tags cdb.TagFilter) (result func() fetchedWork, stop func()) {
	t.Helper()
	res, stop := waitingFetch(ctx, t, p, "worker", func(ctx context.Context) any {
		item, token, attempts, err := p.FetchWorkItem(ctx, lock, time.Hour, nil, tags)
		return fetchedWork{item, token, attempts, err}
	})
	return func() fetchedWork { return res().(fetchedWork) }, stop
}

// lockedStart fetches the start of a TestOrch instance from p, its lock
// token.
func lockedStart(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string) string {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	return token
}

// ackScheduling acks the first turn of instance, scheduling acts.
func ackScheduling(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, token, instance string, acts ...cdb.ActivityExecuteMessage) error {
	t.Helper()
	items := make([]cdb.WorkItem, len(acts))
	for i, a := range acts {
		items[i] = a
	}
	return p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(instance, 1)}, items, nil, providertest.TestOrchMetadata(), nil)
}

// firstTurnAndAWaitingWorker is a provider with cfg on a new account,
// instance's first turn fetched (its lock token), and a worker fetch of
// the provider waiting (its result).
func firstTurnAndAWaitingWorker(t *testing.T, cfg cdb.Config, instance string) (context.Context, *cdb.FakeAccount, *cdb.CosmosProvider, string, func() fetchedWork) {
	t.Helper()
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cfg)
	token := lockedStart(ctx, t, p, instance)
	result, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	return ctx, acct, p, token, result
}

// ackActivity acks the activity got took with a result.
func ackActivity(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, got fetchedWork) {
	t.Helper()
	act := got.item.(cdb.ActivityExecuteMessage)
	require.NoError(t, p.AckWorkItem(ctx, got.token, cdb.ActivityCompletedMessage{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Result: "ok"}))
}

// crashableProvider is a provider with cfg on acct whose process can be
// killed: crash cuts its transport, so nothing it sends afterwards reaches
// the account (as a killed process's requests), then closes it.
func crashableProvider(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config) (p *cdb.CosmosProvider, crash func()) {
	t.Helper()
	var dead atomic.Bool
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: cutTransport{next: acct.Transport(), dead: &dead},
		Retry: cdb.RetryOptions{MaxAttempts: 1}})
	require.NoError(t, err)
	cfg.Client = client
	p, err = cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	crash = func() {
		dead.Store(true)
		_ = p.Close()
	}
	t.Cleanup(crash)
	return p, crash
}

// cutTransport fails every request once dead is set.
type cutTransport struct {
	next http.RoundTripper
	dead *atomic.Bool
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.dead.Load() {
		return nil, errors.New("the process was killed")
	}
	return c.next.RoundTrip(r)
}

// eventuallyWork fetches from p, without waiting in the fetch, until it
// takes an item (within 10 s); msgAndArgs say what that shows.
func eventuallyWork(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, msgAndArgs ...any) fetchedWork {
	t.Helper()
	var got fetchedWork
	require.Eventually(t, func() bool {
		got.item, got.token, got.attempts, got.err = p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		return got.err != nil || got.item != nil
	}, 10*time.Second, 20*time.Millisecond, msgAndArgs...)
	require.NoError(t, got.err)
	return got
}

// eventuallyTurn is eventuallyWork for an orchestration item.
func eventuallyTurn(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, msgAndArgs ...any) fetchedTurn {
	t.Helper()
	var got fetchedTurn
	require.Eventually(t, func() bool {
		got.item, got.token, got.attempts, got.err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		return got.err != nil || got.item != nil
	}, 10*time.Second, 20*time.Millisecond, msgAndArgs...)
	require.NoError(t, got.err)
	return got
}

// ackFirstTurn acks the first turn of a TestOrch instance, scheduling
// nothing.
func ackFirstTurn(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, token, instance string) {
	t.Helper()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(instance, 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
}

// workDocs are the worker items of instance as stored.
func workDocs(t *testing.T, p *cdb.CosmosProvider, instance string) []map[string]any {
	t.Helper()
	return storedDocs(t, p, instance, "work")
}

// storedDocs are instance's documents of one type as stored.
func storedDocs(t *testing.T, p *cdb.CosmosProvider, instance, docType string) []map[string]any {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT * FROM c WHERE c.pk = @pk AND c.type = @type",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}, {Name: "@type", Value: docType}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	docs := make([]map[string]any, len(res.Items))
	for i, raw := range res.Items {
		require.NoError(t, json.Unmarshal(raw, &docs[i]))
	}
	return docs
}

func TestAnActivityAWaitingFetchWillTakeIsHandedOverWithoutAQueryOrAClaim(t *testing.T) {
	ctx, acct, p, token, result := firstTurnAndAWaitingWorker(t, cdb.Config{}, "eager")

	acct.ResetCounts()
	require.NoError(t, ackScheduling(ctx, t, p, token, "eager", activity("eager", 2, "")))
	got := result()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	assert.Equal(t, uint64(2), got.item.(cdb.ActivityExecuteMessage).ID)
	assert.Equal(t, uint32(1), got.attempts, "counted as a claim counts it")
	counts := acct.Counts()
	assert.Equal(t, map[string]int64{"Batch": 1}, counts.ByOperation, "the commit's batch alone: no query, no claim")

	docs := workDocs(t, p, "eager")
	require.Len(t, docs, 1)
	assert.Equal(t, got.token, docs[0]["lockToken"], "locked to the fetch in the store, as a claim would be")
	assert.EqualValues(t, 1, docs[0]["attempts"])

	require.NoError(t, p.RenewWorkItemLock(ctx, got.token, time.Minute))
	ackActivity(ctx, t, p, got)
	assert.Empty(t, workDocs(t, p, "eager"))
}

// Items are locked for no more than this process's fetches take within an
// item's patience less a poll interval, and at least one per dispatcher: a
// fresh process with one fetch waiting with a minute's lock (patience
// 30 s), whose turnaround is not known yet (a poll interval, a second,
// assumed), locks 29 of a turn's 32 items; the rest wait in the queue,
// unlocked, for whoever looks.
func TestItemsBeyondWhatTheFetchesTakeAreQueuedUnlocked(t *testing.T) {
	ctx, acct, p, token, result := firstTurnAndAWaitingWorker(t, cdb.Config{}, "many")

	require.NoError(t, ackScheduling(ctx, t, p, token, "many", activities("many", 32)...))
	got := result()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	var locked []string
	for _, d := range workDocs(t, p, "many") {
		if tok, _ := d["lockToken"].(string); tok != "" {
			locked = append(locked, tok)
		}
	}
	assert.Len(t, locked, 29, "one fetch at a second a take: what it takes in 29 s")
	assert.Contains(t, locked, got.token)

	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	for range 3 {
		item, _, attempts, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, item, "the others are anyone's")
		assert.Equal(t, uint32(1), attempts)
	}
}

// A dispatcher acking an item fetches again next: an item a commit writes
// meanwhile is locked for that fetch, not queued for whoever queries.
func TestAnItemWrittenWhileAWorkerAcksIsLockedForItsNextFetch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var hold holdingTransport
	hold.next = acct.Transport()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: &hold})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	tokenA := lockedStart(ctx, t, p, "acking")
	resultA, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	require.NoError(t, ackScheduling(ctx, t, p, tokenA, "acking", activity("acking", 2, "")))
	gotA := resultA()
	require.NoError(t, gotA.err)
	require.NotNil(t, gotA.item)
	tokenB := lockedStart(ctx, t, p, "next")

	inAck, release := hold.holdNext(`["acking"]`)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		ackActivity(ctx, t, p, gotA)
	}()
	<-inAck
	require.NoError(t, ackScheduling(ctx, t, p, tokenB, "next", activity("next", 2, "")))
	docs := workDocs(t, p, "next")
	require.Len(t, docs, 1)
	assert.NotNil(t, docs[0]["lockToken"], "locked for the acking dispatcher's next fetch")
	close(release)
	<-acked

	acct.ResetCounts()
	item, _, attempts, err := p.FetchWorkItem(ctx, time.Minute, time.Hour, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "next", item.(cdb.ActivityExecuteMessage).Instance)
	assert.Equal(t, uint32(1), attempts)
	assert.Zero(t, acct.Counts().Requests, "handed over without a query or a claim")
}

// holdingTransport holds, when armed, the next request to one partition
// key until released, so a test can act while it is in flight.
type holdingTransport struct {
	next    http.RoundTripper
	mu      sync.Mutex
	pk      string
	entered chan struct{}
	release chan struct{}
}

// holdNext arms the transport for the next request to pk: entered closes
// when it arrives, and it goes on once release is closed.
func (h *holdingTransport) holdNext(pk string) (entered chan struct{}, release chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pk, h.entered, h.release = pk, make(chan struct{}), make(chan struct{})
	return h.entered, h.release
}

func (h *holdingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	held := h.pk != "" && r.Header.Get("x-ms-documentdb-partitionkey") == h.pk
	entered, release := h.entered, h.release
	if held {
		h.pk = ""
	}
	h.mu.Unlock()
	if held {
		close(entered)
		<-release
	}
	return h.next.RoundTrip(r)
}

// An item locked for a fetch that never took it (the process died between
// the commit and the hand-over) is hidden until its lock expires, then
// taken by any process, its attempt counted: as a claimed item would be.
func TestAnEagerItemOfAProcessThatDiedRunsElsewhereOnceItsLockExpires(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	const lock = 500 * time.Millisecond
	dying, crash := crashableProvider(t, acct, cdb.Config{})
	token := lockedStart(ctx, t, dying, "orphaned")
	_, stop := waitingWorker(ctx, t, dying, lock, cdb.DefaultOnlyFilter())
	cdb.AfterAckPlannedForTest(dying, stop) // the fetch goes away after the item is locked for it
	require.NoError(t, ackScheduling(ctx, t, dying, token, "orphaned", activity("orphaned", 2, "")))
	crash()
	survivor := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	docs := workDocs(t, survivor, "orphaned")
	require.Len(t, docs, 1)
	require.NotNil(t, docs[0]["lockToken"], "locked for the fetch that left")
	lockedUntil := time.UnixMilli(int64(docs[0]["lockedUntil"].(float64)))
	if time.Now().Before(lockedUntil.Add(-100 * time.Millisecond)) {
		item, _, _, err := survivor.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		assert.Nil(t, item, "hidden while its lock stands")
	}
	got := eventuallyWork(ctx, t, survivor)
	assert.Equal(t, uint32(2), got.attempts, "the eager lock counted one attempt, this claim another")
	ackActivity(ctx, t, survivor, got)
}

// A commit whose answer is lost still hands its eager items over: it is
// found committed, and each item is read back and taken only if it carries
// its token.
func TestAnEagerItemOfACommitWhoseAnswerWasLostIsReadBackAndHandedOver(t *testing.T) {
	ctx, acct, p, token, result := firstTurnAndAWaitingWorker(t, cdb.Config{}, "lossy")

	loseFirstResponse(acct, "Batch", "ActivityExecute")
	require.NoError(t, ackScheduling(ctx, t, p, token, "lossy", activity("lossy", 2, "")))
	got := result()
	require.NoError(t, got.err)
	require.NotNil(t, got.item, "handed over after a read back, not left to its lock's expiry")
	assert.Equal(t, uint32(1), got.attempts)
	ackActivity(ctx, t, p, got)
}

// A retry of an ack whose first try committed unseen writes the same
// tokens: the items the first try locked are handed over by the retry.
func TestARetriedAckHandsOverTheItemsItsFirstTryLocked(t *testing.T) {
	ctx, acct, p, token, result := firstTurnAndAWaitingWorker(t, cdb.Config{}, "retried")

	loseFirstResponse(acct, "Batch", "ActivityExecute")
	// A status the client does not retry, so the test does not wait out
	// its backoff.
	unreadable := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 500, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "ReadItem" || r.Operation == "Batch" && !strings.Contains(string(r.Body), "ActivityExecute")
	}})
	err := ackScheduling(ctx, t, p, token, "retried", activity("retried", 2, ""))
	assert.True(t, cdb.IsRetryable(err), "cannot tell whether it committed, so the ack may be retried: %v", err)
	unreadable()
	require.NoError(t, ackScheduling(ctx, t, p, token, "retried", activity("retried", 2, "")), "the retry finds the first try committed")
	got := result()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	assert.Equal(t, uint32(1), got.attempts)
	ackActivity(ctx, t, p, got)
}

// Items a waiting fetch would not take are never locked for it: one with
// a tag its filter leaves out, one of a session (its owner takes those).
func TestOnlyItemsAWaitingFetchTakesAreLocked(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	token := lockedStart(ctx, t, p, "picky")
	_, stop := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	defer stop()

	tagged := activity("picky", 2, "")
	tagged.Tag = ptrTo("gpu")
	session := activity("picky", 3, "s1")
	require.NoError(t, ackScheduling(ctx, t, p, token, "picky", tagged, session))
	docs := workDocs(t, p, "picky")
	require.Len(t, docs, 2)
	for _, d := range docs {
		assert.Nil(t, d["lockToken"], "item %v is anyone's", d["activity"])
	}
}

// With eager activities off, every item waits in the queue.
func TestDisableEagerDispatchQueuesEveryItem(t *testing.T) {
	ctx, acct, p, token, result := firstTurnAndAWaitingWorker(t, cdb.Config{DisableEagerDispatch: true}, "plain")

	acct.ResetCounts()
	require.NoError(t, ackScheduling(ctx, t, p, token, "plain", activity("plain", 2, "")))
	got := result()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	assert.Positive(t, acct.Counts().ByOperation["PatchItem"], "claimed")
}

// An item locked ahead for this process's fetches goes before work queued
// in another partition that waited less than a poll interval: the ready
// one is taken without a request, and what no fetch takes within its
// window is given back and fetched again, at twice the requests. The
// queued one is next (queueSignal.nextToken says how long it may wait).
func TestAReadyItemGoesBeforeWorkQueuedJustBeforeIt(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	token := lockedStart(ctx, t, p, "ready")
	_, stop := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	cdb.AfterAckPlannedForTest(p, func() {
		stop() // the fetch the item is locked for goes away, and before the commit
		// another partition's item is queued
		require.Eventually(t, func() bool { return cdb.WaitingFetchesForTest(p, "worker") == 0 }, time.Minute, time.Millisecond)
		require.NoError(t, p.EnqueueForWorker(ctx, activity("queued", 2, "")))
	})
	require.NoError(t, ackScheduling(ctx, t, p, token, "ready", activity("ready", 2, "")))
	cdb.AfterAckPlannedForTest(p, nil)
	require.Equal(t, []string{"queued", "(eager)"}, cdb.AnnouncementsForTest(p))

	log := logRequests(acct)
	first, _, _, err := p.FetchWorkItem(ctx, time.Minute, time.Second, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, first)
	assert.Equal(t, "ready", first.InstanceID(), "the item locked ahead")
	assert.Empty(t, log.ops(), "the ready item without a request")

	second, _, _, err := p.FetchWorkItem(ctx, time.Minute, time.Second, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, second)
	assert.Equal(t, "queued", second.InstanceID())
}

// A commit too large for one batch (it writes an outbox) locks nothing
// eagerly: its request may outlast a short lock counted from its plan, and
// an item locked for a fetch that lost it would be hidden until then.
func TestACommitWithAnOutboxLocksNoItemEagerly(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	token := lockedStart(ctx, t, p, "large")
	var results []func() fetchedWork
	acts := make([]cdb.ActivityExecuteMessage, 3)
	for i := range acts {
		r, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
		results = append(results, r)
		acts[i] = activity("large", uint64(i+2), "")
		acts[i].Input = `"` + strings.Repeat("x", 800*1024) + `"`
	}

	log := logRequests(acct)
	require.NoError(t, ackScheduling(ctx, t, p, token, "large", acts...))
	commits := 0
	for _, r := range log.take() {
		if r.Operation == "Batch" && strings.Contains(string(r.Body), `\"ActivityExecute\"`) && strings.Contains(string(r.Body), "outbox") {
			commits++
			assert.NotContains(t, string(r.Body), `"lockToken":"work_`, "no item written locked")
		}
	}
	require.Equal(t, 1, commits, "one commit, with an outbox")
	for _, result := range results {
		got := result()
		require.NoError(t, got.err)
		require.NotNil(t, got.item, "each item is claimed from the queue")
		assert.Equal(t, uint32(1), got.attempts)
	}
}

// fetchedTurn is what an orchestration fetch returned.
type fetchedTurn struct {
	item     *cdb.OrchestrationItem
	token    string
	attempts uint32
	err      error
}

// waitingOrchestrator runs a long-polling orchestration fetch in p with
// lock, as an idle dispatcher does, and returns once it waits.
func waitingOrchestrator(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, lock time.Duration) (result func() fetchedTurn, stop func()) {
	t.Helper()
	res, stop := waitingFetch(ctx, t, p, "orchestrator", func(ctx context.Context) any {
		item, token, attempts, err := p.FetchOrchestrationItem(ctx, lock, time.Hour, nil)
		return fetchedTurn{item, token, attempts, err}
	})
	return func() fetchedTurn { return res().(fetchedTurn) }, stop
}

// startInBackground runs start and delivers its error: a start a waiting
// fetch of p takes returns only once its first turn committed.
func startInBackground(start func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- start() }()
	return done
}

// A start handed to a waiting fetch is not written: if its process dies
// before the first turn commits, nothing of it is stored, and its caller is
// told it failed (after the wait for the turn, the usual write meets the
// dead transport).
func TestAStartWhoseProcessDiesBeforeItsFirstTurnCommitsLeavesNothing(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	dying, crash := crashableProvider(t, acct, cdb.Config{})
	firstTurn, _ := waitingOrchestrator(ctx, t, dying, time.Minute)
	started := startInBackground(func() error { return dying.EnqueueForOrchestrator(ctx, providertest.StartItem("orphaned"), 0) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	crash()
	require.Error(t, <-started, "the start was never written")
	other := newRulesProvider(t, acct, cdb.Config{})
	_, err := other.Container().ReadItem(ctx, cdb.NewPartitionKeyString("orphaned"), "inst", nil)
	assert.True(t, cdb.IsNotFound(err), "no instance document: %v", err)
	assert.Empty(t, storedDocs(t, other, "orphaned", "msg"), "no start message")
}

// A first turn that does not begin its commit within a second (its
// dispatcher stalled, or held up by the start's own caller) hands the start
// back: it is written the usual way, the held turn's ack is refused, and
// the start runs from the queue with its first attempt.
func TestAStartWhoseFirstTurnStallsIsWrittenTheUsualWay(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem("stalled"), 0) })
	held := firstTurn()
	require.NoError(t, held.err)
	require.NotNil(t, held.item)
	require.NoError(t, <-started, "written the usual way after the wait")
	require.Len(t, storedDocs(t, p, "stalled", "msg"), 1, "the start message, queued")

	err := p.AckOrchestrationItem(ctx, held.token, 1, []cdb.Event{providertest.StartedEvent("stalled", 1)}, nil, nil, providertest.TestOrchMetadata(), nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the stalled turn does not commit")
	got := eventuallyTurn(ctx, t, p, "the queued start")
	assert.Equal(t, "TestOrch", got.item.OrchestrationName)
	assert.Equal(t, uint32(1), got.attempts)
	ackFirstTurn(ctx, t, p, got.token, "stalled")
}

// A first turn whose commit's answer was lost is resolved by a read: the
// start's caller is told it succeeded, and the instance exists once, with
// no start message stored. Both ways of starting.
func TestAStartWhoseFirstCommitAnswerWasLostSucceeds(t *testing.T) {
	for name, start := range startCalls() {
		t.Run(name, func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			p := newRulesProvider(t, acct, cdb.Config{})
			firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
			started := startInBackground(func() error { return start(ctx, p, startOf("lossy")) })
			got := firstTurn()
			require.NoError(t, got.err)
			require.NotNil(t, got.item)
			assert.Equal(t, uint32(1), got.attempts)
			loseFirstResponse(acct, "Batch", `"resourceBody":{"id":"inst"`)
			ackFirstTurn(ctx, t, p, got.token, "lossy")
			require.NoError(t, <-started)
			assert.Equal(t, "TestOrch", instanceDocOf(t, p, "lossy")["name"])
			assert.Empty(t, storedDocs(t, p, "lossy", "msg"), "the start message was never stored")
		})
	}
}

// A first turn whose create meets the instance's document (another
// process started the id meanwhile) does not commit: its ack is refused as
// a lost lock, and the start is decided the usual way: refused by the
// exclusive start, written beside the instance by the contract's enqueue.
func TestAStartWhoseFirstCommitMeetsTheInstanceIsDecidedTheUsualWay(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	started := startInBackground(func() error { return p.EnqueueStartIfAbsent(ctx, startOf("raced")) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	other := newRulesProvider(t, acct, cdb.Config{})
	require.NoError(t, other.EnqueueStartIfAbsent(ctx, startOf("raced")))

	err := p.AckOrchestrationItem(ctx, got.token, 1, []cdb.Event{providertest.StartedEvent("raced", 1)}, nil, nil, providertest.TestOrchMetadata(), nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken)
	require.ErrorIs(t, <-started, cdb.ErrInstanceExists, "the other process's start holds the id")
	assert.Len(t, storedDocs(t, p, "raced", "msg"), 1, "the other start's message alone")
}

// startCalls are the two ways of starting an instance.
func startCalls() map[string]func(context.Context, *cdb.CosmosProvider, cdb.StartOrchestrationMessage) error {
	return map[string]func(context.Context, *cdb.CosmosProvider, cdb.StartOrchestrationMessage) error{
		"EnqueueForOrchestrator": func(ctx context.Context, p *cdb.CosmosProvider, s cdb.StartOrchestrationMessage) error {
			return p.EnqueueForOrchestrator(ctx, s, 0)
		},
		"EnqueueStartIfAbsent": func(ctx context.Context, p *cdb.CosmosProvider, s cdb.StartOrchestrationMessage) error {
			return p.EnqueueStartIfAbsent(ctx, s)
		},
	}
}

// A start with a delay is not due: it is never locked for a fetch.
func TestADelayedStartIsNotLockedEagerly(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	_, stop := waitingOrchestrator(ctx, t, p, time.Minute)
	defer stop()
	log := logRequests(acct)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("later"), time.Hour))
	batches := 0
	for _, r := range log.take() {
		if r.Operation == "Batch" {
			batches++
			assert.NotContains(t, string(r.Body), `"lockToken"`, "nothing written locked")
		}
	}
	assert.Equal(t, 1, batches, "the start's batch")
}

// The requests and RU of one fan-out-5 orchestration dispatched eagerly
// (ARCHITECTURE.md, Eager starts and Eager activities): an orchestration
// fetch and five worker fetches of the same process wait, as a runtime's
// idle dispatchers do, so the start and the activities reach them without
// a query, a lock batch or a claim, and the first turn's commit holds the
// instance for their completions (ARCHITECTURE.md, Chained turns), which
// reach the next turn without a request: the instance was read within a
// poll interval (by its start).
// The request counts are pinned; the RU are logged for the sizing guide.
func TestTheCostOfAFanOutFiveOrchestrationDispatchedEagerly(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
	const instance = "fan-out-5"
	costs := &stepCosts{acct: acct}
	measure := costs.measure

	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	var started <-chan error
	var token string
	measure("start and first turn, handed to the waiting orchestration fetch unwritten", func() {
		started = startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0) })
		got := firstTurn()
		require.NoError(t, got.err)
		require.NotNil(t, got.item)
		token = got.token
	})
	workers := make([]func() fetchedWork, 5)
	for i := range workers {
		workers[i], _ = waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	}
	scheduled, work := fanOut(instance, 5)
	measure("ack: create the instance, schedule 5 activities locked for the waiting worker fetches", func() {
		events := append([]cdb.Event{providertest.StartedEvent(instance, 1)}, scheduled...)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, providertest.TestOrchMetadata(), nil))
		require.NoError(t, <-started, "the start returns once its first turn committed")
	})
	for _, worker := range workers {
		var got fetchedWork
		measure("worker fetch", func() { got = worker() })
		require.NoError(t, got.err)
		require.NotNil(t, got.item)
		measure("worker ack", func() {
			act := got.item.(cdb.ActivityExecuteMessage)
			require.NoError(t, p.AckWorkItem(ctx, got.token, cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: act.ID, Result: "ok"}))
		})
	}
	var item *cdb.OrchestrationItem
	measure("orchestration fetch, the completions (instance held, history cached)", func() {
		var err error
		item, token, _, err = p.FetchOrchestrationItem(ctx, time.Minute, time.Second, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
	})
	require.Len(t, item.Messages, 5, "the five completions in one turn")
	measure("ack: complete", func() {
		events := []cdb.Event{{EventID: 12, InstanceID: instance, ExecutionID: 1, DuroxideVersion: "0.1.29",
			Kind: cdb.OrchestrationCompleted{Output: `"done"`}}}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, providertest.TestOrchMetadata(), nil))
	})

	byName, names, total := costs.summed()
	for _, name := range names {
		t.Logf("%s | %d requests | %.1f RU", name, byName[name].requests, byName[name].ru)
	}
	t.Logf("a fan-out-5 orchestration | %d requests | %.1f RU", total.requests, total.ru)
	want := map[string]int64{
		"start and first turn, handed to the waiting orchestration fetch unwritten":             0,
		"ack: create the instance, schedule 5 activities locked for the waiting worker fetches": 1, "worker fetch": 0, "worker ack": 5,
		"orchestration fetch, the completions (instance held, history cached)": 0, "ack: complete": 1,
	}
	for name, n := range want {
		assert.Equal(t, n, byName[name].requests, name)
	}
	assert.Equal(t, int64(7), total.requests, "against 22 through the queue (TestTheCostOfAFanOutFiveOrchestration)")
}

// What was locked eagerly for a fetch that never took it is given back to
// the queue (its lock released, the attempt undone) once it waited a poll
// interval, and at once when the provider closes: it never waits out a
// lock's length for nobody (a shutdown while a turn commits, a busy
// process).
func TestAnEagerItemNoFetchTakesIsGivenBack(t *testing.T) {
	for name, giveBack := range map[string]func(p *cdb.CosmosProvider){
		"after a poll interval": func(*cdb.CosmosProvider) {},
		"at close":              func(p *cdb.CosmosProvider) { require.NoError(t, p.Close()) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			pollInterval := time.Hour
			if name == "after a poll interval" {
				pollInterval = 200 * time.Millisecond
			}
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: pollInterval})
			token := lockedStart(ctx, t, p, "unclaimed")
			_, stop := waitingWorker(ctx, t, p, time.Hour, cdb.DefaultOnlyFilter())
			cdb.AfterAckPlannedForTest(p, stop) // the fetch goes away after the item is locked for it
			require.NoError(t, ackScheduling(ctx, t, p, token, "unclaimed", activity("unclaimed", 2, "")))
			giveBack(p)

			other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
			got := eventuallyWork(ctx, t, other, "given back long before its hour-long lock ends")
			assert.Equal(t, uint32(1), got.attempts, "the eager lock's attempt undone")
			ackActivity(ctx, t, other, got)
		})
	}
}

// A first turn whose commit fails and whose outcome the read that would
// tell cannot find (here: the create met another start's instance, and the
// read of the instance is refused) tells its caller the start's outcome is
// unknown, retryable, whatever the ack's own error (a lost lock, final to
// the runtime).
func TestAStartWhoseFirstCommitCannotBeToldIsRetryable(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, startOf("untold"), 0) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	other := newRulesProvider(t, acct, cdb.Config{})
	require.NoError(t, other.EnqueueStartIfAbsent(ctx, startOf("untold")))

	var reads atomic.Int32
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		// The commit's own resolution reads the instance and the turn's
		// history document first; the start's read after them is refused.
		return r.Operation == "Batch" && strings.Contains(string(r.Body), `"operationType":"Read"`) && reads.Add(1) >= 3
	}})
	err := p.AckOrchestrationItem(ctx, got.token, 1, []cdb.Event{providertest.StartedEvent("untold", 1)}, nil, nil, providertest.TestOrchMetadata(), nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "to the runtime: the lock is lost")
	startErr := <-started
	require.Error(t, startErr)
	assert.True(t, cdb.IsRetryable(startErr), "to the start's caller: unknown, retryable: %v", startErr)
}

// A first turn whose commit applied, but whose ack could not tell so before
// a later turn moved the instance's lastAck on (its chain's turn, or another
// process's once the lock expired), is still the start's: the turn's history
// document names its ack, so the start is not handed back to be written a
// second time (nor refused as existing, for an exclusive start).
func TestAFirstTurnCommittedBeforeALaterTurnStaysTheStartsWhenToldLate(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	firstTurn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	started := startInBackground(func() error { return p.EnqueueStartIfAbsent(ctx, startOf("told-late")) })
	got := firstTurn()
	require.NoError(t, got.err)
	require.NotNil(t, got.item)
	ackFirstTurn(ctx, t, p, got.token, "told-late")
	require.NoError(t, <-started)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("told-late"), 0))
	next := eventuallyTurn(ctx, t, p, "the next turn")
	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	require.NotEqual(t, got.token, instanceDocOf(t, p, "told-late")["lastAck"], "a later turn moved lastAck on")

	lost := errors.New("the first turn's commit answer was lost")
	err, committed := p.SettleFirstTurnAfterForTest(ctx, "told-late", got.token, cdb.HistoryDocIDForTest(1, 1), lost)
	require.NoError(t, err, "the commit applied: the first turn's ack succeeded")
	assert.True(t, committed, "the start is its caller's, not handed back")

	err, committed = p.SettleFirstTurnAfterForTest(ctx, "told-late", "lock_never-committed", cdb.HistoryDocIDForTest(1, 1), lost)
	require.ErrorIs(t, err, lost)
	assert.False(t, committed, "a commit that did not apply hands the start back")
}

// A worker item locked ahead waits its patience while a worker of this
// process runs a handler, though no fetch ran for a while (the worker
// fetches again once it acks); once no worker fetches or holds an item (a
// runtime shut down, its provider still open), it goes back within a few
// poll intervals rather than at the end of its patience.
func TestAReadyItemWaitsForABusyWorkerNotForAStoppedOne(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	ctx, p := readyItemOf(t, acct, cdb.Config{PollInterval: 100 * time.Millisecond}, "waits")
	gpu, err := cdb.TagsFilter("gpu")
	require.NoError(t, err)
	busy := activity("busy", 2, "")
	tag := "gpu"
	busy.Tag = &tag
	require.NoError(t, p.EnqueueForWorker(ctx, busy))
	_, token, _, err := p.FetchWorkItem(ctx, time.Minute, time.Second, nil, gpu) // its handler runs
	require.NoError(t, err)
	require.NotEmpty(t, token)

	time.Sleep(500 * time.Millisecond) // five poll intervals without a fetch
	require.Len(t, workDocs(t, p, "waits"), 1)
	assert.NotEmpty(t, workDocs(t, p, "waits")[0]["lockToken"], "still ready for this process's workers")

	require.NoError(t, p.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "busy", ExecutionID: 1, ID: 2, Result: "{}"}))
	require.Eventually(t, func() bool { return workDocs(t, p, "waits")[0]["lockToken"] == "" }, 10*time.Second, 20*time.Millisecond,
		"given back once no worker fetches or holds an item, long before its patience (30 s)")
}

// A worker item the ready list had no room for waits behind what this
// process's fetches are booked with for most of an item's patience, longer
// than a writer's grace: it is not stamped as this process's own, so the
// others' looks take it at once instead of leaving it to a writer that
// will not come (the simulation's stamp-honoured found such stamps).
func TestItemsBeyondWhatTheFetchesTakeAreNotStampedAsOwn(t *testing.T) {
	cfg := cdb.Config{ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: "booked", LeaseDuration: testLeaseDuration}}
	ctx, _, p, token, result := firstTurnAndAWaitingWorker(t, cfg, "booked")
	require.NoError(t, ackScheduling(ctx, t, p, token, "booked", activities("booked", 32)...))
	got := result()
	require.NoError(t, got.err)
	var locked, queued int
	for _, d := range workDocs(t, p, "booked") {
		if tok, _ := d["lockToken"].(string); tok != "" {
			locked++
			continue
		}
		queued++
		assert.Nil(t, d["writer"], "queued behind a booked ready list: %v", d["id"])
	}
	assert.Equal(t, 29, locked)
	assert.Equal(t, 3, queued)
}
