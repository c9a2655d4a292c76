package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// endInstance starts instance and ends its first turn with status.
func endInstance(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string, status cdb.InstanceStatus) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, instance, item.Instance)
	md := providertest.TestOrchMetadata()
	md.Status = &status
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{providertest.StartedEvent(instance, cdb.InitialExecutionID)}, nil, nil, md, nil))
}

// A sample reports each queue's takeable items and the oldest's age, the
// held messages, and the instances that ended since a time (Completed and
// Failed, not one still running); what it cost is what the account served.
func TestSampleQueuesReportsBacklogsHeldMessagesAndCompletions(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now, ReconcileInterval: time.Hour})

	since := p.ServiceTime()
	endInstance(ctx, t, p, "shipped", cdb.StatusCompleted)
	endInstance(ctx, t, p, "refused", cdb.StatusFailed)
	providertest.CreateInstance(ctx, t, p, "running")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("typo"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the event for an instance that never started is parked")
	for _, instance := range []string{"queued-1", "queued-2"} {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	}
	require.NoError(t, p.EnqueueForWorker(ctx, activity("running", 2, "")))
	clock.Advance(5 * time.Second)

	acct.ResetCounts()
	s, err := p.SampleQueues(ctx, since)
	require.NoError(t, err)
	served := acct.Counts()

	waited5s := func(d time.Duration) bool { return d >= 5*time.Second && d < time.Minute }
	assert.EqualValues(t, 2, s.Orchestrator.Count, "two starts wait")
	assert.True(t, waited5s(s.Orchestrator.OldestAge), "the oldest start has waited 5 s: %v", s.Orchestrator.OldestAge)
	assert.EqualValues(t, 1, s.Worker.Count, "one activity waits")
	assert.True(t, waited5s(s.Worker.OldestAge), "the activity has waited 5 s: %v", s.Worker.OldestAge)
	assert.Equal(t, cdb.Backlog{}, s.Outbox, "every outbox was delivered in its ack")
	assert.EqualValues(t, 1, s.Parked.Count, "the event is parked")
	assert.True(t, waited5s(s.Parked.OldestAge), "since its enqueue: %v", s.Parked.OldestAge)
	assert.Equal(t, cdb.Backlog{}, s.Poison)
	assert.EqualValues(t, 2, s.Completed, "one completed and one failed since; the running one is not counted")
	assert.Equal(t, since, s.Since)
	assert.Equal(t, int(served.ByOperation["Query"]), s.Requests, "its requests are the queries the account served")
	assert.EqualValues(t, served.Requests, s.Requests, "and nothing else")
	assert.InDelta(t, served.RequestCharge, s.RequestCharge, 1e-9, "its charge is theirs")

	later, err := p.SampleQueues(ctx, s.Time)
	require.NoError(t, err)
	assert.Zero(t, later.Completed, "nothing ended since the first sample")
}

// A sample costs five COUNT queries per partition key range, and one more
// per range to count what ended since a time.
func TestSampleQueuesCostsFiveQueriesPerRangeAndOneMoreWithASince(t *testing.T) {
	for _, ranges := range []int{1, 3} {
		ctx := rulesContext(t)
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges})
		p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
		for _, instance := range []string{"a", "b", "c", "d"} {
			require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
		}
		for since, want := range map[time.Time]int{{}: 5 * ranges, time.Now().Add(-time.Minute): 6 * ranges} {
			acct.ResetCounts()
			s, err := p.SampleQueues(ctx, since)
			require.NoError(t, err)
			assert.EqualValues(t, want, acct.Counts().Requests, "%d ranges, since %v: requests served", ranges, since)
			assert.Equal(t, want, s.Requests, "%d ranges, since %v: requests reported", ranges, since)
			assert.EqualValues(t, 4, s.Orchestrator.Count, "%d ranges: the starts are summed over the ranges", ranges)
		}
	}
}
