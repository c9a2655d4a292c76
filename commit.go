package cdb

// Committing an ack: one transactional batch, and when its answer is lost,
// the reads that tell whether it committed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// commit sends the ack's batch; nil when it applied, answered when its
// answer said so. An unknown outcome (a lost response), or a retry of the
// ack that finds the instance changed, is resolved by ackCommitted: an
// earlier try of the same ack may have committed; then what applied is
// not known to be this plan (answered false).
func (p *CosmosProvider) commit(ctx context.Context, op string, lock *orchestrationLock, plan *ackPlan) (answered bool, err error) {
	return p.commitTry(ctx, op, lock, plan, false)
}

// commitTry is one send of the ack's batch; resent says it follows a send
// that met the ETag a renewal of ours moved (sendOnHeldETag's rule, which
// here comes after ackCommitted: a try of this ack moves the ETag too).
func (p *CosmosProvider) commitTry(ctx context.Context, op string, lock *orchestrationLock, plan *ackPlan, resent bool) (answered bool, err error) {
	if plan.outbox != nil {
		// Rung whatever the answer: a try whose outcome is never told may
		// have written the outbox, which the chore leader then delivers.
		defer p.bell.ring(bellChores, p.now())
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, plan.batch, nil)
	if err != nil {
		if !IsOutcomeUnknown(err) {
			return false, asOperation(op, err)
		}
		ok, cerr := p.ackCommitted(ctx, lock, plan)
		lock.noteOutcome(plan, cerr)
		if cerr != nil || !ok {
			return false, asOperation(op, err) // not committed, or cannot tell yet: the runtime retries
		}
		return false, nil
	}
	if !resp.Success {
		idx, opErr := resp.FailedOperation()
		switch {
		case idx == 0 && (missingOrChanged(opErr) || lock.start != nil && IsConflict(opErr)):
			// An unwritten start's create meets a document of the id: an
			// earlier try of this ack created it, or the id is taken.
			ok, cerr := p.ackCommitted(ctx, lock, plan)
			lock.noteOutcome(plan, cerr)
			if cerr != nil {
				return false, transient(op, "the instance changed, and whether an earlier try of this ack committed cannot be told yet", cerr)
			}
			if ok {
				return false, nil // an earlier try, whose response was lost, committed
			}
			if !resent && lock.start == nil && IsPreconditionFailed(opErr) {
				if ours, _ := p.adoptOwnETag(ctx, op, lock); ours {
					plan.batch.setIfMatch(instanceWrite, lock.inst.ETag)
					return p.commitTry(ctx, op, lock, plan, true)
				}
			}
			p.orchestrationLockLost(ctx, lock)
			p.endLock(lock)
			return false, refuse(op, "Instance lock expired: another dispatcher took the instance, or it was deleted", ErrInvalidLockToken)
		case IsConflict(opErr):
			return false, refuse(op, "duplicate event ids or items: history is append-only", fmt.Errorf("%w: %w", ErrDuplicateEvent, opErr))
		}
		return false, asOperation(op, opErr)
	}
	lock.unconfirmed = nil
	plan.inst.ETag = resp.OperationResults[0].ETag
	for _, e := range plan.eager {
		e.lock.doc.ETag = resp.OperationResults[e.op].ETag
	}
	return true, nil
}

// noteOutcome keeps on lock the plan of a try whose outcome the reads could
// not tell (cerr), and forgets it once a try's reads tell: they tell for
// every try of the ack, whose writes are the same.
func (lock *orchestrationLock) noteOutcome(plan *ackPlan, cerr error) {
	if cerr != nil {
		lock.unconfirmed = plan
		return
	}
	lock.unconfirmed = nil
}

// outcomeReadAttempts bounds the reads that resolve an ack's outcome; a
// transient failure of one is not an answer.
const outcomeReadAttempts = 5

// ackCommitted tells whether this ack's batch committed: the instance's
// lastAck names the last commit, and, should another turn have committed
// since, the turn's history document names the ack that wrote it.
func (p *CosmosProvider) ackCommitted(ctx context.Context, lock *orchestrationLock, plan *ackPlan) (bool, error) {
	inst, err := retryTransient(ctx, func() (*instanceDoc, error) { return p.readInstanceLatest(ctx, lock.pk) })
	if err != nil {
		return false, err
	}
	if inst == nil {
		return plan.consumeOnly, nil // deleted: by this commit when it was to delete it
	}
	if inst.LastAck == lock.token {
		plan.inst.ETag, plan.found = inst.ETag, inst
		return true, nil
	}
	if plan.historyID == "" {
		return false, nil
	}
	hist, err := retryTransient(ctx, func() (*historyDoc, error) {
		resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), plan.historyID)
		if IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var d historyDoc
		if err := json.Unmarshal(resp.Value, &d); err != nil {
			return nil, fmt.Errorf("decode history document: %w", err)
		}
		return &d, nil
	})
	if err != nil {
		return false, err
	}
	return hist != nil && hist.Ack == lock.token, nil
}

// retryTransient runs read until it succeeds, fails for good, or
// outcomeReadAttempts tries failed transiently.
func retryTransient[T any](ctx context.Context, read func() (T, error)) (T, error) {
	var v T
	var err error
	for attempt := 0; attempt < outcomeReadAttempts; attempt++ {
		if v, err = read(); err == nil || !retryableError(err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, errors.Join(err, ctx.Err())
		case <-time.After(20 * time.Millisecond << attempt):
		}
	}
	return v, err
}

// afterCommit updates this process's view and announces what the commit
// wrote: ready of its worker items were made ready for this process's
// fetches, queued may be in the queue.
func (p *CosmosProvider) afterCommit(lock *orchestrationLock, plan *ackPlan, ready, queued int) {
	p.endLock(lock)
	p.tellEnd(lock.inst.Instance, &plan.inst)
	p.retainAfterCommit(&lock.inst, &plan.inst)
	if plan.state != nil {
		p.cache.put(lock.pk, plan.state)
	} else {
		p.cache.drop(lock.pk)
	}
	// Messages announced during the turn waited for the lock to go; those
	// its batch left behind were announced before it.
	p.announceDeferred(lock.pk)
	if lock.leftBehind {
		p.orchSignal.announcePartitions(lock.pk)
	}
	for _, t := range plan.newMessages {
		p.announceMessage(lock.pk, t)
	}
	p.workSignal.announce(handoff.Repeated(handoff.ItemReady(), ready)...)
	if queued > 0 {
		p.bell.ring(queueWorker, plan.workVisible)
	}
	if queued > 0 && plan.workVisible.After(p.now()) {
		p.workSignal.notifyAt(plan.workVisible) // seqs ahead of this process's clock
		return
	}
	queued -= p.announceSessionItems(lock.pk, plan.sessions)
	p.workSignal.announce(handoff.Repeated(handoff.InPartition(lock.pk), queued)...)
}

// announceSessionItems announces the items of sessions a commit queued in
// pk to the owners of this process that hold them (sessionwork.go), and
// returns how many it announced so: the queue's fetches need not look for
// those.
func (p *CosmosProvider) announceSessionItems(pk string, sessions []string) int {
	n := 0
	for _, s := range sessions {
		if p.announceSessionWork(s, pk) {
			n++
		}
	}
	return n
}

// announceDeferred announces pk's messages that arrived while this process
// held it; call it once the lock is let go.
func (p *CosmosProvider) announceDeferred(pk string) {
	if p.wakeLater.take(pk) {
		p.orchSignal.announcePartitions(pk)
	}
	p.orchSignal.mayHoldMore()
}

// repeated is n copies of s.
func repeated(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
