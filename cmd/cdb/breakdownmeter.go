package main

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/duroxide-go/cdb"
)

// breakdownMeter is the demo's own cdb.Meter: it aggregates in memory what
// the client and the runtime report, for the breakdown printed at the
// demo's end, so that the CLI needs no telemetry SDK (the root module must
// not import otelcdb). A series is an instrument and one set of attribute
// values; a counter keeps its sum, a gauge its last value, a histogram its
// count, sum, extremes and fixed logarithmic buckets.
//
// Memory is bounded whatever the run's length: the attributes the library
// records are names and outcomes, never ids, so the series are few, and a
// histogram's buckets are 16 per doubling of the values it saw (a duration
// from 1 µs to 1 min spans 26 doublings: at most 416 counts), so its
// percentiles are within about 2.2% of the exact ones (the bucket's
// geometric middle, clamped to the extremes seen).
type breakdownMeter struct {
	mu     sync.Mutex
	series map[string]*series // by instrument and attribute values (seriesKey)
}

func newBreakdownMeter() *breakdownMeter {
	return &breakdownMeter{series: map[string]*series{}}
}

// series is what one instrument recorded with one set of attributes.
type series struct {
	instrument string
	attrs      map[string]string
	dist       distribution // a counter's sum is dist.sum; a gauge's value too
}

func (m *breakdownMeter) Counter(name, _, _ string) cdb.Counter {
	return meterInstrument{m: m, name: name, record: (*distribution).addToSum}
}

func (m *breakdownMeter) Histogram(name, _, _ string) cdb.Histogram {
	return meterInstrument{m: m, name: name, record: (*distribution).add}
}

func (m *breakdownMeter) Gauge(name, _, _ string) cdb.Gauge {
	return meterInstrument{m: m, name: name, record: (*distribution).set}
}

// meterInstrument is every kind of instrument; record is what its kind
// does with a value.
type meterInstrument struct {
	m      *breakdownMeter
	name   string
	record func(*distribution, float64)
}

func (in meterInstrument) Add(_ context.Context, incr float64, attrs ...slog.Attr) {
	in.m.observe(in.name, incr, attrs, in.record)
}

func (in meterInstrument) Record(_ context.Context, value float64, attrs ...slog.Attr) {
	in.m.observe(in.name, value, attrs, in.record)
}

func (m *breakdownMeter) observe(name string, v float64, attrs []slog.Attr, record func(*distribution, float64)) {
	key := seriesKey(name, attrs)
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.series[key]
	if !ok {
		s = &series{instrument: name, attrs: attrStrings(attrs)}
		m.series[key] = s
	}
	record(&s.dist, v)
}

// seriesKey names a series: the instrument, then the attributes sorted by
// key, so that their order does not make another series.
func seriesKey(name string, attrs []slog.Attr) string {
	parts := make([]string, 0, len(attrs))
	for _, a := range attrs {
		parts = append(parts, a.Key+"="+a.Value.String())
	}
	sort.Strings(parts)
	return name + "\x00" + strings.Join(parts, "\x00")
}

func attrStrings(attrs []slog.Attr) map[string]string {
	out := make(map[string]string, len(attrs))
	for _, a := range attrs {
		out[a.Key] = a.Value.String()
	}
	return out
}

// reset forgets every series, so that what follows is measured alone.
func (m *breakdownMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.series = map[string]*series{}
}

// group is the series of an instrument that share the values of some
// attributes, merged.
type group struct {
	values []string // the values of the keys grouped by, in their order; "" for a key a series lacks
	dist   distribution
}

// groups merges the series of instrument by the values of keys, in the
// order of those values.
func (m *breakdownMeter) groups(instrument string, keys ...string) []group {
	m.mu.Lock()
	defer m.mu.Unlock()
	byValues := map[string]*group{}
	for _, s := range m.series {
		if s.instrument != instrument {
			continue
		}
		values := make([]string, len(keys))
		for i, k := range keys {
			values[i] = s.attrs[k]
		}
		id := strings.Join(values, "\x00")
		g, ok := byValues[id]
		if !ok {
			g = &group{values: values}
			byValues[id] = g
		}
		g.dist.merge(&s.dist)
	}
	out := make([]group, 0, len(byValues))
	for _, g := range byValues {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return slices.Compare(out[i].values, out[j].values) < 0 })
	return out
}

// bucketsPerDoubling sets the histograms' resolution: a bucket is
// 2^(1/16) wide, about 4.4%.
const bucketsPerDoubling = 16

// distribution is a histogram's values in buckets, or a counter's sum.
type distribution struct {
	count    uint64
	sum      float64
	min, max float64
	zeros    uint64         // values ≤ 0, which have no logarithm
	buckets  map[int]uint64 // by bucketOf
}

// addToSum is a counter's Add.
func (d *distribution) addToSum(incr float64) {
	d.count++
	d.sum += incr
}

// set is a gauge's Record: the last value is the one that counts.
func (d *distribution) set(v float64) {
	d.count = 1
	d.sum = v
}

// add is a histogram's Record.
func (d *distribution) add(v float64) {
	if d.count == 0 || v < d.min {
		d.min = v
	}
	if d.count == 0 || v > d.max {
		d.max = v
	}
	d.count++
	d.sum += v
	if v <= 0 {
		d.zeros++
		return
	}
	if d.buckets == nil {
		d.buckets = map[int]uint64{}
	}
	d.buckets[bucketOf(v)]++
}

func bucketOf(v float64) int {
	return int(math.Floor(math.Log2(v) * bucketsPerDoubling))
}

// merge adds o's values to d.
func (d *distribution) merge(o *distribution) {
	if o.count == 0 {
		return
	}
	if d.count == 0 || o.min < d.min {
		d.min = o.min
	}
	if d.count == 0 || o.max > d.max {
		d.max = o.max
	}
	d.count += o.count
	d.sum += o.sum
	d.zeros += o.zeros
	for b, n := range o.buckets {
		if d.buckets == nil {
			d.buckets = map[int]uint64{}
		}
		d.buckets[b] += n
	}
}

// quantile is the q-quantile (0 < q ≤ 1) by nearest rank: the middle of
// the bucket holding the value of that rank, within the extremes seen; 0
// for no values.
func (d *distribution) quantile(q float64) float64 {
	if d.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(d.count)))
	rank = min(max(rank, 1), d.count)
	seen := d.zeros
	if rank <= seen {
		return min(0, d.max)
	}
	indexes := make([]int, 0, len(d.buckets))
	for b := range d.buckets {
		indexes = append(indexes, b)
	}
	sort.Ints(indexes)
	for _, b := range indexes {
		seen += d.buckets[b]
		if rank <= seen {
			middle := math.Exp2((float64(b) + 0.5) / bucketsPerDoubling)
			return min(max(middle, d.min), d.max)
		}
	}
	return d.max
}
