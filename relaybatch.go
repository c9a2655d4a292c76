package cdb

// Batched delivery: the entries an outbox writes into its own partition
// (a wide fan-out's worker items that overflowed the commit batch, its
// ContinueAsNew message, events it sends itself) are plain creates in the
// outbox's partition, so the relay writes them a transactional batch at a
// time, and the same batch moves the outbox's progress past them (and its
// beat) under the condition that this relay owns it and its progress is
// where the batch starts. The invariant (ARCHITECTURE.md, Outbox): an
// outbox's recorded progress never passes an entry that is not stored,
// and a batch's entries are stored only with the progress moved past them,
// which happens once. So a relay that lost the outbox to another writes
// nothing (the condition fails the whole batch); a relay that takes over
// goes on exactly where the last batch ended; a batch whose answer was
// lost cannot apply again on its retry (its condition no longer holds),
// and is settled by reading the progress back. An item a batch delivered
// is therefore never written twice, and its consumer deletes it like any
// other: only entries written one at a time, whose progress is recorded
// after them, carry `relayed` and leave a consumed marker.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// relayBatchOps is how many entries one relay batch writes: a transactional
// batch's operations, less the outbox's progress.
const relayBatchOps = MaxBatchOperations - 1

// batchable says e can go in a batch of the outbox's partition pk: a plain
// create there (an upsert, and the two entries of a start elsewhere, are
// written one at a time, as their settling needs).
func batchable(e outboxEntry, pk string) bool {
	return e.PK == pk && !e.Upsert && e.Role == ""
}

// nextRun is the entries from index first on that one relay batch writes:
// batchable ones, as many as a batch holds by operations and bytes. Empty
// when entry first is not batchable, or too large for a batch beside the
// progress.
func (r *relay) nextRun(ctx context.Context, entries *outboxEntries, pk string, first, total int) ([]outboxEntry, error) {
	var run []outboxEntry
	room := commitBatchBytes - batchOpOverhead - len(pk) - 256 // the progress PATCH
	for i := first; i < total && len(run) < relayBatchOps; i++ {
		e, err := entries.at(ctx, i)
		if err != nil {
			return nil, err
		}
		size := len(e.Doc) + batchOpOverhead
		if !batchable(e, pk) || size > room {
			break
		}
		room -= size
		run = append(run, e)
	}
	return run, nil
}

