package cdb_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Deletions and the next life of their ids: what a deletion that stops half
// way, races a start, or pauses does to starts and to new lives.

// stallChildSweep makes every query of partition pk fail while the returned
// function has not been called: a deletion marks the partition's instance
// but cannot sweep it.
func stallChildSweep(acct *cdb.FakeAccount, pk string) func() {
	return acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Query" && r.PartitionKey == `["`+pk+`"]`
	}})
}

// isMarkOf matches the PATCH that puts a deletion's mark on pk's instance
// document.
func isMarkOf(t *testing.T, r *http.Request, pk string) bool {
	return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/docs/inst") &&
		r.Header.Get("x-ms-documentdb-partitionkey") == `["`+pk+`"]` && bodyContains(t, r, `"/deleting"`)
}

// A tree deletion that swept the root but not the child leaves the child's
// mark; the root starts again at once and its first turn starts the child
// under the same id, through its outbox. Finishing the old deletion must
// not sweep that start: the new parent would wait for ever.
func TestARelayedChildStartSurvivesTheUnfinishedDeletionOfItsID(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute,
		OutboxMinAge: time.Second, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "root")
	startChild(ctx, t, p, "root::child", "root")

	resume := stallChildSweep(acct, "root::child")
	_, err := p.DeleteInstance(ctx, "root", true)
	require.True(t, cdb.HasStatus(err, http.StatusForbidden), "the deletion stops before sweeping the child: the injected stall: %v", err)
	resume()
	require.Equal(t, 0, countDocs(t, p, "root", "inst"), "the root's partition is swept")
	require.Equal(t, 1, countDocs(t, p, "root::child", "inst"), "the child's marked instance document is left")

	// The root's next life starts the child at once.
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("root"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "root", item.Instance)
	child := providertest.StartItem("root::child").(cdb.StartOrchestrationMessage)
	child.ParentInstance, child.ParentID = ptrTo("root"), ptrTo(uint64(2))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("root", 1)}, nil,
		[]cdb.WorkItem{child}, providertest.TestOrchMetadata(), nil))

	clock.Advance(2 * time.Minute) // the old deletion's process is gone for good
	// A reconciler finishes the old deletion; its delivery of the start,
	// tried first, may report that the start waits for it.
	if err := p.ReconcileOutbox(ctx); err != nil {
		require.True(t, cdb.IsRetryable(err), "%v", err)
	}
	require.NoError(t, p.ReconcileOutbox(ctx), "the next pass delivers the start")

	requireStartFetched(ctx, t, p, "root::child", "the new child's start survives the old deletion")
}

// A client start whose message lands in a partition being deleted, and
// whose read-back comes after the deletion's last sweep deleted it, is not
// reported accepted unless it is really there.
func TestAStartRacingTheEndOfADeletionIsThereWhenAccepted(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute, Now: clock.Now}
	finisher := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, finisher, "phoenix")
	resume := stallChildSweep(acct, "phoenix")
	_, err := finisher.DeleteInstance(ctx, "phoenix", true)
	require.True(t, cdb.HasStatus(err, http.StatusForbidden), "the deletion marks the instance and stops: the injected stall: %v", err)
	resume()

	var mu sync.Mutex
	written, finished := false, false
	starter := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("x-ms-documentdb-partitionkey") != `["phoenix"]` || finished {
			return
		}
		if !written {
			written = isItemCreate(r, `["phoenix"]`) // the start's message, beside the marked instance
			return
		}
		// Before the start reads back: the deletion is finished, its last
		// sweep taking the start's message with it.
		finished = true
		clock.Advance(2 * time.Minute)
		require.NoError(t, finisher.ReconcileOutbox(ctx))
		require.Equal(t, 0, countAllDocs(t, finisher, "phoenix"), "the sweep took the start")
	})
	err = starter.EnqueueForOrchestrator(ctx, providertest.StartItem("phoenix"), 0)
	require.True(t, finished, "the deletion finished during the start")
	if err != nil {
		require.True(t, cdb.IsRetryable(err), "a start that is not there is refused as retryable: %v", err)
		return
	}
	requireStartFetched(ctx, t, finisher, "phoenix", "an accepted start is there")
}

