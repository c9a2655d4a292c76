package durable

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/duroxide-go/cdb"
)

// The runtime's metrics: duroxide's metric set (orchestration starts,
// completions, failures, durations, history sizes, turns, activity
// executions, poison), named as OpenTelemetry names instruments (dotted,
// the unit apart from the name, UCUM units) and recorded to
// Options.Telemetry.Meter. Attributes are names and outcomes only, never
// instance ids, so a series stays one per orchestration or activity name.

// Instrument names.
const (
	metricOrchestrationStarts      = "durable.orchestration.starts"
	metricOrchestrationCompletions = "durable.orchestration.completions"
	metricOrchestrationFailures    = "durable.orchestration.failures"
	metricOrchestrationDuration    = "durable.orchestration.duration"
	metricTurns                    = "durable.orchestration.turns"
	metricTurnDuration             = "durable.orchestration.turn.duration"
	metricTurnScheduleToStart      = "durable.orchestration.turn.schedule_to_start"
	metricHistorySize              = "durable.orchestration.history.size"
	metricParked                   = "durable.orchestration.parked"
	metricActivityExecutions       = "durable.activity.executions"
	metricActivityDuration         = "durable.activity.duration"
	metricActivityScheduleToStart  = "durable.activity.schedule_to_start"
	metricPoison                   = "durable.poison"
)

// Attribute keys.
const (
	attrOrchestrationName    = "durable.orchestration.name"
	attrOrchestrationVersion = "durable.orchestration.version"
	attrInitiatedBy          = "durable.orchestration.initiated_by"
	attrStatus               = "durable.orchestration.status"
	attrErrorType            = "error.type"
	attrTurnOutcome          = "durable.orchestration.turn.outcome"
	attrActivityName         = "durable.activity.name"
	attrActivityOutcome      = "durable.activity.outcome"
	attrActivityAttempt      = "durable.activity.attempt"
	attrActivityDelivery     = "durable.activity.delivery"
	attrQueue                = "durable.queue"
)

// turnOutcome is what became of a fetched orchestration item.
type turnOutcome string

const (
	// turnCommitted: the batch was consumed by an ack (a turn, a failure,
	// or a batch acked without a turn).
	turnCommitted turnOutcome = "committed"
	// turnAbandoned: the batch was given back (or its lock lost) and will
	// be fetched again.
	turnAbandoned turnOutcome = "abandoned"
	// turnParked: the code diverged from the history and the instance was
	// parked (NondeterminismPolicy).
	turnParked turnOutcome = "parked"
)

// activityOutcome is what became of a fetched activity.
type activityOutcome string

const (
	activityCompleted     activityOutcome = "completed"      // its result was acked
	activityFailed        activityOutcome = "failed"         // its failure was acked
	activityAbandoned     activityOutcome = "abandoned"      // released without a result; it runs again
	activityNotRegistered activityOutcome = "not_registered" // no handler here
)

// runtimeMetrics are the runtime's instruments, made once at Start. A nil
// *runtimeMetrics (no Meter) records nothing and builds no attributes.
type runtimeMetrics struct {
	starts, completions, failures, turns, parked, activityExecutions, poison cdb.Counter
	duration, turnDuration, historySize, activityDuration                    cdb.Histogram
	turnScheduleToStart, activityScheduleToStart                             cdb.Histogram
}

func newRuntimeMetrics(m cdb.Meter) *runtimeMetrics {
	if m == nil {
		return nil
	}
	return &runtimeMetrics{
		starts: m.Counter(metricOrchestrationStarts, "{orchestration}",
			"Executions started, counted when the turn that starts one is committed."),
		completions: m.Counter(metricOrchestrationCompletions, "{orchestration}",
			"Executions ended, by status."),
		failures: m.Counter(metricOrchestrationFailures, "{orchestration}",
			"Executions failed, by the kind of their error."),
		duration: m.Histogram(metricOrchestrationDuration, "s",
			"Time from an execution's start to its end, by the history's timestamps."),
		turns: m.Counter(metricTurns, "{turn}",
			"Orchestration items fetched and handled, by outcome."),
		turnDuration: m.Histogram(metricTurnDuration, "s",
			"Time from an orchestration item's fetch to its ack or release."),
		turnScheduleToStart: m.Histogram(metricTurnScheduleToStart, "s",
			"Time an orchestration item waited in its queue: from when its earliest message became takeable to its fetch."),
		historySize: m.Histogram(metricHistorySize, "{event}",
			"Events in an execution's history after a committed turn."),
		parked: m.Counter(metricParked, "{turn}",
			"Turns parked because the code no longer matches the history."),
		activityExecutions: m.Counter(metricActivityExecutions, "{execution}",
			"Activities taken to run, by outcome and delivery attempt."),
		activityDuration: m.Histogram(metricActivityDuration, "s",
			"Time from an activity handler's start to its result's ack or release."),
		activityScheduleToStart: m.Histogram(metricActivityScheduleToStart, "s",
			"Time an activity waited in the worker queue: from when it became takeable to its fetch."),
		poison: m.Counter(metricPoison, "{item}",
			"Items failed as poison, by queue."),
	}
}

