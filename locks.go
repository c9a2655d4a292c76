package cdb

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Lock tokens name a lock this process took. The lock itself lives in Cosmos
// DB (the instance document's or the work item's lockedUntil, taken with a
// conditional write); the table keeps what a later ack, renew or abandon
// needs to write it back conditionally: the document's ETag and the items
// the lock covers.

// newLockToken returns a unique, unguessable token: prefix and a random
// (version 4) UUID. It also names the random ids of messages, deletion
// intents and the like, whose uniqueness is all that matters.
func newLockToken(prefix string) string {
	return prefix + uuid.NewString()
}

// orchestrationLock is an instance lock this process holds.
type orchestrationLock struct {
	mu          sync.Mutex // one ack, renew or abandon at a time
	token       string
	pk          string
	timeout     time.Duration // the lock timeout it was taken with
	inst        instanceDoc   // as last written by us; its ETag guards the next write
	lockedUntil atomic.Int64
	messages    []queueDoc // the locked batch
	// queriedAt (ms) is as of when a query of this process last read the
	// instance's visible messages while it held the instance: a chained
	// turn that comes within a poll interval of it need not read them
	// again (handover_chains.go).
	queriedAt int64
	// start is set while the lock is an unwritten start's
	// (handover_starts.go): nothing of it is stored until its commit.
	start *firstTurnStart
	state *instanceState
	done  bool // acked or abandoned
	lost  bool // counted as lost (orchestrationLockLost)
	// unparked says the fetch brought back every message parked in the
	// partition (parking.go), so the ack's instance document drops
	// parkedUntil.
	unparked bool
	// strays are the ids of the messages of the batch sent to another life
	// (lives.go): consumed with the others, never handed to the runtime.
	strays map[string]bool
}

var _ LockRemainingReporter = (*CosmosProvider)(nil)

// handOutSlack is how much of its timeout a lock may have used up and
// still be handed to the runtime without a renewal first (R19).
const handOutSlack = time.Second

// leftToHandOut says a lock with left of its timeout may go to the runtime
// as it is. A runtime that asks what is left (LockRemainingReporter)
// renews from that; one that does not renews on its own schedule, counted
// from its fetch as if the lock were new: duroxide's renews a lock of 15 s
// or more its buffer before the timeout (2 s for orchestrations, 5 s for
// work items, by default), a shorter one at about half. So a lock goes out
// with at most handOutSlack (a quarter, for a short one) of its timeout
// used, and is renewed first otherwise: the runtime's first renewal then
// still lands with time to spare. (A lock locked ahead, in an earlier
// commit, would otherwise go out with whatever its wait left, and another
// process could take it before its holder's first renewal.)
func leftToHandOut(left, timeout time.Duration) bool {
	return left >= timeout-min(timeout/4, handOutSlack)
}

// WorkItemLockRemaining implements LockRemainingReporter: how long the
// worker lock token has left by this process's clock.
func (p *CosmosProvider) WorkItemLockRemaining(token string) (time.Duration, bool) {
	lock, ok := p.workLocks.Get(token)
	if !ok {
		return 0, false
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	return max(time.Duration(lock.lockedUntil-p.nowMs())*time.Millisecond, 0), true
}

// OrchestrationLockRemaining implements LockRemainingReporter: how long
// the orchestration lock token has left by this process's clock.
func (p *CosmosProvider) OrchestrationLockRemaining(token string) (time.Duration, bool) {
	lock, ok := p.orchLocks.Get(token)
	if !ok {
		return 0, false
	}
	return max(time.Duration(lock.lockedUntil.Load()-p.nowMs())*time.Millisecond, 0), true
}

// endLock ends an orchestration lock this process holds: acked, given
// back or lost, its token is no longer honoured here. Called with lock.mu
// held, or before the lock was handed out.
func (p *CosmosProvider) endLock(lock *orchestrationLock) {
	lock.done = true
	p.orchLocks.Remove(lock.token)
}

// planningView copies what planning a commit reads, under the mutex, so
// renewals may go on while the commit is planned from the copy.
func (l *orchestrationLock) planningView() *orchestrationLock {
	v := &orchestrationLock{token: l.token, pk: l.pk, timeout: l.timeout, inst: l.inst, messages: l.messages, queriedAt: l.queriedAt, start: l.start, state: l.state, unparked: l.unparked, strays: l.strays}
	v.lockedUntil.Store(l.lockedUntil.Load())
	return v
}

// workLock is a worker-queue item this process holds.
type workLock struct {
	mu          sync.Mutex
	token       string
	pk          string
	doc         queueDoc // as last written by us; its ETag guards the next write
	lockedUntil int64
	done        bool
	activity    activityKey // the item's activity, which never changes
	// fetchedBy and fetchTimeout are the filter and lock timeout of the
	// fetch that took the item (zero for one not handed out): the
	// dispatcher that acks or abandons it fetches again next (handover.go).
	fetchedBy    TagFilter
	fetchTimeout time.Duration
}

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

// unlockOps are the PATCH operations that clear a document's lock.
func unlockOps() PatchOperations {
	var ops PatchOperations
	ops.AppendSet("/lockToken", "")
	ops.AppendSet("/lockedUntil", 0)
	return ops
}