// A deleting process that pauses in the middle (here: before marking the
// child) past AbandonedDeletionAge loses its deletion to a reconciler,
// which finishes it; the child's id starts a new life. When the paused
// process resumes it writes nothing: the new life carries no mark, and the
// paused caller is told the deletion is done.
func TestAPausedDeleterLeavesNoMarkOnTheNextLifeOfTheID(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute, OutboxMinAge: time.Second, Now: clock.Now}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "root")
	startChild(ctx, t, other, "root::child", "root")

	var once sync.Once
	paused := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if !isMarkOf(t, r, "root::child") {
			return
		}
		once.Do(func() { // the pause: another process finishes, the id lives again
			clock.Advance(2 * time.Minute)
			require.NoError(t, other.ReconcileOutbox(ctx))
			require.Equal(t, 0, countDocs(t, other, "root", "delete"), "the reconciler finished the deletion")
			providertest.CreateInstance(ctx, t, other, "root::child")
		})
	})
	_, err := paused.DeleteInstance(ctx, "root", true)
	require.NoError(t, err, "the deletion the caller asked for is done")

	st, err := other.ReadOrchestrationStatus(ctx, "root::child")
	require.NoError(t, err)
	assert.True(t, st.Found, "the next life is not read as deleted")
	assert.False(t, instanceMarked(t, other, "root::child"), "and carries no deletion mark")
	history, err := other.Read(ctx, "root::child")
	require.NoError(t, err)
	assert.Len(t, history, 1, "and keeps its history")
	require.NoError(t, other.EnqueueForOrchestrator(ctx, pokeItem("root::child"), 0))
	item, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the next life can be locked")
	assert.Equal(t, "root::child", item.Instance)
}

// A deletion whose process is slow but alive keeps renewing its beat: a
// reconciler leaves it alone however old the deletion is, and takes it
// over only once the beat is older than AbandonedDeletionAge.
func TestADeletionWhoseOwnerBeatsIsNotTakenOver(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute, OutboxMinAge: time.Second, Now: clock.Now}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "root")
	startChild(ctx, t, other, "root::a", "root")
	startChild(ctx, t, other, "root::b", "root")

	var mu sync.Mutex
	seen := map[string]bool{}
	slow := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		for _, child := range []string{"root::a", "root::b"} {
			if !isMarkOf(t, r, child) {
				continue
			}
			mu.Lock()
			first, n := !seen[child], len(seen)
			seen[child] = true
			mu.Unlock()
			if !first {
				return
			}
			// Each step of the deletion takes 40 s: by the second, the
			// deletion is older than AbandonedDeletionAge, its beat is not.
			clock.Advance(40 * time.Second)
			if n == 1 {
				require.NoError(t, other.ReconcileOutbox(ctx))
				assert.Equal(t, 2, countDocs(t, other, "root::a", "inst")+countDocs(t, other, "root::b", "inst"),
					"the reconciler leaves a deletion with a live owner alone")
				assert.Equal(t, 1, countDocs(t, other, "root", "delete"))
			}
		}
	})
	res, err := slow.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	assert.EqualValues(t, 3, res.InstancesDeleted, "the owner deleted the whole tree itself")
	for _, id := range []string{"root", "root::a", "root::b"} {
		assert.Zero(t, countAllDocs(t, other, id), "%s's partition is empty", id)
	}
}

