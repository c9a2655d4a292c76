package cdb

import (
	"encoding/json"
	"errors"
	"fmt"
)

// WorkItem is a queue message: duroxide's WorkItem enum (src/providers/mod.rs).
// The concrete types below are its variants; each encodes to serde's
// externally tagged form, e.g. {"StartOrchestration":{...}}, so json.Marshal
// works on the interface. Decode with UnmarshalWorkItem.
//
// ActivityExecute goes to the worker queue, every other variant to the
// orchestrator queue of the instance InstanceID names.
type WorkItem interface {
	isWorkItem()
	// Kind is the serde variant tag, e.g. "StartOrchestration".
	Kind() string
	// InstanceID is the instance whose queue the item routes to: the parent
	// for SubOrchCompleted and SubOrchFailed, the item's own instance otherwise.
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

// StartOrchestration starts an instance (or a sub-orchestration, when the
// parent fields are set). Nil optional fields encode as null, except
// ParentExecutionID, which is omitted so a root start keeps 0.1.29's bytes.
type StartOrchestration struct {
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
}

// ActivityExecute asks a worker to run an activity.
type ActivityExecute struct {
	Instance    string  `json:"instance"`
	ExecutionID uint64  `json:"execution_id"`
	ID          uint64  `json:"id"` // the ActivityScheduled event id
	Name        string  `json:"name"`
	Input       string  `json:"input"`
	SessionID   *string `json:"session_id,omitempty"`
	Tag         *string `json:"tag,omitempty"`
}

// ActivityCompleted reports an activity's result to its orchestration.
type ActivityCompleted struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	Result      string `json:"result"`
}

// ActivityFailed reports an activity's failure to its orchestration.
type ActivityFailed struct {
	Instance    string       `json:"instance"`
	ExecutionID uint64       `json:"execution_id"`
	ID          uint64       `json:"id"`
	Details     ErrorDetails `json:"details"`
}

