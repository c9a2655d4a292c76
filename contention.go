package cdb

// Contention: partitions this process just failed to lock, and instances
// pinned outside a filter, left out of the next looks for a while.

import (
	"sync"
	"time"
)

// contention remembers partitions whose lock this process just failed to
// take, so the next candidate queries leave them out for a moment instead of
// fighting over them.
type contention struct {
	mu    sync.Mutex
	until map[contentionKey]pause
}

// contentionKey names what was contended (a partition, or a session) within
// a scope (a capability filter, or a session owner).
type contentionKey struct{ scope, id string }

func newContention() *contention { return &contention{until: map[contentionKey]pause{}} }

const contentionBackoff = 200 * time.Millisecond

// maxSkipped bounds the partitions a candidate query leaves out.
const maxSkipped = 256

func (c *contention) note(scope, id string, now time.Time) {
	c.noteUntil(scope, id, now, now.Add(contentionBackoff))
}

// noteUntil leaves id out of scope's queries until the given time (now
// is the provider's clock's): for what a fetch learned it cannot take
// before then (a lock held by another process, a pinned version outside
// the filter). A later note never shortens an earlier one.
func (c *contention) noteUntil(scope, id string, now, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := contentionKey{scope, id}
	if until.After(c.until[key].until) {
		c.until[key] = pauseUntil(now, until, 0) // as long on the machine's clock (pacing.go)
	}
}

// active lists the ids of scope contended recently.
func (c *contention) active(scope string, now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for key, end := range c.until {
		if end.over(now) {
			delete(c.until, key)
			continue
		}
		if key.scope == scope && len(out) < maxSkipped {
			out = append(out, key.id)
		}
	}
	return out
}

// filterMisses remembers, per capability filter and instance, the fetches
// in a row that found the instance pinned to the same version outside the
// filter, so that each waits twice as long as the last before it looks
// again: such an instance changes only when a compatible dispatcher
// continues it as new, and one that no running dispatcher takes must not
// cost every other process a lock attempt and a read every few seconds for
// as long as it waits.
type filterMisses struct {
	mu sync.Mutex
	m  map[contentionKey]filterMiss
}

type filterMiss struct {
	pinned uint64
	wait   time.Duration
	at     time.Time
}

func newFilterMisses() *filterMisses { return &filterMisses{m: map[contentionKey]filterMiss{}} }

// backoff records a miss of instance id by the filter scope and says how
// long to leave the instance out: filterMissBackoff, doubled for each miss
// in a row (a look soon after the last wait ended, the same pinned
// version), at most maxFilterMissBackoff. Misses nobody followed up are
// forgotten.
func (f *filterMisses) backoff(scope, id string, pinned uint64, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := contentionKey{scope, id}
	wait := filterMissBackoff
	if last, ok := f.m[key]; ok && last.pinned == pinned && now.Sub(last.at) <= 2*last.wait {
		wait = min(2*last.wait, maxFilterMissBackoff)
	}
	for k, miss := range f.m {
		if now.Sub(miss.at) > 2*miss.wait {
			delete(f.m, k)
		}
	}
	f.m[key] = filterMiss{pinned: pinned, wait: wait, at: now}
	return wait
}
