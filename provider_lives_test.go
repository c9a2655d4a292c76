package cdb_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// A message reaches only the life it was sent to (lives.go): a tree is
// deleted while a relay still holds a message between its parent and its
// child, the parent's id starts again at once and starts the child under
// the same id, and then the relay delivers. The new lives have the same
// execution and event ids as the old ones, so without lives the message
// would read as their own.

// lateDelivery reads the outboxes waiting in instance's partition and
// returns what a relay that held them in memory does when it resumes: it
// writes their entries where they go (all of them: an outbox delivered
// before but not yet deleted is delivered again).
func lateDelivery(t *testing.T, p *cdb.CosmosProvider, instance string) func() {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT * FROM c WHERE c.pk = @pk AND c.type = 'outbox'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.NotEmpty(t, res.Items, "an outbox waits in %s", instance)
	type entry struct {
		PK  string          `json:"pk"`
		Doc json.RawMessage `json:"doc"`
	}
	var entries []entry
	for _, raw := range res.Items {
		var o struct {
			Entries []entry `json:"entries"`
		}
		require.NoError(t, json.Unmarshal(raw, &o))
		entries = append(entries, o.Entries...)
	}
	return func() {
		for _, e := range entries {
			_, err := p.Container().CreateItem(context.Background(), cdb.NewPartitionKeyString(e.PK), e.Doc, nil)
			if !cdb.IsConflict(err) { // delivered before, as a relay counts it
				require.NoError(t, err)
			}
		}
	}
}

// refuseCreatesIn makes every document created in partition pk fail
// until the returned function is called: the relay cannot deliver there.
func refuseCreatesIn(acct *cdb.FakeAccount, pk string) func() {
	return acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: createsIn(`["`+pk+`"]`, "")})
}

// startParentOfChild runs parent's first turn, which starts child (its
// SubOrchestrationScheduled is event 2) with input, and the child's first
// turn.
func startParentOfChild(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, parent, child, input string) {
	t.Helper()
	parentStartsChild(ctx, t, p, parent, child, input)
	childTakesStart(ctx, t, p, parent, child, input)
}

// parentStartsChild runs parent's first turn, which starts child with
// input; its outbox delivers the start.
func parentStartsChild(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, parent, child, input string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(parent), 0))
	_, token := fetchFor(ctx, t, p, parent)
	scheduled := cdb.Event{EventID: 2, InstanceID: parent, ExecutionID: 1, DuroxideVersion: "0.1.29",
		Kind: cdb.SubOrchestrationScheduled{Name: "TestOrch", Instance: child, Input: input}}
	start := providertest.StartItem(child).(cdb.StartOrchestrationMessage)
	start.Input, start.ParentInstance, start.ParentID = input, ptrTo(parent), ptrTo(uint64(2))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(parent, 1), scheduled}, nil,
		[]cdb.WorkItem{start}, providertest.TestOrchMetadata(), nil))
}

// childTakesStart runs child's first turn, which must be handed its start
// with input, alone.
func childTakesStart(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, parent, child, input string) {
	t.Helper()
	item, token := fetchFor(ctx, t, p, child)
	require.Equal(t, []string{"StartOrchestration"}, messageKinds(item))
	require.Equal(t, input, item.Messages[0].(cdb.StartOrchestrationMessage).Input)
	md := providertest.TestOrchMetadata()
	md.ParentInstanceID = ptrTo(parent)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(child, 1)}, nil, nil, md, nil))
}

// batchesUntilIdle fetches until nothing is left, acking each batch empty,
// and returns the kinds of the messages each instance was handed.
func batchesUntilIdle(ctx context.Context, t *testing.T, p *cdb.CosmosProvider) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return got
		}
		got[item.Instance] = append(got[item.Instance], messageKinds(item)...)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	}
}

