package main

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A histogram's percentiles are within half a bucket (2^(1/32), about
// 2.2%) of the exact ones, and its buckets stay few however many values it
// sees.
func TestBreakdownMeterPercentilesAreWithinHalfABucket(t *testing.T) {
	m := newBreakdownMeter()
	h := m.Histogram("d", "s", "")
	ctx := context.Background()
	for range 10 {
		for i := 1; i <= 1000; i++ {
			h.Record(ctx, float64(i)/1000) // 1 ms to 1 s
		}
	}
	groups := m.groups("d")
	require.Len(t, groups, 1)
	d := groups[0].dist
	assert.Equal(t, uint64(10000), d.count)
	assert.InDelta(t, 5005, d.sum, 1e-6)
	halfBucket := math.Exp2(1.0/(2*bucketsPerDoubling)) - 1
	assert.InEpsilon(t, 0.500, d.quantile(0.50), halfBucket)
	assert.InEpsilon(t, 0.990, d.quantile(0.99), halfBucket)
	assert.Equal(t, 0.001, d.quantile(0.0001), "the lowest rank is the minimum seen")
	assert.Equal(t, 1.0, d.quantile(1), "the highest rank is the maximum seen")
	assert.LessOrEqual(t, len(d.buckets), bucketsPerDoubling*10+1, "1 ms to 1 s is ten doublings")
}

func TestBreakdownMeterZeroValuesAndEmptyDistributions(t *testing.T) {
	var d distribution
	assert.Equal(t, 0.0, d.quantile(0.5), "no values")
	d.add(0)
	d.add(0)
	d.add(3)
	assert.Equal(t, 0.0, d.quantile(0.5), "a value of 0 has no logarithm and is counted apart")
	assert.Equal(t, 3.0, d.quantile(0.99))
}

// Counters sum; series are told apart by their attribute values, whatever
// their order, and merged by the keys a breakdown groups by.
func TestBreakdownMeterGroupsSeriesByAttributes(t *testing.T) {
	m := newBreakdownMeter()
	c := m.Counter("ru", "{request_unit}", "")
	ctx := context.Background()
	c.Add(ctx, 2, slog.String("op", "ReadItem"), slog.String("status", "200"))
	c.Add(ctx, 3, slog.String("status", "200"), slog.String("op", "ReadItem"))
	c.Add(ctx, 5, slog.String("op", "ReadItem"), slog.String("status", "404"))
	c.Add(ctx, 7, slog.String("op", "QueryItems"), slog.String("name", "A"))
	m.Gauge("depth", "{message}", "").Record(ctx, 4)

	byOp := m.groups("ru", "op")
	require.Len(t, byOp, 2)
	assert.Equal(t, []string{"QueryItems"}, byOp[0].values)
	assert.Equal(t, 7.0, byOp[0].dist.sum)
	assert.Equal(t, []string{"ReadItem"}, byOp[1].values)
	assert.Equal(t, 10.0, byOp[1].dist.sum, "the 200s and the 404 of ReadItem merged")
	assert.Equal(t, uint64(3), byOp[1].dist.count)

	byName := m.groups("ru", "name", "op")
	require.Len(t, byName, 2)
	assert.Equal(t, []string{"", "ReadItem"}, byName[0].values, "a key a series lacks groups as empty")
	assert.Equal(t, []string{"A", "QueryItems"}, byName[1].values)

	m.reset()
	assert.Empty(t, m.groups("ru", "op"), "reset forgets every series")
}

// breakdownTestMeter is a meter with what a short demo reports, with an
// operation and an activity whose names are longer than the columns.
func breakdownTestMeter() *breakdownMeter {
	m := newBreakdownMeter()
	ctx := context.Background()
	charge := m.Histogram(instrumentRequestCharge, "{request_unit}", "")
	duration := m.Histogram(instrumentRequestDuration, "s", "")
	request := func(orchestration, op string, ru, seconds float64) {
		attrs := []slog.Attr{slog.String(attrOperation, op), slog.String("db.response.status_code", "200")}
		if orchestration != "" {
			attrs = append(attrs, slog.String(attrOrchestrationName, orchestration))
		}
		charge.Record(ctx, ru, attrs...)
		duration.Record(ctx, seconds, attrs...)
	}
	for range 10 {
		request("ProcessOrder", "ExecuteTransactionalBatch", 40, 0.002)
		request("ProcessOrder", "CreateItem", 8, 0.001)
		request("ChargePayment", "ExecuteTransactionalBatch", 30, 0.002)
		request("", "QueryItems", 3, 0.0004)
		request("", "ReadPartitionKeyRangesOfAVeryLongOperationName", 1, 0.0001)
	}
	completions := m.Counter(instrumentCompletions, "{orchestration}", "")
	completions.Add(ctx, 4, slog.String(attrOrchestrationName, "ProcessOrder"), slog.String("durable.orchestration.status", "completed"))
	completions.Add(ctx, 1, slog.String(attrOrchestrationName, "ProcessOrder"), slog.String("durable.orchestration.status", "failed"))
	completions.Add(ctx, 5, slog.String(attrOrchestrationName, "ChargePayment"), slog.String("durable.orchestration.status", "completed"))
	m.Histogram(instrumentTurnDuration, "s", "").Record(ctx, 0.0015, slog.String(attrOrchestrationName, "ProcessOrder"))
	m.Histogram(instrumentActivityDuration, "s", "").Record(ctx, 12.5, slog.String(attrActivityName, "AnActivityWithANameLongerThanTheColumnHolds"))
	turnWait := m.Histogram(instrumentTurnWait, "s", "")
	turnWait.Record(ctx, 0.004, slog.String(attrOrchestrationName, "ProcessOrder"))
	turnWait.Record(ctx, 0, slog.String(attrOrchestrationName, "ProcessOrder"))
	m.Histogram(instrumentActivityWait, "s", "").Record(ctx, 2.25, slog.String(attrActivityName, "ReserveItem"))
	return m
}

