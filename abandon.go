package cdb

// Abandoning an orchestration item: the lock ends without a commit, and
// only the messages the fetch locked are delayed or given their attempt back.

import (
	"context"
	"slices"
	"strings"
	"time"
)

// AbandonOrchestrationItem releases the lock without committing; the
// messages stay queued, visible after delay.
func (p *CosmosProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "AbandonOrchestrationItem"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	ctx = p.tel.withOrchestrationName(ctx, lock.inst.Name)
	if err := p.writeAbandon(ctx, lock, delay, ignoreAttempt); err != nil {
		return asOperation(op, err)
	}
	p.releasedWithoutCommit(lock, delay)
	return nil
}

// releasedWithoutCommit ends a lock whose batch was given back, and tells
// the pollers when its messages are due.
func (p *CosmosProvider) releasedWithoutCommit(lock *orchestrationLock, delay time.Duration) {
	p.endLock(lock)
	p.announceDeferred(lock.pk)
	p.announceMessage(lock.pk, p.now().Add(max(delay, 0)))
}

// writeAbandon is the abandon batch: free the instance, and make the locked
// messages visible again (after delay), giving back an attempt if asked.
//
// The delay and the attempt undo touch only the messages the fetch locked
// (duroxide 0.1.32): the instance is free at once, and a message that
// arrived meanwhile stays visible for the next fetch. Their order relative
// to the delayed messages is given up, as duroxide gives it up; the runtime
// delays an abandon only where it must (ARCHITECTURE.md, Order).
func (p *CosmosProvider) writeAbandon(ctx context.Context, lock *orchestrationLock, delay time.Duration, ignoreAttempt bool) error {
	return p.releaseBatch(ctx, "AbandonOrchestrationItem", lock, p.abandonOps(lock, delay), delay, ignoreAttempt)
}

// abandonOps free the instance document of an abandon; a delayed start
// is named on it (startHidden).
func (p *CosmosProvider) abandonOps(lock *orchestrationLock, delay time.Duration) PatchOperations {
	release := unlockOps()
	if delay > 0 && slices.ContainsFunc(lock.messages, isStartMessage) {
		release.AppendSet("/startHeldUntil", p.now().Add(delay).UnixMilli())
	}
	return release
}

// isStartMessage says m is a StartOrchestration.
func isStartMessage(m queueDoc) bool { return strings.HasPrefix(m.Item, startOrchestrationTag) }

// writeHold gives the lock back with the instance and its locked messages
// unavailable for delay: the provider's own hold (holdBack), which keeps
// every message of the instance, those that arrive meanwhile too, in their
// sender's order until what the batch waits for can be taken.
func (p *CosmosProvider) writeHold(ctx context.Context, lock *orchestrationLock, delay time.Duration) error {
	return p.releaseBatch(ctx, "FetchOrchestrationItem", lock, heldUntilOps(p.now(), delay), delay, true)
}

// releaseBatch frees the instance document with instanceOps (If-Match on
// the lock's ETag) and its locked messages, each unavailable for delay.
func (p *CosmosProvider) releaseBatch(ctx context.Context, op string, lock *orchestrationLock, instanceOps PatchOperations, delay time.Duration, ignoreAttempt bool) error {
	if lock.start != nil {
		p.handBackStart(lock) // nothing stored: its caller writes the start
		return nil
	}
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	etag := lock.inst.ETag
	instanceOps.AppendSet("/releasedAt", p.nowMs())
	b.PatchItem(instanceDocID, instanceOps, &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, m := range lock.messages {
		mops := heldUntilOps(p.now(), delay)
		if ignoreAttempt {
			mops.AppendSet("/attempts", max(m.Attempts, 1)-1)
		}
		b.PatchItem(m.ID, mops, nil)
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if !resp.Success {
		if idx, err := resp.FailedOperation(); idx == 0 && IsPreconditionFailed(err) {
			p.orchestrationLockLost(ctx, lock)
			return refuse(op, "the lock expired and another dispatcher took the instance", ErrInvalidLockToken)
		}
		return asOperation(op, batchError(resp))
	}
	return nil
}

// heldUntilOps release a lock, leaving the document unavailable for delay.
func heldUntilOps(now time.Time, delay time.Duration) PatchOperations {
	if delay <= 0 {
		return unlockOps()
	}
	var ops PatchOperations
	ops.AppendSet("/lockToken", "")
	ops.AppendSet("/lockedUntil", now.Add(delay).UnixMilli())
	return ops
}
