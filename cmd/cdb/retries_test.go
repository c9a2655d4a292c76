package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

func timelineEvent(id uint64, source uint64, atMs uint64, kind cdb.EventKind) cdb.Event {
	ev := cdb.Event{EventID: id, InstanceID: "order", ExecutionID: 1, TimestampMs: atMs, Kind: kind}
	if source != 0 {
		ev.SourceEventID = &source
	}
	return ev
}

// The timeline numbers the attempts of an activity retried after failures
// and marks the timers that were the waits between them, with their length.
func TestTimelineMarksRetryAttemptsAndTheirWaits(t *testing.T) {
	failure := cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "card declined"}
	history := []cdb.Event{
		timelineEvent(1, 0, 1000, cdb.OrchestrationStarted{Name: "Pay", Version: "1.0.0"}),
		timelineEvent(2, 0, 1000, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
		timelineEvent(3, 2, 1010, cdb.ActivityFailed{Details: failure}),
		timelineEvent(4, 0, 1010, cdb.TimerCreated{FireAtMs: 1210}),
		timelineEvent(5, 4, 1210, cdb.TimerFired{FireAtMs: 1210}),
		timelineEvent(6, 0, 1210, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
		timelineEvent(7, 6, 1220, cdb.ActivityFailed{Details: failure}),
		timelineEvent(8, 0, 1220, cdb.TimerCreated{FireAtMs: 1620}),
		timelineEvent(9, 8, 1620, cdb.TimerFired{FireAtMs: 1620}),
		timelineEvent(10, 0, 1620, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
		timelineEvent(11, 10, 1630, cdb.ActivityCompleted{Result: "receipt"}),
		timelineEvent(12, 0, 1630, cdb.TimerCreated{FireAtMs: 5630}),
		timelineEvent(13, 12, 5630, cdb.TimerFired{FireAtMs: 5630}),
		timelineEvent(14, 0, 5630, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
	}
	var out bytes.Buffer
	printTimeline(&out, "order", history)
	lines := timelineEntries(out.String())
	require.Len(t, lines, len(history))

	want := map[int]string{
		2: "(attempt 1)", 4: "(wait 200ms before attempt 2)", 6: "(attempt 2)",
		8: "(wait 400ms before attempt 3)", 10: "(attempt 3)",
	}
	for i, line := range lines {
		id := i + 1
		if m, ok := want[id]; ok {
			assert.True(t, strings.HasSuffix(line, " "+m), "#%d: %q", id, line)
		} else {
			assert.NotContains(t, line, "attempt", "#%d is no retry: a success ends the run of failures", id)
		}
	}
}

// timelineEntries is printTimeline's output an event a line: an entry's
// continuation lines joined to its first.
func timelineEntries(text string) []string {
	var entries []string
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "  #") || len(entries) == 0 {
			entries = append(entries, line)
			continue
		}
		entries[len(entries)-1] += " " + strings.TrimSpace(line)
	}
	return entries
}

// A child retried after a failure is numbered as an activity is; another
// child of the same name with another input is not.
func TestTimelineMarksRetriedChildren(t *testing.T) {
	failure := cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: "declined"}
	history := []cdb.Event{
		timelineEvent(1, 0, 0, cdb.OrchestrationStarted{Name: "Order", Version: "1.0.0"}),
		timelineEvent(2, 0, 0, cdb.SubOrchestrationScheduled{Name: "Pay", Instance: "sub::2", Input: "a"}),
		timelineEvent(3, 2, 0, cdb.SubOrchestrationFailed{Details: failure}),
		timelineEvent(4, 0, 0, cdb.SubOrchestrationScheduled{Name: "Pay", Instance: "sub::4", Input: "b"}),
		timelineEvent(5, 0, 0, cdb.SubOrchestrationScheduled{Name: "Pay", Instance: "sub::5", Input: "a"}),
	}
	assert.Equal(t, map[uint64]string{2: "(attempt 1)", 5: "(attempt 2)"}, retryMarks(history))
}
