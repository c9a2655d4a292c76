package cdb

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Event is one history entry: duroxide's Event struct (src/lib.rs). Its JSON
// puts the common fields first, then Kind's "type" tag and fields, because
// serde flattens the internally tagged EventKind into the event:
//
//	{"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,
//	 "timestamp_ms":0,"duroxide_version":"0.1.29","type":"OrchestrationStarted",...}
type Event struct {
	EventID         uint64    `json:"event_id"`        // position in the execution, 1-based
	SourceEventID   *uint64   `json:"source_event_id"` // for completions: the scheduling event; null otherwise
	InstanceID      string    `json:"instance_id"`
	ExecutionID     uint64    `json:"execution_id"`
	TimestampMs     uint64    `json:"timestamp_ms"`     // when it was written, in milliseconds since the Unix epoch
	DuroxideVersion string    `json:"duroxide_version"` // semver of the duroxide that wrote it
	Kind            EventKind `json:"-"`
}

// IsTerminal reports whether the event ends its execution.
func (e Event) IsTerminal() bool {
	switch e.Kind.(type) {
	case OrchestrationCompleted, OrchestrationFailed, OrchestrationContinuedAsNew:
		return true
	}
	return false
}

// MarshalJSON encodes the flattened serde form.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Kind == nil {
		return nil, errors.New("cdb: encode Event: Kind is nil")
	}
	type header Event // without methods; Kind is excluded by its tag
	head, err := marshalCompact(header(e))
	if err != nil {
		return nil, fmt.Errorf("cdb: encode Event: %w", err)
	}
	kind, err := marshalCompact(e.Kind)
	if err != nil {
		return nil, fmt.Errorf("cdb: encode Event: %w", err)
	}
	// Both are non-empty objects: join them as {head members,kind members}.
	out := make([]byte, 0, len(head)+len(kind))
	out = append(out, head[:len(head)-1]...)
	out = append(out, ',')
	return append(out, kind[1:]...), nil
}

// UnmarshalJSON decodes the flattened serde form. An unknown "type" wraps
// ErrUnknownVariant.
func (e *Event) UnmarshalJSON(data []byte) error {
	o := parseJSONObject("Event", data)
	var ev Event
	requiredField(o, "event_id", &ev.EventID)
	optionalField(o, "source_event_id", &ev.SourceEventID)
	requiredField(o, "instance_id", &ev.InstanceID)
	requiredField(o, "execution_id", &ev.ExecutionID)
	requiredField(o, "timestamp_ms", &ev.TimestampMs)
	requiredField(o, "duroxide_version", &ev.DuroxideVersion)
	kind, err := decodeEventKind(o)
	if err != nil {
		return err
	}
	ev.Kind = kind
	*e = ev
	return nil
}

// MarshalEvent encodes an event exactly as serde_json would (compact, no
// HTML escaping).
func MarshalEvent(e Event) ([]byte, error) { return marshalCompact(e) }

// UnmarshalEvent decodes one event.
func UnmarshalEvent(data []byte) (Event, error) {
	var e Event
	err := e.UnmarshalJSON(data)
	return e, err
}

// EventKind is the type-specific part of an Event: duroxide's EventKind enum.
// Concrete types are named for the fact the history records, as the Rust
// variants name it, without a suffix (the package doc's Names); Type is the
// variant's tag. Standing alone a kind encodes as serde's internally tagged
// form {"type":"...",...}.
type EventKind interface {
	isEventKind()
	// Type is the serde "type" tag, which differs from the Go name for the
	// renamed queue events (QueueSubscribed is "ExternalSubscribedPersistent").
	Type() string
}

// OrchestrationStarted is the first event of every execution.
type OrchestrationStarted struct {
	Name           string
	Version        string
	Input          string
	ParentInstance *string // encoded as null when nil
	ParentID       *uint64 // encoded as null when nil
	// ParentExecutionID is the parent execution that scheduled the child
	// (duroxide 0.1.30); omitted when nil, as in every 0.1.29 history.
	ParentExecutionID *uint64
	// CarryForwardEvents is set on executions started by continue-as-new.
	// Nil is omitted from the JSON; a non-nil empty slice encodes as [].
	CarryForwardEvents  []CarryForwardEvent
	InitialCustomStatus *string // omitted when nil
}

// OrchestrationCompleted ends an execution with its output.
type OrchestrationCompleted struct {
	Output string `json:"output"`
}

// OrchestrationFailed ends an execution with its failure.
type OrchestrationFailed struct {
	Details ErrorDetails `json:"details"`
}

// ActivityScheduled records an activity the orchestration scheduled; its
// event id is the activity id its completion refers to.
type ActivityScheduled struct {
	Name      string  `json:"name"`
	Input     string  `json:"input"`
	SessionID *string `json:"session_id,omitempty"`
	Tag       *string `json:"tag,omitempty"`
}

// ActivityCompleted is the EventKind ActivityCompleted.
type ActivityCompleted struct {
	Result string `json:"result"`
	// Delivery is the message's Delivery (ActivityCompletedMessage): which
	// run of the attempt this is, when not the first. This runtime's field;
	// duroxide ignores it.
	Delivery *uint32 `json:"delivery,omitempty"`
}

// ActivityFailed is the EventKind ActivityFailed.
type ActivityFailed struct {
	Details ErrorDetails `json:"details"`
	// Delivery is the message's Delivery (ActivityCompletedMessage): which
	// run of the attempt this is, when not the first. This runtime's field;
	// duroxide ignores it.
	Delivery *uint32 `json:"delivery,omitempty"`
}

// ActivityCancelRequested records that the orchestration cancelled a
// scheduled activity (for example when it lost a race to a timer).
type ActivityCancelRequested struct {
	Reason string `json:"reason"`
}

// TimerCreated records a durable timer.
type TimerCreated struct {
	FireAtMs uint64 `json:"fire_at_ms"` // when it fires, in milliseconds since the Unix epoch
	// Purpose says what a timer the runtime set for the code is for (a
	// retry policy's Timeout or backoff, a wait's timeout, a cancellation's
	// grace), for the operator reading the history; nil for the code's own
	// timers. This runtime's field: duroxide ignores it, and replay does
	// not compare it.
	Purpose *string `json:"purpose,omitempty"`
}

