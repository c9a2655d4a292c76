package cdb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/providertest"
)

// The cost of fetching under load: what concurrent fetches of one process
// spend on each other.

// A fan-out's activities are spread over the dispatch slots one by one, so
// fetches that query disjoint slots pick them up in parallel rather than
// one lane taking them one after another.
func TestAFanOutsActivitiesLandInDifferentSlots(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "fan")
	for id := uint64(2); id < 10; id++ {
		require.NoError(t, p.EnqueueForWorker(ctx, activity("fan", id, "")))
	}
	res, err := p.Container().QueryItems(ctx,
		"SELECT VALUE c.slot FROM c WHERE c.type = 'work'", nil, &cdb.QueryOptions{PartitionKey: ptrTo(cdb.NewPartitionKeyString("fan"))})
	require.NoError(t, err)
	slots := map[int]bool{}
	for _, raw := range res.Items {
		var s int
		require.NoError(t, json.Unmarshal(raw, &s))
		slots[s] = true
	}
	require.Len(t, res.Items, 8)
	assert.Greater(t, len(slots), 4, "8 activities of one instance should spread over the slots, got %v", slots)
}

// Two fetches of one process that read the same candidates do not both
// claim the same item: the second takes the next candidate instead of
// sending a claim that can only meet a 412.
func TestConcurrentWorkerFetchesOfOneProcessDoNotRaceForAnItem(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var (
		mu      sync.Mutex
		patches int
	)
	firstPatchHeld := make(chan struct{})
	secondPatchSent := make(chan struct{})
	p := newHookedProvider(t, acct, cdb.Config{ShortPolling: true}, func(r *http.Request) {
		if r.Method != http.MethodPatch {
			return
		}
		mu.Lock()
		patches++
		n := patches
		mu.Unlock()
		switch n {
		case 1: // fetch A's claim waits until fetch B has read the same candidates and claimed
			close(firstPatchHeld)
			select {
			case <-secondPatchSent:
			case <-time.After(30 * time.Second):
			}
		case 2:
			close(secondPatchSent)
		}
	})
	providertest.CreateInstance(ctx, t, p, "pair")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("pair", 2, "")))
	require.NoError(t, p.EnqueueForWorker(ctx, activity("pair", 3, "")))
	before := p.Client().Stats().ByOperation["PatchItem"].Errors

	got := make(chan *cdb.ActivityExecuteMessage, 2)
	go func() {
		a, _, _ := fetchWork(ctx, t, p, nil)
		got <- a
	}()
	<-firstPatchHeld
	b, _, _ := fetchWork(ctx, t, p, nil)
	a := <-got
	require.NotNil(t, a)
	require.NotNil(t, b)
	assert.NotEqual(t, a.ID, b.ID, "each fetch took its own item")
	assert.Equal(t, before, p.Client().Stats().ByOperation["PatchItem"].Errors, "no claim met a 412")
}

// fetchResult is what a background fetch returned.
type fetchResult struct {
	item  any
	token string
	err   error
}

// waitForWaiters waits until n fetches of queue wait on p's signal.
func waitForWaiters(t *testing.T, p *cdb.CosmosProvider, queue string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return cdb.WaitingFetchesForTest(p, queue) == n }, time.Minute, time.Millisecond,
		"%d fetches of the %s queue should be waiting", n, queue)
}

// A worker item this process writes wakes one of the fetches waiting for
// work, which finds it with one single-partition query and one claim,
// however many fetches wait and however many partition key ranges the
// container has; the others go on waiting without a request.
func TestAnAnnouncedWorkItemWakesOneFetchForOneQuery(t *testing.T) {
	for _, ranges := range []int{1, 4} {
		t.Run(fmt.Sprintf("ranges=%d", ranges), func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges})
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
			providertest.CreateInstance(ctx, t, p, "one")

			const waiting = 4
			fetchCtx, stopFetches := context.WithCancel(ctx)
			defer stopFetches()
			results := make(chan fetchResult, waiting)
			for range waiting {
				go func() {
					item, token, _, err := p.FetchWorkItem(fetchCtx, time.Minute, time.Minute, nil, cdb.DefaultOnlyFilter())
					results <- fetchResult{item, token, err}
				}()
			}
			waitForWaiters(t, p, "worker", waiting)
			log := logRequests(acct)

			require.NoError(t, p.EnqueueForWorker(ctx, activity("one", 2, "")))
			first := <-results
			require.NoError(t, first.err)
			require.NotNil(t, first.item, "a waiting fetch takes the item")
			waitForWaiters(t, p, "worker", waiting-1)
			stopFetches()
			for range waiting - 1 {
				r := <-results
				require.Nil(t, r.item)
			}
			assert.Equal(t, []string{"CreateItem", "Query", "PatchItem"}, log.ops(),
				"the enqueue, then one query and one claim: no other fetch woke")
		})
	}
}

