package cdb

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// discardMeter records nowhere but is not the no-op meter, so a client
// given it builds its attributes: what the allocation test compares with.
type discardMeter struct{}

func (discardMeter) Counter(string, string, string) Counter     { return noopInstrument{} }
func (discardMeter) Histogram(string, string, string) Histogram { return noopInstrument{} }
func (discardMeter) Gauge(string, string, string) Gauge         { return noopInstrument{} }

// observeOneOperation runs every hook the client calls for an operation
// throttled once, then answered.
func observeOneOperation(tel *clientTelemetry, ctx context.Context, r *request, resp *response) {
	ctx, o := tel.startOperation(ctx, r)
	tel.attempt(ctx, r, resp, nil)
	tel.throttled(ctx, r, time.Millisecond)
	tel.attempt(ctx, r, resp, nil)
	tel.endOperation(ctx, r, o, resp, 2, nil)
}

func TestTelemetryOffAllocatesNothingPerOperation(t *testing.T) {
	r := &request{operation: "ReadItem", ref: documentRef("shop", "orders", "o1")}
	resp := &response{StatusCode: http.StatusOK, Header: http.Header{"X-Ms-Substatus": {"0"}}, RequestCharge: 1}
	ctx := ContextWithMetricAttributes(context.Background(), slog.String("orchestration", "ProcessOrder"))

	off := newClientTelemetry(Telemetry{})
	assert.Zero(t, testing.AllocsPerRun(100, func() { observeOneOperation(&off, ctx, r, resp) }),
		"with the zero Telemetry no attribute is built")
	on := newClientTelemetry(Telemetry{Meter: discardMeter{}})
	assert.NotZero(t, testing.AllocsPerRun(100, func() { observeOneOperation(&on, ctx, r, resp) }),
		"the comparison: with a meter the attributes are built")
}

func TestContextWithMetricAttributesAppendsWithoutSharing(t *testing.T) {
	parent := ContextWithMetricAttributes(context.Background(), slog.String("a", "1"))
	left := ContextWithMetricAttributes(parent, slog.String("b", "2"))
	right := ContextWithMetricAttributes(parent, slog.String("c", "3"))

	assert.Equal(t, []slog.Attr{slog.String("a", "1")}, metricAttributes(parent))
	assert.Equal(t, []slog.Attr{slog.String("a", "1"), slog.String("b", "2")}, metricAttributes(left))
	assert.Equal(t, []slog.Attr{slog.String("a", "1"), slog.String("c", "3")}, metricAttributes(right))
	assert.Equal(t, parent, ContextWithMetricAttributes(parent), "nothing to add: the same context")
	assert.Nil(t, metricAttributes(context.Background()))
}

func TestContextWithMetricAttributesReplacesAKeyItCarriesAlready(t *testing.T) {
	ctx := ContextWithMetricAttributes(context.Background(), slog.String("a", "1"), slog.String("name", "old"))
	ctx = ContextWithMetricAttributes(ctx, slog.String("name", "new"))
	assert.Equal(t, []slog.Attr{slog.String("a", "1"), slog.String("name", "new")}, metricAttributes(ctx))
}

func TestTargetOfReadsTheDatabaseAndContainerOfALink(t *testing.T) {
	for link, want := range map[string][2]string{
		"":                              {"", ""},
		"dbs/shop":                      {"shop", ""},
		"dbs/shop/colls/orders":         {"shop", "orders"},
		"dbs/shop/colls/orders/docs/o1": {"shop", "orders"},
	} {
		db, coll := targetOf(link)
		assert.Equal(t, want, [2]string{db, coll}, link)
	}
}
