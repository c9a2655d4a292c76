package cdb_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// With process leases, a process takes the items it writes itself (announced
// to its own fetches), and the process that owns their slots leaves them to
// it for a poll interval (50 ms here) instead of racing it for them: a lost
// claim and a wasted query for one of the two.

// writersOf lists the writer each queue item of docType in instance's
// partition names ("" for none).
func writersOf(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance, docType string) []string {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(ctx, "SELECT c.writer FROM c WHERE c.type = @t",
		[]cdb.QueryParameter{{Name: "@t", Value: docType}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	var out []string
	for _, raw := range res.Items {
		var d struct {
			Writer string `json:"writer"`
		}
		require.NoError(t, json.Unmarshal(raw, &d))
		out = append(out, d.Writer)
	}
	return out
}

func startOf(instance string) cdb.StartOrchestrationMessage {
	return cdb.StartOrchestrationMessage{Instance: instance, Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}
}

// waitingFetch runs a long-polling fetch in p, as a runtime's idle
// dispatcher does, until it takes an item or stop is called; it returns
// once the fetch waits. result waits for what the fetch took (nil: none).
func waitingFetch(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, queue string, fetch func(context.Context) any) (result func() any, stop func()) {
	t.Helper()
	waiting := cdb.WaitingFetchesForTest(p, queue)
	fctx, cancel := context.WithCancel(ctx)
	got := make(chan any, 1)
	go func() { got <- fetch(fctx) }()
	require.Eventually(t, func() bool { return cdb.WaitingFetchesForTest(p, queue) > waiting }, time.Minute, time.Millisecond, "the fetch waits")
	t.Cleanup(cancel)
	return func() any { return <-got }, cancel
}

// waitingOrchestrationFetch is a waitingFetch of the orchestrator queue
// with filter.
func waitingOrchestrationFetch(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, filter *cdb.DispatcherCapabilityFilter) (result func() *cdb.OrchestrationItem, stop func()) {
	res, stop := waitingFetch(ctx, t, p, "orchestrator", func(ctx context.Context) any {
		item, _, _, _ := p.FetchOrchestrationItem(ctx, time.Minute, time.Hour, filter)
		return item
	})
	return func() *cdb.OrchestrationItem { item, _ := res().(*cdb.OrchestrationItem); return item }, stop
}

// waitingWorkFetch is a waitingFetch of the worker queue with tags.
func waitingWorkFetch(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, tags cdb.TagFilter) (result func() cdb.WorkItem, stop func()) {
	res, stop := waitingFetch(ctx, t, p, "worker", func(ctx context.Context) any {
		item, _, _, _ := p.FetchWorkItem(ctx, time.Minute, time.Hour, nil, tags)
		return item
	})
	return func() cdb.WorkItem { item, _ := res().(cdb.WorkItem); return item }, stop
}

// stampAs names writer as the writer of every docType item in instance's
// partition, as a process that then died (or an older version) would have.
func stampAs(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance, docType, writer string) {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(ctx, "SELECT c.id FROM c WHERE c.type = @t AND NOT IS_DEFINED(c.writer)",
		[]cdb.QueryParameter{{Name: "@t", Value: docType}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	for _, raw := range res.Items {
		var d struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(raw, &d))
		var ops cdb.PatchOperations
		ops.AppendSet("/writer", writer)
		_, err := p.Container().PatchItem(ctx, pk, d.ID, ops, nil)
		require.NoError(t, err)
	}
}

func TestAProcessLeavesTheMessagesAnotherProcessWroteToItForAPollInterval(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	clock.Advance(time.Second) // both idle windows open
	taken, _ := waitingOrchestrationFetch(ctx, t, a, nil)

	mine := instanceInSlotOutside(t, aShare) // in b's share
	lost := func() int64 { return a.Client().Stats().PreconditionFailed + b.Client().Stats().PreconditionFailed }
	before := lost()
	// a's fetch waits, so the start goes to it unwritten; its turn never
	// commits here, so after the wait a writes the start the usual way.
	started := startInBackground(func() error { return a.EnqueueForOrchestrator(ctx, startOf(mine), 0) })
	require.NotNil(t, taken(), "a's waiting fetch takes the start unwritten")
	require.NoError(t, <-started)
	assert.Equal(t, []string{"a"}, writersOf(ctx, t, a, mine, "msg"), "a wrote it")
	assert.Nil(t, fetchOrchestration(ctx, t, b), "b's look leaves a's fresh message to a")
	item := fetchOrchestration(ctx, t, a)
	require.NotNil(t, item, "a takes its own write")
	assert.Equal(t, mine, item.Instance)
	assert.Zero(t, lost()-before, "nobody lost a claim")

	// An instance with a's fresh message and a client's is left whole: a
	// batch of the client's message alone would put it before a's. a does
	// not take it (it died after writing): after a poll interval b does,
	// both messages in order.
	clock.Advance(time.Second)
	both := instanceInSlotOutside(t, append(slices.Clone(aShare), cdb.DispatchSlotForTest(mine)))
	client := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour})
	require.NoError(t, client.EnqueueForOrchestrator(ctx, startOf(both), 0))
	stampAs(ctx, t, a, both, "msg", "a")
	require.NoError(t, client.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: both, Name: "e", Data: "1"}, 0))
	assert.ElementsMatch(t, []string{"a", ""}, writersOf(ctx, t, a, both, "msg"))
	assert.Nil(t, fetchOrchestration(ctx, t, b), "the instance is left to a while a's message is fresh")

	clock.Advance(50 * time.Millisecond)
	item = fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "a's message is b's to take after the grace")
	assert.Equal(t, both, item.Instance)
	assert.Equal(t, []string{"StartOrchestration", "ExternalRaised"}, messageKinds(item))
}