// A message for an instance this process holds is announced when the lock
// is let go: a fetch waiting meanwhile takes it right after the ack, not at
// the next idle poll (an hour away here).
func TestAMessageArrivingDuringATurnIsFetchedAfterTheAck(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "held")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "held", Name: "first", Data: "{}"}, 0))
	held, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, held)

	results := make(chan fetchResult, 1)
	go func() {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 30*time.Second, nil)
		results <- fetchResult{item, token, err}
	}()
	waitForWaiters(t, p, "orchestrator", 1)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "held", Name: "second", Data: "{}"}, 0))
	require.Eventually(t, func() bool { return cdb.AnnouncementDeferredForTest(p, "held") }, time.Minute, time.Millisecond,
		"the woken fetch finds the instance held here and defers the announcement")
	waitForWaiters(t, p, "orchestrator", 1) // and waits again
	select {
	case r := <-results:
		t.Fatalf("the instance is held, yet the fetch returned %+v", r)
	default:
	}

	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	r := <-results
	require.NoError(t, r.err)
	require.NotNil(t, r.item, "the waiting fetch takes the message once the lock is let go")
	item := r.item.(*cdb.OrchestrationItem)
	require.Len(t, item.Messages, 1)
	assert.Equal(t, "second", item.Messages[0].(cdb.ExternalRaisedMessage).Name)
}

// A message this process writes is fetched on the busy path with one
// single-partition query, the lock batch and the load query, whatever the
// number of partition key ranges; when this process committed the
// instance's last turn, the load is skipped (its state is cached).
func TestAnAnnouncedMessageIsFetchedInThreeRequestsAtAnyRangeCount(t *testing.T) {
	for _, ranges := range []int{1, 4} {
		t.Run(fmt.Sprintf("ranges=%d", ranges), func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges})
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
			other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
			providertest.CreateInstance(ctx, t, other, "busy") // committed elsewhere: not cached here

			results := make(chan fetchResult, 1)
			fetch := func() {
				item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, time.Minute, nil)
				results <- fetchResult{item, token, err}
			}
			go fetch()
			waitForWaiters(t, p, "orchestrator", 1)
			log := logRequests(acct)
			require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "busy", Name: "a", Data: "{}"}, 0))
			r := <-results
			require.NoError(t, r.err)
			require.NotNil(t, r.item)
			assert.Equal(t, []string{"Batch", "Query", "Batch", "Query"}, log.ops(),
				"the enqueue, then the partition's candidates, the lock, the load")
			require.NoError(t, p.AckOrchestrationItem(ctx, r.token, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil))

			go fetch()
			waitForWaiters(t, p, "orchestrator", 1)
			log.take()
			require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "busy", Name: "b", Data: "{}"}, 0))
			r = <-results
			require.NoError(t, r.err)
			require.NotNil(t, r.item)
			assert.Equal(t, []string{"Batch", "Query", "Batch"}, log.ops(), "this process committed the last turn: no load")
		})
	}
}