// turnEnded counts a fetched orchestration item and how long it was held.
func (m *runtimeMetrics) turnEnded(ctx context.Context, name string, outcome turnOutcome, held time.Duration) {
	if m == nil {
		return
	}
	attrs := []slog.Attr{slog.String(attrOrchestrationName, name), slog.String(attrTurnOutcome, string(outcome))}
	m.turns.Add(ctx, 1, attrs...)
	m.turnDuration.Record(ctx, held.Seconds(), attrs...)
}

// turnCommitted records what a committed turn wrote: the execution's
// start, its end (status, failure kind, duration) and its history's size.
// Everything is read from the committed events, so a turn that failed an
// instance for the runtime (a refusal, poison, a missing registration)
// counts like one the code ended.
func (m *runtimeMetrics) turnCommitted(ctx context.Context, item *cdb.OrchestrationItem, t turn) {
	if m == nil || len(t.delta) == 0 {
		return
	}
	history := t.delta
	if t.executionID == item.ExecutionID {
		history = slices.Concat(item.History, t.delta)
	}
	startEv, start, started := executionStart(history)
	name, version := item.OrchestrationName, item.Version
	if started {
		name, version = start.Name, start.Version
	}
	m.historySize.Record(ctx, float64(len(history)), slog.String(attrOrchestrationName, name))
	identity := []slog.Attr{slog.String(attrOrchestrationName, name), slog.String(attrOrchestrationVersion, version)}
	if startsExecution(t) {
		m.starts.Add(ctx, 1, append(identity, slog.String(attrInitiatedBy, initiatedBy(item, start)))...)
	}
	end := t.delta[len(t.delta)-1]
	status, details, ended := executionEnd(end)
	if !ended {
		return
	}
	m.completions.Add(ctx, 1, append(identity, slog.String(attrStatus, status))...)
	if details != nil {
		m.failures.Add(ctx, 1, append(identity, slog.String(attrErrorType, failureType(details)))...)
	}
	if started {
		m.duration.Record(ctx, elapsedSeconds(startEv.TimestampMs, end.TimestampMs), identity...)
	}
}

// parkedTurn counts a turn parked for nondeterminism.
func (m *runtimeMetrics) parkedTurn(ctx context.Context, name, version string) {
	if m == nil {
		return
	}
	m.parked.Add(ctx, 1, slog.String(attrOrchestrationName, name), slog.String(attrOrchestrationVersion, version))
}

// activityEnded counts an activity whose handler ran, and how long from
// its start until its result was acked or its item released.
func (m *runtimeMetrics) activityEnded(ctx context.Context, name string, runs activityRuns, outcome activityOutcome, took time.Duration) {
	if m == nil {
		return
	}
	m.activityExecutions.Add(ctx, 1, activityAttrs(name, runs, outcome)...)
	m.activityDuration.Record(ctx, took.Seconds(),
		slog.String(attrActivityName, name), slog.String(attrActivityOutcome, string(outcome)))
}

// activityUnregistered counts an activity fetched without a handler here.
func (m *runtimeMetrics) activityUnregistered(ctx context.Context, name string, runs activityRuns) {
	if m == nil {
		return
	}
	m.activityExecutions.Add(ctx, 1, activityAttrs(name, runs, activityNotRegistered)...)
}

// turnFetched records how long a fetched orchestration item waited in its
// queue (scheduleToStart).
func (m *runtimeMetrics) turnFetched(ctx context.Context, name string, fetched, visibleAt time.Time) {
	if m == nil || visibleAt.IsZero() {
		return
	}
	m.turnScheduleToStart.Record(ctx, scheduleToStart(fetched, visibleAt).Seconds(), slog.String(attrOrchestrationName, name))
}

// activityFetched records how long a fetched activity waited in the worker
// queue (scheduleToStart).
func (m *runtimeMetrics) activityFetched(ctx context.Context, name string, fetched, visibleAt time.Time) {
	if m == nil || visibleAt.IsZero() {
		return
	}
	m.activityScheduleToStart.Record(ctx, scheduleToStart(fetched, visibleAt).Seconds(), slog.String(attrActivityName, name))
}

