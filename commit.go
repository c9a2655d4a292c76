package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Ending an instance lock: the ack commits a turn in exactly one
// transactional batch (R1); abandon and renew are one batch each.

// tombstoneTTL is how long a cancelled activity's tombstone lives, in
// seconds; it only has to outlive the worker that held the activity.
const tombstoneTTL = 24 * 60 * 60

// AckOrchestrationItem commits a turn atomically: the instance document
// (which releases the lock), the consumed messages, the turn's history,
// the execution, new queue items, cancellations, and an outbox document for
// everything that belongs to other partitions or would not fit.
func (p *CosmosProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []Event, workerItems, orchestratorItems []WorkItem, metadata ExecutionMetadata, cancelledActivities []ScheduledActivityIdentifier) error {
	const op = "ack_orchestration_item"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	if p.nowMs() >= lock.lockedUntil.Load() {
		return Permanent(op, "Instance lock expired")
	}
	plan, err := p.planAck(op, lock, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities)
	if err != nil {
		return err
	}
	if err := p.stage(ctx, lock.pk, plan.staged); err != nil {
		return wrap(op, err)
	}
	if err := p.commit(ctx, op, lock, plan); err != nil {
		return err
	}
	p.afterCommit(lock, plan)
	if plan.outbox != nil {
		p.outbox.deliverNow(ctx, *plan.outbox)
	}
	return nil
}

// A turn whose events would crowd the commit batch (R7) writes them in
// parts before the commit. Parts expire unless the commit, which references
// them from the turn's history document, makes them permanent; so a failed
// commit leaves only expiring documents that no history names.
const (
	stageHistoryAbove   = 512 * 1024  // encoded events from which a turn stages them
	maxHistoryPartBytes = 1024 * 1024 // encoded events per part
	stagedPartTTL       = 24 * 60 * 60
)

// historyForCommit is the turn's history document, with its events inline,
// or, for a large turn, in staged parts whose bodies it returns.
func historyForCommit(instance, pk string, exec uint64, token string, delta []Event) ([]byte, historyDoc, [][]byte, error) {
	body, d, err := encodeHistory(instance, pk, exec, delta)
	if err != nil || len(d.Data) <= stageHistoryAbove {
		return body, d, nil, err
	}
	chunks, err := chunkEvents(delta)
	if err != nil {
		return nil, d, nil, err
	}
	var parts [][]byte
	for i, chunk := range chunks {
		id := "hp|" + token + "|" + strconv.Itoa(i)
		part, err := json.Marshal(historyPart{ID: id, PK: pk, Type: docHistPart, Instance: instance, Exec: exec, Data: chunk, TTL: stagedPartTTL})
		if err != nil {
			return nil, d, nil, err
		}
		parts = append(parts, part)
		d.Parts = append(d.Parts, id)
	}
	d.Data = ""
	body, err = json.Marshal(d)
	return body, d, parts, err
}

// chunkEvents splits a delta's encoded events into JSON arrays of at most
// maxHistoryPartBytes, refusing an event no document can hold.
func chunkEvents(delta []Event) ([]string, error) {
	var chunks []string
	var cur []byte
	for _, e := range delta {
		raw, err := MarshalEvent(e)
		if err != nil {
			return nil, fmt.Errorf("encode event %d: %w", e.EventID, err)
		}
		if len(raw) > MaxDocumentBytes-64*1024 {
			return nil, fmt.Errorf("event %d is %d bytes encoded; a Cosmos DB document holds %d", e.EventID, len(raw), MaxDocumentBytes)
		}
		if len(cur) > 0 && len(cur)+len(raw)+2 > maxHistoryPartBytes {
			chunks = append(chunks, string(append(cur, ']')))
			cur = nil
		}
		if len(cur) == 0 {
			cur = append(cur, '[')
		} else {
			cur = append(cur, ',')
		}
		cur = append(cur, raw...)
	}
	if len(cur) > 0 {
		chunks = append(chunks, string(append(cur, ']')))
	}
	return chunks, nil
}

// stage writes a large turn's history parts; one written by an earlier try
// of the same ack is fine (409).
func (p *CosmosProvider) stage(ctx context.Context, pk string, parts [][]byte) error {
	for _, part := range parts {
		if _, err := p.container.CreateItem(ctx, NewPartitionKeyString(pk), part, nil); err != nil && !IsConflict(err) {
			return fmt.Errorf("stage history part: %w", err)
		}
	}
	return nil
}

