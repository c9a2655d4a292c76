package otelcdb_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"

	"github.com/duroxide-go/cdb"
)

// spanAttributes are the attributes a span started with attrs ends with.
func spanAttributes(t *testing.T, attrs ...slog.Attr) []attribute.KeyValue {
	t.Helper()
	tracer, recorder := newTracerRecorder(t)
	_, span := tracer.Start(context.Background(), "s", cdb.SpanOptions{Attributes: attrs})
	span.End()
	return onlyEnded(t, recorder).Attributes()
}

// region is a slog.LogValuer, resolved before conversion.
type region string

func (r region) LogValue() slog.Value { return slog.StringValue("region:" + string(r)) }

func TestEverySlogKindConverts(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 30, 0, 500, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		attr slog.Attr
		want attribute.KeyValue
	}{
		{slog.String("s", "queued"), attribute.String("s", "queued")},
		{slog.Int64("i", -42), attribute.Int64("i", -42)},
		{slog.Int("int", 7), attribute.Int64("int", 7)},
		{slog.Uint64("u", 9), attribute.Int64("u", 9)},
		{slog.Uint64("huge", math.MaxUint64), attribute.Int64("huge", math.MaxInt64)},
		{slog.Float64("f", 7.62), attribute.Float64("f", 7.62)},
		{slog.Bool("b", true), attribute.Bool("b", true)},
		{slog.Duration("d", 1500*time.Millisecond), attribute.Float64("d", 1.5)},
		{slog.Time("t", at), attribute.String("t", "2026-11-27T09:30:00.0000005+01:00")},
		{slog.Any("err", errors.New("conflict")), attribute.String("err", "conflict")},
		{slog.Any("list", []string{"a", "b"}), attribute.String("list", "[a b]")},
		{slog.Any("nil", nil), attribute.String("nil", "<nil>")},
		{slog.Any("valuer", region("westeurope")), attribute.String("valuer", "region:westeurope")},
	} {
		assert.Equal(t, []attribute.KeyValue{tc.want}, spanAttributes(t, tc.attr), tc.attr.Key)
	}
}

func TestGroupsFlattenWithDottedKeys(t *testing.T) {
	got := spanAttributes(t,
		slog.Group("request", slog.String("op", "read"), slog.Group("status", slog.Int("code", 429), slog.Int("sub", 3))),
		slog.Group("", slog.String("inlined", "yes")),
		slog.Group("empty"),
		slog.String("", "no key"),
	)
	assert.ElementsMatch(t, []attribute.KeyValue{
		attribute.String("request.op", "read"),
		attribute.Int64("request.status.code", 429),
		attribute.Int64("request.status.sub", 3),
		attribute.String("inlined", "yes"),
	}, got)
}
