package durable

import (
	"context"
	"log/slog"
	"time"

	"github.com/duroxide-go/cdb"
)

// turnPlan is one turn to run: the execution, its persisted history, the
// batch, and the resolved handler.
type turnPlan struct {
	instance    string
	executionID uint64
	name        string // the orchestration's registered name
	version     string // the resolved version
	fn          OrchestrationFunc
	persisted   []cdb.Event // the execution's history; empty for a new execution
	batch       batch
	kvSnapshot  map[string]cdb.KVEntry
}

// turn is what one turn commits in one ack.
type turn struct {
	executionID       uint64
	delta             []cdb.Event
	workerItems       []cdb.WorkItem
	orchestratorItems []cdb.WorkItem
	cancelled         []cdb.ScheduledActivityIdentifier
	result            turnResult
}

// turnEnv is what running a turn needs from the runtime.
type turnEnv struct {
	now func() time.Time
	log *slog.Logger
	// parentExecution recovers the execution of parent that a completion
	// from child is addressed to, for a child whose start did not name it
	// (parentExecutionOf).
	parentExecution func(ctx context.Context, parent, child string) uint64
	// errorTypes are the registered error types an orchestration's failure
	// carries (RegisterError); nil carries only ApplicationErrors.
	errorTypes *Registry
}

// runTurn runs one turn (duroxide's run_single_execution_atomic): it
// starts the execution if it is new, replays it with the batch's
// completions, and maps the result to history and work items.
func runTurn(ctx context.Context, p turnPlan, env turnEnv) (turn, error) {
	now := env.now
	var started []cdb.Event
	if len(p.persisted) == 0 {
		started = []cdb.Event{startEvent(p, uint64(max(now().UnixMilli(), 0)))}
	}
	baseline := append(append([]cdb.Event{}, p.persisted...), started...)
	e := newReplayEngine(p.instance, p.executionID, baseline, len(p.persisted), p.kvSnapshot, now, env.log)
	e.prepCompletions(p.batch.completions)
	e.errorTypes = env.errorTypes

	start, err := firstStarted(baseline)
	if err != nil {
		e.abort = nondeterminism(err.Error())
	}
	id := orchestrationIdentity{instance: p.instance, executionID: p.executionID, name: p.name, version: p.version}
	result, err := e.execute(ctx, p.fn, start.Input, id)
	if err != nil {
		return turn{}, err
	}
	b := &turnBuilder{plan: p, engine: e, parent: parentOf(&start), result: result, started: started}
	return b.build(ctx, env), nil
}

// startEvent is a new execution's OrchestrationStarted.
func startEvent(p turnPlan, nowMs uint64) cdb.Event {
	k := cdb.OrchestrationStarted{
		Name: p.name, Version: p.version, Input: p.batch.input,
		InitialCustomStatus: p.batch.initialStatus,
	}
	if parent := p.batch.parent; parent != nil {
		k.ParentInstance, k.ParentID, k.ParentExecutionID = ptr(parent.instance), ptr(parent.eventID), parent.executionID
	}
	if len(p.batch.carryForward) > 0 {
		k.CarryForwardEvents = p.batch.carryForward
	}
	return newEvent(p.instance, p.executionID, cdb.InitialEventID, nil, nowMs, k)
}

// turnBuilder maps a turn's result to what the ack commits.
type turnBuilder struct {
	plan    turnPlan
	engine  *replayEngine
	parent  *parentLink
	result  turnResult
	started []cdb.Event
	out     turn
}

func (b *turnBuilder) build(ctx context.Context, env turnEnv) turn {
	e := b.engine
	if v := limitViolation(b.delta(), e.history(), b.plan.kvSnapshot); v != "" {
		env.log.Warn("orchestration exceeded a runtime limit", "instance", b.plan.instance, "violation", v)
		b.result = failed(orchestrationFailure(v))
		e.pending = nil // the turn's work is not started
	}
	if b.result.kind == turnContinue {
		b.scheduleWork()
	} else {
		b.finish(ctx, env)
	}
	b.cancelLosers()
	b.out.executionID = b.plan.executionID
	b.out.delta = b.delta()
	b.out.result = b.result
	b.out.cancelled = dedupeActivities(b.out.cancelled)
	return b.out
}

