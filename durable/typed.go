package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// Typed payloads. Inputs, outputs and event data are strings in history;
// these helpers carry Go values through them as JSON (encoding/json), as
// duroxide's *_typed methods carry serde values. Typed and string code mix
// freely: a typed activity is an ActivityFunc like any other, and a string
// orchestration may await it with AwaitAs. Decoding is strict (an empty
// payload is not JSON), and every decoding error names the Go type that
// failed, so an orchestration that returns it says what did not fit.

// EncodeJSON marshals v into a payload.
func EncodeJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("durable: encode %T as JSON: %w", v, err)
	}
	return string(b), nil
}

// DecodeJSON unmarshals a payload into a T.
func DecodeJSON[T any](payload string) (T, error) {
	var v T
	if err := json.Unmarshal([]byte(payload), &v); err != nil {
		return v, fmt.Errorf("durable: decode %s as %s: %w", abbreviate(payload), reflect.TypeFor[T](), err)
	}
	return v, nil
}

// abbreviate quotes a payload for an error message, cut to a readable length.
func abbreviate(payload string) string {
	const limit = 64
	if len(payload) > limit {
		return fmt.Sprintf("%q...", payload[:limit])
	}
	return fmt.Sprintf("%q", payload)
}

// AwaitAs awaits f and decodes its result, JSON of a T. The future's own
// error (a *TaskFailedError, ErrFutureCancelled) is returned unchanged, so
// callers tell a failed task from a result that does not decode.
func AwaitAs[T any](f *Future) (T, error) {
	out, err := f.Await()
	if err != nil {
		var zero T
		return zero, err
	}
	return DecodeJSON[T](out)
}

// The orchestration context's typed calls send a Go value as JSON and are
// named for the string call they wrap, with JSON after it:
// ScheduleActivityJSON, ScheduleSubOrchestrationJSON, StartDetachedJSON
// and ContinueAsNewJSON. A value that does not encode is an error where
// the call's result comes (a future's at Await, the others' at return),
// and nothing is scheduled or recorded; encoding a value gives the same
// outcome on every replay, so the orchestration stays deterministic. The
// calls that read a Go value back end in As: AwaitAs, WaitForEventAs and
// WaitForCompletionAs.

// ScheduleActivityJSON schedules an activity with input encoded as JSON;
// await it with AwaitAs. An input that does not encode schedules nothing:
// the future is done at once, and Await returns the encoding error.
func (c *OrchestrationContext) ScheduleActivityJSON(name string, input any, opts ...ActivityOption) *Future {
	payload, err := EncodeJSON(input)
	if err != nil {
		return c.refusedFuture(futureActivity, fmt.Errorf("durable: schedule activity %q: %w", name, err))
	}
	return c.ScheduleActivity(name, payload, opts...)
}

// ScheduleActivityTyped schedules an activity with input encoded as JSON;
// await it with AwaitAs. An input that does not encode schedules nothing.
//
// Deprecated: Use ScheduleActivityJSON, whose future carries the encoding
// error to Await, so the call goes straight into AwaitAs, Select or Join.
func (c *OrchestrationContext) ScheduleActivityTyped(name string, input any, opts ...ActivityOption) (*Future, error) {
	payload, err := EncodeJSON(input)
	if err != nil {
		return nil, fmt.Errorf("durable: schedule activity %q: %w", name, err)
	}
	return c.ScheduleActivity(name, payload, opts...), nil
}

// ScheduleSubOrchestrationJSON starts a child orchestration with input
// encoded as JSON; await it with AwaitAs. An input that does not encode
// starts nothing: the future is done at once, and Await returns the
// encoding error.
func (c *OrchestrationContext) ScheduleSubOrchestrationJSON(name string, input any, opts ...SubOrchestrationOption) *Future {
	payload, err := EncodeJSON(input)
	if err != nil {
		return c.refusedFuture(futureSubOrchestration, fmt.Errorf("durable: schedule sub-orchestration %q: %w", name, err))
	}
	return c.ScheduleSubOrchestration(name, payload, opts...)
}

// StartDetachedJSON starts an independent orchestration with input encoded
// as JSON, as StartDetached does. An input that does not encode starts
// nothing and is returned as the error.
func (c *OrchestrationContext) StartDetachedJSON(instance, name string, input any, opts ...StartOption) error {
	payload, err := EncodeJSON(input)
	if err != nil {
		return fmt.Errorf("durable: detached start of %q as %q: %w", name, instance, err)
	}
	return c.StartDetached(instance, name, payload, opts...)
}

// ContinueAsNewJSON continues as new, as ContinueAsNew does, with input
// encoded as JSON. An input that does not encode records nothing and is
// returned as the error, which fails the orchestration when returned: that
// is the only way the call returns. A string orchestration ends with
// `return ctx.ContinueAsNewJSON(next)`; a typed one whose output is
// another type with `_, err := ctx.ContinueAsNewJSON(next)` and
// `return Out{}, err`.
func (c *OrchestrationContext) ContinueAsNewJSON(input any, opts ...StartOption) (string, error) {
	payload, err := EncodeJSON(input)
	if err != nil {
		return "", fmt.Errorf("durable: continue as new: %w", err)
	}
	return c.ContinueAsNew(payload, opts...)
}

