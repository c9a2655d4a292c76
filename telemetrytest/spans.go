package telemetrytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// SpanRecord is a span as the Recorder holds it.
type SpanRecord struct {
	Name  string
	Kind  cdb.SpanKind
	Attrs []slog.Attr // at the start, then as added, in order
	// TraceID and SpanID are the span's W3C ids in lowercase hex (32 and
	// 16 digits). ParentSpanID is the parent's, "" for a root span.
	TraceID, SpanID, ParentSpanID string
	// RemoteParent says the parent came from SpanOptions.Remote, not from
	// the context.
	RemoteParent bool
	TraceState   string // the parent's, carried on
	Start, End   time.Time
	Ended        bool
	// Err is the last error RecordError marked the span failed with.
	Err error
}

// Attributes are the span's attributes by key (a key set twice keeps its
// last value), with values as slog.Value.Any returns them.
func (s SpanRecord) Attributes() map[string]any { return attrMap(s.Attrs) }

// TraceContext is the W3C trace context of the span, as its TraceContext
// method returns it.
func (s SpanRecord) TraceContext() cdb.TraceContext {
	return cdb.TraceContext{TraceParent: "00-" + s.TraceID + "-" + s.SpanID + "-01", TraceState: s.TraceState}
}

// span is a started span; its record is guarded by the Recorder's mutex.
type span struct {
	r   *Recorder
	rec SpanRecord
}

// spanKey carries the current span in a context.
type spanKey struct{}

// Start begins a span: a child of the span ctx carries (one of this
// Recorder's), else of o.Remote when it is a valid traceparent, else the
// root of a new trace.
func (r *Recorder) Start(ctx context.Context, name string, o cdb.SpanOptions) (context.Context, cdb.Span) {
	s := &span{r: r, rec: SpanRecord{Name: name, Kind: o.Kind, Attrs: slices.Clone(o.Attributes), Start: o.Start, SpanID: randomHex(8)}}
	if s.rec.Start.IsZero() {
		s.rec.Start = time.Now()
	}
	if parent, ok := ctx.Value(spanKey{}).(*span); ok && parent.r == r {
		pr := parent.record()
		s.rec.TraceID, s.rec.ParentSpanID, s.rec.TraceState = pr.TraceID, pr.SpanID, pr.TraceState
	} else if traceID, spanID, ok := parseTraceParent(o.Remote.TraceParent); ok {
		s.rec.TraceID, s.rec.ParentSpanID, s.rec.TraceState, s.rec.RemoteParent = traceID, spanID, o.Remote.TraceState, true
	} else {
		s.rec.TraceID = randomHex(16)
	}
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
	return context.WithValue(ctx, spanKey{}, s), s
}

func (s *span) record() SpanRecord {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	return s.snapshot()
}

// snapshot copies the record; the caller holds the Recorder's mutex.
func (s *span) snapshot() SpanRecord {
	out := s.rec
	out.Attrs = slices.Clone(s.rec.Attrs)
	return out
}

// SetAttributes adds attrs, as OpenTelemetry does only until the end.
func (s *span) SetAttributes(attrs ...slog.Attr) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.rec.Ended {
		s.rec.Attrs = append(s.rec.Attrs, attrs...)
	}
}

// RecordError marks the span failed with err, until the end.
func (s *span) RecordError(err error) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.rec.Ended && err != nil {
		s.rec.Err = err
	}
}

// End ends the span once.
func (s *span) End() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.rec.Ended {
		s.rec.Ended, s.rec.End = true, time.Now()
	}
}

// TraceContext is the span's traceparent, sampled.
func (s *span) TraceContext() cdb.TraceContext { return s.record().TraceContext() }

// Spans are the spans started so far, ended or not, in the order they
// started.
func (r *Recorder) Spans() []SpanRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]SpanRecord, len(r.spans))
	for i, s := range r.spans {
		out[i] = s.snapshot()
	}
	return out
}

// SpansNamed are the spans named name, in the order they started.
func (r *Recorder) SpansNamed(name string) []SpanRecord {
	var out []SpanRecord
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// parseTraceParent reads a version-00 W3C traceparent; ids of zeros are
// invalid, as the recommendation says.
func parseTraceParent(p string) (traceID, spanID string, ok bool) {
	parts := strings.Split(p, "-")
	if len(parts) != 4 || parts[0] != "00" || !isHexID(parts[1], 32) || !isHexID(parts[2], 16) || !isHexID(parts[3], 2) {
		return "", "", false
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

func isHexID(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// randomHex is n random bytes in lowercase hex, never all zeros.
func randomHex(n int) string {
	b := make([]byte, n)
	for {
		_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
		if slices.ContainsFunc(b, func(x byte) bool { return x != 0 }) {
			return hex.EncodeToString(b)
		}
	}
}
