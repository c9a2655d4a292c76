package cdb

import (
	"errors"
	"fmt"
)

// ProviderError is the error every Provider and ProviderAdmin method returns
// when it fails. Retryable tells the runtime whether trying the same call
// again may succeed (throttling, timeouts, lost connections) or not (invalid
// lock tokens, duplicate events, bad input).
type ProviderError struct {
	Op        string // the contract operation, e.g. "ack_orchestration_item"
	Message   string
	Retryable bool
	Err       error // the cause, if any; reached by errors.Unwrap
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("%s: %s", e.Op, e.Message)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// IsRetryable reports whether this error may go away on retry.
func (e *ProviderError) IsRetryable() bool { return e.Retryable }

// Retryable builds a retryable ProviderError.
func Retryable(op, message string) *ProviderError {
	return &ProviderError{Op: op, Message: message, Retryable: true}
}

// Permanent builds a permanent ProviderError.
func Permanent(op, message string) *ProviderError {
	return &ProviderError{Op: op, Message: message, Retryable: false}
}

// IsRetryable reports whether err may go away on retry. A ProviderError
// anywhere in the chain decides; any other non-nil error counts as retryable,
// as duroxide's From<String> conversion does.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return true
}
