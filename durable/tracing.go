package durable

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/duroxide-go/cdb"
)

// The runtime's spans, on Options.Telemetry.Tracer: a client's start, each
// orchestration turn, each activity execution and each fired timer. The
// trace crosses the store as a cdb.TraceContext on the start and on every
// activity and child start a turn schedules (a cdb.TraceCarrier keeps it
// beside duroxide's JSON), so a turn continues the trace of its instance's
// start and an activity the trace of the turn that scheduled it, in
// whichever process takes them. Spans come only from work done now (a
// start, a fetched item, a fired timer a turn consumes), never from
// history replayed, so a replay emits none twice. Unlike metrics, spans
// carry instance ids.

// Span names (the orchestration's or activity's name follows) and the
// attribute keys only spans carry.
const (
	spanStartOrchestration = "start_orchestration "
	spanOrchestration      = "orchestration "
	spanActivity           = "activity "
	spanTimer              = "timer"

	attrInstanceID  = "durable.instance.id"
	attrExecutionID = "durable.orchestration.execution_id"
	attrActivityID  = "durable.activity.id"
	attrTimerID     = "durable.timer.id"
	attrTimerFireAt = "durable.timer.fire_at"
)

// startSpan starts a span on tracer, or none (at no cost) without one.
func startSpan(ctx context.Context, tracer cdb.Tracer, name string, o cdb.SpanOptions) (context.Context, cdb.Span) {
	if tracer == nil {
		return ctx, cdb.NoopSpan{}
	}
	return tracer.Start(ctx, name, o)
}

// startOrchestrationSpan is a client's start: a producer span, a child of
// the caller's span, whose trace context the start message carries.
func startOrchestrationSpan(ctx context.Context, tracer cdb.Tracer, start cdb.StartOrchestrationMessage) (context.Context, cdb.Span) {
	attrs := []slog.Attr{slog.String(attrInstanceID, start.Instance), slog.String(attrOrchestrationName, start.Orchestration)}
	if start.Version != nil {
		attrs = append(attrs, slog.String(attrOrchestrationVersion, *start.Version))
	}
	return startSpan(ctx, tracer, spanStartOrchestration+start.Orchestration,
		cdb.SpanOptions{Kind: cdb.SpanKindProducer, Attributes: attrs})
}

// endWithError ends span, failed with err when there is one.
func endWithError(span cdb.Span, err error) {
	if err != nil {
		span.RecordError(err)
	}
	span.End()
}

// turnSpanKey carries a turn's span in its context, for what the turn
// learns on its way (turnResolved) and what it schedules (withTurnTrace).
type turnSpanKey struct{}

// turnSpan is the span of the turn ctx is of, nil outside one or without
// a Tracer.
func turnSpan(ctx context.Context) cdb.Span {
	span, _ := ctx.Value(turnSpanKey{}).(cdb.Span)
	return span
}

// startTurnSpan is a turn's consumer span, continuing the trace of the
// instance's start (the item's TraceContext). ctx, the dispatcher's, carries
// no span, so the remote parent applies.
func (r *Runtime) startTurnSpan(ctx context.Context, item *cdb.OrchestrationItem, name string) (context.Context, cdb.Span) {
	if r.opts.Telemetry.Tracer == nil {
		return ctx, cdb.NoopSpan{}
	}
	attrs := []slog.Attr{
		slog.String(attrInstanceID, item.Instance),
		slog.String(attrOrchestrationName, name),
		slog.Int64(attrExecutionID, int64(item.ExecutionID)),
	}
	if item.Version != "" && item.Version != "unknown" {
		attrs = append(attrs, slog.String(attrOrchestrationVersion, item.Version))
	}
	ctx, span := r.opts.Telemetry.Tracer.Start(ctx, spanOrchestration+name, cdb.SpanOptions{
		Kind: cdb.SpanKindConsumer, Remote: item.TraceContext, Attributes: attrs,
	})
	return context.WithValue(ctx, turnSpanKey{}, span), span
}

// turnResolved adds to the turn's span the execution and version its code
// runs at, known once the registry resolved them (a first turn's item
// names no version when its start left it to the registry).
func turnResolved(ctx context.Context, executionID uint64, version string) {
	if span := turnSpan(ctx); span != nil {
		span.SetAttributes(slog.String(attrOrchestrationVersion, version), slog.Int64(attrExecutionID, int64(executionID)))
	}
}

// endTurnSpan ends a turn's span with what became of its item.
func endTurnSpan(span cdb.Span, outcome turnOutcome) {
	span.SetAttributes(slog.String(attrTurnOutcome, string(outcome)))
	span.End()
}

