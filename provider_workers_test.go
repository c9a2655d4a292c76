package cdb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// The worker queue and sessions under faults (ARCHITECTURE.md, Worker queue
// faults), on the in-memory Cosmos DB with a clock the test moves.

// newWorkerProvider is a short-polling provider on a fresh account whose
// clock the test moves.
func newWorkerProvider(t *testing.T) (*cdb.FakeAccount, *cdb.CosmosProvider, *testClock) {
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	return acct, p, clock
}

func activity(instance string, id uint64, session string) cdb.ActivityExecuteMessage {
	a := cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: id, Name: "Work", Input: "{}"}
	if session != "" {
		a.SessionID = &session
	}
	return a
}

// activities are the first turn's n activities of instance, ids 2 to n+1.
func activities(instance string, n int) []cdb.ActivityExecuteMessage {
	acts := make([]cdb.ActivityExecuteMessage, n)
	for i := range acts {
		acts[i] = activity(instance, uint64(i+2), "")
	}
	return acts
}

func sessionOf(owner string) *cdb.SessionFetchConfig {
	return &cdb.SessionFetchConfig{OwnerID: owner, LockTimeout: 30 * time.Second}
}

// fetchWork fetches one worker item, failing the test on an error.
func fetchWork(ctx context.Context, t *testing.T, p cdb.Provider, session *cdb.SessionFetchConfig) (*cdb.ActivityExecuteMessage, string, uint32) {
	t.Helper()
	item, token, attempt, err := p.FetchWorkItem(ctx, time.Minute, 0, session, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	if item == nil {
		return nil, "", 0
	}
	act, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "worker item %T", item)
	return &act, token, attempt
}

func completionOf(a *cdb.ActivityExecuteMessage, result string) cdb.WorkItem {
	return cdb.ActivityCompletedMessage{Instance: a.Instance, ExecutionID: a.ExecutionID, ID: a.ID, Result: result}
}

