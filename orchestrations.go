package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The orchestrator queue: enqueue, fetch (candidate query, lock batch, load),
// ack (one batch), abandon and renew. ARCHITECTURE.md lists the requests of
// each.

// EnqueueForOrchestrator writes one message into the target instance's
// partition, visible after delay. It never creates the instance.
func (p *CosmosProvider) EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if item == nil {
		return Permanent(op, "work item is nil")
	}
	if _, ok := item.(ActivityExecute); ok {
		return Permanent(op, "ActivityExecute belongs on the worker queue (use EnqueueForWorker)")
	}
	instance := item.InstanceID()
	if err := validateInstanceID(op, instance); err != nil {
		return err
	}
	visibleAt := p.now().Add(max(delay, 0))
	doc, err := p.newMessageDoc(item, "m|"+newLockToken(""), visibleAt.UnixMilli())
	if err != nil {
		return Permanent(op, err.Error())
	}
	if _, ok := item.(StartOrchestration); ok {
		err = p.enqueueStart(ctx, instance, doc)
	} else {
		_, err = p.container.CreateItem(ctx, partitionKey(instance), doc, nil)
	}
	if err != nil {
		return wrap(op, err)
	}
	p.announceMessage(visibleAt)
	return nil
}

// enqueueStart writes a start message together with the instance's lock
// document, so the instance's first fetch can lock it with one patch. The
// lock document has no name: the instance exists only once an ack names it.
// When the document exists already, the message is written alone.
func (p *CosmosProvider) enqueueStart(ctx context.Context, instance string, msg []byte) error {
	shell, err := p.newLockDoc(instance)
	if err != nil {
		return err
	}
	b := p.container.NewTransactionalBatch(partitionKey(instance))
	b.CreateItem(shell, nil)
	b.CreateItem(msg, nil)
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if resp.Success {
		return nil
	}
	if idx, ce, _ := resp.FailedOperation(); idx != 0 || ce == nil || ce.StatusCode != http.StatusConflict {
		return batchFailure("enqueue_for_orchestrator", resp)
	}
	_, err = p.container.CreateItem(ctx, partitionKey(instance), msg, nil)
	return err
}

// newLockDoc is an unlocked instance document without a name.
func (p *CosmosProvider) newLockDoc(instance string) ([]byte, error) {
	now := p.nowMs()
	return json.Marshal(instanceDoc{
		ID: instanceDocID, PK: instancePartitionKey(instance), Type: docInstance, Instance: instance,
		Slot: dispatchSlot(instance), CreatedAt: now, UpdatedAt: now,
	})
}

// announceMessage wakes this process's fetches for a message visible at t.
func (p *CosmosProvider) announceMessage(visibleAt time.Time) {
	if visibleAt.After(p.now()) {
		p.orchSignal.notifyAt(visibleAt)
		return
	}
	p.orchSignal.notify()
}

// newMessageDoc encodes an orchestrator-queue message document.
func (p *CosmosProvider) newMessageDoc(item WorkItem, id string, visibleAtMs int64) ([]byte, error) {
	encoded, err := MarshalWorkItem(item)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", item.Kind(), err)
	}
	instance := item.InstanceID()
	return json.Marshal(queueDoc{
		ID:        id,
		PK:        instancePartitionKey(instance),
		Type:      docMessage,
		Instance:  instance,
		Slot:      dispatchSlot(instance),
		VisibleAt: visibleAtMs,
		Seq:       p.nextSeq(),
		Item:      string(encoded),
	})
}

// fetchedOrchestration is what a successful fetch returns.
type fetchedOrchestration struct {
	item     *OrchestrationItem
	token    string
	attempts uint32
}

// FetchOrchestrationItem locks one instance that has visible messages and
// returns its batch with its current execution's history.
func (p *CosmosProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*OrchestrationItem, string, uint32, error) {
	const op = "fetch_orchestration_item"
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, "", 0, nil // a dispatcher that supports nothing gets nothing
	}
	res, found, err := poll(ctx, p, p.orchSignal, queueOrchestrator, filterKey(filter), pollTimeout,
		func(ctx context.Context, slots []int) (fetchedOrchestration, pollOutcome, error) {
			return p.tryFetchOrchestration(ctx, slots, lockTimeout, filter)
		})
	if err != nil {
		return nil, "", 0, wrap(op, err)
	}
	if !found {
		return nil, "", 0, nil
	}
	return res.item, res.token, res.attempts, nil
}

// maxLockAttempts bounds the instances one look tries to lock.
const maxLockAttempts = 4

// filterKey names a capability filter, so contention notes of one filter do
// not hide instances from another.
func filterKey(filter *DispatcherCapabilityFilter) string {
	if filter == nil {
		return "*"
	}
	r := filter.SupportedDuroxideVersions[0]
	return strconv.FormatUint(r.Min.PackedVersion(), 10) + "-" + strconv.FormatUint(r.Max.PackedVersion(), 10)
}

