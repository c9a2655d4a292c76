package cdb_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Large values: where a turn's large values live, and what a fetch may hand
// over while some of them are still on their way.

// continueAsNewThroughTheOutbox commits, on p, a turn of instance id that
// schedules an activity of 1.4 MB and continues as new with an input of
// 700 KB: the work item fills the commit batch, so the ContinueAsNew
// message goes to the outbox. It returns the input.
func continueAsNewThroughTheOutbox(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, id string) string {
	t.Helper()
	providertest.CreateInstance(ctx, t, p, id)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	_, token := fetchFor(ctx, t, p, id)
	input := strings.Repeat("n", 700*1024)
	big := strings.Repeat("a", 1400*1024)
	can := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			{EventID: 2, InstanceID: id, ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Big", Input: big}},
			{EventID: 3, InstanceID: id, ExecutionID: 1, Kind: cdb.OrchestrationContinuedAsNew{Input: input}},
		},
		[]cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: id, ExecutionID: 1, ID: 2, Name: "Big", Input: big}},
		[]cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: id, Orchestration: "TestOrch", Input: input, Version: ptrTo("1.0.0")}},
		cdb.ExecutionMetadata{Status: &can, Output: &input}, nil))
	return input
}

// refuseContinueAsNewDelivery makes the account refuse the relay's delivery
// of a ContinueAsNew message into pk (a relayed create), and nothing else.
func refuseContinueAsNewDelivery(acct *cdb.FakeAccount, pk string) func() {
	return acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		relayed := r.Operation == "CreateItem" && !bytes.HasPrefix(r.Body, []byte(`{"id":"op|`)) && bytes.Contains(r.Body, []byte(`"relayed":true`)) ||
			isRelayBatch(r)
		return relayed && r.PartitionKey == pk && bytes.Contains(r.Body, []byte(`"type":"msg"`)) && bytes.Contains(r.Body, []byte("ContinueAsNew"))
	}})
}