// The breakdown gives each orchestration its RU by operation and per
// ended execution, the unnamed requests a row of their own, the
// percentiles of requests, turns and activities, and those of turns' and
// activities' schedule-to-start, in 80 columns.
func TestBreakdownPrintsRUByOrchestrationAndOperationInEightyColumns(t *testing.T) {
	var out bytes.Buffer
	readBreakdown(breakdownTestMeter()).print(&out)
	text := out.String()
	for _, line := range strings.Split(text, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 80, "%q", line)
	}
	for _, want := range []string{
		"  ProcessOrder: 480 RU in 20 calls, 96.0 RU per ended execution (5)\n",
		"    ExecuteTransactionalBatch       10 calls        400 RU   83%\n",
		"    CreateItem                      10 calls         80 RU   17%\n",
		"  ChargePayment: 300 RU in 10 calls, 60.0 RU per ended execution (5)\n",
		"  (fetch/other): 40 RU in 20 calls\n",
		"    ReadPartitionKeyRangesOfA…      10 calls         10 RU   25%\n",
		"  in total: 820 RU, 82.0 RU per ended execution (10)\n",
		"  request   ExecuteTransactionalBatch              20",
		"  turn      ProcessOrder                            1     1.50ms     1.50ms\n",
		"  activity  AnActivityWithANameLongerThanTh…        1      12.5s      12.5s\n",
	} {
		assert.Contains(t, text, want)
	}
	waits := text[strings.Index(text, "\nschedule-to-start:"):]
	for _, want := range []string{
		"            orchestration or activity           count        p50        p99\n",
		"  turn      ProcessOrder                            2     0.00µs     3.99ms\n", // 4 ms, within half a bucket
		"  activity  ReserveItem                             1      2.25s      2.25s\n",
	} {
		assert.Contains(t, waits, want)
	}
	assert.Less(t, strings.Index(text, "ProcessOrder:"), strings.Index(text, "ChargePayment:"), "the costliest first")
	assert.Less(t, strings.Index(text, "ChargePayment:"), strings.Index(text, "(fetch/other):"), "the unnamed requests last")
	assert.Less(t, strings.Index(text, "\nlatency:"), strings.Index(text, "\nschedule-to-start:"), "the waits after the latencies")
}

func TestBreakdownOfNothingPrintsNothing(t *testing.T) {
	var out bytes.Buffer
	readBreakdown(newBreakdownMeter()).print(&out)
	assert.Empty(t, out.String())
}

func TestBreakdownLatencyKeepsThreeDigits(t *testing.T) {
	for d, want := range map[float64]string{
		0.0000004: "0.40µs", 0.0000523: "52.3µs", 0.000999: "999µs", 0.00123: "1.23ms",
		0.0999: "99.9ms", 0.25: "250ms", 1.5: "1.50s", 61: "61.0s", 125: "125s",
	} {
		assert.Equal(t, want, formatLatency(seconds(d)), "%v s", d)
	}
}

var (
	summaryRU   = regexp.MustCompile(`Cosmos DB +[0-9]+ requests, ([0-9]+) RU`)
	breakdownRU = regexp.MustCompile(`in total: ([0-9]+) RU`)
)

// The demo's client and runtime report to its meter, and the breakdown it
// prints accounts for the RU of the summary, by the orchestrations it ran.
func TestDemoPrintsTheBreakdownOfItsOwnRun(t *testing.T) {
	ctx := demoTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	meter := newBreakdownMeter()
	p, err := cdb.NewProvider(ctx, cdb.Config{Endpoint: acct.Endpoint(), Key: acct.Key(), GaugeInterval: -1,
		ClientOptions: cdb.ClientOptions{Transport: acct.Transport(), Telemetry: cdb.Telemetry{Meter: meter}}})
	require.NoError(t, err)
	defer p.Close()
	var out bytes.Buffer
	d := newDemo(p, 3, &out)
	d.meter = meter
	require.NoError(t, d.run(ctx, 2))
	text := out.String()

	for _, want := range []string{"\n  ProcessOrder: ", "\n  ChargePayment: ", "\n  Ledger: ", "\n  (fetch/other): ",
		"\n  turn      ProcessOrder ", "\n  activity  ReserveItem ", "\n  request   ExecuteTransactionalBatch "} {
		assert.Contains(t, text, want)
	}
	waitsAt := strings.Index(text, "\nschedule-to-start:")
	require.GreaterOrEqual(t, waitsAt, 0, "the run's schedule-to-start is printed: %s", text)
	for _, want := range []string{"\n  turn      ProcessOrder ", "\n  turn      ChargePayment ", "\n  activity  ReserveItem "} {
		assert.Contains(t, text[waitsAt:], want, "schedule-to-start by orchestration and by activity")
	}
	summary, total := summaryRU.FindStringSubmatch(text), breakdownRU.FindStringSubmatch(text)
	require.NotNil(t, summary, text)
	require.NotNil(t, total, text)
	fromStats, _ := strconv.ParseFloat(summary[1], 64)
	fromMetrics, _ := strconv.ParseFloat(total[1], 64)
	assert.InEpsilon(t, fromStats, fromMetrics, 0.05,
		"the breakdown covers the run the summary counts (a request in flight at the end may fall on one side only)")
	breakdownText := text[strings.Index(text, "RU by orchestration"):strings.Index(text, "one order,")]
	for _, line := range strings.Split(breakdownText, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 80, "%q", line)
	}
}
