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
	Op        string // the contract operation, e.g. "AckOrchestrationItem"
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

// Conditions a caller branches on. A *ProviderError reporting one of them
// wraps the sentinel, so errors.Is(err, cdb.ErrInstanceNotFound) holds
// however the error was wrapped on its way up.
var (
	// ErrInstanceNotFound: no instance has this id (or it is being deleted).
	ErrInstanceNotFound = errors.New("instance not found")
	// ErrExecutionNotFound: the instance exists but has no such execution.
	ErrExecutionNotFound = errors.New("execution not found")
)

// notFound builds the permanent ProviderError for a missing instance or
// execution, wrapping sentinel.
func notFound(op, message string, sentinel error) *ProviderError {
	return &ProviderError{Op: op, Message: message, Err: sentinel}
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
