package durable

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/duroxide-go/cdb"
)

// ApplicationError is an error with a type, a code and a non-retryable
// marker that travels whole from an activity to the orchestration that
// scheduled it, and from an orchestration to its parent and its client.
// Return one from an activity (NewApplicationError), or return an error of
// a type registered with RegisterError; on the orchestration side,
// errors.As finds the *ApplicationError, or the registered type, in the
// *TaskFailedError that Await returns.
//
// On the wire it is a duroxide application failure whose message is the
// error's text followed by a trailer, so every duroxide reader keeps a
// readable message:
//
//	card declined [ApplicationError {"type":"CardDeclined","code":"insufficient_funds","non_retryable":true}]
//
// The trailer is the text " [ApplicationError " then a JSON object that
// starts with its "type" field, then "]", at the very end of the message.
// Its fields are "type", and when set "code", "non_retryable" and
// "details" (the registered value as JSON). The failure's retryable flag
// is the marker's opposite. Any producer that writes this trailer (a Rust
// activity, say) produces an ApplicationError here.
type ApplicationError struct {
	// Type names the kind of failure, such as "CardDeclined"; a registered
	// Go type is named by its type name.
	Type string
	// Code is a finer reason within Type, such as "insufficient_funds".
	Code string
	// Message is the human-readable text, without the trailer.
	Message string
	// NonRetryable marks a failure that trying again will not change; a
	// retry policy reads it through IsNonRetryable.
	NonRetryable bool

	details json.RawMessage // the registered value's JSON, rebuilt by As
	cause   error           // the registered value, on the side that raised it
}

// NewApplicationError returns an error of type typ with code and message;
// nonRetryable marks it as not worth trying again.
func NewApplicationError(typ, code, message string, nonRetryable bool) *ApplicationError {
	return &ApplicationError{Type: typ, Code: code, Message: message, NonRetryable: nonRetryable}
}

// Error is the message.
func (e *ApplicationError) Error() string { return e.Message }

// Unwrap is the registered error the ApplicationError was made from, on
// the side that raised it; nil elsewhere (As rebuilds it there).
func (e *ApplicationError) Unwrap() error { return e.cause }

// Is matches target when it is an *ApplicationError of the same Type whose
// Code, if it has one, is the same: a value such as
// &ApplicationError{Type: "CardDeclined"} serves as a sentinel for
// errors.Is. ErrNotRegistered matches the failure of work whose
// orchestration or activity was not registered.
func (e *ApplicationError) Is(target error) bool {
	if target == ErrNotRegistered {
		return e.Type == notRegisteredType
	}
	t, ok := target.(*ApplicationError)
	if !ok || t == nil {
		return false
	}
	return t.Type == e.Type && (t.Code == "" || t.Code == e.Code)
}

// As rebuilds the error as a value of target's type when that type's name
// is the error's Type (see RegisterError): its exported fields come from
// the error's JSON details.
func (e *ApplicationError) As(target any) bool {
	dst := reflect.ValueOf(target)
	if dst.Kind() != reflect.Pointer || dst.IsNil() {
		return false
	}
	t := dst.Type().Elem()
	if t.Kind() == reflect.Interface || errorTypeName(t) != e.Type {
		return false
	}
	v := reflect.New(t)
	if len(e.details) > 0 && json.Unmarshal(e.details, v.Interface()) != nil {
		return false
	}
	if t.Kind() == reflect.Pointer && v.Elem().IsNil() {
		v.Elem().Set(reflect.New(t.Elem()))
	}
	dst.Elem().Set(v.Elem())
	return true
}

// IsNonRetryable reports whether err is marked as not worth trying again:
// an *ApplicationError in its chain with NonRetryable set (for an activity
// failure, the one the activity returned), or an error in its chain with a
// NonRetryable() bool method that returns true.
func IsNonRetryable(err error) bool {
	var ae *ApplicationError
	if errors.As(err, &ae) {
		return ae.NonRetryable
	}
	var marked interface{ NonRetryable() bool }
	return errors.As(err, &marked) && marked.NonRetryable()
}

// ApplicationErrorOf reads the ApplicationError a failure carries, such as
// a failed instance's Status.Error.
func ApplicationErrorOf(details cdb.ErrorDetails) (*ApplicationError, bool) {
	app, ok := details.(cdb.ApplicationError)
	if !ok {
		return nil, false
	}
	return parseApplicationError(app.Message)
}

// ErrNotRegistered is matched (errors.Is) by the failure of an activity or
// orchestration whose name this runtime has not registered, once the
// runtime gives up waiting for it (Options.Unregistered).
var ErrNotRegistered = errors.New("durable: not registered")

// notRegisteredType is the Type of a not-registered failure.
const notRegisteredType = "durable.NotRegistered"