// instanceMarked says id's instance document carries a deletion mark.
func instanceMarked(t *testing.T, p *cdb.CosmosProvider, id string) bool {
	t.Helper()
	resp, err := p.Container().ReadItem(context.Background(), cdb.NewPartitionKeyString(id), "inst", nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	_, marked := doc["deleting"]
	return marked
}

// A deletion's sweep round that listed a start written into the marked
// partition, and was overtaken by the end of the sweep (another process
// deleted the marked instance document last, its listing having missed the
// start, and the start settled beside the new life's instance document),
// deletes nothing: the start its writer was told stands outlives it.
func TestAStaleSweepRoundSparesAStartThatOutlivedTheDeletion(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, AbandonedDeletionAge: time.Minute, Now: clock.Now}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "phoenix")
	resume := stallChildSweep(acct, "phoenix")
	_, err := other.DeleteInstance(ctx, "phoenix", true)
	require.True(t, cdb.HasStatus(err, http.StatusForbidden), "the deletion marks the instance and stops: the injected stall: %v", err)
	resume()
	clock.Advance(2 * time.Minute)

	// The start writes its message beside the marked instance document,
	// then waits before reading back.
	var mu sync.Mutex
	written, paused := false, false
	readBack, started := make(chan struct{}), make(chan error, 1)
	starter := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		mu.Lock()
		if r.Header.Get("x-ms-documentdb-partitionkey") != `["phoenix"]` || paused {
			mu.Unlock()
			return
		}
		if !written {
			written = isItemCreate(r, `["phoenix"]`)
			mu.Unlock()
			return
		}
		paused = true
		mu.Unlock()
		<-readBack
	})
	go func() { started <- starter.EnqueueForOrchestrator(ctx, providertest.StartItem("phoenix"), 0) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return paused }, 10*time.Second, time.Millisecond)

	var once sync.Once
	stale := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != `["phoenix"]` ||
			!bodyContains(t, r, `"operationType":"Delete"`) {
			return
		}
		once.Do(func() {
			// This round listed the start. Another process, whose listing
			// came before the start, ends the sweep: the old life's
			// documents, the marked instance document last.
			pk := cdb.NewPartitionKeyString("phoenix")
			res, err := other.Container().QueryItems(ctx, "SELECT c.id, c.type FROM c WHERE c.pk = 'phoenix'", nil, &cdb.QueryOptions{PartitionKey: &pk})
			require.NoError(t, err)
			for _, raw := range res.Items {
				var doc struct{ ID, Type string }
				require.NoError(t, json.Unmarshal(raw, &doc))
				if doc.Type != "delete" && doc.Type != "msg" && doc.ID != "inst" {
					_, err := other.Container().DeleteItem(ctx, pk, doc.ID, nil)
					require.NoError(t, err)
				}
			}
			_, err = other.Container().DeleteItem(ctx, pk, "inst", nil)
			require.NoError(t, err)
			close(readBack)
			require.NoError(t, <-started, "the start settles beside the new life's instance document")
		})
	})
	require.NoError(t, stale.ReconcileOutbox(ctx), "the stale round goes on")

	requireStartFetched(ctx, t, other, "phoenix", "the accepted start outlives the deletion")
}

// A deletion decided on one life of an id (its checks read that life) and
// paused before its first write, while another deletion removed that life
// and the id started again, leaves the next life alone: it neither marks
// nor sweeps it.
func TestADeletionDecidedOnAnEarlierLifeLeavesTheNextOneAlone(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "reborn")

	var once sync.Once
	fired := false
	paused := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != `["reborn"]` ||
			!bodyContains(t, r, `"type":"delete"`) {
			return
		}
		once.Do(func() { // between the checks and the intent's batch
			fired = true
			_, err := other.DeleteInstance(ctx, "reborn", true)
			require.NoError(t, err)
			providertest.CreateInstance(ctx, t, other, "reborn")
		})
	})
	res, err := paused.DeleteInstance(ctx, "reborn", true)
	require.True(t, fired, "the pause came between the checks and the intent's batch")
	require.NoError(t, err, "the life it was asked to delete is gone")
	assert.Zero(t, res.InstancesDeleted, "it deleted nothing itself")

	st, err := other.ReadOrchestrationStatus(ctx, "reborn")
	require.NoError(t, err)
	assert.True(t, st.Found, "the next life is not read as deleted")
	assert.False(t, instanceMarked(t, other, "reborn"), "and carries no deletion mark")
	history, err := other.Read(ctx, "reborn")
	require.NoError(t, err)
	assert.Len(t, history, 1, "and keeps its history")
	assert.Equal(t, 0, countDocs(t, other, "reborn", "delete"), "no intent is left")
}

// requireStartFetched fetches from p and wants a batch of instance's start
// alone.
func requireStartFetched(ctx context.Context, t *testing.T, p cdb.Provider, instance, why string) {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, why)
	assert.Equal(t, instance, item.Instance)
	assert.Equal(t, []string{"StartOrchestration"}, messageKinds(item))
}

// A deletion that swept every instance has deleted them, whether or not
// its intent document could be removed after (the reconciler removes a
// leftover intent): it reports success. Before, it reported the intent's
// failed removal, and a caller that tried again deleted whatever was there
// by then, the next life of an id started as soon as the first read as
// deleted (the simulation's start-kept, on a DeleteReuse restart).
func TestADeletionThatSweptEverythingSucceedsThoughItsIntentStays(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := singleAttemptProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	token := lockedStart(ctx, t, p, "swept-once")
	require.NoError(t, ackScheduling(ctx, t, p, token, "swept-once"))
	failed := failOnce(acct, func(r cdb.FakeRequest) bool {
		return r.Operation == "DeleteItem" && strings.HasPrefix(r.ItemID, "d|")
	})

	_, err := p.DeleteInstance(ctx, "swept-once", true)
	require.Equal(t, int64(1), failed.Load(), "the intent's removal failed")
	require.NoError(t, err, "every instance is gone: the deletion succeeded")
	_, err = p.GetParentID(ctx, "swept-once")
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
}
