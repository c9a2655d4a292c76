package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The flight recorder keeps, per scenario, the last records the nodes
// logged that mention it, at every level, debug included. A round does
// not replay exactly (timing decides as much as the seed does), so a
// violation found in a soak or in CI must be readable from the round that
// found it: the report prints the records of each violating scenario's
// instances (Report.Flight), and writes them whole to a file.
type flightRecorder struct {
	mu   sync.Mutex
	keep int
	logs map[string]*flightLog
}

// flightLog is one scenario's last records, oldest first once full.
type flightLog struct {
	lines []string
	next  int
	full  bool
}

// flightKeep is how many records a scenario keeps: enough for the turns
// and hand-overs around a violation, bounded so a round's scenarios (a
// thousand at most) stay within a few tens of megabytes.
const flightKeep = 300

// scenarioMention finds the scenarios a record names: instance ids start
// with the scenario's (s<index>-<kind>), children and events add to them.
var scenarioMention = regexp.MustCompile(`\bs\d+-[a-z]+`)

func newFlightRecorder() *flightRecorder {
	return &flightRecorder{keep: flightKeep, logs: map[string]*flightLog{}}
}

// record keeps line under every scenario it mentions.
func (f *flightRecorder) record(line string) {
	keys := scenarioMention.FindAllString(line, -1)
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		l := f.logs[k]
		if l == nil {
			l = &flightLog{lines: make([]string, 0, 16)}
			f.logs[k] = l
		}
		l.add(line, f.keep)
	}
}

func (l *flightLog) add(line string, keep int) {
	if len(l.lines) < keep {
		l.lines = append(l.lines, line)
		return
	}
	l.lines[l.next] = line
	l.next = (l.next + 1) % keep
	l.full = true
}

func (l *flightLog) ordered() []string {
	if !l.full {
		return slices.Clone(l.lines)
	}
	return append(slices.Clone(l.lines[l.next:]), l.lines[:l.next]...)
}

// of is the records kept for the scenario an instance id belongs to.
func (f *flightRecorder) of(instance string) []string {
	key := scenarioMention.FindString(instance)
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.logs[key]; l != nil {
		return l.ordered()
	}
	return nil
}

// forViolations is the flight log of each violating scenario, at most
// flightScenarios of them.
func (f *flightRecorder) forViolations(vs []Violation) map[string][]string {
	out := map[string][]string{}
	for _, v := range vs {
		key := scenarioMention.FindString(v.Instance)
		if key == "" || out[key] != nil {
			continue
		}
		if len(out) == flightScenarios {
			break
		}
		if lines := f.of(key); len(lines) > 0 {
			out[key] = lines
		}
	}
	return out
}

// flightScenarios bounds the scenarios a report prints the records of.
const flightScenarios = 3

// flightPrinted is how many of a scenario's last records the report
// prints; the file has them all.
const flightPrinted = 60

// printFlight writes the tail of each violating scenario's records to w,
// and all of them to a file under the temporary directory.
func printFlight(w io.Writer, flight map[string][]string) {
	keys := make([]string, 0, len(flight))
	for k := range flight {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		lines := flight[k]
		where := "(not written)"
		if f, err := os.CreateTemp("", "cdb-sim-flight-"+k+"-*.log"); err == nil {
			_, _ = io.WriteString(f, strings.Join(lines, "\n")+"\n")
			_ = f.Close()
			where = f.Name()
		}
		fmt.Fprintf(w, "  flight log of %s: %d records in %s; the last %d:\n", k, len(lines), where, min(len(lines), flightPrinted))
		for _, line := range lines[max(len(lines)-flightPrinted, 0):] {
			fmt.Fprintf(w, "    | %s\n", line)
		}
	}
}

// flightHandler formats every record and hands it to the recorder, and
// passes it on to next (the run's own logger) when next wants it.
type flightHandler struct {
	rec   *flightRecorder
	next  slog.Handler
	attrs string // the handler's own attributes, formatted
	group string
	// attrsMention says the handler's own attributes may name a scenario.
	attrsMention bool
}