// delta is the turn's events: the new start, then the engine's.
func (b *turnBuilder) delta() []cdb.Event {
	return append(append([]cdb.Event{}, b.started...), b.engine.delta...)
}

// scheduleWork turns the pending actions into work items.
func (b *turnBuilder) scheduleWork() {
	p := b.plan
	for _, a := range b.engine.pending {
		switch a.kind {
		case actCallActivity:
			b.out.workerItems = append(b.out.workerItems, cdb.ActivityExecuteMessage{
				Instance: p.instance, ExecutionID: p.executionID, ID: a.eventID,
				Name: a.name, Input: a.input, SessionID: a.sessionID, Tag: a.tag, RetryAttempt: retryAttempt(a),
			})
		case actCreateTimer:
			b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.TimerFiredMessage{
				Instance: p.instance, ExecutionID: p.executionID, ID: a.eventID, FireAtMs: a.fireAtMs,
			})
		case actStartSubOrchestration:
			b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.StartOrchestrationMessage{
				Instance: cdb.BuildChildInstanceID(p.instance, a.instance), Orchestration: a.name, Input: a.input,
				Version: a.version, ParentInstance: ptr(p.instance), ParentID: ptr(a.eventID),
				// The child reports to this very execution, even after a
				// continue-as-new here (duroxide 0.1.30).
				ParentExecutionID: ptr(p.executionID), ExecutionID: cdb.InitialExecutionID,
			})
		case actStartDetached:
			b.startDetached(a)
		}
	}
}

// retryAttempt is the attempt of a retry policy an activity is, nil
// without a policy.
func retryAttempt(a action) *uint32 {
	if a.attempt == 0 {
		return nil
	}
	return ptr(a.attempt)
}

func (b *turnBuilder) startDetached(a action) {
	b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.StartOrchestrationMessage{
		Instance: a.instance, Orchestration: a.name, Input: a.input, Version: a.version,
		ExecutionID: cdb.InitialExecutionID,
	})
}

// finish ends the execution: detached starts are honoured, outstanding
// subscriptions and activities get cancellation breadcrumbs (activities are
// also cancelled by lock stealing), the terminal event comes last, and the
// parent, the children or the next execution are told.
func (b *turnBuilder) finish(ctx context.Context, env turnEnv) {
	e := b.engine
	p := b.plan
	// A cancellation that ends the code's compensation keeps what the code
	// started in it; one that ends the execution at once starts nothing.
	if b.result.kind != turnCancelled || b.result.compensated {
		for _, a := range e.pending {
			if a.kind == actStartDetached {
				b.startDetached(a)
			}
		}
	}
	var carry []cdb.CarryForwardEvent
	if b.result.kind == turnContinueAsNew {
		// Before the breadcrumbs: cancelled subscriptions consume nothing.
		if e.queueRaceRules() {
			carry = unreadQueueMessages(e.history(), e.queueCancelled, e.queueRead, env.log, p.instance)
		} else {
			carry = unmatchedQueueMessages(e.history(), env.log, p.instance)
		}
		if e.bufferedEvents() && e.events != nil {
			carry = capCarryForward(append(carry, e.events.unreadEvents()...), p.instance, env.log)
		}
	}
	out := e.appendTerminalBreadcrumbs(b.result.kind)
	for _, id := range out.activities {
		b.out.cancelled = append(b.out.cancelled, b.activityID(id))
	}
	switch b.result.kind {
	case turnCompleted:
		e.appendEvent(nil, cdb.OrchestrationCompleted{Output: b.result.output})
		b.notifyParent(ctx, env, nil)
	case turnFailed:
		e.appendEvent(nil, cdb.OrchestrationFailed{Details: b.result.details})
		b.notifyParent(ctx, env, b.result.details)
	case turnCancelled:
		details := cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: b.result.reason}}
		e.appendEvent(nil, cdb.OrchestrationFailed{Details: details})
		for _, child := range out.children {
			b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.CancelInstanceMessage{
				Instance: cdb.BuildChildInstanceID(p.instance, child), Reason: parentCancelledReason,
			})
		}
		b.notifyParent(ctx, env, details)
	case turnContinueAsNew:
		status := accumulatedCustomStatus(e.history())
		e.appendEvent(nil, cdb.OrchestrationContinuedAsNew{Input: b.result.input})
		can := cdb.ContinueAsNewMessage{
			Instance: p.instance, Orchestration: p.name, Input: b.result.input, Version: b.result.version,
			CarryForwardEvents: carry, InitialCustomStatus: status,
		}
		if b.parent != nil {
			// The next execution reads its parent from here (as duroxide's
			// runtime does), not from this execution's history.
			can.ParentInstance, can.ParentID, can.ParentExecutionID = ptr(b.parent.instance), ptr(b.parent.eventID), b.parent.executionID
		}
		b.out.orchestratorItems = append(b.out.orchestratorItems, can)
	}
}

