package otelcdb_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

// newMeterReader returns a cdb.Meter over an SDK meter provider and the
// reader that collects what it recorded.
func newMeterReader(t *testing.T, opts ...otelcdb.Option) (cdb.Meter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return otelcdb.NewMeter(mp, opts...), reader
}

// collect returns the metrics reader holds, by name, and checks they come
// from cdb's scope.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	byName := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, "github.com/duroxide-go/cdb", sm.Scope.Name)
		assert.Equal(t, cdb.Version, sm.Scope.Version)
		for _, m := range sm.Metrics {
			byName[m.Name] = m
		}
	}
	return byName
}

func TestCounterIsAMonotonicFloatSumPerAttributeSet(t *testing.T) {
	m, reader := newMeterReader(t)
	c := m.Counter("cdb.requests", "{request}", "Requests sent to Cosmos DB.")
	ctx := context.Background()
	c.Add(ctx, 1, slog.String("op", "read"))
	c.Add(ctx, 2.5, slog.String("op", "read"))
	c.Add(ctx, 4, slog.String("op", "query"), slog.Int("status", 200))
	c.Add(ctx, 1)

	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        "cdb.requests",
		Description: "Requests sent to Cosmos DB.",
		Unit:        "{request}",
		Data: metricdata.Sum[float64]{
			Temporality: metricdata.CumulativeTemporality,
			IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[float64]{
				{Attributes: attribute.NewSet(attribute.String("op", "read")), Value: 3.5},
				{Attributes: attribute.NewSet(attribute.String("op", "query"), attribute.Int64("status", 200)), Value: 4},
				{Attributes: attribute.NewSet(), Value: 1},
			},
		},
	}, collect(t, reader)["cdb.requests"], metricdatatest.IgnoreTimestamp())
}

func TestHistogramInSecondsHasLatencyBuckets(t *testing.T) {
	m, reader := newMeterReader(t)
	h := m.Histogram("cdb.request.duration", "s", "How long a request took, its retries included.")
	h.Record(context.Background(), 0.004, slog.String("op", "read"))
	h.Record(context.Background(), 12, slog.String("op", "read"))

	got := collect(t, reader)["cdb.request.duration"]
	assert.Equal(t, "s", got.Unit)
	assert.Equal(t, "How long a request took, its retries included.", got.Description)
	data, ok := got.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "a cdb.Histogram is a float histogram, got %T", got.Data)
	require.Len(t, data.DataPoints, 1)
	point := data.DataPoints[0]
	assert.Equal(t, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, point.Bounds)
	assert.Equal(t, uint64(2), point.Count)
	assert.InDelta(t, 12.004, point.Sum, 1e-9)
	assert.Equal(t, attribute.NewSet(attribute.String("op", "read")), point.Attributes)
	// 0.004 falls in (0.0025, 0.005], 12 in (10, 30].
	assert.Equal(t, uint64(1), point.BucketCounts[2])
	assert.Equal(t, uint64(1), point.BucketCounts[13])
}

func TestHistogramInRequestUnitsHasChargeBuckets(t *testing.T) {
	m, reader := newMeterReader(t)
	m.Histogram("cdb.request.charge", "{request_unit}", "Request units charged.").Record(context.Background(), 7.62)

	data := collect(t, reader)["cdb.request.charge"].Data.(metricdata.Histogram[float64])
	assert.Equal(t, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}, data.DataPoints[0].Bounds)
}

func TestHistogramBoundariesOptionReplacesAUnitsBuckets(t *testing.T) {
	m, reader := newMeterReader(t, otelcdb.WithHistogramBoundaries("s", 0.1, 1), otelcdb.WithHistogramBoundaries("By", 1024, 1<<20))
	m.Histogram("latency", "s", "").Record(context.Background(), 0.5)
	m.Histogram("size", "By", "").Record(context.Background(), 2048)

	got := collect(t, reader)
	assert.Equal(t, []float64{0.1, 1}, got["latency"].Data.(metricdata.Histogram[float64]).DataPoints[0].Bounds)
	assert.Equal(t, []float64{1024, 1 << 20}, got["size"].Data.(metricdata.Histogram[float64]).DataPoints[0].Bounds)
}

