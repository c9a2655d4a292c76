package cdb

// Renewing an instance lock: one conditioned patch of the instance
// document, which never shortens a lock and, when its answer is lost, is
// read back.

import (
	"context"
	"encoding/json"
	"time"
)

// RenewOrchestrationItemLock extends a lock that is still valid: one batch
// that PATCHes the instance document (If-Match), not the messages
// (renewalBatch). A renewal whose outcome is unknown (a lost response, a
// timeout), or that meets an instance ETag it did not expect (a renewal of
// ours whose response was lost), is resolved by reading the instance
// document back: unchanged but for our renewal, with our token, the lock is
// ours and its ETag is adopted; a transient failure is never read as a lost
// lock.
func (p *CosmosProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "RenewOrchestrationItemLock"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	return p.renewHeld(p.tel.withOrchestrationName(ctx, lock.inst.Name), op, lock, extendFor)
}

// renewHeld renews a lock whose mutex the caller holds.
func (p *CosmosProvider) renewHeld(ctx context.Context, op string, lock *orchestrationLock, extendFor time.Duration) error {
	if p.nowMs() >= lock.lockedUntil.Load() {
		p.orchestrationLockLost(ctx, lock)
		return refuse(op, "lock expired or released", ErrInvalidLockToken)
	}
	return p.extendLock(ctx, op, lock, extendFor)
}

// extendLock writes a new expiry for a lock whose mutex the caller holds.
// The write is conditioned on the instance document's ETag, so it succeeds
// only if no other dispatcher locked the instance since, whatever the
// local clock says about the expiry.
func (p *CosmosProvider) extendLock(ctx context.Context, op string, lock *orchestrationLock, extendFor time.Duration) error {
	until := renewedUntil(p.nowMs(), extendFor, lock.lockedUntil.Load())
	if lock.start != nil {
		lock.lockedUntil.Store(until) // an unwritten start: nothing stored to renew
		return nil
	}
	for range maxRenewalTries {
		resp, err := p.container.ExecuteTransactionalBatch(ctx, renewalBatch(p.container, lock, until), nil)
		switch {
		case err == nil && resp.Success:
			lock.inst.ETag = resp.OperationResults[0].ETag
			lock.inst.LockedUntil = until
			lock.lockedUntil.Store(until)
			return nil
		case err != nil && !IsOutcomeUnknown(err):
			return asOperation(op, err)
		case err == nil && !instanceETagFailed(resp):
			p.orchestrationLockLost(ctx, lock)
			p.endLock(lock)
			return refuse(op, "the lock was lost", ErrInvalidLockToken)
		}
		applied, err := p.readBackInstance(ctx, op, lock, until)
		if err != nil {
			return err
		}
		if applied {
			return nil
		}
	}
	return transient(op, "the lock renewal did not apply; try again", nil)
}

// renewedUntil is a renewal's new expiry: extendFor from now, but never
// before the expiry the lock has, so a renewal asked for less than is left
// only lengthens or keeps a live lock, never shortens it (duroxide-pg
// 0.1.38's rule; a short renewal would hand the work to another dispatcher
// while its holder still counts on the time it was given).
func renewedUntil(nowMs int64, extendFor time.Duration, lockedUntil int64) int64 {
	return max(nowMs+extendFor.Milliseconds(), lockedUntil)
}

// renewalBatch extends the instance lock. It writes the instance document
// only: the locked messages keep the expiry their fetch gave them, because
// the instance lock alone keeps other dispatchers out (a fetch takes
// messages only in the batch that takes the instance lock; a candidate
// whose message lock lapsed meets a held instance and is left out until
// its lock ends). Rewriting each message on every renewal cost a write of
// the message's size: a start or continue-as-new input near 1 MB made every
// renewal a megabyte's write, slow enough on a loaded machine (or throttled
// enough on a real account) to outlast the lock it renewed.
func renewalBatch(cc *ContainerClient, lock *orchestrationLock, until int64) *TransactionalBatch {
	b := cc.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	var ops PatchOperations
	ops.AppendSet("/lockedUntil", until)
	etag := lock.inst.ETag
	b.PatchItem(instanceDocID, ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	return b
}

// instanceETagFailed says a renewal batch failed on the instance document's
// If-Match alone.
func instanceETagFailed(resp TransactionalBatchResponse) bool {
	idx, err := resp.FailedOperation()
	return idx == 0 && IsPreconditionFailed(err)
}

// readBackInstance reads the instance document after a renewal of ours
// with an unknown outcome. The lock is ours when the document is the one we
// hold but for its lock expiry: our token, no deletion mark, nothing else
// changed (so adopting its ETag lets no other writer's change be
// overwritten). Then its ETag and expiry are adopted, and applied reports
// whether the expiry is the one we wrote. When the read fails the error is
// retryable: nothing says the lock is gone.
func (p *CosmosProvider) readBackInstance(ctx context.Context, op string, lock *orchestrationLock, until int64) (applied bool, err error) {
	lost := func() error {
		p.orchestrationLockLost(ctx, lock)
		p.endLock(lock)
		return refuse(op, "the lock was lost", ErrInvalidLockToken)
	}
	resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), instanceDocID)
	if IsNotFound(err) {
		return false, lost()
	}
	if err != nil {
		return false, transient(op, "could not tell whether the lock renewal applied", err)
	}
	var doc instanceDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return false, transient(op, "could not read the instance back", err)
	}
	if doc.LockedUntil <= p.nowMs() || !sameButLockExpiry(doc, lock.inst) {
		return false, lost()
	}
	lock.inst.ETag = resp.ETag
	lock.inst.LockedUntil = doc.LockedUntil
	lock.lockedUntil.Store(doc.LockedUntil)
	return doc.LockedUntil == until, nil
}

// sameButLockExpiry compares two instance documents as stored, leaving out
// the lock expiry and the ETag.
func sameButLockExpiry(a, b instanceDoc) bool {
	a.LockedUntil, a.ETag = 0, ""
	b.LockedUntil, b.ETag = 0, ""
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
