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
	"github.com/duroxide-go/cdb/providertest"
)

// The ack's commit and the outbox relay (ARCHITECTURE.md, Outbox): what a
// commit writes arrives exactly once, in the order it was sent, however the
// delivery is interrupted, taken over or repeated.

// hookTransport calls before on every request of one provider, outside the
// fake account's locks (so it may block), then sends it on.
type hookTransport struct {
	next   http.RoundTripper
	before func(*http.Request)
}

func (h hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.before(r)
	return h.next.RoundTrip(r)
}

// newHookedProvider is a provider on acct whose requests pass through before.
func newHookedProvider(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config, before func(*http.Request)) *cdb.CosmosProvider {
	t.Helper()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: hookTransport{next: acct.Transport(), before: before}})
	require.NoError(t, err)
	cfg.Client = client
	p, err := cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// isItemCreate says r creates one document in the partition whose key
// header is pk.
func isItemCreate(r *http.Request, pk string) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/docs") &&
		r.Header.Get("x-ms-documentdb-isquery") == "" && r.Header.Get("x-ms-cosmos-is-batch-request") == "" &&
		r.Header.Get("x-ms-documentdb-is-upsert") == "" && r.Header.Get("x-ms-documentdb-partitionkey") == pk
}

// isHTTPRelayBatch says r is a transactional batch of a relay into the
// partition whose key header is pk: entries with their outbox's progress.
func isHTTPRelayBatch(t *testing.T, r *http.Request, pk string) bool {
	if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != pk {
		return false
	}
	body, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	r.Body = io.NopCloser(bytes.NewReader(body))
	return bytes.Contains(body, []byte(`"operationType":"Patch","id":"o|`)) && bytes.Contains(body, []byte(`/delivered`))
}

// isOutboxDelete matches the deletion of an outbox document, alone or in a
// batch.
func isOutboxDelete(r cdb.FakeRequest) bool {
	switch r.Operation {
	case "DeleteItem":
		return strings.HasPrefix(r.ItemID, "o|")
	case "Batch":
		return bytes.Contains(r.Body, []byte(`"operationType":"Delete","id":"o|`))
	}
	return false
}

func createsIn(pk string, marker string) func(cdb.FakeRequest) bool {
	return func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && r.PartitionKey == pk && bytes.Contains(r.Body, []byte(marker))
	}
}

// fetchFor fetches the next batch and requires it to be instance's.
func fetchFor(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "a batch for %s", instance)
	require.Equal(t, instance, item.Instance)
	return item, token
}

// send runs one turn of from that raises an event carrying each of data on
// to.
func send(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, from, to string, data ...string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(from), 0))
	_, token := fetchFor(ctx, t, p, from)
	var msgs []cdb.WorkItem
	for _, d := range data {
		msgs = append(msgs, cdb.ExternalRaisedMessage{Instance: to, Name: "e", Data: d})
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, msgs, cdb.ExecutionMetadata{}, nil))
}

// consume runs instance's turns until it has no messages, and returns the
// data of the events it received, in order.
func consume(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string) []string {
	t.Helper()
	var got []string
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return got
		}
		require.Equal(t, instance, item.Instance)
		for _, m := range item.Messages {
			if e, ok := m.(cdb.ExternalRaisedMessage); ok {
				got = append(got, e.Data)
			}
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	}
}

// consumeAll runs every instance's turns until none has messages, and
// returns the data of the events each received, in order.
func consumeAll(ctx context.Context, t *testing.T, p *cdb.CosmosProvider) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return got
		}
		for _, m := range item.Messages {
			if e, ok := m.(cdb.ExternalRaisedMessage); ok {
				got[item.Instance] = append(got[item.Instance], e.Data)
			}
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	}
}

// runActivities runs every fetchable activity, completing each, and counts
// the runs per activity id.
func runActivities(ctx context.Context, t *testing.T, p *cdb.CosmosProvider) map[uint64]int {
	t.Helper()
	ran := map[uint64]int{}
	for {
		w, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		if w == nil {
			return ran
		}
		act := w.(cdb.ActivityExecuteMessage)
		ran[act.ID]++
		require.NoError(t, p.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Result: "ok"}))
	}
}