// The runtime's client reads an instance's status with one request on the
// Cosmos provider: the instance document holds status, output and custom
// status.
func TestGetStatusIsOneRead(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "done")
	item, token, _, err := func() (*cdb.OrchestrationItem, string, uint32, error) {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "done", Name: "go", Data: "{}"}, 0))
		return p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	}()
	require.NoError(t, err)
	require.NotNil(t, item)
	completed := cdb.StatusCompleted
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{{EventID: 2, InstanceID: "done", ExecutionID: 1, Kind: cdb.OrchestrationCompleted{Output: `"ok"`}}},
		nil, nil, cdb.ExecutionMetadata{Status: &completed, Output: ptrTo(`"ok"`)}, nil))

	log := logRequests(acct)
	st, err := durable.NewClient(p).GetStatus(ctx, "done")
	require.NoError(t, err)
	assert.Equal(t, durable.StateCompleted, st.State)
	assert.Equal(t, `"ok"`, st.Output)
	assert.Equal(t, []string{"ReadItem"}, log.ops())
}

// An instance's first turn is fetched without a load: no ack has named the
// instance, so it has no history, execution, KV or outbox documents to read.
// A start queued here costs the lock batch alone, at any number of ranges:
// the start is a sighting (sightings.go), so its partition is not queried;
// a start a waiting fetch of this process takes is written locked to it
// (Eager starts), and costs its batch alone.
func TestAStartIsFetchedWithoutALoad(t *testing.T) {
	for _, c := range []struct {
		ranges  int
		noEager bool
		want    []string
		why     string
	}{
		{1, true, []string{"Batch", "Batch"}, "the start's batch, the lock of what it wrote"},
		{4, true, []string{"Batch", "Batch"}, "the start's batch, the lock of what it wrote"},
		{1, false, nil, "nothing: the start is handed to the waiting fetch unwritten, and its first turn's commit writes it"},
		{4, false, nil, "nothing: the start is handed to the waiting fetch unwritten, and its first turn's commit writes it"},
	} {
		t.Run(fmt.Sprintf("ranges=%d/eager=%t", c.ranges, !c.noEager), func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: c.ranges})
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, DisableEagerDispatch: c.noEager})
			results := make(chan fetchResult, 1)
			go func() {
				item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, time.Minute, nil)
				results <- fetchResult{item, token, err}
			}()
			waitForWaiters(t, p, "orchestrator", 1)
			log := logRequests(acct)
			started := startInBackground(func() error { return p.EnqueueForOrchestrator(ctx, providertest.StartItem("fresh"), 0) })
			r := <-results
			require.NoError(t, r.err)
			require.NotNil(t, r.item)
			assert.Equal(t, c.want, log.ops(), c.why)
			item := r.item.(*cdb.OrchestrationItem)
			assert.Empty(t, item.History)
			assert.Equal(t, cdb.InitialExecutionID, item.ExecutionID)
			require.NoError(t, p.AckOrchestrationItem(ctx, r.token, cdb.InitialExecutionID,
				[]cdb.Event{providertest.StartedEvent("fresh", cdb.InitialExecutionID)}, nil, nil, providertest.TestOrchMetadata(), nil))
			require.NoError(t, <-started)
		})
	}
}

// stepCosts measures the requests and RU an account serves for named steps.
type stepCosts struct {
	acct  *cdb.FakeAccount
	steps []stepCost
}

type stepCost struct {
	name     string
	requests int64
	ru       float64
}

// measure runs f as a step named name.
func (c *stepCosts) measure(name string, f func()) {
	before := c.acct.Counts()
	f()
	after := c.acct.Counts()
	c.steps = append(c.steps, stepCost{name, after.Requests - before.Requests, after.RequestCharge - before.RequestCharge})
}

// summed is the steps summed by name, the names in their first order, and
// the total.
func (c *stepCosts) summed() (byName map[string]stepCost, names []string, total stepCost) {
	byName = map[string]stepCost{}
	for _, s := range c.steps {
		agg, seen := byName[s.name]
		if !seen {
			names = append(names, s.name)
		}
		agg.name, agg.requests, agg.ru = s.name, agg.requests+s.requests, agg.ru+s.ru
		byName[s.name] = agg
		total.requests, total.ru = total.requests+s.requests, total.ru+s.ru
	}
	return byName, names, total
}

