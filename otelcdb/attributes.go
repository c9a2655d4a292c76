package otelcdb

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// keyValues converts cdb's attributes to OpenTelemetry's, as the package
// documentation lists.
func keyValues(attrs []slog.Attr) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		kvs = appendAttr(kvs, "", a)
	}
	return kvs
}

// appendAttr appends a, its key under prefix, flattening a group into one
// key-value per member.
func appendAttr(kvs []attribute.KeyValue, prefix string, a slog.Attr) []attribute.KeyValue {
	v := a.Value.Resolve()
	key := joinKey(prefix, a.Key)
	if v.Kind() == slog.KindGroup {
		for _, member := range v.Group() {
			kvs = appendAttr(kvs, key, member)
		}
		return kvs
	}
	if a.Key == "" {
		return kvs
	}
	return append(kvs, keyValue(key, v))
}

// joinKey is key under prefix; an empty key (a group slog inlines) is the
// prefix itself.
func joinKey(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	default:
		return prefix + "." + key
	}
}

func keyValue(key string, v slog.Value) attribute.KeyValue {
	switch v.Kind() {
	case slog.KindString:
		return attribute.String(key, v.String())
	case slog.KindInt64:
		return attribute.Int64(key, v.Int64())
	case slog.KindUint64:
		return attribute.Int64(key, clampToInt64(v.Uint64()))
	case slog.KindFloat64:
		return attribute.Float64(key, v.Float64())
	case slog.KindBool:
		return attribute.Bool(key, v.Bool())
	case slog.KindDuration:
		return attribute.Float64(key, v.Duration().Seconds())
	case slog.KindTime:
		return attribute.String(key, v.Time().Format(time.RFC3339Nano))
	default:
		return attribute.String(key, fmt.Sprint(v.Any()))
	}
}

// clampToInt64 keeps a uint64 that OpenTelemetry's int64 cannot hold at
// the largest it can, rather than letting it wrap negative.
func clampToInt64(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}
