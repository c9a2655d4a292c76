package uibrowser

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// historyEvent is what the timeline check needs of an event of the page's
// raw history JSON.
type historyEvent struct {
	EventID       uint64  `json:"event_id"`
	SourceEventID *uint64 `json:"source_event_id"`
	TimestampMs   uint64  `json:"timestamp_ms"`
	Type          string  `json:"type"`
}

// timelineRow is one row of the page's SVG timeline, as the browser laid
// it out: a bar (rect) or a point (circle).
type timelineRow struct {
	EventID uint64  `json:"id"`
	Kind    string  `json:"kind"`
	Bar     bool    `json:"bar"`
	X       float64 `json:"x"`
	W       float64 `json:"w"`
	CX      float64 `json:"cx"`
}

// readTimelineJS reads the timeline's rows and the x of its axis' origin
// from the DOM the browser built.
const readTimelineJS = `(() => {
  const svg = document.querySelector("svg.timeline");
  const rows = [...svg.querySelectorAll("g.row")].map(g => {
    const rect = g.querySelector("rect"), dot = g.querySelector("circle");
    return {id: Number(g.dataset.eventId), kind: g.dataset.kind, bar: rect !== null,
      x: rect ? Number(rect.getAttribute("x")) : 0, w: rect ? Number(rect.getAttribute("width")) : 0,
      cx: dot ? Number(dot.getAttribute("cx")) : 0};
  });
  return {origin: Number(svg.querySelector("line.axis").getAttribute("x1")), rows: rows};
})()`

// timelineDOM is what readTimelineJS returns.
type timelineDOM struct {
	Origin float64       `json:"origin"`
	Rows   []timelineRow `json:"rows"`
}

// scheduledBy is the event type that schedules a row of kind drawn as a
// bar, "" for a kind drawn otherwise.
func scheduledBy(kind string) string {
	switch kind {
	case "activity":
		return "ActivityScheduled"
	case "timer":
		return "TimerCreated"
	case "child":
		return "SubOrchestrationScheduled"
	}
	return ""
}

// schedulesBar reports whether an event of type eventType starts a bar.
func schedulesBar(eventType string) bool {
	for _, kind := range []string{"activity", "timer", "child"} {
		if scheduledBy(kind) == eventType {
			return true
		}
	}
	return false
}

// minBar is the width the page gives a bar too short to see.
const minBar = 2

// checkTimeline asserts that the timeline of a completed execution draws
// every activity, timer and sub-orchestration of its history as a bar
// from the offset of the event that scheduled it to the offset of the
// event that ended it (the history's last one if none did), on the scale
// the end-of-execution point sets.
func checkTimeline(t *testing.T, dom timelineDOM, rawHistory string) {
	t.Helper()
	var history []historyEvent
	require.NoError(t, json.Unmarshal([]byte(rawHistory), &history), "the page's raw history")
	require.NotEmpty(t, history)
	first, last := history[0].TimestampMs, history[0].TimestampMs
	for _, e := range history {
		first, last = min(first, e.TimestampMs), max(last, e.TimestampMs)
	}

	byID := map[uint64]historyEvent{}
	endOf := map[uint64]uint64{} // scheduling event id → timestamp of the event that ended it
	var scheduled []uint64
	var endID uint64
	for _, e := range history {
		byID[e.EventID] = e
		if e.SourceEventID != nil {
			if _, seen := endOf[*e.SourceEventID]; !seen {
				endOf[*e.SourceEventID] = e.TimestampMs
			}
		}
		if schedulesBar(e.Type) {
			scheduled = append(scheduled, e.EventID)
		}
		if e.Type == "OrchestrationCompleted" {
			endID = e.EventID
		}
	}
	require.NotZero(t, endID, "the history has ended: %s", rawHistory)

	var end *timelineRow
	var bars []timelineRow
	for i, r := range dom.Rows {
		if r.EventID == endID {
			end = &dom.Rows[i]
		}
		if scheduledBy(r.Kind) != "" {
			bars = append(bars, r)
		}
	}
	require.NotNil(t, end, "a point for OrchestrationCompleted #%d", endID)
	require.Greater(t, end.CX, dom.Origin, "the end point lies right of the axis' origin")
	perMs := (end.CX - dom.Origin) / float64(max(last-first, 1))
	xOf := func(ms uint64) float64 { return dom.Origin + float64(ms-first)*perMs }

	barIDs := make([]uint64, len(bars))
	for i, b := range bars {
		barIDs[i] = b.EventID
	}
	assert.Equal(t, scheduled, barIDs, "a bar per activity, timer and sub-orchestration, in history order")
	t.Logf("the timeline's %d bars match the history's %d events", len(bars), len(history))
	for _, b := range bars {
		e := byID[b.EventID]
		if !assert.Equal(t, scheduledBy(b.Kind), e.Type, "bar #%d's kind", b.EventID) || !assert.True(t, b.Bar, "row #%d is a bar", b.EventID) {
			continue
		}
		ended, ok := endOf[b.EventID]
		if !ok {
			ended = last // a timer that lost a race is drawn to the end
		}
		assert.InDelta(t, xOf(e.TimestampMs), b.X, 0.01, "bar #%d %s starts where it was scheduled", b.EventID, b.Kind)
		assert.InDelta(t, max(xOf(ended)-xOf(e.TimestampMs), minBar), b.W, 0.01, "bar #%d %s ends where it ended", b.EventID, b.Kind)
	}
}
