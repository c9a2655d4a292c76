package cdb_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// The cost of fetching under load (issue 10): what concurrent fetches of
// one process spend on each other.

// A fan-out's activities are spread over the dispatch slots one by one, so
// fetches that query disjoint slots pick them up in parallel rather than
// one lane taking them one after another.
func TestAFanOutsActivitiesLandInDifferentSlots(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "fan")
	for id := uint64(2); id < 10; id++ {
		require.NoError(t, p.EnqueueForWorker(ctx, activity("fan", id, "")))
	}
	res, err := p.Container().QueryItems(ctx,
		"SELECT VALUE c.slot FROM c WHERE c.type = 'work'", nil, &cdb.QueryOptions{PartitionKey: ptrTo(cdb.NewPartitionKeyString("fan"))})
	require.NoError(t, err)
	slots := map[int]bool{}
	for _, raw := range res.Items {
		var s int
		require.NoError(t, json.Unmarshal(raw, &s))
		slots[s] = true
	}
	require.Len(t, res.Items, 8)
	assert.Greater(t, len(slots), 4, "8 activities of one instance should spread over the slots, got %v", slots)
}

// Two fetches of one process that read the same candidates do not both
// claim the same item: the second takes the next candidate instead of
// sending a claim that can only meet a 412.
func TestConcurrentWorkerFetchesOfOneProcessDoNotRaceForAnItem(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var (
		mu      sync.Mutex
		patches int
	)
	firstPatchHeld := make(chan struct{})
	secondPatchSent := make(chan struct{})
	p := newHookedProvider(t, acct, cdb.Config{ShortPolling: true}, func(r *http.Request) {
		if r.Method != http.MethodPatch {
			return
		}
		mu.Lock()
		patches++
		n := patches
		mu.Unlock()
		switch n {
		case 1: // fetch A's claim waits until fetch B has read the same candidates and claimed
			close(firstPatchHeld)
			select {
			case <-secondPatchSent:
			case <-time.After(30 * time.Second):
			}
		case 2:
			close(secondPatchSent)
		}
	})
	providertest.CreateInstance(ctx, t, p, "pair")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("pair", 2, "")))
	require.NoError(t, p.EnqueueForWorker(ctx, activity("pair", 3, "")))
	before := p.Client().Stats().ByOperation["PatchItem"].Errors

	got := make(chan *cdb.ActivityExecute, 2)
	go func() {
		a, _, _ := fetchWork(ctx, t, p, nil)
		got <- a
	}()
	<-firstPatchHeld
	b, _, _ := fetchWork(ctx, t, p, nil)
	a := <-got
	require.NotNil(t, a)
	require.NotNil(t, b)
	assert.NotEqual(t, a.ID, b.ID, "each fetch took its own item")
	assert.Equal(t, before, p.Client().Stats().ByOperation["PatchItem"].Errors, "no claim met a 412")
}