// The requests and RU of one fan-out-5 orchestration, step by step, as the
// runtime drives the provider in one process (every step's work announced in
// process, so each fetch queries one partition), at 1 and 4 partition key
// ranges. The request counts are pinned; the RU are logged for
// ARCHITECTURE.md's sizing table (the fake's index model).
func TestTheCostOfAFanOutFiveOrchestration(t *testing.T) {
	for _, ranges := range []int{1, 4} {
		t.Run(fmt.Sprintf("ranges=%d", ranges), func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges})
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
			const instance = "fan-out-5"
			costs := &stepCosts{acct: acct}
			measure := costs.measure
			fetchTurn := func() (*cdb.OrchestrationItem, string) {
				item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, time.Second, nil)
				require.NoError(t, err)
				require.NotNil(t, item)
				return item, token
			}
			measure("start (enqueue)", func() {
				require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
			})
			var token string
			measure("orchestration fetch, first turn", func() { _, token = fetchTurn() })
			scheduled, work := fanOut(instance, 5)
			measure("ack: schedule 5 activities", func() {
				events := append([]cdb.Event{providertest.StartedEvent(instance, 1)}, scheduled...)
				require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, providertest.TestOrchMetadata(), nil))
			})
			for range work {
				var act cdb.ActivityExecuteMessage
				var wtoken string
				measure("worker fetch", func() {
					item, tok, _, err := p.FetchWorkItem(ctx, time.Minute, time.Second, nil, cdb.DefaultOnlyFilter())
					require.NoError(t, err)
					require.NotNil(t, item)
					act, wtoken = item.(cdb.ActivityExecuteMessage), tok
				})
				measure("worker ack", func() {
					require.NoError(t, p.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: act.ID, Result: "ok"}))
				})
			}
			var item *cdb.OrchestrationItem
			measure("orchestration fetch, the completions (history cached)", func() { item, token = fetchTurn() })
			require.Len(t, item.Messages, 5, "the five completions in one turn")
			measure("ack: complete", func() {
				events := []cdb.Event{{EventID: 12, InstanceID: instance, ExecutionID: 1, DuroxideVersion: "0.1.29",
					Kind: cdb.OrchestrationCompleted{Output: `"done"`}}}
				require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, providertest.TestOrchMetadata(), nil))
			})

			byName, _, total := costs.summed()
			steps := costs.steps
			for _, name := range []string{"start (enqueue)", "orchestration fetch, first turn", "ack: schedule 5 activities", "worker fetch", "worker ack",
				"orchestration fetch, the completions (history cached)", "ack: complete"} {
				s := byName[name]
				t.Logf("%d ranges | %s | %d requests | %.1f RU", ranges, name, s.requests, s.ru)
			}
			t.Logf("%d ranges | a fan-out-5 orchestration | %d requests | %.1f RU", ranges, total.requests, total.ru)
			assert.Equal(t, []int64{1, 1, 1}, []int64{steps[0].requests, steps[1].requests, steps[2].requests}, "start, first fetch (the start's sighting: the lock alone), ack")
			// A worker fetch that queries claims, in its claim's batch, the
			// partition's next items ahead for the fetches that follow, as
			// many as the ready list's depth (which the fetches' timing
			// moves), and those take them without a request.
			fetches := byName["worker fetch"].requests
			assert.LessOrEqual(t, fetches, int64(2+0+2+0+2), "at most every other fetch queries and claims")
			assert.GreaterOrEqual(t, fetches, int64(2), "the first queries and claims")
			assert.Equal(t, int64(5), byName["worker ack"].requests)
			assert.Equal(t, int64(2+1), byName["orchestration fetch, the completions (history cached)"].requests+byName["ack: complete"].requests)
			assert.Equal(t, 11+fetches, total.requests, "the same at any range count")
		})
	}
}

