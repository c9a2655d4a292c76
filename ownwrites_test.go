package cdb_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Issue 11: with process leases, a process takes the items it writes
// itself (announced to its own fetches), and the process that owns their
// slots leaves them to it for a poll interval (50 ms here) instead of
// racing it for them: a lost claim and a wasted query for one of the two.

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

func startOf(instance string) cdb.StartOrchestration {
	return cdb.StartOrchestration{Instance: instance, Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}
}

func TestAProcessLeavesTheMessagesAnotherProcessWroteToItForAPollInterval(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, b, aShare := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	clock.Advance(time.Second) // both idle windows open
	require.Nil(t, fetchOrchestration(ctx, t, a), "a fetches: its own writes are its to take")

	mine := instanceInSlotOutside(t, aShare) // in b's share
	require.NoError(t, a.EnqueueForOrchestrator(ctx, startOf(mine), 0))
	assert.Equal(t, []string{"a"}, writersOf(ctx, t, a, mine, "msg"))
	lost := func() int64 { return a.Client().Stats().PreconditionFailed + b.Client().Stats().PreconditionFailed }
	before := lost()
	assert.Nil(t, fetchOrchestration(ctx, t, b), "b's look leaves a's fresh message to a")
	item := fetchOrchestration(ctx, t, a)
	require.NotNil(t, item, "a takes it through its announcement")
	assert.Equal(t, mine, item.Instance)
	assert.Zero(t, lost()-before, "nobody lost a claim")

	// An instance with a's fresh message and a client's is left whole: a
	// batch of the client's message alone would put it before a's.
	both := instanceInSlotOutside(t, append(slices.Clone(aShare), cdb.DispatchSlotForTest(mine)))
	client := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour})
	require.NoError(t, a.EnqueueForOrchestrator(ctx, startOf(both), 0))
	require.NoError(t, client.EnqueueForOrchestrator(ctx, cdb.ExternalRaised{Instance: both, Name: "e", Data: "1"}, 0))
	assert.ElementsMatch(t, []string{"a", ""}, writersOf(ctx, t, a, both, "msg"))
	assert.Nil(t, fetchOrchestration(ctx, t, b), "the instance is left to a while a's message is fresh")

	// a does not take it (busy, or gone): after a poll interval b does,
	// both messages in order.
	clock.Advance(50 * time.Millisecond)
	item = fetchOrchestration(ctx, t, b)
	require.NotNil(t, item, "a's message is b's to take after the grace")
	assert.Equal(t, both, item.Instance)
	assert.Equal(t, []string{"StartOrchestration", "ExternalRaised"}, messageKinds(item))
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
	item, _, _, err := w.FetchWorkItem(ctx, time.Minute, 0, nil, gpu)
	require.NoError(t, err)
	require.Nil(t, item)
	act := func(id uint64, tag, session *string) cdb.ActivityExecute {
		return cdb.ActivityExecute{Instance: "acts", ExecutionID: 1, ID: id, Name: "A", Input: "{}", Tag: tag, SessionID: session}
	}
	for _, a := range []cdb.ActivityExecute{act(1, ptrTo("gpu"), nil), act(2, nil, nil), act(3, ptrTo("gpu"), ptrTo("s1"))} {
		require.NoError(t, w.EnqueueForWorker(ctx, a))
	}
	assert.ElementsMatch(t, []string{"w", "", ""}, writersOf(ctx, t, w, "acts", "work"),
		"w takes its gpu activity; not the untagged one its fetches do not match, nor the session's, which the session's owner takes")
	require.NoError(t, w.EnqueueForOrchestrator(ctx, startOf("from-w"), 0))
	assert.Equal(t, []string{""}, writersOf(ctx, t, w, "from-w", "msg"), "w runs no orchestration fetch")

	clock.Advance(time.Second) // w's last fetch is a poll interval old
	require.NoError(t, w.EnqueueForWorker(ctx, cdb.ActivityExecute{Instance: "later", ExecutionID: 1, ID: 1, Name: "A", Input: "{}", Tag: ptrTo("gpu")}))
	assert.Equal(t, []string{""}, writersOf(ctx, t, w, "later", "work"), "a process whose fetches stopped takes nothing of its own")
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
	require.Nil(t, fetchWork(a))

	var act cdb.ActivityExecute
	for id := uint64(1); ; id++ {
		act = cdb.ActivityExecute{Instance: "work", ExecutionID: 1, ID: id, Name: "A", Input: "{}"}
		if !slices.Contains(aShare, cdb.ActivitySlotForTest(act)) {
			break // in b's share
		}
	}
	require.NoError(t, a.EnqueueForWorker(ctx, act))
	require.Equal(t, []string{"a"}, writersOf(ctx, t, a, "work", "work"))
	assert.Nil(t, fetchWork(b), "b's look leaves a's fresh item to a")

	clock.Advance(50 * time.Millisecond)
	got := fetchWork(b)
	require.NotNil(t, got, "after a poll interval the item is b's to take")
	assert.Equal(t, act.ID, got.(cdb.ActivityExecute).ID)
}
