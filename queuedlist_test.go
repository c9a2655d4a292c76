package cdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The listings tell a queued start (a start no process has run yet) as
// the other reads do: Queued, with the orchestration its start names.

// enqueue queues a start of instance id of orchestration name, now on the
// fixture's clock, that no turn runs.
func (f listingFixture) enqueue(ctx context.Context, t *testing.T, id, name string) {
	t.Helper()
	version := "1.0.0"
	require.NoError(t, f.p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: id, Orchestration: name, Input: "{}",
		Version: &version, ExecutionID: cdb.InitialExecutionID}, 0))
}

// runOne takes the next orchestration item and completes its instance in
// one turn.
func (f listingFixture) runOne(ctx context.Context, t *testing.T) string {
	t.Helper()
	item, token, _, err := f.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	name, version, status := item.OrchestrationName, "1.0.0", cdb.StatusCompleted
	started := cdb.Event{EventID: cdb.InitialEventID, InstanceID: item.Instance, ExecutionID: cdb.InitialExecutionID, DuroxideVersion: "0.1.30",
		Kind: cdb.OrchestrationStarted{Name: name, Version: version, Input: "{}"}}
	require.NoError(t, f.p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{started}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version, Status: &status}, nil))
	return item.Instance
}

func statusesOf(page cdb.InstancePage) map[string]cdb.InstanceStatus {
	out := map[string]cdb.InstanceStatus{}
	for _, i := range page.Instances {
		out[i.InstanceID] = i.Status
	}
	return out
}

func TestQueryInstancesListsQueuedStartsAsQueued(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.start(ctx, t, "running", "Work", cdb.StatusRunning)
	f.clock.Advance(time.Millisecond)
	f.enqueue(ctx, t, "queued-a", "Work")
	f.clock.Advance(time.Millisecond)
	f.enqueue(ctx, t, "queued-b", "Other")

	page := queryPage(t, f.p, cdb.InstanceQuery{})
	assert.Equal(t, []string{"queued-b", "queued-a", "running"}, ids(page))
	assert.Equal(t, map[string]cdb.InstanceStatus{"queued-a": cdb.StatusQueued, "queued-b": cdb.StatusQueued, "running": cdb.StatusRunning}, statusesOf(page))
	queued := page.Instances[0]
	assert.Equal(t, "Other", queued.OrchestrationName)
	assert.Equal(t, "1.0.0", queued.OrchestrationVersion)
	assert.Equal(t, cdb.InitialExecutionID, queued.CurrentExecutionID)
	assert.Equal(t, uint64(f.clock.Now().UnixMilli()), queued.CreatedAt)

	assert.Equal(t, []string{"queued-b", "queued-a"}, ids(queryPage(t, f.p, cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusQueued}})))
	assert.Equal(t, []string{"running"}, ids(queryPage(t, f.p, cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning}})))
	assert.Equal(t, []string{"queued-b"},
		ids(queryPage(t, f.p, cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning, cdb.StatusQueued}, Name: "Ot*"})), "Other's queued start, and not Work's")
	assert.Equal(t, []string{"queued-a", "running"}, ids(queryPage(t, f.p, cdb.InstanceQuery{Name: "Work"})))
	assert.Empty(t, ids(queryPage(t, f.p, cdb.InstanceQuery{Parked: true})))
}

// Once a turn runs them, the queued starts list as what the turn left,
// each once.
func TestQueryInstancesListsAQueuedStartOnceItRanAsItsStatusOnce(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.enqueue(ctx, t, "first", "Work")
	f.clock.Advance(time.Millisecond)
	f.enqueue(ctx, t, "second", "Work")
	f.runOne(ctx, t)
	f.runOne(ctx, t)

	page := queryPage(t, f.p, cdb.InstanceQuery{})
	assert.Equal(t, []string{"second", "first"}, ids(page))
	assert.Equal(t, map[string]cdb.InstanceStatus{"first": cdb.StatusCompleted, "second": cdb.StatusCompleted}, statusesOf(page))
	assert.Empty(t, ids(queryPage(t, f.p, cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusQueued}})))
}

// Queued and running instances, some created in one millisecond, over
// pages smaller than the listing: each once, newest first.
func TestQueryInstancesPagesThroughQueuedAndRunningInstancesOnce(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	var want []string
	for i := range 4 {
		id := fmt.Sprintf("running-%d", i)
		f.start(ctx, t, id, "Work", cdb.StatusRunning)
		want = append(want, id)
		if i%2 == 1 {
			f.clock.Advance(time.Millisecond)
		}
	}
	for i := range 4 {
		id := fmt.Sprintf("queued-%d", i)
		f.enqueue(ctx, t, id, "Work")
		want = append(want, id)
		if i%2 == 1 {
			f.clock.Advance(time.Millisecond)
		}
	}
	listed, pages := everyPage(t, f.p, cdb.InstanceQuery{PageSize: 5}, nil)
	assertNewestFirstOnce(t, listed, want)
	assert.GreaterOrEqual(t, pages, 2)
	for _, info := range listed[:4] {
		assert.Equal(t, cdb.StatusQueued, info.Status, info.InstanceID)
	}
	for _, info := range listed[4:] {
		assert.Equal(t, cdb.StatusRunning, info.Status, info.InstanceID)
	}
}

func TestQueryInstancesRefusesAStatusNeverReported(t *testing.T) {
	_, err := newListingFixture(t, 1).p.QueryInstances(rulesContext(t), cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusUnknown}})
	assert.EqualError(t, err, `QueryInstances: status "Unknown": want one of Running, Completed, Failed, ContinuedAsNew, Queued: invalid input`)
}

func TestListInstancesListsQueuedStarts(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.start(ctx, t, "running", "Work", cdb.StatusRunning)
	f.clock.Advance(time.Millisecond)
	f.enqueue(ctx, t, "queued-a", "Work")
	f.clock.Advance(time.Millisecond)
	f.enqueue(ctx, t, "queued-b", "Work")

	all, err := f.p.ListInstances(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"queued-b", "queued-a", "running"}, all)
	queued, err := f.p.ListInstancesByStatus(ctx, cdb.StatusQueued)
	require.NoError(t, err)
	assert.Equal(t, []string{"queued-b", "queued-a"}, queued)
	running, err := f.p.ListInstancesByStatus(ctx, cdb.StatusRunning)
	require.NoError(t, err)
	assert.Equal(t, []string{"running"}, running)

	f.runOne(ctx, t)
	f.runOne(ctx, t)
	all, err = f.p.ListInstances(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"queued-b", "queued-a", "running"}, all, "once each")
	queued, err = f.p.ListInstancesByStatus(ctx, cdb.StatusQueued)
	require.NoError(t, err)
	assert.Empty(t, queued)
}