// A worker fetch's candidate query reads the items' heads, not their bodies
// (an activity's input may be megabytes): the claim's response carries the
// whole item, so the activity still gets its input.
func TestWorkerCandidateQueriesLeaveTheItemOut(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	input := `"` + strings.Repeat("x", 1<<20) + `"`
	act := cdb.ActivityExecuteMessage{Instance: "big-input", ExecutionID: 1, ID: 2, Name: "Work", Input: input}
	require.NoError(t, p.EnqueueForWorker(ctx, act))
	log := logRequests(acct)
	item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, input, item.(cdb.ActivityExecuteMessage).Input, "the claim's response carries the input")
	var queries int
	for _, r := range log.take() {
		if r.Operation != "Query" {
			continue
		}
		queries++
		body := string(r.Body)
		assert.NotContains(t, body, "SELECT TOP @top *", "a worker candidate query selects fields")
		assert.NotRegexp(t, `c\.item\s*(,|FROM)`, body, "and not the item (only its length, for the claim's answer)")
	}
	assert.Positive(t, queries)
}

// Work this process writes while no fetch waits is announced for the
// fetches to come, and none of it is left to the idle poll (an hour away
// here), however much of it there is: a fan-out's items are kept as one
// partition's announcements, and the items of partitions beyond those kept
// are found by looks at the whole queue that do not wait for the poll
// interval. Before, at most 256 items' announcements were kept, the oldest
// dropped, and a whole look (one a poll interval) took one of the others
// and announced 16: at 50 fan-outs of 20 in flight, instances waited 45 s.
func TestWorkWrittenWhileNoFetchWaitsIsNeverLeftToTheIdlePoll(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		instances, perInstance int
	}{
		{"fan-outs of 20 in 15 partitions", 15, 20},
		{"one item in each of 300 partitions", 300, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
			none, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
			require.NoError(t, err)
			require.Nil(t, none, "the queue is empty, and looked at: the next idle poll is an hour away")
			for i := range tc.instances {
				for id := range tc.perInstance {
					require.NoError(t, p.EnqueueForWorker(ctx, activity(fmt.Sprintf("fan-%03d", i), uint64(id+2), "")))
				}
			}
			total := tc.instances * tc.perInstance
			for n := range total {
				item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 2*time.Second, nil, cdb.DefaultOnlyFilter())
				require.NoError(t, err)
				require.NotNil(t, item, "item %d of %d is found before the fetch's poll timeout", n+1, total)
			}
		})
	}
}

// A partition's announcements are kept as one, and a look for one of them
// that finds the partition empty drops the others: their work is gone
// (another process took it here), and each would cost a query for nothing.
func TestALookThatFindsAnAnnouncedPartitionEmptyDropsItsOtherAnnouncements(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	writer := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	for id := range 5 {
		require.NoError(t, writer.EnqueueForWorker(ctx, activity("gone", uint64(id+2), "")))
	}
	require.Equal(t, []string{"gone", "gone", "gone", "gone", "gone"}, cdb.AnnouncementsForTest(writer))
	for range 5 {
		item, _, _, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, item)
	}

	log := logRequests(acct)
	item, _, _, err := writer.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.Nil(t, item)
	assert.Empty(t, cdb.AnnouncementsForTest(writer), "the partition's other announcements are dropped")
	assert.Equal(t, []string{"Query", "Query"}, log.ops(), "the announced partition, then the whole queue")
}

// An instance a look at the whole queue saw, and announced to this
// process's other fetches, is locked by the fetch woken for it with what
// the look saw: the lock batch alone, no second query of its partition
// (sightings.go).
func TestAnInstanceALookSawIsLockedWithoutAQueryOfItsPartition(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	starter := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour}) // nothing is announced to p
	for _, instance := range []string{"seen-first", "seen-second"} {
		require.NoError(t, starter.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	}
	log := logRequests(acct)
	first, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, first)
	assert.Equal(t, "seen-first", first.Instance)
	assert.Equal(t, []string{"Query", "Batch"}, log.ops(), "the whole queue, and the oldest instance's lock")

	second, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, second)
	assert.Equal(t, "seen-second", second.Instance)
	assert.Equal(t, []string{"Batch"}, log.ops(), "the lock batch of what the first look saw")
}

// A start this process queued into a new partition (no fetch of its own
// waited for it) is locked by the fetch woken for it with what the start
// wrote: the lock batch alone, no query of its partition (sightings.go).
func TestAStartQueuedHereIsLockedWithoutAQueryOfItsPartition(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("queued-here"), 0))

	log := logRequests(acct)
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "queued-here", item.Instance)
	require.Len(t, item.Messages, 1)
	assert.IsType(t, cdb.StartOrchestrationMessage{}, item.Messages[0])
	assert.Equal(t, []string{"Batch"}, log.ops(), "the lock batch of what the start wrote")
}