func TestHistogramOfAnotherUnitHasTheSDKsDefaultBuckets(t *testing.T) {
	m, reader := newMeterReader(t)
	m.Histogram("turn.events", "{event}", "").Record(context.Background(), 3)

	sdkDefault := []float64{0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000}
	assert.Equal(t, sdkDefault, collect(t, reader)["turn.events"].Data.(metricdata.Histogram[float64]).DataPoints[0].Bounds)
}

func TestGaugeKeepsTheLastValuePerAttributeSet(t *testing.T) {
	m, reader := newMeterReader(t)
	g := m.Gauge("cdb.queue.depth", "{message}", "Messages waiting.")
	ctx := context.Background()
	g.Record(ctx, 10, slog.String("queue", "orchestrator"))
	g.Record(ctx, 3, slog.String("queue", "orchestrator"))
	g.Record(ctx, 7, slog.String("queue", "worker"))

	metricdatatest.AssertEqual(t, metricdata.Metrics{
		Name:        "cdb.queue.depth",
		Description: "Messages waiting.",
		Unit:        "{message}",
		Data: metricdata.Gauge[float64]{
			DataPoints: []metricdata.DataPoint[float64]{
				{Attributes: attribute.NewSet(attribute.String("queue", "orchestrator")), Value: 3},
				{Attributes: attribute.NewSet(attribute.String("queue", "worker")), Value: 7},
			},
		},
	}, collect(t, reader)["cdb.queue.depth"], metricdatatest.IgnoreTimestamp())
}

// errorsSeen is an otel.ErrorHandler that keeps what it is handed.
type errorsSeen []error

func (e *errorsSeen) Handle(err error) { *e = append(*e, err) }

// refusingMeterProvider's meter refuses every float instrument, returning
// no instrument, as an API implementation may.
type refusingMeterProvider struct{ noop.MeterProvider }

func (refusingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return refusingMeter{}
}

var errRefused = errors.New("instrument refused")

type refusingMeter struct{ noop.Meter }

func (refusingMeter) Float64Counter(string, ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	return nil, errRefused
}

func (refusingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errRefused
}

func (refusingMeter) Float64Gauge(string, ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	return nil, errRefused
}

func TestARefusedInstrumentIsReportedOnceAndRecordsNothing(t *testing.T) {
	var seen errorsSeen
	m := otelcdb.NewMeter(refusingMeterProvider{}, otelcdb.WithErrorHandler(&seen))
	ctx := context.Background()
	c := m.Counter("c", "1", "")
	h := m.Histogram("h", "s", "")
	g := m.Gauge("g", "1", "")
	for range 3 {
		c.Add(ctx, 1, slog.String("k", "v"))
		h.Record(ctx, 1)
		g.Record(ctx, 1)
	}

	require.Len(t, seen, 3, "one report per instrument, at its making, none per measurement")
	for _, err := range seen {
		assert.ErrorIs(t, err, errRefused)
	}
	assert.EqualError(t, seen[0], `otelcdb: making the counter "c": instrument refused`)
	assert.EqualError(t, seen[1], `otelcdb: making the histogram "h": instrument refused`)
	assert.EqualError(t, seen[2], `otelcdb: making the gauge "g": instrument refused`)
}

func TestAnInstrumentTheSDKWarnsAboutIsReportedAndKept(t *testing.T) {
	var seen errorsSeen
	m, reader := newMeterReader(t, otelcdb.WithErrorHandler(&seen))
	m.Counter("1st requests", "1", "").Add(context.Background(), 2)

	require.Len(t, seen, 1)
	assert.ErrorIs(t, seen[0], sdkmetric.ErrInstrumentName)
	got := collect(t, reader)["1st requests"]
	assert.Equal(t, 2.0, got.Data.(metricdata.Sum[float64]).DataPoints[0].Value, "the SDK's instrument still records")
}

func TestBoundariesTheSDKRefusesAreReportedAndItsDefaultBucketsKept(t *testing.T) {
	var seen errorsSeen
	m, reader := newMeterReader(t, otelcdb.WithErrorHandler(&seen), otelcdb.WithHistogramBoundaries("s", 2, 1))
	m.Histogram("latency", "s", "").Record(context.Background(), 0.5)

	require.Len(t, seen, 1)
	assert.ErrorContains(t, seen[0], `otelcdb: making the histogram "latency": `)
	point := collect(t, reader)["latency"].Data.(metricdata.Histogram[float64]).DataPoints[0]
	assert.Equal(t, uint64(1), point.Count)
	assert.Equal(t, []float64{0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000}, point.Bounds)
}
