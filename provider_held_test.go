package cdb_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Idle is cheap whatever is queued. Messages held for a start that has not
// come (an event raised for a mistyped id, a cancel that overtook its start)
// are parked: they cost the requests that park them once, not requests per
// second, so an idle queue stays within one query per PollInterval however
// many of them there are.

// idleCostWithHeldMessages raises n events for ids that never start and
// drives a provider the way a runtime's dispatcher does (a fetch every
// 100 ms of a test clock, whatever it finds acked) for the given time,
// and returns the requests and RU the account served in the window that
// starts once every event had a first look (2 s in) and ends before any
// of them is handed over.
func idleCostWithHeldMessages(t *testing.T, n int, window time.Duration) (requests, queries int64, ru float64) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, ReconcileInterval: time.Hour, Now: clock.Now})
	for i := 0; i < n; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("never-started-%d", i)), 0))
	}
	const step = 100 * time.Millisecond
	dispatch := func(d time.Duration) {
		for elapsed := time.Duration(0); elapsed < d; elapsed += step {
			item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.Nil(t, item, "nothing is handed over while a start may still come")
			clock.Advance(step)
		}
	}
	dispatch(2 * time.Second)
	before := acct.Counts()
	dispatch(window)
	after := acct.Counts()
	return after.Requests - before.Requests, after.ByOperation["Query"] - before.ByOperation["Query"], after.RequestCharge - before.RequestCharge
}

func TestR17IdleCostDoesNotGrowWithMessagesHeldForAStart(t *testing.T) {
	const window = 20 * time.Second
	none, noneQueries, _ := idleCostWithHeldMessages(t, 0, window)
	requests, queries, ru := idleCostWithHeldMessages(t, 10, window)
	per5s := func(v float64) float64 { return v * float64(5*time.Second) / float64(window) }
	t.Logf("idle, no held message: %d requests (%d queries) in %v", none, noneQueries, window)
	t.Logf("idle, 10 held messages: %d requests (%d queries) and %.0f RU in %v (%.0f requests, %.0f RU per 5 s)", requests, queries, ru, window, per5s(float64(requests)), per5s(ru))
	intervals := int64(window / time.Second)
	assert.LessOrEqual(t, queries, intervals+1, "at most one query per PollInterval with 10 held messages")
	assert.Equal(t, noneQueries, queries, "held messages cost an idle queue nothing")
	// The rest is the queue bell's reads, at most one per poll interval,
	// and whether one falls inside the window or at its edge is the
	// scheduler's: held messages add none.
	assert.LessOrEqual(t, requests-queries, intervals+1, "at most a read of the bell per PollInterval besides")
	assert.InDelta(t, none-noneQueries, requests-queries, 1, "held messages add no read of the bell")
}

// Parked messages are reported, with the enqueue time of the oldest, and
// leave the report once their start takes them.
func TestHeldMessagesAreReportedWithTheOldest(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	held, err := p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.Equal(t, cdb.HeldMessages{}, held, "nothing held")

	first := clock.Now()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("typo"), 0))
	clock.Advance(time.Second)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstanceMessage{Instance: "late", Reason: "r"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item)

	held, err = p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, held.Parked)
	require.NotNil(t, held.OldestParked)
	assert.Equal(t, first.UnixMilli(), held.OldestParked.UnixMilli(), "the oldest is the first event's enqueue time")
	assert.Zero(t, held.Poison)
	assert.Nil(t, held.OldestPoison)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("late"), 0))
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	held, err = p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, held.Parked, "the cancel joined its start's batch")
}

// fetchAll fetches with a short-polling provider until nothing is found,
// acking what it finds with ack, and returns the items in order.
func fetchAll(t *testing.T, p *cdb.CosmosProvider, ack func(item *cdb.OrchestrationItem, token string)) []*cdb.OrchestrationItem {
	t.Helper()
	ctx := rulesContext(t)
	var items []*cdb.OrchestrationItem
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return items
		}
		items = append(items, item)
		ack(item, token)
	}
}

