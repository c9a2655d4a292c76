package sim

import (
	"context"
	"sync"
	"time"

	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// Lock timeouts that are "short" must be short relative to the host: the
// race detector or a loaded machine makes every turn and renewal several
// times slower, and a lock drawn for an idle host then expires under work
// that is healthy, each expiry counting an attempt, until an instance is
// poisoned by the host's speed rather than by a defect. A run measures its
// host once and scales the short locks it draws by that factor.
//
// A host also slows down during a run (other test binaries start, the npm
// server gets busy): the completion waits' bound (waits.go) follows the
// host as it was while each wait ran, from samples a hostWatch takes
// through the run.

// referenceCalibration is what calibrate takes on an idle 2-core host
// without the race detector.
const referenceCalibration = hostspeed.Reference

// maxHostSlowness bounds the scale, so a pathological measurement cannot
// turn short locks into long ones.
const maxHostSlowness = 8

// measureHostSlowness is how many times slower than the reference host this
// one runs the provider's kind of work now: at least 1, at most
// maxHostSlowness. The fastest of three measurements is kept, so one
// preemption does not count.
func measureHostSlowness() float64 {
	return min(max(float64(hostspeed.Calibrate())/float64(referenceCalibration), 1), maxHostSlowness)
}

const (
	// hostWatchEvery is how often a hostWatch samples the host: the
	// faster of two calibrations (12 ms of work each on the reference
	// host, so one pause of the process does not read as a slow host)
	// every two seconds.
	hostWatchEvery = 2 * time.Second
	// maxWatchedSlowness bounds a sample, so that however slow the host
	// reads, a bound scaled by it stays finite: a wait that never learns
	// of an end is still reported.
	maxWatchedSlowness = 4 * maxHostSlowness
)

// hostWatch samples the host's slowness through a run (the same
// calibration as measureHostSlowness, once per sample, against the same
// reference), so a check can ask how slow the host was over a span.
type hostWatch struct {
	once    sync.Once
	mu      sync.Mutex
	samples []hostSample // in the order taken
}

// hostSample is one measurement, and when it ended.
type hostSample struct {
	at       time.Time
	slowness float64
}

// start samples the host every hostWatchEvery until ctx ends (once, however
// often called); wg counts the sampling goroutine.
func (h *hostWatch) start(ctx context.Context, wg *sync.WaitGroup) {
	h.once.Do(func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(hostWatchEvery)
			defer tick.Stop()
			for {
				took := min(hostspeed.CalibrateOnce(5), hostspeed.CalibrateOnce(5))
				h.record(time.Now(), float64(took)/float64(referenceCalibration))
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	})
}

// record adds a sample of slowness s ending at at, within 1 and
// maxWatchedSlowness.
func (h *hostWatch) record(at time.Time, s float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, hostSample{at: at, slowness: min(max(s, 1), maxWatchedSlowness)})
}

// slowestBetween is the most the host was measured slow while from..to
// lasted: the samples taken in it and the last one before it (which was
// still the host's state when from came); 0 when there is none.
func (h *hostWatch) slowestBetween(from, to time.Time) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	slowest := 0.0
	for i, s := range h.samples {
		inSpan := !s.at.Before(from) && !s.at.After(to)
		lastBefore := s.at.Before(from) && (i+1 == len(h.samples) || !h.samples[i+1].at.Before(from))
		if inSpan || lastBefore {
			slowest = max(slowest, s.slowness)
		}
	}
	return slowest
}

// slowerThanMeasured is what a bound's host part d, scaled by the slowness
// the run measured at its start (hostScaled), lacks for from..to: d times
// how much slower the host was sampled then (0 when it was not).
func slowerThanMeasured(cfg Config, h *hostWatch, from, to time.Time, d time.Duration) time.Duration {
	extra := h.slowestBetween(from, to) - max(cfg.HostSlowness, 1)
	if extra <= 0 {
		return 0
	}
	return time.Duration(float64(d) * extra)
}

// slowest is the most the host was measured slow in the whole run (0: no
// sample).
func (h *hostWatch) slowest() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	slowest := 0.0
	for _, s := range h.samples {
		slowest = max(slowest, s.slowness)
	}
	return slowest
}
