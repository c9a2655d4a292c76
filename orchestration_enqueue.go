package cdb

// Enqueueing for the orchestrator: a message in the target instance's
// partition, in send order; a start also writes the instance's lock document.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// EnqueueForOrchestrator writes one message into the target instance's
// partition, visible after delay. It never creates the instance itself: a
// start that a waiting orchestration fetch of this provider takes is
// written by its first turn's commit, which creates the instance, and the
// call returns once that commit did (Eager starts in ARCHITECTURE.md).
func (p *CosmosProvider) EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error {
	const op = "EnqueueForOrchestrator"
	if item == nil {
		return refuse(op, "work item is nil", ErrInvalidInput)
	}
	if _, ok := item.(ActivityExecuteMessage); ok {
		return refuse(op, "ActivityExecute belongs on the worker queue (use EnqueueForWorker)", ErrInvalidInput)
	}
	instance := item.InstanceID()
	if err := validateInstanceID(op, instance); err != nil {
		return err
	}
	start, ok := item.(StartOrchestrationMessage)
	if !ok {
		visibleAt, err := p.enqueueSequenced(ctx, item, "m|"+newLockToken(""), delay)
		if err != nil {
			return asOperation(op, err)
		}
		p.announceMessage(instancePartitionKey(instance), visibleAt)
		return nil
	}
	w, err := p.newStartWrite(start, delay)
	if err != nil {
		return refuse(op, "", err)
	}
	if done, err := p.startWithFirstTurn(ctx, w, delay); done {
		return asOperation(op, err)
	}
	if err := p.enqueueStart(ctx, w); err != nil {
		return asOperation(op, err)
	}
	p.announceStart(w)
	return nil
}

// startWrite is a start message to write with its instance's lock
// document.
type startWrite struct {
	instance  string
	parent    *string  // the parent the start names; nil for a root
	id        string   // the message's id, which the lock document records
	msg       []byte   // the message document
	doc       queueDoc // msg before it was encoded
	seq       int64
	visibleAt time.Time
	trace     TraceContext // the start's, which its lock document records
}

// newStartWrite encodes a start, visible after delay.
func (p *CosmosProvider) newStartWrite(start StartOrchestrationMessage, delay time.Duration) (startWrite, error) {
	id := "m|" + newLockToken("")
	seq := p.nextSeq()
	visibleAt := sequencedVisibleAt(seq, p.now(), delay)
	at := dueAt(visibleAt.UnixMilli(), seq)
	if delay <= 0 {
		at = immediateAt(visibleAt.UnixMilli(), seq)
	}
	doc, err := messageDoc(start, id, at, p.ownWrites.messageWriter(at.visibleAt, pinnedTo(nil)), "", lifeAddress{}) // a start: not pinned yet
	if err != nil {
		return startWrite{}, err
	}
	doc.ConsumedTTL = enqueuedMarkerTTL // its consumer leaves a marker (markedOnConsume)
	msg, err := json.Marshal(doc)
	if err != nil {
		return startWrite{}, err
	}
	return startWrite{instance: start.Instance, parent: start.ParentInstance, id: id, msg: msg, doc: doc, seq: seq, visibleAt: visibleAt, trace: start.Trace}, nil
}

// enqueueStart writes a start (createStart); when the lock document
// exists already, the message is written alone and settled (settleStart).
// The message's id is its own, so a lost response is resolved by sending
// again: a 409 on the message after an unknown outcome is this write.
func (p *CosmosProvider) enqueueStart(ctx context.Context, w startWrite) error {
	taken, unknown, err := p.createStart(ctx, w)
	if err != nil || !taken {
		return err
	}
	if err := p.createOnce(ctx, partitionKey(w.instance), w.msg, unknown); err != nil {
		return err
	}
	return p.settleStart(ctx, "EnqueueForOrchestrator", w.instance, w.msg)
}

