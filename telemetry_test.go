package cdb

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTraceContextTraceIDReadsAW3CTraceParent(t *testing.T) {
	tc := TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", tc.TraceID())
	assert.False(t, tc.IsZero())
}

func TestTraceContextTraceIDIsEmptyForMalformedOrMissingParents(t *testing.T) {
	for _, p := range []string{"", "00-short-00f067aa0ba902b7-01", "00x4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		assert.Equal(t, "", TraceContext{TraceParent: p}.TraceID(), p)
	}
	assert.True(t, TraceContext{}.IsZero())
}

func TestZeroTelemetryRecordsNothingAndNeverPanics(t *testing.T) {
	tel := newTelemetry(Telemetry{RequestSpans: true})
	assert.False(t, tel.requestSpans, "request spans need a tracer")
	tel.meter.Counter("c", "1", "").Add(context.Background(), 1)
	tel.meter.Histogram("h", "s", "").Record(context.Background(), 1)
	tel.meter.Gauge("g", "1", "").Record(context.Background(), 1)
	ctx, span := tel.tracer.Start(context.Background(), "s", SpanOptions{})
	assert.Equal(t, NoopSpan{}, span)
	span.End()
	assert.Equal(t, context.Background(), ctx)
	assert.True(t, span.TraceContext().IsZero())
}
