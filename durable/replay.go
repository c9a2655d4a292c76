package durable

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/duroxide-go/cdb"
)

// turnKind is how a turn ended (duroxide's TurnResult).
type turnKind int

const (
	turnContinue      turnKind = iota // the orchestration waits for more work
	turnCompleted                     // it returned an output
	turnFailed                        // it returned an error, panicked, or was nondeterministic
	turnContinueAsNew                 // it continued as new
	turnCancelled                     // it was cancelled
)

// turnResult is the outcome of one turn.
type turnResult struct {
	kind    turnKind
	output  string           // turnCompleted
	details cdb.ErrorDetails // turnFailed
	input   string           // turnContinueAsNew
	version *string          // turnContinueAsNew
	reason  string           // turnCancelled
	// compensated: turnCancelled after the code saw the request and ran
	// its compensation (cancellation.go).
	compensated bool
}

func failed(details cdb.ErrorDetails) turnResult {
	return turnResult{kind: turnFailed, details: details}
}

// replayEngine runs one turn of one execution: it turns the batch's
// messages into completion events, replays the history against the
// orchestration code, and collects the new events and actions.
type replayEngine struct {
	instance    string
	executionID uint64
	// baseline is the history the turn starts from: the persisted events
	// plus, on an execution's first turn, its new OrchestrationStarted.
	baseline     []cdb.Event
	persistedLen int // events of baseline that were persisted (replay boundary)
	delta        []cdb.Event
	pending      []action // actions of this turn, in event order
	nextEventID  uint64
	// abort is a failure found while preparing completions (nondeterminism,
	// a system failure reported by an activity or child) that fails the turn.
	abort cdb.ErrorDetails

	// Select losers to cancel outside the history: activities by lock
	// stealing, children with CancelInstance (child ids as scheduled).
	droppedActivities []uint64
	droppedChildren   []droppedChild

	// What the replay left of queue matching, for the carry under the
	// queue-race rules: the subscriptions taken out of matching, and those
	// whose value the code read.
	queueCancelled map[uint64]bool
	queueRead      map[uint64]bool
	// events is the replay's event matching, for the carry and the
	// waits still open when a buffering execution ends.
	events *externalEvents

	kvSnapshot map[string]cdb.KVEntry
	errorTypes *Registry // the error types a failure carries (RegisterError)
	now        func() time.Time
	log        *slog.Logger
}

func newReplayEngine(instance string, executionID uint64, baseline []cdb.Event, persistedLen int,
	kvSnapshot map[string]cdb.KVEntry, now func() time.Time, log *slog.Logger) *replayEngine {
	next := uint64(1)
	if len(baseline) > 0 {
		next = baseline[len(baseline)-1].EventID + 1
	}
	return &replayEngine{
		instance: instance, executionID: executionID, baseline: baseline, persistedLen: persistedLen,
		nextEventID: next, kvSnapshot: kvSnapshot, now: now, log: log,
	}
}

// stamp is the duroxide version of this execution's start: its recorded
// stamp, or this runtime's for an execution it starts now.
func (e *replayEngine) stamp() string {
	if len(e.baseline) == 0 {
		return DuroxideVersion
	}
	return e.baseline[0].DuroxideVersion
}

// childIDForm is the form of the children this execution generates, by
// its start's stamp (childIDFormFor).
func (e *replayEngine) childIDForm() childIDForm { return childIDFormFor(e.stamp()) }

// queueRaceRules reports whether this execution follows the queue-race
// rules, by its start's stamp (queueRaceRulesFor).
func (e *replayEngine) queueRaceRules() bool { return queueRaceRulesFor(e.stamp()) }

// bufferedEvents reports whether this execution's WaitForEvent is
// buffered, by its start's stamp (bufferedEventsFor).
func (e *replayEngine) bufferedEvents() bool { return bufferedEventsFor(e.stamp()) }

