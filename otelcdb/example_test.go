package otelcdb_test

import (
	"context"
	"fmt"
	"log/slog"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

// New bridges cdb's telemetry hooks to the program's OpenTelemetry
// providers. A program builds its providers with the exporters it uses
// (OTLP, Prometheus, ...); here a manual reader stands in for them, so the
// example can show what cdb's instruments record.
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) }()

	var tel cdb.Telemetry = otelcdb.New(mp, tp)
	// The client and the provider take it in their options:
	//
	//	client, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key, Telemetry: tel})

	// What cdb does with it, for the example: count a request.
	tel.Meter.Counter("cdb.requests", "{request}", "Requests sent.").Add(ctx, 1, slog.String("op", "read"))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	m := rm.ScopeMetrics[0].Metrics[0]
	fmt.Println(rm.ScopeMetrics[0].Scope.Name, m.Name, m.Data.(metricdata.Sum[float64]).DataPoints[0].Value)
	// Output: github.com/duroxide-go/cdb cdb.requests 1
}

// Global reports to the providers otel.SetMeterProvider and
// otel.SetTracerProvider install, even those set after it is called.
func ExampleGlobal() {
	tel := otelcdb.Global(otelcdb.WithRequestSpans())
	fmt.Println(tel.Meter != nil, tel.Tracer != nil, tel.RequestSpans)
	// Output: true true true
}