// withTurnTrace makes every activity and start t schedules carry the trace
// context of the turn's span, which ctx carries; t is unchanged without one.
func withTurnTrace(ctx context.Context, t turn) turn {
	span := turnSpan(ctx)
	if span == nil {
		return t
	}
	tc := span.TraceContext()
	t.workerItems = tracedItems(t.workerItems, tc)
	t.orchestratorItems = tracedItems(t.orchestratorItems, tc)
	return t
}

// tracedItems is items, a copy, with every start and activity carrying tc.
func tracedItems(items []cdb.WorkItem, tc cdb.TraceContext) []cdb.WorkItem {
	if len(items) == 0 {
		return items
	}
	out := make([]cdb.WorkItem, len(items))
	for i, it := range items {
		out[i] = cdb.WithTraceContext(it, tc)
	}
	return out
}

// timerSpans emits a span for each timer whose firing a committed turn of
// item consumed: a TimerFired message of the item's execution whose
// TimerCreated is in the persisted history and whose TimerFired is not (a
// firing already in the history was consumed by an earlier turn). Each
// spans from its TimerCreated's timestamp to now, a child of the turn's
// span, which ctx carries.
func (r *Runtime) timerSpans(ctx context.Context, item *cdb.OrchestrationItem) {
	if r.opts.Telemetry.Tracer == nil {
		return
	}
	for _, msg := range item.Messages {
		fired, ok := msg.(cdb.TimerFiredMessage)
		if !ok || fired.ExecutionID != item.ExecutionID || timerFiredBefore(item.History, fired.ID) {
			continue
		}
		created, ok := timerCreated(item.History, fired.ID)
		if !ok {
			continue
		}
		_, span := startSpan(ctx, r.opts.Telemetry.Tracer, spanTimer, cdb.SpanOptions{
			Kind:  cdb.SpanKindInternal,
			Start: time.UnixMilli(int64(created.TimestampMs)),
			Attributes: []slog.Attr{
				slog.String(attrInstanceID, item.Instance),
				slog.String(attrOrchestrationName, item.OrchestrationName),
				slog.Int64(attrTimerID, int64(fired.ID)),
				slog.Time(attrTimerFireAt, time.UnixMilli(int64(fired.FireAtMs))),
			},
		})
		span.End()
	}
}

// timerCreated is the TimerCreated event id of history.
func timerCreated(history []cdb.Event, id uint64) (cdb.Event, bool) {
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.TimerCreated); ok && ev.EventID == id {
			return ev, true
		}
	}
	return cdb.Event{}, false
}

// timerFiredBefore says history has the firing of timer id already.
func timerFiredBefore(history []cdb.Event, id uint64) bool {
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.TimerFired); ok && ev.SourceEventID != nil && *ev.SourceEventID == id {
			return true
		}
	}
	return false
}

// startActivitySpan is an activity execution's consumer span, continuing
// the trace of the turn that scheduled it (the item's Trace). ctx, the
// dispatcher's, carries no span, so the remote parent applies.
func (r *Runtime) startActivitySpan(ctx context.Context, w lockedActivity) (context.Context, cdb.Span) {
	return startSpan(ctx, r.opts.Telemetry.Tracer, spanActivity+w.Name, cdb.SpanOptions{
		Kind:   cdb.SpanKindConsumer,
		Remote: w.Trace,
		Attributes: []slog.Attr{
			slog.String(attrInstanceID, w.Instance),
			slog.String(attrActivityName, w.Name),
			slog.Int64(attrExecutionID, int64(w.ExecutionID)),
			slog.Int64(attrActivityID, int64(w.ID)),
			slog.Int64(attrActivityAttempt, int64(w.runs().attempt)),
			slog.Int64(attrActivityDelivery, int64(w.runs().delivery)),
		},
	})
}

// endActivitySpan ends an activity's span with its outcome, failed with
// the handler's error (or what interrupted it) when there is one.
func endActivitySpan(span cdb.Span, outcome activityOutcome, err error) {
	span.SetAttributes(slog.String(attrActivityOutcome, string(outcome)))
	endWithError(span, err)
}

// errActivityNotRegistered fails the span of an activity fetched where no
// handler of its name is registered.
var errActivityNotRegistered = errors.New("durable: activity not registered in this runtime")

// traceLog adds the trace id of tc to log, when tc carries one, so that a
// record correlates with its trace.
func traceLog(log *slog.Logger, tc cdb.TraceContext) *slog.Logger {
	if id := tc.TraceID(); id != "" {
		return log.With("trace_id", id)
	}
	return log
}

// spanFreeContext ends when parent does but carries none of its values: a
// span on Start's context must not become the parent of every turn and
// activity, which continue the traces their items carry.
func spanFreeContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}
