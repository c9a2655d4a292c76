package sim

import (
	"sync"
	"sync/atomic"
	"time"
)

// simClock is the time of the simulated world: the account's clock, every
// client's signing clock and every node's clock (plus the node's own skew)
// read it. It runs with the wall clock and can jump ahead: a jump of
// minutes is minutes in which every process stood still (a cluster-wide
// outage, or the one node that could have acted being down), so locks,
// leases and outbox ages all see the minutes pass while the run waits
// milliseconds. The harness's own waits (progress.go) and the activity
// records stay on the wall clock; the jumps are recorded so the checks
// that compare wall times (session affinity) leave them out.
type simClock struct {
	offset atomic.Int64 // nanoseconds ahead of the wall clock

	mu    sync.Mutex
	jumps []time.Time // wall times of the jumps
}

func (c *simClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// jump moves the simulated world's time ahead by d.
func (c *simClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset.Add(int64(d))
	c.jumps = append(c.jumps, time.Now())
}

// jumpedBetween says a jump happened between the wall times from and to.
func (c *simClock) jumpedBetween(from, to time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jumps {
		if !j.Before(from) && !j.After(to) {
			return true
		}
	}
	return false
}