// A start written beside messages that came before it (an event raised
// first) is no sighting: the partition held more than the start, so the
// fetch queries it and its batch holds them all.
func TestAStartWrittenAfterItsEventsIsLockedWithThem(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour}) // nothing it writes is announced to p
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "early", Name: "go", Data: `"now"`}, 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("early"), 0))

	log := logRequests(acct)
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "early", item.Instance)
	assert.Len(t, item.Messages, 2, "the event and the start")
	ops := log.ops()
	require.NotEmpty(t, ops)
	assert.Equal(t, "Query", ops[0], "its partition is queried first")
}

// A message this process writes to an instance after its start (an event
// raised at once) makes the start's sighting stale: the fetch queries the
// partition, and the first turn holds both, as it did before starts were
// sighted.
func TestAnEventWrittenHereAfterAStartIsInItsFirstTurn(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("raised-at-once"), 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "raised-at-once", Name: "go", Data: `"now"`}, 0))

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, "raised-at-once", item.Instance)
	assert.Len(t, item.Messages, 2, "the start and the event")
}

// A sighting gone stale (another process took the instance since) takes
// nothing: its lock batch fails, and the fetch queries the partition as
// it would have.
func TestAStaleSightingTakesNothing(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	for _, instance := range []string{"stale-first", "stale-second"} {
		require.NoError(t, other.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	}
	first, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, first)
	taken, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, taken)
	require.Equal(t, "stale-second", taken.Instance)

	log := logRequests(acct)
	second, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, second, "held by the other process")
	ops := log.ops()
	require.NotEmpty(t, ops)
	assert.Equal(t, "Batch", ops[0], "the sighting's lock batch, refused")
	assert.Contains(t, ops[1:], "Query", "then the partition's query, as before")
}