// ackWithoutATurn acks a batch the way the runtime acks one it runs no turn for.
func ackWithoutATurn(t *testing.T, p *cdb.CosmosProvider) func(*cdb.OrchestrationItem, string) {
	return func(item *cdb.OrchestrationItem, token string) {
		require.NoError(t, p.AckOrchestrationItem(rulesContext(t), token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	}
}

// Over its whole life (parked, then handed over at its deadline) a message
// for an id that never starts costs a fixed number of requests, whatever
// the time it waits: duroxide's outcome is kept (handed over as Unknown
// and consumed), only the per-poll cost is gone.
func TestAParkedMessageCostsAFixedNumberOfRequestsOverItsLife(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, ReconcileInterval: time.Hour, Now: clock.Now})
	const events = 10
	for i := 0; i < events; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("nobody-%d", i)), 0))
	}
	before := acct.Counts().Requests
	handedOver := 0
	const step = 100 * time.Millisecond
	const life = 40 * time.Second
	for elapsed := time.Duration(0); elapsed < life; elapsed += step {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item != nil {
			assert.Equal(t, "Unknown", item.OrchestrationName, "handed over as an instance never started")
			assert.GreaterOrEqual(t, elapsed, 29*time.Second, "not before its deadline")
			ackWithoutATurn(t, p)(item, token)
			handedOver++
		}
		clock.Advance(step)
	}
	after := acct.Counts()
	requests := after.Requests - before
	polls := int64(life / time.Second)
	t.Logf("%d events over %v: %d requests, %d of them idle polls; all requests so far by operation: %v", events, life, requests, polls, after.ByOperation)
	assert.Equal(t, events, handedOver, "every event is handed over once its deadline passed")
	// Per event: the lock batch that meets no instance document, the one
	// that creates it, the park; the lock at its deadline and the ack;
	// and a query or two of the looks that found them.
	assert.LessOrEqual(t, requests, polls+1+8*events, "each event costs its park and its hand-over, not a request per poll")
	for i := 0; i < events; i++ {
		assert.Zero(t, countDocs(t, p, fmt.Sprintf("nobody-%d", i), "msg")+countDocs(t, p, fmt.Sprintf("nobody-%d", i), "inst"), "nothing is left behind")
	}
}

// Messages parked at different times keep their own deadlines: the older
// one is handed over alone, and the instance document stays while the
// other is parked, so the start that comes then still brings it along.
func TestAStartAfterADeadlineStillBringsTheMessagesParkedLater(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "slow", Name: "early", Data: "1"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)), "parked")
	clock.Advance(20 * time.Second)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "slow", Name: "later", Data: "2"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)), "parked")

	clock.Advance(11 * time.Second)
	items := fetchAll(t, p, ackWithoutATurn(t, p))
	require.Len(t, items, 1, "the first event's deadline passed")
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "slow", Name: "early", Data: "1"}}, items[0].Messages, "handed over alone")
	assert.Equal(t, 1, countDocs(t, p, "slow", "inst"), "the instance document stays for the parked one")

	clock.Advance(time.Second)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("slow"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"ExternalRaised", "StartOrchestration"}, messageKinds(item), "the start brings the event still parked")
	assert.Equal(t, "later", item.Messages[0].(cdb.ExternalRaisedMessage).Name)
}

// A child's start that an outbox delivers unparks the events raised for
// the child before it, as a client's start does.
func TestAChildStartFromAnOutboxBringsItsParkedEvents(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond})
	providertest.CreateInstance(ctx, t, p, "parent")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "parent::kid", Name: "go", Data: "{}"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the child's event is parked")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("parent"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "parent", item.Instance)
	start := providertest.StartItem("parent::kid").(cdb.StartOrchestrationMessage)
	parent, id := "parent", uint64(2)
	start.ParentInstance, start.ParentID = &parent, &id
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: "parent", ExecutionID: 1, DuroxideVersion: "0.1.29",
			Kind: cdb.SubOrchestrationScheduled{Name: "TestOrch", Instance: "parent::kid", Input: "{}"}}},
		nil, []cdb.WorkItem{start}, cdb.ExecutionMetadata{}, nil))

	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "parent::kid", item.Instance)
	assert.Equal(t, []string{"ExternalRaised", "StartOrchestration"}, messageKinds(item))
}