// queuedActivities reads instance's worker items, by activity id.
func queuedActivities(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string) map[uint64]string {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(ctx, "SELECT c.item FROM c WHERE c.pk = @pk AND c.type = 'work'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	queued := map[uint64]string{}
	for _, raw := range res.Items {
		var row struct {
			Item string `json:"item"`
		}
		require.NoError(t, json.Unmarshal(raw, &row))
		w, err := cdb.UnmarshalWorkItem([]byte(row.Item))
		require.NoError(t, err)
		act := w.(cdb.ActivityExecuteMessage)
		_, dup := queued[act.ID]
		assert.False(t, dup, "activity %d is queued twice", act.ID)
		queued[act.ID] = act.Input
	}
	return queued
}

// sizedFanOut is fanOut with inputs of size bytes.
func sizedFanOut(instance string, n, size int) ([]cdb.Event, []cdb.WorkItem) {
	var events []cdb.Event
	var work []cdb.WorkItem
	for i := 0; i < n; i++ {
		id := uint64(i + 2)
		input := fmt.Sprintf("%d:%s", i, strings.Repeat("x", size))
		events = append(events, cdb.Event{EventID: id, InstanceID: instance, ExecutionID: 1, DuroxideVersion: "0.1.29",
			Kind: cdb.ActivityScheduled{Name: "Work", Input: input}})
		work = append(work, cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: id, Name: "Work", Input: input})
	}
	return events, work
}

// A process delivers a fan-out's outbox, its workers run and ack every
// activity, and the process dies before deleting the outbox. Another
// process's reconciler delivers the outbox again: no activity runs twice.
func TestOutboxRedeliveryDoesNotRecreateConsumedWork(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	a := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, a, "fan")

	keep := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: isOutboxDelete})
	require.NoError(t, a.EnqueueForOrchestrator(ctx, pokeItem("fan"), 0))
	_, token := fetchFor(ctx, t, a, "fan")
	events, work := fanOut("fan", 150)
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))
	require.Equal(t, 1, countDocs(t, a, "fan", "outbox"), "the fan-out overflowed into an outbox")
	ran := runActivities(ctx, t, a)
	require.Len(t, ran, 150)
	require.NoError(t, a.Close(), "the process dies with its delivered outbox still there")
	keep()

	clock.Advance(time.Hour)
	b := newRulesProvider(t, acct, cfg)
	require.NoError(t, b.ReconcileOutbox(ctx))
	assert.Empty(t, runActivities(ctx, t, b), "no activity is created again after it ran")
	assert.Zero(t, countDocs(t, b, "fan", "outbox"), "the redelivered outbox is gone")
}

// A relay delivering a large outbox at 700 ms per batch is still at it when
// the outbox is older than OutboxMinAge; another process's reconciler leaves
// it alone, and every activity runs once.
func TestOutboxReconcilerLeavesALiveRelayAlone(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	var armed atomic.Bool
	var batches, beats atomic.Int32
	reached, resume := make(chan struct{}), make(chan struct{})
	a := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if !armed.Load() || !isHTTPRelayBatch(t, r, `["fan"]`) {
			return
		}
		beats.Add(1)                          // each batch records the relay's beat with its progress
		clock.Advance(700 * time.Millisecond) // each batch takes 700 ms
		if batches.Add(1) == 4 {
			close(reached)
			<-resume
		}
	})
	var resumeOnce sync.Once
	t.Cleanup(func() { resumeOnce.Do(func() { close(resume) }) })
	var foreignCreates atomic.Int32
	b := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if isItemCreate(r, `["fan"]`) || isHTTPRelayBatch(t, r, `["fan"]`) {
			foreignCreates.Add(1)
		}
	})

	providertest.CreateInstance(ctx, t, a, "fan")
	require.NoError(t, a.EnqueueForOrchestrator(ctx, pokeItem("fan"), 0))
	_, token := fetchFor(ctx, t, a, "fan")
	events, work := fanOut("fan", 500)
	armed.Store(true)
	acked := make(chan error, 1)
	go func() {
		acked <- a.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil)
	}()
	select {
	case <-reached:
	case err := <-acked:
		t.Fatalf("the ack returned before its relay sent its fourth batch: %v", err)
	}

	// 2.8 s of delivery since the commit: the outbox is older than
	// OutboxMinAge, but its relay is alive (its third batch beat 1.4 s ago).
	require.NoError(t, b.ReconcileOutbox(ctx))
	assert.Zero(t, foreignCreates.Load(), "the reconciler does not deliver an outbox a live relay is delivering")
	assert.Positive(t, beats.Load(), "the relay shows it is alive while it delivers")
	resumeOnce.Do(func() { close(resume) })
	require.NoError(t, <-acked)

	ran := runActivities(ctx, t, a)
	assert.Len(t, ran, 500)
	for id, n := range ran {
		assert.Equal(t, 1, n, "activity %d ran %d times", id, n)
	}
}