func (h *flightHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *flightHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.mentionsScenario(r) {
		h.rec.record(h.format(r))
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// mentionsScenario looks for a scenario's name before formatting anything:
// most records name none, and the recorder must cost the run little.
func (h *flightHandler) mentionsScenario(r slog.Record) bool {
	found := h.attrsMention || mayNameScenario(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		found = found || attrMayNameScenario(a.Value)
		return !found
	})
	return found
}

func attrMayNameScenario(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindString:
		return mayNameScenario(v.String())
	case slog.KindAny, slog.KindLogValuer, slog.KindGroup:
		return mayNameScenario(v.Resolve().String())
	}
	return false
}

// mayNameScenario is a cheap look for "s<digit>" (scenarioMention decides).
func mayNameScenario(s string) bool {
	for i := strings.IndexByte(s, 's'); i >= 0 && i+1 < len(s); {
		if c := s[i+1]; c >= '0' && c <= '9' {
			return true
		}
		next := strings.IndexByte(s[i+1:], 's')
		if next < 0 {
			return false
		}
		i += 1 + next
	}
	return false
}

func (h *flightHandler) format(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000"))
	b.WriteByte(' ')
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	return b.String()
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	b.WriteByte(' ')
	if group != "" {
		b.WriteString(group)
		b.WriteByte('.')
	}
	b.WriteString(a.Key)
	b.WriteByte('=')
	v := a.Value.Resolve()
	if v.Kind() == slog.KindTime {
		b.WriteString(v.Time().Format(time.TimeOnly))
		return
	}
	b.WriteString(v.String())
}

func (h *flightHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range attrs {
		writeAttr(&b, h.group, a)
	}
	mention := h.attrsMention
	for _, a := range attrs {
		mention = mention || attrMayNameScenario(a.Value)
	}
	return &flightHandler{rec: h.rec, next: h.next.WithAttrs(attrs), attrs: b.String(), group: h.group, attrsMention: mention}
}

func (h *flightHandler) WithGroup(name string) slog.Handler {
	group := name
	if h.group != "" {
		group = h.group + "." + name
	}
	return &flightHandler{rec: h.rec, next: h.next.WithGroup(name), attrs: h.attrs, group: group, attrsMention: h.attrsMention}
}

// request keeps one line per request try of a node that names a scenario
// in its partition key: the start of what was sent (requestSummary), the
// fault drawn and the account's answer,
// so a scenario's flight log shows its locks and writes beside the nodes'
// records.
func (f *flightRecorder) request(node, op string, req *http.Request, body []byte, fault string, status int, err error) {
	pk := partitionKeyOf(req)
	if !mayNameScenario(pk) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s WIRE node=%s op=%s pk=%s", time.Now().Format("15:04:05.000"), node, op, pk)
	if what := requestSummary(op, req, body); what != "" {
		b.WriteString(" ")
		b.WriteString(what)
	}
	switch {
	case err != nil:
		fmt.Fprintf(&b, " fault=%q error=%q", fault, err.Error())
	default:
		fmt.Fprintf(&b, " fault=%q status=%d", fault, status)
	}
	f.record(b.String())
}

// flightBodyShown is how much of a request's body its line keeps: a
// batch's first operations (an instance patch with its lock fields comes
// first), unparsed, so the recorder costs the run little.
const flightBodyShown = 360

// requestSummary is the start of what a request sends: the document id of
// a single-document request, and the body's first bytes.
func requestSummary(op string, req *http.Request, body []byte) string {
	var b strings.Builder
	switch op {
	case "PatchItem", "ReadItem", "DeleteItem", "ReplaceItem":
		b.WriteString("id=")
		b.WriteString(docIDOf(req))
		b.WriteByte(' ')
	}
	if len(body) > 0 {
		b.WriteString("body=")
		b.Write(body[:min(len(body), flightBodyShown)])
		if len(body) > flightBodyShown {
			fmt.Fprintf(&b, "…(%d bytes)", len(body))
		}
	}
	return strings.TrimSpace(b.String())
}