// The old child's completion, held by its relay through the deletion of
// the tree, is delivered after the parent's next life started the child
// again: the new parent must not take it for its own child's result.
func TestAnOldChildsCompletionDoesNotReachTheNextLifeOfItsParent(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	p := newRulesProvider(t, acct, cfg)
	startParentOfChild(ctx, t, p, "root", "root::child", "life 0")

	// The child completes on a process that cannot deliver the completion
	// before it stops; its relay holds it.
	old := newRulesProvider(t, acct, cfg)
	refused := refuseCreatesIn(acct, "root")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("root::child"), 0))
	_, token := fetchFor(ctx, t, old, "root::child")
	completed := cdb.StatusCompleted
	require.NoError(t, old.AckOrchestrationItem(ctx, token, 1, nil, nil,
		[]cdb.WorkItem{cdb.SubOrchestrationCompletedMessage{ParentInstance: "root", ParentExecutionID: 1, ParentID: 2, Result: "life 0's result"}},
		cdb.ExecutionMetadata{Status: &completed, Output: ptrTo("life 0's result")}, nil))
	resume := lateDelivery(t, old, "root::child")
	require.NoError(t, old.Close())

	_, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	refused()
	startParentOfChild(ctx, t, p, "root", "root::child", "life 1")
	resume()
	require.Equal(t, 1, countDocs(t, p, "root", "msg"), "the old child's completion is in the parent's partition")

	assert.Empty(t, batchesUntilIdle(ctx, t, p), "the new parent is handed nothing: its child has not completed")
	assert.Zero(t, countDocs(t, p, "root", "msg"), "the old child's completion is consumed")
}

// The old parent's event and cancel to its child, held by its relay
// through the deletion of the tree, are delivered after the new parent
// started the child again: the new child must not take them.
func TestAnOldParentsMessageDoesNotReachTheNextLifeOfItsChild(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	p := newRulesProvider(t, acct, cfg)
	startParentOfChild(ctx, t, p, "root", "root::child", "life 0")

	old := newRulesProvider(t, acct, cfg)
	refused := refuseCreatesIn(acct, "root::child")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("root"), 0))
	_, token := fetchFor(ctx, t, old, "root")
	require.NoError(t, old.AckOrchestrationItem(ctx, token, 1, nil, nil,
		[]cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "root::child", Name: "go", Data: "life 0's"}, cdb.CancelInstanceMessage{Instance: "root::child", Reason: "life 0's"}},
		cdb.ExecutionMetadata{}, nil))
	resume := lateDelivery(t, old, "root")
	require.NoError(t, old.Close())

	_, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	refused()
	startParentOfChild(ctx, t, p, "root", "root::child", "life 1")
	resume()
	require.GreaterOrEqual(t, countDocs(t, p, "root::child", "msg"), 2, "the old parent's messages are in the child's partition")

	assert.Empty(t, batchesUntilIdle(ctx, t, p), "the new child is handed nothing of the old parent's")
	assert.Zero(t, countDocs(t, p, "root::child", "msg"), "the old parent's messages are consumed")
}

// A child's start is delivered but not taken when its tree is deleted: the
// child is no named child yet, but its instance document names its parent,
// so the deletion finds it and deletes it with the tree. The parent's next
// life starts the child again at once, and the child begins with it.
func TestAChildBeginsWithItsLiveParentsStartNotTheDeletedOnes(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	parentStartsChild(ctx, t, p, "root", "root::child", "life 0")
	children, err := p.ListChildren(ctx, "root")
	require.NoError(t, err)
	require.Empty(t, children, "a child no turn has named is not listed")
	res, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.InstancesDeleted, "the root and the child it started")
	require.Zero(t, countDocs(t, p, "root::child", "msg"), "the dead parent's start went with the tree")
	require.Zero(t, countDocs(t, p, "root::child", "inst"))

	parentStartsChild(ctx, t, p, "root", "root::child", "life 1")
	childTakesStart(ctx, t, p, "root", "root::child", "life 1")
	assert.Zero(t, countDocs(t, p, "root::child", "msg"))
}