// More parked messages than a batch can unpark: the start's batch takes
// the oldest and the start, puts back as many as it has room for, and the
// next turns take the rest, every message once and in order; then the
// instance document no longer says any is parked.
func TestMoreParkedMessagesThanABatchHoldsAreAllDeliveredInOrder(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond, Now: clock.Now})
	const events = 150
	for i := 0; i < events; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "crowd", Name: "e", Data: fmt.Sprint(i)}, 0))
		clock.Advance(time.Millisecond)
	}
	for look := 0; look < 10; look++ { // a look parks what it locks: a batch at a time
		assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)), "parked")
		clock.Advance(time.Millisecond)
	}
	held, err := p.GetHeldMessages(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events, held.Parked)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("crowd"), 0))
	first := true
	var got []string
	items := fetchAll(t, p, func(item *cdb.OrchestrationItem, token string) {
		var delta []cdb.Event
		md := cdb.ExecutionMetadata{}
		if first {
			delta, md, first = []cdb.Event{providertest.StartedEvent("crowd", 1)}, providertest.TestOrchMetadata(), false
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, delta, nil, nil, md, nil))
	})
	for _, item := range items {
		for _, m := range item.Messages {
			if e, ok := m.(cdb.ExternalRaisedMessage); ok {
				got = append(got, e.Data)
			}
		}
	}
	var want []string
	for i := 0; i < events; i++ {
		want = append(want, fmt.Sprint(i))
	}
	assert.Equal(t, want, got, "every event once, in order")
	assert.Equal(t, "StartOrchestration", messageKinds(items[0])[len(items[0].Messages)-1], "the first batch holds the start")
	held, err = p.GetHeldMessages(ctx)
	require.NoError(t, err)
	assert.Zero(t, held.Parked)
	resp, err := p.Container().ReadItem(ctx, cdb.NewPartitionKeyString("crowd"), "inst", nil)
	require.NoError(t, err)
	assert.NotContains(t, string(resp.Value), "parkedUntil", "the instance document no longer says any is parked")
}

// A start's batch that took parked messages and was abandoned comes back
// whole and in order: unparked, they are ordinary messages.
func TestAnAbandonedStartBatchKeepsItsUnparkedMessages(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstanceMessage{Instance: "again", Reason: "r"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("again"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, false))
	item, _, attempts, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"CancelInstance", "StartOrchestration"}, messageKinds(item))
	assert.EqualValues(t, 2, attempts)
}

// The same for filtered items: instances pinned to a version outside a
// dispatcher's capability filter (a rolling upgrade rolled back, a version no
// running node supports) cost that dispatcher a lock attempt and a read at
// intervals that double while nothing changes, not every 10 s for as long as
// they wait.
func TestR17InstancesAFilterExcludesCostLessAndLessWhileTheyWait(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Second, ReconcileInterval: time.Hour, Now: clock.Now})
	const instances = 10
	newer := cdb.NewSemanticVersion(9, 0, 0)
	for i := 0; i < instances; i++ {
		id := fmt.Sprintf("pinned-%d", i)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(id), 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		md := providertest.TestOrchMetadata()
		md.PinnedDuroxideVersion = &newer
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(id, 1)}, nil, nil, md, nil))
	}
	for i := 0; i < instances; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("pinned-%d", i)), 0))
	}
	older := &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{
		{Min: cdb.NewSemanticVersion(0, 1, 0), Max: cdb.NewSemanticVersion(0, 1, 99)}}}
	dispatch := func(d time.Duration) (requests int64) {
		before := acct.Counts().Requests
		for elapsed := time.Duration(0); elapsed < d; elapsed += 100 * time.Millisecond {
			item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, older)
			require.NoError(t, err)
			require.Nil(t, item, "the filter excludes every instance")
			clock.Advance(100 * time.Millisecond)
		}
		return acct.Counts().Requests - before
	}
	const half = 5 * time.Minute
	first := dispatch(half)
	second := dispatch(half)
	polls := int64(half / time.Second)
	t.Logf("%d instances outside the filter: %d requests in the first %v, %d in the next (%d idle polls each)", instances, first, half, second, polls)
	// At most two more looks at each in the second half: each a lock
	// attempt, a read and the query that follows the skip.
	assert.LessOrEqual(t, second, polls+1+2*3*instances, "the looks at them grow rarer")
}