// A stamp that is wrong (its writer died, or an older version wrote it) holds
// an instance back one poll interval at most, however many fresh stamped
// messages keep arriving: the others leave an instance to a writer only while
// its oldest waiting message is fresh.
func TestAStreamOfStampedMessagesHoldsAnInstanceBackOnePollIntervalAtMost(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	_, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	clock.Advance(time.Second)
	target := instanceInSlotOutside(t, aShare) // in b's share
	client := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour})
	require.NoError(t, client.EnqueueForOrchestrator(ctx, startOf(target), 0))
	stampAs(ctx, t, b, target, "msg", "a")
	assert.Nil(t, fetchOrchestration(ctx, t, b), "left to a while its message is fresh")

	for i := range 3 { // a's messages keep coming, each fresh
		clock.Advance(15 * time.Millisecond)
		require.NoError(t, client.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: target, Name: "e", Data: strconv.Itoa(i)}, 0))
		stampAs(ctx, t, b, target, "msg", "a")
	}
	clock.Advance(5 * time.Millisecond) // one poll interval after the first message
	item := fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "a poll interval after its oldest message, the instance is b's to take")
	assert.Equal(t, target, item.Instance)
	assert.Equal(t, []string{"StartOrchestration", "ExternalRaised", "ExternalRaised", "ExternalRaised"}, messageKinds(item))
}

// What an outbox delivers (a child's start, an event to another instance,
// worker items past the batch's limit) is never stamped: the relay announces
// nothing to its process's fetches, so a stamp would only hold the slots'
// owner off for a poll interval.
func TestAnOutboxsDeliveriesNameNoWriter(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	clock.Advance(time.Second)
	parent := instanceInSlotOutside(t, nil)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, startOf(parent), 0))
	item, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, parent, item.Instance)

	child := instanceInSlotOutside(t, append(slices.Clone(aShare), cdb.DispatchSlotForTest(parent)))
	_, stop := waitingOrchestrationFetch(ctx, t, a, nil) // a would take what it announces
	_, stopWork := waitingWorkFetch(ctx, t, a, cdb.DefaultOnlyFilter())
	events, work := fanOut(parent, 120) // more than one batch holds
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, events, work,
		[]cdb.WorkItem{cdb.StartOrchestrationMessage{Instance: child, Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}},
		cdb.ExecutionMetadata{}, nil))
	stop()
	stopWork()
	// The commit batch holds the turn's instance, history and consumed
	// message beside its items, so the activities from id 99 on (the last
	// 23 of 120, in the turn's order) overflowed into the outbox.
	pk := cdb.NewPartitionKeyString(parent)
	res, err := a.Container().QueryItems(ctx, "SELECT VALUE c.activity FROM c WHERE c.type = 'work' AND IS_DEFINED(c.writer) AND c.activity >= 99",
		nil, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	assert.Empty(t, res.Items, "no worker item the outbox delivered names a writer")
	assert.Equal(t, 120, countDocs(t, a, parent, "work"), "the outbox delivered the items that overflowed")
	assert.Equal(t, []string{""}, writersOf(ctx, t, a, child, "msg"), "the child's start, delivered by the outbox")
	item = fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "b takes the child's start at once")
	assert.Equal(t, child, item.Instance)
}

