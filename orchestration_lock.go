package cdb

// The orchestration lock's whole life, as workers.go holds the worker
// lock's: taken by the lock batch (lockInstance, resolved by a read when
// its answer is lost), renewed before it is handed out when too little of
// it is left (refreshFreshLock, H3) and kept fresh while a fetch loads
// (keepFreshLock), renewed by the runtime (RenewOrchestrationItemLock),
// released without a commit (AbandonOrchestrationItem, releaseQuietly) or
// held back (writeHold), counted when lost (orchestrationLockLost), and
// ended in this process (endLock). A commit ends it too (ack.go), or keeps
// it as a chain (handover_chains.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// orchestrationLock is an instance lock this process holds.
type orchestrationLock struct {
	mu          sync.Mutex // one ack, renew or abandon at a time
	token       string
	pk          string
	timeout     time.Duration // the lock timeout it was taken with
	inst        instanceDoc   // as last written by us; its ETag guards the next write
	lockedUntil atomic.Int64
	messages    []queueDoc // the locked batch
	// leftBehind says the batch may have left messages of the instance in
	// the queue (its candidates filled a query page, or the batch was cut
	// at MaxMessagesPerTurn): the commit announces the partition again, so
	// they are taken at once, not at the next idle look (afterCommit).
	leftBehind bool
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
	// unconfirmed is the plan of a try of the lock's ack whose outcome
	// could not be told (commit), until a later try tells: should the
	// runtime abandon the lock instead, what that try may have locked for
	// this process is read back from the store (H6).
	unconfirmed *ackPlan
	// givenUp is the abandon its holder asked for and that failed: the
	// runtime is done with the lock, and Close gives it back
	// (giveBackGivenUp) rather than leave it to expire.
	givenUp *abandonAsked
}

// abandonAsked is an abandon's arguments.
type abandonAsked struct {
	delay         time.Duration
	ignoreAttempt bool
}

// OrchestrationLockRemaining implements LockRemainingReporter: how long
// the orchestration lock token has left by the service's clock, at least (leftOn).
func (p *CosmosProvider) OrchestrationLockRemaining(token string) (time.Duration, bool) {
	lock, ok := p.orchLocks.Get(token)
	if !ok {
		return 0, false
	}
	return p.leftOn(lock.lockedUntil.Load()), true
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
			ops.SetCondition(lockCondition(p.expiredBy(now), filter))
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
			inst, locked, err := p.readLockedInstance(ctx, pk, token, msgs, until, resp)
			if err != nil && ctx.Err() != nil {
				return p.resolveLockBatch(ctx, pk, token, msgs, err) // locked, and its caller gone: given back
			}
			return inst, locked, err
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
// expires; if the fetch's caller went away, before the read or while it
// ran, what it locked is given back.
func (p *CosmosProvider) resolveLockBatch(ctx context.Context, pk, token string, msgs []queueDoc, cause error) (instanceDoc, []queueDoc, error) {
	// A runtime stopping cancels its fetches, at any moment: a lock batch
	// cut off so may have applied, and is then this process's to give back,
	// or the instance stays hidden for a lock's length. So the read-back and
	// the give-back run on a context of their own, and whether the caller
	// is gone is asked once the read is done.
	own, cancel := givingBack(ctx)
	defer cancel()
	ids := []string{instanceDocID}
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	res, err := p.readLatestMany(own, NewPartitionKeyString(pk), ids)
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
	if err := ctx.Err(); err != nil {
		_ = p.releaseQuietly(own, &orchestrationLock{token: token, pk: pk, inst: inst, messages: locked})
		return instanceDoc{}, nil, errors.Join(cause, err)
	}
	return inst, locked, nil
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
	until := renewedUntil(p.lockUntil(extendFor), lock.lockedUntil.Load())
	if lock.start != nil {
		lock.lockedUntil.Store(until) // an unwritten start: nothing stored to renew
		return nil
	}
	ctx = p.keepingOrchestrationLock(ctx, lock)
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

// renewedUntil is a renewal's new expiry: extended (extendFor from now,
// lockUntil), but never before the expiry the lock has, so a renewal asked
// for less than is left only lengthens or keeps a live lock, never
// shortens it (duroxide-pg 0.1.38's rule; a short renewal would hand the
// work to another dispatcher while its holder still counts on the time it
// was given).
func renewedUntil(extended, lockedUntil int64) int64 {
	return max(extended, lockedUntil)
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
	ours, err := p.adoptOwnETag(ctx, op, lock)
	if err != nil {
		return false, err
	}
	if !ours {
		p.orchestrationLockLost(ctx, lock)
		p.endLock(lock)
		return false, refuse(op, "the lock was lost", ErrInvalidLockToken)
	}
	return lock.inst.LockedUntil == until, nil
}

// adoptOwnETag reads back the instance document of a held lock whose ETag
// may have moved under a write of ours with an unknown outcome (a renewal
// whose answer was lost: a runtime stopping cancels its renewals). The
// document is ours when it is the one we hold but for its lock expiry, and
// that expiry is still ahead: then its ETag and expiry are adopted. A read
// that fails says nothing either way (a retryable error).
func (p *CosmosProvider) adoptOwnETag(ctx context.Context, op string, lock *orchestrationLock) (ours bool, err error) {
	resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), instanceDocID)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, transient(op, "could not tell whether a write of ours on the held instance applied", err)
	}
	var doc instanceDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return false, transient(op, "could not read the instance back", err)
	}
	if doc.LockedUntil <= p.nowMs() || !sameButLockExpiry(doc, lock.inst) {
		return false, nil
	}
	lock.inst.ETag = resp.ETag
	lock.inst.LockedUntil = doc.LockedUntil
	lock.lockedUntil.Store(doc.LockedUntil)
	return true, nil
}