func (e *replayEngine) nowMs() uint64 { return uint64(max(e.now().UnixMilli(), 0)) }

// appendEvent adds an event with the next id to the delta.
func (e *replayEngine) appendEvent(source *uint64, kind cdb.EventKind) cdb.Event {
	ev := newEvent(e.instance, e.executionID, e.nextEventID, source, e.nowMs(), kind)
	e.nextEventID++
	e.delta = append(e.delta, ev)
	return ev
}

// history is the baseline followed by this turn's events.
func (e *replayEngine) history() []cdb.Event {
	out := make([]cdb.Event, 0, len(e.baseline)+len(e.delta))
	return append(append(out, e.baseline...), e.delta...)
}

// execute replays the turn. It fails only when ctx ends while orchestration
// code runs outside the runtime's control.
func (e *replayEngine) execute(ctx context.Context, fn OrchestrationFunc, input string, id orchestrationIdentity) (turnResult, error) {
	if e.abort != nil {
		return failed(e.abort), nil
	}
	working := e.history()
	for _, ev := range working {
		if ev.IsTerminal() {
			return turnResult{kind: turnContinue}, nil // nothing to run
		}
	}
	started, err := firstStarted(working)
	if err != nil {
		return failed(nondeterminism(err.Error())), nil
	}
	octx := newOrchestrationContext(id, e.now, e.kvSnapshot)
	octx.queueRaceRules = e.queueRaceRules()
	octx.bufferedEvents = e.bufferedEvents()
	octx.external.buffering = octx.bufferedEvents
	if started.InitialCustomStatus != nil {
		octx.customStatus = ptr(*started.InitialCustomStatus)
	}
	run := &replayRun{engine: e, octx: octx, open: map[uint64]futureKind{}, mustPoll: true,
		body: func() (string, error) { return fn(octx, input) }}
	defer func() {
		if err := octx.co.stop(ctx); err != nil {
			e.log.Warn("orchestration did not stop at the end of its turn", "instance", e.instance, "error", err)
		}
	}()
	return run.replay(ctx, working)
}

// firstStarted returns the execution's OrchestrationStarted, which must be
// its first event.
func firstStarted(history []cdb.Event) (cdb.OrchestrationStarted, error) {
	if len(history) == 0 {
		return cdb.OrchestrationStarted{}, fmt.Errorf("corrupted history: empty")
	}
	started, ok := history[0].Kind.(cdb.OrchestrationStarted)
	if !ok {
		return cdb.OrchestrationStarted{}, fmt.Errorf("corrupted history: first event must be OrchestrationStarted")
	}
	return started, nil
}

// replayRun is the state of one replay: the orchestration's context, the
// actions it emitted that history has not matched yet, and the open
// schedules waiting for completions.
type replayRun struct {
	engine   *replayEngine
	octx     *OrchestrationContext
	body     func() (string, error)
	emitted  []emittedAction
	open     map[uint64]futureKind // scheduling event id → kind, until completed
	mustPoll bool
	output   *completion // set when the orchestration returned
	// pollWhenMatched: a buffered wait was bound and may already have its
	// event; the code is polled once the history has matched every action
	// it emitted with the wait, as the turn that recorded them polled it
	// once they were all written.
	pollWhenMatched bool
}

// maxQuiescencePolls bounds the polls after the history is exhausted.
const maxQuiescencePolls = 100

func (r *replayRun) replay(ctx context.Context, working []cdb.Event) (turnResult, error) {
	e := r.engine
	for i, ev := range working {
		if i >= e.persistedLen {
			r.octx.replaying = false
		}
		r.pollOnceMatched()
		if r.mustPoll {
			if res, err := r.poll(ctx); res != nil || err != nil {
				return r.result(res, err)
			}
			r.mustPoll = false
			if r.output != nil {
				break
			}
		}
		if res := r.apply(ev); res != nil {
			return *res, nil
		}
	}
	r.octx.replaying = false
	r.pollOnceMatched()
	if r.mustPoll && r.output == nil {
		if res, err := r.poll(ctx); res != nil || err != nil {
			return r.result(res, err)
		}
	}
	r.cancelDroppedQueueSubscriptions()
	r.convertEmitted()
	if res, err := r.quiesce(ctx); res != nil || err != nil {
		return r.result(res, err)
	}
	return r.finalize(), nil
}

