package otelcdb

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/duroxide-go/cdb"
)

// NewMeter returns the cdb.Meter whose instruments record to mp's meter
// "github.com/duroxide-go/cdb". A nil mp is OpenTelemetry's global one.
func NewMeter(mp metric.MeterProvider, opts ...Option) cdb.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return &meter{
		meter: mp.Meter(instrumentationName, metric.WithInstrumentationVersion(cdb.Version)),
		cfg:   newConfig(opts),
	}
}

type meter struct {
	meter metric.Meter
	cfg   config
}

func (m *meter) Counter(name, unit, description string) cdb.Counter {
	c, err := m.meter.Float64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	m.reportFailure("counter", name, err)
	if c == nil {
		c = noop.Float64Counter{}
	}
	return counter{c}
}

func (m *meter) Histogram(name, unit, description string) cdb.Histogram {
	opts := []metric.Float64HistogramOption{metric.WithUnit(unit), metric.WithDescription(description)}
	if bounds := m.cfg.boundaries[unit]; len(bounds) > 0 {
		opts = append(opts, metric.WithExplicitBucketBoundaries(bounds...))
	}
	h, err := m.meter.Float64Histogram(name, opts...)
	m.reportFailure("histogram", name, err)
	if h == nil {
		h = noop.Float64Histogram{}
	}
	return histogram{h}
}

func (m *meter) Gauge(name, unit, description string) cdb.Gauge {
	g, err := m.meter.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(description))
	m.reportFailure("gauge", name, err)
	if g == nil {
		g = noop.Float64Gauge{}
	}
	return gauge{g}
}

// reportFailure passes on an instrument's error once, when it is made: the
// instrument is then recorded to on the request path, where an error could
// only repeat. An SDK may return a working instrument with its error (the
// Go SDK does for a name it finds invalid, or bucket boundaries it ignores);
// that one is kept, and only a missing one is replaced by a no-op.
func (m *meter) reportFailure(kind, name string, err error) {
	if err != nil {
		m.cfg.handleError(fmt.Errorf("otelcdb: making the %s %q: %w", kind, name, err))
	}
}

// Each measurement without attributes skips the conversion: most of cdb's
// carry one or two, some none.

type counter struct{ c metric.Float64Counter }

func (c counter) Add(ctx context.Context, incr float64, attrs ...slog.Attr) {
	if len(attrs) == 0 {
		c.c.Add(ctx, incr)
		return
	}
	c.c.Add(ctx, incr, metric.WithAttributes(keyValues(attrs)...))
}

type histogram struct{ h metric.Float64Histogram }

func (h histogram) Record(ctx context.Context, value float64, attrs ...slog.Attr) {
	if len(attrs) == 0 {
		h.h.Record(ctx, value)
		return
	}
	h.h.Record(ctx, value, metric.WithAttributes(keyValues(attrs)...))
}

type gauge struct{ g metric.Float64Gauge }

func (g gauge) Record(ctx context.Context, value float64, attrs ...slog.Attr) {
	if len(attrs) == 0 {
		g.g.Record(ctx, value)
		return
	}
	g.g.Record(ctx, value, metric.WithAttributes(keyValues(attrs)...))
}
