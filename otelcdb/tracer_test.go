package otelcdb_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

// newTracerRecorder returns a cdb.Tracer over an SDK tracer provider that
// samples every span, and the recorder of the spans it ends.
func newTracerRecorder(t *testing.T) (cdb.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return otelcdb.NewTracer(tp), recorder
}

func onlyEnded(t *testing.T, recorder *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := recorder.Ended()
	require.Len(t, ended, 1)
	return ended[0]
}

// A traceparent written by another process: trace 4bf9..., span 00f0...,
// sampled.
const (
	remoteTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	remoteSpanID  = "00f067aa0ba902b7"
	remoteParent  = "00-" + remoteTraceID + "-" + remoteSpanID + "-01"
)

func TestSpanCarriesItsKindAttributesAndStartTime(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	_, span := tracer.Start(context.Background(), "timer fired", cdb.SpanOptions{
		Kind:       cdb.SpanKindConsumer,
		Attributes: []slog.Attr{slog.String("cdb.instance", "order-1"), slog.Int("cdb.execution", 2)},
		Start:      start,
	})
	span.SetAttributes(slog.Bool("cdb.replayed", false))
	span.End()

	got := onlyEnded(t, recorder)
	assert.Equal(t, "timer fired", got.Name())
	assert.Equal(t, trace.SpanKindConsumer, got.SpanKind())
	assert.Equal(t, start, got.StartTime())
	assert.Equal(t, []attribute.KeyValue{
		attribute.String("cdb.instance", "order-1"),
		attribute.Int64("cdb.execution", 2),
		attribute.Bool("cdb.replayed", false),
	}, got.Attributes())
	assert.Equal(t, "github.com/duroxide-go/cdb", got.InstrumentationScope().Name)
	assert.Equal(t, cdb.Version, got.InstrumentationScope().Version)
	assert.False(t, got.Parent().IsValid(), "a span with no parent starts a trace")
}

func TestSpanKindsMapOneToOne(t *testing.T) {
	for kind, want := range map[cdb.SpanKind]trace.SpanKind{
		cdb.SpanKindInternal: trace.SpanKindInternal,
		cdb.SpanKindClient:   trace.SpanKindClient,
		cdb.SpanKindProducer: trace.SpanKindProducer,
		cdb.SpanKindConsumer: trace.SpanKindConsumer,
		cdb.SpanKind(99):     trace.SpanKindInternal,
	} {
		tracer, recorder := newTracerRecorder(t)
		_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{Kind: kind})
		span.End()
		assert.Equal(t, want, onlyEnded(t, recorder).SpanKind(), "cdb kind %d", kind)
	}
}

func TestSpanWithoutStartTimeStartsNow(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	before := time.Now()
	_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{})
	span.End()
	after := time.Now()

	got := onlyEnded(t, recorder).StartTime()
	assert.False(t, got.Before(before) || got.After(after), "start %v is not between %v and %v", got, before, after)
}

func TestSpanIsAChildOfTheSpanInItsContext(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	ctx, parent := tracer.Start(context.Background(), "turn", cdb.SpanOptions{})
	childCtx, child := tracer.Start(ctx, "request", cdb.SpanOptions{Kind: cdb.SpanKindClient, Remote: cdb.TraceContext{TraceParent: remoteParent}})
	child.End()
	parent.End()

	ended := recorder.Ended()
	require.Len(t, ended, 2)
	childSpan, parentSpan := ended[0], ended[1]
	assert.Equal(t, parentSpan.SpanContext().TraceID(), childSpan.SpanContext().TraceID(), "the context's span wins over Remote")
	assert.Equal(t, parentSpan.SpanContext().SpanID(), childSpan.Parent().SpanID())
	assert.False(t, childSpan.Parent().IsRemote())
	assert.Equal(t, childSpan.SpanContext(), trace.SpanContextFromContext(childCtx), "the returned context carries the new span")
}