// A look that meets an instance locked by another fetch of this process
// (which locked it after the look's query began) does not pass the instance
// over until that lock would expire: it looks again when the holder lets
// go. Before, a message another process wrote, which the holder's batch
// did not hold, waited for the lock's expiry (5 s in the runtime).
func TestALookThatMeetsALockOfThisProcessLooksAgainWhenItIsLetGo(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	race := &racedLooks{next: acct.Transport(), pk: `["raced"]`,
		holderQueried: make(chan struct{}), holderGoes: make(chan struct{}), lookSent: make(chan struct{}), lookGoes: make(chan struct{})}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: race})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: client, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	elsewhere := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "raced")
	race.armed.Store(true)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "raced", Name: "first", Data: "{}"}, 0))
	holder := make(chan fetchResult, 1)
	go func() {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		holder <- fetchResult{item, token, err}
	}()
	<-race.holderQueried // the holder's look saw the first message
	require.NoError(t, elsewhere.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "raced", Name: "second", Data: "{}"}, 0))
	look := make(chan fetchResult, 1)
	go func() {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 5*time.Second, nil)
		look <- fetchResult{item, token, err}
	}()
	<-race.lookSent // the other look's query is on its way, the instance not held yet
	close(race.holderGoes)
	locked := <-holder
	require.NoError(t, locked.err)
	require.NotNil(t, locked.item, "the holder locks the instance with the first message")
	close(race.lookGoes) // the other look finds the second message, and the lock taken
	waitForWaiters(t, p, "orchestrator", 1)

	require.NoError(t, p.AckOrchestrationItem(ctx, locked.token, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	r := <-look
	require.NoError(t, r.err)
	require.NotNil(t, r.item, "the look that met the lock takes the second message once the lock is let go")
	item := r.item.(*cdb.OrchestrationItem)
	require.Len(t, item.Messages, 1)
	assert.Equal(t, "second", item.Messages[0].(cdb.ExternalRaisedMessage).Name)
}

// racedLooks, once armed, holds the answer to the first candidate query of
// one partition (the holder's look) until holderGoes, then the next
// candidate query of the whole queue (the other look) before it is sent,
// until lookGoes.
type racedLooks struct {
	next                      http.RoundTripper
	pk                        string
	armed, holderSeen         atomic.Bool
	holderQueried, holderGoes chan struct{}
	lookSent, lookGoes        chan struct{}
}

func (h *racedLooks) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("x-ms-documentdb-isquery") == "" || r.Body == nil || !h.armed.Load() {
		return h.next.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !strings.Contains(string(body), "lockedUntil <= @expired") { // a candidate query
		return h.next.RoundTrip(r)
	}
	pk := r.Header.Get("x-ms-documentdb-partitionkey")
	switch {
	case pk == h.pk && h.holderSeen.CompareAndSwap(false, true):
		resp, err := h.next.RoundTrip(r)
		close(h.holderQueried)
		<-h.holderGoes
		return resp, err
	case pk == "" && h.holderSeen.Load() && h.armed.CompareAndSwap(true, false):
		close(h.lookSent)
		<-h.lookGoes
	}
	return h.next.RoundTrip(r)
}

// A long history loads in pages of up to the service's 4 MB, not of 100
// documents: the cold load of a thousand-turn sequence (by another
// process, or after this one's cache let the instance go) is one query
// page, where pages of 100 documents took eleven round trips.
func TestALongHistoryLoadsInOnePage(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	// No reconciler runs while the cold fetch is counted: its sweeps query too.
	quiet := cdb.Config{ShortPolling: true, DisableEagerDispatch: true, ReconcileInterval: time.Hour}
	writer := newRulesProvider(t, acct, quiet)
	const instance, turns = "long", 1000
	providertest.CreateInstance(ctx, t, writer, instance)
	eventID := uint64(2)
	for turn := 0; turn < turns; turn++ {
		require.NoError(t, writer.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "step", Data: "{}"}, 0))
		item, token, _, err := writer.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		events := []cdb.Event{{EventID: eventID, InstanceID: instance, ExecutionID: 1, DuroxideVersion: "0.1.29",
			Kind: cdb.ExternalEvent{Name: "step", Data: "{}"}}}
		eventID++
		require.NoError(t, writer.AckOrchestrationItem(ctx, token, 1, events, nil, nil, providertest.TestOrchMetadata(), nil))
	}

	cold := newRulesProvider(t, acct, quiet)
	require.NoError(t, cold.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "step", Data: "{}"}, 0))
	log := logRequests(acct)
	costBefore := acct.Counts().RequestCharge
	item, _, _, err := cold.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Len(t, item.History, turns+1, "the start and a thousand events")
	ops := log.ops()
	assert.Equal(t, []string{"Query", "Batch", "Query"}, ops, "the candidates, the lock, and the history in one page")
	t.Logf("a cold fetch of a %d-event history: %d requests, %.1f RU", turns+1, len(ops), acct.Counts().RequestCharge-costBefore)
}

// A turn holds at most a candidate page's (or MaxMessagesPerTurn's)
// messages. When a fan-in's completions are all in the queue before its
// turns run, the turn that takes the first of them leaves the rest behind,
// and nothing announces them again: before, the next turn waited for the
// next idle look (a poll interval each, a second per 32 completions). Its
// ack now announces its partition again, so a waiting fetch takes the rest
// at once.
func TestATurnThatLeftMessagesBehindHasThemFetchedAfterItsAck(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "many")
	for i := 0; i < 50; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "many", Name: "e", Data: fmt.Sprint(i)}, 0))
	}
	first, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, first)
	require.Less(t, len(first.Messages), 50, "one turn holds a page of them")

	results := make(chan fetchResult, 1)
	go func() {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 30*time.Second, nil)
		results <- fetchResult{item, token, err}
	}()
	waitForWaiters(t, p, "orchestrator", 1)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	r := <-results // with a poll interval of an hour, only an announcement wakes it
	require.NoError(t, r.err)
	require.NotNil(t, r.item, "the waiting fetch takes the rest once the turn is acked, not at the next idle look")
	assert.Len(t, r.item.(*cdb.OrchestrationItem).Messages, 50-len(first.Messages))
}
