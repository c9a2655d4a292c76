package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/duroxide-go/cdb"
)

// printTimeline prints an instance's history as one line per event: its
// id, its time relative to the first event, its kind as the contract names
// it (the "type" of `cdb show -o json`), what it carries, and the retries
// (retryMarks).
func printTimeline(out io.Writer, instance string, history []cdb.Event) {
	if len(history) == 0 {
		fmt.Fprintln(out, "  (no events)")
		return
	}
	start := history[0].TimestampMs
	marks := retryMarks(history)
	for _, e := range history {
		offset := "      "
		if e.TimestampMs >= start && start > 0 {
			offset = fmt.Sprintf("%+5dms", e.TimestampMs-start)
		}
		source := ""
		if e.SourceEventID != nil {
			source = fmt.Sprintf(" ←#%d", *e.SourceEventID)
		}
		fmt.Fprintf(out, "  #%-4d %s  %-38s%s %s%s\n", e.EventID, offset, e.Kind.Type(), source, describeEvent(instance, e.Kind), mark(marks, e.EventID))
	}
}

// describeEvent is the interesting part of an event of instance,
// shortened. A child is named by the instance id it is stored under, so
// that cdb show opens it.
func describeEvent(instance string, k cdb.EventKind) string {
	switch v := k.(type) {
	case cdb.OrchestrationStarted:
		return fmt.Sprintf("%s@%s input=%s", v.Name, v.Version, truncate(v.Input, 60))
	case cdb.OrchestrationCompleted:
		return "output=" + truncate(v.Output, 80)
	case cdb.OrchestrationFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80)
	case cdb.ActivityScheduled:
		return fmt.Sprintf("%s(%s)%s", v.Name, truncate(v.Input, 60), sessionAndTag(v.SessionID, v.Tag))
	case cdb.ActivityCompleted:
		return "result=" + truncate(v.Result, 80)
	case cdb.ActivityFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80)
	case cdb.TimerCreated:
		return fmt.Sprintf("fires at %s", formatMs(v.FireAtMs))
	case cdb.ExternalSubscribed:
		return "waiting for " + v.Name
	case cdb.ExternalEvent:
		return fmt.Sprintf("%s=%s", v.Name, truncate(v.Data, 60))
	case cdb.QueueSubscribed:
		return "waiting on queue " + v.Name
	case cdb.QueueEventDelivered:
		return fmt.Sprintf("%s: %s", v.Name, truncate(v.Data, 60))
	case cdb.TimerFired:
		return "fired"
	case cdb.SubOrchestrationScheduled:
		return fmt.Sprintf("%s as %s", v.Name, cdb.BuildChildInstanceID(instance, v.Instance))
	case cdb.SubOrchestrationCompleted:
		return "result=" + truncate(v.Result, 80)
	case cdb.SubOrchestrationFailed:
		return "error=" + truncate(v.Details.DisplayMessage(), 80)
	case cdb.OrchestrationChained:
		return fmt.Sprintf("%s as %s", v.Name, v.Instance)
	case cdb.OrchestrationContinuedAsNew:
		return "input=" + truncate(v.Input, 80)
	case cdb.CustomStatusUpdated:
		if v.Status == nil {
			return "(cleared)"
		}
		return truncate(*v.Status, 80)
	case cdb.KeyValueSet:
		return fmt.Sprintf("%s=%s", v.Key, truncate(v.Value, 60))
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
