// Package hostspeed says how slow this host runs the provider's kind of work
// now, compared with the host the tests' timings were chosen on, so that a
// test's lock timeouts, delays and deadlines grow with the host's slowness.
// A slow host (the race detector, a loaded 2-core machine, several test
// binaries and the npm Cosmos DB server at once) makes a test slower, never
// red.
//
// It is for tests and the simulation only; the library never imports it.
package hostspeed

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"time"
)

// Reference is what Calibrate takes on an idle 2-core host without the race
// detector (the simulation's reference: it scales its short locks by
// Calibrate()/Reference).
const Reference = 12 * time.Millisecond

// Max bounds Slowness, so that a pathological measurement cannot turn a
// test's short lock into one that outlives the test binary's timeout.
const Max = 10

// EnvSlowness overrides the measurement: a test run with
// CDB_TEST_SLOWNESS=3 scales its timings by 3 (1 keeps them as written).
const EnvSlowness = "CDB_TEST_SLOWNESS"

// refreshEvery is how often Slowness measures again, in the background,
// while a test binary keeps asking: the load of a shared machine changes
// over a run of several minutes.
const refreshEvery = 10 * time.Second

// Calibrate does what a provider does most, JSON documents and goroutine
// handoffs, a fixed amount, three times, and says how long the fastest
// took: one preemption does not count.
func Calibrate() time.Duration {
	best := time.Duration(1<<62 - 1)
	for range 3 {
		best = min(best, CalibrateOnce(5))
	}
	return best
}

// CalibrateOnce does rounds rounds of the calibration's work (Calibrate
// does 5, three times) and says how long they took.
func CalibrateOnce(rounds int) time.Duration {
	type item struct {
		ID      string            `json:"id"`
		Seq     int64             `json:"seq"`
		Payload string            `json:"payload"`
		Tags    map[string]string `json:"tags"`
	}
	doc := make([]item, 64)
	for i := range doc {
		doc[i] = item{ID: "instance-" + string(rune('a'+i%26)), Seq: int64(i), Payload: string(make([]byte, 512)),
			Tags: map[string]string{"k": "v", "i": "x"}}
	}
	began := time.Now()
	var wg sync.WaitGroup
	handoff := make(chan []byte)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := range handoff {
			var back []item
			_ = json.Unmarshal(b, &back)
		}
	}()
	for range rounds {
		b, _ := json.Marshal(doc)
		handoff <- b
	}
	close(handoff)
	wg.Wait()
	return time.Since(began)
}

// tunedOn is what Calibrate takes where the tests' timings were chosen: an
// idle 2-core host, under the race detector when this binary is built with
// it (make test's -race; about 75 ms, against 6-12 ms without it).
func tunedOn() time.Duration {
	if raceEnabled {
		return 75 * time.Millisecond
	}
	return Reference
}

// measure is this host's slowness now, against tunedOn: 1 to Max.
func measure() float64 {
	return min(max(float64(Calibrate())/float64(tunedOn()), 1), Max)
}

var state struct {
	mu        sync.Mutex
	value     float64   // the most measured so far in this process
	measured  time.Time // when the last measurement began
	measuring bool
}

// Slowness is how many times slower than the host the tests were tuned on
// (idle, built the same way) this host runs now: 1 to Max. The first call
// measures (well under a second, a few seconds on a loaded host); later
// calls answer at once and, every refreshEvery, measure again in the
// background. The value only grows within a process: a host that was slow
// once during a run may be so again, and a test's timings must not shrink
// under it. CDB_TEST_SLOWNESS, when set, is the answer instead.
func Slowness() float64 {
	if s, ok := fromEnv(); ok {
		return s
	}
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.value == 0 {
		state.measured = time.Now()
		state.value = measure()
		return state.value
	}
	if !state.measuring && time.Since(state.measured) >= refreshEvery {
		state.measuring, state.measured = true, time.Now()
		go func() {
			s := measure()
			state.mu.Lock()
			defer state.mu.Unlock()
			state.value, state.measuring = max(state.value, s), false
		}()
	}
	return state.value
}

func fromEnv() (float64, bool) {
	v := os.Getenv(EnvSlowness)
	if v == "" {
		return 0, false
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 {
		return 0, false
	}
	return min(max(s, 1), Max), true
}

// Scale is d on the host the tests were tuned on, longer in proportion on a
// slower one: d × Slowness().
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slowness())
}
