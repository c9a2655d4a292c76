package providertest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// errorHandlingTests is duroxide's provider_validation/error_handling.rs.
func errorHandlingTests() []Test {
	return []Test{
		{Name: "TestInvalidLockTokenOnAck", Run: testInvalidLockTokenOnAck},
		{Name: "TestDuplicateEventIDRejection", Run: testDuplicateEventIDRejection},
		{Name: "TestMissingInstanceMetadata", Run: testMissingInstanceMetadata},
		{Name: "TestCorruptedSerializationData", Run: testCorruptedSerializationData},
		{Name: "TestLockExpirationDuringAck", Run: testLockExpirationDuringAck},
		{Name: "TestReadCorruptedHistoryReturnsError", Run: testReadCorruptedHistoryReturnsError},
		{Name: "TestReadWithExecutionCorruptedHistoryReturnsError", Run: testReadWithExecutionCorruptedHistoryReturnsError},
	}
}

// testInvalidLockTokenOnAck: an ack with an unknown token fails with a
// message naming the lock token.
func testInvalidLockTokenOnAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	err := p.AckOrchestrationItem(ctx, "invalid-token", 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken)
	var pe *cdb.ProviderError
	require.True(t, errors.As(err, &pe), "ack errors must be *cdb.ProviderError, got %T: %v", err, err)
	assert.True(t,
		strings.Contains(pe.Message, "Invalid lock token") || strings.Contains(pe.Message, "lock_token"),
		"the error message must contain \"Invalid lock token\" or \"lock_token\", got %q", pe.Message)
}

// testDuplicateEventIDRejection: an ack repeating an existing event id
// fails and leaves history as it was.
func testDuplicateEventIDRejection(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent("instance-A", 1)}, nil, nil, cdb.ExecutionMetadata{}, nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token2 := fetchOrchestration(ctx, t, p, lockLong)

	err := p.AckOrchestrationItem(ctx, token2, 1,
		[]cdb.Event{newEvent(1, "instance-A", 1, cdb.ActivityScheduled{Name: "Activity", Input: "{}"})}, // duplicate id 1
		nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrDuplicateEvent, "an ack repeating event_id 1 must fail")

	history := readOrEmpty(ctx, t, p, "instance-A")
	require.Len(t, history, 1)
	assert.IsType(t, cdb.OrchestrationStarted{}, history[0].Kind)
}

// testMissingInstanceMetadata: reading an unknown instance yields no
// events (an error counts as none, as duroxide's unwrap_or_default does).
func testMissingInstanceMetadata(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	assert.Len(t, readOrEmpty(ctx, t, p, "non-existent-instance"), 0)
}

// testCorruptedSerializationData: a fetch on an empty store succeeds
// (with or without work); duroxide's smoke test that the provider does not
// panic.
func testCorruptedSerializationData(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	_, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "a fetch must not fail")
}

// testLockExpirationDuringAck: an ack after the lock expired fails.
func testLockExpirationDuringAck(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	lockTimeout := f.LockTimeout()

	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("instance-A"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockTimeout)

	time.Sleep(lockTimeout + 100*time.Millisecond)

	err := p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{StartedEvent("instance-A", 1)}, nil, nil, cdb.ExecutionMetadata{}, nil)
	assert.ErrorIs(t, err, cdb.ErrInvalidLockToken, "an ack with an expired lock must fail")
}

// testReadCorruptedHistoryReturnsError: Read fails on corrupted history
// instead of returning an empty one.
func testReadCorruptedHistoryReturnsError(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "inst-read-corrupt")

	history, err := p.Read(ctx, "inst-read-corrupt")
	require.NoError(t, err)
	require.NotEmpty(t, history, "History should contain events before corruption")

	require.NoError(t, f.CorruptInstanceHistory(ctx, p, "inst-read-corrupt"))

	history, err = p.Read(ctx, "inst-read-corrupt")
	assert.Error(t, err, "Read should return an error for corrupted history, got %d events", len(history))
	assertCorruptHistoryError(t, err)
}

// testReadWithExecutionCorruptedHistoryReturnsError: the same for
// ReadWithExecution.
func testReadWithExecutionCorruptedHistoryReturnsError(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "inst-rwe-corrupt")

	history, err := p.ReadWithExecution(ctx, "inst-rwe-corrupt", cdb.InitialExecutionID)
	require.NoError(t, err)
	require.NotEmpty(t, history, "History should contain events before corruption")

	require.NoError(t, f.CorruptInstanceHistory(ctx, p, "inst-rwe-corrupt"))

	history, err = p.ReadWithExecution(ctx, "inst-rwe-corrupt", cdb.InitialExecutionID)
	assert.Error(t, err, "ReadWithExecution should return an error for corrupted history, got %d events", len(history))
	assertCorruptHistoryError(t, err)
}

// assertCorruptHistoryError checks that a read of an undecodable history
// reports it as what it is: not a missing instance, and not something a
// retry would heal.
func assertCorruptHistoryError(t *testing.T, err error) {
	t.Helper()
	assert.NotErrorIs(t, err, cdb.ErrInstanceNotFound, "a corrupt history is not a missing instance")
	assert.False(t, cdb.IsRetryable(err), "a corrupt history does not heal on retry: %v", err)
	assert.ErrorIs(t, err, cdb.ErrRefused, "the provider's own refusal to decode, not the store's answer passed on")
}
