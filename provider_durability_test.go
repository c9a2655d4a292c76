package cdb_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/cosmostest"
	"github.com/duroxide-go/cdb/providertest"
)

// Durability regressions of the orchestrator queue: each test reproduces
// what a user saw lose, repeat or stall work.

// openProvider opens a provider on the test's account (every call on the
// same one, as several processes would share it).
type openProvider func(t *testing.T, cfg cdb.Config) *cdb.CosmosProvider

// onFakeAndNPM runs a regression that needs no fault injection on the
// in-memory account and, when make test started it, on
// @vercel/cosmosdb-server.
func onFakeAndNPM(t *testing.T, body func(t *testing.T, open openProvider)) {
	t.Run("fake", func(t *testing.T) {
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
		body(t, func(t *testing.T, cfg cdb.Config) *cdb.CosmosProvider { return newRulesProvider(t, acct, cfg) })
	})
	t.Run("npm", func(t *testing.T) {
		if npmServer == nil {
			t.Skip("no @vercel/cosmosdb-server: set CDB_COSMOSDB_SERVER_CLI (make test does)")
		}
		env := cosmostest.NPMTarget(npmServer.Endpoint).Open(t)
		db := env.NewDatabase(t)
		body(t, func(t *testing.T, cfg cdb.Config) *cdb.CosmosProvider {
			cfg.Client, cfg.Database = env.Client, db
			p, err := cdb.NewProvider(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		})
	})
}

// startedWithInput is the OrchestrationStarted event of a TestOrch instance
// with this input, so two lives of one id can be told apart.
func startedWithInput(instance, input string) cdb.Event {
	e := providertest.StartedEvent(instance, cdb.InitialExecutionID)
	started := e.Kind.(cdb.OrchestrationStarted)
	started.Input = input
	e.Kind = started
	return e
}

// Process A holds instance x's history from its own ack; process B deletes
// x, starts it again and commits its first turn. A's next fetch must hand
// the runtime the live instance's history, not the deleted one's.
func TestHistoryCacheIsNotFooledByIDReuse(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		ctx := rulesContext(t)
		a := open(t, cdb.Config{ShortPolling: true})
		b := open(t, cdb.Config{ShortPolling: true})
		const x = "reused"

		require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem(x), 0))
		item, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, []cdb.Event{startedWithInput(x, `"first life"`)}, nil, nil, providertest.TestOrchMetadata(), nil))

		_, err = b.DeleteInstance(ctx, x, true)
		require.NoError(t, err)
		require.NoError(t, b.EnqueueForOrchestrator(ctx, providertest.StartItem(x), 0))
		item, token, _, err = b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Empty(t, item.History, "a restarted id starts with an empty history")
		require.NoError(t, b.AckOrchestrationItem(ctx, token, 1, []cdb.Event{startedWithInput(x, `"second life"`)}, nil, nil, providertest.TestOrchMetadata(), nil))

		require.NoError(t, b.EnqueueForOrchestrator(ctx, pokeItem(x), 0))
		item, _, _, err = a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Len(t, item.History, 1)
		require.Equal(t, `"second life"`, item.History[0].Kind.(cdb.OrchestrationStarted).Input,
			"process A served the deleted instance's history from its cache")
	})
}

// testClock is a provider clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock { return &testClock{now: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// messageKinds lists the kinds of a batch's messages, in order.
func messageKinds(item *cdb.OrchestrationItem) []string {
	var kinds []string
	for _, m := range item.Messages {
		kinds = append(kinds, m.Kind())
	}
	return kinds
}

// continueAsNewWithBacklog leaves instance id's execution 1 continued as
// new after the first turn, with n QueueMessages queued before the
// ContinueAsNew message, and returns the QueueMessages the first turn took.
func continueAsNewWithBacklog(t *testing.T, p *cdb.CosmosProvider, id string, n int) int {
	t.Helper()
	ctx := rulesContext(t)
	providertest.CreateInstance(ctx, t, p, id)
	for i := 0; i < n; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: id, Name: "inbox", Data: strconv.Itoa(i)}, 0))
	}
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	can := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: id, ExecutionID: 1, Kind: cdb.OrchestrationContinuedAsNew{Input: "next"}}},
		nil, []cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: id, Orchestration: "TestOrch", Input: "next", Version: ptrTo("1.0.0")}},
		cdb.ExecutionMetadata{Status: &can, Output: ptrTo("next")}, nil))
	return len(item.Messages)
}

// drainInbox runs turns of instance id, whose current execution is exec,
// until its queue is empty, as the runtime would, and returns the QueueEventMessage payloads delivered after the
// ContinueAsNew and how many batches held a ContinueAsNew message.
func drainInbox(t *testing.T, p *cdb.CosmosProvider, id string, exec uint64) ([]string, int) {
	t.Helper()
	ctx := rulesContext(t)
	var got []string
	cans := 0
	for turn := 0; turn < 100; turn++ {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return got, cans
		}
		var delta []cdb.Event
		md := cdb.ExecutionMetadata{}
		for _, m := range item.Messages {
			switch w := m.(type) {
			case cdb.ContinueAsNewMessage:
				cans++
				exec = item.ExecutionID + 1
				delta = append(delta, providertest.StartedEvent(id, exec))
				md = providertest.TestOrchMetadata()
			case cdb.QueueEventMessage:
				got = append(got, w.Data)
			}
		}
		if exec == 1 {
			t.Fatalf("turn %d: a batch without the ContinueAsNew message reached the continued execution: %v", turn, messageKinds(item))
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, exec, delta, nil, nil, md, nil))
	}
	t.Fatal("the queue never emptied")
	return nil, 0
}

