package providertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// ParkRecording checks the optional cdb.ParkRecorder, which duroxide has
// not: a park gives the batch back as an abandon with its attempt undone,
// and the store says why, since when, how often and until when, until a
// turn of the instance commits. Run it with RunModule on a provider that
// implements it.
func ParkRecording() Module {
	return Module{Name: "park_recording", Tests: []Test{
		{Name: "TestAParkIsRecordedAndCountedUntilATurnCommits", Run: TestAParkIsRecordedAndCountedUntilATurnCommits},
		{Name: "TestParkingAnUnknownLockIsErrInvalidLockToken", Run: TestParkingAnUnknownLockIsErrInvalidLockToken},
		{Name: "TestAParkKeepsAtMostMaxParkReasonBytesOfWholeRunes", Run: TestAParkKeepsAtMostMaxParkReasonBytesOfWholeRunes},
	}}
}

// parkDelay is the delay of the tests' parks: waited out, real time.
const parkDelay = 300 * time.Millisecond

// parkedInstance is a provider that records parks, with instance started
// and a message for it queued.
func parkedInstance(ctx context.Context, t *testing.T, f Factory, instance string) (cdb.Provider, cdb.ParkRecorder) {
	t.Helper()
	p := f.NewProvider(t, ProviderOptions{})
	recorder, ok := p.(cdb.ParkRecorder)
	require.True(t, ok, "%T records no parks", p)
	CreateInstance(ctx, t, p, instance)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "approve", Data: "{}"}, 0))
	return p, recorder
}

// storedPark is the park the store reports for instance; the status read,
// when the provider has one, must agree with the instance's info.
func storedPark(ctx context.Context, t *testing.T, p cdb.Provider, instance string) *cdb.ParkedInfo {
	t.Helper()
	admin, ok := p.Admin()
	require.True(t, ok)
	info, err := admin.GetInstanceInfo(ctx, instance)
	require.NoError(t, err)
	assert.Equal(t, cdb.StatusRunning, info.Status, "a parked instance is running")
	if reader, ok := p.(cdb.StatusReader); ok {
		st, err := reader.ReadOrchestrationStatus(ctx, instance)
		require.NoError(t, err)
		assert.Equal(t, info.Parked, st.Parked, "the status read and the instance's info agree")
	}
	return info.Parked
}

// fetchAfterPark waits out the park's delay and fetches its batch.
func fetchAfterPark(ctx context.Context, t *testing.T, p cdb.Provider) (string, uint32) {
	t.Helper()
	fetchNoOrchestration(ctx, t, p, lockLong, "the parked batch waits for its delay")
	time.Sleep(parkDelay + 100*time.Millisecond)
	_, token, attempts := fetchOrchestrationAttempt(ctx, t, p, lockLong, "the parked batch is due after its delay")
	return token, attempts
}

// TestAParkIsRecordedAndCountedUntilATurnCommits: each park records its
// reason and counts one more, since stays the first park's, the batch comes
// back after the delay with its attempt given back, and a committed turn
// clears the record.
func TestAParkIsRecordedAndCountedUntilATurnCommits(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, recorder := parkedInstance(ctx, t, f, "parked")
	assert.Nil(t, storedPark(ctx, t, p, "parked"), "not parked before a park")

	_, token, attempts := fetchOrchestrationAttempt(ctx, t, p, lockLong)
	require.EqualValues(t, 1, attempts)
	require.NoError(t, recorder.ParkOrchestrationItem(ctx, token, parkDelay, "diverged at event 2"))
	first := storedPark(ctx, t, p, "parked")
	require.NotNil(t, first)
	assert.Equal(t, "diverged at event 2", first.Reason)
	assert.EqualValues(t, 1, first.Count)
	assert.Equal(t, parkDelay, first.RetryAt.Sub(first.Since), "due again after the delay")

	token, attempts = fetchAfterPark(ctx, t, p)
	assert.EqualValues(t, 1, attempts, "the park gave the attempt back")
	require.NoError(t, recorder.ParkOrchestrationItem(ctx, token, parkDelay, "diverged again"))
	second := storedPark(ctx, t, p, "parked")
	require.NotNil(t, second)
	assert.Equal(t, "diverged again", second.Reason)
	assert.EqualValues(t, 2, second.Count, "each park counts")
	assert.Equal(t, first.Since, second.Since, "since is the first park's")
	assert.True(t, second.RetryAt.After(first.RetryAt))

	token, _ = fetchAfterPark(ctx, t, p)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil, TestOrchMetadata(), nil))
	assert.Nil(t, storedPark(ctx, t, p, "parked"), "a committed turn ends the park")
}

// TestParkingAnUnknownLockIsErrInvalidLockToken: a park needs a lock, and
// records nothing without one.
func TestParkingAnUnknownLockIsErrInvalidLockToken(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, recorder := parkedInstance(ctx, t, f, "unknown-lock")
	assertRefusal(t, recorder.ParkOrchestrationItem(ctx, "no-such-token", parkDelay, "diverged"), cdb.ErrInvalidLockToken, "ParkOrchestrationItem")
	assert.Nil(t, storedPark(ctx, t, p, "unknown-lock"))
}

// TestAParkKeepsAtMostMaxParkReasonBytesOfWholeRunes: a long reason is cut
// before the rune the limit would split.
func TestAParkKeepsAtMostMaxParkReasonBytesOfWholeRunes(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, recorder := parkedInstance(ctx, t, f, "long-reason")
	_, token := fetchOrchestration(ctx, t, p, lockLong)
	reason := "x" + strings.Repeat("é", cdb.MaxParkReasonBytes)
	require.NoError(t, recorder.ParkOrchestrationItem(ctx, token, parkDelay, reason))
	park := storedPark(ctx, t, p, "long-reason")
	require.NotNil(t, park)
	assert.Equal(t, reason[:cdb.MaxParkReasonBytes-1], park.Reason)
}
