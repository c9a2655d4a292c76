package cdb

import "sync"

// LeaseProvider spreads the dispatch slots over the dispatchers that fetch
// concurrently, so they query disjoint slots and rarely race for the same
// item. Correctness never depends on it: every claim is a conditional
// write, so two dispatchers in the same slot cost a retry, not a
// duplicate. A Cosmos DB-backed implementation can coordinate
// several processes the same way.
type LeaseProvider interface {
	// Acquire returns the slots the calling fetch should query, nil meaning
	// all of them, and a release function to call when the fetch ends. key
	// names the queue and the fetch's filters ("worker/nosession/default",
	// say): fetches with the same key share the slots.
	Acquire(key string) (slots []int, release func())
}

// InMemoryLeaseProvider shares the slots among the fetches of this process
// that run at the same time: with n concurrent fetches of a queue, the one
// in lane i gets the slots s with s mod n = i. A lone fetch gets them all.
type InMemoryLeaseProvider struct {
	mu    sync.Mutex
	lanes map[string][]bool // queue → lane in use
}

// NewInMemoryLeaseProvider returns an empty lease provider.
func NewInMemoryLeaseProvider() *InMemoryLeaseProvider {
	return &InMemoryLeaseProvider{lanes: map[string][]bool{}}
}

// Acquire takes the lowest free lane of queue.
func (l *InMemoryLeaseProvider) Acquire(queue string) ([]int, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lanes := l.lanes[queue]
	lane := len(lanes)
	for i, used := range lanes {
		if !used {
			lane = i
			break
		}
	}
	if lane == len(lanes) {
		lanes = append(lanes, true)
	} else {
		lanes[lane] = true
	}
	l.lanes[queue] = lanes
	active := 0
	for _, used := range lanes {
		if used {
			active++
		}
	}
	release := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lanes[queue][lane] = false
	}
	if active <= 1 {
		return nil, release
	}
	return laneSlots(lane, active), release
}

// laneSlots are the slots of lane among n lanes (lane < n).
func laneSlots(lane, n int) []int {
	if lane >= n {
		lane %= n
	}
	slots := make([]int, 0, dispatchSlots/n+1)
	for s := lane; s < dispatchSlots; s += n {
		slots = append(slots, s)
	}
	return slots
}