// A start batch that brought back parked messages holds its lock like any
// other: a renewal whose response is lost is resolved as ours (the instance
// document still says parkedUntil until the ack), and the ack then drops
// parkedUntil.
func TestARenewalOfAStartBatchThatUnparkedSurvivesALostResponse(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstanceMessage{Instance: "renewed", Reason: "r"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("renewed"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, []string{"CancelInstance", "StartOrchestration"}, messageKinds(item))

	loseFirstResponse(acct, "Batch", "lockedUntil")
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute), "the renewal applied: the lock is still ours")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("renewed", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	resp, err := p.Container().ReadItem(ctx, cdb.NewPartitionKeyString("renewed"), "inst", nil)
	require.NoError(t, err)
	assert.NotContains(t, string(resp.Value), "parkedUntil", "the ack says none is parked any more")
}

// QueueMessages for an id never started are dropped, as duroxide does,
// without taking away what tells the start about the id's parked messages.
func TestDroppedOrphanQueueMessagesLeaveTheParkedMessagesToTheStart(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "mixed", Name: "first", Data: "{}"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)), "parked")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "mixed", Name: "inbox", Data: "orphan"}, 0))
	assert.Empty(t, fetchAll(t, p, ackWithoutATurn(t, p)), "dropped")
	assert.Equal(t, 1, countDocs(t, p, "mixed", "msg"), "only the parked event is left")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("mixed"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"ExternalRaised", "StartOrchestration"}, messageKinds(item), "the start still brings the parked event")
}

// A QueueEventMessage for an instance whose start an abandon's delay hides is
// neither dropped as an orphan nor parked: it is handed over named after
// the start, for the runtime to hand back until the start comes; and an
// event before a start that was enqueued with a delay is parked as
// before, since nothing hides that start but its own schedule.
func TestMessagesBeforeAHiddenStartAreHandedOverNamedAfterIt(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("hidden"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 5*time.Second, false))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "hidden", Name: "q", Data: "kept"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "handed over, not dropped as an orphan")
	assert.Equal(t, "TestOrch", item.OrchestrationName, "named after its hidden start")
	assert.Empty(t, item.History)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true))
	assert.Equal(t, 2, countDocs(t, p, "hidden", "msg"), "the start and the message are both queued")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("later"), time.Minute))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("later"), 0))
	clock.Advance(6 * time.Second) // past the hidden start's delay: it is fetched here, not "later"'s event
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			break
		}
		require.Equal(t, "hidden", item.Instance, "the event before a start scheduled later is parked, not handed over")
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, []cdb.Event{providertest.StartedEvent("hidden", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	}
}

// Queue messages for an instance whose start is queued but not in their
// batch (enqueued with a delay, or visible again only after the fetch's
// query ran) are not orphans: they wait for the start and come with it.
func TestQueueMessagesBeforeAQueuedStartAreNotDroppedAsOrphans(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("starts-later"), 10*time.Second))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "starts-later", Name: "q", Data: "early"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the message waits for its start")

	clock.Advance(10 * time.Second)
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"StartOrchestration", "QueueMessage"}, messageKinds(item), "the message comes with its start")
}