// heldOrchestration returns this process's lock for token with its mutex
// held (the caller unlocks), or the error for a token it does not hold.
func (p *CosmosProvider) heldOrchestration(op, token string) (*orchestrationLock, error) {
	lock, ok := p.orchLocks.get(token)
	if !ok {
		return nil, Permanent(op, "Invalid lock token")
	}
	lock.mu.Lock()
	if lock.done {
		lock.mu.Unlock()
		return nil, Permanent(op, "Invalid lock token: the lock was already acked or abandoned")
	}
	return lock, nil
}

// ackPlan is a turn's commit, ready to send.
type ackPlan struct {
	batch       *TransactionalBatch
	inst        instanceDoc
	state       *instanceState
	outbox      *outboxDoc
	newMessages []time.Time // visibility of messages this commit writes for the instance itself
	newWork     bool
	staged      [][]byte // history parts to write before the commit (R7)
}

// ackWriter collects the batch operations of one ack, folding what would
// push the batch past its operation limit into the outbox (R1).
type ackWriter struct {
	p      *CosmosProvider
	op     string
	pk     string
	token  string
	now    int64
	fixed  int // operations that must be in the batch
	docs   []pendingDoc
	outbox []outboxEntry
	remote []outboxEntry
}

type pendingDoc struct {
	body    []byte
	upsert  bool
	message bool // an orchestrator message (else a worker item or tombstone)
}