// An eternal orchestration continues as new while more messages are queued
// than a batch holds: the next batch must hold the ContinueAsNew message,
// and every queued message must reach the new execution once.
func TestContinueAsNewWithABacklogLosesNothing(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		p := open(t, cdb.Config{ShortPolling: true})
		const n = 100
		first := continueAsNewWithBacklog(t, p, "inbox", n)
		got, cans := drainInbox(t, p, "inbox", 1)
		assert.Equal(t, 1, cans, "the ContinueAsNew message is delivered once")
		assert.Len(t, got, n-first, "every message queued behind the first turn reaches the new execution")
		assert.Equal(t, 0, countDocs(t, p, "inbox", "msg"), "nothing is left queued")
	})
}

// The same with a ContinueAsNew message queued in its turn's order (as an
// older version wrote it): the completed batch takes it and the oldest
// others, and releases at once the messages its lock took that no longer fit.
func TestContinueAsNewInQueueOrderIsCompletedWithinTheCap(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, MaxMessagesPerTurn: 10, CandidatesPerRange: 10})
	const id, n = "legacy", 30
	first := continueAsNewWithBacklog(t, p, id, n)
	// Rewrite the ContinueAsNew message as an older version queued it.
	pk := cdb.NewPartitionKeyString(id)
	res, err := p.Container().QueryItems(ctx, "SELECT * FROM c WHERE c.pk = @pk AND c.type = 'msg' AND c.visibleAt = 0",
		[]cdb.QueryParameter{{Name: "@pk", Value: id}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 1, "the commit queued the ContinueAsNew message at the head")
	var doc map[string]any
	require.NoError(t, json.Unmarshal(res.Items[0], &doc))
	doc["visibleAt"] = time.Now().UnixMilli()
	doc["seq"] = time.Now().UnixMicro()
	_, err = p.Container().UpsertItem(ctx, pk, mustJSON(t, doc), nil)
	require.NoError(t, err)

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Contains(t, messageKinds(item), "ContinueAsNew")
	assert.Len(t, item.Messages, 10, "the batch keeps to MaxMessagesPerTurn")
	taken := len(item.Messages) - 1
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 2, []cdb.Event{providertest.StartedEvent(id, 2)}, nil, nil, providertest.TestOrchMetadata(), nil))

	rest, err := p.Container().QueryItems(ctx, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk AND c.type = 'msg' AND c.lockedUntil > 0",
		[]cdb.QueryParameter{{Name: "@pk", Value: id}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	assert.JSONEq(t, "0", string(rest.Items[0]), "no message is left locked by a lock that ended")
	got, cans := drainInbox(t, p, id, 2)
	assert.Zero(t, cans)
	assert.Len(t, got, n-first-taken, "the rest arrive in later turns")
	assert.Equal(t, 0, countDocs(t, p, id, "msg"))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// queueRawMessage writes an orchestrator message whose work item is raw, as
// a newer version of the provider might have written it.
func queueRawMessage(t *testing.T, p *cdb.CosmosProvider, instance, id, item string) {
	t.Helper()
	now := time.Now()
	doc := map[string]any{"id": id, "pk": instance, "type": "msg", "instance": instance, "slot": 0,
		"visibleAt": now.UnixMilli(), "seq": now.UnixMicro(), "lockedUntil": 0, "attempts": 0, "item": item}
	_, err := p.Container().CreateItem(rulesContext(t), cdb.NewPartitionKeyString(instance), mustJSON(t, doc), nil)
	require.NoError(t, err)
}

// A message that does not decode (a kind a newer version wrote during a
// rolling upgrade) never fails a fetch nor blocks its instance: the
// instance's other messages and other instances go on, and the message
// itself comes back with its attempts counted until it is set aside as a
// poison message.
func TestUndecodableMessageNeverStopsTheQueue(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "upgraded")
	queueRawMessage(t, p, "upgraded", "m|future", `{"FromTheFuture":{"instance":"upgraded"}}`)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("upgraded"), 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("bystander"), 0))

	seen := map[string][]string{}
	for i := 0; i < 2; i++ {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err, "an undecodable message must not fail the fetch")
		require.NotNil(t, item)
		seen[item.Instance] = messageKinds(item)
		var delta []cdb.Event
		md := cdb.ExecutionMetadata{}
		if item.Instance == "bystander" {
			delta, md = []cdb.Event{providertest.StartedEvent("bystander", 1)}, providertest.TestOrchMetadata()
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, delta, nil, nil, md, nil))
	}
	assert.Equal(t, []string{"ExternalRaised"}, seen["upgraded"], "the instance's decodable message goes on without it")
	assert.Equal(t, []string{"StartOrchestration"}, seen["bystander"])

	for i := 0; i < 60; i++ {
		clock.Advance(30 * time.Second)
		item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item, "only the undecodable message is left, and it is never handed over")
	}
	resp, err := p.Container().ReadItem(ctx, cdb.NewPartitionKeyString("upgraded"), "m|future", nil)
	require.NoError(t, err, "set aside, not deleted")
	var doc struct {
		Type     string `json:"type"`
		Attempts int    `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	assert.Equal(t, "msg-poison", doc.Type, "after its attempts the message leaves the queue")
	assert.Equal(t, 10, doc.Attempts, "every look counted an attempt")
}

// Items a fetch cannot take must not use up its lock attempts nor come
// back to the head on every look: instances pinned outside the fetch's
// capability filter, ahead of real work.
func TestFilteredInstancesAtTheHeadDoNotStarveTheFetch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	v1 := cdb.NewSemanticVersion(1, 0, 0)
	for i := 0; i < 12; i++ {
		id := fmt.Sprintf("old-%02d", i)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(id), 0))
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Equal(t, id, item.Instance)
		md := providertest.TestOrchMetadata()
		md.PinnedDuroxideVersion = &v1
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(id, 1)}, nil, nil, md, nil))
	}
	for i := 0; i < 12; i++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(fmt.Sprintf("old-%02d", i)), 0))
	}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("new"), 0))

	v2 := &cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{{Min: cdb.NewSemanticVersion(2, 0, 0), Max: cdb.NewSemanticVersion(2, 99, 0)}}}
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, v2)
	require.NoError(t, err)
	require.NotNil(t, item, "twelve instances the filter excludes must not hide the one it takes")
	require.Equal(t, "new", item.Instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("new", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("new"), 0))
	log := logRequests(acct)
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, v2)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "new", item.Instance)
	assert.Equal(t, []string{"Query", "Batch"}, log.ops(), "the next look leaves the excluded instances out: a query and the lock, history cached")
}

// A message held for its instance's start leaves the head of the queue:
// an idle process does not lock and release it on every look.
func TestHeldMessageLeavesTheHeadOfTheQueue(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: time.Millisecond, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("not-yet"), 0))
	log := logRequests(acct)
	for i := 0; i < 12; i++ { // 3 s of looks every 250 ms
		item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item)
		clock.Advance(250 * time.Millisecond)
	}
	batches := 0
	for _, op := range log.ops() {
		if op == "Batch" {
			batches++
		}
	}
	assert.LessOrEqual(t, batches, 8, "the held message is locked and released about once a second, not on every look")
	assert.Equal(t, 1, countDocs(t, p, "not-yet", "msg"), "and still waits for its start")
}

// loseFirstResponse commits the first matching request and drops its
// response, so the client cannot know it succeeded.
func loseFirstResponse(acct *cdb.FakeAccount, op, bodyContains string) {
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == op && strings.Contains(string(r.Body), bodyContains)
	}})
}

// An enqueue whose response is lost is resolved inside the provider: the
// caller is told it succeeded, and the message is queued once, so one
// raise never satisfies two waits.
func TestEnqueueWithALostResponseQueuesOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

	loseFirstResponse(acct, "Batch", "StartOrchestration")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("lossy"), 0), "the start was written")
	assert.Equal(t, 1, countDocs(t, p, "lossy", "msg"))

	loseFirstResponse(acct, "Batch", "ExternalRaised")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "lossy", Name: "approve", Data: "{}"}, 0), "the event was written")
	assert.Equal(t, 2, countDocs(t, p, "lossy", "msg"), "the start and one event")
}

// An id spelled like the partition key of a long (hashed) id gets a
// partition of its own.
func TestIDSpelledLikeAHashedIDHasItsOwnPartition(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		ctx := rulesContext(t)
		p := open(t, cdb.Config{ShortPolling: true})
		long := strings.Repeat("L", 1100)
		sum := sha256.Sum256([]byte(long))
		crafted := "sha256:" + hex.EncodeToString(sum[:])

		providertest.CreateInstance(ctx, t, p, long)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(crafted), 0))
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.Equal(t, crafted, item.Instance)
		assert.Empty(t, item.History, "the crafted id must not see the long id's history")
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{startedWithInput(crafted, `"crafted"`)}, nil, nil, providertest.TestOrchMetadata(), nil))

		history, err := p.Read(ctx, long)
		require.NoError(t, err)
		require.Len(t, history, 1)
		assert.Equal(t, "{}", history[0].Kind.(cdb.OrchestrationStarted).Input, "the long id's history is its own")
		info, err := p.GetInstanceInfo(ctx, long)
		require.NoError(t, err)
		assert.Equal(t, long, info.InstanceID)
	})
}

// Deleting an instance delivers the effects its turns committed for other
// instances before it deletes their outbox: a detached start whose delivery
// failed still starts.
func TestDeletingAnInstanceKeepsItsUndeliveredDetachedStart(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	committer := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, OutboxMinAge: time.Hour})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, OutboxMinAge: time.Hour})
	require.NoError(t, committer.EnqueueForOrchestrator(ctx, providertest.StartItem("launcher"), 0))
	_, token, _, err := committer.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 403, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && r.PartitionKey == `["detached"]`
	}})
	detached := cdb.StartOrchestrationMessage{Instance: "detached", Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}
	completed := cdb.StatusCompleted
	require.NoError(t, committer.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("launcher", 1)}, nil,
		[]cdb.WorkItem{detached}, cdb.ExecutionMetadata{OrchestrationName: ptrTo("TestOrch"), OrchestrationVersion: ptrTo("1.0.0"), Status: &completed, Output: ptrTo("done")}, nil))
	require.NoError(t, committer.Close(), "the committing process stops before its relay could deliver")
	remove()
	require.Equal(t, 1, countDocs(t, p, "launcher", "outbox"), "the delivery failed: the start waits in the outbox")

	_, err = p.DeleteInstance(ctx, "launcher", false)
	require.NoError(t, err)
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the detached start survives its launcher's deletion")
	assert.Equal(t, "detached", item.Instance)
}

// deletionStalledAfterItsMark is a provider whose deletion of instance
// marked the instance and then lost the store, and finish, which lets the
// deletion's process be gone for good (past AbandonedDeletionAge) and has
// a reconciliation finish the deletion.
func deletionStalledAfterItsMark(ctx context.Context, t *testing.T, instance string) (p *cdb.CosmosProvider, finish func()) {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, AbandonedDeletionAge: time.Second, OutboxMinAge: time.Second, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, instance)
	stall := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 403, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Query" && r.PartitionKey == `["`+instance+`"]`
	}})
	_, err := p.DeleteInstance(ctx, instance, true)
	require.True(t, cdb.HasStatus(err, http.StatusForbidden), "the injected stall stopped the deletion: %v", err)
	stall()
	return p, func() {
		t.Helper()
		clock.Advance(2 * time.Second)
		require.NoError(t, p.ReconcileOutbox(ctx))
	}
}

// fetchNewLife fetches the next orchestration item, which must be the
// start of a new life of instance (no history); what names it.
func fetchNewLife(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance, what string) {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, what)
	assert.Equal(t, instance, item.Instance)
	assert.Empty(t, item.History)
}

// A start enqueued while a deletion of its id is under way is never
// deleted unseen: the enqueue fails as retryable while the deletion runs,
// and once it is done the start begins a new life that later passes of
// the deletion leave alone.
func TestStartDuringADeletionIsNotDeletedUnseen(t *testing.T) {
	ctx := rulesContext(t)
	p, finishDeletion := deletionStalledAfterItsMark(ctx, t, "phoenix")

	err := p.EnqueueForOrchestrator(ctx, providertest.StartItem("phoenix"), 0)
	require.Error(t, err, "the start must not be accepted into a partition being deleted")
	assert.True(t, cdb.IsRetryable(err), "%v", err)

	finishDeletion()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("phoenix"), 0))
	require.NoError(t, p.ReconcileOutbox(ctx), "a later pass of any reconciler")
	fetchNewLife(ctx, t, p, "phoenix", "the new life's start survives")
}

// A lock whose response was lost is found out by reading it back: the fetch
// goes on with the instance it locked, instead of failing and leaving the
// instance locked by nobody until the lock expires.
// Under Session consistency the read-back must see the write whose
// response (and session token) was lost: it reads from the primary.
func TestLostLockResponsesAreResolved(t *testing.T) {
	t.Run("consistent reads", func(t *testing.T) { lostLockResponses(t, false) })
	t.Run("stale reads without a session token", func(t *testing.T) { lostLockResponses(t, true) })
}

func lostLockResponses(t *testing.T, stale bool) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{StaleReadsWithoutSessionToken: stale})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("lost-lock"), 0))
	loseFirstResponse(acct, "Batch", "/lockToken")
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the lock that applied is used")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("lost-lock", 1)},
		[]cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: "lost-lock", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}}, nil, providertest.TestOrchMetadata(), nil),
		"and its ETag is current")

	loseFirstResponse(acct, "PatchItem", "/lockToken")
	work, wtoken, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, work, "the claim that applied is used")
	require.NoError(t, p.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: "lost-lock", ExecutionID: 1, ID: 2, Result: "ok"}))
}

// An ack whose response is lost is found committed by reading the instance
// document from the primary, even when a plain read would be stale.
func TestLostAckResponseUnderStaleReadsIsResolved(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{StaleReadsWithoutSessionToken: true})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("lost-ack"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	loseFirstResponse(acct, "Batch", `"lastAck"`)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("lost-ack", 1)}, nil, nil, providertest.TestOrchMetadata(), nil),
		"the commit happened, so the caller is told it did")
	history, err := p.Read(ctx, "lost-ack")
	require.NoError(t, err)
	assert.Len(t, history, 1)
}

// A worker enqueue whose response is lost queues the activity once: the
// resend's 409 is the lost write, not another item of the same identity.
func TestWorkerEnqueueWithALostResponseQueuesOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	loseFirstResponse(acct, "CreateItem", "ActivityExecute")
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "w-lost", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	assert.Equal(t, 1, countDocs(t, p, "w-lost", "work"), "one activity, not two")
}

// A worker ack whose response is lost is found committed by reading the
// item from the primary: the caller is told it succeeded, and the activity
// does not run again.
func TestWorkerAckWithALostResponseIsResolved(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{StaleReadsWithoutSessionToken: true})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "w-ack", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	_, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	loseFirstResponse(acct, "Batch", "ActivityCompleted")
	require.NoError(t, p.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "w-ack", ExecutionID: 1, ID: 2, Result: "ok"}), "the ack committed")
	assert.Equal(t, 0, countDocs(t, p, "w-ack", "work"))
	assert.Equal(t, 1, countDocs(t, p, "w-ack", "msg"), "one completion")
}

// A message to an id that was never started is consumed in the end, and
// leaves no instance document behind.
func TestMessageToANeverStartedIDLeavesNothingBehind(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		ctx := rulesContext(t)
		clock := newTestClock()
		p := open(t, cdb.Config{ShortPolling: true, Now: clock.Now})
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("nobody"), 0))
		item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item, "held for a start at first")

		clock.Advance(time.Minute)
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "handed over once no start came")
		require.Equal(t, "Unknown", item.OrchestrationName)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
		assert.Equal(t, 0, countDocs(t, p, "nobody", "msg"))
		assert.Equal(t, 0, countDocs(t, p, "nobody", "inst"), "no nameless instance document is left")
	})
}

// consumeThenLose is a transport that, for the first request whose body
// contains marker and that commits, has consume run (another process taking
// the item at once), and then loses the response.
type consumeThenLose struct {
	next    http.RoundTripper
	marker  string
	consume func()
	once    sync.Once
}

func (c *consumeThenLose) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	if req.Method != http.MethodPost || !strings.Contains(string(body), c.marker) {
		return c.next.RoundTrip(req)
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return resp, err // not written (a failed batch is a 207): nothing to consume
	}
	fired := false
	c.once.Do(func() { fired = true })
	if !fired {
		return resp, err
	}
	resp.Body.Close()
	c.consume()
	return nil, fmt.Errorf("connection closed before the response: %w", io.ErrUnexpectedEOF)
}

// providerOver is a provider whose client goes through transport.
func providerOver(t *testing.T, acct *cdb.FakeAccount, transport http.RoundTripper) *cdb.CosmosProvider {
	t.Helper()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: transport})
	require.NoError(t, err)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{ShortPolling: true, Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// An enqueue whose response is lost after another process already consumed
// the message must not write it again: the resend meets the consumed
// message's marker, not an empty place.
func TestEnqueueResendAfterTheMessageWasConsumedIsNotADuplicate(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, other, "fast")
	delivered := 0
	consume := func() {
		item, token, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		delivered += len(item.Messages)
		require.NoError(t, other.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	}
	p := providerOver(t, acct, &consumeThenLose{next: acct.Transport(), marker: "ExternalRaised", consume: consume})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fast", Name: "go", Data: "{}"}, 0))
	require.Equal(t, 1, delivered, "consumed once, before the response was lost")
	again, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, again, "the resend wrote no second copy")
}

// The same for a worker item: an activity that already ran and was acked
// is not queued again by the enqueue's resend.
func TestWorkerEnqueueResendAfterTheItemWasConsumedIsNotADuplicate(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	ran := 0
	consume := func() {
		_, token, _, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		ran++
		require.NoError(t, other.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "fast-w", ExecutionID: 1, ID: 2, Result: "ok"}))
	}
	p := providerOver(t, acct, &consumeThenLose{next: acct.Transport(), marker: "ActivityExecute", consume: consume})
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "fast-w", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	require.Equal(t, 1, ran)
	again, _, _, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.Nil(t, again, "the activity is not queued again")
}

// An abandon's delay hides the batch it abandons and nothing else (duroxide
// 0.1.32, reversing this provider's earlier rule of holding the whole
// instance): a message that arrives meanwhile is taken first, and the
// abandoned one comes when its delay ends. A runtime that must keep a
// sender's order holds its lock instead (durable: retryLater).
func TestAbandonWithADelayHidesOnlyItsBatch(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		ctx := rulesContext(t)
		clock := newTestClock()
		p := open(t, cdb.Config{ShortPolling: true, Now: clock.Now})
		providertest.CreateInstance(ctx, t, p, "ordered")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "ordered", Name: "first", Data: "1"}, 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NoError(t, p.AbandonOrchestrationItem(ctx, token, time.Second, false))

		clock.Advance(time.Millisecond)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "ordered", Name: "second", Data: "2"}, 0))
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "the instance is free at once")
		assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "ordered", Name: "second", Data: "2"}}, item.Messages, "only the abandoned batch waits")
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))

		item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item, "the abandoned batch is still hidden")
		clock.Advance(time.Second)
		item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "ordered", Name: "first", Data: "1"}}, item.Messages)
	})
}

// A fetch locks an instance only if it was free when its candidates were
// read: a lock that expires between the candidate query and the lock batch
// had messages the query did not see, and a batch of only the newer ones
// would put them before the older (found by the simulation).
func TestALockExpiringDuringAFetchDoesNotReorderTheBatch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	providertest.CreateInstance(ctx, t, a, "seq")
	require.NoError(t, a.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "seq", Name: "17", Data: "{}"}, 0))
	held, _, _, err := a.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, held, "process A holds the instance with message 17, then stalls")
	clock.Advance(time.Millisecond)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "seq", Name: "18", Data: "{}"}, 0))

	// A's lock expires while B's fetch is between its query and its lock.
	var once sync.Once
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "Query" {
			once.Do(func() { clock.Advance(2 * time.Second) })
		}
		return false
	}})
	for i := 0; i < 2; i++ {
		item, _, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			continue // passed over while A's lock held, looked again after
		}
		var names []string
		for _, m := range item.Messages {
			names = append(names, m.(cdb.ExternalRaisedMessage).Name)
		}
		require.Equal(t, []string{"17", "18"}, names, "message 18 must not go before 17")
		return
	}
	t.Fatal("process B never took the instance after A's lock expired")
}

// isTurnStateQuery says r is a fetch's load of instance's turn state (its
// history, execution, KV and outbox documents), reading and restoring the
// body.
func isTurnStateQuery(t *testing.T, r *http.Request, instance string) bool {
	if r.Header.Get("x-ms-documentdb-isquery") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != `["`+instance+`"]` {
		return false
	}
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return bytes.Contains(body, []byte("@outbox"))
}

// slowLoad sets up instance, started and with one message queued by rival,
// and a second provider, slow, whose fetch of it sees three lock timeouts
// (of 1 s) pass while it loads the turn state; duringLoad (if not nil) runs
// then, once.
func slowLoad(ctx context.Context, t *testing.T, instance string, duringLoad func(rival *cdb.CosmosProvider)) (rival, slow *cdb.CosmosProvider) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, Now: clock.Now}
	rival = newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, rival, instance)
	require.NoError(t, rival.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "go", Data: "{}"}, 0))
	var once sync.Once
	slow = newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if !isTurnStateQuery(t, r, instance) {
			return
		}
		once.Do(func() {
			clock.Advance(3 * time.Second)
			if duringLoad != nil {
				duringLoad(rival)
			}
		})
	})
	return rival, slow
}

// A fetch whose load outlasts the lock timeout (a large history on a
// loaded machine: found by the simulation, where such an instance was
// fetched again and again until it was poisoned) hands the runtime a lock
// that still holds: no other dispatcher takes the instance, and the turn
// commits.
func TestAFetchWhoseLoadOutlastsTheLockStillHoldsIt(t *testing.T) {
	ctx := rulesContext(t)
	rival, slow := slowLoad(ctx, t, "slow", nil)
	item, token, attempts, err := slow.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.EqualValues(t, 1, attempts)

	other, _, _, err := rival.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.Nil(t, other, "the instance is still locked by the slow fetch")
	require.NoError(t, slow.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil),
		"the slow fetch's turn commits")
}

// Keeping a lock through a slow load never takes it from a dispatcher that
// locked the instance after it expired: the slow fetch hands nothing over.
func TestAFetchWhoseLockWasTakenDuringItsLoadReturnsNothing(t *testing.T) {
	ctx := rulesContext(t)
	var rivalToken string
	rival, slow := slowLoad(ctx, t, "taken", func(rival *cdb.CosmosProvider) {
		item, token, _, err := rival.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "the rival takes the instance whose lock expired")
		rivalToken = token
	})
	item, _, _, err := slow.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the slow fetch lost its lock and must not hand the turn over")
	require.NotEmpty(t, rivalToken)
	require.NoError(t, rival.AckOrchestrationItem(ctx, rivalToken, cdb.InitialExecutionID, nil, nil, nil, providertest.TestOrchMetadata(), nil),
		"the rival's turn commits")
}

// An ack let in while its lock held commits even when staging a large
// turn outlasts the lock, if no other dispatcher took the instance: the
// lock is renewed between parts with If-Match (found by the simulation
// under load, where planning a turn of megabytes took longer than the
// rest of a short lock, and the instance was fetched again and again until
// it was poisoned).
func TestALargeAckWhoseStagingOutlastsTheLockCommits(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "stager")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "stager", Name: "go", Data: "{}"}, 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)

	var once sync.Once
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "CreateItem" && r.PartitionKey == `["stager"]` {
			once.Do(func() { clock.Advance(3 * time.Second) }) // the lock's end passes while the first part is written
		}
		return false
	}})
	big := strings.Repeat("x", 1200*1024)
	var events []cdb.Event
	for i := 0; i < 3; i++ {
		events = append(events, cdb.Event{EventID: uint64(i + 2), InstanceID: "stager", ExecutionID: 1,
			Kind: cdb.ActivityScheduled{Name: "Big", Input: fmt.Sprintf("%d%s", i, big)}})
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, cdb.ExecutionMetadata{}, nil),
		"nobody took the instance: the turn commits")
	history, err := p.Read(ctx, "stager")
	require.NoError(t, err)
	assert.Len(t, history, 4)
}

// A large ack keeps its lock in the background while it stages: one part
// that takes longer than half the lock (a megabyte on a loaded machine)
// does not let the lock expire under it for a rival to take. Before, the
// lock was renewed only between parts, so the rival took the instance
// during the part and the ack failed with its lock lost (found by the
// simulation: continue-as-new turns of 1 MB went back and forth between
// two dispatchers, each attempt counted, until the instance was poisoned).
func TestALargeAckKeepsItsLockWhileAPartIsStaged(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, Now: clock.Now}
	rival := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, rival, "stager")
	require.NoError(t, rival.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "stager", Name: "go", Data: "{}"}, 0))

	renewed := make(chan struct{}, 16)
	var once sync.Once
	var rivalItem *cdb.OrchestrationItem
	var rivalErr error
	var first int64 // the fetched lock's end
	slow := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") != "" && r.Header.Get("x-ms-documentdb-partitionkey") == `["stager"]` {
			renewed <- struct{}{} // only the renewals batch while the part is staged
			return
		}
		if !isItemCreate(r, `["stager"]`) {
			return
		}
		once.Do(func() {
			clock.Advance(600 * time.Millisecond) // more than half the lock is gone
			deadline := time.After(30 * time.Second)
			select {
			case <-renewed: // sent: wait until it applied
				for lockedUntil(ctx, rival, "stager") <= first && !closed(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			case <-deadline: // no renewal while the part is written
			}
			clock.Advance(600 * time.Millisecond) // past the lock's first end
			rivalItem, _, _, rivalErr = rival.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		})
	})
	_, token, _, err := slow.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	drain(renewed)
	first = lockedUntil(ctx, rival, "stager")
	require.NotZero(t, first)

	big := strings.Repeat("x", 1200*1024)
	var events []cdb.Event
	for i := 0; i < 2; i++ {
		events = append(events, cdb.Event{EventID: uint64(i + 2), InstanceID: "stager", ExecutionID: 1,
			Kind: cdb.ActivityScheduled{Name: "Big", Input: fmt.Sprintf("%d%s", i, big)}})
	}
	require.NoError(t, slow.AckOrchestrationItem(ctx, token, 1, events, nil, nil, cdb.ExecutionMetadata{}, nil),
		"the lock held through the staging: the turn commits")
	require.NoError(t, rivalErr)
	assert.Nil(t, rivalItem, "the rival found the instance still locked while the part was written")
	history, err := slow.Read(ctx, "stager")
	require.NoError(t, err)
	assert.Len(t, history, 3)
}

// lockedUntil reads the lock expiry of instance's document (0 when it
// cannot be read).
func lockedUntil(ctx context.Context, p *cdb.CosmosProvider, instance string) int64 {
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(ctx, "SELECT VALUE c.lockedUntil FROM c WHERE c.pk = @pk AND c.type = 'inst'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	if err != nil || len(res.Items) != 1 {
		return 0
	}
	v, _ := strconv.ParseInt(string(res.Items[0]), 10, 64)
	return v
}

// closed says c has a value (or is closed) now.
func closed(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// drain empties c.
func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// An ack lets the lock's renewals run while it plans the turn, which for a
// turn of megabytes on a loaded machine outlasts a short lock: a renewal
// made meanwhile keeps the instance from a rival, and the ack commits with
// the renewed lock (found by the simulation under load: a large fan-out
// lost its lock to a rival on every try, as the runtime's renewals waited
// behind the planning).
func TestRenewalsRunWhileAnAckIsPlanned(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, Now: clock.Now}
	p := newRulesProvider(t, acct, cfg)
	rival := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, p, "planner")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("planner"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)

	var renewed error
	var rivalItem *cdb.OrchestrationItem
	cdb.AfterAckPlannedForTest(p, func() {
		done := make(chan error, 1)
		go func() { done <- p.RenewOrchestrationItemLock(ctx, token, 5*time.Second) }()
		select {
		case renewed = <-done:
		case <-time.After(30 * time.Second):
			renewed = errors.New("the renewal waited behind the ack's planning")
			return
		}
		clock.Advance(3 * time.Second) // past the lock's first end, within the renewal
		rivalItem, _, _, err = rival.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
	})
	events, work := fanOut("planner", 3)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil),
		"the renewed lock commits")
	require.NoError(t, renewed)
	assert.Nil(t, rivalItem, "the renewal kept the instance from the rival")
	history, err := p.Read(ctx, "planner")
	require.NoError(t, err)
	assert.Len(t, history, 4)
}

// A fetch whose candidates went stale before its lock batch never locks a
// consumed message's marker (an enqueued message leaves one in its place,
// with its id): the lock batch takes messages only, and the look passes
// the instance over (found by the simulation: fetches logged consumed
// markers as messages that do not decode).
func TestAFetchNeverLocksAConsumedMessagesMarker(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true}
	fast := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, fast, "stale")
	require.NoError(t, fast.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "stale", Name: "go", Data: "{}"}, 0))

	var once sync.Once
	slow := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" {
			return
		}
		once.Do(func() { // between the slow fetch's query and its lock batch, the message is consumed
			item, token, _, err := fast.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item)
			require.NoError(t, fast.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
		})
	})
	item, _, _, err := slow.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "the message is gone")

	pk := cdb.NewPartitionKeyString("stale")
	res, err := fast.Container().QueryItems(ctx, "SELECT * FROM c WHERE c.pk = 'stale' AND c.type = 'consumed'", nil, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 2, "the markers of the consumed start and event")
	for _, raw := range res.Items {
		var marker map[string]any
		require.NoError(t, json.Unmarshal(raw, &marker))
		assert.NotContains(t, marker, "lockToken", "no fetch locked the marker")
		assert.NotContains(t, marker, "attempts")
	}
}

// A deletion round that listed an instance's documents, and was overtaken
// by another process finishing the same deletion and by a new life of the
// id, deletes nothing of the new life, though its documents have the same
// ids as the old life's (the execution, the first turn's history): it
// deletes only the versions it listed.
func TestAStaleDeletionRoundSparesTheNextLifeOfTheID(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "reused")

	var once sync.Once
	stale := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || !bodyContains(t, r, `"operationType":"Delete"`) {
			return
		}
		once.Do(func() {
			// Between this round's listing and its deletes: another process
			// finishes the deletion, and the id starts a new life.
			pk := cdb.NewPartitionKeyString("reused")
			res, err := other.Container().QueryItems(ctx, "SELECT c.id, c.type FROM c WHERE c.pk = 'reused'", nil, &cdb.QueryOptions{PartitionKey: &pk})
			require.NoError(t, err)
			for _, raw := range res.Items {
				var doc struct{ ID, Type string }
				require.NoError(t, json.Unmarshal(raw, &doc))
				if doc.Type != "delete" && doc.ID != "inst" {
					_, err := other.Container().DeleteItem(ctx, pk, doc.ID, nil)
					require.NoError(t, err)
				}
			}
			_, err = other.Container().DeleteItem(ctx, pk, "inst", nil)
			require.NoError(t, err)
			providertest.CreateInstance(ctx, t, other, "reused")
		})
	})
	_, err := stale.DeleteInstance(ctx, "reused", true)
	require.NoError(t, err)

	history, err := other.Read(ctx, "reused")
	require.NoError(t, err)
	assert.Len(t, history, 1, "the new life's first turn is intact")
	st, err := other.ReadOrchestrationStatus(ctx, "reused")
	require.NoError(t, err)
	assert.True(t, st.Found, "the new life's instance document is intact")
	assert.Equal(t, 1, countDocs(t, other, "reused", "exec"), "and its execution")
}

// bodyContains says r's body contains s, reading and restoring it.
func bodyContains(t *testing.T, r *http.Request, s string) bool {
	if r.Body == nil {
		return false
	}
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return bytes.Contains(body, []byte(s))
}

// A deletion whose last step (deleting its intent) failed is finished again
// by a reconciler later; by then an id of the tree may have started a new
// life, which the resumed deletion must neither mark nor sweep.
func TestAResumedDeletionLeavesTheNextLifeOfTheIDAlone(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "root")
	providertest.CreateInstanceWithParent(ctx, t, p, "again", "root")
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "again", item.Instance)
	md := providertest.TestOrchMetadata()
	md.ParentInstanceID = ptrTo("root")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("again", 1)}, nil, nil, md, nil))
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusBadRequest, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "DeleteItem" && strings.HasPrefix(r.ItemID, "d|")
	}})
	_, err = p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err, "every instance is gone: done, though its intent could not be deleted (the injected 400)")
	require.Equal(t, 1, countDocs(t, p, "root", "delete"), "the intent stays, for the reconciler")
	require.Equal(t, 0, countDocs(t, p, "again", "inst"), "the child was deleted")

	providertest.CreateInstance(ctx, t, p, "again") // the id's next life
	clock.Advance(time.Hour)
	require.NoError(t, p.ReconcileOutbox(ctx)) // finishes the old deletion

	st, err := p.ReadOrchestrationStatus(ctx, "again")
	require.NoError(t, err)
	assert.True(t, st.Found, "the next life is not read as deleted")
	history, err := p.Read(ctx, "again")
	require.NoError(t, err)
	assert.Len(t, history, 1, "and keeps its history")
	assert.Equal(t, 0, countDocs(t, p, "again", "delete"), "the old deletion is finished")
}

// A lock released (an abandon) between a rival fetch's candidate query and
// its lock batch had messages that query saw locked: the rival, which may
// lock the instance now, takes them too, in order, rather than a batch of
// only the newer messages (found by the simulation: an Inbox got event 8
// before 6 and 7, which a crashed turn had held).
func TestALockReleasedDuringAFetchDoesNotReorderTheBatch(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true}
	holder := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, holder, "overtaken")
	for _, data := range []string{"1", "2"} {
		require.NoError(t, holder.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "overtaken", Name: "e", Data: data}, 0))
	}
	held, token, _, err := holder.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Len(t, held.Messages, 2)
	require.NoError(t, holder.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "overtaken", Name: "e", Data: "3"}, 0))

	var once sync.Once
	rival := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || !bodyContains(t, r, `"/lockToken"`) {
			return
		}
		once.Do(func() { // the holder's turn is given up after the rival's query
			require.NoError(t, holder.AbandonOrchestrationItem(ctx, token, 0, true))
		})
	})
	item, _, _, err := rival.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	var got []string
	for _, m := range item.Messages {
		got = append(got, m.(cdb.ExternalRaisedMessage).Data)
	}
	assert.Equal(t, []string{"1", "2", "3"}, got, "the released messages come first")
}

// The batch that completes a fetch's batch (the messages a holder gave back
// after the candidate query) may apply with its answer lost; the fetch then
// gives back those messages too. It gave back only the lock batch's, and
// the older messages stayed locked for a lock's length while the newer one
// went to the next fetch alone: the soak's Inbox given event 20 before 14.
func TestAFetchWhoseCompletingBatchWasLostGivesItsMessagesBack(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true}
	holder := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, holder, "lost-complete")
	for _, data := range []string{"1", "2"} {
		require.NoError(t, holder.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "lost-complete", Name: "e", Data: data}, 0))
	}
	_, token, _, err := holder.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, holder.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "lost-complete", Name: "e", Data: "3"}, 0))

	lost := &atomic.Bool{}
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		completing := r.Operation == "Batch" && strings.HasPrefix(string(r.Body), `[{"operationType":"Patch","id":"m|`)
		if completing {
			lost.Store(true)
		}
		return completing
	}})
	var once sync.Once
	rival := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || !bodyContains(t, r, `"/lockToken"`) {
			return
		}
		once.Do(func() { // the holder gives its turn up after the rival's query
			require.NoError(t, holder.AbandonOrchestrationItem(ctx, token, 0, true))
		})
	})
	item, _, _, err := rival.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.True(t, lost.Load(), "the batch completing the rival's batch applied with its answer lost")
	require.Error(t, err)
	require.Nil(t, item)

	for _, m := range messageDocs(t, holder, "lost-complete") {
		assert.Empty(t, m["lockToken"], "message %v is given back", m["id"])
	}
	item, _, _, err = holder.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	var got []string
	for _, m := range item.Messages {
		got = append(got, m.(cdb.ExternalRaisedMessage).Data)
	}
	assert.Equal(t, []string{"1", "2", "3"}, got, "the next fetch takes them all, in order")
}