// RegisterError registers T, an error type activities and orchestrations
// return, so that it reaches the orchestration (or parent, or client)
// whole: an error of type T in a failure's chain is carried with T's
// name as its Type and T's exported fields as JSON, and errors.As with a
// *T target rebuilds it there. T may have an ErrorCode() string method
// (the Code) and a NonRetryable() bool method (the marker). A type is
// known by its name without the package, so the names registered must
// differ.
func RegisterError[T error](r *Registry) error {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Interface {
		return fmt.Errorf("durable: register error %v: an interface type cannot be rebuilt", t)
	}
	name := errorTypeName(t)
	if name == "" {
		return fmt.Errorf("durable: register error %v: the type has no name", t)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, dup := r.errorTypes[name]; dup {
		return fmt.Errorf("durable: register error %v: the name %q is taken by %v", t, name, prev)
	}
	r.errorTypes[name] = t
	return nil
}

// errorTypeName is the name a Go error type travels under: the type's
// name, through one pointer.
func errorTypeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// typedError finds the error err carries as an ApplicationError: one in
// its chain, else the outermost error in its chain whose type is
// registered.
func (r *Registry) typedError(err error) (*ApplicationError, bool) {
	var ae *ApplicationError
	if errors.As(err, &ae) {
		return ae, true
	}
	found, name := r.registeredIn(err)
	if found == nil {
		return nil, false
	}
	details, jerr := json.Marshal(found)
	if jerr != nil {
		details = nil // the type is still carried, without its fields
	}
	typed := &ApplicationError{Type: name, Message: err.Error(), details: details, cause: found}
	if c, ok := found.(interface{ ErrorCode() string }); ok {
		typed.Code = c.ErrorCode()
	}
	if m, ok := found.(interface{ NonRetryable() bool }); ok {
		typed.NonRetryable = m.NonRetryable()
	}
	return typed, true
}

// registeredIn walks err's chain, depth first as errors.As does, for an
// error of a registered type, and returns it with its registered name.
func (r *Registry) registeredIn(err error) (error, string) {
	if err == nil || r == nil {
		return nil, ""
	}
	t := reflect.TypeOf(err)
	name := errorTypeName(t)
	r.mu.RLock()
	registered := r.errorTypes[name] == t
	r.mu.RUnlock()
	if registered {
		return err, name
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return r.registeredIn(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if found, name := r.registeredIn(e); found != nil {
				return found, name
			}
		}
	}
	return nil, ""
}

// applicationFailure is the failure of kind for err: err's text, and when
// err carries a typed error (see typedError) the trailer that describes
// it. A text that already ends in a trailer (an activity's failure the
// orchestration passes on) is kept as it is.
func applicationFailure(kind cdb.AppErrorKind, err error, types *Registry) cdb.ApplicationError {
	text := err.Error()
	if carried, ok := parseApplicationError(text); ok {
		return cdb.ApplicationError{Kind: kind, Message: text, Retryable: !carried.NonRetryable}
	}
	typed, ok := types.typedError(err)
	if !ok {
		// As duroxide writes an activity's error: the text, not retryable.
		return cdb.ApplicationError{Kind: kind, Message: text}
	}
	return cdb.ApplicationError{Kind: kind, Message: text + typed.trailer(), Retryable: !typed.NonRetryable}
}

// trailerMarker starts the trailer; a JSON string cannot hold it unescaped
// (its quote would be), so its last occurrence in a message is the
// trailer's.
const trailerMarker = ` [ApplicationError {"type":`

// wireApplicationError is the trailer's JSON.
type wireApplicationError struct {
	Type         string          `json:"type"`
	Code         string          `json:"code,omitempty"`
	NonRetryable bool            `json:"non_retryable,omitempty"`
	Details      json.RawMessage `json:"details,omitempty"`
}

// trailer is the text appended to the message on the wire.
func (e *ApplicationError) trailer() string {
	body, err := json.Marshal(wireApplicationError{Type: e.Type, Code: e.Code, NonRetryable: e.NonRetryable, Details: e.details})
	if err != nil {
		// Only the details can fail to encode: leave them out.
		body, _ = json.Marshal(wireApplicationError{Type: e.Type, Code: e.Code, NonRetryable: e.NonRetryable})
	}
	return " [ApplicationError " + string(body) + "]"
}

// parseApplicationError reads the trailer at the end of message.
func parseApplicationError(message string) (*ApplicationError, bool) {
	at := strings.LastIndex(message, trailerMarker)
	if at < 0 || !strings.HasSuffix(message, "]") {
		return nil, false
	}
	body := message[at+len(" [ApplicationError ") : len(message)-1]
	var w wireApplicationError
	if json.Unmarshal([]byte(body), &w) != nil || w.Type == "" {
		return nil, false
	}
	return &ApplicationError{Type: w.Type, Code: w.Code, Message: message[:at], NonRetryable: w.NonRetryable, details: w.Details}, true
}
