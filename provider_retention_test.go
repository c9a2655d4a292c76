package cdb_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Retention (retention.go): a finished instance leaves by itself once
// Config.Retention has passed since the turn that finished it.

// retentionAccount is an in-memory account and a provider on it with a
// retention of an hour, both on a clock the test moves.
func retentionAccount(t *testing.T, cfg cdb.Config) (*cdb.FakeAccount, *cdb.CosmosProvider, *testClock) {
	t.Helper()
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	cfg.Now = clock.Now
	if cfg.Retention == 0 {
		cfg.Retention = time.Hour
	}
	cfg.ShortPolling = true
	return acct, newRulesProvider(t, acct, cfg), clock
}

// finishWithKV runs instance's first turn, which sets a KV key, and a
// second that ends it with status.
func finishWithKV(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string, status cdb.InstanceStatus) {
	t.Helper()
	providertest.CreateInstance(ctx, t, p, instance)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	events := []cdb.Event{
		{EventID: 2, InstanceID: instance, ExecutionID: 1, Kind: cdb.KeyValueSet{Key: "k", Value: "v", LastUpdatedAtMs: 1}},
		{EventID: 3, InstanceID: instance, ExecutionID: 1, Kind: cdb.OrchestrationCompleted{Output: "done"}},
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, cdb.ExecutionMetadata{Status: &status, Output: ptrTo("done")}, nil))
}

// partitionTTLs maps each document of instance's partition to its ttl (0:
// none).
func partitionTTLs(t *testing.T, p *cdb.CosmosProvider, instance string) map[string]int {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT c.id, c.ttl FROM c WHERE c.pk = @pk",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	out := map[string]int{}
	for _, raw := range res.Items {
		var row struct {
			ID  string `json:"id"`
			TTL int    `json:"ttl"`
		}
		require.NoError(t, json.Unmarshal(raw, &row))
		out[row.ID] = row.TTL
	}
	return out
}

// allHaveTTL says every document of the partition has a ttl.
func allHaveTTL(ttls map[string]int) bool {
	for _, ttl := range ttls {
		if ttl <= 0 {
			return false
		}
	}
	return len(ttls) > 0
}

func TestAFinishedInstanceLeavesWhenItsRetentionEnds(t *testing.T) {
	ctx := rulesContext(t)
	_, p, clock := retentionAccount(t, cdb.Config{})
	finishWithKV(ctx, t, p, "r", cdb.StatusCompleted)

	require.Eventually(t, func() bool { return allHaveTTL(partitionTTLs(t, p, "r")) }, 10*time.Second, 10*time.Millisecond,
		"the retainer gives every document of the partition a time to live")
	ttls := partitionTTLs(t, p, "r")
	for id, ttl := range ttls {
		assert.LessOrEqual(t, ttl, 3601, "%s ends with the retention, or before it by a TTL of its own", id)
	}
	assert.InDelta(t, 3600, ttls["inst"], 1, "the instance document ends with the retention")
	assert.InDelta(t, 3600, ttls["seq"], 1, "a TTL of a day is cut to the retention's")
	st, err := p.ReadOrchestrationStatus(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, cdb.StatusCompleted, st.Status, "kept until its retention ends")
	kv, err := p.GetKVAllValues(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"k": "v"}, kv)

	clock.Advance(time.Hour + 2*time.Second)
	st, err = p.ReadOrchestrationStatus(ctx, "r")
	require.NoError(t, err)
	assert.False(t, st.Found, "gone once its retention ended")
	history, err := p.Read(ctx, "r")
	require.NoError(t, err)
	assert.Empty(t, history)
	assert.Empty(t, partitionTTLs(t, p, "r"), "Cosmos DB removed every document by its time to live")
	page, err := p.QueryInstances(ctx, cdb.InstanceQuery{})
	require.NoError(t, err)
	assert.Empty(t, page.Instances)
}