// A ContinueAsNew message a fetch cannot take (still locked under a token
// whose holder is gone, or delayed) is never left out of the batch handed
// over: without it the runtime reads the batch as the finished
// execution's and consumes its events unseen. The batch is held back until
// the message can be taken, and then comes with it, first.
func TestEventsAreNotHandedOverWithoutTheirInstancesContinueAsNew(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	const id = "held-can"
	continueAsNewWithBacklog(t, p, id, 1)
	can := continueAsNewMessageID(t, p, id)
	setMessageLock(t, p, id, can, "gone-holder", clock.Now().Add(time.Minute))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: id, Name: "inbox", Data: "e1"}, 0))

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	if item != nil {
		kinds := messageKinds(item)
		require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true))
		t.Fatalf("a batch %v was handed over while its ContinueAsNew message could not be taken", kinds)
	}

	clock.Advance(time.Minute + 2*time.Second) // the stale lock and the hold are over
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"ContinueAsNew", "QueueMessage"}, messageKinds(item))
}

// continueAsNewMessageID is the id of instance's queued ContinueAsNew
// message.
func continueAsNewMessageID(t *testing.T, p *cdb.CosmosProvider, instance string) string {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), `SELECT VALUE c.id FROM c WHERE c.pk = @pk AND c.type = "msg" AND STARTSWITH(c.item, '{"ContinueAsNew"')`,
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 1, "one ContinueAsNew message")
	var id string
	require.NoError(t, json.Unmarshal(res.Items[0], &id))
	return id
}

