package sim

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"time"

	rt "github.com/duroxide-go/cdb/durable"
)

// Long sequences (Features.LongSequences): production's orchestrations
// are often long and sequential, activity after activity, each short, with
// a durable timer now and then. A run's other chains stop at 23 turns; a
// sequence runs sequenceSteps, so its writer holds the instance through
// hundreds of chained turns (Chained turns), each made from the one
// before: whatever a turn derives from its predecessor's lock token must
// stay bounded (bounded-names), and the instance must still end with the
// output its input determines. Every tenth step races its activity
// against a durable timer (a timeout: the activity wins unless a fault or
// a crash holds it up, and then the step runs the activity again), and
// every hundredth sleeps on a durable timer before its activity (the
// instance is released while it sleeps, so a hold lasts at most a hundred
// turns). The timer that lost a race fires later into the hold, which
// reads it within a poll interval (chain-reads-others). One sequence a
// run (two in a soak round) starts with the workload and runs beside its
// scenarios; the workload waits for it. Passing runs them on odd seeds.
const (
	kindSequence  = "Sequence"
	sequenceSteps = 500
	// sequenceRaceEvery: every tenth step races a timeout.
	sequenceRaceEvery = 10
	// sequenceSleepEvery: every hundredth step sleeps first.
	sequenceSleepEvery = 100
)

// orchSequence runs N activities one after another: every RaceEvery-th
// step races its activity against a timer of TimeoutMs (the activity is
// run again while the timer wins), every SleepEvery-th sleeps TimerMs on a
// timer first. A result other than the step's fails it.
func orchSequence(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	for i := range s.N {
		if s.SleepEvery > 0 && i%s.SleepEvery == s.SleepEvery-1 {
			if _, err := ctx.ScheduleTimer(time.Duration(s.TimerMs) * time.Millisecond).Await(); err != nil {
				return "", err
			}
		}
		out, err := sequenceStep(ctx, s, i)
		if err != nil {
			return "", err
		}
		if want := fmt.Sprintf("w%d:%d", i, s.Size); stripRun(out) != want {
			return "", fmt.Errorf("step %d: result %q, want %q", i, out, want)
		}
	}
	return sequenceOutput(s), nil
}

// sequenceStep runs step i's activity, raced against a timeout on the
// steps that race one.
func sequenceStep(ctx *rt.OrchestrationContext, s spec, i int) (string, error) {
	if s.RaceEvery <= 0 || i%s.RaceEvery != s.RaceEvery-1 {
		return s.work(ctx, i).Await()
	}
	for {
		work := s.work(ctx, i)
		if ctx.Select(work, ctx.ScheduleTimer(time.Duration(s.TimeoutMs)*time.Millisecond)) == 0 {
			return work.Await()
		}
		// The timeout won: the activity was cancelled; run it again.
	}
}

func sequenceOutput(s spec) string { return fmt.Sprintf("seq:%s:%d", s.Run, s.N) }

// startLongSequences starts the run's long sequences beside the scenarios;
// wg waits for them.
func (h *harness) startLongSequences(ctx context.Context, rng *rand.Rand, wg *sync.WaitGroup) {
	if !h.env.cfg.Features.LongSequences {
		return
	}
	count := 1
	if h.env.cfg.Duration > 0 && h.env.cfg.InFlight >= 16 {
		count = 2 // a soak round, which runs more at once
	}
	for k := range count {
		id := fmt.Sprintf("seq%d", k)
		s := spec{Kind: kindSequence, Run: fmt.Sprintf("q%d.0", k), N: sequenceSteps, SleepMs: rng.Intn(3),
			RaceEvery: sequenceRaceEvery, TimeoutMs: int(hostScaled(h.env.cfg, 500*time.Millisecond) / time.Millisecond),
			SleepEvery: sequenceSleepEvery, TimerMs: 1 + rng.Intn(20)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			// Not followed by a waiter: its expectation may change.
			e := &expectation{instance: id, spec: s, want: expected(s)}
			if h.startExpecting(ctx, id, s) != nil {
				return
			}
			h.cancelSequenceOnLongNames(ctx, e)
			h.waitTerminal(ctx, []string{id})
			end := "not ended"
			if st, err := h.observer.GetStatus(ctx, id); err == nil {
				end = string(st.State)
			}
			h.env.rec.sequenceRan(id, end, time.Since(began))
		}()
	}
}

// cancelSequenceOnLongNames waits for the sequence to end, and cancels it
// once a name on its partition outgrew the id limit (bounded-names has
// reported the defect by then, and an id derived from that name is
// refused): what the rest of it would show, a turn or an item refused for
// its id and left to its lock's expiry every few dozen turns, only makes
// the run minutes longer. It then expects the sequence to end cancelled.
func (h *harness) cancelSequenceOnLongNames(ctx context.Context, e *expectation) {
	names := h.env.rec.names
	if names == nil {
		return
	}
	for ctx.Err() == nil {
		if st, err := h.observer.GetStatus(ctx, e.instance); err == nil && st.IsTerminal() {
			return
		}
		if names.outgrown(instancePK(e.instance)) {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	err := h.call(ctx, func(ctx context.Context, c *rt.Client) error {
		return c.CancelInstance(ctx, e.instance, "names outgrew their bounds")
	})
	if err != nil {
		h.viol.add(invHarness, e.instance, fmt.Sprintf("cancel a sequence whose names outgrew their bounds: %v", err))
		return
	}
	h.expectOutcome(&expectation{instance: e.instance, spec: e.spec, want: outcome{State: rt.StateFailed, Error: "cancel"}})
	h.env.stats.count(&h.env.stats.CancelsSent, 1)
}

// sequenceRun is how a long sequence ended, and how long it took from its
// start.
type sequenceRun struct {
	end  string
	took time.Duration
}

// sequenceRan notes how a long sequence ended, and how long it took.
func (r *recorder) sequenceRan(id, end string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sequences == nil {
		r.sequences = map[string]sequenceRun{}
	}
	r.sequences[id] = sequenceRun{end: end, took: took}
}

// sequencesSummary is how long each long sequence took and the longest hold
// of chained turns on it, for the report.
func (r *recorder) sequencesSummary(chains *chainedTurns) string {
	r.mu.Lock()
	ids := make([]string, 0, len(r.sequences))
	for id := range r.sequences {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	took := maps.Clone(r.sequences)
	r.mu.Unlock()
	var parts []string
	for _, id := range ids {
		hold := 0
		if chains != nil {
			hold = chains.longestHold(instancePK(id))
		}
		parts = append(parts, fmt.Sprintf("%s (%d steps) %s in %s (longest hold: %d chained turns)", id, sequenceSteps, took[id].end, took[id].took.Round(time.Millisecond), hold))
	}
	return strings.Join(parts, "; ")
}
