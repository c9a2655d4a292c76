package cdb

// The state cache: what a process keeps of an instance after its own
// commit, so that its next turn of the instance needs no load.

import "sync"

// instanceState is what a turn needs of an instance besides its messages:
// the current execution's history and execution document. A process keeps
// it after its own ack, so its next fetch of the instance skips the load (a
// request) when the instance's lastAck shows nobody else committed since.
type instanceState struct {
	// commit is the lastAck of the instance document this state belongs
	// to: a lock token, unique per commit. A counter would not do: after a
	// delete and a restart of the same id it counts from the start again.
	commit       string
	exec         uint64
	history      []Event
	historyError *string
	eventIDs     map[uint64]bool // of exec, including undecodable documents
	execDoc      *executionDoc
	kv           kvState
	// pendingOutboxes are the instance's outboxes the load found not yet
	// delivered: the next outbox of the instance is delivered after them.
	pendingOutboxes []outboxRef
}

// historyCache keeps instanceStates by partition key, bounded.
type historyCache struct {
	mu  *sync.Mutex
	max int
	m   map[string]*instanceState
}

func newHistoryCache(max int) historyCache {
	return historyCache{mu: &sync.Mutex{}, max: max, m: map[string]*instanceState{}}
}

// get returns the state cached for pk when it belongs to the commit the
// instance document names; an instance no ack has committed yet never hits.
func (c historyCache) get(pk, commit string) (*instanceState, bool) {
	if commit == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[pk]
	if !ok || s.commit != commit {
		return nil, false
	}
	return s, true
}

func (c historyCache) put(pk string, s *instanceState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[pk]; !ok && len(c.m) >= c.max {
		for k := range c.m { // evict an arbitrary entry; any one is as good
			delete(c.m, k)
			break
		}
	}
	c.m[pk] = s
}

func (c historyCache) drop(pk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, pk)
}
