package telemetrytest_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
)

var (
	_ cdb.Meter  = (*telemetrytest.Recorder)(nil)
	_ cdb.Tracer = (*telemetrytest.Recorder)(nil)
)

func TestRecorderKeepsEachInstrumentOnce(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	rec.Counter("requests", "{request}", "Requests sent.")
	rec.Histogram("duration", "s", "How long.")
	rec.Gauge("depth", "{message}", "Queue depth.")
	rec.Counter("requests", "{request}", "Requests sent.") // a second component, the same instrument

	assert.Equal(t, []telemetrytest.Instrument{
		{Name: "requests", Unit: "{request}", Description: "Requests sent.", Kind: telemetrytest.KindCounter},
		{Name: "duration", Unit: "s", Description: "How long.", Kind: telemetrytest.KindHistogram},
		{Name: "depth", Unit: "{message}", Description: "Queue depth.", Kind: telemetrytest.KindGauge},
	}, rec.Instruments())
	in, ok := rec.Instrument("duration")
	assert.True(t, ok)
	assert.Equal(t, "s", in.Unit)
	_, ok = rec.Instrument("missing")
	assert.False(t, ok)
}

func TestRecorderKeepsEveryPointWithItsAttributes(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	ctx := context.Background()
	requests := rec.Counter("requests", "{request}", "")
	duration := rec.Histogram("duration", "s", "")
	attrs := []slog.Attr{slog.String("op", "read"), slog.Int("status", 200)}
	requests.Add(ctx, 1, attrs...)
	attrs[0] = slog.String("op", "changed after the call") // the recorder kept its own copy
	requests.Add(ctx, 2, slog.String("op", "write"), slog.Int("status", 429))
	duration.Record(ctx, 0.5, slog.String("op", "read"), slog.Bool("ok", true), slog.Float64("ru", 1.5))

	points := rec.Points("requests", nil)
	require.Len(t, points, 2)
	assert.Equal(t, telemetrytest.Point{Instrument: "requests", Kind: telemetrytest.KindCounter, Value: 1,
		Attrs: []slog.Attr{slog.String("op", "read"), slog.Int("status", 200)}}, points[0])
	assert.Equal(t, map[string]any{"op": "read", "status": int64(200)}, points[0].Attributes())
	assert.Equal(t, map[string]any{"op": "read", "ok": true, "ru": 1.5}, rec.Points("duration", nil)[0].Attributes())
	assert.Len(t, rec.Points("", nil), 3, "every instrument's")
}

func TestRecorderFiltersAndSumsByAttributes(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	ctx := context.Background()
	ru := rec.Counter("ru", "{request_unit}", "")
	ru.Add(ctx, 1, slog.String("op", "read"), slog.Int("status", 200))
	ru.Add(ctx, 5, slog.String("op", "write"), slog.Int("status", 201))
	ru.Add(ctx, 2, slog.String("op", "read"), slog.Int("status", 404))

	assert.Equal(t, 8.0, rec.Sum("ru", nil))
	assert.Equal(t, 3.0, rec.Sum("ru", map[string]any{"op": "read"}))
	assert.Equal(t, 2.0, rec.Sum("ru", map[string]any{"op": "read", "status": 404}), "an int filter matches an slog.Int")
	assert.Equal(t, 0.0, rec.Sum("ru", map[string]any{"op": "read", "region": "west"}), "a key the points lack")
	assert.Len(t, rec.Points("ru", map[string]any{"status": 201}), 1)
	assert.Empty(t, rec.Points("other", nil))
}

func TestRecorderResetForgetsPointsAndSpansButNotInstruments(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	rec.Counter("requests", "{request}", "").Add(context.Background(), 1)
	_, s := rec.Start(context.Background(), "work", cdb.SpanOptions{})
	s.End()
	rec.Reset()
	assert.Empty(t, rec.Points("", nil))
	assert.Empty(t, rec.Spans())
	assert.Len(t, rec.Instruments(), 1)
}

var traceParent = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)

