package otelcdb

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroxide-go/cdb"
)

// The W3C trace context's header names, the keys of the map the propagator
// reads and writes.
const (
	traceParentKey = "traceparent"
	traceStateKey  = "tracestate"
)

// NewTracer returns the cdb.Tracer whose spans go to tp's tracer
// "github.com/duroxide-go/cdb". A nil tp is OpenTelemetry's global one.
// No Option concerns the tracer yet; it takes them as New passes them.
func NewTracer(tp trace.TracerProvider, opts ...Option) cdb.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tracer{tp.Tracer(instrumentationName, trace.WithInstrumentationVersion(cdb.Version))}
}

type tracer struct{ tracer trace.Tracer }

// Start begins a span under the span ctx carries or, when it carries none,
// under o.Remote: a consumer of work continues the producer's trace, while
// work started inside a caller's span stays in the caller's.
func (t tracer) Start(ctx context.Context, name string, o cdb.SpanOptions) (context.Context, cdb.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() && !o.Remote.IsZero() {
		ctx = withRemoteParent(ctx, o.Remote)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(spanKind(o.Kind))}
	if len(o.Attributes) > 0 {
		opts = append(opts, trace.WithAttributes(keyValues(o.Attributes)...))
	}
	if !o.Start.IsZero() {
		opts = append(opts, trace.WithTimestamp(o.Start))
	}
	ctx, s := t.tracer.Start(ctx, name, opts...)
	return ctx, span{s}
}

// withRemoteParent is ctx carrying tc as a remote span context; a
// malformed tc leaves ctx as it is, and the span starts a trace of its own.
func withRemoteParent(ctx context.Context, tc cdb.TraceContext) context.Context {
	carrier := propagation.MapCarrier{traceParentKey: tc.TraceParent}
	if tc.TraceState != "" {
		carrier[traceStateKey] = tc.TraceState
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

func spanKind(k cdb.SpanKind) trace.SpanKind {
	switch k {
	case cdb.SpanKindClient:
		return trace.SpanKindClient
	case cdb.SpanKindProducer:
		return trace.SpanKindProducer
	case cdb.SpanKindConsumer:
		return trace.SpanKindConsumer
	default:
		return trace.SpanKindInternal
	}
}

type span struct{ span trace.Span }

func (s span) SetAttributes(attrs ...slog.Attr) {
	if len(attrs) > 0 {
		s.span.SetAttributes(keyValues(attrs)...)
	}
}

func (s span) RecordError(err error) {
	if err == nil {
		return
	}
	s.span.RecordError(err)
	s.span.SetStatus(codes.Error, err.Error())
}

func (s span) End() { s.span.End() }

// TraceContext writes the span's context as the W3C headers would carry
// it; a span with no valid context (a no-op tracer's) carries nothing.
func (s span) TraceContext() cdb.TraceContext {
	carrier := propagation.MapCarrier{}
	ctx := trace.ContextWithSpanContext(context.Background(), s.span.SpanContext())
	propagation.TraceContext{}.Inject(ctx, carrier)
	return cdb.TraceContext{TraceParent: carrier[traceParentKey], TraceState: carrier[traceStateKey]}
}