// TimerFired is the EventKind TimerFired.
type TimerFired struct {
	FireAtMs uint64 `json:"fire_at_ms"` // when it was due, in milliseconds since the Unix epoch
}

// ExternalSubscribed records that the orchestration waits for the external
// event Name.
type ExternalSubscribed struct {
	Name string `json:"name"`
}

// ExternalEvent records the arrival of an external event raised for the
// instance.
type ExternalEvent struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// OrchestrationChained records a detached (fire-and-forget) orchestration start.
type OrchestrationChained struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Input    string `json:"input"`
}

// SubOrchestrationScheduled records the start of a child orchestration.
type SubOrchestrationScheduled struct {
	Name     string `json:"name"`
	Instance string `json:"instance"` // the child id as scheduled (see BuildChildInstanceID)
	Input    string `json:"input"`
}

// SubOrchestrationCompleted records a child orchestration's result.
type SubOrchestrationCompleted struct {
	Result string `json:"result"`
}

// SubOrchestrationFailed records a child orchestration's failure.
type SubOrchestrationFailed struct {
	Details ErrorDetails `json:"details"`
}

// SubOrchestrationCancelRequested records that the orchestration cancelled a
// child orchestration.
type SubOrchestrationCancelRequested struct {
	Reason string `json:"reason"`
}

// OrchestrationContinuedAsNew ends an execution that continues as a new
// one with Input.
type OrchestrationContinuedAsNew struct {
	Input string `json:"input"`
}

// OrchestrationCancelRequested records a request to cancel the instance.
type OrchestrationCancelRequested struct {
	Reason string `json:"reason"`
}

// ExternalSubscribedCancelled records that a wait for an external event was
// cancelled.
type ExternalSubscribedCancelled struct {
	Reason string `json:"reason"`
}

// QueueSubscribed is a persistent (mailbox) subscription; type "ExternalSubscribedPersistent".
type QueueSubscribed struct {
	Name string `json:"name"`
}

// QueueEventDelivered is a persistent event's arrival; type "ExternalEventPersistent".
type QueueEventDelivered struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// QueueSubscriptionCancelled cancels a persistent subscription; type
// "ExternalSubscribedPersistentCancelled".
type QueueSubscriptionCancelled struct {
	Reason string `json:"reason"`
}

// CustomStatusUpdated sets (non-nil) or clears (nil, encoded as null) the
// custom status.
type CustomStatusUpdated struct {
	Status *string `json:"status"`
}

// KeyValueSet sets one key of the instance's KV store.
type KeyValueSet struct {
	Key             string `json:"key"`
	Value           string `json:"value"`
	LastUpdatedAtMs uint64 `json:"last_updated_at_ms"` // milliseconds since the Unix epoch; 0 when decoded from pre-0.1.26 events
}

// KeyValueCleared removes one key of the instance's KV store.
type KeyValueCleared struct {
	Key string `json:"key"`
}

// KeyValuesCleared clears every key; it has no fields.
type KeyValuesCleared struct{}

func (OrchestrationStarted) isEventKind()            {}
func (OrchestrationCompleted) isEventKind()          {}
func (OrchestrationFailed) isEventKind()             {}
func (ActivityScheduled) isEventKind()               {}
func (ActivityCompleted) isEventKind()               {}
func (ActivityFailed) isEventKind()                  {}
func (ActivityCancelRequested) isEventKind()         {}
func (TimerCreated) isEventKind()                    {}
func (TimerFired) isEventKind()                      {}
func (ExternalSubscribed) isEventKind()              {}
func (ExternalEvent) isEventKind()                   {}
func (OrchestrationChained) isEventKind()            {}
func (SubOrchestrationScheduled) isEventKind()       {}
func (SubOrchestrationCompleted) isEventKind()       {}
func (SubOrchestrationFailed) isEventKind()          {}
func (SubOrchestrationCancelRequested) isEventKind() {}
func (OrchestrationContinuedAsNew) isEventKind()     {}
func (OrchestrationCancelRequested) isEventKind()    {}
func (ExternalSubscribedCancelled) isEventKind()     {}
func (QueueSubscribed) isEventKind()                 {}
func (QueueEventDelivered) isEventKind()             {}
func (QueueSubscriptionCancelled) isEventKind()      {}
func (CustomStatusUpdated) isEventKind()             {}
func (KeyValueSet) isEventKind()                     {}
func (KeyValueCleared) isEventKind()                 {}
func (KeyValuesCleared) isEventKind()                {}

// Type returns the event's serde "type" tag.
func (OrchestrationStarted) Type() string { return "OrchestrationStarted" }

// Type returns the event's serde "type" tag.
func (OrchestrationCompleted) Type() string { return "OrchestrationCompleted" }

// Type returns the event's serde "type" tag.
func (OrchestrationFailed) Type() string { return "OrchestrationFailed" }

// Type returns the event's serde "type" tag.
func (ActivityScheduled) Type() string { return "ActivityScheduled" }

// Type returns the event's serde "type" tag.
func (ActivityCompleted) Type() string { return "ActivityCompleted" }

// Type returns the event's serde "type" tag.
func (ActivityFailed) Type() string { return "ActivityFailed" }

// Type returns the event's serde "type" tag.
func (ActivityCancelRequested) Type() string { return "ActivityCancelRequested" }

// Type returns the event's serde "type" tag.
func (TimerCreated) Type() string { return "TimerCreated" }

// Type returns the event's serde "type" tag.
func (TimerFired) Type() string { return "TimerFired" }

// Type returns the event's serde "type" tag.
func (ExternalSubscribed) Type() string { return "ExternalSubscribed" }

// Type returns the event's serde "type" tag.
func (ExternalEvent) Type() string { return "ExternalEvent" }

// Type returns the event's serde "type" tag.
func (OrchestrationChained) Type() string { return "OrchestrationChained" }

