package sim

import (
	"context"
	"sync/atomic"
	"time"
)

// progress is the run's heartbeat, and the one rule by which the harness
// stops waiting: a wait ends when what it waits for holds, or when nothing
// in the whole run has progressed for Config.Stall. Progress is a turn
// committing (a history document created), an activity completion
// committing, an activity body finishing, or the harness seeing an instance
// reach a terminal state or its history grow. A run that keeps making
// progress is therefore never failed for being slow, however loaded the
// machine; only a stretch with no progress at all turns a wait into a
// failure (stuck, leftovers, a call that could not be made).
//
// Config.HardCap, which only the soak sets, additionally bounds each wait
// by the wall clock, so a livelock (work committing forever without an end)
// cannot make a soak run forever.
type progress struct {
	last    atomic.Int64 // unix nanoseconds of the last progress
	marks   atomic.Int64 // how many times the run progressed
	stall   time.Duration
	hardCap time.Duration
}

func newProgress(stall, hardCap time.Duration) *progress {
	p := &progress{stall: stall, hardCap: hardCap}
	p.mark()
	return p
}

// mark notes that the run progressed now.
func (p *progress) mark() {
	if p != nil {
		p.last.Store(time.Now().UnixNano())
		p.marks.Add(1)
	}
}

// work is how many times the run has progressed so far.
func (p *progress) work() int64 { return p.marks.Load() }

// awaitWork waits until the run has progressed n times since since (a
// work() reading); false when ctx ended first. Faults paced by it strike
// as often per unit of work on a slow machine as on a fast one.
func (p *progress) awaitWork(ctx context.Context, since, n int64) bool {
	for p.work()-since < n {
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return false
		}
	}
	return true
}

// idleFor is how long nothing has progressed.
func (p *progress) idleFor() time.Duration {
	return time.Since(time.Unix(0, p.last.Load()))
}

// stalled says nothing has progressed for the stall stretch.
func (p *progress) stalled() bool { return p.idleFor() >= p.stall }

// waitUntil polls done every interval until it holds (true), or the run
// stalls, the hard cap (soak only) passes or ctx ends (false). done may
// call mark itself when it sees progress.
func (p *progress) waitUntil(ctx context.Context, interval time.Duration, done func() bool) bool {
	began := time.Now()
	for {
		if done() {
			return true
		}
		if p.stalled() || p.hardCap > 0 && time.Since(began) >= p.hardCap {
			return false
		}
		if !sleepCtx(ctx, interval) {
			return false
		}
	}
}

// why says what ended a wait that did not succeed, for a violation's detail.
func (p *progress) why() string {
	if p.stalled() {
		return "no progress anywhere in the run for " + p.idleFor().Round(time.Second).String()
	}
	return "the soak's hard cap of " + p.hardCap.String() + " per wait passed"
}
