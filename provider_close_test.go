package cdb_test

import (
	"bytes"
	"context"
	"io"
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

// Close gives back everything locked here for fetches that will never
// come: ready items and turns, and chains, whatever comes due meanwhile.

// A chain that comes due while Close gives back a ready turn is given back
// too: before, Close gave back the ready turns first while the chain loop
// still ran, and a chain it then handed over into the emptied ready list
// stayed locked for a lock's length.
func TestAChainDueWhileCloseGivesBackIsGivenBackToo(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var closing atomic.Bool
	releasing := make(chan struct{}, 1)
	p := newHookedProvider(t, acct, cdb.Config{PollInterval: time.Hour}, func(r *http.Request) {
		if closing.Load() && r.Method != http.MethodGet && r.Header.Get("x-ms-documentdb-partitionkey") == `["ready"]` {
			select {
			case releasing <- struct{}{}:
			default:
			}
			time.Sleep(500 * time.Millisecond) // the give-back of the ready turn is slow
		}
	})
	// "due": a chain whose first completion comes while Close runs.
	due := chainedFanOut(ctx, t, p, "due", 2)
	// "ready": its chained turn is ready, and no orchestration fetch waits.
	ackActivity(ctx, t, p, chainedFanOut(ctx, t, p, "ready", 1)[0])

	closing.Store(true)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = p.Close()
	}()
	select {
	case <-releasing:
	case <-time.After(time.Minute):
		t.Fatal("Close never gave back the ready turn")
	}
	// Written claimed into the chain if it still stands, unclaimed if not.
	_ = p.AckWorkItem(ctx, due[0].token, cdb.ActivityCompletedMessage{Instance: "due", ExecutionID: 1, ID: 2, Result: "ok"})
	<-closed

	reader := newRulesProvider(t, acct, cdb.Config{})
	for _, instance := range []string{"ready", "due"} {
		assert.Empty(t, instanceDocOf(t, reader, instance)["lockToken"], "%s: given back at Close", instance)
	}
	item, _, _, err := reader.FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "another process takes a turn at once")
}

// An item a commit locks for a fetch of this process, committed after
// Close began, is given back at once, and so is the chain the commit kept
// its instance under: no fetch of this process will take them, and hiding
// them for a lock's length would stall the instance.
func TestAnItemACommitLocksAfterCloseBeganIsGivenBack(t *testing.T) {
	ctx := rulesContext(t)
	p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{})
	token := lockedStart(ctx, t, p, "late")
	result, stopWorker := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	cdb.AfterAckPlannedForTest(p, func() { // the item is reserved: the runtime stops, then its provider
		stopWorker()
		require.Nil(t, result().item)
		_ = p.Close()
	})
	require.NoError(t, ackScheduling(ctx, t, p, token, "late", activity("late", 2, "")))
	items := workDocs(t, p, "late")
	require.Len(t, items, 1)
	assert.Empty(t, items[0]["lockToken"], "given back, not left to its lock's expiry")
	assert.Empty(t, instanceDocOf(t, p, "late")["lockToken"], "the chain the commit kept is given back too")
}

// An item whose give-back failed (here one request, on a client that
// tries each once) waits ready again and is given back at the next
// chance, here Close: before, it was off every list and stayed locked for
// a worker lock's length.
func TestAnItemWhoseGiveBackFailedIsGivenBackLater(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: 200 * time.Millisecond})
	token := lockedStart(ctx, t, p, "retried-gb")
	result, stopWorker := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	cdb.AfterAckPlannedForTest(p, func() { // the item is reserved for a fetch that goes away
		cdb.AfterAckPlannedForTest(p, nil)
		stopWorker()
		require.Nil(t, result().item)
	})
	failed := failOnce(acct, func(r cdb.FakeRequest) bool {
		return r.Operation == "PatchItem" && r.ItemID == "w|1|2"
	})
	require.NoError(t, ackScheduling(ctx, t, p, token, "retried-gb", activity("retried-gb", 2, "")))
	require.Eventually(t, func() bool { return failed.Load() == 1 }, 10*time.Second, time.Millisecond, "the give-back loop tried and failed")
	require.NoError(t, p.Close())
	items := workDocs(t, newRulesProvider(t, acct, cdb.Config{}), "retried-gb")
	require.Len(t, items, 1)
	assert.Empty(t, items[0]["lockToken"], "given back, not left to its lock's expiry")
}

