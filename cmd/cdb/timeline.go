package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// printTimeline prints an instance's history as one entry per event: its
// id, its time relative to the first event, its kind as the contract names
// it (the "type" of `cdb show -o json`), what it carries, and the retries
// (retryMarks). The columns are as wide as this history needs (a kind
// longer than maxKindColumn overflows its column), and an entry too long for
// the terminal (80 columns when out is none) goes on in lines indented past
// the event ids.
func printTimeline(out io.Writer, instance string, history []cdb.Event) {
	if len(history) == 0 {
		fmt.Fprintln(out, "  (no events)")
		return
	}
	offsets := timelineOffsets(history)
	offsetWidth, kindWidth := 0, 0
	for i, e := range history {
		offsetWidth = max(offsetWidth, len(offsets[i]))
		kindWidth = min(max(kindWidth, len(e.Kind.Type())), maxKindColumn)
	}
	marks := retryMarks(history)
	width := terminalWidth(out)
	for i, e := range history {
		source := ""
		if e.SourceEventID != nil {
			source = fmt.Sprintf("←#%d ", *e.SourceEventID)
		}
		head := fmt.Sprintf("  #%-4d %*s  ", e.EventID, offsetWidth, offsets[i])
		line := fmt.Sprintf("%s%-*s  %s%s%s", head, kindWidth, e.Kind.Type(), source, describeEvent(instance, e.Kind), mark(marks, e.EventID))
		printWrapped(out, line, width, timelineIndent)
	}
}

// maxKindColumn is the width of the kind column at most: the length of
// SubOrchestrationScheduled, so that one of the rare longer kinds
// (ExternalSubscribedPersistentCancelled) does not narrow every line's
// description.
const maxKindColumn = 25

// timelineIndent is where an entry's continuation lines start: past the
// event ids, so that the ids still stand out, with room for a shortened
// payload (describeEvent cuts them at 50 characters) on one line.
const timelineIndent = 8

// timelineOffsets is each event's time after the first event, or blank for
// one without a time after it.
func timelineOffsets(history []cdb.Event) []string {
	start := history[0].TimestampMs
	offsets := make([]string, len(history))
	for i, e := range history {
		if e.TimestampMs >= start && start > 0 {
			offsets[i] = "+" + formatOffset(e.TimestampMs-start)
		}
	}
	return offsets
}

// formatOffset is ms in milliseconds up to 9999, then as a duration
// rounded to what a reader compares at that scale (12.3s, 1h2m3s).
func formatOffset(ms uint64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case ms < 10_000:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// describeEvent is the interesting part of an event of instance,
// shortened. A child is named by the instance id it is stored under, so
// that cdb show opens it.
func describeEvent(instance string, k cdb.EventKind) string {
	switch v := k.(type) {
	case cdb.OrchestrationStarted:
		return fmt.Sprintf("%s@%s input=%s", v.Name, v.Version, truncate(v.Input, 50))
	case cdb.OrchestrationCompleted:
		return "output=" + truncate(v.Output, 50)
	case cdb.OrchestrationFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80)
	case cdb.ActivityScheduled:
		return fmt.Sprintf("%s(%s)%s", v.Name, truncate(v.Input, 50), sessionAndTag(v.SessionID, v.Tag))
	case cdb.ActivityCompleted:
		return "result=" + truncate(v.Result, 50) + lostRuns(v.Delivery)
	case cdb.ActivityFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80) + lostRuns(v.Delivery)
	case cdb.TimerCreated:
		if v.Purpose != nil {
			return fmt.Sprintf("fires at %s: %s", formatMs(v.FireAtMs), *v.Purpose)
		}
		return fmt.Sprintf("fires at %s", formatMs(v.FireAtMs))
	case cdb.ExternalSubscribed:
		return "waiting for " + v.Name
	case cdb.ExternalEvent:
		return fmt.Sprintf("%s=%s", v.Name, truncate(v.Data, 50))
	case cdb.QueueSubscribed:
		return "waiting on queue " + v.Name
	case cdb.QueueEventDelivered:
		return fmt.Sprintf("%s: %s", v.Name, truncate(v.Data, 50))
	case cdb.TimerFired:
		return "fired"
	case cdb.SubOrchestrationScheduled:
		return fmt.Sprintf("%s as %s", v.Name, cdb.BuildChildInstanceID(instance, v.Instance))
	case cdb.SubOrchestrationCompleted:
		return "result=" + truncate(v.Result, 50)
	case cdb.SubOrchestrationFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80)
	case cdb.OrchestrationChained:
		return fmt.Sprintf("%s as %s", v.Name, v.Instance)
	case cdb.OrchestrationContinuedAsNew:
		return "input=" + truncate(v.Input, 50)
	case cdb.CustomStatusUpdated:
		if v.Status == nil {
			return "(cleared)"
		}
		return truncate(*v.Status, 80)
	case cdb.KeyValueSet:
		return fmt.Sprintf("%s=%s", v.Key, truncate(v.Value, 50))
	case cdb.KeyValueCleared:
		return v.Key
	}
	return ""
}

func sessionAndTag(session, tag *string) string {
	var parts []string
	if session != nil {
		parts = append(parts, "session="+*session)
	}
	if tag != nil {
		parts = append(parts, "tag="+*tag)
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, " ") + "]"
}

// sortedKeys returns a map's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mark(marks map[uint64]string, id uint64) string {
	if m, ok := marks[id]; ok {
		return " " + m
	}
	return ""
}

// lostRuns says that an outcome came from a later run of its activity:
// the runs before it ended without a result stored (a process died or lost
// its lock), so the activity ran more than once.
func lostRuns(delivery *uint32) string {
	if delivery == nil || *delivery <= 1 {
		return ""
	}
	return fmt.Sprintf(" (run %d, after %d lost)", *delivery, *delivery-1)
}