// A short-polling process looks at its share, not at the partitions it
// announces, so it names itself the writer of nothing: the slots' owner takes
// what it writes at once.
func TestAShortPollingProcessNamesItselfTheWriterOfNothing(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	leased := func(id string) *cdb.CosmosProvider {
		return newRulesProvider(t, acct, cdb.Config{Now: clock.Now, PollInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour, ShortPolling: true,
			ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: testLeaseDuration}})
	}
	a, b := leased("a"), leased("b")
	for _, p := range []*cdb.CosmosProvider{a, b} {
		require.Nil(t, fetchOrchestration(ctx, t, p))
		item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.Nil(t, item)
	}
	renewAll(ctx, t, a, b)
	renewAll(ctx, t, a, b)
	requireFairShares(t, orchestratorKey, a, b)
	st, err := a.ProcessLeases()
	require.NoError(t, err)
	clock.Advance(time.Second)

	theirs := instanceInSlotOutside(t, st.Shares[orchestratorKey])
	require.Nil(t, fetchOrchestration(ctx, t, a), "a's fetches call in turn, each returning after one look")
	workItem, _, _, err := a.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.Nil(t, workItem)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, startOf(theirs), 0))
	require.NoError(t, a.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: theirs, ExecutionID: 1, ID: 1, Name: "A", Input: "{}"}))
	assert.Equal(t, []string{""}, writersOf(ctx, t, a, theirs, "msg"))
	assert.Equal(t, []string{""}, writersOf(ctx, t, a, theirs, "work"))
	item := fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "the slots' owner takes it at once")
	assert.Equal(t, theirs, item.Instance)
}

// During a rolling upgrade, a process whose orchestration fetches cannot lock
// an instance pinned to a newer version does not name itself the writer of
// the events it raises to it: the processes that can lock it take them at
// once, and the instance never starves.
func TestAProcessThatCannotLockAnInstanceNamesItselfTheWriterOfNoneOfItsMessages(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	clock.Advance(time.Second)
	pinned := instanceInSlotOutside(t, aShare) // in b's share
	require.NoError(t, b.EnqueueForOrchestrator(ctx, startOf(pinned), 0))
	item, token, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	v2 := cdb.SemanticVersion{Major: 2}
	md := providertest.TestOrchMetadata()
	md.PinnedDuroxideVersion = &v2
	require.NoError(t, b.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(pinned, 1)}, nil, nil, md, nil))

	old := &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{{Min: cdb.SemanticVersion{Major: 1}, Max: cdb.SemanticVersion{Major: 1, Minor: 99}}}}
	waitingOrchestrationFetch(ctx, t, a, old) // an old node's dispatcher
	clock.Advance(time.Second)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: pinned, Name: "e", Data: "1"}, 0))
	assert.Equal(t, []string{""}, writersOf(ctx, t, a, pinned, "msg"), "a cannot lock it, so a does not claim it")
	item = fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "b takes the event at once")
	assert.Equal(t, pinned, item.Instance)
	assert.Equal(t, []string{"ExternalRaised"}, messageKinds(item))
}