func (p *CosmosProvider) planAck(op string, lock *orchestrationLock, executionID uint64, delta []Event, workerItems, orchItems []WorkItem, md ExecutionMetadata, cancelled []ScheduledActivityIdentifier) (*ackPlan, error) {
	state := lock.state
	existing := map[uint64]bool{}
	if executionID == state.exec {
		existing = state.eventIDs
	}
	if err := checkEventIDs(op, existing, delta); err != nil {
		return nil, err
	}
	now := p.nowMs()
	inst := nextInstanceDoc(lock, executionID, delta, md, now)
	execDoc := nextExecutionDoc(lock, executionID, md, now)
	w := &ackWriter{p: p, op: op, pk: lock.pk, token: lock.token, now: now}

	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	instBody, err := json.Marshal(withoutETag(inst))
	if err != nil {
		return nil, Permanent(op, fmt.Sprintf("encode instance: %v", err))
	}
	etag := lock.inst.ETag
	b.ReplaceItem(instanceDocID, instBody, &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, m := range lock.messages {
		b.DeleteItem(m.ID, nil)
	}
	var hist historyDoc
	var staged [][]byte
	if len(delta) > 0 {
		body, d, parts, err := historyForCommit(inst.Instance, lock.pk, executionID, lock.token, delta)
		if err != nil {
			return nil, Permanent(op, err.Error())
		}
		hist, staged = d, parts
		b.CreateItem(body, nil)
		for _, id := range d.Parts {
			var keep PatchOperations
			keep.AppendSet("/ttl", -1) // the commit makes the staged part permanent
			b.PatchItem(id, keep, nil)
		}
		execDoc.Events += len(delta)
		execDoc.Bytes += d.Bytes
	}
	execDoc.CarryForward = max(execDoc.CarryForward, carryForwardCount(delta))
	kv, err := writeKV(b, state, inst, lock.pk, delta, md, now)
	if err != nil {
		return nil, Permanent(op, err.Error())
	}
	execBody, err := json.Marshal(execDoc)
	if err != nil {
		return nil, Permanent(op, fmt.Sprintf("encode execution: %v", err))
	}
	b.UpsertItem(execBody, nil)
	w.fixed = b.Len() + 1 // and the outbox document, should there be one

	plan := &ackPlan{batch: b, inst: inst, staged: staged}
	if err := w.addWork(workerItems, cancelled, inst.Pinned); err != nil {
		return nil, err
	}
	plan.newWork = len(workerItems) > 0
	for _, item := range orchItems {
		visible, err := w.addMessage(item)
		if err != nil {
			return nil, err
		}
		if item.InstanceID() == inst.Instance {
			plan.newMessages = append(plan.newMessages, visible)
		}
	}
	if err := w.addCancellations(cancelled, workerItems); err != nil {
		return nil, err
	}
	outbox, err := w.flush(b, inst.Instance)
	if err != nil {
		return nil, err
	}
	plan.outbox = outbox
	plan.state = nextState(state, inst, executionID, execDoc, delta, hist)
	if plan.state != nil {
		plan.state.kv = kv
	}
	return plan, nil
}

// writeKV adds the turn's KV documents to the batch: the delta when the turn
// changed it, and, when the execution ends, the store buckets the merge
// touched (reference §2.3 steps 10 and 11).
func writeKV(b *TransactionalBatch, state *instanceState, inst instanceDoc, pk string, delta []Event, md ExecutionMetadata, now int64) (kvState, error) {
	kv := state.kv.clone()
	changed := kv.applyEvents(delta, uint64(now))
	var buckets []int
	if isTerminalStatus(md.Status) && len(kv.delta) > 0 {
		buckets = kv.merge()
		changed = true
	}
	for _, bucket := range buckets {
		body, err := json.Marshal(kv.bucketDoc(inst.Instance, pk, bucket))
		if err != nil {
			return kv, fmt.Errorf("encode KV bucket: %w", err)
		}
		b.UpsertItem(body, nil)
	}
	if changed {
		body, err := json.Marshal(kv.deltaDoc(inst.Instance, pk))
		if err != nil {
			return kv, fmt.Errorf("encode KV delta: %w", err)
		}
		b.UpsertItem(body, nil)
	}
	return kv, nil
}

// carryForwardCount is the number of carry-forward events of the delta's
// OrchestrationStarted.
func carryForwardCount(delta []Event) int {
	for _, e := range delta {
		if s, ok := e.Kind.(OrchestrationStarted); ok {
			return len(s.CarryForwardEvents)
		}
	}
	return 0
}

func withoutETag(d instanceDoc) instanceDoc {
	d.ETag = ""
	return d
}

// nextInstanceDoc applies a turn to the instance document (reference §2.3
// steps 3, 5, 6, 8, 9) and releases the lock.
func nextInstanceDoc(lock *orchestrationLock, executionID uint64, delta []Event, md ExecutionMetadata, now int64) instanceDoc {
	inst := lock.inst
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		if !inst.exists() {
			inst.Parent = md.ParentInstanceID
			inst.CreatedAt = now
		}
		inst.Name = *md.OrchestrationName
		inst.Version = md.OrchestrationVersion
	}
	if executionID > inst.CurrentExec {
		inst.CurrentExec = executionID
		inst.Status, inst.Output, inst.Pinned, inst.CompletedAt = "Running", nil, nil, nil
	}
	if executionID == inst.CurrentExec {
		if inst.Status == "" {
			inst.Status = "Running"
		}
		if md.PinnedDuroxideVersion != nil {
			packed := md.PinnedDuroxideVersion.PackedVersion()
			inst.Pinned = &packed
		}
		if md.Status != nil {
			inst.Status, inst.Output = *md.Status, md.Output
			inst.CompletedAt = nil
			if *md.Status != "Running" {
				completed := now
				inst.CompletedAt = &completed
			}
		}
	}
	if status, ok := lastCustomStatus(delta); ok {
		inst.CustomStatus = status
		inst.CustomVersion++
	}
	inst.LockToken, inst.LockedUntil = "", 0
	inst.Consumed = rememberConsumed(inst.Consumed, lock.messages)
	inst.LastAck = lock.token
	inst.Rev++
	inst.UpdatedAt = now
	return inst
}

// maxConsumed bounds the relayed message ids an instance remembers: enough
// for the turns between a delivery and the reconciler's next pass.
const maxConsumed = 64

// rememberConsumed adds the relayed messages of a committed batch to the
// instance's memory of consumed ids, keeping the newest maxConsumed.
func rememberConsumed(consumed []string, batch []queueDoc) []string {
	for _, m := range batch {
		if isRelayed(m.ID) {
			consumed = append(consumed, m.ID)
		}
	}
	if len(consumed) > maxConsumed {
		consumed = append([]string(nil), consumed[len(consumed)-maxConsumed:]...)
	}
	return consumed
}

// isRelayed says a message id was written by a commit (and so may be
// delivered by a relay, and delivered again after a crash).
func isRelayed(id string) bool {
	return strings.HasPrefix(id, "m|o|") || strings.HasPrefix(id, "m|w|")
}

// lastCustomStatus is the last CustomStatusUpdated of the delta.
func lastCustomStatus(delta []Event) (*string, bool) {
	var status *string
	found := false
	for _, e := range delta {
		if u, ok := e.Kind.(CustomStatusUpdated); ok {
			status, found = u.Status, true
		}
	}
	return status, found
}

