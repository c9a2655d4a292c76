package cdb_test

import (
	"bytes"
	"context"
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

// Ready lists are never staler than the store (R20): an item locked
// eagerly for this process and not handed out yet is dropped when a
// commit or a deletion of this process ends it, and one whose claim
// refresh finds it changed or gone is passed over.

// readyItemOf is p with instance's first turn committed, its activity 2
// locked eagerly for p's fetches and left ready (the fetch it was locked
// for went away before the commit); the instance stays running.
func readyItemOf(t *testing.T, acct *cdb.FakeAccount, cfg cdb.Config, instance string) (context.Context, *cdb.CosmosProvider) {
	t.Helper()
	ctx := rulesContext(t)
	p := newRulesProvider(t, acct, cfg)
	token := lockedStart(ctx, t, p, instance)
	result, stopWorker := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	var once sync.Once
	cdb.AfterAckPlannedForTest(p, func() { // the item is reserved for the fetch, which then ends
		once.Do(func() {
			stopWorker()
			require.Nil(t, result().item)
		})
	})
	require.NoError(t, ackScheduling(ctx, t, p, token, instance, activity(instance, 2, "")))
	cdb.AfterAckPlannedForTest(p, nil)
	items := workDocs(t, p, instance)
	require.Len(t, items, 1)
	require.NotEmpty(t, items[0]["lockToken"], "locked eagerly for this process")
	return ctx, p
}

// noWork says a fetch of p, which takes a ready item without a request,
// finds nothing.
func noWork(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, msgAndArgs ...any) {
	t.Helper()
	item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.Nil(t, item, msgAndArgs...)
}

// An activity that a commit of this process cancels is never handed out
// afterwards: before, the item waited in the ready list and the next fetch
// took it without a request, after its tombstone was written.
func TestAnActivityThisProcessCancelledIsNeverHandedOut(t *testing.T) {
	ctx, p := readyItemOf(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{PollInterval: time.Hour}, "cancels")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "cancels", Name: "stop", Data: "{}"}, 0))
	turn := eventuallyTurn(ctx, t, p, "the event's turn")
	require.NoError(t, p.AckOrchestrationItem(ctx, turn.token, 1, nil, nil, nil, providertest.TestOrchMetadata(),
		[]cdb.ScheduledActivityIdentifier{{Instance: "cancels", ExecutionID: 1, ActivityID: 2}}))
	noWork(ctx, t, p, "the cancelled activity is not handed out")
}

// An activity of an instance this process deletes is never handed out
// afterwards, and the chain that kept the instance ends.
func TestAnActivityOfAnInstanceThisProcessDeletedIsNeverHandedOut(t *testing.T) {
	ctx, p := readyItemOf(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{PollInterval: time.Hour}, "deleted")
	// The instance is held by its chain here; a forced deletion goes ahead.
	_, err := p.DeleteInstancesAtomic(ctx, []string{"deleted"}, true)
	require.NoError(t, err)
	noWork(ctx, t, p, "the deleted instance's activity is not handed out")
	assert.False(t, p.HoldsOrchestration("deleted"), "its chain ended with it")
}

// A ready item whose claim refresh finds it written by someone else is
// not this process's to hand out: before, a 412 read as "still ours".
func TestAReadyItemChangedElsewhereIsPassedOverOnItsRefresh(t *testing.T) {
	clock := newTestClock()
	ctx, p := readyItemOf(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now}), cdb.Config{PollInterval: time.Hour, Now: clock.Now}, "changed")
	// Another process writes the item (a cancellation's tombstone, say):
	// its ETag is no longer the one this process holds.
	var ops cdb.PatchOperations
	ops.AppendSet("/touched", true)
	_, err := p.Container().PatchItem(ctx, cdb.NewPartitionKeyString("changed"), "w|1|2", ops, nil)
	require.NoError(t, err)
	clock.Advance(time.Hour + 30*time.Second) // past its patience (a poll interval here) and half its lock: the hand-out refreshes it first
	noWork(ctx, t, p, "the item was written by another process since it was locked here")
}

// lateAnswers delays the answer (not the execution) of the requests
// delay says to, by as long as it says.
type lateAnswers struct {
	next  http.RoundTripper
	delay func(*http.Request, []byte) time.Duration
}

func (l lateAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := l.next.RoundTrip(r)
	if d := l.delay(r, body); d > 0 {
		time.Sleep(d)
	}
	return resp, err
}

