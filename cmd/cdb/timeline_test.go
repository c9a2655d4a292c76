package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The kind column starts at the same place on every line whatever the
// offsets span, from milliseconds to hours, and an offset past 9,999 ms
// reads with a unit.
func TestTimelineKeepsItsColumnsFromMillisecondsToHours(t *testing.T) {
	t.Setenv("COLUMNS", "")
	start := uint64(1_700_000_000_000)
	history := []cdb.Event{
		timelineEvent(1, 0, start, cdb.OrchestrationStarted{Name: "Pay", Version: "1.0.0"}),
		timelineEvent(2, 0, start+7, cdb.TimerCreated{FireAtMs: start + 9_999}),
		timelineEvent(3, 2, start+9_999, cdb.TimerFired{FireAtMs: start + 9_999}),
		timelineEvent(4, 0, start+12_345, cdb.TimerCreated{FireAtMs: start + 3_723_456}),
		timelineEvent(5, 4, start+3_723_456, cdb.TimerFired{FireAtMs: start + 3_723_456}),
		timelineEvent(6, 0, start+3_723_456, cdb.OrchestrationCompleted{Output: "done"}),
	}
	var out bytes.Buffer
	printTimeline(&out, "order", history)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, len(history), out.String())
	column := strings.Index(lines[0], "OrchestrationStarted")
	for i, line := range lines {
		kind := history[i].Kind.Type()
		assert.Equal(t, column, strings.Index(line, kind), "line %d: %q", i+1, line)
	}
	for i, want := range []string{"+0ms", "+7ms", "+9999ms", "+12.3s", "+1h2m3s", "+1h2m3s"} {
		assert.Contains(t, lines[i], " "+want+"  ", "line %d", i+1)
	}
}

// An event whose description is longer than the terminal goes on under its
// kind, and no line is wider than 80 columns when the output is no
// terminal.
func TestTimelineFitsEightyColumns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	long := `{"id":"order-000","customer":"customer-00","items":2,"total":10,"note":"` + strings.Repeat("x", 200) + `"}`
	history := []cdb.Event{
		timelineEvent(1, 0, 1000, cdb.OrchestrationStarted{Name: "ProcessOrder", Version: "1.0.0", Input: long}),
		timelineEvent(2, 0, 1000, cdb.SubOrchestrationScheduled{Name: "ChargePayment", Instance: "sub::2", Input: long}),
		timelineEvent(3, 2, 1223, cdb.SubOrchestrationCompleted{Result: long}),
		timelineEvent(4, 0, 1223, cdb.OrchestrationCompleted{Output: "receipt " + long}),
	}
	var out bytes.Buffer
	printTimeline(&out, "order-000", history)
	assertFits(t, out.String(), 80)
	assert.Contains(t, out.String(), "\n  #2 ", "every event still starts a line of its own")
	assert.Greater(t, strings.Count(out.String(), "\n"), len(history), "the long entries go on over more lines")
}

// assertFits fails for each line of text wider than width.
func assertFits(t *testing.T, text string, width int) {
	t.Helper()
	for i, line := range strings.Split(text, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(line), width, "line %d is too wide: %q", i+1, line)
	}
}

// cdb show's info, executions and KV fit 80 columns when the output is no
// terminal, whatever the output and the custom status hold.
func TestShowFitsEightyColumns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	long := `{"order":"order-000","tracking":"TRK-828084","note":"` + strings.Repeat("lorem ipsum ", 20) + `"}`
	started, completed := time.Date(2026, 12, 4, 5, 22, 13, 0, time.UTC), time.Date(2026, 12, 4, 5, 22, 14, 0, time.UTC)
	s := showJSON{
		instanceJSON: instanceJSON{InstanceID: "order-000", OrchestrationName: "ProcessOrder", OrchestrationVersion: "1.0.0",
			Status: "Completed", Output: &long, CreatedAt: &started, UpdatedAt: &completed, CurrentExecutionID: 2},
		CustomStatus: &long,
		Executions: []executionJSON{
			{ExecutionID: 1, Status: "ContinuedAsNew", EventCount: 1234, StartedAt: &started, CompletedAt: &completed},
			{ExecutionID: 2, Status: "Completed", EventCount: 27, StartedAt: &started, CompletedAt: &completed},
		},
		History: []cdb.Event{timelineEvent(1, 0, 1000, cdb.OrchestrationStarted{Name: "ProcessOrder", Version: "1.0.0", Input: long})},
		KV:      map[string]string{"receipt": long},
	}
	var out bytes.Buffer
	printInstance(&out, s)
	assertFits(t, out.String(), 80)
	assert.Contains(t, out.String(), "\n  #1 ContinuedAsNew 1234 events  2026-12-04T05:22:13Z to 2026-12-04T05:22:14Z\n")
}

// An outcome from a later run of its activity says how many runs before it
// were lost (a process died or lost its lock): show does not hide them.
func TestTimelineSaysWhenAnActivityRanAgain(t *testing.T) {
	t.Setenv("COLUMNS", "")
	start := uint64(1_700_000_000_000)
	second, third := uint32(2), uint32(3)
	history := []cdb.Event{
		timelineEvent(1, 0, start, cdb.OrchestrationStarted{Name: "Pay", Version: "1.0.0"}),
		timelineEvent(2, 0, start+1, cdb.ActivityScheduled{Name: "Charge", Input: "12"}),
		timelineEvent(3, 0, start+2, cdb.ActivityScheduled{Name: "Ship", Input: "box"}),
		timelineEvent(4, 2, start+30_000, cdb.ActivityCompleted{Result: "ok", Delivery: &second}),
		timelineEvent(5, 3, start+60_000, cdb.ActivityFailed{Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "no truck"}, Delivery: &third}),
	}
	var out bytes.Buffer
	printTimeline(&out, "order", history)
	assert.Contains(t, out.String(), "result=ok (run 2, after 1 lost)")
	assert.Contains(t, out.String(), "error=no truck (run 3, after 2 lost)")
}

// A timer the runtime set for the code says what it is for.
func TestTimelineSaysWhatARuntimeTimerIsFor(t *testing.T) {
	t.Setenv("COLUMNS", "")
	start := uint64(1_700_000_000_000)
	purpose := `the retry policy's Timeout of activity "Charge"`
	history := []cdb.Event{
		timelineEvent(1, 0, start, cdb.OrchestrationStarted{Name: "Pay", Version: "1.0.0"}),
		timelineEvent(2, 0, start+1, cdb.TimerCreated{FireAtMs: start + 60_000, Purpose: &purpose}),
	}
	var out bytes.Buffer
	printTimeline(&out, "order", history)
	assert.Contains(t, strings.Join(strings.Fields(out.String()), " "), `: the retry policy's Timeout of activity "Charge"`)
}