// tryFetchOrchestration takes one look: a candidate query, then lock
// attempts on its instances, oldest first. Instances another fetch of this
// process is locking right now are passed over without a request; when
// every attempt meets contention, it queries once more without the
// contended instances, so contention does not read as emptiness.
func (p *CosmosProvider) tryFetchOrchestration(ctx context.Context, slots []int, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (fetchedOrchestration, pollOutcome, error) {
	fk := filterKey(filter)
	outcome := outcomeEmpty
	for round := 0; round < 2; round++ {
		cands, err := p.runCandidateQuery(ctx, candidateQuery{docType: docMessage, slots: slots, skip: p.skippedInstances(fk)})
		if err != nil {
			return fetchedOrchestration{}, outcome, err
		}
		if len(cands) == 0 {
			return fetchedOrchestration{}, outcome, nil
		}
		outcome = outcomeBusy
		res, contended, err := p.lockFirstFree(ctx, groupByInstance(cands), lockTimeout, filter, fk)
		if err != nil || res != nil {
			if res != nil {
				return *res, outcomeFound, nil
			}
			return fetchedOrchestration{}, outcome, err
		}
		if !contended {
			break
		}
	}
	return fetchedOrchestration{}, outcome, nil
}

// lockFirstFree tries the groups in order and returns the first instance it
// locks; contended reports whether any attempt met another holder.
func (p *CosmosProvider) lockFirstFree(ctx context.Context, groups []instanceGroup, lockTimeout time.Duration, filter *DispatcherCapabilityFilter, fk string) (*fetchedOrchestration, bool, error) {
	tried, contended := 0, false
	for _, g := range groups {
		if tried == maxLockAttempts {
			break
		}
		if !p.locking.claim(g.pk) {
			contended = true
			continue // another fetch of this process is locking it
		}
		tried++
		res, err := p.lockAndLoad(ctx, g, lockTimeout, filter)
		p.locking.release(g.pk)
		switch {
		case errors.Is(err, errContended):
			p.contended.note(fk, g.pk, p.now())
			contended = true
			continue
		case err != nil:
			return nil, contended, err
		case res == nil:
			continue // orphan messages dropped
		}
		return res, contended, nil
	}
	return nil, contended, nil
}

// skippedInstances are partitions a candidate query should leave out: those
// this process holds locked, and those it just failed to lock.
func (p *CosmosProvider) skippedInstances(fk string) []string {
	now := p.nowMs()
	skip := p.contended.active(fk, p.now())
	for _, l := range p.orchLocks.values() {
		until := l.lockedUntil.Load()
		if now-until > forgetExpiredLocksAfter.Milliseconds() {
			p.orchLocks.remove(l.token) // its holder never came back
			continue
		}
		if until > now && len(skip) < maxSkipped {
			skip = append(skip, l.pk)
		}
	}
	return skip
}

// forgetExpiredLocksAfter is how long a lock this process let expire is
// remembered, so its late ack still gets a clear answer.
const forgetExpiredLocksAfter = time.Minute

// errContended means another dispatcher holds the instance, or the filter
// excludes it, or a candidate went away: try the next one.
var errContended = errors.New("instance contended")

// lockAndLoad takes the instance lock and tags the candidate messages in one
// batch, then loads what the turn needs (unless cached), and builds the item.
func (p *CosmosProvider) lockAndLoad(ctx context.Context, g instanceGroup, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*fetchedOrchestration, error) {
	msgs := g.docs
	if len(msgs) > p.cfg.MaxMessagesPerTurn {
		msgs = msgs[:p.cfg.MaxMessagesPerTurn]
	}
	token := newLockToken("lock_")
	now := p.nowMs()
	until := now + lockTimeout.Milliseconds()
	inst, locked, err := p.lockInstance(ctx, g.pk, msgs, token, now, until, filter)
	if err != nil {
		return nil, err
	}
	lock := &orchestrationLock{token: token, pk: g.pk, inst: inst, messages: locked}
	lock.lockedUntil.Store(until)
	items, attempts, err := decodeMessages(locked)
	if err == nil && inst.Status == "ContinuedAsNew" && !hasContinueAsNew(items) {
		items, attempts, err = p.completeBatch(ctx, lock, now, until)
	}
	if err != nil {
		p.releaseQuietly(ctx, lock)
		return nil, err
	}
	state, err := p.loadState(ctx, &inst)
	if err != nil {
		p.releaseQuietly(ctx, lock)
		return nil, err
	}
	lock.state = state
	item, kind := p.buildItem(&inst, state, items)
	if kind == batchOrphans {
		return nil, p.dropOrphans(ctx, lock)
	}
	if kind == batchBeforeStart && p.waitingForStart(lock.messages) {
		// Messages that overtook their instance's start (a cancel, an
		// event): keep them for the start's batch rather than consume them.
		if err := p.writeAbandon(ctx, lock, 0, true); err != nil {
			return nil, err
		}
		return nil, errContended
	}
	p.orchLocks.put(token, lock)
	return &fetchedOrchestration{item: item, token: token, attempts: attempts}, nil
}

// maxCompletedBatch bounds a completed batch, leaving the ack's batch room.
const maxCompletedBatch = 60

func hasContinueAsNew(items []WorkItem) bool {
	for _, it := range items {
		if _, ok := it.(ContinueAsNew); ok {
			return true
		}
	}
	return false
}

// completeBatch adds every visible message of the locked instance to its
// batch. A batch is normally the instance's oldest messages among the
// candidates; but when the execution has continued as new, a batch without
// the ContinueAsNew message would read as a finished execution's and be
// consumed, so it must hold all of them, in order, as duroxide's providers'
// batches do.
func (p *CosmosProvider) completeBatch(ctx context.Context, lock *orchestrationLock, now, until int64) ([]WorkItem, uint32, error) {
	key := NewPartitionKeyString(lock.pk)
	res, err := p.container.QueryItems(ctx,
		"SELECT * FROM c WHERE c.pk = @pk AND c.type = @type AND c.visibleAt <= @now AND (c.lockedUntil <= @now OR c.lockToken = @token) ORDER BY c.visibleAt ASC, c.seq ASC",
		[]QueryParameter{{Name: "@pk", Value: lock.pk}, {Name: "@type", Value: docMessage}, {Name: "@now", Value: now}, {Name: "@token", Value: lock.token}},
		&QueryOptions{PartitionKey: &key})
	if err != nil {
		return nil, 0, err
	}
	held := map[string]bool{}
	for _, m := range lock.messages {
		held[m.ID] = true
	}
	var batch []queueDoc
	b := p.container.NewTransactionalBatch(key)
	for _, raw := range res.Items {
		var m queueDoc
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, 0, fmt.Errorf("decode message: %w", err)
		}
		if len(batch) == maxCompletedBatch {
			break // the ack's batch needs room for the turn's own writes
		}
		if !held[m.ID] {
			b.PatchItem(m.ID, claimOps(lock.token, until), nil)
			m.Attempts++
		}
		batch = append(batch, m)
	}
	if b.Len() > 0 {
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return nil, 0, err
		}
		if !resp.Success {
			return nil, 0, errContended // a message went away meanwhile: try again later
		}
	}
	lock.messages = batch
	return decodeMessages(batch)
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
				LockToken: token, LockedUntil: until, CreatedAt: now, UpdatedAt: now,
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
			var ops PatchOperations
			ops.AppendSet("/lockToken", token)
			ops.AppendSet("/lockedUntil", until)
			ops.AppendIncrement("/attempts", 1)
			b.PatchItem(m.ID, ops, nil)
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, &TransactionalBatchOptions{EnableContentResponseOnWrite: true})
		if err != nil {
			return instanceDoc{}, nil, err
		}
		if !resp.Success {
			idx, ce, _ := resp.FailedOperation()
			switch {
			case idx == 0 && !create && ce != nil && ce.StatusCode == http.StatusNotFound:
				continue // no instance document yet: create it
			case ce != nil && (ce.StatusCode == http.StatusPreconditionFailed || ce.StatusCode == http.StatusConflict || ce.StatusCode == http.StatusNotFound):
				return instanceDoc{}, nil, errContended
			case ce != nil:
				return instanceDoc{}, nil, ce
			default:
				return instanceDoc{}, nil, fmt.Errorf("lock batch failed with status %d", resp.StatusCode)
			}
		}
		return decodeLockBatch(resp)
	}
	return instanceDoc{}, nil, errContended
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
		return instanceDoc{}, nil, fmt.Errorf("decode locked instance: %w", err)
	}
	inst.ETag = resp.OperationResults[0].ETag
	msgs := make([]queueDoc, 0, len(resp.OperationResults)-1)
	for _, r := range resp.OperationResults[1:] {
		var m queueDoc
		if err := json.Unmarshal(r.ResourceBody, &m); err != nil {
			return instanceDoc{}, nil, fmt.Errorf("decode locked message: %w", err)
		}
		m.ETag = r.ETag
		msgs = append(msgs, m)
	}
	return inst, msgs, nil
}

