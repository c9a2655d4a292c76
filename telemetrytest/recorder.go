// Package telemetrytest is an in-memory exporter for the hooks of
// cdb.Telemetry: a Recorder is a cdb.Meter and a cdb.Tracer that keeps the
// instruments made, every point recorded and every span, for a test to
// assert on. The module's own tests use it, and so can yours: give a
// Recorder to cdb.ClientOptions.Telemetry (or to whatever else takes a
// cdb.Telemetry) and read back what was reported, with no telemetry SDK.
//
// Attribute values are held as slog holds them (slog.Value.Any): an
// integer attribute is an int64, whatever integer type made it. The
// filters of Points and Sum are read the same way, so a filter of
// map[string]any{"code": 200} matches slog.Int("code", 200).
package telemetrytest

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"

	"github.com/duroxide-go/cdb"
)

// Recorder records in memory what is reported to it as a cdb.Meter and a
// cdb.Tracer. It is safe for concurrent use. The zero value is not ready:
// use NewRecorder.
type Recorder struct {
	mu          sync.Mutex
	instruments []Instrument
	points      []Point
	spans       []*span
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Kind is the kind of an instrument.
type Kind string

// The kinds of the instruments a cdb.Meter makes.
const (
	KindCounter   Kind = "counter"
	KindHistogram Kind = "histogram"
	KindGauge     Kind = "gauge"
)

// Instrument is an instrument a component made.
type Instrument struct {
	Name        string
	Unit        string
	Description string
	Kind        Kind
}

// Point is one value recorded to an instrument: a counter's increment, a
// histogram's value or a gauge's reading.
type Point struct {
	Instrument string // the instrument's name
	Kind       Kind
	Value      float64
	Attrs      []slog.Attr // as recorded, in order
}

// Attributes are the point's attributes by key (a key recorded twice keeps
// its last value), with values as slog.Value.Any returns them.
func (p Point) Attributes() map[string]any { return attrMap(p.Attrs) }

// Counter makes (or finds again) the counter name.
func (r *Recorder) Counter(name, unit, description string) cdb.Counter {
	return r.instrument(Instrument{Name: name, Unit: unit, Description: description, Kind: KindCounter})
}

// Histogram makes (or finds again) the histogram name.
func (r *Recorder) Histogram(name, unit, description string) cdb.Histogram {
	return r.instrument(Instrument{Name: name, Unit: unit, Description: description, Kind: KindHistogram})
}

// Gauge makes (or finds again) the gauge name.
func (r *Recorder) Gauge(name, unit, description string) cdb.Gauge {
	return r.instrument(Instrument{Name: name, Unit: unit, Description: description, Kind: KindGauge})
}

// instrument keeps in once, however many components make it: several
// clients may share one Recorder, as they would share one meter.
func (r *Recorder) instrument(in Instrument) recordingInstrument {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.instruments, in) {
		r.instruments = append(r.instruments, in)
	}
	return recordingInstrument{r: r, name: in.Name, kind: in.Kind}
}

// recordingInstrument is every kind of instrument: counters add, the
// others record, and all of them append a point.
type recordingInstrument struct {
	r    *Recorder
	name string
	kind Kind
}

func (in recordingInstrument) Add(_ context.Context, incr float64, attrs ...slog.Attr) {
	in.r.record(Point{Instrument: in.name, Kind: in.kind, Value: incr, Attrs: slices.Clone(attrs)})
}

func (in recordingInstrument) Record(_ context.Context, value float64, attrs ...slog.Attr) {
	in.r.record(Point{Instrument: in.name, Kind: in.kind, Value: value, Attrs: slices.Clone(attrs)})
}

func (r *Recorder) record(p Point) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.points = append(r.points, p)
}

// Instruments are the distinct instruments made so far, in the order they
// were first made.
func (r *Recorder) Instruments() []Instrument {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.instruments)
}

// Instrument is the instrument named name, if one was made (the first, if
// it was made twice with different units, descriptions or kinds).
func (r *Recorder) Instrument(name string) (Instrument, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.instruments {
		if in.Name == name {
			return in, true
		}
	}
	return Instrument{}, false
}

// Points are the points recorded to the instrument name ("" for every
// instrument) whose attributes hold every key of where with its value (nil
// matches every point), in the order they were recorded.
func (r *Recorder) Points(name string, where map[string]any) []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Point
	for _, p := range r.points {
		if (name == "" || p.Instrument == name) && matches(p.Attrs, where) {
			out = append(out, p)
		}
	}
	return out
}

// Sum adds up the values of Points(name, where).
func (r *Recorder) Sum(name string, where map[string]any) float64 {
	var sum float64
	for _, p := range r.Points(name, where) {
		sum += p.Value
	}
	return sum
}

// Reset forgets the points and spans recorded so far; the instruments,
// made once by a component for its whole life, stay.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.points = nil
	r.spans = nil
}

// matches reports attrs holding every key of where with an equal value.
func matches(attrs []slog.Attr, where map[string]any) bool {
	if len(where) == 0 {
		return true
	}
	have := attrMap(attrs)
	for k, want := range where {
		got, ok := have[k]
		if !ok || !reflect.DeepEqual(got, slog.AnyValue(want).Any()) {
			return false
		}
	}
	return true
}

func attrMap(attrs []slog.Attr) map[string]any {
	out := make(map[string]any, len(attrs))
	for _, a := range attrs {
		out[a.Key] = a.Value.Resolve().Any()
	}
	return out
}