// A start the deletion cannot find, because it is delivered after the
// tree's marks (here by the deletion itself, which delivers what the
// parent's outbox still holds for an id outside it), is dropped at the
// child's first fetch, and the parent's next life then starts the child.
func TestAChildStartWhoseParentIsGoneIsDropped(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	refused := refuseCreatesIn(acct, "root::child")
	parentStartsChild(ctx, t, p, "root", "root::child", "life 0")
	require.Zero(t, countDocs(t, p, "root::child", "inst"), "the start waits in the parent's outbox")
	refused()
	_, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	require.Equal(t, 1, countDocs(t, p, "root::child", "msg"), "the deletion delivered the start it found in the outbox")

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the start of a deleted parent begins nothing")
	assert.Zero(t, countDocs(t, p, "root::child", "msg"), "it is consumed")
	assert.Zero(t, countDocs(t, p, "root::child", "inst"), "with the nameless instance document")

	parentStartsChild(ctx, t, p, "root", "root::child", "life 1")
	childTakesStart(ctx, t, p, "root", "root::child", "life 1")
}

// The window a child's first turn leaves: it read its parent alive, and
// commits after the tree's deletion listed the named children. The
// deletion finds the child by the parent its instance document names and
// marks it, so that first turn cannot commit, and the child goes with the
// tree rather than run for the dead parent.
func TestAChildWhoseFirstTurnRacesItsTreesDeletionGoesWithTheTree(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	parentStartsChild(ctx, t, p, "root", "root::child", "life 0")
	item, token := fetchFor(ctx, t, p, "root::child") // the parent is alive: the start is handed over
	require.Equal(t, []string{"StartOrchestration"}, messageKinds(item))

	res, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.InstancesDeleted, "the root and the child whose first turn was under way")

	md := providertest.TestOrchMetadata()
	md.ParentInstanceID = ptrTo("root")
	err = p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("root::child", 1)}, nil, nil, md, nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the child's first turn does not commit for the dead parent")
	history, err := p.Read(ctx, "root::child")
	require.NoError(t, err)
	assert.Empty(t, history)
	assert.Zero(t, countDocs(t, p, "root::child", "inst"))

	parentStartsChild(ctx, t, p, "root", "root::child", "life 1")
	childTakesStart(ctx, t, p, "root", "root::child", "life 1")
}

// The adoption is part of the deletion, whoever carries it out: a deleter
// that loses every connection after its marks, before it looks for the
// children started late, leaves the deletion to another process, which
// takes it over, adopts the child and deletes it with the tree; the
// child's first turn, under way since before the deletion, cannot commit.
func TestAChildStartedLateIsAdoptedByTheProcessThatTakesTheDeletionOver(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 2})
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	parentStartsChild(ctx, t, a, "root", "root::child", "life 0")
	_, token := fetchFor(ctx, t, a, "root::child")

	var lost atomic.Bool
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultDropConnection, Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "Query" && strings.Contains(string(r.Body), "ARRAY_CONTAINS(@ids, c.parent)") {
			lost.Store(true)
		}
		return lost.Load()
	}})
	_, err := a.DeleteInstance(ctx, "root", true)
	require.True(t, cdb.IsRetryable(err), "the deleter lost its connections before the adoption: %v", err)
	require.True(t, lost.Load())
	remove()

	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, OutboxMinAge: time.Millisecond, AbandonedDeletionAge: time.Millisecond})
	// The first pass takes the abandoned deletion over and finishes it;
	// the root's outbox, still listed, meets the child's mark on its way
	// (a retryable refusal) and goes with the root's partition.
	_ = b.ReconcileOutbox(ctx)
	require.NoError(t, b.ReconcileOutbox(ctx), "nothing is left to deliver or to finish")
	assert.Zero(t, countDocs(t, b, "root::child", "inst"), "the child started late went with the tree")
	assert.Zero(t, countDocs(t, b, "root::child", "msg"))
	md := providertest.TestOrchMetadata()
	md.ParentInstanceID = ptrTo("root")
	err = a.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("root::child", 1)}, nil, nil, md, nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the child's first turn does not commit for the dead parent")
}