// decodeMessages decodes the locked batch and its highest attempt count.
func decodeMessages(msgs []queueDoc) ([]WorkItem, uint32, error) {
	items := make([]WorkItem, 0, len(msgs))
	var attempts uint32
	for _, m := range msgs {
		item, err := UnmarshalWorkItem([]byte(m.Item))
		if err != nil {
			return nil, 0, fmt.Errorf("decode message %s: %w", m.ID, err)
		}
		items = append(items, item)
		attempts = max(attempts, m.Attempts)
	}
	return items, attempts, nil
}

// batchKind says what buildItem made of a batch.
type batchKind int

const (
	batchOrdinary    batchKind = iota
	batchOrphans               // only QueueMessages, for an instance never started: dropped
	batchBeforeStart           // other messages for an instance never started: held for the start
)

// buildItem applies duroxide's metadata rules (reference §2.2 step 5) and
// says whether the batch is for an instance that was never started.
func (p *CosmosProvider) buildItem(inst *instanceDoc, state *instanceState, items []WorkItem) (*OrchestrationItem, batchKind) {
	item := &OrchestrationItem{
		Instance:     inst.Instance,
		ExecutionID:  state.exec,
		History:      state.history,
		HistoryError: state.historyError,
		Messages:     items,
		KVSnapshot:   state.kv.snapshot(),
	}
	if item.History == nil {
		item.History = []Event{}
	}
	switch {
	case inst.exists():
		item.OrchestrationName = inst.Name
		item.Version = derefOr(inst.Version, "unknown")
	case len(state.history) > 0 || state.historyError != nil:
		item.OrchestrationName, item.Version = nameFromHistory(state.history)
	default:
		if name, version, ok := nameFromStart(items); ok {
			item.OrchestrationName, item.Version, item.ExecutionID = name, version, InitialExecutionID
			break
		}
		if allQueueMessages(items) {
			return nil, batchOrphans
		}
		// A message for an instance that was never started (say a cancel
		// that overtook its start). Past neverStartedGrace it goes to the
		// runtime, which acks it as an empty batch, rather than stay at the
		// head of the queue forever; before, lockAndLoad holds it back.
		item.OrchestrationName, item.Version, item.ExecutionID = unknownOrchestration, "unknown", InitialExecutionID
		return item, batchBeforeStart
	}
	if item.ExecutionID == 0 {
		item.ExecutionID = InitialExecutionID
	}
	return item, batchOrdinary
}

