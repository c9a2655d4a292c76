package otelcdb

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroxide-go/cdb"
)

// instrumentationName names the meter and the tracer: the library that
// reports, not this bridge, as OpenTelemetry's instrumentation scopes do.
const instrumentationName = "github.com/duroxide-go/cdb"

// New returns the cdb.Telemetry that reports metrics to mp and spans to tp.
// A nil provider is OpenTelemetry's global one.
func New(mp metric.MeterProvider, tp trace.TracerProvider, opts ...Option) cdb.Telemetry {
	return cdb.Telemetry{
		Meter:        NewMeter(mp, opts...),
		Tracer:       NewTracer(tp, opts...),
		RequestSpans: newConfig(opts).requestSpans,
	}
}

// Global returns the cdb.Telemetry that reports to OpenTelemetry's global
// meter and tracer providers, including those set after it is called.
func Global(opts ...Option) cdb.Telemetry {
	return New(otel.GetMeterProvider(), otel.GetTracerProvider(), opts...)
}
