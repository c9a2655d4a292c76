package durable

import (
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb"
)

// actionKind names the decisions orchestration code records (duroxide's
// Action enum).
type actionKind int

const (
	actCallActivity actionKind = iota
	actCreateTimer
	actWaitExternal
	actDequeueEvent
	actStartSubOrchestration
	actStartDetached
	actContinueAsNew
	actUpdateCustomStatus
	actSetKV
	actClearKV
	actClearAllKV
)

// action is one decision of orchestration code. Only the fields of its kind
// are set.
type action struct {
	kind    actionKind
	eventID uint64 // the event the action became (0 for continue-as-new)

	name, input string
	sessionID   *string // activities
	tag         *string // activities
	fireAtMs    uint64  // timers
	purpose     string  // timers the runtime schedules for the code: what for, in messages ("" for the code's own)
	attempt     uint32  // activities scheduled WithRetry: the policy's attempt (0 without a policy)
	instance    string  // sub-orchestrations (explicit or "sub::N") and detached starts
	version     *string // sub-orchestrations, detached starts, continue-as-new
	status      *string // custom status (nil clears)
	key, value  string  // KV
	updatedAtMs uint64  // KV
	buffered    bool    // event waits: WaitForEvent's buffer (events.go)
	// retry is the policy of an activity or sub-orchestration scheduled
	// WithRetry; it shapes the future, never the recorded event.
	retry *RetryPolicy
}

// emittedAction is an action waiting for the engine, with the token of the
// future that recorded it.
type emittedAction struct {
	token  uint64
	action action
}

// childIDForm is how an execution after the first names the children it
// generates; execution 1 always uses duroxide's "sub::{event id}", but
// later executions restart their event ids at 1, so their ids also carry
// the execution.
type childIDForm int

const (
	// childIDDotted is this runtime's form before duroxide 0.1.30:
	// "sub::{execution id}.{event id}".
	childIDDotted childIDForm = iota
	// childIDUnderscored is duroxide 0.1.30's form:
	// "sub::{execution id}_{event id}".
	childIDUnderscored
)

// underscoredChildIDsSince is the first duroxide version that generates
// childIDUnderscored ids.
var underscoredChildIDsSince = cdb.NewSemanticVersion(0, 1, 30)

// childIDFormFor is the form of the execution whose OrchestrationStarted
// was stamped by duroxide version stamp. The stamp, not this runtime's
// version, decides, so an execution keeps its form for its whole life:
// the children it scheduled before an upgrade and those it schedules
// after are named alike, and a history recorded with dotted ids replays
// and goes on as recorded. A stamp that does not parse keeps the old
// form, as duroxide keeps its legacy policy for one.
func childIDFormFor(stamp string) childIDForm {
	v, err := cdb.ParseSemanticVersion(stamp)
	if err != nil || v.Less(underscoredChildIDsSince) {
		return childIDDotted
	}
	return childIDUnderscored
}

// autoChildSuffix is the child id of a sub-orchestration scheduled without
// an explicit one: "sub::{event id}" in execution 1, then
// "sub::{execution id}{separator}{event id}" in the execution's form. The
// id also tells the child which parent execution to report to when its
// start does not say (executionFromChildID).
func autoChildSuffix(form childIDForm, executionID, eventID uint64) string {
	event := strconv.FormatUint(eventID, 10)
	if executionID <= cdb.InitialExecutionID {
		return cdb.SubOrchAutoPrefix + event
	}
	separator := "."
	if form == childIDUnderscored {
		separator = "_"
	}
	return cdb.SubOrchAutoPrefix + strconv.FormatUint(executionID, 10) + separator + event
}

// executionFromChildID recovers the parent execution that scheduled a
// child from the child's generated id, in either form; false for explicit
// ids.
func executionFromChildID(parent, child string) (uint64, bool) {
	suffix, ok := strings.CutPrefix(child, parent+"::"+cdb.SubOrchAutoPrefix)
	if !ok {
		return 0, false
	}
	execution, eventID, hasExecution := strings.Cut(suffix, ".")
	if !hasExecution {
		execution, eventID, hasExecution = strings.Cut(suffix, "_")
	}
	if !hasExecution {
		if _, err := strconv.ParseUint(suffix, 10, 64); err != nil {
			return 0, false
		}
		return cdb.InitialExecutionID, true
	}
	if _, err := strconv.ParseUint(eventID, 10, 64); err != nil {
		return 0, false
	}
	id, err := strconv.ParseUint(execution, 10, 64)
	return id, err == nil
}

