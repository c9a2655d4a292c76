package cdb

// Starting an instance id only while it is free (ExclusiveStarter): the
// start's own batch decides, as the lock document it creates can be created
// once only.
//
// A lock document exists from a start's enqueue until the instance is
// deleted (or a turn consumes the start without naming the instance), and
// records the id of the start message that created it. A fetch also creates
// one, nameless and recording no start, for messages to an id never
// started. So when the batch meets a lock document, one read of it from
// the primary tells the cases apart:
//   - marked by a deletion (or an ancestor marked): the id is about to be
//     free; the start is refused as retryable;
//   - recording this start's message: the batch applied on an earlier send
//     whose answer was lost; the start succeeds;
//   - named: the instance exists;
//   - recording another start's message: that start is queued while the
//     message is (one more read), and the id is taken;
//   - recording no start, or one no longer queued: the id is free, and the
//     start claims the document (If-Match on the version read) in one batch
//     with its message, so of two starts racing for it one wins. While a
//     fetch holds the document's lock it waits a moment first: the claim
//     would keep the fetch from giving its messages back.

import (
	"context"
	"fmt"
)

var _ ExclusiveStarter = (*CosmosProvider)(nil)

// EnqueueStartIfAbsent is ExclusiveStarter: the start's batch with its
// lock document, refused with ErrInstanceExists when the document is
// another start's or a named instance's. A start that a waiting
// orchestration fetch of this provider takes is written by its first
// turn's commit instead, and the call returns once that commit did.
func (p *CosmosProvider) EnqueueStartIfAbsent(ctx context.Context, start StartOrchestrationMessage) error {
	const op = "EnqueueStartIfAbsent"
	if err := validateInstanceID(op, start.Instance); err != nil {
		return err
	}
	w, err := p.newStartWrite(start, 0)
	if err != nil {
		return refuse(op, "", err)
	}
	if done, err := p.startWithFirstTurn(ctx, w, 0); done {
		return asOperation(op, err)
	}
	taken, unknown, err := p.createStart(ctx, w)
	if err == nil && taken {
		err = p.startBesideLockDoc(ctx, op, w, unknown)
	}
	if err != nil {
		return asOperation(op, err)
	}
	p.announceStart(w)
	return nil
}

// startBesideLockDoc decides a start whose batch met the instance's lock
// document (see the top of this file); unknown says an earlier send's
// outcome was unknown.
func (p *CosmosProvider) startBesideLockDoc(ctx context.Context, op string, w startWrite, unknown bool) error {
	for round := 0; round < maxSettleRounds; round++ {
		inst, err := p.readInstanceLatest(ctx, instancePartitionKey(w.instance))
		if err != nil {
			return err
		}
		if inst == nil { // a deletion swept the partition since: the id is free
			taken, sent, err := p.createStart(ctx, w)
			unknown = unknown || sent
			if err != nil || !taken {
				return err
			}
			continue
		}
		if inst.retainedPast(p.nowMs()) { // the old life's retention ended: clear it, then start
			if err := p.clearRetained(ctx, inst); err != nil {
				return asOperation(op, err)
			}
			continue
		}
		if marked, err := p.deletionReaches(ctx, inst); err != nil {
			return err
		} else if marked {
			return p.refuseWhileDeleted(ctx, op, w, unknown)
		}
		switch queued, err := p.startQueued(ctx, w, inst); {
		case err != nil:
			return err
		case inst.StartMsg == w.id:
			return nil // this start's own batch, whose answer was lost
		case inst.exists():
			return refuse(op, fmt.Sprintf("instance %q exists", w.instance), ErrInstanceExists)
		case queued:
			return refuse(op, fmt.Sprintf("a start of instance %q is queued", w.instance), ErrInstanceExists)
		}
		if round < maxSettleRounds-1 && lockHeld(inst, p.nowMs()) {
			// A fetch holds the document, for messages that came before any
			// start, for a moment only: a claim now would keep it from
			// giving them back until its lock expires.
			if err := waitToResend(ctx, round); err != nil {
				return err
			}
			continue
		}
		claimed, sent, err := p.claimLockDoc(ctx, w, inst)
		unknown = unknown || sent
		if err != nil || claimed {
			return err
		}
	}
	return transient(op, fmt.Sprintf("instance %q: its instance document kept changing while the start looked at it", w.instance), nil)
}

// refuseWhileDeleted refuses a start into a partition being deleted, as
// retryable, taking its message back in case an earlier send wrote it.
func (p *CosmosProvider) refuseWhileDeleted(ctx context.Context, op string, w startWrite, unknown bool) error {
	if unknown {
		if err := p.takeBack(ctx, w.instance, w.msg); err != nil {
			return err
		}
	}
	return transient(op, fmt.Sprintf("instance %q is being deleted; start it again once the deletion is done", w.instance), nil)
}

// startQueued says the start a nameless lock document records, not w's,
// is still queued: its message is there and no turn consumed it. It reads
// nothing for a named document, one recording w or none.
func (p *CosmosProvider) startQueued(ctx context.Context, w startWrite, inst *instanceDoc) (bool, error) {
	if inst.StartMsg == w.id {
		return false, nil
	}
	queued, err := p.readQueuedStart(ctx, inst)
	return queued != nil, err
}

// lockHeld says a fetch holds the instance document's lock at now (ms).
func lockHeld(inst *instanceDoc, now int64) bool {
	return inst.LockToken != "" && inst.LockedUntil > now
}

// claimLockDoc makes a lock document that records no queued start w's, in
// one batch with w's message, conditioned on the version read; false when
// the document changed since.
func (p *CosmosProvider) claimLockDoc(ctx context.Context, w startWrite, inst *instanceDoc) (claimed, unknown bool, err error) {
	var ops PatchOperations
	ops.AppendSet("/startMsg", w.id)
	if w.parent != nil && inst.Parent == nil {
		ops.AppendSet("/parent", *w.parent)
	}
	if !w.trace.IsZero() {
		ops.AppendSet("/trace", w.trace)
	}
	etag := inst.ETag
	b := p.container.NewTransactionalBatch(partitionKey(w.instance))
	b.PatchItem(instanceDocID, ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	b.CreateItem(w.msg, nil)
	resp, unknown, err := p.executeBatchOnce(ctx, b)
	switch {
	case err != nil:
		return false, unknown, err
	case resp.Success:
		return true, unknown, nil
	}
	if i, opErr := resp.FailedOperation(); i == 0 && missingOrChanged(opErr) {
		return false, unknown, nil
	}
	return false, unknown, batchError(resp)
}
