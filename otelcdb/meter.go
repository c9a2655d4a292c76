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
	return counter{kept[metric.Float64Counter](m, "counter", name, c, err, noop.Float64Counter{})}
}

func (m *meter) Histogram(name, unit, description string) cdb.Histogram {
	opts := []metric.Float64HistogramOption{metric.WithUnit(unit), metric.WithDescription(description)}
	if bounds := m.cfg.boundaries[unit]; len(bounds) > 0 {
		opts = append(opts, metric.WithExplicitBucketBoundaries(bounds...))
	}
	h, err := m.meter.Float64Histogram(name, opts...)
	return recorder[metric.Float64Histogram]{kept[metric.Float64Histogram](m, "histogram", name, h, err, noop.Float64Histogram{})}
}

func (m *meter) Gauge(name, unit, description string) cdb.Gauge {
	g, err := m.meter.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(description))
	return recorder[metric.Float64Gauge]{kept[metric.Float64Gauge](m, "gauge", name, g, err, noop.Float64Gauge{})}
}

// kept is the instrument to record to, given what the API returned for it.
// An instrument's error is passed on once, when it is made: the instrument
// is then recorded to on the request path, where an error could only
// repeat. An SDK may return a working instrument with its error (the Go
// SDK does for a name it finds invalid, or bucket boundaries it ignores);
// that one is kept, and only a missing one is replaced by none, the no-op.
func kept[I any](m *meter, kind, name string, made I, err error, none I) I {
	if err != nil {
		m.cfg.handleError(fmt.Errorf("otelcdb: making the %s %q: %w", kind, name, err))
	}
	if any(made) == nil {
		return none
	}
	return made
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

// recorder is a histogram or a gauge: both record a value.
type recorder[I interface {
	Record(context.Context, float64, ...metric.RecordOption)
}] struct{ i I }

func (r recorder[I]) Record(ctx context.Context, value float64, attrs ...slog.Attr) {
	if len(attrs) == 0 {
		r.i.Record(ctx, value)
		return
	}
	r.i.Record(ctx, value, metric.WithAttributes(keyValues(attrs)...))
}
