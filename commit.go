package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	const op = "AckOrchestrationItem"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	var tooLarge error // the store's 413 that made the plan tighter
	for squeeze := 0; ; squeeze++ {
		err := p.ackPlanned(ctx, op, lock, squeeze, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities)
		if tooLarge != nil && errors.Is(err, ErrRefused) && !errors.Is(err, ErrInvalidLockToken) {
			// The tighter plan cannot hold what the store refused: its
			// answer stands, and it is not ours to call final.
			return tooLarge
		}
		if squeeze == maxCommitSqueeze || !IsRequestEntityTooLarge(err) {
			return err
		}
		p.log.Warn("cdb: the store refused a commit as too large; planning it tighter", "instance", lock.inst.Instance,
			"batch_budget", commitBudgetBytes(squeeze+1), "error", err)
		tooLarge = err
	}
}

// maxCommitSqueeze bounds how often a commit the store refused as too large
// (413: its size accounting differs from ours) is planned again, each time
// with half the batch budget: the last plan's batch holds at most a
// sixteenth of what the first one's did.
const maxCommitSqueeze = 4

// ackPlanned plans a turn's commit with the batch budget halved squeeze
// times, stages what the plan stages, and commits it. It is called, and
// returns, with lock.mu held; it lets go of it while planning.
func (p *CosmosProvider) ackPlanned(ctx context.Context, op string, lock *orchestrationLock, squeeze int, executionID uint64, historyDelta []Event, workerItems, orchestratorItems []WorkItem, metadata ExecutionMetadata, cancelledActivities []ScheduledActivityIdentifier) error {
	if p.nowMs() >= lock.lockedUntil.Load() {
		return refusal(op, "Instance lock expired", ErrInvalidLockToken)
	}
	// Planning a large turn takes CPU time (seconds for megabytes on a
	// loaded machine): the lock's renewals go on meanwhile, or it would
	// expire under the plan.
	view := lock.planningView()
	lock.mu.Unlock()
	plan, err := p.planAck(op, view, squeeze, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelledActivities)
	if p.afterPlanForTest != nil {
		p.afterPlanForTest()
	}
	lock.mu.Lock()
	if err != nil {
		return err
	}
	if lock.done {
		return refusal(op, "Invalid lock token: the lock was acked or abandoned while the ack was planned", ErrInvalidLockToken)
	}
	if len(plan.staged) > 0 {
		// Staging a large turn takes requests of its own: keep the lock
		// for it, so no other dispatcher takes the instance meanwhile and
		// the turn can commit.
		if err := p.stageKeepingLock(ctx, op, lock, plan.staged); err != nil {
			return wrap(op, err)
		}
		if lock.done {
			return refusal(op, "Invalid lock token: the lock was acked or abandoned while the turn was staged", ErrInvalidLockToken)
		}
	}
	// The lock was valid when the ack came; renewals since (during the
	// planning or the staging) gave it a new ETag. The commit is ours only
	// if nobody took the instance meanwhile, which this ETag checks.
	plan.batch.setIfMatch(instanceWrite, lock.inst.ETag)
	known, err := p.commit(ctx, op, lock, plan)
	if err != nil {
		return err
	}
	p.afterCommit(lock, plan)
	if plan.outbox != nil {
		p.outbox.committed(ctx, lock.pk, lock.state.pendingOutboxes, plan.outbox, known)
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
// or, for a large turn (the threshold halved squeeze times), in staged parts
// whose bodies it returns. The parts do not depend on squeeze, so a tighter
// plan of the same ack stages the same documents again.
func historyForCommit(instance, pk string, exec uint64, token string, delta []Event, squeeze int) ([]byte, historyDoc, [][]byte, error) {
	body, d, err := encodeHistory(instance, pk, exec, delta, token)
	if err != nil || len(d.Data) <= stageHistoryAbove>>squeeze {
		return body, d, nil, err
	}
	chunks, err := chunkEvents(delta)
	if err != nil {
		return nil, d, nil, err
	}
	var parts [][]byte
	for i, chunk := range chunks {
		id := "hp|" + token + "|" + strconv.Itoa(i)
		part, err := json.Marshal(historyPart{ID: id, PK: pk, Type: docHistPart, Instance: instance, Exec: exec, Data: chunk, TTL: stagedPartTTL, KV: d.KV, First: d.First})
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
			return nil, fmt.Errorf("event %d is %d bytes encoded; a Cosmos DB document holds %d: %w", e.EventID, len(raw), MaxDocumentBytes, ErrDocumentTooLarge)
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

// stageKeepingLock stages parts while the lock is renewed in the
// background by its timeout whenever half of it is gone, as a fetch keeps
// its lock while it loads (keepingFreshLock): one part of a megabyte on a
// loaded machine can take longer than what is left of a short lock, and a
// renewal that waited for the part to end would find the instance taken.
// It is called, and returns, with lock.mu held; it lets go of it while it
// stages, so the renewals (the background's and the runtime's) can run.
func (p *CosmosProvider) stageKeepingLock(ctx context.Context, op string, lock *orchestrationLock, parts [][]byte) error {
	lock.mu.Unlock()
	defer lock.mu.Lock()
	return p.keepingFreshLock(ctx, op, lock, func() error { return p.stage(ctx, lock.pk, parts) })
}

// stage writes a large turn's history and outbox parts; one written by an
// earlier try of the same ack is fine (409).
func (p *CosmosProvider) stage(ctx context.Context, pk string, parts [][]byte) error {
	for _, part := range parts {
		if _, err := p.container.CreateItem(ctx, NewPartitionKeyString(pk), part, nil); err != nil && !IsConflict(err) {
			return fmt.Errorf("stage part: %w", err)
		}
	}
	return nil
}

// heldOrchestration returns this process's lock for token with its mutex
// held (the caller unlocks), or the error for a token it does not hold.
func (p *CosmosProvider) heldOrchestration(op, token string) (*orchestrationLock, error) {
	lock, ok := p.orchLocks.get(token)
	if !ok {
		return nil, refusal(op, "Invalid lock token", ErrInvalidLockToken)
	}
	lock.mu.Lock()
	if lock.done {
		lock.mu.Unlock()
		return nil, refusal(op, "Invalid lock token: the lock was already acked or abandoned", ErrInvalidLockToken)
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
	newWork     int         // worker items it writes (some maybe through the outbox)
	workVisible time.Time   // when they become visible
	staged      [][]byte    // history and outbox parts to write before the commit (R7)
	historyID   string      // the turn's history document, "" when it has no events
	consumeOnly bool        // deletes the nameless instance document (planConsumeOnly)
}

// instanceWrite is the index of the batch's write of the instance document
// (guarded by the lock's ETag) in every ack plan.
const instanceWrite = 0

// ackWriter collects the documents of one ack besides its history and
// state, and places them: in the batch, or in the outbox (R1).
type ackWriter struct {
	p     *CosmosProvider
	op    string
	pk    string
	token string
	now   int64
	seq   int64 // the next queue item's, from the commit's reserved block
	// visible is when the items it queues become visible: now, or the
	// millisecond of its seqs where those run ahead of this process's
	// clock (seqs it has seen from another), so what one turn queues is
	// visible after what the instance's last turn queued.
	visible int64
	pinned  *uint64      // the instance's pinned version after the turn
	docs    []pendingDoc // for this partition
	remote  []pendingDoc // for other partitions
	// squeeze halves the batch budget that many times (maxCommitSqueeze),
	// for a commit the store refused as too large.
	squeeze int
	// lives addresses the messages it sends (lives.go).
	lives senderLives
}

type pendingDoc struct {
	pk      string
	body    []byte
	upsert  bool
	queued  bool // a message or worker item: marked relayed when an outbox carries it
	message bool // an orchestrator message
	// writer is the own-writes stamp a queue item gets when the batch
	// writes it; one an outbox carries gets none (ownwrites.go).
	writer string
	// role marks a child's start and its instance document, which the
	// relay settles against a deletion under way (deletion.go).
	role string
}

func (p *CosmosProvider) planAck(op string, lock *orchestrationLock, squeeze int, executionID uint64, delta []Event, workerItems, orchItems []WorkItem, md ExecutionMetadata, cancelled []ScheduledActivityIdentifier) (*ackPlan, error) {
	state := lock.state
	existing := map[uint64]bool{}
	if executionID == state.exec {
		existing = state.eventIDs
	}
	if err := checkEventIDs(op, existing, delta); err != nil {
		return nil, err
	}
	if consumesOnly(lock, delta, workerItems, orchItems, md, cancelled) {
		return p.planConsumeOnly(lock)
	}
	now := p.nowMs()
	inst := nextInstanceDoc(lock, executionID, delta, md, now)
	execDoc := nextExecutionDoc(lock, executionID, md, now)
	queued := len(workerItems) + len(orchItems)
	w := &ackWriter{p: p, op: op, pk: lock.pk, token: lock.token, now: now, seq: p.reserveSeqs(queued + 1), pinned: inst.Pinned, squeeze: squeeze, lives: sendingLives(inst)}
	w.visible = sequencedVisibleAt(w.seq, time.UnixMilli(now), 0).UnixMilli()
	inst.Seq = w.seq + int64(queued)
	out, err := placeOutput(&inst, &execDoc, md, lock.token)
	if err != nil {
		return nil, refused(op, err)
	}
	kvWrites, err := planKV(state, &execDoc, inst, lock.pk, lock.token, delta, md, now)
	if err != nil {
		return nil, refused(op, err)
	}
	if executionID == inst.CurrentExec {
		inst.KVMerged = execDoc.KVMerged
	}

	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	instBody, err := json.Marshal(withoutETag(inst))
	if err != nil {
		return nil, Permanent(op, fmt.Sprintf("encode instance: %v", err))
	}
	etag := lock.inst.ETag
	b.ReplaceItem(instanceDocID, instBody, &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, m := range lock.messages {
		consumeItem(b, m, nil)
	}
	var hist historyDoc
	var staged [][]byte
	if len(delta) > 0 {
		body, d, parts, err := historyForCommit(inst.Instance, lock.pk, executionID, lock.token, delta, squeeze)
		if err != nil {
			return nil, refused(op, err)
		}
		hist, staged = d, parts
		b.CreateItem(body, nil)
		for _, id := range d.Parts {
			keepStaged(b, id)
		}
		execDoc.Events += len(delta)
		execDoc.Bytes += d.Bytes
	}
	execDoc.CarryForward = max(execDoc.CarryForward, carryForwardCount(delta))
	out.addTo(b)
	staged = append(staged, out.staged...)
	kvChunks, err := kvWrites.addTo(b)
	if err != nil {
		return nil, refused(op, err)
	}
	staged = append(staged, kvChunks...)
	execBody, err := json.Marshal(execDoc)
	if err != nil {
		return nil, Permanent(op, fmt.Sprintf("encode execution: %v", err))
	}
	b.UpsertItem(execBody, nil)

	plan := &ackPlan{batch: b, inst: inst, staged: staged, historyID: hist.ID}
	if err := w.addWork(workerItems, cancelled, inst.Pinned); err != nil {
		return nil, err
	}
	plan.newWork, plan.workVisible = len(workerItems), time.UnixMilli(w.visible)
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
	outbox, parts, err := w.flush(b, inst.Instance, inst.Rev)
	if err != nil {
		return nil, err
	}
	plan.outbox = outbox
	plan.staged = append(plan.staged, parts...)
	plan.state = nextState(state, inst, executionID, execDoc, delta, hist)
	if plan.state != nil {
		plan.state.kv = kvWrites.state
		if outbox == nil {
			// Outboxes the load saw are still to be ordered before this
			// instance's next outbox.
			plan.state.pendingOutboxes = state.pendingOutboxes
		}
	}
	return plan, nil
}

// consumeItem removes a queue item its holder consumed. A relayed one
// leaves a consumedMarker in its place, so that a relay delivering it again
// gets a 409 instead of creating work that was done.
func consumeItem(b *TransactionalBatch, doc queueDoc, o *TransactionalBatchItemOptions) {
	ttl := doc.ConsumedTTL
	if doc.Relayed {
		ttl = consumedMarkerTTL
	}
	if ttl <= 0 {
		b.DeleteItem(doc.ID, o)
		return
	}
	marker, err := json.Marshal(consumedMarker{ID: doc.ID, PK: doc.PK, Type: docConsumed, Instance: doc.Instance, TTL: ttl})
	if err != nil {
		b.fail(fmt.Errorf("encode consumed marker: %w", err))
		return
	}
	b.ReplaceItem(doc.ID, marker, o)
}

// consumesOnly says a turn only consumes messages of an id that was never
// started (or was deleted): no instance, no history, and the turn names
// nothing and writes nothing, as the runtime acks an Unknown batch.
func consumesOnly(lock *orchestrationLock, delta []Event, workerItems, orchItems []WorkItem, md ExecutionMetadata, cancelled []ScheduledActivityIdentifier) bool {
	s := lock.state
	return !lock.inst.exists() && lock.inst.CurrentExec == 0 && s != nil && len(s.history) == 0 && s.historyError == nil && s.execDoc == nil &&
		len(delta) == 0 && len(workerItems) == 0 && len(orchItems) == 0 && len(cancelled) == 0 &&
		md.OrchestrationName == nil && md.Status == nil
}

// planConsumeOnly is the commit of such a turn: the messages go, and so
// does the nameless instance document the fetch created for them, so that
// messages to ids that never started leave nothing behind. A start or a
// fetch creates the document again when one is needed.
// While other messages of the id are parked (parking.go), the document
// stays, unlocked, so that a start that comes before their deadline still
// brings them into its batch.
func (p *CosmosProvider) planConsumeOnly(lock *orchestrationLock) (*ackPlan, error) {
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	etag := lock.inst.ETag
	inst := lock.inst
	inst.LastAck = lock.token
	stillParked := inst.ParkedUntil > p.nowMs()
	if stillParked {
		inst.LockToken, inst.LockedUntil = "", 0
		body, err := json.Marshal(withoutETag(inst))
		if err != nil {
			return nil, fmt.Errorf("encode instance document: %w", err)
		}
		b.ReplaceItem(instanceDocID, body, &TransactionalBatchItemOptions{IfMatch: &etag})
	} else {
		b.DeleteItem(instanceDocID, &TransactionalBatchItemOptions{IfMatch: &etag})
	}
	for _, m := range lock.messages {
		consumeItem(b, m, nil)
	}
	return &ackPlan{batch: b, inst: inst, consumeOnly: !stillParked}, nil
}

// kvPlan is a turn's KV writes: the turn's KV events go into the delta,
// which needs no document of its own (the turn's history holds them); when
// the execution ends, the delta is merged into the store: each touched
// bucket is written anew in chunks (in the batch while small, staged
// otherwise), its previous chunks and any legacy delta document are
// deleted, and the execution records the last event merged (reference
// §2.3 steps 10 and 11).
type kvPlan struct {
	state   kvState  // after the commit
	deletes []string // documents the commit deletes
	chunks  []kvDoc  // store chunks the commit writes
}

func planKV(state *instanceState, execDoc *executionDoc, inst instanceDoc, pk, token string, delta []Event, md ExecutionMetadata, now int64) (kvPlan, error) {
	kv := state.kv.clone()
	kv.applyEvents(delta, uint64(now))
	plan := kvPlan{state: kv}
	if !isTerminalStatus(md.Status) || len(kv.delta) == 0 && !kv.legacyDelta {
		return plan, nil
	}
	execDoc.KVMerged = lastEventID(state, execDoc.Exec, delta)
	if kv.legacyDelta {
		plan.deletes = append(plan.deletes, kvDeltaID)
		kv.legacyDelta = false
	}
	for _, bucket := range kv.merge() {
		plan.deletes = append(plan.deletes, kv.chunks[bucket]...)
		docs, err := kv.bucketChunks(inst.Instance, pk, token, bucket)
		if err != nil {
			return plan, err
		}
		kv.chunks[bucket] = nil
		for _, d := range docs {
			kv.chunks[bucket] = append(kv.chunks[bucket], d.ID)
		}
		plan.chunks = append(plan.chunks, docs...)
	}
	plan.state = kv
	return plan, nil
}

// addTo adds the plan's writes to the batch: the chunks in it while they
// are small, else staged and made permanent by it; it returns the bodies
// to stage.
func (k kvPlan) addTo(b *TransactionalBatch) ([][]byte, error) {
	for _, id := range k.deletes {
		b.DeleteItem(id, nil)
	}
	bodies := make([][]byte, len(k.chunks))
	total := 0
	for i, c := range k.chunks {
		body, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode KV chunk: %w", err)
		}
		bodies[i], total = body, total+len(body)
	}
	if total <= stageKVAbove {
		for _, body := range bodies {
			b.CreateItem(body, nil)
		}
		return nil, nil
	}
	for i, c := range k.chunks {
		c.TTL = stagedPartTTL
		body, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode KV chunk: %w", err)
		}
		bodies[i] = body
		keepStaged(b, c.ID)
	}
	return bodies, nil
}

// lastEventID is the highest event id of execution exec once delta is
// appended.
func lastEventID(state *instanceState, exec uint64, delta []Event) uint64 {
	var last uint64
	if state.exec == exec {
		for id := range state.eventIDs {
			last = max(last, id)
		}
	}
	for _, e := range delta {
		last = max(last, e.EventID)
	}
	return last
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

// nextInstanceDoc applies a turn to the instance document (its execution,
// metadata, status, output, custom status and pinned version, as duroxide's
// ack does) and releases the lock.
func nextInstanceDoc(lock *orchestrationLock, executionID uint64, delta []Event, md ExecutionMetadata, now int64) instanceDoc {
	inst := lock.inst
	if lock.unparked {
		inst.ParkedUntil = 0 // none is left parked
	}
	if md.OrchestrationName != nil && md.OrchestrationVersion != nil {
		if !inst.exists() {
			inst.Parent = md.ParentInstanceID
			inst.ParentLife = parentLifeOfStart(lock, md.ParentInstanceID)
			inst.CreatedAt = now
		}
		inst.Name = *md.OrchestrationName
		inst.Version = md.OrchestrationVersion
	}
	if executionID > inst.CurrentExec {
		inst.CurrentExec = executionID
		inst.Status, inst.Output, inst.OutputRef, inst.Pinned, inst.CompletedAt = StatusRunning, nil, "", nil, nil
		inst.KVMerged = 0
	}
	if executionID == inst.CurrentExec {
		if inst.Status == "" {
			inst.Status = StatusRunning
		}
		if md.PinnedDuroxideVersion != nil {
			packed := md.PinnedDuroxideVersion.PackedVersion()
			inst.Pinned = &packed
		}
		if md.Status != nil {
			inst.Status, inst.Output, inst.OutputRef = *md.Status, md.Output, ""
			inst.CompletedAt = nil
			if *md.Status != StatusRunning {
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
	inst.LastAck = lock.token
	inst.Rev++
	inst.UpdatedAt = now
	return inst
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
			Exec: executionID, Status: StatusRunning, StartedAt: now,
		}
	}
	if md.PinnedDuroxideVersion != nil {
		packed := md.PinnedDuroxideVersion.PackedVersion()
		d.Pinned = &packed
	}
	if md.Status != nil {
		d.Status, d.Output, d.OutputRef = *md.Status, md.Output, ""
		if *md.Status != StatusRunning {
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
			return refusal(w.op, fmt.Sprintf("worker item is a %s; only ActivityExecute goes to the worker queue", item.Kind()), ErrInvalidInput)
		}
		if dropped[ScheduledActivityIdentifier{Instance: act.Instance, ExecutionID: act.ExecutionID, ActivityID: act.ID}] {
			continue // scheduled and cancelled in the same turn: nothing to do
		}
		body, err := w.p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID), immediateAt(w.visible, w.takeSeq()), "", pinned)
		if err != nil {
			return refused(w.op, err)
		}
		if err := w.fits(body, fmt.Sprintf("the work item of activity %d", act.ID)); err != nil {
			return err
		}
		w.add(instancePartitionKey(act.Instance), pendingDoc{body: body, queued: true, writer: w.p.ownWrites.workWriter(act, w.visible)})
	}
	return nil
}

// fits refuses, before anything is written, a document no Cosmos DB
// document can hold (R6, R7).
func (w *ackWriter) fits(body []byte, what string) error {
	return documentFits(w.op, what, body)
}

func cancelledSet(cancelled []ScheduledActivityIdentifier) map[ScheduledActivityIdentifier]bool {
	set := make(map[ScheduledActivityIdentifier]bool, len(cancelled))
	for _, c := range cancelled {
		set[c] = true
	}
	return set
}

// takeSeq hands out the next seq of the commit's reserved block.
func (w *ackWriter) takeSeq() int64 {
	w.seq++
	return w.seq - 1
}

// addMessage adds an orchestrator item: TimerFired becomes visible at its
// fire time, everything else with the commit's other items.
func (w *ackWriter) addMessage(item WorkItem) (time.Time, error) {
	at := immediateAt(w.visible, w.takeSeq())
	if t, ok := item.(TimerFired); ok {
		at = dueAt(int64(t.FireAtMs), at.seq)
	}
	target := item.InstanceID()
	if err := validateInstanceID(w.op, target); err != nil {
		return time.Time{}, err
	}
	id := "m|o|" + w.token + "|" + strconv.Itoa(len(w.docs)+len(w.remote))
	body, err := w.p.newAddressedMessageDoc(item, id, at, "", w.lives.address(target))
	if err != nil {
		return time.Time{}, refused(w.op, err)
	}
	if err := w.fits(body, fmt.Sprintf("the %s for %q", item.Kind(), target)); err != nil {
		return time.Time{}, err
	}
	pk := instancePartitionKey(target)
	if _, ok := item.(StartOrchestration); ok && pk != w.pk {
		// A child's or detached start brings the child's lock document,
		// as EnqueueForOrchestrator does; delivering it twice is a 409.
		shell, err := w.p.newLockDoc(target, startParent(item))
		if err != nil {
			return time.Time{}, refused(w.op, err)
		}
		w.remote = append(w.remote, pendingDoc{pk: pk, body: shell, role: entryShell})
		w.add(pk, pendingDoc{body: body, queued: true, role: entryStart})
		return time.UnixMilli(at.visibleAt), nil
	}
	writer := ""
	if pk == w.pk {
		writer = w.p.ownWrites.messageWriter(at.visibleAt, pinnedTo(w.pinned))
	}
	w.add(pk, pendingDoc{body: body, queued: true, message: true, writer: writer})
	return time.UnixMilli(at.visibleAt), nil
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
			return refused(w.op, err)
		}
		w.add(instancePartitionKey(c.Instance), pendingDoc{body: body, upsert: true})
	}
	return nil
}

// add places a document: with this partition's, or with the other
// partitions', which only an outbox can write.
func (w *ackWriter) add(pk string, d pendingDoc) {
	d.pk = pk
	if pk != w.pk {
		w.remote = append(w.remote, d)
		return
	}
	w.docs = append(w.docs, d)
}

// Commit sizes (R1, R7). The batch keeps room for its encoding; an outbox
// document holds at most outboxInlineBytes of entries itself (a fetch's load
// reads pending outboxes), and stages the rest in parts.
const (
	commitBatchBytes  = MaxBatchBytes - 32*1024
	batchOpOverhead   = 128 // bytes an operation adds to the batch body besides its document and id
	outboxInlineBytes = 256 * 1024
	outboxRefsReserve = 16 * 1024 // the outbox document's own fields and part names
)

// commitBudgetBytes is the bytes a commit batch may take, halved squeeze
// times for a commit the store refused as too large.
func commitBudgetBytes(squeeze int) int { return commitBatchBytes >> squeeze }

// batchBytes estimates the encoded size of a batch from its operations.
func batchBytes(b *TransactionalBatch) int {
	n := 2
	for _, op := range b.ops {
		n += len(op.ResourceBody) + len(op.ID) + batchOpOverhead
	}
	return n
}

// sizedEntry is an outbox entry with its encoded size in an entries array.
type sizedEntry struct {
	entry outboxEntry
	size  int
}

// outboxLayout is where the documents that leave the batch go: the outbox
// document's own entries, then staged parts.
type outboxLayout struct {
	inline []outboxEntry
	parts  [][]outboxEntry
}

// flush places the turn's documents (R1, R7): this partition's in the batch
// while its operations and bytes allow, the rest, and every other
// partition's, in an outbox document; entries that would make that document
// too large go to staged parts, which the batch makes permanent. It returns
// the outbox document (nil when none is needed) and the parts to stage.
func (w *ackWriter) flush(b *TransactionalBatch, instance string, rev uint64) (*outboxDoc, [][]byte, error) {
	used, budget := batchBytes(b), commitBudgetBytes(w.squeeze)
	if used > budget || b.Len() >= MaxBatchOperations {
		return nil, nil, refusal(w.op, fmt.Sprintf("the turn's history, state and consumed messages take %d operations and %d bytes; a commit batch holds %d and %d",
			b.Len(), used, MaxBatchOperations, budget), ErrBatchTooLarge)
	}
	if len(w.remote) == 0 && b.Len()+len(w.docs) <= MaxBatchOperations && used+opsBytes(w.docs) <= budget {
		w.inline(b, w.docs)
		return nil, nil, nil
	}
	entries, err := w.entries()
	if err != nil {
		return nil, nil, err
	}
	opsFree := MaxBatchOperations - b.Len() - 1 // the outbox document's
	bytesFree := budget - used - outboxRefsReserve - len(instance) - len(w.pk) - batchOpOverhead
	inlineBytes := make([]int, len(w.docs)+1) // of the first k documents
	for i, d := range w.docs {
		inlineBytes[i+1] = inlineBytes[i] + opBytes(d)
	}
	k := 0
	for k < len(w.docs) && k < opsFree && inlineBytes[k+1] <= bytesFree {
		k++
	}
	partCap := w.partCapacity(instance)
	for ; k >= 0; k-- {
		layout, err := w.layout(entries[k:], bytesFree-inlineBytes[k], partCap)
		if err != nil {
			return nil, nil, err
		}
		if k+len(layout.parts) <= opsFree {
			w.inline(b, w.docs[:k])
			return w.writeOutbox(b, instance, rev, layout, slices.ContainsFunc(w.docs[k:], func(d pendingDoc) bool { return d.message }))
		}
	}
	return nil, nil, refusal(w.op, fmt.Sprintf("the turn writes %d documents; even with its outbox staged in parts they need more than a commit batch's %d operations",
		len(w.docs)+len(w.remote), MaxBatchOperations), ErrBatchTooManyOperations)
}

func opBytes(d pendingDoc) int { return len(d.body) + stampBytes(d.writer) + batchOpOverhead }

func opsBytes(docs []pendingDoc) int {
	n := 0
	for _, d := range docs {
		n += opBytes(d)
	}
	return n
}

// inline adds documents to the batch.
func (w *ackWriter) inline(b *TransactionalBatch, docs []pendingDoc) {
	for _, d := range docs {
		body := stampedBody(d.body, d.writer)
		if d.upsert {
			b.UpsertItem(body, nil)
		} else {
			b.CreateItem(body, nil)
		}
	}
}

// entries are the outbox entries of this partition's documents, then the
// other partitions', in the turn's order; queue items are marked relayed.
func (w *ackWriter) entries() ([]sizedEntry, error) {
	all := make([]sizedEntry, 0, len(w.docs)+len(w.remote))
	for _, d := range append(w.docs[:len(w.docs):len(w.docs)], w.remote...) {
		body := d.body
		if d.queued {
			body = relayedBody(body)
		}
		e := outboxEntry{PK: d.pk, Upsert: d.upsert, Doc: body, Role: d.role}
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, Permanent(w.op, fmt.Sprintf("encode outbox entry: %v", err))
		}
		all = append(all, sizedEntry{entry: e, size: len(raw) + 1})
	}
	return all, nil
}

// relayedBody marks an encoded queue document as delivered by an outbox
// (queueDoc.Relayed), without decoding it again.
func relayedBody(body []byte) []byte {
	return append([]byte(`{"relayed":true,`), body[1:]...)
}

// partSlack is what a staged part leaves free of the document limit: the
// service stores system properties beside the bytes sent (_rid, _self,
// _etag, _attachments, _ts) and may count the document differently from
// the client, so a part sized to the byte would be refused.
const partSlack = 8 * 1024

// partCapacity is the entry bytes an outbox part of this instance holds.
func (w *ackWriter) partCapacity(instance string) int {
	empty, _ := json.Marshal(outboxPart{ID: w.partID(99), PK: w.pk, Type: docOutboxPart, Instance: instance, Outbox: "o|" + w.token, TTL: stagedPartTTL})
	return MaxDocumentBytes - len(empty) - partSlack
}

// partID names an outbox part. A tighter plan of the same ack lays its
// entries out differently, so its parts take names of their own; the
// parts of a plan that did not commit expire.
func (w *ackWriter) partID(n int) string {
	if w.squeeze > 0 {
		return "op|" + w.token + "|s" + strconv.Itoa(w.squeeze) + "." + strconv.Itoa(n)
	}
	return "op|" + w.token + "|" + strconv.Itoa(n)
}

// layout puts the first entries that fit in room (at most
// outboxInlineBytes) into the outbox document, and packs the others, in
// order, into parts of at most partCap bytes.
func (w *ackWriter) layout(entries []sizedEntry, room, partCap int) (outboxLayout, error) {
	var l outboxLayout
	i, size := 0, 0
	for room = min(room, outboxInlineBytes); i < len(entries) && size+entries[i].size <= room; i++ {
		size += entries[i].size
		l.inline = append(l.inline, entries[i].entry)
	}
	var cur []outboxEntry
	size = 0
	for _, e := range entries[i:] {
		if e.size > partCap {
			return l, refusal(w.op, fmt.Sprintf("a document for partition %q is %d bytes; with its envelope it fits neither the commit batch nor an outbox part (%d bytes)", e.entry.PK, len(e.entry.Doc), partCap), ErrDocumentTooLarge)
		}
		if len(cur) > 0 && size+e.size > partCap {
			l.parts = append(l.parts, cur)
			cur, size = nil, 0
		}
		cur = append(cur, e.entry)
		size += e.size
	}
	if len(cur) > 0 {
		l.parts = append(l.parts, cur)
	}
	return l, nil
}

// writeOutbox adds the outbox document, and the permanence of its staged
// parts, to the batch; it returns the document and the parts' bodies. self
// says it carries messages for the instance itself (outboxDoc.Self).
func (w *ackWriter) writeOutbox(b *TransactionalBatch, instance string, rev uint64, l outboxLayout, self bool) (*outboxDoc, [][]byte, error) {
	doc := &outboxDoc{ID: "o|" + w.token, PK: w.pk, Type: docOutbox, Instance: instance, CreatedAt: w.now,
		Entries: l.inline, Rev: rev, Owner: w.token, BeatAt: w.now}
	if doc.Entries == nil {
		doc.Entries = []outboxEntry{}
	}
	doc.Self = self
	var staged [][]byte
	for n, entries := range l.parts {
		part := outboxPart{ID: w.partID(n), PK: w.pk, Type: docOutboxPart, Instance: instance, Outbox: doc.ID, Entries: entries, TTL: stagedPartTTL}
		body, err := json.Marshal(part)
		if err != nil {
			return nil, nil, Permanent(w.op, fmt.Sprintf("encode outbox part: %v", err))
		}
		staged = append(staged, body)
		doc.Parts = append(doc.Parts, outboxPartRef{ID: part.ID, Entries: len(entries)})
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, Permanent(w.op, fmt.Sprintf("encode outbox: %v", err))
	}
	b.CreateItem(body, nil)
	for _, ref := range doc.Parts {
		keepStaged(b, ref.ID)
	}
	if n := batchBytes(b); n > MaxBatchBytes {
		return nil, nil, refusal(w.op, fmt.Sprintf("the commit batch would be %d bytes; at most %d are allowed", n, MaxBatchBytes), ErrBatchTooLarge)
	}
	return doc, staged, nil
}

// commit sends the ack's batch and says whether this plan is what committed.
// An unknown outcome (a lost response), or a retry of the ack that finds the
// instance changed, is resolved by ackCommitted (R8): an earlier try of the
// same ack may have committed.
func (p *CosmosProvider) commit(ctx context.Context, op string, lock *orchestrationLock, plan *ackPlan) (bool, error) {
	resp, err := p.container.ExecuteTransactionalBatch(ctx, plan.batch, nil)
	if err != nil {
		if !IsOutcomeUnknown(err) {
			return false, wrap(op, err)
		}
		ok, cerr := p.ackCommitted(ctx, lock, plan)
		if cerr != nil || !ok {
			return false, wrap(op, err) // not committed, or cannot tell yet: the runtime retries
		}
		return true, nil
	}
	if !resp.Success {
		idx, ce, _ := resp.FailedOperation()
		switch {
		case idx == 0 && ce != nil && (ce.StatusCode == http.StatusPreconditionFailed || ce.StatusCode == http.StatusNotFound):
			ok, cerr := p.ackCommitted(ctx, lock, plan)
			if cerr != nil {
				return false, Retryable(op, "the instance changed, and whether an earlier try of this ack committed cannot be told yet: "+cerr.Error())
			}
			if ok {
				return false, nil // an earlier try, whose response was lost, committed
			}
			lock.done = true
			p.orchLocks.remove(lock.token)
			return false, refusal(op, "Instance lock expired: another dispatcher took the instance, or it was deleted", ErrInvalidLockToken)
		case ce != nil && ce.StatusCode == http.StatusConflict:
			return false, refusal(op, "duplicate event ids or items: history is append-only ("+ce.Message+")", ErrDuplicateEvent)
		}
		return false, batchFailure(op, resp)
	}
	plan.inst.ETag = resp.OperationResults[0].ETag
	return true, nil
}

// outcomeReadAttempts bounds the reads that resolve an ack's outcome; a
// transient failure of one is not an answer (R10).
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
		plan.inst.ETag = inst.ETag
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

// afterCommit updates this process's view and hands the outbox to the relay.
func (p *CosmosProvider) afterCommit(lock *orchestrationLock, plan *ackPlan) {
	lock.done = true
	p.orchLocks.remove(lock.token)
	if plan.state != nil {
		p.cache.put(lock.pk, plan.state)
	} else {
		p.cache.drop(lock.pk)
	}
	// Messages announced during the turn waited for the lock to go.
	p.announceDeferred(lock.pk)
	for _, t := range plan.newMessages {
		p.announceMessage(lock.pk, t)
	}
	if plan.newWork > 0 && plan.workVisible.After(p.now()) {
		p.workSignal.notifyAt(plan.workVisible) // seqs ahead of this process's clock
		return
	}
	p.workSignal.announce(repeated(lock.pk, plan.newWork)...)
}

// announceDeferred announces pk's messages that arrived while this process
// held it; call it once the lock is let go.
func (p *CosmosProvider) announceDeferred(pk string) {
	if p.wakeLater.take(pk) {
		p.orchSignal.announce(pk)
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

// AbandonOrchestrationItem releases the lock without committing; the
// messages stay queued, visible after delay.
func (p *CosmosProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "AbandonOrchestrationItem"
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
	p.announceDeferred(lock.pk)
	p.announceMessage(lock.pk, p.now().Add(max(delay, 0)))
	return nil
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
	release := unlockOps()
	if delay > 0 && slices.ContainsFunc(lock.messages, isStartMessage) {
		release.AppendSet("/startHeldUntil", p.now().Add(delay).UnixMilli())
	}
	return p.releaseBatch(ctx, "AbandonOrchestrationItem", lock, release, delay, ignoreAttempt)
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
		if idx, ce, _ := resp.FailedOperation(); idx == 0 && ce != nil && ce.StatusCode == http.StatusPreconditionFailed {
			return refusal(op, "the lock expired and another dispatcher took the instance", ErrInvalidLockToken)
		}
		return batchFailure(op, resp)
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
	return p.renewHeld(ctx, op, lock, extendFor)
}

// renewHeld renews a lock whose mutex the caller holds.
func (p *CosmosProvider) renewHeld(ctx context.Context, op string, lock *orchestrationLock, extendFor time.Duration) error {
	if p.nowMs() >= lock.lockedUntil.Load() {
		return refusal(op, "lock expired or released", ErrInvalidLockToken)
	}
	return p.extendLock(ctx, op, lock, extendFor)
}

// extendLock writes a new expiry for a lock whose mutex the caller holds.
// The write is conditioned on the instance document's ETag, so it succeeds
// only if no other dispatcher locked the instance since, whatever the
// local clock says about the expiry.
func (p *CosmosProvider) extendLock(ctx context.Context, op string, lock *orchestrationLock, extendFor time.Duration) error {
	lockToken := lock.token
	until := renewedUntil(p.nowMs(), extendFor, lock.lockedUntil.Load())
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
			return refusal(op, "the lock was lost", ErrInvalidLockToken)
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
		return refusal(op, "the lock was lost", ErrInvalidLockToken)
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