// A chain whose give-back failed (no completion came within its window,
// and the release's one request failed) waits unconfirmed and is given
// back at the next chance, here Close: before, it was dropped, and the
// instance stayed locked for a lock's length.
func TestAChainWhoseGiveBackFailedIsGivenBackLater(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: 200 * time.Millisecond})
	failed := failOnce(acct, func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && r.PartitionKey == `["idle-chain"]` && strings.Contains(string(r.Body), `"path":"/releasedAt"`)
	})
	chainedFanOut(ctx, t, p, "idle-chain", 1) // its activity runs, and never completes
	require.Eventually(t, func() bool { return failed.Load() == 1 }, 10*time.Second, time.Millisecond, "the chain's window ended, and its give-back failed")
	require.Regexp(t, `^lock_chain\.`, instanceDocOf(t, p, "idle-chain")["lockToken"])
	require.NoError(t, p.Close())
	assert.Empty(t, instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "idle-chain")["lockToken"], "given back, not left to its lock's expiry")
}

// A chained turn no fetch took, whose give-back failed, goes back with
// the completion claimed with it when it is given back later (here at
// Close): before, the retry released the instance alone, and the
// completion stayed claimed, hidden, until the chain's lock expired.
func TestAChainedTurnWhoseGiveBackFailedGoesBackWithItsCompletions(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: 200 * time.Millisecond})
	failed := failOnce(acct, func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && r.PartitionKey == `["claimed-chain"]` && strings.Contains(string(r.Body), `"path":"/releasedAt"`)
	})
	got := chainedFanOut(ctx, t, p, "claimed-chain", 1)
	ackActivity(ctx, t, p, got[0]) // claimed into the chain; its turn waits ready, and no fetch comes
	require.Eventually(t, func() bool { return failed.Load() == 1 }, 10*time.Second, time.Millisecond, "the ready turn's give-back failed")
	require.NoError(t, p.Close())
	reader := newRulesProvider(t, acct, cdb.Config{})
	assert.Empty(t, instanceDocOf(t, reader, "claimed-chain")["lockToken"], "the instance is given back")
	msgs := messageDocs(t, reader, "claimed-chain")
	require.Len(t, msgs, 1)
	assert.Empty(t, msgs[0]["lockToken"], "and the completion claimed with it")
}

// cancelAtRequest cancels a call's context as one of its requests goes
// out (the body mentions at), as a runtime stopping does: a request still
// on the cancelled context then fails as it would, one on a context of its
// own goes through.
type cancelAtRequest struct {
	next   http.RoundTripper
	at     string
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (c *cancelAtRequest) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && !c.fired.Load() {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(c.at)) && c.fired.CompareAndSwap(false, true) {
			c.cancel()
		}
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return c.next.RoundTrip(r)
}

// A fetch whose caller goes away while the fetch gives back the instance
// it locked (a runtime shutting down) still gives it back: messages that
// came before their instance's start are parked for it, and the park,
// written on the cancelled context, failed and left the instance locked
// for a lock's length (after a clean close, the simulation's
// close-gives-back).
func TestAFetchWhoseCallerWentAwayStillGivesBackWhatItLocked(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	fetchCtx, cancelFetch := context.WithCancel(ctx)
	defer cancelFetch()
	cut := &cancelAtRequest{next: acct.Transport(), at: "parkedUntil", cancel: cancelFetch}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: cut})
	require.NoError(t, err)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "early", Name: "go", Data: "{}"}, 0))

	item, _, _, _ := p.FetchOrchestrationItem(fetchCtx, time.Minute, 0, nil)
	require.Nil(t, item, "an event before its start is parked, not handed out")
	require.True(t, cut.fired.Load(), "the fetch went as far as the park")
	inst := instanceDocOf(t, p, "early")
	assert.Empty(t, inst["lockToken"], "the instance is not left locked: %v", inst)
	assert.NotZero(t, inst["parkedUntil"], "its messages wait for the start")
}

// cutAfterRequest lets the first request whose body mentions at reach the
// account, then cancels its call's context and loses the answer, as a
// runtime stopping while the request is on its way does.
type cutAfterRequest struct {
	next   http.RoundTripper
	at     string
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (c *cutAfterRequest) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || c.fired.Load() {
		return c.next.RoundTrip(r)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !bytes.Contains(body, []byte(c.at)) || !c.fired.CompareAndSwap(false, true) {
		return c.next.RoundTrip(r)
	}
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		_ = resp.Body.Close()
	}
	c.cancel()
	return nil, context.Canceled
}

