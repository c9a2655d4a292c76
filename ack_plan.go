package cdb

// Planning an ack: the documents a turn writes (the instance, its execution,
// history, state, KV entries, consumed messages) and the batch that writes
// them.

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// ackPlan is a turn's commit, ready to send.
type ackPlan struct {
	batch       *TransactionalBatch
	inst        instanceDoc
	state       *instanceState
	outbox      *outboxDoc
	newMessages []time.Time // visibility of messages this commit writes for the instance itself
	newWork     int         // worker items it writes (some maybe through the outbox)
	sessions    []string    // the sessions of those that name one, one an item (sessionwork.go)
	workVisible time.Time   // when they become visible
	staged      [][]byte    // history and outbox parts staged before the commit, so it stays one batch
	historyID   string      // the turn's history document, "" when it has no events
	consumeOnly bool        // deletes the nameless instance document (planConsumeOnly)
	// eager are the worker items the batch writes locked to this process,
	// reservation what it reserved of the fetches for them (handover.go).
	eager       []eagerWrite
	reservation *handoff.Reservation[*workLock]
	// cancels are the worker items the batch tombstones; lockable those
	// some try of the ack may have written locked (ackWriter.lockable).
	cancels  []workRef
	lockable []*workLock
	// chain is the lock the commit keeps on its instance (handover_chains.go), nil
	// when it releases it.
	chain *orchestrationLock
	// found is the instance document as a read found this ack committed,
	// when its answer did not tell (ackCommitted), with the lock some try
	// of the ack left on it.
	found *instanceDoc
}

// itemSessions are the sessions the activities among items name, one an
// item.
func itemSessions(items []WorkItem) []string {
	var sessions []string
	for _, item := range items {
		if act, ok := item.(ActivityExecuteMessage); ok && act.SessionID != nil {
			sessions = append(sessions, *act.SessionID)
		}
	}
	return sessions
}

// foundChained says the instance document a read found this ack committed
// carries the chain this plan would keep: whichever try committed, the
// instance is held under the plan's chain token.
func (plan *ackPlan) foundChained() bool {
	return plan.chain != nil && plan.found != nil && plan.found.LockToken == plan.chain.token
}

// eagerLocks are the locks of the items the batch wrote locked to this
// process.
func (plan *ackPlan) eagerLocks() []*workLock {
	locks := make([]*workLock, len(plan.eager))
	for i, e := range plan.eager {
		locks[i] = e.lock
	}
	return locks
}

// instanceWrite is the index of the batch's write of the instance document
// (guarded by the lock's ETag) in every ack plan.
const instanceWrite = 0