// deliverRun writes run, o's entries from index first on, in one batch
// with o's progress past them and a beat. resultHeld means they are
// stored (now or by an earlier try) and o.doc.Delivered is past them;
// resultBlocked, that another relay owns o; resultDelivered, that o is
// gone (another relay finished it). A batch the store refuses for what it
// holds (an entry of the run exists already, or it is too large for this
// account) is settled by writeRunSingly.
func (r *relay) deliverRun(ctx context.Context, o *pendingOutbox, first int, run []outboxEntry, shells map[string]bool) (deliveryResult, error) {
	now := r.p.nowMs()
	// What the batch locks for this process's fetches is settled by what
	// applied, or released here whatever else happens (H7).
	reservation := r.p.readyItems.Reserve()
	defer reservation.Release()
	b := r.p.container.NewTransactionalBatch(NewPartitionKeyString(o.pk))
	var locked []eagerWrite
	var kinds runKinds
	for _, e := range run {
		doc, decoded := decodeEntry(e)
		kinds.count(doc, decoded)
		if lock := r.lockForFetches(o, doc, decoded, reservation, now); lock != nil {
			body, err := json.Marshal(lock.doc)
			if err == nil {
				locked = append(locked, eagerWrite{op: b.Len(), lock: lock})
				b.CreateItem(body, nil)
				continue
			}
		}
		b.CreateItem(unrelayedBody(e.Doc), nil)
	}
	var ops PatchOperations
	ops.SetCondition(ownedAt(o.token, first))
	ops.AppendSet("/beatAt", now)
	ops.AppendSet("/delivered", first+len(run))
	b.PatchItem(o.id, ops, nil)
	resp, err := r.p.container.ExecuteTransactionalBatch(ctx, b, nil)
	switch {
	case err != nil && IsRetryable(err):
		// It may have applied: the next try finds its entries stored and
		// reads the progress back (settleRun); what it locked is read back
		// before it is handed out (H2).
		reservation.Settle(unconfirmedLocks(locked))
		r.p.giveBackIfClosing(ctx) // Keeps: H5
		r.p.workSignal.announce(handoff.Repeated(handoff.ItemReady(), len(locked))...)
		return resultFailed, fmt.Errorf("deliver outbox %s entries %d-%d: %w", o.id, first, first+len(run)-1, err)
	case err != nil:
		return r.writeRunSingly(ctx, o, first, run, shells)
	case resp.Success:
		o.beat = now
		o.doc.Delivered = first + len(run)
		ready := make([]*workLock, len(locked))
		for i, w := range locked {
			w.lock.doc.ETag = resp.OperationResults[w.op].ETag
			ready[i] = w.lock
		}
		reservation.Settle(ready)  // Keeps: H7
		r.p.giveBackIfClosing(ctx) // Keeps: H5
		r.landed(o.pk, kinds, len(ready))
		return resultHeld, nil
	}
	i, failed := resp.FailedOperation()
	switch {
	case i == len(run) && IsNotFound(failed):
		return resultDelivered, nil // another relay finished it and deleted it
	case i == len(run) && IsPreconditionFailed(failed), IsConflict(failed):
		return r.settleRun(ctx, o, first, run, kinds, shells)
	}
	return r.writeRunSingly(ctx, o, first, run, shells)
}

// settleRun settles a batch refused for what the store holds (an entry of
// it exists, or the outbox is not where the batch expected) by reading the
// outbox back: an earlier try of this batch applied (its answer was lost)
// when the progress is past it, and the delivery goes on from there;
// another relay owns the outbox when its owner changed; and a progress
// behind the stored entries means a relay wrote them one at a time (a relay
// before batches, or one that fell back), so the run is written so too,
// each stored entry counting as delivered.
func (r *relay) settleRun(ctx context.Context, o *pendingOutbox, first int, run []outboxEntry, kinds runKinds, shells map[string]bool) (deliveryResult, error) {
	stored, err := r.read(ctx, o)
	switch {
	case IsNotFound(err):
		return resultDelivered, nil
	case err != nil:
		return resultFailed, fmt.Errorf("read back outbox %s: %w", o.id, err)
	case stored.Owner != o.token:
		o.token, o.etag = "", ""
		return resultBlocked, nil
	case stored.Delivered > first:
		o.beat = stored.BeatAt
		o.doc.Delivered = stored.Delivered
		r.landed(o.pk, kinds, 0) // what an earlier try locked was read back (H2)
		return resultHeld, nil
	}
	return r.writeRunSingly(ctx, o, first, run, shells)
}

// ownedAt is the condition of a relay batch's progress: this relay owns
// the outbox, and its recorded progress is where the batch starts (none
// recorded is 0), so the batch applies once.
func ownedAt(token string, delivered int) string {
	at := "c.delivered = " + strconv.Itoa(delivered)
	if delivered == 0 {
		at = "(not is_defined(c.delivered) or " + at + ")"
	}
	return ownedBy(token) + " and " + at
}

// unrelayedBody is an entry's queue document without the relayed mark its
// outbox gave it (relayedBody): a batch delivers it once, so its consumer
// need leave no marker.
func unrelayedBody(doc []byte) []byte {
	rest, ok := bytes.CutPrefix(doc, []byte(relayedPrefix))
	if !ok {
		return doc
	}
	return append([]byte("{"), rest...)
}