// Reads decide on the recorded retention, not on the purge: an instance
// whose documents never got their TTLs (the follow-up failed) reads as gone
// all the same once its retention ended, and a start of its id clears what
// is left and begins a new life.
func TestAnInstanceWhoseRetentionEndedReadsAsGoneAndItsIDStartsAgain(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, clock := retentionAccount(t, cdb.Config{ReconcileInterval: time.Hour})
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusServiceUnavailable, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Query" && strings.Contains(string(r.Body), "c.retained FROM c")
	}})
	finishWithKV(ctx, t, p, "r", cdb.StatusFailed)
	require.Never(t, func() bool { return allHaveTTL(partitionTTLs(t, p, "r")) }, 200*time.Millisecond, 20*time.Millisecond)

	clock.Advance(time.Hour)
	st, err := p.ReadOrchestrationStatus(ctx, "r")
	require.NoError(t, err)
	assert.False(t, st.Found, "gone at its retention's end, documents or not")
	history, err := p.Read(ctx, "r")
	require.NoError(t, err)
	assert.Empty(t, history, "its history too")
	kv, err := p.GetKVAllValues(ctx, "r")
	require.NoError(t, err)
	assert.Empty(t, kv, "and its KV")
	_, err = p.GetInstanceInfo(ctx, "r")
	require.ErrorIs(t, err, cdb.ErrInstanceNotFound)
	metrics, err := p.GetSystemMetrics(ctx)
	require.NoError(t, err)
	assert.Zero(t, metrics.TotalInstances)
	assert.Zero(t, metrics.FailedInstances)
	infos, err := p.ListInstances(ctx)
	require.NoError(t, err)
	assert.NotContains(t, infos, "r")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("r"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start of a new life is taken")
	assert.Empty(t, item.History, "the new life starts with no history")
	assert.Empty(t, item.KVSnapshot, "and none of the old life's KV")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("r", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	st, err = p.ReadOrchestrationStatus(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, cdb.StatusRunning, st.Status)
	assert.Zero(t, instanceDocOf(t, p, "r")["retainUntil"], "a new life keeps nothing of the old one's retention")
}

// A process that finished an instance and died before giving its documents
// their TTLs leaves them to the reconciler, which gives them once a minute
// has passed since the commit.
func TestTheReconcilerGivesTheTTLsAFinishingProcessDidNot(t *testing.T) {
	ctx := rulesContext(t)
	acct, p, clock := retentionAccount(t, cdb.Config{ReconcileInterval: time.Hour})
	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusServiceUnavailable, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Query" && strings.Contains(string(r.Body), "c.retained FROM c")
	}})
	finishWithKV(ctx, t, p, "r", cdb.StatusCompleted)
	require.NoError(t, p.Close()) // the finishing process is gone
	remove()

	other := newRulesProvider(t, acct, cdb.Config{Retention: time.Hour, Now: clock.Now, ShortPolling: true, ReconcileInterval: 20 * time.Millisecond})
	require.Never(t, func() bool { return allHaveTTL(partitionTTLs(t, other, "r")) }, 200*time.Millisecond, 20*time.Millisecond,
		"left to its committer within the grace")
	clock.Advance(2 * time.Minute)
	require.Eventually(t, func() bool { return allHaveTTL(partitionTTLs(t, other, "r")) }, 10*time.Second, 10*time.Millisecond)
	ttls := partitionTTLs(t, other, "r")
	for id, ttl := range ttls {
		assert.LessOrEqual(t, ttl, 3600-120+1, "%s ends when the retention does, or before", id)
	}
	assert.InDelta(t, 3600-120, ttls["inst"], 1)
}

// Only a finished instance is retained: one that continues as new goes on.
func TestAContinuedAsNewInstanceIsNotRetained(t *testing.T) {
	ctx := rulesContext(t)
	_, p, _ := retentionAccount(t, cdb.Config{})
	providertest.CreateInstance(ctx, t, p, "can")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("can"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	can := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: "can", ExecutionID: 1, Kind: cdb.OrchestrationContinuedAsNew{Input: "next"}}},
		nil, nil, cdb.ExecutionMetadata{Status: &can}, nil))
	doc := instanceDocOf(t, p, "can")
	assert.Nil(t, doc["retainUntil"])
	assert.Nil(t, doc["ttl"])
}

func TestRetentionOutsideWhatCosmosDBCanExpressIsRefused(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	for _, d := range []time.Duration{-time.Second, 500 * time.Millisecond, 100 * 365 * 24 * time.Hour} {
		_, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), Retention: d})
		require.ErrorIs(t, err, cdb.ErrInvalidInput, "retention %s", d)
		assert.Contains(t, err.Error(), "retention")
	}
}

// What an instance's commits sent elsewhere is delivered however long it
// takes: its outboxes get no TTL from the retention (the relay deletes
// them once delivered), everything else does.
func TestRetentionLeavesAnUndeliveredOutboxToItsRelay(t *testing.T) {
	ctx := rulesContext(t)
	_, p, _ := retentionAccount(t, cdb.Config{ReconcileInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "r")
	_, err := p.Container().CreateItem(ctx, cdb.NewPartitionKeyString("r"), []byte(`{"id":"o|parked","pk":"r","type":"outbox","rev":1,"entries":[]}`), nil)
	require.NoError(t, err)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("r"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	completed := cdb.StatusCompleted
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 2, InstanceID: "r", ExecutionID: 1, Kind: cdb.OrchestrationCompleted{Output: "done"}}},
		nil, nil, cdb.ExecutionMetadata{Status: &completed, Output: ptrTo("done")}, nil))

	require.Eventually(t, func() bool { return partitionTTLs(t, p, "r")["inst"] > 0 }, 10*time.Second, 10*time.Millisecond)
	for id, ttl := range partitionTTLs(t, p, "r") {
		if id == "o|parked" {
			assert.Zero(t, ttl, "the outbox waits for its relay")
		} else {
			assert.Positive(t, ttl, "%s has its TTL", id)
		}
	}
}

// An exclusive start (what durable.Client.StartOrchestration and `cdb
// start` send) refuses the id of a finished instance while it is retained,
// and once its retention ended clears the old life and starts a new one.
func TestAnExclusiveStartTakesTheIDOfAnInstanceWhoseRetentionEnded(t *testing.T) {
	ctx := rulesContext(t)
	_, p, clock := retentionAccount(t, cdb.Config{ReconcileInterval: time.Hour})
	finishWithKV(ctx, t, p, "r", cdb.StatusCompleted)
	start := providertest.StartItem("r").(cdb.StartOrchestrationMessage)
	require.ErrorIs(t, p.EnqueueStartIfAbsent(ctx, start), cdb.ErrInstanceExists, "retained: the id is taken")

	clock.Advance(time.Hour + time.Second)
	require.NoError(t, p.EnqueueStartIfAbsent(ctx, start), "its retention ended: the id is free")
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Empty(t, item.History, "a new life")
	assert.Empty(t, item.KVSnapshot)
	assert.Equal(t, []string{"StartOrchestration"}, messageKinds(item))
}
