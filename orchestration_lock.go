package cdb

// Locking an instance: one transactional batch that conditions the instance
// document on being free and claims the messages a fetch saw, and, when its
// answer is lost, the read that tells whose lock it is.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// lockInstance is the lock batch: a conditional patch of the instance
// document (free lock, compatible pinned version) and a patch per message
// (token, expiry, attempt count). A missing instance document is created.
func (p *CosmosProvider) lockInstance(ctx context.Context, pk string, msgs []queueDoc, token string, now, until int64, filter *DispatcherCapabilityFilter) (instanceDoc, []queueDoc, error) {
	for _, create := range []bool{false, true} {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(pk))
		if create {
			shell, err := json.Marshal(instanceDoc{
				ID: instanceDocID, PK: pk, Type: docInstance, Instance: msgs[0].Instance, Slot: msgs[0].Slot,
				LockToken: token, LockedUntil: until, CreatedAt: now, UpdatedAt: now, Life: newLockToken(""),
			})
			if err != nil {
				return instanceDoc{}, nil, err
			}
			b.CreateItem(shell, nil)
		} else {
			var ops PatchOperations
			ops.SetCondition(lockCondition(now, filter))
			ops.AppendSet("/lockToken", token)
			ops.AppendSet("/lockedUntil", until)
			b.PatchItem(instanceDocID, ops, nil)
		}
		for _, m := range msgs {
			b.PatchItem(m.ID, messageClaimOps(token, until), nil)
		}
		large := !create && messageBytes(msgs) > lockContentMaxBytes
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, &TransactionalBatchOptions{EnableContentResponseOnWrite: !large})
		if IsOutcomeUnknown(err) {
			return p.resolveLockBatch(ctx, pk, token, msgs, err)
		}
		if err != nil {
			return instanceDoc{}, nil, err
		}
		if !resp.Success {
			idx, opErr := resp.FailedOperation()
			switch {
			case idx == 0 && !create && IsNotFound(opErr):
				continue // no instance document yet: create it
			case idx == 0 && !create && IsPreconditionFailed(opErr):
				return instanceDoc{}, nil, p.whyNotLocked(ctx, pk, now, filter)
			case missingOrChanged(opErr) || IsConflict(opErr):
				return instanceDoc{}, nil, errContended
			default:
				return instanceDoc{}, nil, opErr
			}
		}
		if large {
			return p.readLockedInstance(ctx, pk, token, msgs, until, resp)
		}
		return decodeLockBatch(resp)
	}
	return instanceDoc{}, nil, errContended
}

// lockContentMaxBytes bounds the messages a lock batch asks back. The
// messages' contents are already known from the candidate query; asking
// them back again only doubles what the lock costs, and a message near
// 1 MB (a start or continue-as-new input) made the lock batch's answer take
// longer to come and decode than the lock lasts: the lock's expiry is
// counted from before the request, so the fetch held an expired lock from
// the start, and any other dispatcher could take the instance, each
// counting an attempt. Above this, the lock batch returns no content, and
// one point read brings the instance document.
const lockContentMaxBytes = 64 * 1024

// messageBytes is the size of the messages' items as the candidate query
// returned them.
func messageBytes(msgs []queueDoc) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Item)
	}
	return n
}

// readLockedInstance completes a lock batch that returned no content: the
// messages are the query's, as the batch patched them (the ETags it
// answered), and the instance document is read from the primary. A read
// that finds another token means the lock was taken from us already.
func (p *CosmosProvider) readLockedInstance(ctx context.Context, pk, token string, msgs []queueDoc, until int64, resp TransactionalBatchResponse) (instanceDoc, []queueDoc, error) {
	locked := make([]queueDoc, len(msgs))
	for i, m := range msgs {
		m.LockToken, m.LockedUntil, m.Attempts = token, until, m.Attempts+1
		m.ETag = resp.OperationResults[i+1].ETag
		locked[i] = m
	}
	inst, err := p.readInstanceLatest(ctx, pk)
	if err != nil {
		return instanceDoc{}, nil, err
	}
	if inst == nil || inst.LockToken != token {
		return instanceDoc{}, nil, errContended
	}
	return *inst, locked, nil
}

// messageClaimOps lock a message that is still one: a message consumed
// since the query that found it may have left a marker under its id, and a
// patch without the condition would lock the marker.
func messageClaimOps(token string, until int64) PatchOperations {
	ops := claimOps(token, until)
	ops.SetCondition("from c where c.type = '" + docMessage + "'")
	return ops
}