// sendOnHeldETag sends a batch whose first operation writes a held lock's
// instance document on its ETag; build makes the batch for an ETag. Only
// this process writes a document it holds, so a miss on that ETag is
// either a lost lock or a renewal of ours whose answer was lost
// (adoptOwnETag): in the latter case the batch goes once more, on the
// ETag read back. The caller reads any other answer as before.
func (p *CosmosProvider) sendOnHeldETag(ctx context.Context, op string, lock *orchestrationLock, build func(ETag) *TransactionalBatch) (TransactionalBatchResponse, error) {
	resp, err := p.container.ExecuteTransactionalBatch(ctx, build(lock.inst.ETag), nil)
	if err != nil || resp.Success || !instanceETagFailed(resp) {
		return resp, err
	}
	if ours, rerr := p.adoptOwnETag(ctx, op, lock); rerr != nil || !ours {
		return resp, nil
	}
	return p.container.ExecuteTransactionalBatch(ctx, build(lock.inst.ETag), nil)
}

// sendGiveBack sends a give-back batch whose operation 0 is the instance
// document's and operation i the lock's message i-1 (sendOnHeldETag), and
// sends it again without a message gone or changed since the fetch locked
// it (a relay took its delivery back, a deletion swept it, another fetch
// took it once its lock lapsed): the batch would fail whole, and the
// instance stay locked for a lock's length. That message is no longer the
// lock's to give back.
//
// A batch whose answer was lost is read back (giveBackApplied): while the
// instance is still locked under the lock's token it did not apply, and it
// goes again, a few times at most; otherwise nothing of the lock is left
// to give back.
func (p *CosmosProvider) sendGiveBack(ctx context.Context, op string, lock *orchestrationLock, build func(ETag) *TransactionalBatch) (TransactionalBatchResponse, error) {
	for lost := 0; ; {
		resp, err := p.sendOnHeldETag(ctx, op, lock, build)
		if IsOutcomeUnknown(err) && lost < maxLostGiveBacks {
			lost++
			applied, rerr := p.giveBackApplied(ctx, lock)
			if rerr != nil {
				return resp, err
			}
			if applied {
				return TransactionalBatchResponse{Success: true}, nil
			}
			continue
		}
		if err != nil || resp.Success {
			return resp, err
		}
		idx, opErr := resp.FailedOperation()
		if idx < 1 || idx > len(lock.messages) || !missingOrChanged(opErr) {
			return resp, nil
		}
		lock.messages = slices.Delete(slices.Clone(lock.messages), idx-1, idx)
	}
}

