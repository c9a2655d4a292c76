package cdb_test

import (
	"fmt"
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

// ReadOrchestrationStatuses says of each instance what
// ReadOrchestrationStatus says: unknown, running with a custom status,
// completed with an output inline or stored apart, continued as new, and
// an id asked for twice; one query answers them all.
func TestReadOrchestrationStatusesSaysWhatEachReadSays(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "running")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("running"), 0))
	_, token := fetchFor(ctx, t, p, "running")
	status := "halfway"
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: "running", ExecutionID: 1, Kind: cdb.CustomStatusUpdated{Status: &status}}},
		nil, nil, providertest.TestOrchMetadata(), nil))
	providertest.CreateInstance(ctx, t, p, "done")
	ackTerminal(ctx, t, acct, p, "done", 1, 2, cdb.StatusCompleted, "small", nil)
	providertest.CreateInstance(ctx, t, p, "large")
	ackTerminal(ctx, t, acct, p, "large", 1, 2, cdb.StatusCompleted, strings.Repeat("o", 300*1024), nil)
	providertest.CreateInstance(ctx, t, p, "again")
	ackTerminal(ctx, t, acct, p, "again", 1, 2, cdb.StatusContinuedAsNew, "next", nil)

	ids := []string{"running", "done", "large", "again", "unknown", "done"}
	log := logRequests(acct)
	got, err := p.ReadOrchestrationStatuses(ctx, ids)
	require.NoError(t, err)
	assert.Equal(t, []string{"Query", "ReadItem"}, log.ops(), "one query, and a read of the output stored apart")
	require.Len(t, got, 5, "each id once")
	for _, id := range ids {
		one, err := p.ReadOrchestrationStatus(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, one, got[id], id)
	}
	assert.Equal(t, "halfway", *got["running"].CustomStatus)
	assert.False(t, got["unknown"].Found)
}

// A look at a few instances on a container of many partition key ranges
// goes to the ranges that hold them, not to every range; one instance's is
// a point read.
func TestReadOrchestrationStatusesQueriesOnlyTheRangesThatHoldThem(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 8})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		providertest.CreateInstance(ctx, t, p, id)
	}
	log := logRequests(acct)
	before := acct.Counts()
	got, err := p.ReadOrchestrationStatuses(ctx, ids)
	require.NoError(t, err)
	for _, id := range ids {
		assert.True(t, got[id].Found, id)
	}
	ops := log.ops()
	assert.NotEmpty(t, ops)
	assert.LessOrEqual(t, len(ops), len(ids), "a query to each range holding one of them, at most 3 of 8: %v", ops)
	for _, op := range ops {
		assert.Equal(t, "Query", op)
	}
	assert.Equal(t, before.CrossPartitionQueries, acct.Counts().CrossPartitionQueries, "no query to every range")

	_, err = p.ReadOrchestrationStatuses(ctx, []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, []string{"ReadItem"}, log.ops())
}

// More instances than one query names go in several queries.
func TestReadOrchestrationStatusesOfManyInstancesTakesAQueryPerHundred(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "i-7")
	ids := make([]string, 150)
	for i := range ids {
		ids[i] = fmt.Sprint("i-", i)
	}
	log := logRequests(acct)
	got, err := p.ReadOrchestrationStatuses(ctx, ids)
	require.NoError(t, err)
	assert.Equal(t, []string{"Query", "Query"}, log.ops())
	require.Len(t, got, 150)
	assert.True(t, got["i-7"].Found)
	assert.False(t, got["i-8"].Found)
}

// A bad id is refused before anything is sent, saying which.
func TestReadOrchestrationStatusesRefusesABadIDBeforeSending(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	log := logRequests(acct)
	_, err := p.ReadOrchestrationStatuses(ctx, []string{"fine", ""})
	require.ErrorIs(t, err, cdb.ErrInvalidInput)
	assert.Contains(t, err.Error(), "instances[1]: ")
	assert.Contains(t, err.Error(), "instance id must not be empty")
	assert.Empty(t, log.ops())
}

// An instance whose parent a deletion marked reads as gone in a batch as in
// a read of its own: the batch reads the ancestors too.
func TestReadOrchestrationStatusesHidesAChildWhoseParentIsBeingDeleted(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour}
	other := newRulesProvider(t, acct, cfg)
	providertest.CreateInstance(ctx, t, other, "root")
	startChild(ctx, t, other, "root::child", "root")
	providertest.CreateInstance(ctx, t, other, "bystander")

	var once sync.Once
	checked := false
	deleter := newHookedProvider(t, acct, cfg, func(r *http.Request) {
		if !isMarkOf(t, r, "root::child") {
			return
		}
		once.Do(func() { // root is marked, the child not yet
			got, err := other.ReadOrchestrationStatuses(ctx, []string{"root", "root::child", "bystander"})
			require.NoError(t, err)
			for _, id := range []string{"root", "root::child", "bystander"} {
				one, err := other.ReadOrchestrationStatus(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, one, got[id], id)
			}
			assert.False(t, got["root::child"].Found, "its parent is being deleted")
			assert.True(t, got["bystander"].Found)
			checked = true
		})
	})
	_, err := deleter.DeleteInstance(ctx, "root", true)
	require.NoError(t, err)
	require.True(t, checked, "the batch was read between the marks")
}
