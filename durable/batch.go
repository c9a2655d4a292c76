package durable

import (
	"log/slog"

	"github.com/duroxide-go/cdb"
)

// historyState is what a fetched execution's history says about it
// (duroxide's HistoryManager).
type historyState struct {
	started        *cdb.OrchestrationStarted // the execution's start, nil for a new instance
	startedVersion string                    // the duroxide version that wrote it
	completed      bool
	failed         bool
	continuedAsNew bool
}

func readHistory(history []cdb.Event) historyState {
	var h historyState
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.OrchestrationStarted:
			h = historyState{started: &k, startedVersion: ev.DuroxideVersion}
		case cdb.OrchestrationCompleted:
			h.completed = true
		case cdb.OrchestrationFailed:
			h.failed = true
		case cdb.OrchestrationContinuedAsNew:
			h.continuedAsNew = true
		}
	}
	return h
}

// parentLink is a sub-orchestration's parent: the instance and the event id
// of its SubOrchestrationScheduled, and the parent execution that scheduled
// it when the start said so (duroxide 0.1.30), which the child's results
// are addressed to (parentExecutionOf).
type parentLink struct {
	instance    string
	eventID     uint64
	executionID *uint64
}

// newParentLink is the link the parent fields of a start or a
// ContinueAsNew name, nil unless both the instance and the event id are set.
func newParentLink(instance *string, eventID, executionID *uint64) *parentLink {
	if instance == nil || eventID == nil {
		return nil
	}
	return &parentLink{instance: *instance, eventID: *eventID, executionID: executionID}
}

// parent returns the link a start event records, if any.
func parentOf(started *cdb.OrchestrationStarted) *parentLink {
	if started == nil {
		return nil
	}
	return newParentLink(started.ParentInstance, started.ParentID, started.ParentExecutionID)
}

// batch is a fetched batch of messages split into the start (a
// StartOrchestration or ContinueAsNew) and the completions, with the
// parameters of the execution to run (duroxide's WorkItemReader).
type batch struct {
	start       cdb.WorkItem // nil when the batch only completes work
	completions []cdb.WorkItem

	name          string  // "" when nothing names the orchestration
	input         string  // for a new execution
	version       *string // exact version to run, nil for the registry's policy
	parent        *parentLink
	continueAsNew bool
	carryForward  []cdb.CarryForwardEvent
	initialStatus *string
}

// readBatch splits messages; a second start in one batch is ignored, and a
// ContinueAsNew beats a StartOrchestration wherever each is in the batch:
// a duplicate client start never replaces the successor of an execution
// that continued as new (duroxide 0.1.32). The execution's parameters come
// from a ContinueAsNew, else from the history's start, else from a
// StartOrchestration.
func readBatch(instance string, messages []cdb.WorkItem, h historyState, log *slog.Logger) batch {
	var b batch
	for _, msg := range messages {
		switch msg.(type) {
		case cdb.StartOrchestrationMessage, cdb.ContinueAsNewMessage:
			if b.start != nil && !supersedes(msg, b.start) {
				log.Warn("ignoring a second start in one batch", "instance", instance, "kind", msg.Kind())
				continue
			}
			if b.start != nil {
				log.Warn("ignoring a start that a continue-as-new supersedes", "instance", instance, "kind", b.start.Kind())
			}
			b.start = msg
		case cdb.ActivityExecuteMessage:
			log.Warn("ignoring an activity on the orchestrator queue", "instance", instance)
		default:
			b.completions = append(b.completions, msg)
		}
	}
	if can, ok := b.start.(cdb.ContinueAsNewMessage); ok {
		b.readContinueAsNew(instance, can, h)
		return b
	}
	switch {
	case h.started != nil:
		// A running execution: its start fixes what runs, and a repeated
		// StartOrchestration changes nothing.
		b.name, b.input = h.started.Name, h.started.Input
		b.version = exactVersion(h.started.Version)
		b.parent = parentOf(h.started)
	case b.start != nil:
		s := b.start.(cdb.StartOrchestrationMessage)
		b.name, b.input, b.version = s.Orchestration, s.Input, s.Version
		b.parent = newParentLink(s.ParentInstance, s.ParentID, s.ParentExecutionID)
	}
	return b
}

// supersedes reports a ContinueAsNew that replaces a StartOrchestration
// taken first.
func supersedes(msg, taken cdb.WorkItem) bool {
	_, can := msg.(cdb.ContinueAsNewMessage)
	_, start := taken.(cdb.StartOrchestrationMessage)
	return can && start
}

// readContinueAsNew takes the next execution's parameters from a
// ContinueAsNew. A child that continues as new must still report to its
// parent: the message names the parent since duroxide 0.1.30, and one
// written by 0.1.29 names none, so the previous execution's start, which
// does, stands in for it. The carried queue messages come first, so they
// keep their place before messages enqueued since.
func (b *batch) readContinueAsNew(instance string, s cdb.ContinueAsNewMessage, h historyState) {
	b.name, b.input, b.version = s.Orchestration, s.Input, s.Version
	b.continueAsNew = true
	b.carryForward, b.initialStatus = s.CarryForwardEvents, s.InitialCustomStatus
	b.parent = newParentLink(s.ParentInstance, s.ParentID, s.ParentExecutionID)
	if b.parent == nil {
		b.parent = parentOf(h.started)
	}
	b.completions = append(carriedMessages(instance, s.CarryForwardEvents), b.completions...)
}

// exactVersion is a recorded version to resolve exactly; duroxide treats
// "0.0.0" as a placeholder meaning "use the policy".
func exactVersion(v string) *string {
	if v == "" || v == "0.0.0" {
		return nil
	}
	return &v
}

// carriedMessages turns carried-forward events back into queue messages
// and, for those carried as such, raised events (events.go).
func carriedMessages(instance string, events []cdb.CarryForwardEvent) []cdb.WorkItem {
	out := make([]cdb.WorkItem, 0, len(events))
	for _, ev := range events {
		out = append(out, carriedItem(instance, ev))
	}
	return out
}

// isTerminal reports an execution that takes no more turns: it completed or
// failed, or continued as new and the batch does not start the next one.
func (b batch) isTerminal(h historyState) bool {
	return h.completed || h.failed || (h.continuedAsNew && !b.continueAsNew)
}
