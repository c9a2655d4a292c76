package durable

import (
	"fmt"

	"github.com/duroxide-go/cdb"
)

// prepCompletions turns the batch's messages into history events of this
// turn (duroxide's prep_completions). It drops completions of other
// executions and duplicates, and records nondeterminism for a completion
// that matches no schedule of its kind; system failures reported by an
// activity or a child abort the turn after being recorded.
func (e *replayEngine) prepCompletions(messages []cdb.WorkItem) {
	for _, msg := range messages {
		if !e.forThisExecution(msg) {
			e.log.Warn("dropping a completion of another execution", "instance", e.instance, "kind", msg.Kind())
			continue
		}
		if e.isDuplicate(msg) {
			e.log.Warn("dropping a duplicate completion", "instance", e.instance, "kind", msg.Kind())
			continue
		}
		if problem := e.scheduleMismatch(msg); problem != "" {
			e.log.Warn("nondeterminism in the completion batch", "instance", e.instance, "problem", problem)
			e.abort = nondeterminism(problem)
			continue
		}
		e.appendCompletion(msg)
	}
}

// forThisExecution reports whether a message belongs to the running
// execution; events without an execution id always do.
func (e *replayEngine) forThisExecution(msg cdb.WorkItem) bool {
	switch m := msg.(type) {
	case cdb.ActivityCompletedMessage:
		return m.ExecutionID == e.executionID
	case cdb.ActivityFailedMessage:
		return m.ExecutionID == e.executionID
	case cdb.TimerFiredMessage:
		return m.ExecutionID == e.executionID
	case cdb.SubOrchestrationCompletedMessage:
		return m.ParentExecutionID == e.executionID
	case cdb.SubOrchestrationFailedMessage:
		return m.ParentExecutionID == e.executionID
	case cdb.ExternalRaisedMessage, cdb.QueueEventMessage, cdb.CancelInstanceMessage:
		return true
	}
	return false // not a completion: starts are handled by the dispatcher
}

// completionFamily groups the completion events of one kind of schedule.
type completionFamily int

const (
	familyNone completionFamily = iota
	familyActivity
	familyTimer
	familySubOrchestration
)

// completionSource is a message's scheduling event id and family.
func completionSource(msg cdb.WorkItem) (uint64, completionFamily) {
	switch m := msg.(type) {
	case cdb.ActivityCompletedMessage:
		return m.ID, familyActivity
	case cdb.ActivityFailedMessage:
		return m.ID, familyActivity
	case cdb.TimerFiredMessage:
		return m.ID, familyTimer
	case cdb.SubOrchestrationCompletedMessage:
		return m.ParentID, familySubOrchestration
	case cdb.SubOrchestrationFailedMessage:
		return m.ParentID, familySubOrchestration
	}
	return 0, familyNone
}

// eventFamily is the family of a completion event.
func eventFamily(kind cdb.EventKind) completionFamily {
	switch kind.(type) {
	case cdb.ActivityCompleted, cdb.ActivityFailed:
		return familyActivity
	case cdb.TimerFired:
		return familyTimer
	case cdb.SubOrchestrationCompleted, cdb.SubOrchestrationFailed:
		return familySubOrchestration
	}
	return familyNone
}

// scheduleFamily is the family of completions a scheduling event expects.
func scheduleFamily(kind cdb.EventKind) completionFamily {
	switch kind.(type) {
	case cdb.ActivityScheduled:
		return familyActivity
	case cdb.TimerCreated:
		return familyTimer
	case cdb.SubOrchestrationScheduled:
		return familySubOrchestration
	}
	return familyNone
}

func (f completionFamily) String() string {
	switch f {
	case familyActivity:
		return "activity"
	case familyTimer:
		return "timer"
	case familySubOrchestration:
		return "sub-orchestration"
	}
	return "none"
}

// isDuplicate reports a completion already in the history or this turn.
// External and queue events are never duplicates: equal ones are separate
// arrivals.
func (e *replayEngine) isDuplicate(msg cdb.WorkItem) bool {
	source, family := completionSource(msg)
	if family == familyNone {
		return false
	}
	for _, ev := range e.history() {
		if ev.SourceEventID != nil && *ev.SourceEventID == source && eventFamily(ev.Kind) == family {
			return true
		}
	}
	return false
}

// scheduleMismatch describes a completion whose scheduling event is missing
// or of another kind; "" when it matches.
func (e *replayEngine) scheduleMismatch(msg cdb.WorkItem) string {
	source, family := completionSource(msg)
	if family == familyNone {
		return ""
	}
	for _, ev := range e.history() {
		if ev.EventID != source {
			continue
		}
		if got := scheduleFamily(ev.Kind); got != familyNone {
			if got != family {
				return fmt.Sprintf("completion kind mismatch for id=%d, expected '%s', got '%s'", source, got, family)
			}
			return ""
		}
	}
	return fmt.Sprintf("no matching schedule for %s completion id=%d", family, source)
}

// appendCompletion records a message as this turn's event.
func (e *replayEngine) appendCompletion(msg cdb.WorkItem) {
	switch m := msg.(type) {
	case cdb.ActivityCompletedMessage:
		e.appendEvent(ptr(m.ID), cdb.ActivityCompleted{Result: m.Result, Delivery: m.Delivery})
	case cdb.ActivityFailedMessage:
		e.appendEvent(ptr(m.ID), cdb.ActivityFailed{Details: m.Details, Delivery: m.Delivery})
		e.abortOnSystemFailure(m.Details)
	case cdb.TimerFiredMessage:
		e.appendEvent(ptr(m.ID), cdb.TimerFired{FireAtMs: m.FireAtMs})
	case cdb.ExternalRaisedMessage:
		e.appendEvent(nil, cdb.ExternalEvent{Name: m.Name, Data: m.Data})
	case cdb.QueueEventMessage:
		e.appendEvent(nil, cdb.QueueEventDelivered{Name: m.Name, Data: m.Data})
	case cdb.SubOrchestrationCompletedMessage:
		e.appendEvent(ptr(m.ParentID), cdb.SubOrchestrationCompleted{Result: m.Result})
	case cdb.SubOrchestrationFailedMessage:
		e.appendEvent(ptr(m.ParentID), cdb.SubOrchestrationFailed{Details: m.Details})
		e.abortOnSystemFailure(m.Details)
	case cdb.CancelInstanceMessage:
		if e.acceptsCancellation() {
			e.appendEvent(nil, cdb.OrchestrationCancelRequested{Reason: m.Reason})
		}
	}
}

// abortOnSystemFailure fails the turn on an infrastructure, configuration
// or poison failure: those are not for orchestration code to handle.
func (e *replayEngine) abortOnSystemFailure(d cdb.ErrorDetails) {
	if isSystemFailure(d) && e.abort == nil {
		e.abort = d
	}
}

// acceptsCancellation reports whether a cancel request still matters: the
// execution has not ended and was not cancelled already.
func (e *replayEngine) acceptsCancellation() bool {
	for _, ev := range e.baseline {
		switch ev.Kind.(type) {
		case cdb.OrchestrationCompleted, cdb.OrchestrationFailed:
			return false
		}
	}
	_, already := cancelRequested(e.history())
	return !already
}
