package otelcdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

func TestNewReportsToTheGivenProviders(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))

	tel := otelcdb.New(mp, tp)
	tel.Meter.Counter("c", "1", "").Add(context.Background(), 1)
	_, span := tel.Tracer.Start(context.Background(), "s", cdb.SpanOptions{})
	span.End()

	assert.Contains(t, collect(t, reader), "c")
	assert.Len(t, recorder.Ended(), 1)
	assert.False(t, tel.RequestSpans, "request spans are off unless asked for")
	assert.True(t, otelcdb.New(mp, tp, otelcdb.WithRequestSpans()).RequestSpans)
}

// The only test that sets OpenTelemetry's global providers: it checks that
// Global's hooks, made before, report to them after.
func TestGlobalReportsToProvidersSetAfterIt(t *testing.T) {
	tel := otelcdb.Global()
	counter := tel.Meter.Counter("c", "1", "")

	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	recorder := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))

	counter.Add(context.Background(), 1)
	_, span := tel.Tracer.Start(context.Background(), "s", cdb.SpanOptions{})
	span.End()

	assert.Contains(t, collect(t, reader), "c")
	require.Len(t, recorder.Ended(), 1)
	assert.Equal(t, "github.com/duroxide-go/cdb", recorder.Ended()[0].InstrumentationScope().Name)
}