// resolveLockBatch finds out whether a lock batch whose response was lost
// took the lock, reading the instance document and the messages from the
// partition's primary in one batch: if it did, the fetch goes on with what
// it locked, so the instance does not stay locked by nobody until the lock
// expires.
func (p *CosmosProvider) resolveLockBatch(ctx context.Context, pk, token string, msgs []queueDoc, cause error) (instanceDoc, []queueDoc, error) {
	ids := []string{instanceDocID}
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	res, err := p.readLatestMany(ctx, NewPartitionKeyString(pk), ids)
	if IsNotFound(err) {
		return instanceDoc{}, nil, errContended // something went away: the batch could not have applied whole
	}
	if err != nil {
		return instanceDoc{}, nil, cause
	}
	var inst instanceDoc
	if err := json.Unmarshal(res[0].Value, &inst); err != nil {
		return instanceDoc{}, nil, fmt.Errorf("decode locked instance: %w: %w", errUndecodable, err)
	}
	inst.ETag = res[0].ETag
	if inst.LockToken != token {
		return instanceDoc{}, nil, errContended // the batch did not apply
	}
	locked := make([]queueDoc, 0, len(msgs))
	for _, r := range res[1:] {
		var m queueDoc
		if err := json.Unmarshal(r.Value, &m); err != nil {
			return instanceDoc{}, nil, fmt.Errorf("decode locked message: %w: %w", errUndecodable, err)
		}
		m.ETag = r.ETag
		locked = append(locked, m)
	}
	return inst, locked, nil
}

// readInstanceLatest reads an instance document from its partition's
// primary (nil when there is none), to tell what a write whose response
// was lost did.
func (p *CosmosProvider) readInstanceLatest(ctx context.Context, pk string) (*instanceDoc, error) {
	return decodeInstanceRead(p.readLatest(ctx, NewPartitionKeyString(pk), instanceDocID))
}

// whyNotLocked reads the instance document after its lock condition failed,
// to tell contention (try again soon) from what will not change soon: a
// lock another process holds, a pinned version outside the filter, a
// deletion. Those are passed over until they might change, so they stop
// costing a lock attempt on every look.
func (p *CosmosProvider) whyNotLocked(ctx context.Context, pk string, now int64, filter *DispatcherCapabilityFilter) error {
	inst, err := p.readInstanceDoc(ctx, pk)
	if err != nil || inst == nil {
		return errContended
	}
	at := time.UnixMilli(now)
	switch {
	case inst.Deleting != "":
		return &skipError{until: at.Add(deletingBackoff), reason: "being deleted"}
	case inst.LockedUntil > now:
		return &skipError{until: time.UnixMilli(min(inst.LockedUntil, now+maxHeldLockSkip.Milliseconds())), reason: "locked by another dispatcher"}
	case pinnedOutside(filter, inst.Pinned):
		wait := p.filterMisses.backoff(filterKey(filter), pk, *inst.Pinned, at)
		return &skipError{until: at.Add(wait), reason: "pinned to a version outside the capability filter"}
	}
	return errContended
}

// pinnedOutside says a filter excludes a pinned version.
func pinnedOutside(filter *DispatcherCapabilityFilter, pinned *uint64) bool {
	if filter == nil || pinned == nil {
		return false
	}
	r := filter.SupportedDuroxideVersions[0]
	return *pinned < r.Min.PackedVersion() || *pinned > r.Max.PackedVersion()
}

// readInstanceDoc point-reads an instance document by partition key; nil
// when there is none.
func (p *CosmosProvider) readInstanceDoc(ctx context.Context, pk string) (*instanceDoc, error) {
	return decodeInstanceRead(p.container.ReadItem(ctx, NewPartitionKeyString(pk), instanceDocID, nil))
}

// decodeInstanceRead turns a point read of an instance document into the
// document with its ETag, nil when there is none.
func decodeInstanceRead(resp ItemResponse, err error) (*instanceDoc, error) {
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var inst instanceDoc
	if err := json.Unmarshal(resp.Value, &inst); err != nil {
		return nil, fmt.Errorf("decode instance document: %w: %w", errUndecodable, err)
	}
	inst.ETag = resp.ETag
	return &inst, nil
}

// lockCondition is the instance document's PATCH condition: the lock is free
// (or expired) and, with a filter, the pinned version is compatible.
// Conditions take no parameters; only numbers are inlined.
func lockCondition(now int64, filter *DispatcherCapabilityFilter) string {
	cond := "from c where c.lockedUntil <= " + strconv.FormatInt(now, 10) + " and not is_defined(c.deleting)"
	if filter != nil {
		r := filter.SupportedDuroxideVersions[0]
		cond += " and (not is_defined(c.pinned) or (c.pinned >= " + strconv.FormatUint(r.Min.PackedVersion(), 10) +
			" and c.pinned <= " + strconv.FormatUint(r.Max.PackedVersion(), 10) + "))"
	}
	return cond
}

func decodeLockBatch(resp TransactionalBatchResponse) (instanceDoc, []queueDoc, error) {
	var inst instanceDoc
	if err := json.Unmarshal(resp.OperationResults[0].ResourceBody, &inst); err != nil {
		return instanceDoc{}, nil, fmt.Errorf("decode locked instance: %w: %w", errUndecodable, err)
	}
	inst.ETag = resp.OperationResults[0].ETag
	msgs := make([]queueDoc, 0, len(resp.OperationResults)-1)
	for _, r := range resp.OperationResults[1:] {
		var m queueDoc
		if err := json.Unmarshal(r.ResourceBody, &m); err != nil {
			return instanceDoc{}, nil, fmt.Errorf("decode locked message: %w: %w", errUndecodable, err)
		}
		m.ETag = r.ETag
		msgs = append(msgs, m)
	}
	return inst, msgs, nil
}