// terminalCancelReason is the breadcrumb reason for activities still in
// flight when the execution ends.
func terminalCancelReason(kind turnKind) string {
	switch kind {
	case turnCompleted:
		return "orchestration_terminal_completed"
	case turnContinueAsNew:
		return "orchestration_terminal_continued_as_new"
	}
	return "orchestration_terminal_failed"
}

// appendTerminalBreadcrumbs records, for an execution that ends as kind,
// what it still waited for: its open subscriptions cancelled, its
// outstanding activities asked to cancel. It returns what was outstanding.
func (e *replayEngine) appendTerminalBreadcrumbs(kind turnKind) outstanding {
	out := outstandingSchedules(e.history())
	if e.bufferedEvents() && e.events != nil {
		// A buffered wait may have taken an event that arrived before it,
		// which duroxide's reckoning cannot see.
		out.external = e.events.waitingEvents(e.history())
	}
	for _, id := range out.external {
		e.appendEvent(ptr(id), cdb.ExternalSubscribedCancelled{Reason: "orchestration_terminal"})
	}
	for _, id := range out.queue {
		e.appendEvent(ptr(id), cdb.QueueSubscriptionCancelled{Reason: "orchestration_terminal"})
	}
	reason := terminalCancelReason(kind)
	for _, id := range out.activities {
		e.appendEvent(ptr(id), cdb.ActivityCancelRequested{Reason: reason})
	}
	return out
}

// notifyParent sends a child's result to its parent (details nil: completed).
func (b *turnBuilder) notifyParent(ctx context.Context, env turnEnv, details cdb.ErrorDetails) {
	if b.parent == nil {
		return
	}
	parentExec := parentExecutionOf(ctx, b.parent, b.plan.instance, env.parentExecution)
	if details == nil {
		b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.SubOrchestrationCompletedMessage{
			ParentInstance: b.parent.instance, ParentExecutionID: parentExec, ParentID: b.parent.eventID,
			Result: b.result.output,
		})
		return
	}
	b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.SubOrchestrationFailedMessage{
		ParentInstance: b.parent.instance, ParentExecutionID: parentExec, ParentID: b.parent.eventID,
		Details: details,
	})
}

// cancelLosers applies the side effects of Select losers: their activities'
// worker items are deleted, their children are cancelled.
func (b *turnBuilder) cancelLosers() {
	for _, id := range b.engine.droppedActivities {
		b.out.cancelled = append(b.out.cancelled, b.activityID(id))
	}
	for _, child := range b.engine.droppedChildren {
		b.out.orchestratorItems = append(b.out.orchestratorItems, cdb.CancelInstanceMessage{
			Instance: cdb.BuildChildInstanceID(b.plan.instance, child.instance), Reason: childCancelMessage(child.reason),
		})
	}
}

func (b *turnBuilder) activityID(id uint64) cdb.ScheduledActivityIdentifier {
	return cdb.ScheduledActivityIdentifier{Instance: b.plan.instance, ExecutionID: b.plan.executionID, ActivityID: id}
}

func dedupeActivities(ids []cdb.ScheduledActivityIdentifier) []cdb.ScheduledActivityIdentifier {
	seen := map[cdb.ScheduledActivityIdentifier]bool{}
	var out []cdb.ScheduledActivityIdentifier
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// accumulatedCustomStatus is the custom status at the end of a history, to
// carry into the next execution.
func accumulatedCustomStatus(history []cdb.Event) *string {
	var status *string
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.OrchestrationStarted:
			if k.InitialCustomStatus != nil {
				status = k.InitialCustomStatus
			}
		case cdb.CustomStatusUpdated:
			status = k.Status
		}
	}
	return status
}
