package main

import (
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
)

// retryMarks finds the retries in a history, for the timeline: an activity
// or child scheduled again with the same name and input after a failure is
// an attempt, numbered from the first schedule of the run of failures, and
// a timer whose firing is followed by such an attempt is the wait before
// it. A history records no retry policy (its events are duroxide's), so
// this reads the shape a policy leaves, and a loop written by hand that
// leaves the same shape is marked alike. The marks are keyed by event id.
func retryMarks(history []cdb.Event) map[uint64]string {
	marks := map[uint64]string{}
	attempts := attemptNumbers(history)
	for id, n := range attempts {
		marks[id] = fmt.Sprintf("(attempt %d)", n)
	}
	for i, ev := range history {
		fired, ok := ev.Kind.(cdb.TimerFired)
		if !ok || ev.SourceEventID == nil {
			continue
		}
		if next, ok := nextSchedule(history[i+1:]); ok && attempts[next] > 1 {
			marks[*ev.SourceEventID] = fmt.Sprintf("(wait %s before attempt %d)", waitOf(history, *ev.SourceEventID, fired), attempts[next])
		}
	}
	return marks
}

// attemptNumbers numbers the schedules of each name and input that follow
// failures of the same: a success ends the run.
func attemptNumbers(history []cdb.Event) map[uint64]int {
	keyOf := map[uint64]string{} // scheduling event id → name and input
	failures := map[string]int{} // key → failures in a row
	firstOfRun := map[string]uint64{}
	numbers := map[uint64]int{}
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.ActivityScheduled:
			keyOf[ev.EventID] = "activity\x00" + k.Name + "\x00" + k.Input
		case cdb.SubOrchestrationScheduled:
			keyOf[ev.EventID] = "child\x00" + k.Name + "\x00" + k.Input
		}
		if key, ok := keyOf[ev.EventID]; ok {
			if failures[key] == 0 {
				firstOfRun[key] = ev.EventID
				continue
			}
			numbers[firstOfRun[key]] = 1
			numbers[ev.EventID] = failures[key] + 1
			continue
		}
		if ev.SourceEventID == nil {
			continue
		}
		key, scheduled := keyOf[*ev.SourceEventID]
		switch ev.Kind.(type) {
		case cdb.ActivityFailed, cdb.SubOrchestrationFailed:
			if scheduled {
				failures[key]++
			}
		case cdb.ActivityCompleted, cdb.SubOrchestrationCompleted:
			if scheduled {
				failures[key] = 0
			}
		}
	}
	return numbers
}

// nextSchedule is the first activity, child or timer scheduled in events.
func nextSchedule(events []cdb.Event) (uint64, bool) {
	for _, ev := range events {
		switch ev.Kind.(type) {
		case cdb.ActivityScheduled, cdb.SubOrchestrationScheduled, cdb.TimerCreated:
			return ev.EventID, true
		}
	}
	return 0, false
}

// waitOf is how long the timer waited: its due time less the time it was
// created at.
func waitOf(history []cdb.Event, timerID uint64, fired cdb.TimerFired) time.Duration {
	for _, ev := range history {
		if ev.EventID == timerID && fired.FireAtMs >= ev.TimestampMs {
			return time.Duration(fired.FireAtMs-ev.TimestampMs) * time.Millisecond
		}
	}
	return 0
}
