package cdb_test

import (
	"context"
	"net/http"
	"sync"
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

// heldDelivery is a process whose first document created in partition pk
// is held until release is called: a relay paused in the middle of a
// delivery.
type heldDelivery struct {
	p       *cdb.CosmosProvider
	held    chan struct{}
	release func()
}

func holdFirstCreateIn(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config, pk string) *heldDelivery {
	h := &heldDelivery{held: make(chan struct{})}
	resume := make(chan struct{})
	var once sync.Once
	h.release = sync.OnceFunc(func() { close(resume) })
	t.Cleanup(h.release)
	h.p = newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if isItemCreate(r, `["`+pk+`"]`) {
			once.Do(func() {
				close(h.held)
				<-resume
			})
		}
	})
	return h
}

// startParentOfChild runs parent's first turn, which starts child (its
// SubOrchestrationScheduled is event 2) with input, and the child's first
// turn.
func startParentOfChild(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, parent, child, input string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(parent), 0))
	_, token := fetchFor(ctx, t, p, parent)
	scheduled := cdb.Event{EventID: 2, InstanceID: parent, ExecutionID: 1, DuroxideVersion: "0.1.29",
		Kind: cdb.SubOrchestrationScheduled{Name: "TestOrch", Instance: child, Input: input}}
	start := providertest.StartItem(child).(cdb.StartOrchestration)
	start.Input, start.ParentInstance, start.ParentID = input, ptrTo(parent), ptrTo(uint64(2))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(parent, 1), scheduled}, nil,
		[]cdb.WorkItem{start}, providertest.TestOrchMetadata(), nil))

	item, token := fetchFor(ctx, t, p, child)
	require.Equal(t, []string{"StartOrchestration"}, messageKinds(item))
	require.Equal(t, input, item.Messages[0].(cdb.StartOrchestration).Input)
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

	// The child completes on a process whose relay pauses before it
	// writes the completion into the parent's partition.
	slow := holdFirstCreateIn(t, acct, cfg, "root")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("root::child"), 0))
	_, token := fetchFor(ctx, t, slow.p, "root::child")
	acked := make(chan error, 1)
	go func() {
		completed := cdb.StatusCompleted
		acked <- slow.p.AckOrchestrationItem(ctx, token, 1, nil, nil,
			[]cdb.WorkItem{cdb.SubOrchCompleted{ParentInstance: "root", ParentExecutionID: 1, ParentID: 2, Result: "life 0's result"}},
			cdb.ExecutionMetadata{Status: &completed, Output: ptrTo("life 0's result")}, nil)
	}()
	<-slow.held

	_, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	startParentOfChild(ctx, t, p, "root", "root::child", "life 1")
	slow.release()
	require.NoError(t, <-acked, "the old child's ack committed before the deletion")

	assert.Empty(t, batchesUntilIdle(ctx, t, p), "the new parent is handed nothing: its child has not completed")
	assert.Zero(t, countDocs(t, p, "root", "msg"), "the old child's completion is consumed")
}

// The old parent's event to its child, held by its relay through the
// deletion of the tree, is delivered after the new parent started the
// child again: the new child must not take it.
func TestAnOldParentsMessageDoesNotReachTheNextLifeOfItsChild(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	p := newRulesProvider(t, acct, cfg)
	startParentOfChild(ctx, t, p, "root", "root::child", "life 0")

	slow := holdFirstCreateIn(t, acct, cfg, "root::child")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("root"), 0))
	_, token := fetchFor(ctx, t, slow.p, "root")
	acked := make(chan error, 1)
	go func() {
		acked <- slow.p.AckOrchestrationItem(ctx, token, 1, nil, nil,
			[]cdb.WorkItem{cdb.ExternalRaised{Instance: "root::child", Name: "go", Data: "life 0's"}, cdb.CancelInstance{Instance: "root::child", Reason: "life 0's"}},
			cdb.ExecutionMetadata{}, nil)
	}()
	<-slow.held

	_, err := p.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	startParentOfChild(ctx, t, p, "root", "root::child", "life 1")
	slow.release()
	require.NoError(t, <-acked, "the old parent's ack committed before the deletion")

	assert.Empty(t, batchesUntilIdle(ctx, t, p), "the new child is handed nothing of the old parent's")
	assert.Zero(t, countDocs(t, p, "root::child", "msg"), "the old parent's messages are consumed")
}