// scheduleToStart is how long work waited between becoming takeable, by
// the store's clock as its provider reports it (VisibleAt), and its fetch,
// by the runtime's clock (Options.Now, the provider's service time by
// default). Clamped at zero: an item may be stamped a little ahead of the
// clock that fetched it (a writer's clock, a sequence's millisecond).
func scheduleToStart(fetched, visibleAt time.Time) time.Duration {
	return max(fetched.Sub(visibleAt), 0)
}

// poisoned counts an item failed as poison; queue is "orchestrator" or
// "worker".
func (m *runtimeMetrics) poisoned(ctx context.Context, queue string) {
	if m == nil {
		return
	}
	m.poison.Add(ctx, 1, slog.String(attrQueue, queue))
}

func activityAttrs(name string, runs activityRuns, outcome activityOutcome) []slog.Attr {
	return []slog.Attr{slog.String(attrActivityName, name), slog.String(attrActivityOutcome, string(outcome)),
		slog.String(attrActivityAttempt, countBucket(runs.attempt)), slog.String(attrActivityDelivery, countBucket(runs.delivery))}
}

// countBucket keeps an attempt or a delivery count low-cardinality: 1, 2,
// 3, 4+. The attempt is the retry policy's (1 without a policy); the
// delivery counts the provider's deliveries of one attempt's item (more
// than 1 after a lost lock, a crash or an abandon).
func countBucket(n uint32) string {
	switch {
	case n <= 1:
		return "1"
	case n == 2:
		return "2"
	case n == 3:
		return "3"
	}
	return "4+"
}

// executionStart is the execution's OrchestrationStarted, when the history
// has it (an undecodable history's poison failure has none).
func executionStart(history []cdb.Event) (cdb.Event, cdb.OrchestrationStarted, bool) {
	for _, ev := range history {
		if k, ok := ev.Kind.(cdb.OrchestrationStarted); ok {
			return ev, k, true
		}
	}
	return cdb.Event{}, cdb.OrchestrationStarted{}, false
}

// initiatedBy says what started an execution: a continue-as-new, a parent
// orchestration, or a client (a detached start, which has no parent, reads
// as a client's).
func initiatedBy(item *cdb.OrchestrationItem, start cdb.OrchestrationStarted) string {
	switch {
	case startsSuccessor(item.Messages):
		return "continue_as_new"
	case start.ParentInstance != nil:
		return "parent"
	}
	return "client"
}

// executionEnd is the status a terminal event gives its execution, with
// the failure's details (nil unless the execution failed). A cancellation
// is written as a failure but counted as canceled, not as a failure.
func executionEnd(ev cdb.Event) (status string, failure cdb.ErrorDetails, ok bool) {
	switch k := ev.Kind.(type) {
	case cdb.OrchestrationCompleted:
		return "completed", nil, true
	case cdb.OrchestrationContinuedAsNew:
		return "continued_as_new", nil, true
	case cdb.OrchestrationFailed:
		if app, isApp := k.Details.(cdb.ApplicationError); isApp {
			if _, cancelled := app.Kind.(cdb.AppCancelled); cancelled {
				return "canceled", nil, true
			}
		}
		return "failed", k.Details, true
	}
	return "", nil, false
}

// failureType is a failure's error.type: application, unregistered (a
// not-registered error, the orchestration's own or one its code passed
// on), nondeterminism, configuration, infrastructure or poison.
func failureType(d cdb.ErrorDetails) string {
	switch k := d.(type) {
	case cdb.ApplicationError:
		if ae, ok := parseApplicationError(k.Message); ok && ae.Type == notRegisteredType {
			return "unregistered"
		}
	case cdb.ConfigurationError:
		if k.Kind == cdb.ConfigNondeterminism {
			return "nondeterminism"
		}
	}
	return d.Category()
}

// elapsedSeconds is the time between two event timestamps; clocks of
// different runtimes may disagree, so it is never negative.
func elapsedSeconds(fromMs, toMs uint64) float64 {
	if toMs <= fromMs {
		return 0
	}
	return float64(toMs-fromMs) / 1000
}

// orchestrationNameOf names a fetched item's orchestration for its turn's
// measurements: the stored name, else the name its batch starts.
func orchestrationNameOf(item *cdb.OrchestrationItem) string {
	if item.OrchestrationName != "" && item.OrchestrationName != cdb.UnknownOrchestration {
		return item.OrchestrationName
	}
	for _, msg := range item.Messages {
		switch m := msg.(type) {
		case cdb.StartOrchestrationMessage:
			return m.Orchestration
		case cdb.ContinueAsNewMessage:
			return m.Orchestration
		}
	}
	return orElse(item.OrchestrationName, cdb.UnknownOrchestration)
}
