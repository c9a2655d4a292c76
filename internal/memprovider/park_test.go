package memprovider_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

var _ cdb.ParkRecorder = (*memprovider.Provider)(nil)

// parkedInfo is the park GetInstanceInfo reports for instance.
func parkedInfo(t *testing.T, p *memprovider.Provider, instance string) *cdb.ParkedInfo {
	t.Helper()
	info, err := p.GetInstanceInfo(context.Background(), instance)
	require.NoError(t, err)
	return info.Parked
}

// fetchBatch fetches the next batch, which must be due.
func fetchBatch(t *testing.T, p *memprovider.Provider) (string, uint32) {
	t.Helper()
	item, token, attempts, err := p.FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the parked batch is due")
	return token, attempts
}

// The oracle's park has the Cosmos provider's semantics (cdb.ParkRecorder):
// an abandon giving the attempt back, recorded until a turn commits.
func TestAParkRecordsWhyAndCountsEachParkUntilATurnCommits(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	p := memprovider.New(memprovider.Options{Now: c.Now})
	createInstance(t, p, "parked", orchMetadata())
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "parked", Name: "poke", Data: "{}"}, 0))
	assert.Nil(t, parkedInfo(t, p, "parked"))

	token, attempts := fetchBatch(t, p)
	require.EqualValues(t, 1, attempts)
	since := c.Now().UTC()
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Minute, "diverged at event 2"))
	assert.Equal(t, &cdb.ParkedInfo{Reason: "diverged at event 2", Since: since, Count: 1, RetryAt: since.Add(time.Minute)}, parkedInfo(t, p, "parked"))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "the parked batch waits for its delay")

	c.Advance(time.Minute)
	token, attempts = fetchBatch(t, p)
	assert.EqualValues(t, 1, attempts, "the park gave the attempt back")
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, 2*time.Minute, "diverged again"))
	assert.Equal(t, &cdb.ParkedInfo{Reason: "diverged again", Since: since, Count: 2, RetryAt: c.Now().UTC().Add(2 * time.Minute)},
		parkedInfo(t, p, "parked"), "the count grows, since stays")

	c.Advance(2 * time.Minute)
	token, _ = fetchBatch(t, p)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, orchMetadata(), nil))
	assert.Nil(t, parkedInfo(t, p, "parked"), "a committed turn ends the park")
}

func TestParkingAnUnknownLockIsRefused(t *testing.T) {
	p := memprovider.New(memprovider.Options{})
	assert.ErrorIs(t, p.ParkOrchestrationItem(context.Background(), "no-such-token", time.Minute, "diverged"), cdb.ErrInvalidLockToken)
}

func TestAParkKeepsAtMostMaxParkReasonBytesOfWholeRunes(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "long-reason", orchMetadata())
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "long-reason", Name: "poke", Data: "{}"}, 0))
	token, _ := fetchBatch(t, p)
	reason := "x" + strings.Repeat("é", cdb.MaxParkReasonBytes)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Minute, reason))
	assert.Equal(t, reason[:cdb.MaxParkReasonBytes-1], parkedInfo(t, p, "long-reason").Reason)
}
