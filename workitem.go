package cdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// WorkItem is a queue message: duroxide's WorkItem enum (src/providers/mod.rs).
// The concrete types below are its variants, named as the Rust variants with
// the suffix Message (the package doc's Names); Kind is the variant's tag.
// Each encodes to serde's externally tagged form, e.g.
// {"StartOrchestration":{...}}, so json.Marshal works on the interface.
// Decode with UnmarshalWorkItem.
//
// ActivityExecuteMessage goes to the worker queue, every other variant to the
// orchestrator queue of the instance InstanceID names.
type WorkItem interface {
	isWorkItem()
	// Kind is the serde variant tag, e.g. "StartOrchestration".
	Kind() string
	// InstanceID is the instance whose queue the item routes to: the parent
	// for SubOrchestrationCompletedMessage and SubOrchestrationFailedMessage,
	// the item's own instance otherwise.
	InstanceID() string
}

// CarryForwardEvent is one persistent event carried across continue-as-new,
// a Rust (name, data) tuple encoded as a two-element JSON array.
type CarryForwardEvent struct {
	Name string
	Data string
}

// MarshalJSON encodes the tuple form ["name","data"].
func (c CarryForwardEvent) MarshalJSON() ([]byte, error) {
	return marshalCompact([2]string{c.Name, c.Data})
}

// UnmarshalJSON accepts exactly two strings, as serde does for a (String, String).
func (c *CarryForwardEvent) UnmarshalJSON(data []byte) error {
	var pair []*string
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("cdb: decode carry-forward event: %w", err)
	}
	if len(pair) != 2 || pair[0] == nil || pair[1] == nil {
		return errors.New("cdb: decode carry-forward event: want a [name, data] pair of strings")
	}
	*c = CarryForwardEvent{Name: *pair[0], Data: *pair[1]}
	return nil
}

// StartOrchestrationMessage starts an instance (or a sub-orchestration, when the
// parent fields are set). Nil optional fields encode as null, except
// ParentExecutionID, which is omitted so a root start keeps 0.1.29's bytes.
type StartOrchestrationMessage struct {
	Instance       string  `json:"instance"`
	Orchestration  string  `json:"orchestration"`
	Input          string  `json:"input"`
	Version        *string `json:"version"` // nil: the runtime resolves it from its registry
	ParentInstance *string `json:"parent_instance"`
	ParentID       *uint64 `json:"parent_id"` // the parent's SubOrchestrationScheduled event id
	// ParentExecutionID is the parent execution that scheduled the child
	// (duroxide 0.1.30); nil for roots and for starts written by 0.1.29.
	ParentExecutionID *uint64 `json:"parent_execution_id,omitempty"`
	ExecutionID       uint64  `json:"execution_id"`
	// Trace is the trace context of the span that enqueued the start. It
	// is Go only, never part of duroxide's JSON: a provider that is a
	// TraceCarrier keeps it beside the message and hands it back as the
	// instance's OrchestrationItem.TraceContext.
	Trace TraceContext `json:"-"`
}

// ActivityExecuteMessage asks a worker to run an activity.
type ActivityExecuteMessage struct {
	Instance    string  `json:"instance"`
	ExecutionID uint64  `json:"execution_id"`
	ID          uint64  `json:"id"` // the ActivityScheduled event id
	Name        string  `json:"name"`
	Input       string  `json:"input"`
	SessionID   *string `json:"session_id,omitempty"`
	Tag         *string `json:"tag,omitempty"`
	// RetryAttempt is the attempt of a retry policy this activity is (1
	// for the first, 2 for the policy's first retry, ...); nil for an
	// activity scheduled without a policy. It is this runtime's: duroxide
	// ignores a field it does not know, and writes none.
	RetryAttempt *uint32 `json:"retry_attempt,omitempty"`
	// Trace is the trace context of the turn that scheduled the activity.
	// It is Go only, never part of duroxide's JSON: a provider that is a
	// TraceCarrier keeps it beside the item and hands it back with the
	// item FetchWorkItem returns.
	Trace TraceContext `json:"-"`
	// VisibleAt is when the item became takeable, by the store's clock: set
	// on the item FetchWorkItem returns, by a provider that reports it
	//; zero otherwise and on what is enqueued. An
	// abandon with a delay moves it, so after a retry it is when the item
	// became takeable again, not when it was first enqueued. Go only, never
	// part of duroxide's JSON.
	VisibleAt time.Time `json:"-"`
}

