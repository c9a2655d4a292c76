package main

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/duroxide-go/cdb"
)

// The live page's latencies come from the store, not from the runtimes'
// in-process metrics, which the UI cannot see: each sample reads the
// histories of the instances that ended since the previous sample
// (QueryInstances' EndedAfter: the newest uiLatencyInstances of them by
// creation, one query per partition key range, and one history read each,
// counted in the UI's own cost) and measures, in each:
//
//   - activity latency: from an attempt's ActivityScheduled to its
//     ActivityCompleted or ActivityFailed, both stamped by the turns that
//     recorded them: the worker queue's wait, the run, the orchestrator
//     queue's wait and the recording turn up to its clock reading;
//   - turn latency: from a timer's due time (TimerFired's fire_at_ms) to
//     the turn that recorded it (its event's time): how late a turn runs
//     after its message is due. Timers are the only messages whose due
//     time the history keeps, so a workload without timers shows none.
//
// An instance is measured once, in the sample after it ended.

// uiLatencyInstances caps the histories one sample reads.
const uiLatencyInstances = 20

// uiLatencyJSON is a latency's distribution over one sample's measures.
type uiLatencyJSON struct {
	Count int     `json:"count"` // durations measured
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// uiSample is a live sample: cdb top's, with the latencies and the RU per
// orchestration the UI derives.
type uiSample struct {
	topSample
	// Ended counts the histories read for the latencies: the instances
	// that ended since the previous sample, at most uiLatencyInstances.
	Ended           int            `json:"ended_read"`
	TurnLatency     *uiLatencyJSON `json:"turn_latency"`     // null when none was measured
	ActivityLatency *uiLatencyJSON `json:"activity_latency"` // null when none was measured
	// RUPerOrchestration is the application's RU over the last 30
	// seconds' samples divided by the instances that ended in them: what
	// an orchestration costs, on average, when the processes publish
	// their totals (Config.ProcessLeases); null otherwise, or when none
	// ended.
	RUPerOrchestration *float64 `json:"ru_per_orchestration"`
}

// uiRUWindow is how many samples RU per orchestration is averaged over:
// 30 seconds, so that the application's rate (as old as each process's
// last renewal, every 5 s by default) and the completions, counted each
// sample, cover about the same time.
const uiRUWindow = 15

// ruPerOrchestration is the application's RU over the last uiRUWindow
// samples of window (the newest last) divided by the instances that ended
// in them; nil when no sample has both.
func ruPerOrchestration(window []topSample) *float64 {
	var ru float64
	var ended uint64
	for _, w := range window[max(len(window)-uiRUWindow, 0):] {
		if w.Processes.RUPerSecond == nil || w.Completed == nil || w.Seconds == nil {
			continue
		}
		ru += *w.Processes.RUPerSecond * *w.Seconds
		ended += *w.Completed
	}
	if ended == 0 {
		return nil
	}
	per := ru / float64(ended)
	return &per
}

// endedHistories reads the histories of the instances that ended at or
// after since and are not in seen, the newest first; it returns their ids
// as the next seen.
func endedHistories(ctx context.Context, p *cdb.CosmosProvider, since time.Time, seen map[string]bool) ([][]cdb.Event, map[string]bool, error) {
	page, err := p.QueryInstances(ctx, cdb.InstanceQuery{EndedAfter: since, PageSize: uiLatencyInstances})
	if err != nil {
		return nil, seen, err
	}
	read := map[string]bool{}
	var histories [][]cdb.Event
	for _, info := range page.Instances {
		if seen[info.InstanceID] {
			continue
		}
		history, err := p.Read(ctx, info.InstanceID)
		if err != nil {
			return nil, seen, err
		}
		read[info.InstanceID] = true
		histories = append(histories, history)
	}
	return histories, read, nil
}

// historyLatencies are the activity and timer-turn durations of histories.
func historyLatencies(histories [][]cdb.Event) (turns, activities []time.Duration) {
	for _, h := range histories {
		scheduled := map[uint64]uint64{} // ActivityScheduled's event id: its time
		for _, e := range h {
			switch k := e.Kind.(type) {
			case cdb.ActivityScheduled:
				scheduled[e.EventID] = e.TimestampMs
			case cdb.ActivityCompleted, cdb.ActivityFailed:
				if e.SourceEventID == nil {
					continue
				}
				if at, ok := scheduled[*e.SourceEventID]; ok && e.TimestampMs >= at {
					activities = append(activities, time.Duration(e.TimestampMs-at)*time.Millisecond)
				}
			case cdb.TimerFired:
				if e.TimestampMs >= k.FireAtMs {
					turns = append(turns, time.Duration(e.TimestampMs-k.FireAtMs)*time.Millisecond)
				}
			}
		}
	}
	return turns, activities
}

// latencySpread is the p50 and p99 of ds by nearest rank; nil for none.
func latencySpread(ds []time.Duration) *uiLatencyJSON {
	if len(ds) == 0 {
		return nil
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(sorted)))) - 1
		return float64(sorted[max(i, 0)]) / float64(time.Millisecond)
	}
	return &uiLatencyJSON{Count: len(sorted), P50Ms: rank(0.50), P99Ms: rank(0.99)}
}