// A continue-as-new whose ContinueAsNew message waits in an outbox. Before, a
// fetch more than 30 s later handed over the events raised meanwhile without
// it; the runtime read them as the finished execution's and consumed them. A
// fetch never hands over an instance's messages while a committed outbox of
// that instance writing into its own partition is pending: it delivers the
// outbox first, or holds the batch back.
func TestAFetchNeverHandsOverMessagesWhileTheirInstancesOutboxIsPending(t *testing.T) {
	config := func(clock *testClock) cdb.Config {
		return cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	}

	t.Run("the committing process died", func(t *testing.T) {
		ctx, acct, clock := rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newTestClock()
		a := newRulesProvider(t, acct, config(clock))
		refuse := refuseContinueAsNewDelivery(acct, `["eternal"]`)
		input := continueAsNewThroughTheOutbox(ctx, t, a, "eternal")
		require.Equal(t, 1, countDocs(t, a, "eternal", "outbox"), "the ContinueAsNew message waits in the outbox")
		require.NoError(t, a.Close(), "the process dies before its relay delivers it")
		refuse()

		b := newRulesProvider(t, acct, config(clock))
		require.NoError(t, b.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "eternal", Name: "e", Data: "meanwhile"}, 0))
		clock.Advance(31 * time.Second)
		item, _ := fetchFor(ctx, t, b, "eternal")
		// In the order they reached the queue (the relay delivered the
		// ContinueAsNew message after the event); the runtime reads a
		// ContinueAsNew wherever it is in the batch.
		require.Equal(t, []string{"ExternalRaised", "ContinueAsNew"}, messageKinds(item),
			"the fetch delivers the stale outbox first: the event goes to the new execution")
		assert.Equal(t, input, item.Messages[1].(cdb.ContinueAsNewMessage).Input)
	})

	t.Run("the committing process is alive and its delivery keeps failing", func(t *testing.T) {
		ctx, acct, clock := rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newTestClock()
		a := newRulesProvider(t, acct, config(clock))
		refuse := refuseContinueAsNewDelivery(acct, `["eternal"]`)
		continueAsNewThroughTheOutbox(ctx, t, a, "eternal")
		require.NoError(t, a.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "eternal", Name: "e", Data: "meanwhile"}, 0))
		clock.Advance(31 * time.Second)
		item, _, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, kindsOf(item), "the batch waits for its ContinueAsNew message, however long")

		b := newRulesProvider(t, acct, config(clock))
		clock.Advance(time.Minute)
		item, _, _, err = b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, kindsOf(item), "nor does another process hand it over")

		refuse()
		clock.Advance(time.Minute)
		item, _ = fetchFor(ctx, t, a, "eternal")
		require.Equal(t, []string{"ContinueAsNew", "ExternalRaised"}, messageKinds(item))
	})

	t.Run("an event to itself that overflowed keeps its place", func(t *testing.T) {
		ctx, acct, clock := rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newTestClock()
		a := newRulesProvider(t, acct, config(clock))
		refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
			relayed := r.Operation == "CreateItem" && !bytes.HasPrefix(r.Body, []byte(`{"id":"op|`)) && bytes.Contains(r.Body, []byte(`"relayed":true`)) ||
				isRelayBatch(r)
			return relayed && bytes.Contains(r.Body, []byte("first:"))
		}})
		providertest.CreateInstance(ctx, t, a, "self")
		require.NoError(t, a.EnqueueForOrchestrator(ctx, pokeItem("self"), 0))
		_, token := fetchFor(ctx, t, a, "self")
		big := strings.Repeat("a", 1400*1024)
		first := "first:" + strings.Repeat("f", 700*1024)
		require.NoError(t, a.AckOrchestrationItem(ctx, token, 1,
			[]cdb.Event{{EventID: 2, InstanceID: "self", ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Big", Input: big}}},
			[]cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: "self", ExecutionID: 1, ID: 2, Name: "Big", Input: big}},
			[]cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "self", Name: "e", Data: first}}, cdb.ExecutionMetadata{}, nil))
		require.Equal(t, 1, countDocs(t, a, "self", "outbox"), "the event to itself waits in the outbox")
		require.NoError(t, a.Close())
		refuse()

		clock.Advance(time.Millisecond) // the event is raised after the turn that sent the first
		b := newRulesProvider(t, acct, config(clock))
		require.NoError(t, b.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "self", Name: "e", Data: "second"}, 0))
		clock.Advance(time.Minute)
		item, _ := fetchFor(ctx, t, b, "self")
		var data []string
		for _, m := range item.Messages {
			data = append(data, m.(cdb.ExternalRaisedMessage).Data[:6])
		}
		assert.Equal(t, []string{"first:", "second"}, data, "the event the instance sent itself comes before the one raised after it")
	})
}

// kindsOf is the kinds of a batch's messages, nil for no batch: what a
// failed assertion prints of a batch of megabytes.
func kindsOf(item *cdb.OrchestrationItem) []string {
	if item == nil {
		return nil
	}
	return append([]string{item.Instance}, messageKinds(item)...)
}

// ackTerminal acks one turn of id that ends execution exec with status and
// output (its event in the delta), plus orchestrator items, and returns
// the commit batches it sent.
func ackTerminal(ctx context.Context, t *testing.T, acct *cdb.FakeAccount, p *cdb.CosmosProvider, id string, exec, eventID uint64, status cdb.InstanceStatus, output string, items []cdb.WorkItem) int {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	_, token := fetchFor(ctx, t, p, id)
	var kind cdb.EventKind = cdb.OrchestrationCompleted{Output: output}
	if status == cdb.StatusContinuedAsNew {
		kind = cdb.OrchestrationContinuedAsNew{Input: output}
	}
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, exec, []cdb.Event{{EventID: eventID, InstanceID: id, ExecutionID: exec, Kind: kind}},
		nil, items, cdb.ExecutionMetadata{Status: &status, Output: &output}, nil))
	batches := 0
	for _, r := range log.take() {
		if r.Operation == "Batch" {
			batches++
		}
	}
	return batches
}