// createStart writes a start message together with the instance's lock
// document and the partition's sequencer (sequencer.go), so the instance's
// first fetch can lock it with one patch and its first event is one
// request too. The lock document has no name (the instance exists only
// once an ack names it) and records the message's id. When only the
// sequencer exists (events came first), the start goes without it. taken
// says the lock document exists already, so nothing was written; unknown,
// that a send's outcome was unknown, so the lock document may be this
// start's own.
func (p *CosmosProvider) createStart(ctx context.Context, w startWrite) (taken, unknown bool, err error) {
	inst := p.lockDoc(w.instance, w.parent, w.id, w.trace)
	shell, err := json.Marshal(inst)
	if err != nil {
		return false, false, err
	}
	sequencer, err := newSequencerDoc(instancePartitionKey(w.instance), w.seq)
	if err != nil {
		return false, false, err
	}
	for _, withSequencer := range []bool{true, false} {
		b := p.container.NewTransactionalBatch(partitionKey(w.instance))
		b.CreateItem(shell, nil)
		if withSequencer {
			b.CreateItem(sequencer, nil)
		}
		b.CreateItem(w.msg, nil)
		resp, sent, err := p.executeBatchOnce(ctx, b)
		unknown = unknown || sent
		switch {
		case err != nil:
			return false, unknown, err
		case resp.Success:
			if withSequencer {
				p.sightStart(w)
			}
			return false, unknown, nil
		case withSequencer && failedWithConflict(resp, 1):
			continue
		case failedWithConflict(resp, 0):
			return true, unknown, nil
		}
		return false, unknown, batchError(resp)
	}
	return false, unknown, nil
}

// maxSettleRounds bounds the looks of one start's read-back.
const maxSettleRounds = 4

// settleStart is the read-back of a start message written beside an
// instance document that existed already, which may carry a deletion's
// mark. It accepts the start only where no deletion begun before it can
// delete it (ARCHITECTURE.md, Deletion):
//   - beside an unmarked instance document none of whose ancestors is
//     marked: a deletion marks only the life it was asked to delete, and
//     sweeps only while its mark is there;
//   - where the instance document is gone, a deletion swept the partition
//     to the end, and may have taken the message with it: the start writes
//     the instance document of a new life and its message again.
//
// Beside a marked one, the message is taken back and the start refused as
// retryable: once the deletion is done, the same start begins a new life.
// The outbox relay settles the child starts it delivers the same way.
func (p *CosmosProvider) settleStart(ctx context.Context, op, instance string, msg []byte) error {
	for round := 0; round < maxSettleRounds; round++ {
		inst, err := p.readInstanceLatest(ctx, instancePartitionKey(instance))
		if err != nil {
			return err
		}
		if inst == nil {
			if started, err := p.startAfterSweep(ctx, instance, msg); err != nil || started {
				return err
			}
			continue // another start wrote the instance document first: look at it
		}
		if inst.retainedPast(p.nowMs()) { // the old life's retention ended: clear it, then start
			if err := p.clearRetained(ctx, inst); err != nil {
				return asOperation(op, err)
			}
			continue
		}
		marked, err := p.deletionReaches(ctx, inst)
		if err != nil || !marked {
			return err
		}
		if err := p.takeBack(ctx, instance, msg); err != nil {
			return err
		}
		return transient(op, fmt.Sprintf("instance %q is being deleted; start it again once the deletion is done", instance), nil)
	}
	return transient(op, fmt.Sprintf("instance %q: its instance document kept changing while the start looked at it", instance), nil)
}

// startAfterSweep writes a new life's instance document and the start
// message into a partition a deletion swept to the end; false when another
// writer created the instance document first.
func (p *CosmosProvider) startAfterSweep(ctx context.Context, instance string, msg []byte) (bool, error) {
	shell, err := p.newLockDoc(instance, startParentOfDoc(msg), messageID(msg), traceOfDoc(msg))
	if err != nil {
		return false, err
	}
	if _, err := p.container.CreateItem(ctx, partitionKey(instance), shell, nil); IsConflict(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if _, err := p.container.CreateItem(ctx, partitionKey(instance), msg, nil); err != nil && !IsConflict(err) {
		return false, err
	}
	return true, nil // the message is there: it outlived the sweep, or is written again
}

// takeBack deletes a start message written into a partition being deleted.
func (p *CosmosProvider) takeBack(ctx context.Context, instance string, msg []byte) error {
	if _, err := p.container.DeleteItem(ctx, partitionKey(instance), messageID(msg), nil); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}

// messageID is the id of the message document msg, which this process
// encoded ("" if it does not decode).
func messageID(msg []byte) string {
	var head struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(msg, &head) // an encoding of ours: it decodes
	return head.ID
}

// newLockDoc is an unlocked instance document without a name, with a new
// life, written with the start message startMsg. A child's names its
// parent (parent, nil for a root) before any turn does, so a deletion of
// the parent's tree finds a child whose start was delivered but not yet
// taken (deletion.go, adoptLateChildren). It records the start's trace
// context, handed out with every item of this life of the instance.
func (p *CosmosProvider) newLockDoc(instance string, parent *string, startMsg string, trace TraceContext) ([]byte, error) {
	return json.Marshal(p.lockDoc(instance, parent, startMsg, trace))
}

// lockDoc is newLockDoc's document before it is encoded.
func (p *CosmosProvider) lockDoc(instance string, parent *string, startMsg string, trace TraceContext) instanceDoc {
	now := p.nowMs()
	return instanceDoc{
		ID: instanceDocID, PK: instancePartitionKey(instance), Type: docInstance, Instance: instance,
		Slot: dispatchSlot(instance), CreatedAt: now, UpdatedAt: now, Life: newLockToken(""), Parent: parent,
		StartMsg: startMsg, Trace: trace,
	}
}

// startParent is the parent a start names, nil for anything else.
func startParent(item WorkItem) *string {
	if start, ok := item.(StartOrchestrationMessage); ok {
		return start.ParentInstance
	}
	return nil
}

// startParentOfDoc is startParent of the start message document msg.
func startParentOfDoc(msg []byte) *string {
	var m queueDoc
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil
	}
	item, err := UnmarshalWorkItem([]byte(m.Item))
	if err != nil {
		return nil
	}
	return startParent(item)
}

