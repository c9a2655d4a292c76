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
	// Refusal marks the provider's own refusal (see ErrRefused): what it
	// decided itself from input and sizes it validated, never an answer
	// of the store it passes on.
	Refusal bool
}

// Error describes the failure.
func (e *ProviderError) Error() string {
	return fmt.Sprintf("%s: %s", e.Op, e.Message)
}

// Unwrap returns the cause.
func (e *ProviderError) Unwrap() error { return e.Err }

// IsRetryable reports whether this error may go away on retry.
func (e *ProviderError) IsRetryable() bool { return e.Retryable }

// Is makes errors.Is(err, ErrRefused) find a refusal.
func (e *ProviderError) Is(target error) bool { return target == ErrRefused && e.Refusal }

// ErrRefused is found by errors.Is on the provider's own refusals: input
// it cannot take, sizes it validated, a lock token it does not hold. The
// same call is refused again however often it is made, so a runtime may
// fail the work it carried. Any other permanent error is the store's
// answer passed on (a real account's transient 401, 403, 404/1003, 413 or
// 400/431 among them): it says nothing final about the work, so a runtime
// abandons the work with backoff instead of failing it.
var ErrRefused = errors.New("refused by the provider")

// Retryable builds a retryable ProviderError, for implementations of
// Provider outside this package; this package's own code uses transient.
func Retryable(op, message string) *ProviderError { return transient(op, message, nil) }

// Permanent builds a permanent ProviderError, the implementation's own
// refusal (ErrRefused), for implementations of Provider outside this
// package; this package's own code uses refuse.
func Permanent(op, message string) *ProviderError { return refuse(op, message, nil) }

// Conditions a caller branches on. A *ProviderError reporting one of them
// wraps the sentinel, so errors.Is(err, cdb.ErrInstanceNotFound) holds
// however the error was wrapped on its way up.
var (
	// ErrInstanceNotFound: no instance has this id (or it is being deleted).
	ErrInstanceNotFound = errors.New("instance not found")
	// ErrExecutionNotFound: no such execution (GetExecutionInfo reports it
	// for an unknown instance too: it asks for the execution alone).
	ErrExecutionNotFound = errors.New("execution not found")
	// ErrInvalidLockToken: the lock token is not (or no longer) a valid
	// lock: never returned by a fetch, already acked or abandoned, expired,
	// or taken over by another dispatcher; for a work item, also an
	// activity cancelled meanwhile. The work it covered was not committed.
	ErrInvalidLockToken = errors.New("invalid lock token")
	// ErrInstanceExists: EnqueueStartIfAbsent (ExclusiveStarter) met an
	// instance id that is taken, by an instance or by a start queued for it.
	ErrInstanceExists = errors.New("instance exists")
	// ErrInstanceRunning: a deletion without force met a Running instance.
	ErrInstanceRunning = errors.New("instance is running")
	// ErrOrphanedChild: an atomic deletion would leave a child instance
	// without its parent; delete the whole tree (GetInstanceTree).
	ErrOrphanedChild = errors.New("child instance left out of the deletion")
	// ErrSubOrchestration: DeleteInstance named a sub-orchestration, which
	// is deleted only with its root.
	ErrSubOrchestration = errors.New("instance is a sub-orchestration")
	// ErrDuplicateEvent: history is append-only, and an event id given is
	// already stored for that execution.
	ErrDuplicateEvent = errors.New("duplicate event id")
	// ErrInvalidInput: an argument the contract refuses whatever is stored:
	// an instance id that cannot be stored (empty, not UTF-8, too long), a
	// work item on the wrong queue, an event id 0, a completion that is not
	// ActivityCompleted or ActivityFailed, an InstanceQuery out of bounds.
	ErrInvalidInput = errors.New("invalid input")
	// ErrNotParked: ResumeParked met an instance no runtime has parked.
	ErrNotParked = errors.New("instance is not parked")
	// ErrInstanceLocked: ResumeParked met an instance whose lock a runtime
	// holds: it is running the instance's turn now.
	ErrInstanceLocked = errors.New("instance is locked by a runtime")
)

// The provider builds its errors in three ways only, so that every cause
// stays reachable by errors.Is and errors.As:
//   - refuse: its own decision, the same whatever is retried (a lock it
//     does not hold, input it cannot take); cause is the sentinel a caller
//     branches on, the validation error that says why, or nil;
//   - transient: a failure that may go away on retry, with its cause;
//   - asOperation: any error a call returned, reported as op's own.

// refuse builds the provider's own permanent refusal (ErrRefused) for op.
func refuse(op, why string, cause error) *ProviderError {
	return &ProviderError{Op: op, Message: describe(why, cause), Err: cause, Refusal: true}
}

// transient builds a retryable ProviderError for op.
func transient(op, why string, cause error) *ProviderError {
	return &ProviderError{Op: op, Message: describe(why, cause), Err: cause, Retryable: true}
}

// describe joins why and the cause's own text, either of which may be
// missing.
func describe(why string, cause error) string {
	switch {
	case cause == nil:
		return why
	case why == "":
		return cause.Error()
	default:
		return why + ": " + cause.Error()
	}
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

// asOperation reports the failure of a call that method op made as op's
// own, keeping the call's error (and its sentinel) reachable and its
// retryability.
func asOperation(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *ProviderError
	if !errors.As(err, &pe) {
		return ToProviderError(op, err)
	}
	if pe.Op == op {
		return err
	}
	return &ProviderError{Op: op, Message: pe.Op + ": " + pe.Message, Retryable: pe.Retryable, Err: err, Refusal: pe.Refusal}
}
