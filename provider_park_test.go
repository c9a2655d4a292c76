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

// An operator who deployed the fix resumes a parked instance: its parked
// turn is due at once, long before the park's RetryAt, and the record
// says the retry is due now until a turn commits.
func TestResumeParkedMakesTheParkedTurnDueNow(t *testing.T) {
	ctx := rulesContext(t)
	p, clock, _ := parkedAccount(t, "parked")
	token, _ := fetchPoke(t, p)
	since := clock.Now()
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, "diverged at event 2"))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "parked for an hour")

	clock.Advance(time.Second)
	n, err := p.ResumeParked(ctx, "parked")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the poke")
	assert.Equal(t, &cdb.ParkedInfo{Reason: "diverged at event 2", Since: ms(since), Count: 1, RetryAt: ms(clock.Now())},
		storedPark(t, p, "parked"), "parked until a turn commits, its retry due now")

	item, token, attempts, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "due at once, 59 minutes before RetryAt")
	assert.Equal(t, []cdb.WorkItem{pokeItem("parked")}, item.Messages)
	assert.EqualValues(t, 1, attempts, "the park gave the attempt back")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Nil(t, storedPark(t, p, "parked"), "the turn committed")
}

// A resume whose batch applied but whose answer was lost (R8) loses
// nothing and doubles nothing: whatever the first call answers, the parked
// turn is due now, and a second call (an operator's retry) succeeds,
// bringing nothing more forward; the turn's messages come once.
func TestAResumeWhoseAnswerWasLostCanBeCalledAgain(t *testing.T) {
	ctx := rulesContext(t)
	p, clock, acct := parkedAccount(t, "lost-resume")
	token, _ := fetchPoke(t, p)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, "diverged"))
	clock.Advance(time.Second)

	remove := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1,
		Match: func(r cdb.FakeRequest) bool { return r.Operation == "Batch" }})
	_, firstErr := p.ResumeParked(ctx, "lost-resume")
	t.Logf("first resume: %v", firstErr)
	remove()
	n, err := p.ResumeParked(ctx, "lost-resume")
	require.NoError(t, err, "the retry of a resume (the first answered %v)", firstErr)
	assert.Equal(t, 0, n, "the lost answer's batch applied: nothing is left to bring forward")

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "due now, long before the park's RetryAt")
	assert.Equal(t, []cdb.WorkItem{pokeItem("lost-resume")}, item.Messages, "the parked turn's message, once")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Nil(t, storedPark(t, p, "lost-resume"), "the turn committed")
}

// A park of the first turn holds the start too (startHeldUntil): resuming
// brings it forward with the batch.
func TestResumeParkedBringsAParkedStartForward(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("first"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, "diverged at event 1"))

	n, err := p.ResumeParked(ctx, "first")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start is due at once")
	assert.Equal(t, []cdb.WorkItem{providertest.StartItem("first")}, item.Messages)
}

// Resuming changes nothing, and says why, for an unknown instance, one no
// runtime parked, and one whose lock a runtime holds; the held batch is
// still there for the runtime that holds it.
func TestResumeParkedRefusesWhatItCannotResume(t *testing.T) {
	ctx := rulesContext(t)
	p, clock, _ := parkedAccount(t, "parked")

	_, err := p.ResumeParked(ctx, "nobody")
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)
	assert.EqualError(t, err, `ResumeParked: instance "nobody" not found: instance not found`)
	_, err = p.ResumeParked(ctx, "parked")
	assert.ErrorIs(t, err, cdb.ErrNotParked)
	assert.EqualError(t, err, `ResumeParked: instance "parked" is not parked: instance is not parked`)

	token, _ := fetchPoke(t, p)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Minute, "diverged"))
	clock.Advance(time.Minute)
	token, _ = fetchPoke(t, p) // the runtime's retry, at RetryAt, holds the lock
	_, err = p.ResumeParked(ctx, "parked")
	assert.ErrorIs(t, err, cdb.ErrInstanceLocked)
	assert.Regexp(t, `^ResumeParked: instance "parked" is locked by a runtime until \S+: it is running its turn now: instance is locked by a runtime$`, err.Error())

	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []cdb.WorkItem{pokeItem("parked")}, item.Messages, "the refused resume lost nothing")
}

// On @vercel/cosmosdb-server too, where the test's transport runs a batch
// with patches one operation at a time: a resumed park is due at once.
func TestResumeParkedOnFakeAndNPM(t *testing.T) {
	onFakeAndNPM(t, func(t *testing.T, open openProvider) {
		ctx := rulesContext(t)
		p := open(t, cdb.Config{ShortPolling: true})
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("parked"), 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("parked", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
		require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("parked"), 0))
		token, _ = fetchPoke(t, p)
		require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, "diverged"))

		n, err := p.ResumeParked(ctx, "parked")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		require.Eventually(t, func() bool {
			item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || item == nil {
				return false
			}
			_ = p.AbandonOrchestrationItem(ctx, token, 0, true)
			return assert.Equal(t, []cdb.WorkItem{pokeItem("parked")}, item.Messages)
		}, 30*time.Second, 50*time.Millisecond, "due long before the hour's RetryAt")
	})
}