// An output (or continue-as-new input) of about 1 MB once failed the
// orchestration: the terminal turn wrote it into its history (staged) and
// whole into both the instance and the execution documents of one batch,
// which a little over 1 MB overflows. A large value is written once, in a
// staged value document that both reference; reads resolve it.
func TestALargeOutputIsWrittenOnceAndReferenced(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	large := strings.Repeat("o", 1100*1024)
	outputOf := func(s *string) int {
		if s == nil {
			return -1
		}
		return len(*s)
	}

	t.Run("a completed execution's output", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "done")
		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "done", 1, 2, cdb.StatusCompleted, large, nil), "one commit batch")
		status, err := p.ReadOrchestrationStatus(ctx, "done")
		require.NoError(t, err)
		assert.Equal(t, cdb.StatusCompleted, status.Status)
		require.Equal(t, len(large), outputOf(status.Output))
		assert.Equal(t, large, *status.Output)
		info, err := p.GetInstanceInfo(ctx, "done")
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(info.Output))
		exec, err := p.GetExecutionInfo(ctx, "done", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output))
		assert.Equal(t, 1, countDocs(t, p, "done", "value"), "the output is written once, outside the instance and execution documents")
	})

	t.Run("a continue-as-new input", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "again")
		can := []cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: "again", Orchestration: "TestOrch", Input: large, Version: ptrTo("1.0.0")}}
		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "again", 1, 2, cdb.StatusContinuedAsNew, large, can), "one commit batch")
		assert.Zero(t, countDocs(t, p, "again", "outbox"), "the ContinueAsNew message fits the commit batch")
		exec, err := p.GetExecutionInfo(ctx, "again", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output))

		item, token := fetchFor(ctx, t, p, "again")
		require.Equal(t, []string{"ContinueAsNew"}, messageKinds(item))
		assert.Equal(t, large, item.Messages[0].(cdb.ContinueAsNewMessage).Input)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 2, []cdb.Event{providertest.StartedEvent("again", 2)}, nil, nil, providertest.TestOrchMetadata(), nil))
		info, err := p.GetInstanceInfo(ctx, "again")
		require.NoError(t, err)
		assert.Nil(t, info.Output, "the new execution has no output yet")
		exec, err = p.GetExecutionInfo(ctx, "again", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output), "the first execution keeps its own")

		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "again", 2, 2, cdb.StatusCompleted, "small", nil))
		_, err = p.PruneExecutions(ctx, "again", cdb.PruneOptions{KeepLast: ptrTo(uint32(1))})
		require.NoError(t, err)
		assert.Zero(t, countDocs(t, p, "again", "value"), "pruning an execution removes its value")
		status, err := p.ReadOrchestrationStatus(ctx, "again")
		require.NoError(t, err)
		assert.Equal(t, "small", *status.Output)
	})
}

