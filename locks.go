package cdb

// What both kinds of lock share: their tokens, how much of a lock may be
// used before it is handed to the runtime (H3), and the operations that
// clear one. The orchestration lock's life is orchestration_lock.go's, the
// worker lock's workers.go's; the tables of the locks this process holds
// are internal/handoff's LockTable.

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// newLockToken returns a unique, unguessable token: prefix and a random
// (version 4) UUID. It also names the random ids of messages, deletion
// intents and the like, whose uniqueness is all that matters.
func newLockToken(prefix string) string {
	return prefix + uuid.NewString()
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

// keepingLockUntil marks the requests made with ctx as keeping a lock
// that expires at until() (ms, service time): each of their attempts gets
// at most half the time the lock has left (attemptWithinLock), so that one
// silent connection does not outlast the lock (the runtime renews a lock
// only seconds before it expires).
func (p *CosmosProvider) keepingLockUntil(ctx context.Context, until func() int64) context.Context {
	return keepingLock(ctx, func() time.Duration { return p.leftOn(until()) })
}

// keepingWorkLock is keepingLockUntil for a worker lock whose mutex the
// caller holds while it sends.
func (p *CosmosProvider) keepingWorkLock(ctx context.Context, lock *workLock) context.Context {
	return p.keepingLockUntil(ctx, func() int64 { return lock.lockedUntil })
}

// keepingOrchestrationLock is keepingLockUntil for an orchestration lock.
func (p *CosmosProvider) keepingOrchestrationLock(ctx context.Context, lock *orchestrationLock) context.Context {
	return p.keepingLockUntil(ctx, lock.lockedUntil.Load)
}

// unlockOps are the PATCH operations that clear a document's lock.
func unlockOps() PatchOperations {
	var ops PatchOperations
	ops.AppendSet("/lockToken", "")
	ops.AppendSet("/lockedUntil", 0)
	return ops
}