func TestSpanWithoutOneInItsContextIsAChildOfTheRemoteContext(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	ctx, span := tracer.Start(context.Background(), "activity", cdb.SpanOptions{
		Kind:   cdb.SpanKindConsumer,
		Remote: cdb.TraceContext{TraceParent: remoteParent, TraceState: "vendor=abc"},
	})
	span.End()

	got := onlyEnded(t, recorder)
	assert.Equal(t, remoteTraceID, got.SpanContext().TraceID().String())
	assert.Equal(t, remoteSpanID, got.Parent().SpanID().String())
	assert.True(t, got.Parent().IsRemote())
	assert.Equal(t, "vendor=abc", got.SpanContext().TraceState().String(), "the trace state travels on")
	assert.Equal(t, got.SpanContext(), trace.SpanContextFromContext(ctx))
}

func TestSpanWithAMalformedRemoteContextStartsATrace(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "activity", cdb.SpanOptions{
		Remote: cdb.TraceContext{TraceParent: "00-not-a-trace-01"},
	})
	span.End()

	got := onlyEnded(t, recorder)
	assert.False(t, got.Parent().IsValid())
	assert.True(t, got.SpanContext().IsValid())
}

func TestTraceContextRoundTripsThroughTheStore(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	_, producer := tracer.Start(context.Background(), "schedule activity", cdb.SpanOptions{Kind: cdb.SpanKindProducer})
	carried := producer.TraceContext()
	producer.End()
	_, consumer := tracer.Start(context.Background(), "run activity", cdb.SpanOptions{Kind: cdb.SpanKindConsumer, Remote: carried})
	consumer.End()

	ended := recorder.Ended()
	require.Len(t, ended, 2)
	sent, received := ended[0].SpanContext(), ended[1]
	assert.Equal(t, "00-"+sent.TraceID().String()+"-"+sent.SpanID().String()+"-01", carried.TraceParent)
	assert.Equal(t, sent.TraceID().String(), carried.TraceID())
	assert.Empty(t, carried.TraceState)
	assert.Equal(t, sent.TraceID(), received.SpanContext().TraceID())
	assert.Equal(t, sent.SpanID(), received.Parent().SpanID())
	assert.True(t, received.Parent().IsRemote())
}

func TestTraceContextCarriesTheTraceState(t *testing.T) {
	tracer, _ := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{Remote: cdb.TraceContext{TraceParent: remoteParent, TraceState: "vendor=abc"}})
	defer span.End()

	tc := span.TraceContext()
	assert.Equal(t, remoteTraceID, tc.TraceID())
	assert.Equal(t, "vendor=abc", tc.TraceState)
}

func TestTraceContextOfANoOpSpanIsZero(t *testing.T) {
	tracer := otelcdb.NewTracer(tracenoop.NewTracerProvider())
	_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{})
	span.End()
	assert.True(t, span.TraceContext().IsZero())
}

func TestRecordErrorFailsTheSpan(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "request", cdb.SpanOptions{Kind: cdb.SpanKindClient})
	span.RecordError(errors.New("read item: 429 too many requests"))
	span.End()

	got := onlyEnded(t, recorder)
	assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "read item: 429 too many requests"}, got.Status())
	require.Len(t, got.Events(), 1)
	assert.Equal(t, "exception", got.Events()[0].Name)
	assert.Contains(t, got.Events()[0].Attributes, attribute.String("exception.message", "read item: 429 too many requests"))
}

func TestRecordErrorOfNilLeavesTheSpanUnset(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "request", cdb.SpanOptions{})
	span.RecordError(nil)
	span.End()

	got := onlyEnded(t, recorder)
	assert.Equal(t, codes.Unset, got.Status().Code)
	assert.Empty(t, got.Events())
}

func TestEndTwiceEndsOnce(t *testing.T) {
	tracer, recorder := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{})
	span.End()
	span.End()
	assert.Len(t, recorder.Ended(), 1)
}