// unknownOrchestration names the item of messages whose instance was never
// started, as duroxide-pg does.
const unknownOrchestration = "Unknown"

// neverStartedGrace is how long messages for an instance that was never
// started wait for its start before they are handed over and consumed.
const neverStartedGrace = 30 * time.Second

// waitingForStart says the newest of these messages is young enough that
// its instance's start may still come.
func (p *CosmosProvider) waitingForStart(msgs []queueDoc) bool {
	var newest int64
	for _, m := range msgs {
		newest = max(newest, m.Seq)
	}
	return p.now().Sub(time.UnixMicro(newest)) < neverStartedGrace
}

func derefOr(s *string, fallback string) string {
	if s == nil {
		return fallback
	}
	return *s
}

func nameFromHistory(history []Event) (string, string) {
	for _, e := range history {
		if started, ok := e.Kind.(OrchestrationStarted); ok {
			return started.Name, started.Version
		}
	}
	return "Unknown", "unknown"
}

func nameFromStart(items []WorkItem) (string, string, bool) {
	for _, it := range items {
		switch w := it.(type) {
		case StartOrchestration:
			return w.Orchestration, derefOr(w.Version, "unknown"), true
		case ContinueAsNew:
			return w.Orchestration, derefOr(w.Version, "unknown"), true
		}
	}
	return "", "", false
}

func allQueueMessages(items []WorkItem) bool {
	for _, it := range items {
		if _, ok := it.(QueueMessage); !ok {
			return false
		}
	}
	return len(items) > 0
}

// dropOrphans deletes QueueMessages for a never-started instance together
// with the lock document the fetch created.
func (p *CosmosProvider) dropOrphans(ctx context.Context, lock *orchestrationLock) error {
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	etag := lock.inst.ETag
	b.DeleteItem(instanceDocID, &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, m := range lock.messages {
		b.DeleteItem(m.ID, nil)
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if !resp.Success {
		p.log.Warn("cdb: could not drop orphan queue messages", "instance", lock.inst.Instance)
		return nil
	}
	p.log.Warn("cdb: dropped QueueMessages for an instance that was never started", "instance", lock.inst.Instance, "messages", len(lock.messages))
	return nil
}

// releaseQuietly gives a lock back after a fetch failed half way, so the
// contract's "an error means no lock is held" holds as far as it can.
func (p *CosmosProvider) releaseQuietly(ctx context.Context, lock *orchestrationLock) {
	if err := p.writeAbandon(ctx, lock, 0, true); err != nil {
		p.log.Warn("cdb: could not release a lock after a failed fetch; it will expire", "instance", lock.inst.Instance, "error", err)
	}
}