// nextExecutionDoc is the execution document after the turn, created when
// the execution is new, never resetting a stored status.
func nextExecutionDoc(lock *orchestrationLock, executionID uint64, md ExecutionMetadata, now int64) executionDoc {
	var d executionDoc
	if executionID == lock.state.exec && lock.state.execDoc != nil {
		d = *lock.state.execDoc
	} else {
		d = executionDoc{
			ID: executionDocID(executionID), PK: lock.pk, Type: docExecution, Instance: lock.inst.Instance,
			Exec: executionID, Status: "Running", StartedAt: now,
		}
	}
	if md.PinnedDuroxideVersion != nil {
		packed := md.PinnedDuroxideVersion.PackedVersion()
		d.Pinned = &packed
	}
	if md.Status != nil {
		d.Status, d.Output = *md.Status, md.Output
		if *md.Status != "Running" {
			completed := now
			d.CompletedAt = &completed
		}
	}
	return d
}

// nextState is the cached state after the commit, so this process's next
// fetch of the instance needs no load.
func nextState(prev *instanceState, inst instanceDoc, executionID uint64, execDoc executionDoc, delta []Event, hist historyDoc) *instanceState {
	s := &instanceState{commit: inst.LastAck, exec: inst.CurrentExec, execDoc: &execDoc, eventIDs: map[uint64]bool{}}
	if executionID != inst.CurrentExec {
		return nil // a turn on an older execution: let the next fetch load
	}
	if executionID == prev.exec {
		s.history = append(append([]Event(nil), prev.history...), delta...)
		s.historyError = prev.historyError
		for id := range prev.eventIDs {
			s.eventIDs[id] = true
		}
	} else {
		s.history = append([]Event(nil), delta...)
	}
	for _, id := range hist.EventIDs {
		s.eventIDs[id] = true
	}
	if s.historyError != nil {
		s.history = nil
	}
	sortEvents(s.history)
	return s
}

// addWork adds the turn's new worker items.
func (w *ackWriter) addWork(items []WorkItem, cancelled []ScheduledActivityIdentifier, pinned *uint64) error {
	dropped := cancelledSet(cancelled)
	for _, item := range items {
		act, ok := item.(ActivityExecute)
		if !ok {
			return Permanent(w.op, fmt.Sprintf("worker item is a %s; only ActivityExecute goes to the worker queue", item.Kind()))
		}
		if dropped[ScheduledActivityIdentifier{Instance: act.Instance, ExecutionID: act.ExecutionID, ActivityID: act.ID}] {
			continue // scheduled and cancelled in the same turn: nothing to do
		}
		body, err := w.p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID), w.now)
		if err != nil {
			return Permanent(w.op, err.Error())
		}
		w.add(instancePartitionKey(act.Instance), pendingDoc{body: body})
	}
	return nil
}

func cancelledSet(cancelled []ScheduledActivityIdentifier) map[ScheduledActivityIdentifier]bool {
	set := make(map[ScheduledActivityIdentifier]bool, len(cancelled))
	for _, c := range cancelled {
		set[c] = true
	}
	return set
}

// addMessage adds an orchestrator item: TimerFired becomes visible at its
// fire time, everything else now.
func (w *ackWriter) addMessage(item WorkItem) (time.Time, error) {
	visible := w.now
	if t, ok := item.(TimerFired); ok {
		visible = int64(t.FireAtMs)
	}
	target := item.InstanceID()
	if err := validateInstanceID(w.op, target); err != nil {
		return time.Time{}, err
	}
	id := "m|o|" + w.token + "|" + strconv.Itoa(len(w.docs)+len(w.remote))
	body, err := w.p.newMessageDoc(item, id, visible)
	if err != nil {
		return time.Time{}, Permanent(w.op, err.Error())
	}
	pk := instancePartitionKey(target)
	if _, ok := item.(StartOrchestration); ok && pk != w.pk {
		// A child's or detached start brings the child's lock document,
		// as EnqueueForOrchestrator does; delivering it twice is a 409.
		shell, err := w.p.newLockDoc(target)
		if err != nil {
			return time.Time{}, Permanent(w.op, err.Error())
		}
		w.remote = append(w.remote, outboxEntry{PK: pk, Doc: shell})
	}
	w.add(pk, pendingDoc{body: body, message: true})
	return time.UnixMilli(visible), nil
}

