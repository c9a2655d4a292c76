package cdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// How many items eager dispatch locks ahead for a filter's fetches: what
// they took in half of the last poll interval, at least one per dispatcher
// seen fetching at once, and nothing once they stopped.
func TestEagerDepthFollowsWhatTheFetchesTake(t *testing.T) {
	now := int64(1_000_000)
	e := newEagerReady[*workLock](false, true, time.Second, func() int64 { return now }, func(*workLock) int64 { return 0 }, func(*workLock) *string { return nil })
	tags := DefaultOnlyFilter()

	var done []func()
	for range 4 {
		done = append(done, e.fetching(tags, time.Minute)) // four dispatchers at once
	}
	assert.Equal(t, 4, reservable(e), "one per dispatcher before any history")
	for _, d := range done {
		d()
	}

	for range 56 { // with the four above, a poll interval of 60 fetch calls
		e.fetching(tags, time.Minute)()
	}
	now += time.Second.Milliseconds()
	assert.Equal(t, 30, reservable(e), "what they take in half a poll interval")

	now += 2 * time.Second.Milliseconds()
	assert.Equal(t, 0, reservable(e), "no fetch for a whole poll interval: nothing is locked ahead")

	defer e.returning(tags, time.Minute)()
	assert.Equal(t, 1, reservable(e), "a dispatcher acking what it fetched counts: it fetches next")
}

// reservable counts the reservations e grants, then gives them back.
func reservable(e *eagerReady[*workLock]) int {
	n := 0
	for {
		if _, ok := e.reserve(nil); !ok {
			break
		}
		n++
	}
	e.settle(n, nil)
	return n
}
