package durable

import (
	"errors"

	"github.com/duroxide-go/cdb"
)

// TaskFailedError is what Await returns when an activity or a
// sub-orchestration failed. Its message is duroxide's display message of
// the failure, so an orchestration that returns it fails with the same text.
type TaskFailedError struct {
	// Details is the failure as history records it: an application error
	// for an error the activity or child returned, or a system failure.
	Details cdb.ErrorDetails
}

// Error is duroxide's display message of the failure.
func (e *TaskFailedError) Error() string { return e.Details.DisplayMessage() }

// Unwrap is the ApplicationError the failure carries, if any, so errors.As
// and errors.Is see the type, code and marker the activity or child
// failed with (and a registered error type, rebuilt).
func (e *TaskFailedError) Unwrap() error {
	if ae, ok := ApplicationErrorOf(e.Details); ok {
		return ae
	}
	return nil
}

// ErrFutureCancelled is what Await returns for a future that lost a Select:
// its work was cancelled when the winner was chosen.
var ErrFutureCancelled = errors.New("durable: future was cancelled: it lost a Select")

// ErrTimeout is returned by Client waits that reach their timeout.
var ErrTimeout = errors.New("durable: timed out waiting for the orchestration")

// nondeterminism is the failure of a turn whose code no longer matches its
// history.
func nondeterminism(message string) cdb.ErrorDetails {
	return cdb.ConfigurationError{Kind: cdb.ConfigNondeterminism, Message: &message}
}

// orchestrationFailure is the failure of an orchestration that returned an
// error.
func orchestrationFailure(message string) cdb.ErrorDetails {
	return cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: message}
}

// isSystemFailure reports failures that abort the receiving turn instead of
// being handed to orchestration code: infrastructure, configuration and
// poison, never application errors.
func isSystemFailure(d cdb.ErrorDetails) bool {
	switch d.(type) {
	case cdb.InfrastructureError, cdb.ConfigurationError, cdb.PoisonError:
		return true
	}
	return false
}

// ErrInvalidInput is wrapped by the errors of calls refused for their
// arguments before anything is written: an instance id that uses the
// reserved sub-orchestration marker, a queue name with the reserved
// carried-event prefix, a missing name.
var ErrInvalidInput = errors.New("invalid input")
