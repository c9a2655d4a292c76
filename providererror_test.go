package cdb

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProviderErrorFoundThroughWrapping(t *testing.T) {
	err := fmt.Errorf("ack: %w", Permanent("AckOrchestrationItem", "Invalid lock token"))

	var pe *ProviderError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "AckOrchestrationItem", pe.Op)
	assert.False(t, IsRetryable(err))
	assert.Equal(t, "AckOrchestrationItem: Invalid lock token", pe.Error())
}

func TestIsRetryable(t *testing.T) {
	assert.True(t, IsRetryable(Retryable("fetch", "throttled")))
	assert.False(t, IsRetryable(Permanent("fetch", "bad input")))
	assert.True(t, IsRetryable(errors.New("plain errors count as retryable")))
	assert.False(t, IsRetryable(nil))
}

func TestProviderErrorUnwrapsItsCause(t *testing.T) {
	cause := errors.New("connection reset")
	err := &ProviderError{Op: "Read", Message: "lost connection", Retryable: true, Err: cause}
	assert.ErrorIs(t, err, cause)
}

// Only what the provider decided itself is a refusal (ErrRefused),
// which a runtime may fail work on; a permanent status the store answered
// is not, whatever it is.
func TestOnlyTheProvidersOwnRefusalsAreRefusals(t *testing.T) {
	own := []error{
		Permanent("AckOrchestrationItem", "encode instance: bad"),
		refuse("AckWorkItem", "too large", ErrDocumentTooLarge),
		refuse("AckWorkItem", "", fmt.Errorf("event 3: %w", ErrDocumentTooLarge)),
		ToProviderError("AckWorkItem", invalid("CreateItem", "document", ErrDocumentTooLarge, "2.5 MB")),
		asOperation("AckOrchestrationItem", refuse("stage", "too large", ErrBatchTooLarge)),
		fmt.Errorf("wrapped: %w", Permanent("ack", "bad")),
	}
	for _, err := range own {
		assert.ErrorIs(t, err, ErrRefused, "%v", err)
	}
	store := []error{
		&CosmosError{Operation: "ExecuteTransactionalBatch", StatusCode: 401},
		&CosmosError{Operation: "ExecuteTransactionalBatch", StatusCode: 403},
		&CosmosError{Operation: "ReplaceItem", StatusCode: 404, SubStatusCode: SubStatusOwnerResourceNotFound},
		&CosmosError{Operation: "ReadItem", StatusCode: 400},
		&CosmosError{Operation: "ReadItem", StatusCode: 431},
		&CosmosError{Operation: "ExecuteTransactionalBatch", StatusCode: 413},
		fmt.Errorf("cdb: ReadItem: %w", context.Canceled),
	}
	for _, cause := range store {
		err := ToProviderError("AckOrchestrationItem", cause)
		assert.NotErrorIs(t, err, ErrRefused, "%v", cause)
		assert.NotErrorIs(t, asOperation("AckWorkItem", err), ErrRefused, "%v", cause)
		assert.NotErrorIs(t, fmt.Errorf("stage part: %w", err), ErrRefused, "%v", cause)
	}
	assert.NotErrorIs(t, Retryable("fetch", "throttled"), ErrRefused)
}

func TestStoreStatusNamesTheAnswer(t *testing.T) {
	status, sub, ok := StoreStatus(ToProviderError("AckWorkItem", &CosmosError{Operation: "x", StatusCode: 404, SubStatusCode: 1003}))
	assert.True(t, ok)
	assert.Equal(t, [2]int{404, 1003}, [2]int{status, sub})
	_, _, ok = StoreStatus(Permanent("AckWorkItem", "too large"))
	assert.False(t, ok)
	_, _, ok = StoreStatus(&CosmosError{Operation: "x", Message: "connection reset"})
	assert.False(t, ok, "no answer, no status")
}