// pollOnceMatched asks for the poll a bound buffered wait needs, once no
// emitted action waits for its history event.
func (r *replayRun) pollOnceMatched() {
	if r.pollWhenMatched && len(r.emitted) == 0 {
		r.mustPoll, r.pollWhenMatched = true, false
	}
}

func (r *replayRun) result(res *turnResult, err error) (turnResult, error) {
	if err != nil {
		return turnResult{}, err
	}
	return *res, nil
}

// poll runs the orchestration until it suspends or returns. A panic fails
// the turn.
func (r *replayRun) poll(ctx context.Context) (*turnResult, error) {
	ev, err := r.octx.co.step(ctx, r.body)
	if err != nil {
		return nil, err
	}
	r.emitted = append(r.emitted, r.octx.drainEmitted()...)
	switch ev.kind {
	case evReturned:
		r.output = &completion{value: ev.output, err: ev.err}
	case evPanicked, evAborted:
		res := failed(cdb.ApplicationError{Kind: cdb.AppPanicked{}, Message: fmt.Sprint(ev.panic)})
		return &res, nil
	}
	return nil, nil
}

// quiesce polls again while polling keeps producing actions: binding a new
// queue subscription can resolve it against a message already delivered.
func (r *replayRun) quiesce(ctx context.Context) (*turnResult, error) {
	for i := 0; r.output == nil && len(r.engine.pending) > 0; i++ {
		if i == maxQuiescencePolls {
			res := failed(cdb.InfrastructureError{Operation: "quiescence_loop",
				Message: fmt.Sprintf("quiescence loop exceeded %d iterations: the orchestration keeps emitting new subscriptions", maxQuiescencePolls)})
			return &res, nil
		}
		before := len(r.engine.pending)
		if res, err := r.poll(ctx); res != nil || err != nil {
			return res, err
		}
		r.convertEmitted()
		if len(r.engine.pending) == before {
			break
		}
	}
	return nil, nil
}