// setMessageLock locks a queued message under token until until, as a
// fetch whose holder then vanished would have.
func setMessageLock(t *testing.T, p *cdb.CosmosProvider, instance, id, token string, until time.Time) {
	t.Helper()
	var ops cdb.PatchOperations
	ops.AppendSet("/lockToken", token)
	ops.AppendSet("/lockedUntil", until.UnixMilli())
	_, err := p.Container().PatchItem(context.Background(), cdb.NewPartitionKeyString(instance), id, ops, nil)
	require.NoError(t, err)
}

// A ContinueAsNew message enqueued with a delay waits its delay like any
// other (one a commit writes is visible from time zero, to head its
// instance's batch); until then no batch of the instance goes without it.
func TestAContinueAsNewEnqueuedWithADelayWaitsItsDelay(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	const id = "delayed-can"
	providertest.CreateInstance(ctx, t, p, id)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ContinueAsNewMessage{Instance: id, Orchestration: "TestOrch", Input: "next", Version: ptrTo("1.0.0")}, 2*time.Second))

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the ContinueAsNew message is not visible before its delay")

	clock.Advance(2 * time.Second)
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []string{"ContinueAsNew"}, messageKinds(item))
}

// tickingClock moves on a millisecond every time it is read, as a loaded
// host's clock does between two reads of one loop.
type tickingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// An abandon with a delay hides its batch as one: every message comes
// back at the same time, so no fetch takes some of them before the others
// (a cancellation after the input it was sent with). Before, each took its
// own reading of the clock.
func TestAnAbandonedBatchComesBackAsOne(t *testing.T) {
	ctx := rulesContext(t)
	clock := &tickingClock{now: time.Now()}
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("together"), 0))
	for _, data := range []string{"a", "b", "c"} {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "together", Name: "q", Data: data}, 0))
	}
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Len(t, item.Messages, 4)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, time.Second, false))
	var until []any
	for _, m := range messageDocs(t, p, "together") {
		until = append(until, m["lockedUntil"])
	}
	require.Len(t, until, 4)
	for _, u := range until[1:] {
		assert.Equal(t, until[0], u, "every message of the batch is hidden until the same time")
	}
}