// eventKind is the history event an action records, if any: continue-as-new
// records none of its own (its terminal event comes at the end of the turn).
func (a action) eventKind() (cdb.EventKind, bool) {
	switch a.kind {
	case actCallActivity:
		return cdb.ActivityScheduled{Name: a.name, Input: a.input, SessionID: a.sessionID, Tag: a.tag}, true
	case actCreateTimer:
		return cdb.TimerCreated{FireAtMs: a.fireAtMs, Purpose: purposeOf(a)}, true
	case actWaitExternal:
		return cdb.ExternalSubscribed{Name: a.name}, true
	case actDequeueEvent:
		return cdb.QueueSubscribed{Name: a.name}, true
	case actStartSubOrchestration:
		return cdb.SubOrchestrationScheduled{Name: a.name, Instance: a.instance, Input: a.input}, true
	case actStartDetached:
		return cdb.OrchestrationChained{Name: a.name, Instance: a.instance, Input: a.input}, true
	case actUpdateCustomStatus:
		return cdb.CustomStatusUpdated{Status: a.status}, true
	case actSetKV:
		return cdb.KeyValueSet{Key: a.key, Value: a.value, LastUpdatedAtMs: a.updatedAtMs}, true
	case actClearKV:
		return cdb.KeyValueCleared{Key: a.key}, true
	case actClearAllKV:
		return cdb.KeyValuesCleared{}, true
	}
	return nil, false
}

// matches reports whether a replayed history event is the one this action
// recorded (duroxide's action_matches_event_kind): activities by name,
// input, session and tag; timers by position only (fire times come from
// the wall clock); sub-orchestrations by name and input; subscriptions by
// name; custom status by kind; KV by key and value.
func (a action) matches(kind cdb.EventKind) bool {
	switch k := kind.(type) {
	case cdb.ActivityScheduled:
		return a.kind == actCallActivity && a.name == k.Name && a.input == k.Input &&
			equalOptional(a.sessionID, k.SessionID) && equalOptional(a.tag, k.Tag)
	case cdb.TimerCreated:
		return a.kind == actCreateTimer
	case cdb.ExternalSubscribed:
		return a.kind == actWaitExternal && a.name == k.Name
	case cdb.QueueSubscribed:
		return a.kind == actDequeueEvent && a.name == k.Name
	case cdb.SubOrchestrationScheduled:
		return a.kind == actStartSubOrchestration && a.name == k.Name && a.input == k.Input
	case cdb.OrchestrationChained:
		return a.kind == actStartDetached && a.name == k.Name && a.instance == k.Instance && a.input == k.Input
	case cdb.CustomStatusUpdated:
		return a.kind == actUpdateCustomStatus
	case cdb.KeyValueSet:
		return a.kind == actSetKV && a.key == k.Key && a.value == k.Value
	case cdb.KeyValueCleared:
		return a.kind == actClearKV && a.key == k.Key
	case cdb.KeyValuesCleared:
		return a.kind == actClearAllKV
	}
	return false
}

// describe names an action in nondeterminism messages.
func (a action) describe() string {
	switch a.kind {
	case actCallActivity:
		return "activity " + strconv.Quote(a.name)
	case actCreateTimer:
		if a.purpose != "" {
			return "timer (" + a.purpose + ")"
		}
		return "timer"
	case actWaitExternal:
		return "wait for event " + strconv.Quote(a.name)
	case actDequeueEvent:
		return "dequeue " + strconv.Quote(a.name)
	case actStartSubOrchestration:
		return "sub-orchestration " + strconv.Quote(a.name)
	case actStartDetached:
		return "detached orchestration " + strconv.Quote(a.name)
	case actContinueAsNew:
		return "continue-as-new"
	case actUpdateCustomStatus:
		return "custom status update"
	case actSetKV:
		return "KV set " + strconv.Quote(a.key)
	case actClearKV:
		return "KV clear " + strconv.Quote(a.key)
	case actClearAllKV:
		return "KV clear all"
	}
	return "action"
}

// purposeOf is what a timer the runtime set for the code is for, nil for
// the code's own.
func purposeOf(a action) *string {
	if a.purpose == "" {
		return nil
	}
	return ptr(a.purpose)
}

func equalOptional(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// newEvent builds an event of this runtime's version.
func newEvent(instance string, executionID, eventID uint64, source *uint64, nowMs uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		SourceEventID:   source,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     nowMs,
		DuroxideVersion: DuroxideVersion,
		Kind:            kind,
	}
}

func ptr[T any](v T) *T { return &v }