// An event relayed to a busy target, redelivered after the target consumed 70
// more relayed messages, is not processed again: redelivery dedupe does not
// depend on a window of remembered ids.
func TestOutboxRedeliveryDedupeHasNoWindow(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	a := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, a, "sender")
	providertest.CreateInstance(ctx, t, a, "target")

	keep := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: isOutboxDelete})
	send(ctx, t, a, "sender", "target", "first")
	require.Equal(t, []string{"first"}, consume(ctx, t, a, "target"))
	var many []string
	for i := 0; i < 70; i++ {
		many = append(many, fmt.Sprintf("e%02d", i))
	}
	send(ctx, t, a, "sender", "target", many...)
	require.Equal(t, many, consume(ctx, t, a, "target"))
	require.NoError(t, a.Close(), "the process dies with both outboxes delivered but not deleted")
	keep()

	clock.Advance(time.Hour)
	b := newRulesProvider(t, acct, cfg)
	require.NoError(t, b.ReconcileOutbox(ctx))
	assert.Zero(t, countDocs(t, b, "sender", "outbox"))
	assert.Empty(t, consume(ctx, t, b, "target"), "no event is processed twice")
}

// One target refuses its deliveries; the reconciler still delivers every
// other outbox and finishes an abandoned deletion.
func TestOutboxReconcilerGoesOnPastAnOutboxItCannotDeliver(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	a := newRulesProvider(t, acct, cfg)
	targets := []string{"refusing", "t1", "t2"}
	for _, target := range targets {
		providertest.CreateInstance(ctx, t, a, target)
		providertest.CreateInstance(ctx, t, a, "s-"+target)
	}
	refuseAll := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && (r.PartitionKey == `["refusing"]` || r.PartitionKey == `["t1"]` || r.PartitionKey == `["t2"]`)
	}})
	for _, target := range targets {
		send(ctx, t, a, "s-"+target, target, "hello")
	}

	// A deletion whose process lost its connections after the first step.
	providertest.CreateInstance(ctx, t, a, "doomed")
	var recorded atomic.Bool
	cut := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultDropConnection, Match: func(r cdb.FakeRequest) bool {
		if recorded.Load() {
			return true
		}
		recorded.Store(r.Operation == "Batch" && r.PartitionKey == `["doomed"]`)
		return false
	}})
	_, err := a.DeleteInstance(ctx, "doomed", true)
	require.True(t, cdb.IsRetryable(err), "the injected lost connection, worth retrying: %v", err)
	require.NoError(t, a.Close())
	cut()
	refuseAll()
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: createsIn(`["refusing"]`, "")})

	clock.Advance(time.Hour)
	b := newRulesProvider(t, acct, cfg)
	err = b.ReconcileOutbox(ctx)
	assert.True(t, cdb.HasStatus(err, http.StatusForbidden), "the target's refusal is reported: %v", err)
	assert.ErrorContains(t, err, "deliver outbox")
	assert.Equal(t, map[string][]string{"t1": {"hello"}, "t2": {"hello"}}, consumeAll(ctx, t, b), "the others get their events despite the refusing target")
	for _, target := range targets[1:] {
		assert.Zero(t, countDocs(t, b, "s-"+target, "outbox"))
	}
	assert.Equal(t, 1, countDocs(t, b, "s-refusing", "outbox"), "the undeliverable outbox is kept for later")
	assert.Zero(t, countAllDocs(t, b, "doomed"), "the deletion pass ran")
}

