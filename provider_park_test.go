package cdb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Parking an instance (cdb.ParkRecorder) on the Cosmos provider, beside
// providertest's ParkRecording module: the record's times on the
// provider's clock, and a park whose response is lost.

// parkedAccount is a provider on a fresh account and clock, with instance
// started and a poke queued for it.
func parkedAccount(t *testing.T, instance string) (*cdb.CosmosProvider, *testClock, *cdb.FakeAccount) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(instance, 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	return p, clock, acct
}

// fetchPoke fetches the instance's batch and says with which attempt.
func fetchPoke(t *testing.T, p *cdb.CosmosProvider) (token string, attempts uint32) {
	t.Helper()
	item, token, attempts, err := p.FetchOrchestrationItem(rulesContext(t), time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the parked batch is due")
	return token, attempts
}

// storedPark reads the park from both status readers, which must agree.
func storedPark(t *testing.T, p *cdb.CosmosProvider, instance string) *cdb.ParkedInfo {
	t.Helper()
	ctx := rulesContext(t)
	info, err := p.GetInstanceInfo(ctx, instance)
	require.NoError(t, err)
	st, err := p.ReadOrchestrationStatus(ctx, instance)
	require.NoError(t, err)
	assert.Equal(t, info.Parked, st.Parked, "GetInstanceInfo and ReadOrchestrationStatus agree")
	assert.Equal(t, cdb.StatusRunning, info.Status, "a parked instance is running")
	return info.Parked
}

var _ cdb.ParkRecorder = (*cdb.CosmosProvider)(nil)

func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

func TestAParkRecordsWhyAndCountsEachParkUntilATurnCommits(t *testing.T) {
	ctx := rulesContext(t)
	p, clock, _ := parkedAccount(t, "parked")
	assert.Nil(t, storedPark(t, p, "parked"), "not parked before a park")

	token, attempts := fetchPoke(t, p)
	require.EqualValues(t, 1, attempts)
	since := clock.Now()
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Minute, "diverged at event 2"))
	assert.Equal(t, &cdb.ParkedInfo{Reason: "diverged at event 2", Since: ms(since), Count: 1, RetryAt: ms(since.Add(time.Minute))},
		storedPark(t, p, "parked"))

	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "the parked batch waits for its delay")
	clock.Advance(time.Minute)
	token, attempts = fetchPoke(t, p)
	assert.EqualValues(t, 1, attempts, "the park gave the attempt back")

	require.NoError(t, p.ParkOrchestrationItem(ctx, token, 2*time.Minute, "diverged again"))
	assert.Equal(t, &cdb.ParkedInfo{Reason: "diverged again", Since: ms(since), Count: 2, RetryAt: ms(clock.Now().Add(2 * time.Minute))},
		storedPark(t, p, "parked"), "the count grows, since stays")

	clock.Advance(2 * time.Minute)
	token, _ = fetchPoke(t, p)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Nil(t, storedPark(t, p, "parked"), "a committed turn ends the park")
}

// A park whose response is lost is read back, and found applied; written
// again, it is refused rather than counted twice, and the batch comes back
// once with its attempt given back once.
func TestAParkWhoseResponseIsLostCountsOnce(t *testing.T) {
	ctx := rulesContext(t)
	p, clock, acct := parkedAccount(t, "lost-park")
	token, _ := fetchPoke(t, p)
	loseFirstResponse(acct, "Batch", `"/parked"`)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Minute, "diverged"), "the read-back finds the park applied")
	assert.ErrorIs(t, p.ParkOrchestrationItem(ctx, token, time.Minute, "diverged"), cdb.ErrInvalidLockToken,
		"a park written again meets the ETag the first one left")
	park := storedPark(t, p, "lost-park")
	require.NotNil(t, park)
	assert.EqualValues(t, 1, park.Count, "the park is recorded once")

	clock.Advance(time.Minute)
	_, attempts := fetchPoke(t, p)
	assert.EqualValues(t, 1, attempts, "the attempt was given back once")
}