// oneLateAnswer is a provider on acct whose first request match picks,
// once armed, executes and is answered half a second late; the returned
// channel says when it executed.
func oneLateAnswer(t *testing.T, acct *cdb.FakeAccount, poll time.Duration, match func(*http.Request, []byte) bool) (p *cdb.CosmosProvider, arm func(), executed <-chan struct{}) {
	t.Helper()
	var armed atomic.Bool
	done := make(chan struct{}, 1)
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: lateAnswers{next: acct.Transport(),
		delay: func(r *http.Request, body []byte) time.Duration {
			if !armed.Load() || !match(r, body) {
				return 0
			}
			armed.Store(false)
			done <- struct{}{}
			return 500 * time.Millisecond
		}}})
	require.NoError(t, err)
	p, err = cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: poll})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, func() { armed.Store(true) }, done
}

// An item a commit locked for this process, whose answer came only after
// this process deleted the instance, is not handed out: the deletion
// dropped the ready items it could see, and this one was not ready yet.
func TestAnItemWhoseCommitAnsweredAfterTheInstancesDeletionIsNotHandedOut(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, armSlow, executed := oneLateAnswer(t, acct, time.Hour, func(_ *http.Request, body []byte) bool {
		return bytes.Contains(body, []byte("ActivityExecute"))
	})
	token := lockedStart(ctx, t, p, "gone")
	worker, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())

	armSlow()
	acked := startInBackground(func() error { return ackScheduling(ctx, t, p, token, "gone", activity("gone", 2, "")) })
	<-executed // the commit applied; its answer is on its way
	_, err := p.DeleteInstancesAtomic(ctx, []string{"gone"}, true)
	require.NoError(t, err)
	require.NoError(t, <-acked)

	work, ok := within(2*time.Second, worker)
	assert.False(t, ok && work.item != nil, "the deleted instance's activity was handed out: %+v", work.item)
}

// A work item a fetch of this process claimed just before this process's
// deletion of its instance swept it, whose claim answered only after the
// deletion returned, is not handed out: the runtime would run an activity
// of an instance its own process had deleted (R20), as a ready item would
// have been before H4.
func TestAnItemWhoseClaimAnsweredAfterTheInstancesDeletionIsNotHandedOut(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, armSlow, claimed := oneLateAnswer(t, acct, 50*time.Millisecond, func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPatch && bytes.Contains(body, []byte(`"work_`))
	})
	token := lockedStart(ctx, t, p, "swept")
	require.NoError(t, ackScheduling(ctx, t, p, token, "swept", activity("swept", 2, "")))
	require.Empty(t, workDocs(t, p, "swept")[0]["lockToken"], "no fetch waited: nothing was locked eagerly")

	armSlow()
	type fetched struct {
		item cdb.WorkItem
		err  error
	}
	fetch := make(chan fetched, 1)
	go func() {
		item, _, _, err := p.FetchWorkItem(ctx, time.Minute, time.Second, nil, cdb.DefaultOnlyFilter())
		fetch <- fetched{item, err}
	}()
	<-claimed // the claim applied; its answer is on its way
	_, err := p.DeleteInstancesAtomic(ctx, []string{"swept"}, true)
	require.NoError(t, err)
	got := <-fetch
	require.NoError(t, got.err)
	assert.Nil(t, got.item, "the deleted instance's activity was handed out")
}

// A commit that would cancel an activity waiting ready here, and that fails
// while the provider closes, gives the activity back: Close gave back the
// ready list while the commit had it withdrawn, and putting it back after
// Close left it locked for its lock's length.
func TestACancellingCommitThatFailsDuringCloseGivesTheItemBack(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	ctx, p := readyItemOf(t, acct, cdb.Config{PollInterval: time.Hour}, "closing")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "closing", Name: "stop", Data: "{}"}, 0))
	turn := eventuallyTurn(ctx, t, p, "the event's turn")
	closed := make(chan struct{})
	var once sync.Once
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusBadRequest, Match: func(r cdb.FakeRequest) bool {
		if r.Operation != "Batch" || r.PartitionKey != `["closing"]` || !strings.Contains(string(r.Body), `"type":"work-x"`) {
			return false // the cancelling commit alone
		}
		once.Do(func() { // the provider closes while the commit is on its way
			go func() { _ = p.Close(); close(closed) }()
			<-closed
		})
		return true
	}})
	err := p.AckOrchestrationItem(ctx, turn.token, 1, nil, nil, nil, providertest.TestOrchMetadata(),
		[]cdb.ScheduledActivityIdentifier{{Instance: "closing", ExecutionID: 1, ActivityID: 2}})
	remove()
	require.Error(t, err, "the commit failed")
	items := workDocs(t, p, "closing")
	require.Len(t, items, 1, "not cancelled: the commit failed")
	assert.Empty(t, items[0]["lockToken"], "given back, not left locked to a closed process")
}