// planAck plans req's commit on lock with the batch budget halved squeeze
// times; the worker items it locks for this process's fetches are taken
// from reservation.
func (p *CosmosProvider) planAck(lock *orchestrationLock, req *ackRequest, squeeze int, reservation *handoff.Reservation[*workLock]) (*ackPlan, error) {
	op, executionID, delta, md := req.op, req.executionID, req.delta, req.metadata
	workerItems, orchItems, cancelled := req.workerItems, req.orchItems, req.cancelled
	state := lock.state
	existing := map[uint64]bool{}
	if executionID == state.exec {
		existing = state.eventIDs
	}
	if err := checkEventIDs(op, existing, delta); err != nil {
		return nil, err
	}
	if consumesOnly(lock, delta, workerItems, orchItems, md, cancelled) {
		if lock.start != nil {
			return nil, refuse(op, "the first turn of a start writes nothing: the start is written the usual way", ErrInvalidLockToken)
		}
		return p.planConsumeOnly(lock)
	}
	now := p.nowMs()
	inst := nextInstanceDoc(lock, executionID, delta, md, now, p.cfg.Retention)
	execDoc := nextExecutionDoc(lock, executionID, md, now)
	queued := len(workerItems) + len(orchItems)
	w := &ackWriter{p: p, op: op, pk: lock.pk, token: lock.token, now: now, seq: p.reserveSeqs(queued + 1), pinned: inst.Pinned, squeeze: squeeze,
		lives: sendingLives(inst), orch: inst.Name, reservation: reservation}
	w.visible = sequencedVisibleAt(w.seq, time.UnixMilli(now), 0).UnixMilli()
	inst.Seq = w.seq + int64(queued)
	out, err := placeOutput(&inst, &execDoc, md, lock.token)
	if err != nil {
		return nil, refuse(op, "", err)
	}
	kvWrites, err := planKV(state, &execDoc, inst, lock.pk, lock.token, delta, md, now)
	if err != nil {
		return nil, refuse(op, "", err)
	}
	if executionID == inst.CurrentExec {
		inst.KVMerged = execDoc.KVMerged
	}

	// The turn's own documents, which follow the instance document in the
	// commit batch; that one is decided (kept or released) once they are
	// placed, and written first.
	writes := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	if lock.start == nil {
		for _, m := range lock.messages {
			consumeItem(writes, m, nil)
		}
	}
	var hist historyDoc
	var staged [][]byte
	if len(delta) > 0 {
		body, d, parts, err := historyForCommit(inst.Instance, lock.pk, executionID, lock.token, delta, squeeze)
		if err != nil {
			return nil, refuse(op, "", err)
		}
		hist, staged = d, parts
		writes.CreateItem(body, nil)
		for _, id := range d.Parts {
			keepStaged(writes, id)
		}
		execDoc.Events += len(delta)
		execDoc.Bytes += d.Bytes
	}
	execDoc.CarryForward = max(execDoc.CarryForward, carryForwardCount(delta))
	out.addTo(writes)
	staged = append(staged, out.staged...)
	kvChunks, err := kvWrites.addTo(writes)
	if err != nil {
		return nil, refuse(op, "", err)
	}
	staged = append(staged, kvChunks...)
	execBody, err := json.Marshal(execDoc)
	if err != nil {
		return nil, refuse(op, "encode execution", err)
	}
	writes.UpsertItem(execBody, nil)

	if err := w.addWork(workerItems, cancelled, inst.Pinned); err != nil {
		return nil, err
	}
	newMessages := []time.Time(nil)
	for _, item := range orchItems {
		visible, err := w.addMessage(item)
		if err != nil {
			return nil, err
		}
		if item.InstanceID() == inst.Instance {
			newMessages = append(newMessages, visible)
		}
	}
	if err := w.addCancellations(cancelled, workerItems); err != nil {
		return nil, err
	}

	kept, chains := inst, len(staged) == 0 && p.mayChain(lock, inst, w)
	if chains {
		kept = chainedInstance(inst, lock, p.lockUntil(p.chainLockFor(lock.timeout)))
	}
	instBody, err := json.Marshal(withoutETag(kept))
	if err != nil {
		return nil, refuse(op, "encode instance", err)
	}
	place, err := w.place(inst.Instance, writes.Len()+1, writes.encodedBytes()+len(instBody)+len(instanceDocID)+batchOpOverhead)
	if err != nil {
		return nil, err
	}
	if chains && place.outbox {
		// A turn with an outbox is a large one, whose relay this process
		// does not wait for: it releases its instance.
		if instBody, err = json.Marshal(withoutETag(inst)); err != nil {
			return nil, refuse(op, "encode instance", err)
		}
		kept, chains = inst, false
	}

	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	if lock.start != nil {
		// A start not written yet: its first turn creates the instance,
		// and its message was never stored (handover_starts.go).
		b.CreateItem(instBody, nil)
	} else {
		etag := lock.inst.ETag
		b.ReplaceItem(instanceDocID, instBody, &TransactionalBatchItemOptions{IfMatch: &etag})
	}
	b.append(writes)
	outbox, parts, err := w.write(b, place, inst.Instance, inst.Rev)
	if err != nil {
		return nil, err
	}
	plan := &ackPlan{batch: b, inst: kept, staged: append(staged, parts...), historyID: hist.ID, outbox: outbox, newMessages: newMessages,
		newWork: len(workerItems), sessions: itemSessions(workerItems), workVisible: time.UnixMilli(w.visible)}
	plan.state = nextState(state, inst, executionID, execDoc, delta, hist)
	if plan.state != nil {
		plan.state.kv = kvWrites.state
		if outbox == nil {
			// Outboxes the load saw are still to be ordered before this
			// instance's next outbox.
			plan.state.pendingOutboxes = state.pendingOutboxes
		}
	}
	plan.eager, plan.reservation, plan.cancels, plan.lockable = w.locked, reservation, w.cancels, w.lockable
	if chains {
		plan.chain = chainLock(lock, kept)
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
	inst.Parked = nil
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
// deleted, and the execution records the last event merged. duroxide's ack
// merges likewise when an execution completes, fails or continues as new.
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
// ack does) and releases the lock. A turn that finishes the instance
// records when it leaves (retention.go).
func nextInstanceDoc(lock *orchestrationLock, executionID uint64, delta []Event, md ExecutionMetadata, now int64, retention time.Duration) instanceDoc {
	inst := lock.inst
	inst.Parked = nil // a committed turn ends a park (parkrecord.go)
	if inst.Trace.IsZero() {
		inst.Trace = startTraceOfLock(lock) // a lock document made before its start
	}
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
	inst.retainFrom(now, retention)
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