// addCancellations overwrites each cancelled activity's worker item with a
// tombstone: an upsert succeeds whether the item is queued, held by a
// worker (whose renew and ack then fail: the cancellation signal) or
// already gone. Activities scheduled in this same turn were never written.
func (w *ackWriter) addCancellations(cancelled []ScheduledActivityIdentifier, scheduled []WorkItem) error {
	fresh := map[ScheduledActivityIdentifier]bool{}
	for _, item := range scheduled {
		if act, ok := item.(ActivityExecute); ok {
			fresh[ScheduledActivityIdentifier{Instance: act.Instance, ExecutionID: act.ExecutionID, ActivityID: act.ID}] = true
		}
	}
	for _, c := range cancelled {
		if fresh[c] || c.Instance == "" {
			continue
		}
		body, err := json.Marshal(queueDoc{
			ID: workDocID(c.ExecutionID, c.ActivityID), PK: instancePartitionKey(c.Instance), Type: docWorkGone,
			Instance: c.Instance, Exec: c.ExecutionID, Activity: c.ActivityID, TTL: tombstoneTTL,
		})
		if err != nil {
			return Permanent(w.op, err.Error())
		}
		w.add(instancePartitionKey(c.Instance), pendingDoc{body: body, upsert: true})
	}
	return nil
}

// add places a document: in the batch when it belongs to this partition,
// otherwise in the outbox.
func (w *ackWriter) add(pk string, d pendingDoc) {
	if pk != w.pk {
		w.remote = append(w.remote, outboxEntry{PK: pk, Upsert: d.upsert, Doc: d.body})
		return
	}
	w.docs = append(w.docs, d)
}

// flush writes the local documents into the batch, folding those beyond the
// batch's operation limit into the outbox, and adds the outbox document.
func (w *ackWriter) flush(b *TransactionalBatch, instance string) (*outboxDoc, error) {
	room := MaxBatchOperations - w.fixed
	inline := w.docs
	if len(inline) > room {
		inline = w.docs[:room]
		for _, d := range w.docs[room:] {
			w.outbox = append(w.outbox, outboxEntry{PK: w.pk, Upsert: d.upsert, Doc: d.body})
		}
	}
	for _, d := range inline {
		if d.upsert {
			b.UpsertItem(d.body, nil)
		} else {
			b.CreateItem(d.body, nil)
		}
	}
	entries := append(w.outbox, w.remote...)
	if len(entries) == 0 {
		return nil, nil
	}
	doc := &outboxDoc{ID: "o|" + w.token, PK: w.pk, Type: docOutbox, Instance: instance, CreatedAt: w.now, Entries: entries}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, Permanent(w.op, err.Error())
	}
	b.CreateItem(body, nil)
	return doc, nil
}

// commit sends the ack's batch. A lost response is resolved by reading the
// instance document: LastAck names the commit that wrote it (R8).
func (p *CosmosProvider) commit(ctx context.Context, op string, lock *orchestrationLock, plan *ackPlan) error {
	resp, err := p.container.ExecuteTransactionalBatch(ctx, plan.batch, nil)
	if err != nil {
		if !IsOutcomeUnknown(err) {
			return wrap(op, err)
		}
		inst, rerr := p.readInstanceLatest(ctx, lock.pk)
		if rerr != nil || inst == nil || inst.LastAck != lock.token {
			return wrap(op, err) // not committed (or cannot tell yet): the runtime retries
		}
		plan.inst.ETag = inst.ETag
		return nil
	}
	if !resp.Success {
		idx, ce, _ := resp.FailedOperation()
		switch {
		case idx == 0 && ce != nil && (ce.StatusCode == http.StatusPreconditionFailed || ce.StatusCode == http.StatusNotFound):
			lock.done = true
			p.orchLocks.remove(lock.token)
			return Permanent(op, "Instance lock expired: another dispatcher took the instance, or it was deleted")
		case ce != nil && ce.StatusCode == http.StatusConflict:
			return Permanent(op, "duplicate event ids or items: history is append-only ("+ce.Message+")")
		}
		return batchFailure(op, resp)
	}
	plan.inst.ETag = resp.OperationResults[0].ETag
	return nil
}

