package main

import (
	"strings"

	"github.com/duroxide-go/cdb"
)

// The instance page draws its history as an SVG timeline: a row per
// activity, timer, sub-orchestration and wait for an event, a bar from the
// event that scheduled it to the one that ended it (to the history's last
// event while it is pending), and a point per event received and per end
// of the execution. A retried activity's attempts are rows of their own,
// marked as cdb show marks them (retryMarks).

// The timeline's geometry, in SVG user units.
const (
	timelineLabelWidth = 300
	timelinePlotWidth  = 600
	timelineRowHeight  = 18
	timelineTop        = 20
	timelineMinBar     = 2
)

// uiTimeline is what the page's SVG draws.
type uiTimeline struct {
	Width, Height int
	PlotX         int
	Span          string // the history's length, at the axis' end
	Rows          []uiTimelineRow
}

// uiTimelineRow is one bar or point.
type uiTimelineRow struct {
	Y, TextY int
	X, W     float64
	Kind     string // activity, timer, child, wait, event, end: the bar's class
	Outcome  string // ok, failed, pending
	Label    string
	Title    string // the tooltip: what the event carries
	EventID  uint64
	Point    bool
	Link     string // a child's instance id
}

// timelineSpan is where a row starts and, once it ended, how.
type timelineSpan struct {
	row   int
	start uint64
}

// buildTimeline lays a history out; an empty one draws nothing.
func buildTimeline(instance string, history []cdb.Event) uiTimeline {
	t := uiTimeline{Width: timelineLabelWidth + timelinePlotWidth + 10, PlotX: timelineLabelWidth}
	if len(history) == 0 {
		return t
	}
	first, last := history[0].TimestampMs, history[0].TimestampMs
	for _, e := range history {
		first, last = min(first, e.TimestampMs), max(last, e.TimestampMs)
	}
	span := max(last-first, 1)
	x := func(ms uint64) float64 {
		return float64(timelineLabelWidth) + float64(ms-first)/float64(span)*timelinePlotWidth
	}
	t.Span = formatOffset(last - first)
	marks := retryMarks(history)
	open := map[uint64]timelineSpan{}      // scheduling event id → its row
	waiting := map[string][]timelineSpan{} // event name → its waits, oldest first
	add := func(row uiTimelineRow, at uint64) int {
		row.X = x(at)
		row.Y = timelineTop + len(t.Rows)*timelineRowHeight
		row.TextY = row.Y + timelineRowHeight - 6
		t.Rows = append(t.Rows, row)
		return len(t.Rows) - 1
	}
	end := func(s timelineSpan, at uint64, outcome string) {
		r := &t.Rows[s.row]
		r.W, r.Outcome = max(x(at)-r.X, timelineMinBar), outcome
	}
	for _, e := range history {
		desc := describeEvent(instance, e.Kind)
		switch k := e.Kind.(type) {
		case cdb.ActivityScheduled:
			open[e.EventID] = timelineSpan{row: add(uiTimelineRow{Kind: "activity", Label: k.Name + mark(marks, e.EventID), Title: desc, EventID: e.EventID}, e.TimestampMs), start: e.TimestampMs}
		case cdb.TimerCreated:
			open[e.EventID] = timelineSpan{row: add(uiTimelineRow{Kind: "timer", Label: "timer" + mark(marks, e.EventID), Title: desc, EventID: e.EventID}, e.TimestampMs), start: e.TimestampMs}
		case cdb.SubOrchestrationScheduled:
			child := cdb.BuildChildInstanceID(instance, k.Instance)
			open[e.EventID] = timelineSpan{row: add(uiTimelineRow{Kind: "child", Label: "child " + k.Name + mark(marks, e.EventID), Title: desc, EventID: e.EventID, Link: child}, e.TimestampMs), start: e.TimestampMs}
		case cdb.ExternalSubscribed:
			waiting[k.Name] = append(waiting[k.Name], timelineSpan{row: add(uiTimelineRow{Kind: "wait", Label: "wait for " + k.Name, Title: desc, EventID: e.EventID}, e.TimestampMs), start: e.TimestampMs})
		case cdb.QueueSubscribed:
			waiting["queue\x00"+k.Name] = append(waiting["queue\x00"+k.Name], timelineSpan{row: add(uiTimelineRow{Kind: "wait", Label: "wait on queue " + k.Name, Title: desc, EventID: e.EventID}, e.TimestampMs), start: e.TimestampMs})
		case cdb.ExternalEvent:
			endWait(waiting, k.Name, e.TimestampMs, end)
			add(uiTimelineRow{Kind: "event", Label: "event " + k.Name, Title: desc, EventID: e.EventID, Point: true, Outcome: "ok"}, e.TimestampMs)
		case cdb.QueueEventDelivered:
			endWait(waiting, "queue\x00"+k.Name, e.TimestampMs, end)
			add(uiTimelineRow{Kind: "event", Label: "queued " + k.Name, Title: desc, EventID: e.EventID, Point: true, Outcome: "ok"}, e.TimestampMs)
		case cdb.OrchestrationCompleted, cdb.OrchestrationContinuedAsNew:
			add(uiTimelineRow{Kind: "end", Label: e.Kind.Type(), Title: desc, EventID: e.EventID, Point: true, Outcome: "ok"}, e.TimestampMs)
		case cdb.OrchestrationFailed:
			add(uiTimelineRow{Kind: "end", Label: e.Kind.Type(), Title: desc, EventID: e.EventID, Point: true, Outcome: "failed"}, e.TimestampMs)
		default:
			if e.SourceEventID == nil {
				continue
			}
			if s, ok := open[*e.SourceEventID]; ok {
				end(s, e.TimestampMs, outcomeOf(e.Kind))
				t.Rows[s.row].Title += " → " + desc
				delete(open, *e.SourceEventID)
			}
		}
	}
	// What an ended execution left open never ends: a timer that lost a
	// race, a wait no event came for.
	unended := "pending"
	if ended(history) {
		unended = "abandoned"
	}
	for _, s := range open {
		end(s, last, unended)
	}
	for _, waits := range waiting {
		for _, s := range waits {
			end(s, last, unended)
		}
	}
	t.Height = timelineTop + len(t.Rows)*timelineRowHeight + 10
	return t
}

// endWait ends the oldest wait for name, if one is open.
func endWait(waiting map[string][]timelineSpan, name string, at uint64, end func(timelineSpan, uint64, string)) {
	if len(waiting[name]) == 0 {
		return
	}
	end(waiting[name][0], at, "ok")
	waiting[name] = waiting[name][1:]
}

// outcomeOf says how the event that ended a row ended it.
func outcomeOf(k cdb.EventKind) string {
	if strings.HasSuffix(k.Type(), "Failed") {
		return "failed"
	}
	return "ok"
}

// ended reports whether a history's execution has ended.
func ended(history []cdb.Event) bool {
	switch history[len(history)-1].Kind.(type) {
	case cdb.OrchestrationCompleted, cdb.OrchestrationFailed, cdb.OrchestrationContinuedAsNew:
		return true
	}
	return false
}