// Type returns the event's serde "type" tag.
func (SubOrchestrationScheduled) Type() string { return "SubOrchestrationScheduled" }

// Type returns the event's serde "type" tag.
func (SubOrchestrationCompleted) Type() string { return "SubOrchestrationCompleted" }

// Type returns the event's serde "type" tag.
func (SubOrchestrationFailed) Type() string { return "SubOrchestrationFailed" }

// Type returns the event's serde "type" tag.
func (SubOrchestrationCancelRequested) Type() string { return "SubOrchestrationCancelRequested" }

// Type returns the event's serde "type" tag.
func (OrchestrationContinuedAsNew) Type() string { return "OrchestrationContinuedAsNew" }

// Type returns the event's serde "type" tag.
func (OrchestrationCancelRequested) Type() string { return "OrchestrationCancelRequested" }

// Type returns the event's serde "type" tag.
func (ExternalSubscribedCancelled) Type() string { return "ExternalSubscribedCancelled" }

// Type returns the event's serde "type" tag.
func (QueueSubscribed) Type() string { return "ExternalSubscribedPersistent" }

// Type returns the event's serde "type" tag.
func (QueueEventDelivered) Type() string { return "ExternalEventPersistent" }

// Type returns the event's serde "type" tag.
func (QueueSubscriptionCancelled) Type() string { return "ExternalSubscribedPersistentCancelled" }

// Type returns the event's serde "type" tag.
func (CustomStatusUpdated) Type() string { return "CustomStatusUpdated" }

// Type returns the event's serde "type" tag.
func (KeyValueSet) Type() string { return "KeyValueSet" }

// Type returns the event's serde "type" tag.
func (KeyValueCleared) Type() string { return "KeyValueCleared" }

// Type returns the event's serde "type" tag.
func (KeyValuesCleared) Type() string { return "KeyValuesCleared" }

// Each MarshalJSON converts to a method-less copy of the type (so the struct
// tags apply without recursing) and puts the "type" tag first.

// MarshalJSON encodes OrchestrationStarted in duroxide's serde JSON.
func (k OrchestrationStarted) MarshalJSON() ([]byte, error) {
	// serde skips a None carry_forward_events but writes Some(vec![]) as [],
	// which a slice with omitempty cannot express; a pointer can.
	type fields struct {
		Name                string               `json:"name"`
		Version             string               `json:"version"`
		Input               string               `json:"input"`
		ParentInstance      *string              `json:"parent_instance"`
		ParentID            *uint64              `json:"parent_id"`
		ParentExecutionID   *uint64              `json:"parent_execution_id,omitempty"`
		CarryForwardEvents  *[]CarryForwardEvent `json:"carry_forward_events,omitempty"`
		InitialCustomStatus *string              `json:"initial_custom_status,omitempty"`
	}
	f := fields{
		Name: k.Name, Version: k.Version, Input: k.Input,
		ParentInstance: k.ParentInstance, ParentID: k.ParentID, ParentExecutionID: k.ParentExecutionID,
		InitialCustomStatus: k.InitialCustomStatus,
	}
	if k.CarryForwardEvents != nil {
		f.CarryForwardEvents = &k.CarryForwardEvents
	}
	return internallyTagged(k.Type(), f)
}