// maxLostGiveBacks bounds how often one give-back is sent again after its
// answer was lost and the read-back found it not applied.
const maxLostGiveBacks = 3

// giveBackApplied reads the instance document after a give-back of lock
// whose answer was lost: the batch, atomic, applied unless the document is
// still locked under the lock's token. A document gone or locked under
// another token holds nothing of this lock either way.
func (p *CosmosProvider) giveBackApplied(ctx context.Context, lock *orchestrationLock) (bool, error) {
	doc, err := decodeInstanceRead(p.readLatest(ctx, NewPartitionKeyString(lock.pk), instanceDocID))
	if err != nil {
		return false, err
	}
	return doc == nil || doc.LockToken != lock.token, nil
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

// keepingFreshLock runs fn while the lock is renewed in the background; the
// lock's loss wins over fn's error.
func (p *CosmosProvider) keepingFreshLock(ctx context.Context, op string, lock *orchestrationLock, fn func() error) error {
	stop := make(chan struct{})
	lost := make(chan error, 1)
	go func() { lost <- p.keepFreshLock(ctx, op, lock, stop) }()
	err := fn()
	close(stop)
	if lostErr := <-lost; lostErr != nil {
		return lostErr
	}
	return err
}

// keepFreshLock renews a lock (a fetch loading, an ack staging) whenever half its timeout is
// gone, until stop is closed; it returns an error only when the lock is
// lost. A failed renewal that may be transient is tried again at the next
// wake. A renewal in flight when stop closes runs to its end: cancelling it
// could leave it applied with its new ETag unknown, and the next write of
// the lock would read that as a lost lock.
func (p *CosmosProvider) keepFreshLock(ctx context.Context, op string, lock *orchestrationLock, stop <-chan struct{}) error {
	half := lock.timeout.Milliseconds() / 2
	retry := max(lock.timeout/8, minFreshLockWait)
	wait := time.Duration(lock.lockedUntil.Load()-half-p.nowMs()) * time.Millisecond
	for waitOrStop(ctx, stop, max(wait, minFreshLockWait)) {
		lock.mu.Lock()
		err := p.extendLock(ctx, op, lock, lock.timeout)
		lock.mu.Unlock()
		switch {
		case errors.Is(err, ErrInvalidLockToken):
			return err
		case err != nil:
			wait = retry
		default:
			wait = time.Duration(lock.lockedUntil.Load()-half-p.nowMs()) * time.Millisecond
		}
	}
	return nil
}

// waitOrStop waits for d; false when stop closed or ctx ended first.
func waitOrStop(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}

// minFreshLockWait is the least time between keepFreshLock's renewals, so
// a slow clock does not turn it into a busy loop.
const minFreshLockWait = 10 * time.Millisecond

// refreshFreshLock renews a lock about to be handed to the runtime when it
// has less left than leftToHandOut asks (fetching it took long, or a
// chain kept it while its activities ran): the runtime's first renewal
// must land before the expiry.
func (p *CosmosProvider) refreshFreshLock(ctx context.Context, lock *orchestrationLock) error {
	if leftToHandOut(p.leftOn(lock.lockedUntil.Load()), lock.timeout) {
		return nil // Keeps: H3
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	err := p.extendLock(ctx, "FetchOrchestrationItem", lock, lock.timeout)
	if errors.Is(err, ErrInvalidLockToken) {
		return errContended
	}
	if err != nil && p.nowMs() >= lock.lockedUntil.Load() {
		// The fetch took longer than the lock lasts and the refresh did not
		// land: a lock that has expired is never handed out (another
		// dispatcher may take the instance at any moment).
		p.log.Debug("cdb: a fetched lock expired before it could be refreshed; passing the instance over", "instance", lock.inst.Instance, "error", err)
		return errContended
	}
	if err != nil {
		// The lock is still ours: hand the loaded turn over, and let the
		// runtime's renewal try again.
		p.log.Debug("cdb: could not refresh a fetched lock", "instance", lock.inst.Instance, "error", err)
	}
	return nil
}

// releaseQuietly gives a lock back after a fetch failed half way, so the
// contract's "an error means no lock is held" holds as far as it can.
func (p *CosmosProvider) releaseQuietly(ctx context.Context, lock *orchestrationLock) error {
	// A fetch whose caller went away (a runtime shutting down) still lets
	// go of what it locked, or it would stay hidden for a lock's length.
	ctx, cancel := givingBack(ctx)
	defer cancel()
	err := p.writeAbandon(ctx, lock, 0, true)
	if err != nil {
		p.log.Warn("cdb: could not release a lock after a failed fetch; it will expire", "instance", lock.inst.Instance, "error", err)
	}
	return err
}

// settleUnconfirmed ends the ack of lock without a try that tells its
// outcome: when one try's could not be told, it may have committed,
// keeping the instance in a chain and locking items for this process, so
// they are read back from the store, and given back or handed out.
// Called with lock.mu held, once no try of the ack will follow.
func (p *CosmosProvider) settleUnconfirmed(ctx context.Context, lock *orchestrationLock) {
	plan := lock.unconfirmed
	if plan == nil {
		return
	}
	lock.unconfirmed = nil
	p.offerUnconfirmed(ctx, lock, plan) // Keeps: H6
}

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
	defer p.settleUnconfirmed(ctx, lock) // the runtime gives up on the turn
	if err := p.writeAbandon(ctx, lock, delay, ignoreAttempt); err != nil {
		if !errors.Is(err, ErrInvalidLockToken) {
			lock.givenUp = &abandonAsked{delay: delay, ignoreAttempt: ignoreAttempt}
		}
		return asOperation(op, err)
	}
	p.releasedWithoutCommit(lock, delay)
	return nil
}

// giveBackGivenUp gives back, as the provider closes, the instance locks
// whose abandon failed (a fault, a stopping runtime's call cut off): their
// runtime is done with them, and nothing else releases them before they
// expire. The abandon is written as it was asked, its delay and attempt
// undo included. A lock the runtime still works on is not touched, nor
// waited for: its turn ends by its own ack or abandon.
func (p *CosmosProvider) giveBackGivenUp() {
	ctx, cancel := context.WithTimeout(context.Background(), closeGiveBackTimeout)
	defer cancel()
	for _, lock := range p.orchLocks.Values() {
		if !lock.mu.TryLock() {
			continue // in use: a call still works on it, and ends it
		}
		if asked := lock.givenUp; asked != nil && !lock.done && lock.lockedUntil.Load() > p.nowMs() {
			if err := p.writeAbandon(ctx, lock, asked.delay, asked.ignoreAttempt); err == nil {
				p.releasedWithoutCommit(lock, asked.delay)
			}
		}
		lock.mu.Unlock()
	}
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
	ctx, cancel := givingBack(ctx) // a fetch whose caller went away still gives back what it locked
	defer cancel()
	return p.releaseBatch(ctx, "FetchOrchestrationItem", lock, heldUntilOps(p.now(), delay), delay, true)
}

// releaseBatch frees the instance document with instanceOps (If-Match on
// the lock's ETag) and its locked messages, each unavailable for delay.
func (p *CosmosProvider) releaseBatch(ctx context.Context, op string, lock *orchestrationLock, instanceOps PatchOperations, delay time.Duration, ignoreAttempt bool) error {
	if lock.start != nil {
		p.handBackStart(lock) // nothing stored: its caller writes the start
		return nil
	}
	now := p.now()
	instanceOps.AppendSet("/releasedAt", now.UnixMilli())
	// One time for the whole batch: its messages come back together, or a
	// fetch between two of their times would take them apart (a
	// cancellation after the input it was sent with).
	messageOps := func(m queueDoc) PatchOperations {
		mops := heldUntilOps(now, delay)
		if ignoreAttempt {
			mops.AppendSet("/attempts", max(m.Attempts, 1)-1)
		}
		return mops
	}
	if over := len(lock.messages) - (MaxBatchOperations - 1); over > 0 {
		if err := p.releaseMessagesAhead(ctx, lock, lock.messages[:over], messageOps); err != nil {
			return asOperation(op, err)
		}
		lock.messages = lock.messages[over:]
	}
	resp, err := p.sendGiveBack(ctx, op, lock, func(etag ETag) *TransactionalBatch {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
		b.PatchItem(instanceDocID, instanceOps, &TransactionalBatchItemOptions{IfMatch: &etag})
		for _, m := range lock.messages {
			b.PatchItem(m.ID, messageOps(m), nil)
		}
		return b
	})
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
	p.bell.ring(queueOrchestrator, now.Add(max(delay, 0))) // the instance is free for the others
	return nil
}

// heldUntilOps release a lock, leaving the document unavailable for delay.
// releaseMessagesAhead frees msgs, messages lock holds past what one batch
// holds beside the instance document (a chain may claim more completions
// than a turn takes), a batch at a time before the batch that frees the
// instance: no fetch takes a message of an instance locked meanwhile, so
// they come back with the rest. Each is conditioned on still carrying the
// lock's token; one that does not (it went, or the lock was lost) is passed
// over.
func (p *CosmosProvider) releaseMessagesAhead(ctx context.Context, lock *orchestrationLock, msgs []queueDoc, ops func(queueDoc) PatchOperations) error {
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), MaxBatchOperations)]
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
		for _, m := range chunk {
			mops := ops(m)
			mops.SetCondition("from c where c.lockToken = " + sqlString(lock.token))
			b.PatchItem(m.ID, mops, nil)
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return fmt.Errorf("release the messages of %s past a batch: %w", lock.inst.Instance, err)
		}
		if resp.Success {
			msgs = msgs[len(chunk):]
			continue
		}
		i, failed := resp.FailedOperation()
		if i < 0 || !missingOrChanged(failed) {
			return fmt.Errorf("release the messages of %s past a batch: %w", lock.inst.Instance, failed)
		}
		msgs = slices.Delete(slices.Clone(msgs), i, i+1) // not this lock's any more
	}
	return nil
}

func heldUntilOps(now time.Time, delay time.Duration) PatchOperations {
	if delay <= 0 {
		return unlockOps()
	}
	var ops PatchOperations
	ops.AppendSet("/lockToken", "")
	ops.AppendSet("/lockedUntil", now.Add(delay).UnixMilli())
	return ops
}

// orchestrationLockLost counts an instance lock this process lost, once
// however many of its holder's calls learn of it (a renewal, then the
// ack, then the abandon). The caller holds lock.mu, or is the fetch that
// took the lock and has not handed it over yet.
func (p *CosmosProvider) orchestrationLockLost(ctx context.Context, lock *orchestrationLock) {
	if lock.lost {
		return
	}
	lock.lost = true
	p.tel.lockLost(ctx, lockKindOrchestration)
}

// holdsInstanceLock says this process holds pk's instance lock, unexpired
// by its clock.
func (p *CosmosProvider) holdsInstanceLock(pk string) bool {
	now := p.nowMs()
	return p.orchLocks.Any(func(l *orchestrationLock) bool {
		return l.pk == pk && l.lockedUntil.Load() > now
	})
}
