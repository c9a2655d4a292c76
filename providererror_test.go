package cdb

import (
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