// apply replays one history event. A mismatch with the code fails the turn.
func (r *replayRun) apply(ev cdb.Event) *turnResult {
	switch k := ev.Kind.(type) {
	case cdb.OrchestrationStarted:
		if k.InitialCustomStatus != nil {
			r.octx.customStatus = ptr(*k.InitialCustomStatus)
		}
	case cdb.CustomStatusUpdated, cdb.KeyValueSet, cdb.KeyValueCleared, cdb.KeyValuesCleared:
		return r.matchMetadata(ev)
	case cdb.ActivityScheduled:
		return r.matchSchedule(ev, futureActivity)
	case cdb.TimerCreated:
		return r.matchSchedule(ev, futureTimer)
	case cdb.ExternalSubscribed:
		buffered := len(r.emitted) > 0 && r.emitted[0].action.buffered
		res := r.matchSchedule(ev, futureExternal)
		if res == nil {
			r.octx.external.bind(ev.EventID, k.Name, buffered)
			// A buffered wait may take an event that arrived before it.
			r.pollWhenMatched = r.pollWhenMatched || buffered
		}
		return res
	case cdb.QueueSubscribed:
		res := r.matchSchedule(ev, futureQueue)
		if res == nil {
			r.octx.queue.bind(ev.EventID, k.Name)
			r.mustPoll = true
		}
		return res
	case cdb.SubOrchestrationScheduled:
		res := r.matchSchedule(ev, futureSubOrchestration)
		if res == nil {
			r.octx.childInstances[r.octx.tokens[ev.EventID]] = k.Instance
		}
		return res
	case cdb.OrchestrationChained:
		_, res := r.popMatching(ev)
		return res
	case cdb.ActivityCompleted:
		return r.deliver(ev, futureActivity, completion{value: k.Result})
	case cdb.ActivityFailed:
		return r.deliver(ev, futureActivity, completion{err: &TaskFailedError{Details: k.Details}})
	case cdb.TimerFired:
		return r.deliver(ev, futureTimer, completion{})
	case cdb.SubOrchestrationCompleted:
		return r.deliver(ev, futureSubOrchestration, completion{value: k.Result})
	case cdb.SubOrchestrationFailed:
		return r.deliver(ev, futureSubOrchestration, completion{err: &TaskFailedError{Details: k.Details}})
	case cdb.ExternalSubscribedCancelled:
		if ev.SourceEventID != nil {
			r.octx.external.cancel(*ev.SourceEventID)
		}
	case cdb.QueueSubscriptionCancelled:
		if ev.SourceEventID != nil {
			r.octx.queue.cancel(*ev.SourceEventID)
		}
	case cdb.ExternalEvent:
		// A waiting subscription takes an event, else the buffer of an
		// execution that buffers; otherwise it stays in the history,
		// undelivered.
		if r.octx.external.arrive(k.Name, k.Data) {
			r.mustPoll = true
		} else {
			r.logUndelivered(k.Name)
		}
	case cdb.QueueEventDelivered:
		r.octx.queue.deliver(k.Name, k.Data)
		r.mustPoll = true
	case cdb.OrchestrationCancelRequested:
		r.deliverCancellation(ev, k.Reason)
	}
	return nil
}

// matchMetadata checks a custom status or KV event against the code's next
// action. Such an event with no action left is tolerated, as duroxide does.
func (r *replayRun) matchMetadata(ev cdb.Event) *turnResult {
	if len(r.emitted) == 0 {
		return nil
	}
	next := r.emitted[0]
	r.emitted = r.emitted[1:]
	if !next.action.matches(ev.Kind) {
		res := failed(nondeterminism(fmt.Sprintf("history has %s at event %d but the code did %s",
			ev.Kind.Type(), ev.EventID, next.action.describe())))
		return &res
	}
	return nil
}

// popMatching pops the code's next action and checks it recorded ev.
func (r *replayRun) popMatching(ev cdb.Event) (uint64, *turnResult) {
	if len(r.emitted) == 0 {
		res := failed(nondeterminism(fmt.Sprintf("history has %s at event %d but the code scheduled nothing",
			ev.Kind.Type(), ev.EventID)))
		return 0, &res
	}
	next := r.emitted[0]
	r.emitted = r.emitted[1:]
	if !next.action.matches(ev.Kind) {
		res := failed(nondeterminism(fmt.Sprintf("schedule mismatch at event %d: history has %s, the code scheduled %s",
			ev.EventID, describeEvent(ev.Kind), next.action.describe())))
		return 0, &res
	}
	r.octx.bind(next.token, ev.EventID)
	return next.token, nil
}

// matchSchedule replays a scheduling event: it binds the code's next action
// to it and opens the schedule for its completion.
func (r *replayRun) matchSchedule(ev cdb.Event, kind futureKind) *turnResult {
	if _, res := r.popMatching(ev); res != nil {
		return res
	}
	r.open[ev.EventID] = kind
	return nil
}

// deliver hands a completion to the future of its scheduling event.
func (r *replayRun) deliver(ev cdb.Event, kind futureKind, result completion) *turnResult {
	if ev.SourceEventID == nil {
		return nil
	}
	source := *ev.SourceEventID
	openKind, ok := r.open[source]
	if !ok {
		res := failed(nondeterminism(fmt.Sprintf("%s at event %d completes event %d, which is not an open schedule",
			ev.Kind.Type(), ev.EventID, source)))
		return &res
	}
	if openKind != kind {
		res := failed(nondeterminism(fmt.Sprintf("%s at event %d completes event %d of another kind",
			ev.Kind.Type(), ev.EventID, source)))
		return &res
	}
	delete(r.open, source)
	r.octx.deliver(source, result)
	r.mustPoll = true
	return nil
}

