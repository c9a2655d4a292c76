package cdb

import (
	"context"
	"log/slog"
)

// metricAttributesKey carries a caller's metric attributes in a context.
type metricAttributesKey struct{}

// ContextWithMetricAttributes returns ctx carrying attrs after the metric
// attributes ctx already carries; an attribute whose key ctx carries
// already replaces it, so layers that each name the orchestration (the
// runtime, the provider) never report it twice. The client adds them to the duration
// and request-charge points (and request spans) of every operation made
// with the returned context, so that a caller can tell apart what its own
// work cost: the RU of each orchestration name, say.
//
// Every distinct set of attribute values is a series of its own in a
// metrics backend, so they must be low-cardinality: names and kinds,
// never ids (an instance id, an item id) or times.
func ContextWithMetricAttributes(ctx context.Context, attrs ...slog.Attr) context.Context {
	if len(attrs) == 0 {
		return ctx
	}
	have := metricAttributes(ctx)
	// A fresh slice: contexts derived from ctx must not share an array
	// that another append could write.
	all := make([]slog.Attr, 0, len(have)+len(attrs))
	for _, a := range have {
		if !hasKey(attrs, a.Key) {
			all = append(all, a)
		}
	}
	all = append(all, attrs...)
	return context.WithValue(ctx, metricAttributesKey{}, all)
}

// metricAttributes are the attributes ContextWithMetricAttributes put on
// ctx; the caller must not modify them.
func metricAttributes(ctx context.Context) []slog.Attr {
	attrs, _ := ctx.Value(metricAttributesKey{}).([]slog.Attr)
	return attrs
}

func hasKey(attrs []slog.Attr, key string) bool {
	for _, a := range attrs {
		if a.Key == key {
			return true
		}
	}
	return false
}