// traceOfDoc is the trace context the message document msg keeps beside
// its item (zero when it keeps none or does not decode).
func traceOfDoc(msg []byte) TraceContext {
	var m struct {
		Trace TraceContext `json:"trace"`
	}
	_ = json.Unmarshal(msg, &m) // an encoding of ours: it decodes
	return m.Trace
}

// announceMessage wakes a fetch of this process for a message in pk
// visible at t (a later one through the signal's timer, which wakes all),
// and forgets what a look or a start saw of pk, which lacks the message.
func (p *CosmosProvider) announceMessage(pk string, visibleAt time.Time) {
	p.sightings.forget(pk)
	p.announceWritten(pk, visibleAt)
}

// announceStart is announceMessage for a start just written, whose own
// sighting (sightStart) stands.
func (p *CosmosProvider) announceStart(w startWrite) {
	p.announceWritten(instancePartitionKey(w.instance), w.visibleAt)
}

// announceWritten rings the bell for a message in pk visible at t and wakes
// a fetch of this process for it.
func (p *CosmosProvider) announceWritten(pk string, visibleAt time.Time) {
	p.bell.ring(queueOrchestrator, visibleAt)
	if visibleAt.After(p.now()) {
		p.orchSignal.notifyAt(visibleAt)
		return
	}
	p.orchSignal.announcePartitions(pk)
}

// newMessageDoc encodes an orchestrator-queue message document placed at
// at; writer is its own-writes stamp (ownwrites.go), "" for none; orch the
// target instance's orchestration name when the writer knows it (a start
// names its own).
func (p *CosmosProvider) newMessageDoc(item WorkItem, id string, at queueTime, writer, orch string) ([]byte, error) {
	return p.newAddressedMessageDoc(item, id, at, writer, orch, lifeAddress{})
}

// newAddressedMessageDoc is newMessageDoc for a message a commit sends,
// with the lives it is sent from and to (lives.go).
func (p *CosmosProvider) newAddressedMessageDoc(item WorkItem, id string, at queueTime, writer, orch string, addr lifeAddress) ([]byte, error) {
	doc, err := messageDoc(item, id, at, writer, orch, addr)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// messageDoc is newAddressedMessageDoc's document before it is encoded.
func messageDoc(item WorkItem, id string, at queueTime, writer, orch string, addr lifeAddress) (queueDoc, error) {
	encoded, err := MarshalWorkItem(item)
	if err != nil {
		return queueDoc{}, fmt.Errorf("encode %s: %w", item.Kind(), err)
	}
	instance := item.InstanceID()
	if _, ok := item.(ContinueAsNewMessage); ok && at.immediate {
		// Visible from time zero, so it heads its instance's messages and is
		// in the next batch however long the backlog: a batch without it
		// would read as the finished execution's and be consumed. One
		// enqueued with a delay keeps it (until then the fetch holds the
		// instance's batches back: holdWithoutContinueAsNew).
		at = immediateAt(0, at.seq)
	}
	return queueDoc{
		ID:         id,
		PK:         instancePartitionKey(instance),
		Type:       docMessage,
		Instance:   instance,
		Slot:       dispatchSlot(instance),
		VisibleAt:  at.visibleAt,
		Seq:        at.seq,
		SeqVisible: at.immediate,
		Item:       string(encoded),
		Writer:     writer,
		ToLife:     addr.to,
		From:       addr.from,
		FromLife:   addr.fromLife,
		Trace:      TraceContextOf(item),
		Orch:       cmp.Or(orch, startedOrchestration(item)),
	}, nil
}

// startedOrchestration is the orchestration a start message starts ("" for
// any other message): its name is known before its instance document is.
func startedOrchestration(item WorkItem) string {
	if start, ok := item.(StartOrchestrationMessage); ok {
		return start.Orchestration
	}
	return ""
}