// setKeys acks one turn of id's execution exec that sets each key to a
// value of size bytes (its first byte tells the turn), from event id
// first; with status the turn also ends the execution.
func setKeys(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, id string, exec, first uint64, keys []string, size int, tag byte, status *cdb.InstanceStatus) uint64 {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	item, token := fetchFor(ctx, t, p, id)
	var delta []cdb.Event
	next := first
	for _, k := range keys {
		delta = append(delta, cdb.Event{EventID: next, InstanceID: id, ExecutionID: exec,
			Kind: cdb.KeyValueSet{Key: k, Value: string(tag) + strings.Repeat("v", size-1), LastUpdatedAtMs: uint64(time.Now().UnixMilli())}})
		next++
	}
	md := cdb.ExecutionMetadata{Status: status}
	var items []cdb.WorkItem
	if status != nil {
		switch *status {
		case cdb.StatusContinuedAsNew:
			delta = append(delta, cdb.Event{EventID: next, InstanceID: id, ExecutionID: exec, Kind: cdb.OrchestrationContinuedAsNew{Input: "{}"}})
			items = []cdb.WorkItem{cdb.ContinueAsNewMessage{Instance: id, Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0")}}
		default:
			delta = append(delta, cdb.Event{EventID: next, InstanceID: id, ExecutionID: exec, Kind: cdb.OrchestrationCompleted{Output: "done"}})
		}
		md.Output = ptrTo("{}")
		next++
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, exec, delta, nil, items, md, nil),
		"a turn of %d keys of %d bytes commits (%d messages)", len(keys), size, len(item.Messages))
	return next
}

func keyNames(prefix string, from, to int) []string {
	var keys []string
	for i := from; i < to; i++ {
		keys = append(keys, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return keys
}

// requireKV checks the merged view a client reads: n keys, each holding a
// value of size bytes whose first byte is tags[key]; sample keys are read
// one by one as well.
func requireKV(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, id string, n, size int, tags map[string]byte, sample ...string) {
	t.Helper()
	all, err := p.GetKVAllValues(ctx, id)
	require.NoError(t, err)
	require.Len(t, all, n)
	for k, tag := range tags {
		require.Len(t, all[k], size, k)
		require.Equal(t, tag, all[k][0], "key %s holds the value of the turn that set it last", k)
	}
	for _, k := range sample {
		v, ok, err := p.GetKVValue(ctx, id, k)
		require.NoError(t, err)
		require.True(t, ok, k)
		require.Equal(t, all[k], v, k)
	}
	stats, err := p.GetInstanceStats(ctx, id)
	require.NoError(t, err)
	assert.EqualValues(t, n, stats.KVUserKeyCount)
	assert.EqualValues(t, n*size, stats.KVTotalValueBytes)
}

// KV within duroxide's limits once failed the orchestration: the execution's
// KV delta document was rewritten whole by each turn and had no size bound;
// 40 keys of 60 KB set over 4 turns made the commit refused for good. The
// delta now lives where its events already are (the history); the
// completed-execution store lives in bounded bucket chunks, staged like
// history parts.
func TestKVWithinDuroxidesLimitsCommits(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

	t.Run("40 keys of 60 KB over 4 turns, then completion", func(t *testing.T) {
		const id, size = "kv-turns", 60 * 1024
		providertest.CreateInstance(ctx, t, p, id)
		tags := map[string]byte{}
		next := uint64(2)
		for turn := 0; turn < 4; turn++ {
			keys := keyNames("k", turn*10, turn*10+10)
			next = setKeys(ctx, t, p, id, 1, next, keys, size, byte('a'+turn), nil)
			for _, k := range keys {
				tags[k] = byte('a' + turn)
			}
			requireKV(ctx, t, p, id, len(tags), size, tags, keys[0], "k-000")
		}
		completed := cdb.StatusCompleted
		next = setKeys(ctx, t, p, id, 1, next, keyNames("k", 0, 5), size, 'z', &completed)
		for _, k := range keyNames("k", 0, 5) {
			tags[k] = 'z'
		}
		requireKV(ctx, t, p, id, 40, size, tags, "k-000", "k-039")

		other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
		require.NoError(t, other.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
		item, token := fetchFor(ctx, t, other, id)
		require.Len(t, item.KVSnapshot, 40, "the completed execution's keys are in the next fetch's snapshot")
		assert.Equal(t, byte('z'), item.KVSnapshot["k-000"].Value[0])
		assert.Equal(t, byte('d'), item.KVSnapshot["k-039"].Value[0])
		// Consumed, so the poke cannot come back to the next subtest's
		// fetches once its lock expires on a slow machine.
		require.NoError(t, other.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
		_ = next
	})

	t.Run("150 keys of 64 KB in one turn, across executions", func(t *testing.T) {
		const id, size = "kv-max", cdb.MaxKVValueBytes
		providertest.CreateInstance(ctx, t, p, id)
		can := cdb.StatusContinuedAsNew
		keys := keyNames("m", 0, cdb.MaxKVKeys)
		setKeys(ctx, t, p, id, 1, 2, keys, size, 'a', &can)
		tags := map[string]byte{}
		for _, k := range keys {
			tags[k] = 'a'
		}
		requireKV(ctx, t, p, id, cdb.MaxKVKeys, size, tags, keys[0], keys[149])

		item, token := fetchFor(ctx, t, p, id)
		require.Equal(t, []string{"ContinueAsNew"}, messageKinds(item))
		require.Len(t, item.KVSnapshot, cdb.MaxKVKeys, "the new execution starts with every key")
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 2, []cdb.Event{providertest.StartedEvent(id, 2)}, nil, nil, providertest.TestOrchMetadata(), nil))
		setKeys(ctx, t, p, id, 2, 2, keys[:1], size, 'b', &can)
		tags[keys[0]] = 'b'
		requireKV(ctx, t, p, id, cdb.MaxKVKeys, size, tags, keys[0], keys[1])

		item, _ = fetchFor(ctx, t, p, id)
		require.Len(t, item.KVSnapshot, cdb.MaxKVKeys)
		assert.Equal(t, byte('b'), item.KVSnapshot[keys[0]].Value[0])
		assert.Equal(t, byte('a'), item.KVSnapshot[keys[1]].Value[0])
		assertKVDocumentsBounded(t, p, id)
	})
}

// assertKVDocumentsBounded checks that no KV document of id holds more
// than a staged part does (1 MB of entries).
func assertKVDocumentsBounded(t *testing.T, p *cdb.CosmosProvider, id string) {
	t.Helper()
	pk := cdb.NewPartitionKeyString(id)
	res, err := p.Container().QueryItems(context.Background(), "SELECT * FROM c WHERE c.pk = @pk AND (c.type = 'kv' OR c.type = 'kvd')",
		[]cdb.QueryParameter{{Name: "@pk", Value: id}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.NotEmpty(t, res.Items)
	for _, raw := range res.Items {
		assert.LessOrEqual(t, len(raw), 1100*1024, "a KV document is bounded")
	}
}

// An instance an earlier version wrote holds its KV delta in a delta
// document and its store in one document per bucket: reads see both, the
// turns after the upgrade add to them, and the next merge replaces them.
func TestKVAnEarlierVersionWroteIsReadAndMerged(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	const id = "legacy-kv"
	providertest.CreateInstance(ctx, t, p, id)
	pk := cdb.NewPartitionKeyString(id)
	bucket := cdb.KVBucketForTest("stored")
	_, err := p.Container().CreateItem(ctx, pk, []byte(fmt.Sprintf(`{"id":"kv|%d","pk":%q,"type":"kv","instance":%q,"entries":[{"k":"stored","v":"s","t":1}]}`, bucket, id, id)), nil)
	require.NoError(t, err)
	_, err = p.Container().CreateItem(ctx, pk, []byte(fmt.Sprintf(`{"id":"kvd","pk":%q,"type":"kvd","instance":%q,"entries":[{"k":"old","v":"o","t":1},{"k":"stored","v":null,"t":1}]}`, id, id)), nil)
	require.NoError(t, err)

	fresh := newRulesProvider(t, acct, cdb.Config{ShortPolling: true}) // no cached state
	next := setKeys(ctx, t, fresh, id, 1, 2, []string{"new"}, 10, 'n', nil)
	all, err := fresh.GetKVAllValues(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"old": "o", "new": "n" + strings.Repeat("v", 9)}, all, "the legacy delta, then the turns after it, over the store")

	completed := cdb.StatusCompleted
	setKeys(ctx, t, fresh, id, 1, next, nil, 0, 0, &completed)
	assert.Zero(t, countDocs(t, fresh, id, "kvd"), "the merge deletes the legacy delta document")
	_, err = p.Container().ReadItem(ctx, pk, fmt.Sprintf("kv|%d", bucket), nil)
	assert.True(t, cdb.IsNotFound(err), "and replaces the legacy bucket document: %v", err)
	require.NoError(t, fresh.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	item, _ := fetchFor(ctx, t, fresh, id)
	assert.Len(t, item.KVSnapshot, 2)
	assert.Equal(t, "o", item.KVSnapshot["old"].Value)
	_, stored := item.KVSnapshot["stored"]
	assert.False(t, stored, "the legacy delta's tombstone removed the stored key")
}