// isLockRenewal matches the request that extends the lock of document id
// (a PATCH of lockedUntil alone, or a batch holding one), not a claim or a
// release (which set the lock token too).
func isLockRenewal(id string) func(cdb.FakeRequest) bool {
	return func(r cdb.FakeRequest) bool {
		names := r.Operation == "PatchItem" && r.ItemID == id ||
			r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"`+id+`"`))
		return names && bytes.Contains(r.Body, []byte(`/lockedUntil`)) && !bytes.Contains(r.Body, []byte(`/lockToken`))
	}
}

// A worker item that does not decode (a kind written by a newer version)
// neither fails the fetch nor blocks the items behind it; it counts attempts,
// and past the poison bound its orchestration gets an ActivityFailed poison
// error naming it, and it leaves the queue.
func TestUndecodableWorkItemIsSkippedAndReachesPoison(t *testing.T) {
	ctx := rulesContext(t)
	_, p, clock := newWorkerProvider(t)
	providertest.CreateInstance(ctx, t, p, "undecodable")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("undecodable", 2, "")))
	makeUndecodable(ctx, t, p, "undecodable", "w|1|2")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("undecodable", 3, "")))

	act, token, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act, "the item behind the undecodable one is served")
	assert.Equal(t, uint64(3), act.ID)
	require.NoError(t, p.AckWorkItem(ctx, token, nil))

	for i := 0; i < 30 && countDocs(t, p, "undecodable", "work") > 0; i++ {
		clock.Advance(2 * time.Minute) // past the growing delay
		act, _, _ := fetchWork(ctx, t, p, nil)
		require.Nil(t, act, "nothing decodable is queued")
	}
	require.Zero(t, countDocs(t, p, "undecodable", "work"), "past the poison bound the item leaves the queue")

	item, orchToken, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the orchestration learns that its activity failed")
	require.Len(t, item.Messages, 1)
	failed, ok := item.Messages[0].(cdb.ActivityFailedMessage)
	require.True(t, ok, "message %T", item.Messages[0])
	assert.Equal(t, uint64(2), failed.ID)
	poison, ok := failed.Details.(cdb.PoisonError)
	require.True(t, ok, "details %T", failed.Details)
	assert.Greater(t, poison.AttemptCount, poison.MaxAttempts)
	assert.Equal(t, cdb.PoisonActivity{Instance: "undecodable", ExecutionID: 1, ActivityName: "Work", ActivityID: 2}, poison.MessageType)
	assert.Contains(t, poison.Message, "ActivityExecuteFromTheFuture", "the poison error keeps the item's text")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, orchToken, 0, false))
}

// makeUndecodable rewrites a worker item's encoded WorkItem as a kind this
// version does not know.
func makeUndecodable(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance, id string) {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	resp, err := p.Container().ReadItem(ctx, pk, id, nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	doc["item"] = `{"ActivityExecuteFromTheFuture":{"instance":"` + instance + `","name":"Work","warp":9}}`
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = p.Container().ReplaceItem(ctx, pk, id, body, nil)
	require.NoError(t, err)
}

// Items of sessions another owner holds sit at the head of the queue; they do
// not use up a fetch's candidate budget, and once seen they are left out of
// later looks until the other owner's session lock ends, so they cost no
// request.
func TestSessionsOwnedElsewhereDoNotStarveTheFetch(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, clock := newWorkerProvider(t)
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now}) // B's process
	sessions := []string{"s1", "s2", "s3", "s4", "s5"}
	for i, s := range sessions {
		require.NoError(t, p.EnqueueForWorker(ctx, activity("held", uint64(i+1), s)))
	}
	for range sessions {
		act, _, _ := fetchWork(ctx, t, other, sessionOf("B"))
		require.NotNil(t, act, "B claims every session")
	}
	for i, s := range sessions {
		require.NoError(t, p.EnqueueForWorker(ctx, activity("held", uint64(i+11), s)))
	}
	require.NoError(t, p.EnqueueForWorker(ctx, activity("plain", 1, "")))

	act, _, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act, "the plain item behind five foreign sessions is served in one fetch")
	assert.Equal(t, "plain", act.Instance)

	clock.Advance(time.Second) // longer than any fixed contention note, well inside B's session locks
	require.NoError(t, p.EnqueueForWorker(ctx, activity("plain", 2, "")))
	log := logRequests(acct)
	act, _, _ = fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act)
	assert.Equal(t, uint64(2), act.ID)
	assert.Equal(t, []string{"Query", "PatchItem"}, fetchOps(log), "sessions owned elsewhere are left out of the query")

	clock.Advance(31 * time.Second) // B's session locks end: the sessions are A's to take
	for range sessions {
		act, _, _ := fetchWork(ctx, t, p, sessionOf("A"))
		require.NotNil(t, act)
		assert.Equal(t, "held", act.Instance)
	}
}

// fetchOps are the operations of the logged requests a fetch sends: the
// background work's cross-partition queries (the reconciler's) are left out.
func fetchOps(l *requestLog) []string {
	var ops []string
	for _, r := range l.take() {
		if r.Operation == "Query" && r.PartitionKeyRangeID == "" && r.PartitionKey == "" {
			continue
		}
		ops = append(ops, r.Operation)
	}
	return ops
}

// A session is keyed by its id alone, as duroxide keys it: the items of two
// instances that use session "gpu-0" go to the worker that owns "gpu-0".
func TestSessionAffinityHoldsAcrossInstances(t *testing.T) {
	ctx := rulesContext(t)
	_, p, _ := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("first", 1, "gpu-0")))
	require.NoError(t, p.EnqueueForWorker(ctx, activity("second", 1, "gpu-0")))

	act, _, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act)
	assert.Equal(t, "first", act.Instance)

	other, _, _ := fetchWork(ctx, t, p, sessionOf("B"))
	assert.Nil(t, other, "B must not take an item of A's session, whatever its instance")

	act, _, _ = fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act, "A owns gpu-0 and takes the second instance's item")
	assert.Equal(t, "second", act.Instance)
}

// The session claim and the item lock are two requests; a claim whose item
// lock then fails only makes the claimer the session's owner, and the item
// stays queued for it.
func TestSessionClaimOutlivingAFailedItemLockIsHarmless(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, _ := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("claimed", 1, "gpu-1")))
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 412, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "PatchItem" && r.ItemID == "w|1|1"
	}})

	act, _, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.Nil(t, act, "the item lock failed")
	act, _, _ = fetchWork(ctx, t, p, sessionOf("B"))
	require.Nil(t, act, "A holds the session it claimed")
	act, token, attempt := fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act, "A takes the item of its session")
	assert.Equal(t, uint32(1), attempt, "the failed lock did not count")
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// An expired session is kept while any instance still has an item that names
// it.
func TestCleanupKeepsSessionWithItemsOfAnotherInstance(t *testing.T) {
	ctx := rulesContext(t)
	_, p, clock := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("one", 1, "gpu-2")))
	act, token, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act)
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
	require.NoError(t, p.EnqueueForWorker(ctx, activity("two", 1, "gpu-2")))

	clock.Advance(time.Minute)
	n, err := p.CleanupOrphanedSessions(ctx, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, n, "instance two still has an item of gpu-2")

	act, token, _ = fetchWork(ctx, t, p, sessionOf("B"))
	require.NotNil(t, act)
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
	clock.Advance(time.Minute)
	n, err = p.CleanupOrphanedSessions(ctx, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "an expired session no item names is removed")
}

// A renewal that committed but whose response was lost leaves the provider
// with the document's new ETag, so the ack that follows commits.
func TestWorkLockRenewalWithLostResponseKeepsTheLock(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, _ := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("renewed", 1, "")))
	act, token, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)

	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: isLockRenewal("w|1|1")})
	require.NoError(t, p.RenewWorkItemLock(ctx, token, time.Minute), "the renewal committed; its outcome is resolved here")
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(act, "done")))
	assert.Zero(t, countDocs(t, p, "renewed", "work"))
}

// When even the read that resolves a lost renewal fails, the renewal reports
// a retryable error and the next write on the lock resolves the ETag first,
// so the ack still commits.
func TestWorkLockRenewalUnresolvedIsResolvedByTheAck(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, _ := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("unresolved", 1, "")))
	act, token, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)

	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: isLockRenewal("w|1|1")})
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 500, Times: 1, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && strings.Contains(string(r.Body), `"Read"`) && strings.Contains(string(r.Body), `"w|1|1"`)
	}})
	err := p.RenewWorkItemLock(ctx, token, time.Minute)
	require.Error(t, err)
	assert.True(t, cdb.IsRetryable(err), "an unresolved renewal is not a lost lock: %v", err)
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(act, "done")))
}

// A renewal refused with 408 (not applied) is resolved inside the provider;
// the lock is extended and the activity's ack commits.
func TestWorkLockRenewalTimeoutIsResolved(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, _ := newWorkerProvider(t)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("timeout", 1, "")))
	act, token, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)

	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 408, Times: 1, Match: isLockRenewal("w|1|1")})
	require.NoError(t, p.RenewWorkItemLock(ctx, token, time.Minute))
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(act, "done")))
}

// The orchestration lock's renewal is a batch over the instance document and
// the locked messages; a lost response on it is resolved by reading the
// instance document back, so the turn's ack commits.
func TestOrchestrationLockRenewalWithLostResponseKeepsTheLock(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, _ := newWorkerProvider(t)
	providertest.CreateInstance(ctx, t, p, "orch-renewed")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("orch-renewed"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: isLockRenewal("inst")})
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// A completion too large to store is refused permanently before anything is
// written, and the lock stays held, so the worker can still report the
// failure.
func TestOversizedCompletionIsRefusedAndTheLockKept(t *testing.T) {
	ctx := rulesContext(t)
	_, p, _ := newWorkerProvider(t)
	providertest.CreateInstance(ctx, t, p, "oversized")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("oversized", 2, "")))
	act, token, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)

	err := p.AckWorkItem(ctx, token, completionOf(act, strings.Repeat("x", 2<<20+1)))
	require.Error(t, err)
	assert.False(t, cdb.IsRetryable(err), "a completion over the document limit never fits: %v", err)
	assert.ErrorIs(t, fmt.Errorf("caller: %w", err), cdb.ErrDocumentTooLarge)
	require.NoError(t, p.AckWorkItem(ctx, token, cdb.ActivityFailedMessage{Instance: act.Instance, ExecutionID: 1, ID: act.ID,
		Details: cdb.InfrastructureError{Operation: "AckWorkItem", Message: err.Error()}}))
	assert.Zero(t, countDocs(t, p, "oversized", "work"))
}

// Fetches with a session config share the idle queue's poll window whatever
// their owner, so an idle queue costs one query per poll interval, not one
// per worker dispatcher; an owner that holds a session still looks on its
// own, so items of its sessions written by another process reach it without
// waiting for the shared window.
func TestSessionOwnersShareTheIdlePollButKeepTheirOwnSessions(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{PollInterval: time.Minute, ReconcileInterval: time.Hour, Now: clock.Now}
	p := newRulesProvider(t, acct, cfg)
	other := newRulesProvider(t, acct, cfg)

	require.NoError(t, p.EnqueueForWorker(ctx, activity("first", 1, "gpu-0")))
	act, token, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act)
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(act, "done")))

	nothing, _, _ := fetchWork(ctx, t, p, sessionOf("B"))
	require.Nil(t, nothing, "the queue is empty for B")
	before := acct.Counts().Requests
	nothing, _, _ = fetchWork(ctx, t, p, sessionOf("C"))
	require.Nil(t, nothing)
	assert.Equal(t, before, acct.Counts().Requests, "C, holding no session, relies on B's look within the poll interval")

	require.NoError(t, other.EnqueueForWorker(ctx, activity("second", 1, "gpu-0")))
	act, _, _ = fetchWork(ctx, t, p, sessionOf("A"))
	require.NotNil(t, act, "A holds gpu-0: its look is its own, and finds the item another process wrote")
	assert.Equal(t, "second", act.Instance)
}

// The items of a session an owner of this process holds are that owner's
// alone to take, so they are announced to its fetches: the owner takes the
// session's next item at once, where it waited for its poll window (the
// partition's announcements went to another owner's fetch, whose look
// leaves the session out). The items it saw behind the one it claimed,
// and those this process queues later, of any instance, come so; an idle
// owner holding the session still looks once a poll window.
func TestASessionOwnerTakesItsSessionsItemsWithoutWaitingForThePollWindow(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Minute, ReconcileInterval: time.Hour, Now: clock.Now})
	for id := uint64(1); id <= 3; id++ {
		require.NoError(t, p.EnqueueForWorker(ctx, activity("fan", id, "gpu-0")))
	}
	takeNext := func(instance string, id uint64) {
		t.Helper()
		act, token, _ := fetchWork(ctx, t, p, sessionOf("A"))
		require.NotNil(t, act, "A takes %s's item %d within its poll window", instance, id)
		assert.Equal(t, instance, act.Instance)
		assert.Equal(t, id, act.ID)
		nothing, _, _ := fetchWork(ctx, t, p, sessionOf("B"))
		require.Nil(t, nothing, "B cannot take A's session")
		require.NoError(t, p.AckWorkItem(ctx, token, completionOf(act, "done")))
	}
	for id := uint64(1); id <= 3; id++ {
		takeNext("fan", id)
	}

	require.NoError(t, p.EnqueueForWorker(ctx, activity("fan", 4, "gpu-0")))
	takeNext("fan", 4)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("other", 1, "gpu-0")))
	takeNext("other", 1)

	nothing, _, _ := fetchWork(ctx, t, p, sessionOf("A"))
	require.Nil(t, nothing, "A's idle look (it opens A's poll window)")
	before := acct.Counts().Requests
	nothing, _, _ = fetchWork(ctx, t, p, sessionOf("A"))
	require.Nil(t, nothing)
	assert.Equal(t, before, acct.Counts().Requests, "A, holding gpu-0 with nothing queued, waits for its poll window")
}
