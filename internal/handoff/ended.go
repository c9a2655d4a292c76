package handoff

import (
	"math"
	"sync"
	"time"
)

// Ended remembers, for a while, what this process's own writes ended and
// when: a partition it deleted, an activity it cancelled. An item locked
// before such a write and made ready after it (its commit's answer came
// late) is then never handed out without a request (H4): removing the
// ready items when the write is sent cannot reach one that is not ready
// yet. The zero value is not ready: use NewEnded.
type Ended struct {
	mu   sync.Mutex
	at   map[string]int64 // key → when it ended (ms); math.MaxInt64 while it is ending
	keep time.Duration    // how long an entry is kept: longer than any lock
}

// NewEnded keeps each entry keep long.
func NewEnded(keep time.Duration) *Ended {
	return &Ended{at: map[string]int64{}, keep: keep}
}

// Ending notes that key is being ended now: until Ended says when it ended,
// everything of it counts as ended.
func (e *Ended) Ending(key string) { e.note(key, math.MaxInt64, 0) }

// NotEnded withdraws Ending: the write that was to end key did not.
func (e *Ended) NotEnded(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at[key] == math.MaxInt64 {
		delete(e.at, key)
	}
}

// Ended notes that key ended at atMs (ms), and forgets the entries older
// than keep.
func (e *Ended) Ended(key string, atMs int64) { e.note(key, atMs, atMs) }

func (e *Ended) note(key string, atMs, nowMs int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if nowMs > 0 {
		for k, at := range e.at {
			if at < nowMs-e.keep.Milliseconds() {
				delete(e.at, k)
			}
		}
	}
	e.at[key] = atMs
}

// Since says key was ended (or is being ended) at or after lockedAt (ms):
// what was locked at lockedAt belongs to what ended.
func (e *Ended) Since(key string, lockedAt int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.at[key]
	return ok && at >= lockedAt
}