// WaitForEventAs waits for an event as WaitForEvent does and decodes its
// data, JSON of a T (Client.RaiseEventTyped sends one). Its error is the
// wait's (one that wraps ErrEventTimeout, with WithEventTimeout) or the
// decoding's, naming T. It is AwaitAs(ctx.WaitForEvent(name, opts...));
// use those two to put the wait in a Select.
func WaitForEventAs[T any](ctx *OrchestrationContext, name string, opts ...EventOption) (T, error) {
	return AwaitAs[T](ctx.WaitForEvent(name, opts...))
}

// TypedActivity adapts an activity on Go values to an ActivityFunc: its
// input is decoded from JSON of In and its output encoded as JSON of Out.
// An input that does not decode fails the activity, naming In.
func TypedActivity[In, Out any](fn func(ctx ActivityContext, input In) (Out, error)) ActivityFunc {
	return func(ctx ActivityContext, payload string) (string, error) {
		in, err := DecodeJSON[In](payload)
		if err != nil {
			return "", fmt.Errorf("activity %s input: %w", ctx.ActivityName(), err)
		}
		out, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		return EncodeJSON(out)
	}
}

// TypedOrchestration adapts an orchestration on Go values to an
// OrchestrationFunc: its input is decoded from JSON of In and its output
// encoded as JSON of Out. An input that does not decode fails the
// orchestration, naming In.
func TypedOrchestration[In, Out any](fn func(ctx *OrchestrationContext, input In) (Out, error)) OrchestrationFunc {
	return func(ctx *OrchestrationContext, payload string) (string, error) {
		in, err := DecodeJSON[In](payload)
		if err != nil {
			return "", fmt.Errorf("orchestration %s input: %w", ctx.OrchestrationName(), err)
		}
		out, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		return EncodeJSON(out)
	}
}

// RegisterTypedActivity registers TypedActivity(fn) under name.
func RegisterTypedActivity[In, Out any](r *Registry, name string, fn func(ctx ActivityContext, input In) (Out, error)) error {
	return r.RegisterActivity(name, TypedActivity(fn))
}

// RegisterTypedOrchestration registers TypedOrchestration(fn) as version
// 1.0.0 of name.
func RegisterTypedOrchestration[In, Out any](r *Registry, name string, fn func(ctx *OrchestrationContext, input In) (Out, error)) error {
	return r.RegisterOrchestration(name, TypedOrchestration(fn))
}

// StartOrchestrationTyped starts an instance with input encoded as JSON.
func (c *Client) StartOrchestrationTyped(ctx context.Context, instance, name string, input any, opts ...StartOption) error {
	payload, err := EncodeJSON(input)
	if err != nil {
		return fmt.Errorf("durable: start orchestration %q: %w", instance, err)
	}
	return c.StartOrchestration(ctx, instance, name, payload, opts...)
}

// RaiseEventTyped raises an external event whose data is encoded as JSON;
// the orchestration reads it with AwaitAs(ctx.WaitForEvent(name)). It is
// delivered as RaiseEvent's events are.
func (c *Client) RaiseEventTyped(ctx context.Context, instance, name string, data any) error {
	payload, err := EncodeJSON(data)
	if err != nil {
		return fmt.Errorf("durable: raise event %q on %q: %w", name, instance, err)
	}
	return c.RaiseEvent(ctx, instance, name, payload)
}

// OrchestrationFailedError is what WaitForCompletionAs returns for an
// instance that failed.
type OrchestrationFailedError struct {
	Instance string // the instance that failed
	Status   Status // its final status; Status.Error says why
}

// Error describes the failure with the instance id and its message.
func (e *OrchestrationFailedError) Error() string {
	return fmt.Sprintf("durable: orchestration %q failed: %s", e.Instance, e.Status.Error.DisplayMessage())
}

// Unwrap is the ApplicationError the instance failed with, if any, so
// errors.As and errors.Is see its type, code and marker.
func (e *OrchestrationFailedError) Unwrap() error {
	if ae, ok := ApplicationErrorOf(e.Status.Error); ok {
		return ae
	}
	return nil
}

// WaitForCompletionAs waits for the instance like WaitForCompletion and
// decodes its output, JSON of a T. A failed instance gives an
// *OrchestrationFailedError.
func WaitForCompletionAs[T any](ctx context.Context, c *Client, instance string, timeout time.Duration) (T, error) {
	var zero T
	st, err := c.WaitForCompletion(ctx, instance, timeout)
	if err != nil {
		return zero, err
	}
	if st.State != StateCompleted {
		return zero, &OrchestrationFailedError{Instance: instance, Status: st}
	}
	out, err := DecodeJSON[T](st.Output)
	if err != nil {
		return zero, fmt.Errorf("durable: output of %q: %w", instance, err)
	}
	return out, nil
}
