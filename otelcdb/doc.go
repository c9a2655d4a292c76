// Package otelcdb reports cdb's measurements and spans to OpenTelemetry.
//
// The module github.com/duroxide-go/cdb depends on no telemetry SDK: its
// client, provider and runtime report through the small interfaces of
// cdb.Telemetry (cdb.Meter and cdb.Tracer). This package implements them
// over OpenTelemetry's API, in a module of its own so that only the
// programs that use it depend on OpenTelemetry:
//
//	tel := otelcdb.New(meterProvider, tracerProvider)
//	// then pass tel where cdb takes a cdb.Telemetry
//
// Global does the same over the providers otel.SetMeterProvider and
// otel.SetTracerProvider install, and may be called before they are set:
// OpenTelemetry's global providers forward to the ones set later.
//
// # Metrics
//
// NewMeter makes the instruments on the meter named
// "github.com/duroxide-go/cdb", versioned cdb.Version. A cdb.Counter is a
// Float64Counter, a cdb.Histogram a Float64Histogram and a cdb.Gauge a
// Float64Gauge, with cdb's name, unit and description. A histogram in
// seconds ("s") advises buckets from 1 ms to 60 s, one in request units
// ("{request_unit}") buckets from 1 to 10,000 RU; WithHistogramBoundaries
// changes them for a unit, and an SDK view overrides either. An error in
// making an instrument is reported once, through otel.Handle unless
// WithErrorHandler says otherwise; the instrument the API returned with it
// is kept (the Go SDK returns a working one for a name it finds invalid),
// and none is a no-op.
//
// # Traces
//
// NewTracer starts spans on the tracer named "github.com/duroxide-go/cdb".
// A span's parent is the span the context carries; when it carries none,
// the cdb.SpanOptions.Remote trace context (the W3C traceparent and
// tracestate a message carried through the store) is the remote parent, so
// the process that runs an activity continues the trace of the one that
// scheduled it. A span's TraceContext is its context in W3C form, for cdb
// to store with the work it enqueues. RecordError records the error as an
// exception event and sets the span's status to Error.
//
// # Attributes
//
// cdb's attributes are slog.Attr; each becomes an attribute.KeyValue by
// its value's kind:
//
//   - string, int64, float64 and bool keep their type;
//   - uint64 becomes int64, clamped to math.MaxInt64;
//   - a time.Duration becomes a float64 of seconds, OpenTelemetry's unit of
//     time;
//   - a time.Time becomes an RFC 3339 string (with nanoseconds when it has
//     them);
//   - anything else becomes the string fmt.Sprint makes of it;
//   - a slog.LogValuer is resolved first;
//   - a group is flattened, its attributes' keys prefixed with the group's
//     key and a dot ("request.status"); a group with an empty key is
//     inlined, as slog's handlers do, and any other attribute with an empty
//     key is dropped, as OpenTelemetry keys cannot be empty.
package otelcdb