func TestOnlyAProcessThatFetchesAQueueNamesItselfTheWriterOfItsItems(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	gpu, err := cdb.TagsFilter("gpu")
	require.NoError(t, err)
	api := newLeasedProvider(t, acct, clock, "api") // starts orchestrations, fetches nothing
	require.NoError(t, api.EnqueueForOrchestrator(ctx, startOf("from-api"), 0))
	assert.Equal(t, []string{""}, writersOf(ctx, t, api, "from-api", "msg"), "a process that does not fetch leaves its writes to the slots' owners")

	w := newLeasedProvider(t, acct, clock, "w")
	taken, _ := waitingWorkFetch(ctx, t, w, gpu)
	act := func(id uint64, tag, session *string) cdb.ActivityExecuteMessage {
		return cdb.ActivityExecuteMessage{Instance: "acts", ExecutionID: 1, ID: id, Name: "A", Input: "{}", Tag: tag, SessionID: session}
	}
	for _, a := range []cdb.ActivityExecuteMessage{act(1, nil, nil), act(2, ptrTo("gpu"), ptrTo("s1")), act(3, ptrTo("gpu"), nil)} {
		require.NoError(t, w.EnqueueForWorker(ctx, a))
	}
	assert.ElementsMatch(t, []string{"", "", "w"}, writersOf(ctx, t, w, "acts", "work"),
		"w takes its gpu activity; not the untagged one its fetches do not match, nor the session's, which the session's owner takes")
	require.NotNil(t, taken(), "w's waiting fetch takes its item")
	require.NoError(t, w.EnqueueForOrchestrator(ctx, startOf("from-w"), 0))
	assert.Equal(t, []string{""}, writersOf(ctx, t, w, "from-w", "msg"), "w runs no orchestration fetch")

	require.NoError(t, w.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "later", ExecutionID: 1, ID: 1, Name: "A", Input: "{}", Tag: ptrTo("gpu")}))
	assert.Equal(t, []string{""}, writersOf(ctx, t, w, "later", "work"), "a process whose fetch returned takes nothing written after it")
}

func TestAProcessLeavesTheWorkerItemsAnotherProcessWroteToItForAPollInterval(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	fetchWork := func(p *cdb.CosmosProvider) cdb.WorkItem {
		item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		return item
	}
	a, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, "worker/nosession/DefaultOnly", func(p *cdb.CosmosProvider) { require.Nil(t, fetchWork(p)) })
	clock.Advance(time.Second)
	inBShare := func(from uint64) cdb.ActivityExecuteMessage {
		for id := from; ; id++ {
			act := cdb.ActivityExecuteMessage{Instance: "work", ExecutionID: 1, ID: id, Name: "A", Input: "{}"}
			if !slices.Contains(aShare, cdb.ActivitySlotForTest(act)) {
				return act
			}
		}
	}
	taken, _ := waitingWorkFetch(ctx, t, a, cdb.DefaultOnlyFilter())
	act := inBShare(1)
	require.NoError(t, a.EnqueueForWorker(ctx, act))
	require.Equal(t, []string{"a"}, writersOf(ctx, t, a, "work", "work"))
	assert.Nil(t, fetchWork(b), "b's look leaves a's fresh item to a")
	got := taken()
	require.NotNil(t, got, "a takes it through its announcement")
	assert.Equal(t, act.ID, got.(cdb.ActivityExecuteMessage).ID)

	// An item whose writer does not take it (it died after writing) is b's
	// after a poll interval.
	clock.Advance(time.Second)
	client := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour})
	orphan := inBShare(act.ID + 1)
	require.NoError(t, client.EnqueueForWorker(ctx, orphan))
	stampAs(ctx, t, b, "work", "work", "a")
	assert.Nil(t, fetchWork(b), "left to a while fresh")
	clock.Advance(50 * time.Millisecond)
	got = fetchWork(b)
	require.NotNil(t, got, "after a poll interval the item is b's to take")
	assert.Equal(t, orphan.ID, got.(cdb.ActivityExecuteMessage).ID)
}

// A stamp says its writer takes the item as it writes it; an abandon that
// makes the item visible again removes it, so the item is not left to a
// process that no longer looks for it (here one that died).
func TestAnAbandonedItemNamesNoWriter(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	fetchWork := func(p *cdb.CosmosProvider) (cdb.WorkItem, string) {
		item, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		return item, token
	}
	_, b, _ := twoLeasedProcesses(ctx, t, acct, clock, "worker/nosession/DefaultOnly", func(p *cdb.CosmosProvider) {
		item, _ := fetchWork(p)
		require.Nil(t, item)
	})
	clock.Advance(time.Second)
	client := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour})
	require.NoError(t, client.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "abandoned", ExecutionID: 1, ID: 1, Name: "A", Input: "{}"}))
	stampAs(ctx, t, b, "abandoned", "work", "a")
	clock.Advance(time.Second)
	item, token := fetchWork(b)
	require.NotNil(t, item, "a's stale item is b's")
	require.NoError(t, b.AbandonWorkItem(ctx, token, 0, false))
	assert.Equal(t, []string{""}, writersOf(ctx, t, b, "abandoned", "work"), "visible again, and nobody's to take but the slots' owner's")
}
