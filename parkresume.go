package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Resuming a parked instance (ParkRecorder): after the deploy that fixes
// an instance's code, an operator wants its parked turn retried now, not
// at the park's RetryAt. A park gave the turn's messages back unlocked
// and unavailable until RetryAt (each message's lockedUntil, the instance
// document's startHeldUntil when the batch held the start); resuming
// makes them due now, and sets the record's retryAt to now, in one batch
// whose write of the instance document is If-Match on the ETag it read.
// Nothing is deleted or moved: a message only becomes due earlier, so none
// can be lost. The park record stays until a turn commits, as after any
// retry: the runtime that takes the batch either commits (matching code,
// the record ends) or parks it again (the count grows).

// resumeAttempts bounds the tries of a resume whose instance document
// changed between its read and its write.
const resumeAttempts = 3

// ResumeParked makes the parked turn of instance due now and returns how
// many messages it brought forward (0 when they were already due). It
// refuses, changing nothing, an unknown instance (ErrInstanceNotFound), one
// no runtime has parked (ErrNotParked), and one whose lock a runtime holds
// (ErrInstanceLocked: that runtime is running its turn now). It costs a
// point read, a query in the instance's partition and one batch per 99
// held messages.
func (p *CosmosProvider) ResumeParked(ctx context.Context, instance string) (int, error) {
	const op = "ResumeParked"
	if err := validateInstanceID(op, instance); err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		n, changed, err := p.resumeOnce(ctx, op, instance)
		if !changed || err != nil {
			return n, err
		}
		if attempt == resumeAttempts {
			return 0, refuse(op, fmt.Sprintf("instance %q changed %d times while it was being resumed (a runtime is taking it): nothing changed", instance, attempt), ErrInstanceLocked)
		}
	}
}

// resumeOnce reads the instance and writes the resume; changed says the
// instance document's ETag no longer matched, and nothing was written.
func (p *CosmosProvider) resumeOnce(ctx context.Context, op, instance string) (n int, changed bool, err error) {
	inst, err := p.readLiveInstance(ctx, instance)
	if err != nil {
		return 0, false, asOperation(op, err)
	}
	now := p.nowMs()
	switch {
	case inst == nil: // not !exists(): a parked first turn's document has a record but no name yet
		return 0, false, refuse(op, fmt.Sprintf("instance %q not found", instance), ErrInstanceNotFound)
	case inst.Parked == nil:
		return 0, false, refuse(op, fmt.Sprintf("instance %q is not parked", instance), ErrNotParked)
	case inst.LockToken != "" && inst.LockedUntil > now:
		return 0, false, refuse(op, fmt.Sprintf("instance %q is locked by a runtime until %s: it is running its turn now",
			instance, time.UnixMilli(inst.LockedUntil).UTC().Format(time.RFC3339Nano)), ErrInstanceLocked)
	}
	held, err := p.parkedBatch(ctx, inst.PK, now)
	if err != nil {
		return 0, false, asOperation(op, err)
	}
	var ops PatchOperations
	ops.AppendSet("/parked/retryAt", now)
	if inst.StartHeldUntil > now {
		ops.AppendSet("/startHeldUntil", 0)
	}
	key := NewPartitionKeyString(inst.PK)
	first := true
	for len(held) > 0 || first {
		b := p.container.NewTransactionalBatch(key)
		if first {
			// Only the first batch guards on the instance document: a
			// later one guards on each message's ETag, which a fetch
			// that locks the message changes.
			b.PatchItem(instanceDocID, ops, &TransactionalBatchItemOptions{IfMatch: &inst.ETag})
		}
		for len(held) > 0 && b.Len() < MaxBatchOperations {
			m := held[0]
			held = held[1:]
			var mops PatchOperations
			mops.AppendSet("/lockedUntil", 0)
			b.PatchItem(m.ID, mops, &TransactionalBatchItemOptions{IfMatch: &m.ETag})
			n++
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return 0, false, asOperation(op, err)
		}
		if !resp.Success {
			if _, err := resp.FailedOperation(); IsPreconditionFailed(err) && first {
				return 0, true, nil
			}
			return 0, false, asOperation(op, batchError(resp))
		}
		first = false
	}
	// This process's dispatchers take it at once; another process's at
	// its next poll.
	p.announceMessage(inst.PK, p.now())
	return n, false, nil
}

// parkedBatch is the instance partition's orchestrator messages a
// give-back left unlocked but unavailable past now: a park's, or an
// abandon's with a delay.
func (p *CosmosProvider) parkedBatch(ctx context.Context, pk string, now int64) ([]queueDoc, error) {
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx,
		"SELECT c.id, c._etag FROM c WHERE c.pk = @pk AND c.type = @type AND c.lockedUntil > @now AND (NOT IS_DEFINED(c.lockToken) OR c.lockToken = '')",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@type", Value: docMessage}, {Name: "@now", Value: now}},
		&QueryOptions{PartitionKey: &key})
	if err != nil {
		return nil, err
	}
	held := make([]queueDoc, 0, len(res.Items))
	for _, raw := range res.Items {
		var m queueDoc
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("decode a held message: %w: %w", errUndecodable, err)
		}
		held = append(held, m)
	}
	return held, nil
}
