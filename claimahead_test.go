package cdb_test

import (
	"bytes"
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
)

// Claims ahead (claimahead.go): a worker look that claims an item claims,
// in the same batch, the next items of its partition for this process's
// fetches that follow, which take them without a request.

func TestAWorkerLookClaimsThePartitionsNextItemsAheadForTheFetchesThatFollow(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
	token := lockedStart(ctx, t, p, "ahead")
	require.NoError(t, ackScheduling(ctx, t, p, token, "ahead", activities("ahead", 3)...))

	acct.ResetCounts()
	first := eventuallyWork(ctx, t, p, "the first item")
	assert.Equal(t, map[string]int64{"Query": 1, "Batch": 1}, acct.Counts().ByOperation, "a query, and one batch claiming the item and the next ones ahead")
	locked := 0
	for _, d := range workDocs(t, p, "ahead") {
		if token, _ := d["lockToken"].(string); strings.HasPrefix(token, "work_") {
			locked++
		}
	}
	assert.GreaterOrEqual(t, locked, 2, "the fetch's item and at least one ahead")

	acct.ResetCounts()
	second := eventuallyWork(ctx, t, p, "an item claimed ahead")
	assert.Empty(t, acct.Counts().ByOperation, "taken from the ready list, without a request")
	assert.NotEqual(t, first.item.(cdb.ActivityExecuteMessage).ID, second.item.(cdb.ActivityExecuteMessage).ID)
	assert.Equal(t, "{}", second.item.(cdb.ActivityExecuteMessage).Input, "the claim's answer carried the item")
	ackActivity(ctx, t, p, first)
	ackActivity(ctx, t, p, second)
}

// durable's worker dispatchers fetch with a session config (each its own
// owner) whenever sessions are allowed; their looks claim sessionless items
// ahead as a fetch without one does. Before, a session config turned claims
// ahead off, so under the runtime every queued activity cost its fetch a
// query and a claim.
func TestAWorkerLookWithASessionConfigClaimsSessionlessItemsAhead(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
	token := lockedStart(ctx, t, p, "ahead-session")
	require.NoError(t, ackScheduling(ctx, t, p, token, "ahead-session", activities("ahead-session", 3)...))
	fetch := func(owner string) fetchedWork {
		var got fetchedWork
		session := &cdb.SessionFetchConfig{OwnerID: owner, LockTimeout: time.Minute}
		require.Eventually(t, func() bool {
			got.item, got.token, got.attempts, got.err = p.FetchWorkItem(ctx, time.Minute, 0, session, cdb.DefaultOnlyFilter())
			return got.err != nil || got.item != nil
		}, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, got.err)
		return got
	}

	acct.ResetCounts()
	first := fetch("worker-1")
	assert.Equal(t, map[string]int64{"Query": 1, "Batch": 1}, acct.Counts().ByOperation, "a query, and one batch claiming the item and the next ones ahead")

	acct.ResetCounts()
	second := fetch("worker-2")
	assert.Empty(t, acct.Counts().ByOperation, "taken from the ready list, without a request")
	assert.NotEqual(t, first.item.(cdb.ActivityExecuteMessage).ID, second.item.(cdb.ActivityExecuteMessage).ID)
	ackActivity(ctx, t, p, first)
	ackActivity(ctx, t, p, second)
}

// A claim batch whose item ahead another process took since the query
// fails whole: the look claims its own item alone, and nothing is left
// claimed for nobody.
func TestAClaimAheadThatMeetsAnItemTakenMeanwhileClaimsTheFetchsItemAlone(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	// Short poll intervals: another process leaves a writer's fresh items
	// to it for one (ownwrites.go). The other claims one item, none ahead.
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour, DisableEagerDispatch: true})
	var taken fetchedWork
	gate := &claimGate{next: acct.Transport(), before: func() {
		taken = eventuallyWork(ctx, t, other, "the other process's claim, between the look's query and its claim batch")
	}}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: gate})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{PollInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour, Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	token := lockedStart(ctx, t, p, "raced")
	require.NoError(t, ackScheduling(ctx, t, p, token, "raced", activities("raced", 2)...))

	got := eventuallyWork(ctx, t, p, "the look's own item")
	require.NotNil(t, taken.item, "the gate ran")
	assert.NotEqual(t, taken.item.(cdb.ActivityExecuteMessage).ID, got.item.(cdb.ActivityExecuteMessage).ID)
	for _, d := range workDocs(t, p, "raced") {
		owner, _ := d["lockToken"].(string)
		assert.Contains(t, []string{taken.token, got.token}, owner, "each item claimed once, by the fetch that has it")
	}
	ackActivity(ctx, t, p, got)
	ackActivity(ctx, t, other, taken)
}

// claimGate runs before once, ahead of the first batch that claims more
// than one worker item.
type claimGate struct {
	next   http.RoundTripper
	once   sync.Once
	before func()
}

func (g *claimGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("x-ms-cosmos-is-batch-request") != "" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Count(body, []byte(`"value":"work_`)) > 1 {
			g.once.Do(g.before)
		}
	}
	return g.next.RoundTrip(r)
}

// A claim batch whose answer was lost is read back: the fetch goes on with
// its item, and the items ahead it claimed are handed to the fetches that
// follow, not left locked for nobody.
func TestAClaimAheadWhoseAnswerWasLostGoesOnWithWhatItClaimed(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
	token := lockedStart(ctx, t, p, "lost")
	require.NoError(t, ackScheduling(ctx, t, p, token, "lost", activities("lost", 2)...))
	var lost atomic.Int32
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		claims := r.Operation == "Batch" && bytes.Count(r.Body, []byte(`"value":"work_`)) > 1
		if claims {
			lost.Add(1)
		}
		return claims
	}})

	first := eventuallyWork(ctx, t, p, "the look's own item, its claim read back")
	require.Equal(t, int32(1), lost.Load(), "the claim batch's answer was lost")
	acct.ResetCounts()
	second := eventuallyWork(ctx, t, p, "the item claimed ahead")
	assert.Empty(t, acct.Counts().ByOperation, "taken from the ready list: the read back told it was claimed")
	assert.NotEqual(t, first.item.(cdb.ActivityExecuteMessage).ID, second.item.(cdb.ActivityExecuteMessage).ID)
	ackActivity(ctx, t, p, first)
	ackActivity(ctx, t, p, second)
	assert.Empty(t, workDocs(t, p, "lost"), "both ran once")
}