// MarshalJSON encodes OrchestrationCompleted in duroxide's serde JSON.
func (k OrchestrationCompleted) MarshalJSON() ([]byte, error) {
	type fields OrchestrationCompleted
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes OrchestrationFailed in duroxide's serde JSON.
func (k OrchestrationFailed) MarshalJSON() ([]byte, error) {
	if k.Details == nil {
		return nil, errors.New("cdb: encode OrchestrationFailed: Details is nil")
	}
	type fields OrchestrationFailed
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ActivityScheduled in duroxide's serde JSON.
func (k ActivityScheduled) MarshalJSON() ([]byte, error) {
	type fields ActivityScheduled
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ActivityCompleted in duroxide's serde JSON.
func (k ActivityCompleted) MarshalJSON() ([]byte, error) {
	type fields ActivityCompleted
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ActivityFailed in duroxide's serde JSON.
func (k ActivityFailed) MarshalJSON() ([]byte, error) {
	if k.Details == nil {
		return nil, errors.New("cdb: encode ActivityFailed event: Details is nil")
	}
	type fields ActivityFailed
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ActivityCancelRequested in duroxide's serde JSON.
func (k ActivityCancelRequested) MarshalJSON() ([]byte, error) {
	type fields ActivityCancelRequested
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes TimerCreated in duroxide's serde JSON.
func (k TimerCreated) MarshalJSON() ([]byte, error) {
	type fields TimerCreated
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes TimerFired in duroxide's serde JSON.
func (k TimerFired) MarshalJSON() ([]byte, error) {
	type fields TimerFired
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ExternalSubscribed in duroxide's serde JSON.
func (k ExternalSubscribed) MarshalJSON() ([]byte, error) {
	type fields ExternalSubscribed
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ExternalEvent in duroxide's serde JSON.
func (k ExternalEvent) MarshalJSON() ([]byte, error) {
	type fields ExternalEvent
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes OrchestrationChained in duroxide's serde JSON.
func (k OrchestrationChained) MarshalJSON() ([]byte, error) {
	type fields OrchestrationChained
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes SubOrchestrationScheduled in duroxide's serde JSON.
func (k SubOrchestrationScheduled) MarshalJSON() ([]byte, error) {
	type fields SubOrchestrationScheduled
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes SubOrchestrationCompleted in duroxide's serde JSON.
func (k SubOrchestrationCompleted) MarshalJSON() ([]byte, error) {
	type fields SubOrchestrationCompleted
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes SubOrchestrationFailed in duroxide's serde JSON.
func (k SubOrchestrationFailed) MarshalJSON() ([]byte, error) {
	if k.Details == nil {
		return nil, errors.New("cdb: encode SubOrchestrationFailed: Details is nil")
	}
	type fields SubOrchestrationFailed
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes SubOrchestrationCancelRequested in duroxide's serde JSON.
func (k SubOrchestrationCancelRequested) MarshalJSON() ([]byte, error) {
	type fields SubOrchestrationCancelRequested
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes OrchestrationContinuedAsNew in duroxide's serde JSON.
func (k OrchestrationContinuedAsNew) MarshalJSON() ([]byte, error) {
	type fields OrchestrationContinuedAsNew
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes OrchestrationCancelRequested in duroxide's serde JSON.
func (k OrchestrationCancelRequested) MarshalJSON() ([]byte, error) {
	type fields OrchestrationCancelRequested
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes ExternalSubscribedCancelled in duroxide's serde JSON.
func (k ExternalSubscribedCancelled) MarshalJSON() ([]byte, error) {
	type fields ExternalSubscribedCancelled
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes QueueSubscribed in duroxide's serde JSON.
func (k QueueSubscribed) MarshalJSON() ([]byte, error) {
	type fields QueueSubscribed
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes QueueEventDelivered in duroxide's serde JSON.
func (k QueueEventDelivered) MarshalJSON() ([]byte, error) {
	type fields QueueEventDelivered
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes QueueSubscriptionCancelled in duroxide's serde JSON.
func (k QueueSubscriptionCancelled) MarshalJSON() ([]byte, error) {
	type fields QueueSubscriptionCancelled
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes CustomStatusUpdated in duroxide's serde JSON.
func (k CustomStatusUpdated) MarshalJSON() ([]byte, error) {
	type fields CustomStatusUpdated
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes KeyValueSet in duroxide's serde JSON.
func (k KeyValueSet) MarshalJSON() ([]byte, error) {
	type fields KeyValueSet
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes KeyValueCleared in duroxide's serde JSON.
func (k KeyValueCleared) MarshalJSON() ([]byte, error) {
	type fields KeyValueCleared
	return internallyTagged(k.Type(), fields(k))
}

// MarshalJSON encodes KeyValuesCleared in duroxide's serde JSON.
func (k KeyValuesCleared) MarshalJSON() ([]byte, error) {
	return internallyTagged(k.Type(), struct{}{})
}

// UnmarshalEventKind decodes a standalone {"type":"...",...} kind.
func UnmarshalEventKind(data []byte) (EventKind, error) {
	return decodeEventKind(parseJSONObject("EventKind", data))
}

// decodeEventKind reads the "type" tag and the kind's fields from an object
// that may also hold an Event's common fields (serde's flatten).
func decodeEventKind(o *jsonObject) (EventKind, error) {
	var tag string
	requiredField(o, "type", &tag)
	if o.err != nil {
		return nil, o.err
	}
	decode, ok := eventKindDecoder(tag)
	if !ok {
		return nil, unknownVariant("EventKind", tag)
	}
	o.what += " " + tag
	return finishDecode(decode(o), o)
}

func eventKindDecoder(tag string) (func(*jsonObject) EventKind, bool) {
	switch tag {
	case "OrchestrationStarted":
		return decodeOrchestrationStarted, true
	case "OrchestrationCompleted":
		return func(o *jsonObject) EventKind {
			var k OrchestrationCompleted
			requiredField(o, "output", &k.Output)
			return k
		}, true
	case "OrchestrationFailed":
		return func(o *jsonObject) EventKind {
			var k OrchestrationFailed
			requiredDecoded(o, "details", &k.Details, UnmarshalErrorDetails)
			return k
		}, true
	case "ActivityScheduled":
		return decodeActivityScheduled, true
	case "ActivityCompleted":
		return func(o *jsonObject) EventKind {
			var k ActivityCompleted
			requiredField(o, "result", &k.Result)
			optionalField(o, "delivery", &k.Delivery)
			return k
		}, true
	case "ActivityFailed":
		return func(o *jsonObject) EventKind {
			var k ActivityFailed
			requiredDecoded(o, "details", &k.Details, UnmarshalErrorDetails)
			optionalField(o, "delivery", &k.Delivery)
			return k
		}, true
	case "ActivityCancelRequested":
		return func(o *jsonObject) EventKind {
			var k ActivityCancelRequested
			requiredField(o, "reason", &k.Reason)
			return k
		}, true
	case "TimerCreated":
		return func(o *jsonObject) EventKind {
			var k TimerCreated
			requiredField(o, "fire_at_ms", &k.FireAtMs)
			optionalField(o, "purpose", &k.Purpose)
			return k
		}, true
	case "TimerFired":
		return func(o *jsonObject) EventKind {
			var k TimerFired
			requiredField(o, "fire_at_ms", &k.FireAtMs)
			return k
		}, true
	case "ExternalSubscribed":
		return func(o *jsonObject) EventKind {
			var k ExternalSubscribed
			requiredField(o, "name", &k.Name)
			return k
		}, true
	case "ExternalEvent":
		return func(o *jsonObject) EventKind {
			var k ExternalEvent
			requiredField(o, "name", &k.Name)
			requiredField(o, "data", &k.Data)
			return k
		}, true
	case "OrchestrationChained":
		return func(o *jsonObject) EventKind {
			var k OrchestrationChained
			requiredField(o, "name", &k.Name)
			requiredField(o, "instance", &k.Instance)
			requiredField(o, "input", &k.Input)
			return k
		}, true
	case "SubOrchestrationScheduled":
		return func(o *jsonObject) EventKind {
			var k SubOrchestrationScheduled
			requiredField(o, "name", &k.Name)
			requiredField(o, "instance", &k.Instance)
			requiredField(o, "input", &k.Input)
			return k
		}, true
	case "SubOrchestrationCompleted":
		return func(o *jsonObject) EventKind {
			var k SubOrchestrationCompleted
			requiredField(o, "result", &k.Result)
			return k
		}, true
	case "SubOrchestrationFailed":
		return func(o *jsonObject) EventKind {
			var k SubOrchestrationFailed
			requiredDecoded(o, "details", &k.Details, UnmarshalErrorDetails)
			return k
		}, true
	case "SubOrchestrationCancelRequested":
		return func(o *jsonObject) EventKind {
			var k SubOrchestrationCancelRequested
			requiredField(o, "reason", &k.Reason)
			return k
		}, true
	case "OrchestrationContinuedAsNew":
		return func(o *jsonObject) EventKind {
			var k OrchestrationContinuedAsNew
			requiredField(o, "input", &k.Input)
			return k
		}, true
	case "OrchestrationCancelRequested":
		return func(o *jsonObject) EventKind {
			var k OrchestrationCancelRequested
			requiredField(o, "reason", &k.Reason)
			return k
		}, true
	case "ExternalSubscribedCancelled":
		return func(o *jsonObject) EventKind {
			var k ExternalSubscribedCancelled
			requiredField(o, "reason", &k.Reason)
			return k
		}, true
	case "ExternalSubscribedPersistent":
		return func(o *jsonObject) EventKind {
			var k QueueSubscribed
			requiredField(o, "name", &k.Name)
			return k
		}, true
	case "ExternalEventPersistent":
		return func(o *jsonObject) EventKind {
			var k QueueEventDelivered
			requiredField(o, "name", &k.Name)
			requiredField(o, "data", &k.Data)
			return k
		}, true
	case "ExternalSubscribedPersistentCancelled":
		return func(o *jsonObject) EventKind {
			var k QueueSubscriptionCancelled
			requiredField(o, "reason", &k.Reason)
			return k
		}, true
	case "CustomStatusUpdated":
		return func(o *jsonObject) EventKind {
			var k CustomStatusUpdated
			optionalField(o, "status", &k.Status)
			return k
		}, true
	case "KeyValueSet":
		return func(o *jsonObject) EventKind {
			var k KeyValueSet
			requiredField(o, "key", &k.Key)
			requiredField(o, "value", &k.Value)
			defaultedField(o, "last_updated_at_ms", &k.LastUpdatedAtMs)
			return k
		}, true
	case "KeyValueCleared":
		return func(o *jsonObject) EventKind {
			var k KeyValueCleared
			requiredField(o, "key", &k.Key)
			return k
		}, true
	case "KeyValuesCleared":
		return func(*jsonObject) EventKind { return KeyValuesCleared{} }, true
	}
	return nil, false
}

func decodeOrchestrationStarted(o *jsonObject) EventKind {
	var k OrchestrationStarted
	requiredField(o, "name", &k.Name)
	requiredField(o, "version", &k.Version)
	requiredField(o, "input", &k.Input)
	optionalField(o, "parent_instance", &k.ParentInstance)
	optionalField(o, "parent_id", &k.ParentID)
	optionalField(o, "parent_execution_id", &k.ParentExecutionID)
	optionalList(o, "carry_forward_events", &k.CarryForwardEvents)
	optionalField(o, "initial_custom_status", &k.InitialCustomStatus)
	return k
}

func decodeActivityScheduled(o *jsonObject) EventKind {
	var k ActivityScheduled
	requiredField(o, "name", &k.Name)
	requiredField(o, "input", &k.Input)
	optionalField(o, "session_id", &k.SessionID)
	optionalField(o, "tag", &k.Tag)
	return k
}

// unmarshalEventKindInto backs the concrete kinds' UnmarshalJSON: it decodes
// the internally tagged form and insists on the receiver's own type.
func unmarshalEventKindInto[T EventKind](data []byte, dst *T) error {
	kind, err := UnmarshalEventKind(data)
	if err != nil {
		return err
	}
	typed, ok := kind.(T)
	if !ok {
		return fmt.Errorf("cdb: decode EventKind: want type %s, got %s", (*dst).Type(), kind.Type())
	}
	*dst = typed
	return nil
}

// UnmarshalJSON decodes OrchestrationStarted from duroxide's serde JSON.
func (k *OrchestrationStarted) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes OrchestrationCompleted from duroxide's serde JSON.
func (k *OrchestrationCompleted) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes OrchestrationFailed from duroxide's serde JSON.
func (k *OrchestrationFailed) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ActivityScheduled from duroxide's serde JSON.
func (k *ActivityScheduled) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ActivityCompleted from duroxide's serde JSON.
func (k *ActivityCompleted) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ActivityFailed from duroxide's serde JSON.
func (k *ActivityFailed) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ActivityCancelRequested from duroxide's serde JSON.
func (k *ActivityCancelRequested) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes TimerCreated from duroxide's serde JSON.
func (k *TimerCreated) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes TimerFired from duroxide's serde JSON.
func (k *TimerFired) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ExternalSubscribed from duroxide's serde JSON.
func (k *ExternalSubscribed) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes ExternalEvent from duroxide's serde JSON.
func (k *ExternalEvent) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes OrchestrationChained from duroxide's serde JSON.
func (k *OrchestrationChained) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes SubOrchestrationScheduled from duroxide's serde JSON.
func (k *SubOrchestrationScheduled) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes SubOrchestrationCompleted from duroxide's serde JSON.
func (k *SubOrchestrationCompleted) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes SubOrchestrationFailed from duroxide's serde JSON.
func (k *SubOrchestrationFailed) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes SubOrchestrationCancelRequested from duroxide's serde JSON.
func (k *SubOrchestrationCancelRequested) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes OrchestrationContinuedAsNew from duroxide's serde JSON.
func (k *OrchestrationContinuedAsNew) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes OrchestrationCancelRequested from duroxide's serde JSON.
func (k *OrchestrationCancelRequested) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes ExternalSubscribedCancelled from duroxide's serde JSON.
func (k *ExternalSubscribedCancelled) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes QueueSubscribed from duroxide's serde JSON.
func (k *QueueSubscribed) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes QueueEventDelivered from duroxide's serde JSON.
func (k *QueueEventDelivered) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes QueueSubscriptionCancelled from duroxide's serde JSON.
func (k *QueueSubscriptionCancelled) UnmarshalJSON(d []byte) error {
	return unmarshalEventKindInto(d, k)
}

// UnmarshalJSON decodes CustomStatusUpdated from duroxide's serde JSON.
func (k *CustomStatusUpdated) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes KeyValueSet from duroxide's serde JSON.
func (k *KeyValueSet) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes KeyValueCleared from duroxide's serde JSON.
func (k *KeyValueCleared) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// UnmarshalJSON decodes KeyValuesCleared from duroxide's serde JSON.
func (k *KeyValuesCleared) UnmarshalJSON(d []byte) error { return unmarshalEventKindInto(d, k) }

// ErrorDetails is duroxide's structured failure (src/lib.rs), externally
// tagged in JSON: {"Infrastructure":{...}}, {"Configuration":{...}},
// {"Application":{...}} or {"Poison":{...}}. Decode with
// UnmarshalErrorDetails.
type ErrorDetails interface {
	isErrorDetails()
	// Variant is the serde tag, e.g. "Poison".
	Variant() string
	// Category is "infrastructure", "configuration", "application" or "poison".
	Category() string
	// IsRetryable reports the failure's own retry flag; configuration and
	// poison failures are never retryable.
	IsRetryable() bool
	// DisplayMessage is duroxide's display_message(), the text stored as a
	// failed execution's output.
	DisplayMessage() string
}

// InfrastructureError is a provider or data failure that aborted a turn.
type InfrastructureError struct {
	Operation string `json:"operation"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// ConfigurationError is a deployment problem such as nondeterminism.
type ConfigurationError struct {
	Kind     ConfigErrorKind `json:"kind"`
	Resource string          `json:"resource"`
	Message  *string         `json:"message"` // encoded as null when nil
}

// ApplicationError is a business failure, the only kind orchestration code sees.
type ApplicationError struct {
	Kind      AppErrorKind `json:"kind"`
	Message   string       `json:"message"`
	Retryable bool         `json:"retryable"`
}

// PoisonError is a message that exceeded its maximum fetch attempts.
type PoisonError struct {
	AttemptCount uint32            `json:"attempt_count"`
	MaxAttempts  uint32            `json:"max_attempts"`
	MessageType  PoisonMessageType `json:"message_type"`
	Message      string            `json:"message"` // the poisoned message, serialized for debugging
}

func (InfrastructureError) isErrorDetails() {}
func (ConfigurationError) isErrorDetails()  {}
func (ApplicationError) isErrorDetails()    {}
func (PoisonError) isErrorDetails()         {}

// Variant returns the serde tag.
func (InfrastructureError) Variant() string { return "Infrastructure" }

// Variant returns the serde tag.
func (ConfigurationError) Variant() string { return "Configuration" }

// Variant returns the serde tag.
func (ApplicationError) Variant() string { return "Application" }

// Variant returns the serde tag.
func (PoisonError) Variant() string { return "Poison" }

// Category names the failure's category.
func (InfrastructureError) Category() string { return "infrastructure" }

// Category names the failure's category.
func (ConfigurationError) Category() string { return "configuration" }

// Category names the failure's category.
func (ApplicationError) Category() string { return "application" }

// Category names the failure's category.
func (PoisonError) Category() string { return "poison" }

// IsRetryable reports whether the failure may go away on retry.
func (d InfrastructureError) IsRetryable() bool { return d.Retryable }

// IsRetryable reports whether the failure may go away on retry.
func (ConfigurationError) IsRetryable() bool { return false }

// IsRetryable reports whether the failure may go away on retry.
func (d ApplicationError) IsRetryable() bool { return d.Retryable }

// IsRetryable reports whether the failure may go away on retry.
func (PoisonError) IsRetryable() bool { return false }

// DisplayMessage is the failure as duroxide displays it.
func (d InfrastructureError) DisplayMessage() string {
	return fmt.Sprintf("infrastructure:%s: %s", d.Operation, d.Message)
}

// DisplayMessage follows duroxide: Nondeterminism is the only kind, and the
// resource is shown only when there is no message.
func (d ConfigurationError) DisplayMessage() string {
	if d.Message != nil {
		return "nondeterministic: " + *d.Message
	}
	return "nondeterministic in " + d.Resource
}

// DisplayMessage is the failure as duroxide displays it.
func (d ApplicationError) DisplayMessage() string {
	switch kind := d.Kind.(type) {
	case AppCancelled:
		return "canceled: " + kind.Reason
	case AppPanicked:
		return "orchestration panicked: " + d.Message
	}
	return d.Message
}

// DisplayMessage is the failure as duroxide displays it.
func (d PoisonError) DisplayMessage() string {
	switch t := d.MessageType.(type) {
	case PoisonActivity:
		return fmt.Sprintf("poison: activity %s#%d exceeded %d attempts (max %d)",
			t.ActivityName, t.ActivityID, d.AttemptCount, d.MaxAttempts)
	case PoisonFailedDeserialization:
		return fmt.Sprintf("poison: orchestration %s history deserialization failed after %d attempts (max %d): %s",
			t.Instance, d.AttemptCount, d.MaxAttempts, t.Error)
	case PoisonOrchestration:
		return fmt.Sprintf("poison: orchestration %s exceeded %d attempts (max %d)",
			t.Instance, d.AttemptCount, d.MaxAttempts)
	}
	return fmt.Sprintf("poison: exceeded %d attempts (max %d)", d.AttemptCount, d.MaxAttempts)
}

// MarshalJSON encodes InfrastructureError in duroxide's serde JSON.
func (d InfrastructureError) MarshalJSON() ([]byte, error) {
	type fields InfrastructureError
	return externallyTagged(d.Variant(), fields(d))
}

// MarshalJSON encodes ConfigurationError in duroxide's serde JSON.
func (d ConfigurationError) MarshalJSON() ([]byte, error) {
	type fields ConfigurationError
	return externallyTagged(d.Variant(), fields(d))
}

// MarshalJSON encodes ApplicationError in duroxide's serde JSON.
func (d ApplicationError) MarshalJSON() ([]byte, error) {
	if d.Kind == nil {
		return nil, errors.New("cdb: encode ErrorDetails Application: Kind is nil")
	}
	type fields ApplicationError
	return externallyTagged(d.Variant(), fields(d))
}

// MarshalJSON encodes PoisonError in duroxide's serde JSON.
func (d PoisonError) MarshalJSON() ([]byte, error) {
	if d.MessageType == nil {
		return nil, errors.New("cdb: encode ErrorDetails Poison: MessageType is nil")
	}
	type fields PoisonError
	return externallyTagged(d.Variant(), fields(d))
}

// MarshalErrorDetails encodes error details exactly as serde_json would.
func MarshalErrorDetails(d ErrorDetails) ([]byte, error) {
	if d == nil {
		return nil, errors.New("cdb: encode ErrorDetails: nil")
	}
	return marshalCompact(d)
}

// UnmarshalErrorDetails decodes {"Variant":{...}}. An unknown variant (or
// error kind, or poison message type) wraps ErrUnknownVariant.
func UnmarshalErrorDetails(data []byte) (ErrorDetails, error) {
	tag, body, err := splitExternallyTagged("ErrorDetails", data)
	if err != nil {
		return nil, err
	}
	o := parseJSONObject("ErrorDetails "+tag, body)
	switch tag {
	case "Infrastructure":
		var d InfrastructureError
		requiredField(o, "operation", &d.Operation)
		requiredField(o, "message", &d.Message)
		requiredField(o, "retryable", &d.Retryable)
		return finishDecode[ErrorDetails](d, o)
	case "Configuration":
		var d ConfigurationError
		requiredField(o, "kind", &d.Kind)
		requiredField(o, "resource", &d.Resource)
		optionalField(o, "message", &d.Message)
		return finishDecode[ErrorDetails](d, o)
	case "Application":
		var d ApplicationError
		requiredDecoded(o, "kind", &d.Kind, UnmarshalAppErrorKind)
		requiredField(o, "message", &d.Message)
		requiredField(o, "retryable", &d.Retryable)
		return finishDecode[ErrorDetails](d, o)
	case "Poison":
		var d PoisonError
		requiredField(o, "attempt_count", &d.AttemptCount)
		requiredField(o, "max_attempts", &d.MaxAttempts)
		requiredDecoded(o, "message_type", &d.MessageType, UnmarshalPoisonMessageType)
		requiredField(o, "message", &d.Message)
		return finishDecode[ErrorDetails](d, o)
	}
	return nil, unknownVariant("ErrorDetails", tag)
}

// unmarshalErrorDetailsInto backs the concrete types' UnmarshalJSON.
func unmarshalErrorDetailsInto[T ErrorDetails](data []byte, dst *T) error {
	d, err := UnmarshalErrorDetails(data)
	if err != nil {
		return err
	}
	typed, ok := d.(T)
	if !ok {
		return fmt.Errorf("cdb: decode ErrorDetails: want variant %s, got %s", (*dst).Variant(), d.Variant())
	}
	*dst = typed
	return nil
}

// UnmarshalJSON decodes InfrastructureError from duroxide's serde JSON.
func (d *InfrastructureError) UnmarshalJSON(b []byte) error { return unmarshalErrorDetailsInto(b, d) }

// UnmarshalJSON decodes ConfigurationError from duroxide's serde JSON.
func (d *ConfigurationError) UnmarshalJSON(b []byte) error { return unmarshalErrorDetailsInto(b, d) }

// UnmarshalJSON decodes ApplicationError from duroxide's serde JSON.
func (d *ApplicationError) UnmarshalJSON(b []byte) error { return unmarshalErrorDetailsInto(b, d) }

// UnmarshalJSON decodes PoisonError from duroxide's serde JSON.
func (d *PoisonError) UnmarshalJSON(b []byte) error { return unmarshalErrorDetailsInto(b, d) }

// ConfigErrorKind is duroxide's ConfigErrorKind, a unit-only enum encoded as
// a bare string.
type ConfigErrorKind string

// ConfigNondeterminism is the only ConfigErrorKind in duroxide 0.1.29.
const ConfigNondeterminism ConfigErrorKind = "Nondeterminism"

// MarshalJSON encodes ConfigErrorKind in duroxide's serde JSON.
func (k ConfigErrorKind) MarshalJSON() ([]byte, error) {
	if k != ConfigNondeterminism {
		return nil, fmt.Errorf("cdb: encode ConfigErrorKind: %w %q", ErrUnknownVariant, string(k))
	}
	return marshalCompact(string(k))
}

// UnmarshalJSON decodes ConfigErrorKind from duroxide's serde JSON.
func (k *ConfigErrorKind) UnmarshalJSON(data []byte) error {
	var name string
	if err := json.Unmarshal(data, &name); err != nil {
		return fmt.Errorf("cdb: decode ConfigErrorKind: %w", err)
	}
	if ConfigErrorKind(name) != ConfigNondeterminism {
		return unknownVariant("ConfigErrorKind", name)
	}
	*k = ConfigErrorKind(name)
	return nil
}

// AppErrorKind is duroxide's AppErrorKind: the unit variants encode as bare
// strings ("ActivityFailed"), Cancelled as {"Cancelled":{"reason":"..."}}.
type AppErrorKind interface {
	isAppErrorKind()
	// Variant is the serde tag, e.g. "Cancelled".
	Variant() string
}

// AppActivityFailed is the AppErrorKind of a failed activity.
type AppActivityFailed struct{}

// AppOrchestrationFailed is the AppErrorKind of orchestration code that
// returned an error.
type AppOrchestrationFailed struct{}

// AppPanicked is the AppErrorKind of code that panicked.
type AppPanicked struct{}

// AppCancelled is a cancellation; DisplayMessage shows "canceled: {reason}".
type AppCancelled struct {
	Reason string `json:"reason"`
}

func (AppActivityFailed) isAppErrorKind()      {}
func (AppOrchestrationFailed) isAppErrorKind() {}
func (AppPanicked) isAppErrorKind()            {}
func (AppCancelled) isAppErrorKind()           {}

// Variant returns the serde tag.
func (AppActivityFailed) Variant() string { return "ActivityFailed" }

// Variant returns the serde tag.
func (AppOrchestrationFailed) Variant() string { return "OrchestrationFailed" }

// Variant returns the serde tag.
func (AppPanicked) Variant() string { return "Panicked" }

// Variant returns the serde tag.
func (AppCancelled) Variant() string { return "Cancelled" }

// MarshalJSON encodes AppActivityFailed in duroxide's serde JSON.
func (k AppActivityFailed) MarshalJSON() ([]byte, error) { return marshalCompact(k.Variant()) }

// MarshalJSON encodes AppOrchestrationFailed in duroxide's serde JSON.
func (k AppOrchestrationFailed) MarshalJSON() ([]byte, error) { return marshalCompact(k.Variant()) }

// MarshalJSON encodes AppPanicked in duroxide's serde JSON.
func (k AppPanicked) MarshalJSON() ([]byte, error) { return marshalCompact(k.Variant()) }

// MarshalJSON encodes AppCancelled in duroxide's serde JSON.
func (k AppCancelled) MarshalJSON() ([]byte, error) {
	type fields AppCancelled
	return externallyTagged(k.Variant(), fields(k))
}

// UnmarshalAppErrorKind decodes an AppErrorKind. Like serde_json it also
// accepts a unit variant written as {"Panicked":null}.
func UnmarshalAppErrorKind(data []byte) (AppErrorKind, error) {
	var name string
	if json.Unmarshal(data, &name) == nil {
		return appErrorKindUnit(name)
	}
	tag, body, err := splitExternallyTagged("AppErrorKind", data)
	if err != nil {
		return nil, err
	}
	if tag == "Cancelled" {
		o := parseJSONObject("AppErrorKind Cancelled", body)
		var k AppCancelled
		requiredField(o, "reason", &k.Reason)
		return finishDecode[AppErrorKind](k, o)
	}
	kind, err := appErrorKindUnit(tag)
	if err != nil {
		return nil, err
	}
	if !isJSONNull(body) {
		return nil, fmt.Errorf("cdb: decode AppErrorKind %s: a unit variant takes no fields", tag)
	}
	return kind, nil
}

func appErrorKindUnit(name string) (AppErrorKind, error) {
	switch name {
	case "ActivityFailed":
		return AppActivityFailed{}, nil
	case "OrchestrationFailed":
		return AppOrchestrationFailed{}, nil
	case "Panicked":
		return AppPanicked{}, nil
	case "Cancelled":
		return nil, errors.New(`cdb: decode AppErrorKind: Cancelled needs {"Cancelled":{"reason":...}}`)
	}
	return nil, unknownVariant("AppErrorKind", name)
}

// PoisonMessageType identifies what was poisoned, externally tagged:
// {"Orchestration":{...}}, {"Activity":{...}} or {"FailedDeserialization":{...}}.
type PoisonMessageType interface {
	isPoisonMessageType()
	// Variant is the serde tag, e.g. "Activity".
	Variant() string
}

// PoisonOrchestration is a poisoned orchestration batch.
type PoisonOrchestration struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
}

// PoisonActivity is a poisoned activity execution.
type PoisonActivity struct {
	Instance     string `json:"instance"`
	ExecutionID  uint64 `json:"execution_id"`
	ActivityName string `json:"activity_name"`
	ActivityID   uint64 `json:"activity_id"`
}

// PoisonFailedDeserialization is history that could not be decoded (for
// example events from a newer duroxide).
type PoisonFailedDeserialization struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	Error       string `json:"error"`
}

func (PoisonOrchestration) isPoisonMessageType()         {}
func (PoisonActivity) isPoisonMessageType()              {}
func (PoisonFailedDeserialization) isPoisonMessageType() {}

// Variant returns the serde tag.
func (PoisonOrchestration) Variant() string { return "Orchestration" }

// Variant returns the serde tag.
func (PoisonActivity) Variant() string { return "Activity" }

// Variant returns the serde tag.
func (PoisonFailedDeserialization) Variant() string { return "FailedDeserialization" }

// MarshalJSON encodes PoisonOrchestration in duroxide's serde JSON.
func (t PoisonOrchestration) MarshalJSON() ([]byte, error) {
	type fields PoisonOrchestration
	return externallyTagged(t.Variant(), fields(t))
}

// MarshalJSON encodes PoisonActivity in duroxide's serde JSON.
func (t PoisonActivity) MarshalJSON() ([]byte, error) {
	type fields PoisonActivity
	return externallyTagged(t.Variant(), fields(t))
}

// MarshalJSON encodes PoisonFailedDeserialization in duroxide's serde JSON.
func (t PoisonFailedDeserialization) MarshalJSON() ([]byte, error) {
	type fields PoisonFailedDeserialization
	return externallyTagged(t.Variant(), fields(t))
}

// UnmarshalPoisonMessageType decodes a PoisonMessageType.
func UnmarshalPoisonMessageType(data []byte) (PoisonMessageType, error) {
	tag, body, err := splitExternallyTagged("PoisonMessageType", data)
	if err != nil {
		return nil, err
	}
	o := parseJSONObject("PoisonMessageType "+tag, body)
	switch tag {
	case "Orchestration":
		var t PoisonOrchestration
		requiredField(o, "instance", &t.Instance)
		requiredField(o, "execution_id", &t.ExecutionID)
		return finishDecode[PoisonMessageType](t, o)
	case "Activity":
		var t PoisonActivity
		requiredField(o, "instance", &t.Instance)
		requiredField(o, "execution_id", &t.ExecutionID)
		requiredField(o, "activity_name", &t.ActivityName)
		requiredField(o, "activity_id", &t.ActivityID)
		return finishDecode[PoisonMessageType](t, o)
	case "FailedDeserialization":
		var t PoisonFailedDeserialization
		requiredField(o, "instance", &t.Instance)
		requiredField(o, "execution_id", &t.ExecutionID)
		requiredField(o, "error", &t.Error)
		return finishDecode[PoisonMessageType](t, o)
	}
	return nil, unknownVariant("PoisonMessageType", tag)
}
