package cdb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// A look at the queues counts what is ready and what is locked, and finds
// the earliest item not due yet, locked or not: an empty container is
// idle with nothing due; an immediate message is ready; a fetched turn and
// a fetched activity are locked, not ready; an abandoned activity's delay
// and a delayed message are due later, the earliest first; and once the
// clock reaches the earliest it is ready, the next one due after it.
func TestQueueWaitsCountsReadyAndLockedWorkAndFindsTheNextDueItem(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now, ReconcileInterval: time.Hour})
	look := func() cdb.QueueWaits {
		t.Helper()
		w, err := p.QueueWaits(ctx)
		require.NoError(t, err)
		return w
	}

	w := look()
	assert.True(t, w.Idle(), "an empty container is idle: %+v", w)
	assert.Nil(t, w.NextDue, "nothing is due in an empty container")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("soon"), 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("later"), 2*time.Hour))
	w = look()
	assert.EqualValues(t, 1, w.Ready, "the start is ready, the delayed event is not")
	require.NotNil(t, w.NextDue)
	assert.Equal(t, w.Now.Add(2*time.Hour).UnixMilli(), w.NextDue.UnixMilli(), "the delayed event is due in two hours")

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	w = look()
	assert.Zero(t, w.Ready, "the fetched start is no longer ready")
	assert.NotZero(t, w.Locked, "the fetched turn holds its lock")
	assert.False(t, w.Idle())
	md := providertest.TestOrchMetadata()
	running := cdb.StatusRunning
	md.Status = &running
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{providertest.StartedEvent("soon", cdb.InitialExecutionID)}, nil, nil, md, nil))

	require.NoError(t, p.EnqueueForWorker(ctx, activity("soon", 2, "")))
	assert.EqualValues(t, 1, look().Ready, "the activity is ready")
	_, workToken, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.TagFilter{})
	require.NoError(t, err)
	require.NotEmpty(t, workToken)
	w = look()
	assert.EqualValues(t, 0, w.Ready)
	assert.EqualValues(t, 1, w.Locked, "the running activity holds its item")
	require.NoError(t, p.AbandonWorkItem(ctx, workToken, time.Hour, false))

	w = look()
	assert.True(t, w.Idle(), "nothing is ready, locked or undelivered: %+v", w)
	require.NotNil(t, w.NextDue)
	assert.Equal(t, w.Now.Add(time.Hour).UnixMilli(), w.NextDue.UnixMilli(), "the abandoned activity, due in an hour, comes first")

	clock.Advance(time.Hour)
	w = look()
	assert.EqualValues(t, 1, w.Ready, "the activity is due now")
	require.NotNil(t, w.NextDue)
	assert.Equal(t, w.Now.Add(time.Hour).UnixMilli(), w.NextDue.UnixMilli(), "the delayed event is due an hour later")
}