// ActivityCompletedMessage reports an activity's result to its orchestration.
type ActivityCompletedMessage struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	Result      string `json:"result"`
	// Delivery is this runtime's: which run of the activity's attempt the
	// outcome comes from, set only when it is not the first (an earlier
	// run ended without its result stored: a crash, a lost lock), so the
	// history shows the run that was lost. duroxide ignores it.
	Delivery *uint32 `json:"delivery,omitempty"`
}

// ActivityFailedMessage reports an activity's failure to its orchestration.
type ActivityFailedMessage struct {
	Instance    string       `json:"instance"`
	ExecutionID uint64       `json:"execution_id"`
	ID          uint64       `json:"id"`
	Details     ErrorDetails `json:"details"`
	// Delivery is this runtime's: which run of the activity's attempt the
	// outcome comes from, set only when it is not the first (an earlier
	// run ended without its result stored: a crash, a lost lock), so the
	// history shows the run that was lost. duroxide ignores it.
	Delivery *uint32 `json:"delivery,omitempty"`
}

// TimerFiredMessage is a timer's completion; it is enqueued invisible until FireAtMs.
type TimerFiredMessage struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`         // the TimerCreated event id
	FireAtMs    uint64 `json:"fire_at_ms"` // when it fires, in milliseconds since the Unix epoch
}

// ExternalRaisedMessage delivers an external event, matched by name.
type ExternalRaisedMessage struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

// SubOrchestrationCompletedMessage reports a child's result to its parent instance.
type SubOrchestrationCompletedMessage struct {
	ParentInstance    string `json:"parent_instance"`
	ParentExecutionID uint64 `json:"parent_execution_id"`
	ParentID          uint64 `json:"parent_id"` // the parent's SubOrchestrationScheduled event id
	Result            string `json:"result"`
}

// SubOrchestrationFailedMessage reports a child's failure to its parent instance.
type SubOrchestrationFailedMessage struct {
	ParentInstance    string       `json:"parent_instance"`
	ParentExecutionID uint64       `json:"parent_execution_id"`
	ParentID          uint64       `json:"parent_id"`
	Details           ErrorDetails `json:"details"`
}

// CancelInstanceMessage requests an orchestration's cancellation.
type CancelInstanceMessage struct {
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
}

// ContinueAsNewMessage starts the instance's next execution. CarryForwardEvents is
// always encoded (nil as []); the parent link and InitialCustomStatus are
// omitted when nil.
type ContinueAsNewMessage struct {
	Instance      string  `json:"instance"`
	Orchestration string  `json:"orchestration"`
	Input         string  `json:"input"`
	Version       *string `json:"version"`
	// The parent link of a sub-orchestration that continues as new
	// (duroxide 0.1.30): nil for a root, and in every message written by
	// 0.1.29, whose ContinueAsNew had no parent fields.
	ParentInstance      *string             `json:"parent_instance,omitempty"`
	ParentID            *uint64             `json:"parent_id,omitempty"`
	ParentExecutionID   *uint64             `json:"parent_execution_id,omitempty"`
	CarryForwardEvents  []CarryForwardEvent `json:"carry_forward_events"`
	InitialCustomStatus *string             `json:"initial_custom_status,omitempty"`
}

// QueueEventMessage delivers a persistent (FIFO mailbox) event, matched by name.
type QueueEventMessage struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

func (StartOrchestrationMessage) isWorkItem()        {}
func (ActivityExecuteMessage) isWorkItem()           {}
func (ActivityCompletedMessage) isWorkItem()         {}
func (ActivityFailedMessage) isWorkItem()            {}
func (TimerFiredMessage) isWorkItem()                {}
func (ExternalRaisedMessage) isWorkItem()            {}
func (SubOrchestrationCompletedMessage) isWorkItem() {}
func (SubOrchestrationFailedMessage) isWorkItem()    {}
func (CancelInstanceMessage) isWorkItem()            {}
func (ContinueAsNewMessage) isWorkItem()             {}
func (QueueEventMessage) isWorkItem()                {}

// Kind returns the work item's serde variant tag.
func (StartOrchestrationMessage) Kind() string { return "StartOrchestration" }

// Kind returns the work item's serde variant tag.
func (ActivityExecuteMessage) Kind() string { return "ActivityExecute" }

// Kind returns the work item's serde variant tag.
func (ActivityCompletedMessage) Kind() string { return "ActivityCompleted" }

// Kind returns the work item's serde variant tag.
func (ActivityFailedMessage) Kind() string { return "ActivityFailed" }

// Kind returns the work item's serde variant tag.
func (TimerFiredMessage) Kind() string { return "TimerFired" }

// Kind returns the work item's serde variant tag.
func (ExternalRaisedMessage) Kind() string { return "ExternalRaised" }

// Kind returns the work item's serde variant tag.
func (SubOrchestrationCompletedMessage) Kind() string { return "SubOrchCompleted" }

// Kind returns the work item's serde variant tag.
func (SubOrchestrationFailedMessage) Kind() string { return "SubOrchFailed" }

// Kind returns the work item's serde variant tag.
func (CancelInstanceMessage) Kind() string { return "CancelInstance" }

// Kind returns the work item's serde variant tag.
func (ContinueAsNewMessage) Kind() string { return "ContinueAsNew" }

// Kind returns the work item's serde variant tag.
func (QueueEventMessage) Kind() string { return "QueueMessage" }

// InstanceID returns the instance whose queue the item routes to.
func (w StartOrchestrationMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityExecuteMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityCompletedMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityFailedMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w TimerFiredMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ExternalRaisedMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w SubOrchestrationCompletedMessage) InstanceID() string { return w.ParentInstance }

// InstanceID returns the instance whose queue the item routes to.
func (w SubOrchestrationFailedMessage) InstanceID() string { return w.ParentInstance }

// InstanceID returns the instance whose queue the item routes to.
func (w CancelInstanceMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ContinueAsNewMessage) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w QueueEventMessage) InstanceID() string { return w.Instance }

// Each MarshalJSON converts to a method-less copy of the type (so the struct
// tags apply without recursing) and wraps it in the variant tag.

// MarshalJSON encodes StartOrchestration in duroxide's serde JSON.
func (w StartOrchestrationMessage) MarshalJSON() ([]byte, error) {
	type fields StartOrchestrationMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityExecuteMessage in duroxide's serde JSON.
func (w ActivityExecuteMessage) MarshalJSON() ([]byte, error) {
	type fields ActivityExecuteMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityCompleted in duroxide's serde JSON.
func (w ActivityCompletedMessage) MarshalJSON() ([]byte, error) {
	type fields ActivityCompletedMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityFailed in duroxide's serde JSON.
func (w ActivityFailedMessage) MarshalJSON() ([]byte, error) {
	if w.Details == nil {
		return nil, errors.New("cdb: encode ActivityFailed: Details is nil")
	}
	type fields ActivityFailedMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes TimerFired in duroxide's serde JSON.
func (w TimerFiredMessage) MarshalJSON() ([]byte, error) {
	type fields TimerFiredMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ExternalRaisedMessage in duroxide's serde JSON.
func (w ExternalRaisedMessage) MarshalJSON() ([]byte, error) {
	type fields ExternalRaisedMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes SubOrchestrationCompletedMessage in duroxide's serde JSON.
func (w SubOrchestrationCompletedMessage) MarshalJSON() ([]byte, error) {
	type fields SubOrchestrationCompletedMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes SubOrchestrationFailedMessage in duroxide's serde JSON.
func (w SubOrchestrationFailedMessage) MarshalJSON() ([]byte, error) {
	if w.Details == nil {
		return nil, errors.New("cdb: encode SubOrchFailed: Details is nil")
	}
	type fields SubOrchestrationFailedMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes CancelInstance in duroxide's serde JSON.
func (w CancelInstanceMessage) MarshalJSON() ([]byte, error) {
	type fields CancelInstanceMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ContinueAsNew in duroxide's serde JSON.
func (w ContinueAsNewMessage) MarshalJSON() ([]byte, error) {
	type fields ContinueAsNewMessage
	if w.CarryForwardEvents == nil {
		// serde always writes the Vec, so an empty list is [] rather than null.
		w.CarryForwardEvents = []CarryForwardEvent{}
	}
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes QueueEventMessage in duroxide's serde JSON.
func (w QueueEventMessage) MarshalJSON() ([]byte, error) {
	type fields QueueEventMessage
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalWorkItem encodes a work item exactly as serde_json would (compact,
// no HTML escaping). json.Marshal gives the same JSON with <, > and &
// escaped as \u003c, \u003e and \u0026.
func MarshalWorkItem(item WorkItem) ([]byte, error) {
	if item == nil {
		return nil, errors.New("cdb: encode WorkItem: nil")
	}
	return marshalCompact(item)
}

// UnmarshalWorkItem decodes {"Variant":{...}} into the matching concrete
// type. An unknown variant tag wraps ErrUnknownVariant.
func UnmarshalWorkItem(data []byte) (WorkItem, error) {
	tag, body, err := splitExternallyTagged("WorkItem", data)
	if err != nil {
		return nil, err
	}
	decode, ok := workItemDecoder(tag)
	if !ok {
		return nil, unknownVariant("WorkItem", tag)
	}
	o := parseJSONObject("WorkItem "+tag, body)
	return finishDecode(decode(o), o)
}

func workItemDecoder(tag string) (func(*jsonObject) WorkItem, bool) {
	switch tag {
	case "StartOrchestration":
		return decodeStartOrchestration, true
	case "ActivityExecute":
		return decodeActivityExecute, true
	case "ActivityCompleted":
		return decodeActivityCompleted, true
	case "ActivityFailed":
		return decodeActivityFailed, true
	case "TimerFired":
		return decodeTimerFired, true
	case "ExternalRaised":
		return decodeExternalRaised, true
	case "SubOrchCompleted":
		return decodeSubOrchCompleted, true
	case "SubOrchFailed":
		return decodeSubOrchFailed, true
	case "CancelInstance":
		return decodeCancelInstance, true
	case "ContinueAsNew":
		return decodeContinueAsNew, true
	case "QueueMessage":
		return decodeQueueMessage, true
	}
	return nil, false
}

func decodeStartOrchestration(o *jsonObject) WorkItem {
	var w StartOrchestrationMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "orchestration", &w.Orchestration)
	requiredField(o, "input", &w.Input)
	optionalField(o, "version", &w.Version)
	optionalField(o, "parent_instance", &w.ParentInstance)
	optionalField(o, "parent_id", &w.ParentID)
	optionalField(o, "parent_execution_id", &w.ParentExecutionID)
	requiredField(o, "execution_id", &w.ExecutionID)
	return w
}

func decodeActivityExecute(o *jsonObject) WorkItem {
	var w ActivityExecuteMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "name", &w.Name)
	requiredField(o, "input", &w.Input)
	optionalField(o, "session_id", &w.SessionID)
	optionalField(o, "tag", &w.Tag)
	optionalField(o, "retry_attempt", &w.RetryAttempt)
	return w
}

func decodeActivityCompleted(o *jsonObject) WorkItem {
	var w ActivityCompletedMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "result", &w.Result)
	optionalField(o, "delivery", &w.Delivery)
	return w
}

func decodeActivityFailed(o *jsonObject) WorkItem {
	var w ActivityFailedMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredDecoded(o, "details", &w.Details, UnmarshalErrorDetails)
	optionalField(o, "delivery", &w.Delivery)
	return w
}

func decodeTimerFired(o *jsonObject) WorkItem {
	var w TimerFiredMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "fire_at_ms", &w.FireAtMs)
	return w
}

func decodeExternalRaised(o *jsonObject) WorkItem {
	var w ExternalRaisedMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "name", &w.Name)
	requiredField(o, "data", &w.Data)
	return w
}

func decodeSubOrchCompleted(o *jsonObject) WorkItem {
	var w SubOrchestrationCompletedMessage
	requiredField(o, "parent_instance", &w.ParentInstance)
	requiredField(o, "parent_execution_id", &w.ParentExecutionID)
	requiredField(o, "parent_id", &w.ParentID)
	requiredField(o, "result", &w.Result)
	return w
}

func decodeSubOrchFailed(o *jsonObject) WorkItem {
	var w SubOrchestrationFailedMessage
	requiredField(o, "parent_instance", &w.ParentInstance)
	requiredField(o, "parent_execution_id", &w.ParentExecutionID)
	requiredField(o, "parent_id", &w.ParentID)
	requiredDecoded(o, "details", &w.Details, UnmarshalErrorDetails)
	return w
}

func decodeCancelInstance(o *jsonObject) WorkItem {
	var w CancelInstanceMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "reason", &w.Reason)
	return w
}

func decodeContinueAsNew(o *jsonObject) WorkItem {
	var w ContinueAsNewMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "orchestration", &w.Orchestration)
	requiredField(o, "input", &w.Input)
	optionalField(o, "version", &w.Version)
	optionalField(o, "parent_instance", &w.ParentInstance)
	optionalField(o, "parent_id", &w.ParentID)
	optionalField(o, "parent_execution_id", &w.ParentExecutionID)
	defaultedField(o, "carry_forward_events", &w.CarryForwardEvents)
	optionalField(o, "initial_custom_status", &w.InitialCustomStatus)
	return w
}

func decodeQueueMessage(o *jsonObject) WorkItem {
	var w QueueEventMessage
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "name", &w.Name)
	requiredField(o, "data", &w.Data)
	return w
}

// unmarshalWorkItemInto backs the concrete types' UnmarshalJSON: it decodes
// the tagged form and insists on the receiver's own variant.
func unmarshalWorkItemInto[T WorkItem](data []byte, dst *T) error {
	item, err := UnmarshalWorkItem(data)
	if err != nil {
		return err
	}
	typed, ok := item.(T)
	if !ok {
		return fmt.Errorf("cdb: decode WorkItem: want variant %s, got %s", (*dst).Kind(), item.Kind())
	}
	*dst = typed
	return nil
}

// UnmarshalJSON decodes StartOrchestration from duroxide's serde JSON.
func (w *StartOrchestrationMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes ActivityExecuteMessage from duroxide's serde JSON.
func (w *ActivityExecuteMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes ActivityCompleted from duroxide's serde JSON.
func (w *ActivityCompletedMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes ActivityFailed from duroxide's serde JSON.
func (w *ActivityFailedMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes TimerFired from duroxide's serde JSON.
func (w *TimerFiredMessage) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ExternalRaisedMessage from duroxide's serde JSON.
func (w *ExternalRaisedMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes SubOrchestrationCompletedMessage from duroxide's serde JSON.
func (w *SubOrchestrationCompletedMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes SubOrchestrationFailedMessage from duroxide's serde JSON.
func (w *SubOrchestrationFailedMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes CancelInstance from duroxide's serde JSON.
func (w *CancelInstanceMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes ContinueAsNew from duroxide's serde JSON.
func (w *ContinueAsNewMessage) UnmarshalJSON(data []byte) error {
	return unmarshalWorkItemInto(data, w)
}

// UnmarshalJSON decodes QueueEventMessage from duroxide's serde JSON.
func (w *QueueEventMessage) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// WithVisibleAt is item with at as its VisibleAt when it is an activity
// (the one kind that carries it), for a provider handing back a fetched
// worker item.
func WithVisibleAt(item WorkItem, at time.Time) WorkItem {
	if act, ok := item.(ActivityExecuteMessage); ok {
		act.VisibleAt = at
		return act
	}
	return item
}