// cutProvider is a provider whose first request mentioning at applies and
// then cuts its caller off (cancelling fetchCtx).
func cutProvider(t *testing.T, acct *cdb.FakeAccount, at string) (p *cdb.CosmosProvider, fetchCtx context.Context, cut *cutAfterRequest) {
	t.Helper()
	fetchCtx, cancel := context.WithCancel(rulesContext(t))
	t.Cleanup(cancel)
	cut = &cutAfterRequest{next: acct.Transport(), at: at, cancel: cancel}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: cut})
	require.NoError(t, err)
	p, err = cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, fetchCtx, cut
}

// An orchestration fetch whose caller goes away while its lock batch is on
// its way (a runtime stopping) gives back the lock the batch took: its
// read-back, on the cancelled context, failed, and the instance stayed
// locked for a lock's length (after a clean close, the simulation's
// close-gives-back, on a plain fetch's token).
func TestAnOrchestrationLockCutOffFromItsFetchIsGivenBack(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, fetchCtx, cut := cutProvider(t, acct, `"/lockToken"`)
	require.NoError(t, p.EnqueueForOrchestrator(rulesContext(t), providertest.StartItem("cut-lock"), 0))
	item, _, _, err := p.FetchOrchestrationItem(fetchCtx, time.Minute, 0, nil)
	require.True(t, cut.fired.Load(), "the lock batch went out")
	assert.Nil(t, item)
	assert.Error(t, err, "its caller went away")
	assert.Empty(t, instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "cut-lock")["lockToken"], "the lock is given back")
}

// A worker fetch whose caller goes away while its claim is on its way
// gives the claim back, its attempt with it: the item stayed hidden for a
// worker lock's length.
func TestAWorkClaimCutOffFromItsFetchIsGivenBack(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, fetchCtx, cut := cutProvider(t, acct, `"work_`)
	require.NoError(t, p.EnqueueForWorker(rulesContext(t), cdb.ActivityExecuteMessage{Instance: "cut-claim", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	item, _, _, err := p.FetchWorkItem(fetchCtx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.True(t, cut.fired.Load(), "the claim went out")
	assert.Nil(t, item)
	assert.Error(t, err, "its caller went away")
	assertClaimGivenBack(t, acct, "cut-claim")
}

// Close gives back the instance locks its runtime still holds: an abandon
// that failed (a fault, or a stopping runtime's call cut off) left its lock
// to expire, the instance hidden from every other process for a lock's
// length after a clean close.
func TestCloseGivesBackALockWhoseAbandonFailed(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("left"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusBadRequest, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && strings.Contains(string(r.Body), `"/releasedAt"`)
	}})
	require.Error(t, p.AbandonOrchestrationItem(ctx, token, 0, false), "the abandon fails")
	remove()
	require.Equal(t, token, instanceDocOf(t, p, "left")["lockToken"])

	require.NoError(t, p.Close())
	assert.Empty(t, instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "left")["lockToken"], "given back at Close")
}

// cutDuringReadBack loses the answer of the first batch or patch (op)
// whose body holds marker, and cancels the returned context as the
// read-back of that write goes out (answering the read 503): a caller that
// goes away while the read-back is on its way. readBack says it went out.
func cutDuringReadBack(ctx context.Context, acct *cdb.FakeAccount, op, marker string) (context.Context, *atomic.Bool) {
	cut, cancel := context.WithCancel(ctx)
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == op && strings.Contains(string(r.Body), marker)
	}})
	readBack := &atomic.Bool{}
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1, Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "Batch" && strings.Contains(string(r.Body), `"operationType":"Read"`) {
			readBack.Store(true)
			cancel()
			return true
		}
		return false
	}})
	return cut, readBack
}

// assertClaimGivenBack checks instance's one worker item, read by a
// provider of its own: unlocked, its claim's attempt given back.
func assertClaimGivenBack(t *testing.T, acct *cdb.FakeAccount, instance string) {
	t.Helper()
	items := workDocs(t, newRulesProvider(t, acct, cdb.Config{}), instance)
	require.Len(t, items, 1)
	assert.Empty(t, items[0]["lockToken"], "the claim is given back")
	assert.EqualValues(t, 0, items[0]["attempts"], "its attempt with it")
}

