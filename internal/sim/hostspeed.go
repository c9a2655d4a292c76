package sim

import (
	"encoding/json"
	"sync"
	"time"
)

// Lock timeouts that are "short" must be short relative to the host: the
// race detector or a loaded machine makes every turn and renewal several
// times slower, and a lock drawn for an idle host then expires under work
// that is healthy, each expiry counting an attempt, until an instance is
// poisoned by the host's speed rather than by a defect. A run measures its
// host once and scales the short locks it draws by that factor.

// referenceCalibration is what calibrate takes on an idle 2-core host
// without the race detector.
const referenceCalibration = 12 * time.Millisecond

// maxHostSlowness bounds the scale, so a pathological measurement cannot
// turn short locks into long ones.
const maxHostSlowness = 8

// measureHostSlowness is how many times slower than the reference host this
// one runs the provider's kind of work now: at least 1, at most
// maxHostSlowness. The fastest of three measurements is kept, so one
// preemption does not count.
func measureHostSlowness() float64 {
	best := time.Duration(1<<62 - 1)
	for range 3 {
		best = min(best, calibrate())
	}
	return min(max(float64(best)/float64(referenceCalibration), 1), maxHostSlowness)
}

// calibrate does what a provider does most, JSON documents and goroutine
// handoffs, a fixed number of times, and says how long it took.
func calibrate() time.Duration {
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
	for range 5 {
		b, _ := json.Marshal(doc)
		handoff <- b
	}
	close(handoff)
	wg.Wait()
	return time.Since(began)
}
