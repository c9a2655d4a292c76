package otelcdb

import (
	"slices"

	"go.opentelemetry.io/otel"
)

// Option changes how New, NewMeter and NewTracer report; each function
// takes the options that concern it and ignores the others.
type Option func(*config)

type config struct {
	boundaries   map[string][]float64
	requestSpans bool
	handleError  func(error)
}

// secondsBoundaries cover request latencies, from a point read in the same
// region (about 1 ms) to the longest retried operation (a minute).
func secondsBoundaries() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// requestUnitBoundaries cover a request's charge, from a 1 KB point read
// (1 RU) to a large query page or batch (10,000 RU).
func requestUnitBoundaries() []float64 {
	return []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}
}

func newConfig(opts []Option) config {
	cfg := config{
		boundaries: map[string][]float64{
			"s":              secondsBoundaries(),
			"{request_unit}": requestUnitBoundaries(),
		},
		handleError: otel.Handle,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// WithHistogramBoundaries sets the bucket boundaries the histograms in unit
// advise (increasing, as OpenTelemetry requires); no boundaries leaves the
// unit's histograms to the SDK's default buckets. The boundaries are
// advice: an SDK view that names its own wins.
func WithHistogramBoundaries(unit string, boundaries ...float64) Option {
	boundaries = slices.Clone(boundaries)
	return func(c *config) {
		// The map is the caller's own copy: newConfig makes one per call.
		c.boundaries[unit] = boundaries
	}
}

// WithRequestSpans sets cdb.Telemetry.RequestSpans in what New and Global
// return: a span for every Cosmos DB operation, not only for the
// orchestrations' and activities' work.
func WithRequestSpans() Option {
	return func(c *config) { c.requestSpans = true }
}

// WithErrorHandler receives the errors of instruments that could not be
// made, instead of otel.Handle.
func WithErrorHandler(h otel.ErrorHandler) Option {
	return func(c *config) { c.handleError = h.Handle }
}