// A lock batch whose answer was lost is read back to learn whether it
// applied; a caller that goes away while that read is on its way (a
// runtime stopping cancels its fetches) leaves the lock this process's to
// give back: the read-back ran on the caller's context, failed with it, and
// the instance stayed locked for a lock's length (the soak's
// close-gives-back, on a first turn's instance, at a shutdown).
func TestAFetchWhoseCallerLeavesDuringTheLockReadBackGivesTheLockBack(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("cut-read"), 0))
	fetchCtx, readBack := cutDuringReadBack(ctx, acct, "Batch", `"/lockToken"`)
	item, _, _, err := p.FetchOrchestrationItem(fetchCtx, time.Minute, 0, nil)
	require.True(t, readBack.Load(), "the lock batch's answer was lost and it was read back")
	assert.Nil(t, item)
	assert.Error(t, err, "its caller went away")
	assert.Empty(t, instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "cut-read")["lockToken"], "the lock is given back")
}

// The same for a work claim: a caller that goes away while the read-back
// of a claim whose answer was lost is on its way leaves the claim to be
// given back, its attempt with it.
func TestAWorkFetchWhoseCallerLeavesDuringTheClaimReadBackGivesTheClaimBack(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "cut-claim-read", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	fetchCtx, readBack := cutDuringReadBack(ctx, acct, "PatchItem", `"work_`)
	item, _, _, err := p.FetchWorkItem(fetchCtx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.True(t, readBack.Load(), "the claim's answer was lost and it was read back")
	assert.Nil(t, item)
	assert.Error(t, err, "its caller went away")
	assertClaimGivenBack(t, acct, "cut-claim-read")
}

// A give-back goes on without a message that went away since the fetch
// locked it (a relay took its delivery back, a deletion swept it): the
// batch failed whole, and the instance stayed locked for a lock's length
// (the soak's close-gives-back, on a tree's child whose stray start a
// relay took back while the fetch dropped it).
func TestAnAbandonGoesOnWithoutAMessageThatWentAway(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("gone-msg"), 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("gone-msg"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Len(t, item.Messages, 2)
	msgs := messageDocs(t, p, "gone-msg")
	require.Len(t, msgs, 2)
	_, err = p.Container().DeleteItem(ctx, cdb.NewPartitionKeyString("gone-msg"), msgs[1]["id"].(string), nil)
	require.NoError(t, err)

	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, false))
	assert.Empty(t, instanceDocOf(t, p, "gone-msg")["lockToken"], "the instance is given back")
	left := messageDocs(t, p, "gone-msg")
	require.Len(t, left, 1)
	assert.Empty(t, left[0]["lockToken"], "and the message left with it")
}

// faultOnce injects kind once, on the first request of op whose body
// contains marker, and says whether it was hit.
func faultOnce(acct *cdb.FakeAccount, kind cdb.FakeFaultKind, op, marker string) *atomic.Bool {
	hit := &atomic.Bool{}
	acct.InjectFault(cdb.FakeFault{Kind: kind, Times: 1, Match: func(r cdb.FakeRequest) bool {
		match := r.Operation == op && strings.Contains(string(r.Body), marker)
		if match {
			hit.Store(true)
		}
		return match
	}})
	return hit
}

// A give-back whose answer was lost is read back: when the instance is
// still locked under the lock's token the batch did not apply, and it goes
// again; the abandon returned the lost answer's error, and the instance
// stayed locked for a lock's length.
func TestAnAbandonWhoseAnswerWasLostIsReadBackAndSentAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind cdb.FakeFaultKind
	}{
		{"not applied", cdb.FaultDropConnection},
		{"applied", cdb.FaultLoseResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
			require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("lost-abandon"), 0))
			item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, item)
			hit := faultOnce(acct, tc.kind, "Batch", `"/releasedAt"`)

			require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, false))
			require.True(t, hit.Load(), "the abandon's answer was lost")
			assert.Empty(t, instanceDocOf(t, p, "lost-abandon")["lockToken"], "the instance is given back")
			for _, m := range messageDocs(t, p, "lost-abandon") {
				assert.Empty(t, m["lockToken"], "and its message")
			}
		})
	}
}

// The same for a park (messages that came before their instance's start):
// its batch, sent again once read back as not applied, parks them and
// frees the instance.
func TestAParkWhoseAnswerWasLostIsReadBackAndSentAgain(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("lost-park"), 0))
	hit := faultOnce(acct, cdb.FaultDropConnection, "Batch", `"/heldFrom"`)

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the event waits for its start")
	require.True(t, hit.Load(), "the park's answer was lost")
	assert.Empty(t, instanceDocOf(t, p, "lost-park")["lockToken"], "the instance is given back")
	msgs := messageDocs(t, p, "lost-park")
	require.Len(t, msgs, 1)
	assert.NotNil(t, msgs[0]["heldFrom"], "and its message parked")
}