// Fan-outs of several megabytes commit in one batch under 2 MB, and every
// activity runs once with its input; an item no document can hold is refused
// before anything is written.
func TestOutboxLargeFanOutsCommit(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	for _, tc := range []struct {
		name    string
		n, size int
	}{{"100 activities of 25 KB", 100, 25 * 1024}, {"500 activities of 5 KB", 500, 5 * 1024}} {
		t.Run(tc.name, func(t *testing.T) {
			instance := fmt.Sprintf("big-%d", tc.n)
			providertest.CreateInstance(ctx, t, p, instance)
			require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
			_, token := fetchFor(ctx, t, p, instance)
			events, work := sizedFanOut(instance, tc.n, tc.size)
			log := logRequests(acct)
			require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))
			commits := 0
			for _, r := range log.take() {
				if r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"operationType":"Replace","id":"inst"`)) {
					commits++
					assert.LessOrEqual(t, len(r.Body), cdb.MaxBatchBytes)
				}
			}
			assert.Equal(t, 1, commits, "one commit batch")

			// Every activity is queued once, with its input (read in one
			// query: fetching them one by one proves nothing more).
			queued := queuedActivities(ctx, t, p, instance)
			require.Len(t, queued, tc.n)
			for _, w := range work {
				act := w.(cdb.ActivityExecuteMessage)
				assert.Equal(t, act.Input, queued[act.ID], "activity %d", act.ID)
			}
			history, err := p.Read(ctx, instance)
			require.NoError(t, err)
			assert.Len(t, history, tc.n+1)
			require.NoError(t, p.ReconcileOutbox(ctx)) // the relay deletes in the background; be sure it did
			assert.Zero(t, countDocs(t, p, instance, "outbox"), "the outbox is delivered and deleted")
			assert.Zero(t, countDocs(t, p, instance, "outbox-part"), "with its parts")
		})
	}

	t.Run("an item no document can hold is refused before anything is written", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "too-big")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("too-big"), 0))
		_, token := fetchFor(ctx, t, p, "too-big")
		events, _ := sizedFanOut("too-big", 3, 300*1024) // history large enough to be staged
		huge := cdb.ExternalRaisedMessage{Instance: "elsewhere", Name: "e", Data: strings.Repeat("y", cdb.MaxDocumentBytes)}
		before := acct.Counts().Requests
		err := p.AckOrchestrationItem(ctx, token, 1, events, nil, []cdb.WorkItem{huge}, cdb.ExecutionMetadata{}, nil)
		require.Error(t, err)
		assert.False(t, cdb.IsRetryable(err), "%v", err)
		assert.Contains(t, err.Error(), "bytes")
		assert.ErrorIs(t, fmt.Errorf("caller: %w", err), cdb.ErrDocumentTooLarge)
		assert.Equal(t, before, acct.Counts().Requests, "nothing was written")
	})
}

// The ack's batch commits and its response is lost; the read that checks the
// commit fails. The ack still reports success: at once when the read succeeds
// on a retry, or on the runtime's retry of the ack, which finds its own
// commit behind the 412.
func TestAckWhoseResponseWasLostIsNotReportedFailed(t *testing.T) {
	ctx := rulesContext(t)
	var acct *cdb.FakeAccount
	var p *cdb.CosmosProvider
	loseCommit := func(instance string) {
		acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
			return r.Operation == "Batch" && r.PartitionKey == `["`+instance+`"]`
		}})
	}
	failRead := func(instance string, times int) func() {
		return acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusInternalServerError, Times: times, Match: func(r cdb.FakeRequest) bool {
			// the read-back from the primary: a one-read batch of the instance document
			return r.Operation == "Batch" && r.PartitionKey == `["`+instance+`"]` &&
				strings.Contains(string(r.Body), `"Read"`) && strings.Contains(string(r.Body), `"inst"`)
		}})
	}
	turn := func(t *testing.T, instance string) (string, func() error) {
		acct = cdb.NewFakeAccount(cdb.FakeAccountOptions{})
		p = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
		providertest.CreateInstance(ctx, t, p, instance)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
		_, token := fetchFor(ctx, t, p, instance)
		events, work := fanOut(instance, 1)
		child := cdb.StartOrchestrationMessage{Instance: instance + "::child", Orchestration: "Child", Input: "{}",
			ParentInstance: ptrTo(instance), ParentID: ptrTo(uint64(2)), ExecutionID: 1}
		return token, func() error {
			return p.AckOrchestrationItem(ctx, token, 1, events, work, []cdb.WorkItem{child}, cdb.ExecutionMetadata{}, nil)
		}
	}
	committed := func(t *testing.T, instance string) {
		history, err := p.Read(ctx, instance)
		require.NoError(t, err)
		assert.Len(t, history, 2)
		assert.Equal(t, 1, countDocs(t, p, instance, "work"))
		assert.Equal(t, 1, countDocs(t, p, instance+"::child", "msg"), "the turn's outbox is delivered")
	}

	t.Run("the read that checks the commit fails once", func(t *testing.T) {
		_, ack := turn(t, "lost-1")
		loseCommit("lost-1")
		failRead("lost-1", 1)
		require.NoError(t, ack(), "a transient failure of the check is retried, not read as 'not committed'")
		committed(t, "lost-1")
	})

	t.Run("the check keeps failing; the retried ack finds its commit", func(t *testing.T) {
		_, ack := turn(t, "lost-2")
		loseCommit("lost-2")
		stop := failRead("lost-2", 0)
		err := ack()
		require.Error(t, err)
		assert.True(t, cdb.IsRetryable(err), "the outcome is unknown yet: %v", err)
		stop()
		require.NoError(t, ack(), "the 412 is our own commit")
		committed(t, "lost-2")
	})
}

// Turn 1's delivery fails and turn 2's would succeed; the target still gets
// "first" before "second", whether turn 2 is committed by the same process or
// by another one.
func TestOutboxKeepsASendersOrder(t *testing.T) {
	setup := func(t *testing.T) (context.Context, *cdb.FakeAccount, *testClock) {
		return rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newTestClock()
	}
	config := func(clock *testClock) cdb.Config {
		return cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	}

	t.Run("in one process", func(t *testing.T) {
		ctx, acct, clock := setup(t)
		p := newRulesProvider(t, acct, config(clock))
		providertest.CreateInstance(ctx, t, p, "sender")
		providertest.CreateInstance(ctx, t, p, "target")
		refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: createsIn(`["target"]`, "first")})
		send(ctx, t, p, "sender", "target", "first")
		send(ctx, t, p, "sender", "target", "second")
		assert.Empty(t, consume(ctx, t, p, "target"), "second waits for first")
		refuse()
		require.NoError(t, p.ReconcileOutbox(ctx))
		assert.Equal(t, []string{"first", "second"}, consume(ctx, t, p, "target"))
	})

	t.Run("across processes, the first one alive", func(t *testing.T) {
		ctx, acct, clock := setup(t)
		a := newRulesProvider(t, acct, config(clock))
		providertest.CreateInstance(ctx, t, a, "sender")
		providertest.CreateInstance(ctx, t, a, "target")
		refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: createsIn(`["target"]`, "first")})
		send(ctx, t, a, "sender", "target", "first")
		clock.Advance(time.Millisecond)
		b := newRulesProvider(t, acct, config(clock))
		send(ctx, t, b, "sender", "target", "second")
		assert.Empty(t, consume(ctx, t, b, "target"), "second waits for first")
		refuse()
		require.NoError(t, a.Close())
		clock.Advance(time.Hour)
		require.NoError(t, b.ReconcileOutbox(ctx))
		assert.Equal(t, []string{"first", "second"}, consume(ctx, t, b, "target"))
	})

	t.Run("across processes, the first one dead", func(t *testing.T) {
		ctx, acct, clock := setup(t)
		a := newRulesProvider(t, acct, config(clock))
		providertest.CreateInstance(ctx, t, a, "sender")
		providertest.CreateInstance(ctx, t, a, "target")
		refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: createsIn(`["target"]`, "first")})
		send(ctx, t, a, "sender", "target", "first")
		require.NoError(t, a.Close())
		refuse()
		clock.Advance(time.Hour)
		b := newRulesProvider(t, acct, config(clock))
		send(ctx, t, b, "sender", "target", "second")
		assert.Equal(t, []string{"first", "second"}, consume(ctx, t, b, "target"), "the ack delivers the dead process's outbox first")
	})
}