func TestRecorderStartsARootSpanWithW3CIDs(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	ctx, s := rec.Start(context.Background(), "turn", cdb.SpanOptions{Kind: cdb.SpanKindConsumer, Attributes: []slog.Attr{slog.String("name", "ProcessOrder")}})
	require.NotNil(t, ctx)
	tc := s.TraceContext()
	assert.Regexp(t, traceParent, tc.TraceParent)

	got := rec.Spans()
	require.Len(t, got, 1)
	assert.Equal(t, "turn", got[0].Name)
	assert.Equal(t, cdb.SpanKindConsumer, got[0].Kind)
	assert.Equal(t, "", got[0].ParentSpanID)
	assert.Equal(t, tc.TraceID(), got[0].TraceID)
	assert.Equal(t, "00-"+got[0].TraceID+"-"+got[0].SpanID+"-01", tc.TraceParent)
	assert.Equal(t, map[string]any{"name": "ProcessOrder"}, got[0].Attributes())
	assert.False(t, got[0].Ended)
	assert.False(t, got[0].Start.IsZero())
}

func TestRecorderParentsASpanOnTheContextsSpan(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	remote := cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx, parent := rec.Start(context.Background(), "parent", cdb.SpanOptions{})
	_, child := rec.Start(ctx, "child", cdb.SpanOptions{Remote: remote})

	p, c := rec.SpansNamed("parent")[0], rec.SpansNamed("child")[0]
	assert.Equal(t, p.TraceID, c.TraceID, "the context's span wins over Remote")
	assert.Equal(t, p.SpanID, c.ParentSpanID)
	assert.False(t, c.RemoteParent)
	assert.NotEqual(t, p.SpanID, c.SpanID)
	assert.Equal(t, p.TraceContext(), parent.TraceContext())
	assert.Equal(t, c.TraceContext(), child.TraceContext())
}

func TestRecorderParentsASpanOnARemoteTraceContext(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	remote := cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=1"}
	_, s := rec.Start(context.Background(), "activity", cdb.SpanOptions{Remote: remote})

	got := rec.Spans()[0]
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", got.TraceID)
	assert.Equal(t, "00f067aa0ba902b7", got.ParentSpanID)
	assert.True(t, got.RemoteParent)
	assert.Equal(t, "vendor=1", s.TraceContext().TraceState)
}

func TestRecorderStartsANewTraceForAMalformedRemote(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	for _, p := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",    // no flags
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // unknown version
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
	} {
		_, s := rec.Start(context.Background(), p, cdb.SpanOptions{Remote: cdb.TraceContext{TraceParent: p}})
		got := rec.SpansNamed(p)[0]
		assert.Equal(t, "", got.ParentSpanID, p)
		assert.NotEqual(t, "4bf92f3577b34da6a3ce929d0e0e4736", got.TraceID, p)
		assert.Regexp(t, traceParent, s.TraceContext().TraceParent, p)
	}
}

func TestRecorderSpanEndsOnceAndIgnoresLateChanges(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, s := rec.Start(context.Background(), "timer", cdb.SpanOptions{Start: start})
	failed := errors.New("boom")
	s.SetAttributes(slog.Int("attempt", 2))
	s.RecordError(failed)
	s.End()
	first := rec.Spans()[0]
	s.SetAttributes(slog.Int("late", 1))
	s.RecordError(errors.New("late"))
	s.End()

	got := rec.Spans()[0]
	assert.Equal(t, first, got)
	assert.True(t, got.Ended)
	assert.Equal(t, start, got.Start, "backdated")
	assert.False(t, got.End.Before(got.Start))
	assert.Equal(t, failed, got.Err)
	assert.Equal(t, map[string]any{"attempt": int64(2)}, got.Attributes())
}

func TestRecorderIsSafeForConcurrentUse(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := rec.Counter("n", "1", "")
			for range 100 {
				ctx, s := rec.Start(context.Background(), "s", cdb.SpanOptions{})
				c.Add(ctx, 1, slog.Int("g", i))
				s.SetAttributes(slog.Int("g", i))
				s.End()
				_ = rec.Spans()
				_ = rec.Sum("n", nil)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 800.0, rec.Sum("n", nil))
	assert.Len(t, rec.Spans(), 800)
}