// cancelDroppedQueueSubscriptions frees the FIFO slots of queue
// subscriptions that lost a Select, before new subscriptions are matched.
func (r *replayRun) cancelDroppedQueueSubscriptions() {
	for _, d := range r.octx.dropped {
		if id, bound := r.octx.bindings[d.token]; bound && d.kind == futureQueue {
			r.octx.queue.cancel(id)
		}
	}
}

// convertEmitted turns the actions history did not match into new events
// and pending actions. Continue-as-new takes no event id: its terminal
// event is written at the end of the turn.
func (r *replayRun) convertEmitted() {
	e := r.engine
	for _, em := range r.emitted {
		a := em.action
		if a.kind == actContinueAsNew {
			e.pending = append(e.pending, a)
			continue
		}
		a.eventID = e.nextEventID
		r.octx.bind(em.token, a.eventID)
		switch a.kind {
		case actStartSubOrchestration:
			if a.instance == "" {
				a.instance = autoChildSuffix(e.childIDForm(), e.executionID, a.eventID)
			}
			r.octx.childInstances[em.token] = a.instance
		case actWaitExternal:
			r.octx.external.bind(a.eventID, a.name, a.buffered)
		case actDequeueEvent:
			r.octx.queue.bind(a.eventID, a.name)
		}
		kind, _ := a.eventKind()
		e.appendEvent(nil, kind)
		e.pending = append(e.pending, a)
	}
	r.emitted = nil
}

// finalize decides the turn's result: a cancellation request wins (once
// the compensation of code that handles it is over), then continue-as-new,
// then the orchestration's own return.
func (r *replayRun) finalize() turnResult {
	e := r.engine
	e.queueCancelled, e.queueRead = r.octx.queue.cancelled, r.octx.queueRead
	e.events = &r.octx.external
	if c := r.octx.cancellation; c != nil && c.requested {
		if res := r.cancelledAfterCompensation(); res != nil {
			return *res
		}
	} else if reason, ok := cancelRequested(e.history()); ok {
		return turnResult{kind: turnCancelled, reason: reason}
	}
	for _, a := range e.pending {
		if a.kind == actContinueAsNew {
			return turnResult{kind: turnContinueAsNew, input: a.input, version: a.version}
		}
	}
	if res := r.collectDropped(); res != nil {
		return *res
	}
	if r.output == nil {
		return turnResult{kind: turnContinue}
	}
	if r.output.err != nil {
		return failed(applicationFailure(cdb.AppOrchestrationFailed{}, r.output.err, e.errorTypes))
	}
	return turnResult{kind: turnCompleted, output: r.output.value}
}

// cancelRequested finds an OrchestrationCancelRequested event.
func cancelRequested(history []cdb.Event) (string, bool) {
	for _, ev := range history {
		if k, ok := ev.Kind.(cdb.OrchestrationCancelRequested); ok {
			return k.Reason, true
		}
	}
	return "", false
}

func describeEvent(kind cdb.EventKind) string {
	switch k := kind.(type) {
	case cdb.ActivityScheduled:
		return "activity " + fmt.Sprintf("%q", k.Name)
	case cdb.SubOrchestrationScheduled:
		return "sub-orchestration " + fmt.Sprintf("%q", k.Name)
	case cdb.OrchestrationChained:
		return "detached orchestration " + fmt.Sprintf("%q", k.Name)
	case cdb.ExternalSubscribed:
		return "wait for event " + fmt.Sprintf("%q", k.Name)
	case cdb.QueueSubscribed:
		return "dequeue " + fmt.Sprintf("%q", k.Name)
	}
	return kind.Type()
}