// writeRunSingly writes run one entry at a time, a stored one counting as
// delivered, and records the progress past it.
func (r *relay) writeRunSingly(ctx context.Context, o *pendingOutbox, first int, run []outboxEntry, shells map[string]bool) (deliveryResult, error) {
	for k, e := range run {
		if err := r.deliverEntry(ctx, e, shells); err != nil {
			r.record(ctx, o, first+k)
			return resultFailed, fmt.Errorf("deliver outbox %s entry %d: %w", o.id, first+k, err)
		}
		o.doc.Delivered = first + k + 1
	}
	return resultHeld, nil
}

// lockForFetches is the lock of e, when it is a worker item the
// reservation promises to this process's fetches: written locked to them,
// as a commit writes the activities its fetches will take (handover.go),
// until the fetches' lock timeout and the item's patience from now. Nil
// for anything else (a message, a session's item, which its session's
// owner takes, or no fetch to take it).
func (r *relay) lockForFetches(o *pendingOutbox, doc queueDoc, decoded bool, reservation *handoff.Reservation[*workLock], now int64) *workLock {
	if !decoded || doc.Type != docWork || doc.Session != nil {
		return nil
	}
	timeout, ok := reservation.Take(doc.Tag)
	if !ok {
		return nil
	}
	until := r.p.lockUntil(timeout)
	doc.Relayed = false // a batch delivers it once
	doc.LockToken, doc.LockedUntil, doc.Attempts = relayedWorkToken(o.id, doc), until, 1
	return &workLock{token: doc.LockToken, pk: doc.PK, doc: doc, lockedUntil: until, lockedAt: now, activity: activityKey{doc.Exec, doc.Activity}} // Keeps: H1
}

// relayedWorkToken is the lock token a relay batch writes into a worker
// item it locks for its process's fetches: the same for every try of the
// batch, so one whose answer was lost is found ours by its token (H2),
// and of a fixed length, as a completion's id is derived from it (R18).
func relayedWorkToken(outboxID string, doc queueDoc) string {
	digest := sha256.Sum256([]byte(outboxID + "|" + doc.ID))
	return "work_relay." + hex.EncodeToString(digest[:12])
}

// unconfirmedLocks are the locks of a batch whose answer was lost, to be
// read back before they are handed out (their ETag unknown).
func unconfirmedLocks(locked []eagerWrite) []*workLock {
	locks := make([]*workLock, len(locked))
	for i, w := range locked {
		w.lock.doc.ETag = ""
		locks[i] = w.lock
	}
	return locks
}

// decodeEntry is an entry's queue document, decoded once for the batch
// (false when it is not one).
func decodeEntry(e outboxEntry) (queueDoc, bool) {
	var doc queueDoc
	return doc, json.Unmarshal(e.Doc, &doc) == nil
}

// runKinds is what a batch of entries holds for the fetches: worker items,
// and whether any orchestrator message.
type runKinds struct {
	work     int
	messages bool
}

func (k *runKinds) count(doc queueDoc, decoded bool) {
	switch {
	case !decoded:
	case doc.Type == docWork:
		k.work++
	case doc.Type == docMessage:
		k.messages = true
	}
}

// landed tells the fetches of a batch of entries that landed in pk, ready
// of whose worker items are locked for this process's fetches: the bell
// rings once for the batch (other processes), and this process's fetches
// are told of the rest as a commit tells of what it queued, so its workers
// take them now rather than at their next idle look.
func (r *relay) landed(pk string, kinds runKinds, ready int) {
	now := r.p.now()
	r.p.bell.ring(queueOrchestrator, now)
	r.p.bell.ring(queueWorker, now)
	r.p.workSignal.announce(handoff.Repeated(handoff.ItemReady(), ready)...)
	r.p.workSignal.announce(handoff.Repeated(handoff.InPartition(pk), kinds.work-ready)...)
	if kinds.messages {
		r.p.orchSignal.announcePartitions(pk)
	}
}
