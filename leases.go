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
	lanes *laneSet
}

// NewInMemoryLeaseProvider returns an empty lease provider.
func NewInMemoryLeaseProvider() *InMemoryLeaseProvider {
	return &InMemoryLeaseProvider{lanes: newLaneSet()}
}

// Acquire takes the lowest free lane of key.
func (l *InMemoryLeaseProvider) Acquire(key string) ([]int, func()) {
	lane, active, release := l.lanes.take(key)
	if active <= 1 {
		return nil, release
	}
	return laneSlots(lane, active), release
}

// laneSet tracks the lanes in use per lease key: the fetches running at
// once, each in the lowest free lane.
type laneSet struct {
	mu    sync.Mutex
	lanes map[string][]bool
}

func newLaneSet() *laneSet { return &laneSet{lanes: map[string][]bool{}} }

// take claims the lowest free lane of key, and says how many lanes are in
// use with it; release frees it.
func (s *laneSet) take(key string) (lane, active int, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lanes := s.lanes[key]
	lane = len(lanes)
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
	s.lanes[key] = lanes
	for _, used := range lanes {
		if used {
			active++
		}
	}
	return lane, active, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lanes[key][lane] = false
	}
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
