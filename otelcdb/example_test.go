package otelcdb_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

// New bridges cdb's telemetry hooks to the program's OpenTelemetry
// providers, given to the client in its options (and so to the provider
// built on it). A program builds its providers with the exporters it uses
// (OTLP, Prometheus, ...); here a manual reader stands in for them, and the
// in-memory Cosmos DB account for a real one.
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) }()

	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	client, err := cdb.NewClient(account.Endpoint(), cdb.ClientOptions{
		Key: account.Key(), Transport: account.Transport(),
		Telemetry: otelcdb.New(mp, tp),
	})
	if err != nil {
		panic(err)
	}
	if _, err := client.CreateDatabase(ctx, "orders"); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "db.client.operation.duration" {
			point := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
			operation, _ := point.Attributes.Value("db.operation.name")
			fmt.Println(m.Name, m.Unit, operation.AsString(), point.Count)
		}
	}
	// Output: db.client.operation.duration s CreateDatabase 1
}

// Global reports to the providers otel.SetMeterProvider and
// otel.SetTracerProvider install, even those set after it is called.
func ExampleGlobal() {
	tel := otelcdb.Global(otelcdb.WithRequestSpans())
	fmt.Println(tel.Meter != nil, tel.Tracer != nil, tel.RequestSpans)
	// Output: true true true
}