// TimerFired is a timer's completion; it is enqueued invisible until FireAtMs.
type TimerFired struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`         // the TimerCreated event id
	FireAtMs    uint64 `json:"fire_at_ms"` // when it fires, in milliseconds since the Unix epoch
}

// ExternalRaised delivers an external event, matched by name.
type ExternalRaised struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

// SubOrchCompleted reports a child's result to its parent instance.
type SubOrchCompleted struct {
	ParentInstance    string `json:"parent_instance"`
	ParentExecutionID uint64 `json:"parent_execution_id"`
	ParentID          uint64 `json:"parent_id"` // the parent's SubOrchestrationScheduled event id
	Result            string `json:"result"`
}

// SubOrchFailed reports a child's failure to its parent instance.
type SubOrchFailed struct {
	ParentInstance    string       `json:"parent_instance"`
	ParentExecutionID uint64       `json:"parent_execution_id"`
	ParentID          uint64       `json:"parent_id"`
	Details           ErrorDetails `json:"details"`
}

// CancelInstance requests an orchestration's cancellation.
type CancelInstance struct {
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
}

// ContinueAsNew starts the instance's next execution. CarryForwardEvents is
// always encoded (nil as []); the parent link and InitialCustomStatus are
// omitted when nil.
type ContinueAsNew struct {
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

// QueueMessage delivers a persistent (FIFO mailbox) event, matched by name.
type QueueMessage struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

func (StartOrchestration) isWorkItem() {}
func (ActivityExecute) isWorkItem()    {}
func (ActivityCompleted) isWorkItem()  {}
func (ActivityFailed) isWorkItem()     {}
func (TimerFired) isWorkItem()         {}
func (ExternalRaised) isWorkItem()     {}
func (SubOrchCompleted) isWorkItem()   {}
func (SubOrchFailed) isWorkItem()      {}
func (CancelInstance) isWorkItem()     {}
func (ContinueAsNew) isWorkItem()      {}
func (QueueMessage) isWorkItem()       {}

// Kind returns the work item's serde variant tag.
func (StartOrchestration) Kind() string { return "StartOrchestration" }

// Kind returns the work item's serde variant tag.
func (ActivityExecute) Kind() string { return "ActivityExecute" }

// Kind returns the work item's serde variant tag.
func (ActivityCompleted) Kind() string { return "ActivityCompleted" }

// Kind returns the work item's serde variant tag.
func (ActivityFailed) Kind() string { return "ActivityFailed" }

// Kind returns the work item's serde variant tag.
func (TimerFired) Kind() string { return "TimerFired" }

// Kind returns the work item's serde variant tag.
func (ExternalRaised) Kind() string { return "ExternalRaised" }

// Kind returns the work item's serde variant tag.
func (SubOrchCompleted) Kind() string { return "SubOrchCompleted" }

// Kind returns the work item's serde variant tag.
func (SubOrchFailed) Kind() string { return "SubOrchFailed" }

// Kind returns the work item's serde variant tag.
func (CancelInstance) Kind() string { return "CancelInstance" }

// Kind returns the work item's serde variant tag.
func (ContinueAsNew) Kind() string { return "ContinueAsNew" }

// Kind returns the work item's serde variant tag.
func (QueueMessage) Kind() string { return "QueueMessage" }

// InstanceID returns the instance whose queue the item routes to.
func (w StartOrchestration) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityExecute) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityCompleted) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ActivityFailed) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w TimerFired) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ExternalRaised) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w SubOrchCompleted) InstanceID() string { return w.ParentInstance }

// InstanceID returns the instance whose queue the item routes to.
func (w SubOrchFailed) InstanceID() string { return w.ParentInstance }

// InstanceID returns the instance whose queue the item routes to.
func (w CancelInstance) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w ContinueAsNew) InstanceID() string { return w.Instance }

// InstanceID returns the instance whose queue the item routes to.
func (w QueueMessage) InstanceID() string { return w.Instance }

// Each MarshalJSON converts to a method-less copy of the type (so the struct
// tags apply without recursing) and wraps it in the variant tag.

// MarshalJSON encodes StartOrchestration in duroxide's serde JSON.
func (w StartOrchestration) MarshalJSON() ([]byte, error) {
	type fields StartOrchestration
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityExecute in duroxide's serde JSON.
func (w ActivityExecute) MarshalJSON() ([]byte, error) {
	type fields ActivityExecute
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityCompleted in duroxide's serde JSON.
func (w ActivityCompleted) MarshalJSON() ([]byte, error) {
	type fields ActivityCompleted
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ActivityFailed in duroxide's serde JSON.
func (w ActivityFailed) MarshalJSON() ([]byte, error) {
	if w.Details == nil {
		return nil, errors.New("cdb: encode ActivityFailed: Details is nil")
	}
	type fields ActivityFailed
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes TimerFired in duroxide's serde JSON.
func (w TimerFired) MarshalJSON() ([]byte, error) {
	type fields TimerFired
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ExternalRaised in duroxide's serde JSON.
func (w ExternalRaised) MarshalJSON() ([]byte, error) {
	type fields ExternalRaised
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes SubOrchCompleted in duroxide's serde JSON.
func (w SubOrchCompleted) MarshalJSON() ([]byte, error) {
	type fields SubOrchCompleted
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes SubOrchFailed in duroxide's serde JSON.
func (w SubOrchFailed) MarshalJSON() ([]byte, error) {
	if w.Details == nil {
		return nil, errors.New("cdb: encode SubOrchFailed: Details is nil")
	}
	type fields SubOrchFailed
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes CancelInstance in duroxide's serde JSON.
func (w CancelInstance) MarshalJSON() ([]byte, error) {
	type fields CancelInstance
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes ContinueAsNew in duroxide's serde JSON.
func (w ContinueAsNew) MarshalJSON() ([]byte, error) {
	type fields ContinueAsNew
	if w.CarryForwardEvents == nil {
		// serde always writes the Vec, so an empty list is [] rather than null.
		w.CarryForwardEvents = []CarryForwardEvent{}
	}
	return externallyTagged(w.Kind(), fields(w))
}

// MarshalJSON encodes QueueMessage in duroxide's serde JSON.
func (w QueueMessage) MarshalJSON() ([]byte, error) {
	type fields QueueMessage
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
	var w StartOrchestration
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
	var w ActivityExecute
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "name", &w.Name)
	requiredField(o, "input", &w.Input)
	optionalField(o, "session_id", &w.SessionID)
	optionalField(o, "tag", &w.Tag)
	return w
}

func decodeActivityCompleted(o *jsonObject) WorkItem {
	var w ActivityCompleted
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "result", &w.Result)
	return w
}

func decodeActivityFailed(o *jsonObject) WorkItem {
	var w ActivityFailed
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredDecoded(o, "details", &w.Details, UnmarshalErrorDetails)
	return w
}

func decodeTimerFired(o *jsonObject) WorkItem {
	var w TimerFired
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "execution_id", &w.ExecutionID)
	requiredField(o, "id", &w.ID)
	requiredField(o, "fire_at_ms", &w.FireAtMs)
	return w
}

func decodeExternalRaised(o *jsonObject) WorkItem {
	var w ExternalRaised
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "name", &w.Name)
	requiredField(o, "data", &w.Data)
	return w
}

func decodeSubOrchCompleted(o *jsonObject) WorkItem {
	var w SubOrchCompleted
	requiredField(o, "parent_instance", &w.ParentInstance)
	requiredField(o, "parent_execution_id", &w.ParentExecutionID)
	requiredField(o, "parent_id", &w.ParentID)
	requiredField(o, "result", &w.Result)
	return w
}

func decodeSubOrchFailed(o *jsonObject) WorkItem {
	var w SubOrchFailed
	requiredField(o, "parent_instance", &w.ParentInstance)
	requiredField(o, "parent_execution_id", &w.ParentExecutionID)
	requiredField(o, "parent_id", &w.ParentID)
	requiredDecoded(o, "details", &w.Details, UnmarshalErrorDetails)
	return w
}

func decodeCancelInstance(o *jsonObject) WorkItem {
	var w CancelInstance
	requiredField(o, "instance", &w.Instance)
	requiredField(o, "reason", &w.Reason)
	return w
}

func decodeContinueAsNew(o *jsonObject) WorkItem {
	var w ContinueAsNew
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
	var w QueueMessage
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
func (w *StartOrchestration) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ActivityExecute from duroxide's serde JSON.
func (w *ActivityExecute) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ActivityCompleted from duroxide's serde JSON.
func (w *ActivityCompleted) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ActivityFailed from duroxide's serde JSON.
func (w *ActivityFailed) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes TimerFired from duroxide's serde JSON.
func (w *TimerFired) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ExternalRaised from duroxide's serde JSON.
func (w *ExternalRaised) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes SubOrchCompleted from duroxide's serde JSON.
func (w *SubOrchCompleted) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes SubOrchFailed from duroxide's serde JSON.
func (w *SubOrchFailed) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes CancelInstance from duroxide's serde JSON.
func (w *CancelInstance) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes ContinueAsNew from duroxide's serde JSON.
func (w *ContinueAsNew) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }

// UnmarshalJSON decodes QueueMessage from duroxide's serde JSON.
func (w *QueueMessage) UnmarshalJSON(data []byte) error { return unmarshalWorkItemInto(data, w) }