// afterCommit updates this process's view and hands the outbox to the relay.
func (p *CosmosProvider) afterCommit(lock *orchestrationLock, plan *ackPlan) {
	lock.done = true
	p.orchLocks.remove(lock.token)
	if plan.state != nil {
		p.cache.put(lock.pk, plan.state)
	} else {
		p.cache.drop(lock.pk)
	}
	// The released instance may hold messages that arrived during the turn.
	p.orchSignal.notify()
	for _, t := range plan.newMessages {
		p.announceMessage(t)
	}
	if plan.newWork {
		p.workSignal.notify()
	}
}

// AbandonOrchestrationItem releases the lock without committing; the
// messages stay queued, visible after delay.
func (p *CosmosProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	if err := p.writeAbandon(ctx, lock, delay, ignoreAttempt); err != nil {
		return wrap(op, err)
	}
	lock.done = true
	p.orchLocks.remove(lockToken)
	p.announceMessage(p.now().Add(max(delay, 0)))
	return nil
}

// writeAbandon is the abandon batch: free the instance, and make the locked
// messages visible again (after delay), giving back an attempt if asked.
func (p *CosmosProvider) writeAbandon(ctx context.Context, lock *orchestrationLock, delay time.Duration, ignoreAttempt bool) error {
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	ops := unlockOps()
	etag := lock.inst.ETag
	b.PatchItem(instanceDocID, ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	visibleAt := p.now().Add(max(delay, 0)).UnixMilli()
	for _, m := range lock.messages {
		mops := unlockOps()
		if delay > 0 {
			mops.AppendSet("/visibleAt", visibleAt)
		}
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
		if idx, ce, _ := resp.FailedOperation(); idx == 0 && ce != nil && ce.StatusCode == http.StatusPreconditionFailed {
			return Permanent("abandon_orchestration_item", "the lock expired and another dispatcher took the instance")
		}
		return batchFailure("abandon_orchestration_item", resp)
	}
	return nil
}

// RenewOrchestrationItemLock extends a lock that is still valid: one batch
// that PATCHes the instance document (If-Match) and each locked message. A
// renewal whose outcome is unknown (a lost response, a timeout), or that
// meets an instance ETag it did not expect (a renewal of ours whose
// response was lost), is resolved by reading the instance document back:
// unchanged but for our renewal, with our token, the lock is ours and its
// ETag is adopted (R8, R10); the batch is atomic, so the messages agree.
func (p *CosmosProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	now := p.nowMs()
	if now >= lock.lockedUntil.Load() {
		return Permanent(op, "lock expired or released")
	}
	until := now + extendFor.Milliseconds()
	for range maxRenewalTries {
		resp, err := p.container.ExecuteTransactionalBatch(ctx, renewalBatch(p.container, lock, until), nil)
		switch {
		case err == nil && resp.Success:
			lock.inst.ETag = resp.OperationResults[0].ETag
			lock.inst.LockedUntil = until
			lock.lockedUntil.Store(until)
			return nil
		case err != nil && !IsOutcomeUnknown(err):
			return wrap(op, err)
		case err == nil && !instanceETagFailed(resp):
			lock.done = true
			p.orchLocks.remove(lockToken)
			return Permanent(op, "the lock was lost")
		}
		applied, err := p.readBackInstance(ctx, op, lock, until)
		if err != nil {
			return err
		}
		if applied {
			return nil
		}
	}
	return Retryable(op, "the lock renewal did not apply; try again")
}

// renewalBatch extends the instance lock and its messages' locks.
func renewalBatch(cc *ContainerClient, lock *orchestrationLock, until int64) *TransactionalBatch {
	b := cc.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	var ops PatchOperations
	ops.AppendSet("/lockedUntil", until)
	etag := lock.inst.ETag
	b.PatchItem(instanceDocID, ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, m := range lock.messages {
		var mops PatchOperations
		mops.AppendSet("/lockedUntil", until)
		b.PatchItem(m.ID, mops, nil)
	}
	return b
}

// instanceETagFailed says a renewal batch failed on the instance document's
// If-Match alone.
func instanceETagFailed(resp TransactionalBatchResponse) bool {
	idx, ce, _ := resp.FailedOperation()
	return idx == 0 && ce != nil && ce.StatusCode == http.StatusPreconditionFailed
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
		lock.done = true
		p.orchLocks.remove(lock.token)
		return Permanent(op, "the lock was lost")
	}
	resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), instanceDocID)
	if IsNotFound(err) {
		return false, lost()
	}
	if err != nil {
		return false, Retryable(op, "could not tell whether the lock renewal applied: "+err.Error())
	}
	var doc instanceDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return false, Retryable(op, "could not read the instance back: "+err.Error())
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
