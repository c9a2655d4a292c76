package cdb

import (
	"cmp"
	"context"
	"time"
)

// Parking: a batch that waits for a message its partition does not hold yet
// (its instance's start) leaves the queue until that message comes or its deadline
// passes, instead of being locked and released by every look.
//
// The rule: a parked message costs the batch that parks it and the fetch
// that hands it over, never a request per poll. It is invisible to every
// candidate query (its visibleAt is its deadline, outside the range the
// queue index serves), and its instance document says parkedUntil, which
// every lock batch returns at no cost: the fetch that locks the instance
// with what the parked messages wait for brings them back into its batch,
// in their order, with the one query and batch completeBatch costs, and
// unparks them. A message that arrives meanwhile without it is parked in
// turn. At its deadline a parked message is visible again and is taken as
// it would have been without the wait.

// park releases the lock and parks the batch until deadline (ms): one
// batch, the instance's lock freed and its parkedUntil raised to the
// deadline, each message unlocked, its attempt given back, its place kept
// in heldFrom, its visibleAt moved to the deadline and its writer's claim
// on it (ownwrites.go) dropped. The returned error tells the fetch to pass
// the instance over.
func (p *CosmosProvider) park(ctx context.Context, lock *orchestrationLock, deadline int64, why string) error {
	ctx, cancel := givingBack(ctx) // a fetch whose caller went away still gives back what it locked
	defer cancel()
	release := unlockOps()
	release.AppendSet("/parkedUntil", max(lock.inst.ParkedUntil, deadline))
	resp, err := p.sendGiveBack(ctx, "FetchOrchestrationItem", lock, func(etag ETag) *TransactionalBatch {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
		b.PatchItem(instanceDocID, release, &TransactionalBatchItemOptions{IfMatch: &etag})
		for _, m := range lock.messages {
			ops := unlockOps()
			ops.AppendSet("/attempts", max(m.Attempts, 1)-1)
			ops.AppendSet("/heldFrom", placeInOrder(m))
			// Due at the deadline, and no process's own write once it is
			// back: any may take it.
			setDue(&ops, m, deadline)
			b.PatchItem(m.ID, ops, nil)
		}
		return b
	})
	if err != nil {
		return err
	}
	if !resp.Success {
		idx, opErr := resp.FailedOperation()
		if idx == 0 && IsPreconditionFailed(opErr) {
			return errContended // the lock expired and another fetch took the instance
		}
		return asOperation("FetchOrchestrationItem", opErr)
	}
	p.log.Debug("cdb: parked messages", "instance", lock.inst.Instance, "messages", len(lock.messages), "until", time.UnixMilli(deadline), "reason", why)
	return &skipError{reason: why} // invisible until then: no note needed, so what they wait for still shows
}

// placeInOrder is where a message stands among its instance's messages:
// its visibleAt, or the one it had before it was parked.
func placeInOrder(m queueDoc) int64 {
	if m.HeldFrom != 0 {
		return m.HeldFrom
	}
	return m.VisibleAt
}

// sortInOrder orders an instance's messages as its queue would have
// without parking: by place, then seq.
func sortInOrder(docs []queueDoc, items []WorkItem) {
	sortBatch(docs, items, func(a, b queueDoc) int {
		return cmp.Or(cmp.Compare(placeInOrder(a), placeInOrder(b)), cmp.Compare(a.Seq, b.Seq))
	})
}

// unparkOps put a parked message back at its place in the queue.
func unparkOps(ops *PatchOperations, m queueDoc) {
	ops.AppendSet("/visibleAt", m.HeldFrom)
	ops.AppendRemove("/heldFrom")
}

// releasesParked says a locked batch may take the instance's parked
// messages: what they wait for, a start for an instance never started, is
// in the batch, or the instance no longer waits for anything. (A batch never
// waits for a ContinueAsNew message: the fetch delivers the instance's own
// outbox first, deliverOwnOutboxes.)
func (p *CosmosProvider) releasesParked(inst *instanceDoc, items []WorkItem) bool {
	switch {
	case inst.ParkedUntil == 0:
		return false
	case !inst.exists():
		_, _, started := nameFromStart(items)
		return started
	default:
		return true
	}
}

// startDeadline is when messages for an instance never started stop
// waiting for its start: neverStartedGrace after the newest was enqueued.
func startDeadline(msgs []queueDoc) int64 {
	var newest int64
	for _, m := range msgs {
		newest = max(newest, m.Seq)
	}
	return seqMs(newest) + neverStartedGrace.Milliseconds()
}
