package cdb

import (
	"context"
	"log/slog"
	"time"
)

// Telemetry: the hooks through which the client, the provider and the
// runtime report measurements and spans. The module depends on no
// telemetry SDK: these interfaces are small enough to implement over any,
// and the nested module github.com/duroxide-go/cdb/otelcdb implements them
// over OpenTelemetry. Attributes are slog.Attr, so a value is typed
// (string, int64, float64, bool) without a type of our own.
//
// Every method may be called from many goroutines at once; an
// implementation must be safe for that and must not block: the hooks are
// called on the request path.

// Telemetry says where measurements and spans go. The zero value sends
// them nowhere, at no cost.
type Telemetry struct {
	// Meter receives the metrics; nil records none.
	Meter Meter
	// Tracer receives the spans; nil records none.
	Tracer Tracer
	// RequestSpans makes a span of every Cosmos DB operation (one per
	// call, its retries included), a child of the caller's span. Off by
	// default: a turn makes several requests, and most tracing backends
	// charge per span. The Tracer's sampler applies either way.
	RequestSpans bool
}

// Meter makes the instruments a component records to. A component makes
// its instruments once, when it is built, and records to them for its
// whole life.
type Meter interface {
	// Counter is a monotonic sum, such as requests sent or request units
	// consumed.
	Counter(name, unit, description string) Counter
	// Histogram is a distribution, such as durations or sizes.
	Histogram(name, unit, description string) Histogram
	// Gauge is a value sampled now and then, such as a queue's depth;
	// each Record replaces the last value of its attribute set.
	Gauge(name, unit, description string) Gauge
}

// Counter adds to a sum; incr is never negative.
type Counter interface {
	// Add adds incr to the sum of the attribute set attrs.
	Add(ctx context.Context, incr float64, attrs ...slog.Attr)
}

// Histogram records one value of a distribution.
type Histogram interface {
	// Record adds value to the distribution of the attribute set attrs.
	Record(ctx context.Context, value float64, attrs ...slog.Attr)
}

// Gauge records the current value of something sampled.
type Gauge interface {
	// Record sets the value of the attribute set attrs.
	Record(ctx context.Context, value float64, attrs ...slog.Attr)
}

// Tracer starts spans.
type Tracer interface {
	// Start begins a span, a child of the span ctx carries or, when ctx
	// carries none, of o.Remote; it returns ctx carrying the new span.
	Start(ctx context.Context, name string, o SpanOptions) (context.Context, Span)
}

// SpanKind says what a span stands for, as OpenTelemetry's kinds do.
type SpanKind int

const (
	SpanKindInternal SpanKind = iota // work inside the process
	SpanKindClient                   // a request to the store
	SpanKindProducer                 // work handed to a queue (a start, a scheduled activity)
	SpanKindConsumer                 // work taken from a queue (a turn, an activity execution)
)

// SpanOptions shape a span at its start.
type SpanOptions struct {
	Kind       SpanKind
	Attributes []slog.Attr
	// Remote is the parent carried through the store (the trace context
	// of the span that enqueued the work), used when ctx carries no span.
	Remote TraceContext
	// Start backdates the span, for work whose start is known only when
	// it ends (a durable timer: scheduled at one turn, fired at another).
	// Zero is now.
	Start time.Time
}

// Span is one timed piece of work.
type Span interface {
	// SetAttributes adds attributes known only after the start.
	SetAttributes(attrs ...slog.Attr)
	// RecordError marks the span failed with err.
	RecordError(err error)
	// End finishes the span; calls after the first do nothing.
	End()
	// TraceContext is the span's W3C trace context, to carry through the
	// store so that the work's consumer continues the trace.
	TraceContext() TraceContext
}

// TraceContext is a W3C trace context (https://www.w3.org/TR/trace-context/):
// what travels with a message so that the process that takes it continues
// the trace of the process that sent it. The zero value carries nothing.
type TraceContext struct {
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// IsZero reports a context that carries no trace.
func (tc TraceContext) IsZero() bool { return tc.TraceParent == "" }

// TraceID is the trace id of the traceparent ("" when it carries none or
// is malformed), for log records that correlate with the trace.
func (tc TraceContext) TraceID() string {
	// version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2.
	p := tc.TraceParent
	if len(p) != 55 || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return ""
	}
	return p[3:35]
}

// telemetry is what a component holds: the hooks with their nil cases
// made no-ops, so that call sites never check.
type telemetry struct {
	meter        Meter
	tracer       Tracer
	requestSpans bool
}

func newTelemetry(t Telemetry) telemetry {
	out := telemetry{meter: t.Meter, tracer: t.Tracer, requestSpans: t.RequestSpans && t.Tracer != nil}
	if out.meter == nil {
		out.meter = noopMeter{}
	}
	if out.tracer == nil {
		out.tracer = noopTracer{}
	}
	return out
}

type noopMeter struct{}

func (noopMeter) Counter(string, string, string) Counter     { return noopInstrument{} }
func (noopMeter) Histogram(string, string, string) Histogram { return noopInstrument{} }
func (noopMeter) Gauge(string, string, string) Gauge         { return noopInstrument{} }

type noopInstrument struct{}

func (noopInstrument) Add(context.Context, float64, ...slog.Attr)    {}
func (noopInstrument) Record(context.Context, float64, ...slog.Attr) {}

type noopTracer struct{}

func (noopTracer) Start(ctx context.Context, _ string, _ SpanOptions) (context.Context, Span) {
	return ctx, NoopSpan{}
}

// NoopSpan is the Span that records nothing: the span of a component
// without a Tracer, and one a Tracer may return for work it leaves out.
type NoopSpan struct{}

// SetAttributes does nothing.
func (NoopSpan) SetAttributes(...slog.Attr) {}

// RecordError does nothing.
func (NoopSpan) RecordError(error) {}

// End does nothing.
func (NoopSpan) End() {}

// TraceContext is the zero TraceContext: work handed on continues no trace.
func (NoopSpan) TraceContext() TraceContext { return TraceContext{} }
