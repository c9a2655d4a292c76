package cdb

// Placing an ack's writes: every document of the turn goes in the commit
// batch when it fits the instance's partition and the batch's size, and
// otherwise in the outbox the commit writes, which the relay delivers.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// ackWriter collects the documents of one ack besides its history and
// state, and places them: in the batch while it has room, else in the
// outbox, so the turn still commits in one batch.
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
	// orch is the committing instance's orchestration name, which the
	// items it queues for itself carry (queueDoc.Orch).
	orch string
	// reservation holds the fetches of this process it reserved worker
	// items for (handover.go); locked are those it put in the batch.
	reservation *handoff.Reservation[*workLock]
	locked      []eagerWrite
	// cancels are the worker items the turn's cancellations tombstone.
	cancels []workRef
	// lockable are the locks of the items some try of the ack may have
	// written locked to this process: every sessionless one, under its
	// token (eagerToken), which is the same on every try.
	lockable []*workLock
}

// workRef names a worker item: its instance's partition and its activity.
type workRef struct {
	pk       string
	activity activityKey
}

// eagerWrite is a worker item the commit batch writes locked to this
// process: op is its operation's index in the batch.
type eagerWrite struct {
	op   int
	lock *workLock
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
	// eager is the lock of a worker item written locked to this process
	// when the batch writes it (eagerBody, then); the outbox carries body.
	eager     *workLock
	eagerBody []byte
}

// addWork adds the turn's new worker items.
func (w *ackWriter) addWork(items []WorkItem, cancelled []ScheduledActivityIdentifier, pinned *uint64) error {
	dropped := cancelledSet(cancelled)
	for _, item := range items {
		act, ok := item.(ActivityExecuteMessage)
		if !ok {
			return refuse(w.op, fmt.Sprintf("worker item is a %s; only ActivityExecute goes to the worker queue", item.Kind()), ErrInvalidInput)
		}
		if dropped[ScheduledActivityIdentifier{Instance: act.Instance, ExecutionID: act.ExecutionID, ActivityID: act.ID}] {
			continue // scheduled and cancelled in the same turn: nothing to do
		}
		doc, err := workDoc(act, workDocID(act.ExecutionID, act.ID), immediateAt(w.visible, w.takeSeq()), "", pinned, w.orch)
		if err != nil {
			return refuse(w.op, "", err)
		}
		d, err := w.workPending(act, doc)
		if err != nil {
			return refuse(w.op, "", err)
		}
		if err := w.fits(d.largestBody(), fmt.Sprintf("the work item of activity %d", act.ID)); err != nil {
			return err
		}
		w.add(instancePartitionKey(act.Instance), d)
	}
	return nil
}

// workPending is a worker item to place: locked to this process as well,
// for the batch, when one of its waiting fetches will take it (handover.go);
// stamped for its own fetches otherwise.
func (w *ackWriter) workPending(act ActivityExecuteMessage, doc queueDoc) (pendingDoc, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return pendingDoc{}, err
	}
	d := pendingDoc{body: body, queued: true, writer: w.p.ownWrites.workWriter(act, w.visible)}
	if act.SessionID != nil || w.reservation == nil {
		return d, nil // its session's owner takes it, or nothing is locked eagerly
	}
	timeout, ok := w.reservation.Take(act.Tag)
	if !ok {
		// This process's fetches are booked with what is ready for half
		// an item's patience, longer than a writer's grace: they will not
		// take it soon, so it is not stamped theirs (ownwrites.go).
		d.writer = ""
		// Not locked by this try; an earlier one may have: its lock
		// expires no later than the longest a fetch asks for.
		w.lockable = append(w.lockable, eagerLock(w.token, act, doc, w.now, math.MaxInt64))
		return d, nil
	}
	d.eager = eagerLock(w.token, act, doc, w.now, w.p.lockUntil(timeout)) // Keeps: H1
	if d.eagerBody, err = json.Marshal(d.eager.doc); err != nil {
		return pendingDoc{}, err
	}
	w.lockable = append(w.lockable, d.eager)
	return d, nil
}

// eagerLock is the lock an ack with token, planned at (ms), writes into
// doc, the worker item of act, when it locks it eagerly, until then (ms).
func eagerLock(token string, act ActivityExecuteMessage, doc queueDoc, at, until int64) *workLock {
	doc.LockToken, doc.LockedUntil, doc.Attempts = eagerToken(token, act), until, 1
	return &workLock{token: doc.LockToken, pk: doc.PK, doc: doc, lockedUntil: until, lockedAt: at, activity: activityKey{doc.Exec, doc.Activity}}
}

// fits refuses, before anything is written, a document no Cosmos DB
// document can hold.
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
	if t, ok := item.(TimerFiredMessage); ok {
		at = dueAt(int64(t.FireAtMs), at.seq)
	}
	target := item.InstanceID()
	if err := validateInstanceID(w.op, target); err != nil {
		return time.Time{}, err
	}
	id := "m|o|" + w.token + "|" + strconv.Itoa(len(w.docs)+len(w.remote))
	orch := ""
	if target == w.lives.self {
		orch = w.orch
	}
	body, err := w.p.newAddressedMessageDoc(item, id, at, "", orch, w.lives.address(target))
	if err != nil {
		return time.Time{}, refuse(w.op, "", err)
	}
	if err := w.fits(body, fmt.Sprintf("the %s for %q", item.Kind(), target)); err != nil {
		return time.Time{}, err
	}
	pk := instancePartitionKey(target)
	if _, ok := item.(StartOrchestrationMessage); ok && pk != w.pk {
		// A child's or detached start brings the child's lock document,
		// as EnqueueForOrchestrator does; delivering it twice is a 409.
		shell, err := w.p.newLockDoc(target, startParent(item), id, TraceContextOf(item))
		if err != nil {
			return time.Time{}, refuse(w.op, "", err)
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
		if act, ok := item.(ActivityExecuteMessage); ok {
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
			return refuse(w.op, "", err)
		}
		w.add(instancePartitionKey(c.Instance), pendingDoc{body: body, upsert: true})
		w.cancels = append(w.cancels, workRef{pk: instancePartitionKey(c.Instance), activity: activityKey{c.ExecutionID, c.ActivityID}})
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

// Commit sizes: a turn commits in one batch of at most MaxBatchBytes
// (ARCHITECTURE.md, Large turns). The batch keeps room for its encoding; an
// outbox document holds at most outboxInlineBytes of entries itself (a
// fetch's load reads pending outboxes), and stages the rest in parts.
const (
	commitBatchBytes  = MaxBatchBytes - 32*1024
	outboxInlineBytes = 256 * 1024
	outboxRefsReserve = 16 * 1024 // the outbox document's own fields and part names
)

// commitBudgetBytes is the bytes a commit batch may take, halved squeeze
// times for a commit the store refused as too large.
func commitBudgetBytes(squeeze int) int { return commitBatchBytes >> squeeze }

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

// placement is where the turn's documents go: all of them in the commit
// batch, or the first inline of this partition's there and the rest, with
// every other partition's, in an outbox laid out as layout (self when it
// carries messages for the instance itself, outboxDoc.Self).
type placement struct {
	outbox bool
	inline int
	layout outboxLayout
	self   bool
}

// place decides where the turn's documents go so the commit stays one
// batch, given the operations and bytes the batch holds before them: this
// partition's in the batch while its operations and bytes allow, the rest,
// and every other partition's, in an outbox document; entries that would
// make that document too large go to staged parts, which the batch makes
// permanent.
func (w *ackWriter) place(instance string, ops, used int) (placement, error) {
	budget := commitBudgetBytes(w.squeeze)
	if used > budget || ops >= MaxBatchOperations {
		return placement{}, refuse(w.op, fmt.Sprintf("the turn's history, state and consumed messages take %d operations and %d bytes; a commit batch holds %d and %d",
			ops, used, MaxBatchOperations, budget), ErrBatchTooLarge)
	}
	if len(w.remote) == 0 && ops+len(w.docs) <= MaxBatchOperations && used+opsBytes(w.docs) <= budget {
		return placement{inline: len(w.docs)}, nil
	}
	entries, err := w.entries()
	if err != nil {
		return placement{}, err
	}
	opsFree := MaxBatchOperations - ops - 1 // the outbox document's
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
			return placement{}, err
		}
		if k+len(layout.parts) <= opsFree {
			return placement{outbox: true, inline: k, layout: layout, self: slices.ContainsFunc(w.docs[k:], func(d pendingDoc) bool { return d.message })}, nil
		}
	}
	return placement{}, refuse(w.op, fmt.Sprintf("the turn writes %d documents; even with its outbox staged in parts they need more than a commit batch's %d operations",
		len(w.docs)+len(w.remote), MaxBatchOperations), ErrBatchTooManyOperations)
}

// write adds the turn's documents to b as placed. It returns the outbox
// document (nil when none is needed) and the parts to stage.
func (w *ackWriter) write(b *TransactionalBatch, pl placement, instance string, rev uint64) (*outboxDoc, [][]byte, error) {
	if !pl.outbox {
		w.inline(b, w.docs, true)
		return nil, nil, nil
	}
	// A commit whose outbox is staged in parts is a large one, whose
	// requests (the staging, then the commit) may outlast a short lock
	// counted from its plan: its items wait in the queue, unlocked. One
	// whose outbox is a single document (a fan-out wider than the batch)
	// locks what it holds of them, as a commit without an outbox does.
	w.inline(b, w.docs[:pl.inline], len(pl.layout.parts) == 0)
	return w.writeOutbox(b, instance, rev, pl.layout, pl.self)
}

// eagerPending says the turn has worker items reserved for this process's
// fetches, which the batch writes locked to it if they all fit there.
func (w *ackWriter) eagerPending() bool {
	return slices.ContainsFunc(w.docs, func(d pendingDoc) bool { return d.eager != nil })
}

// largestBody is the larger of the bodies d may be written with.
func (d pendingDoc) largestBody() []byte {
	if len(d.eagerBody) > len(d.body) {
		return d.eagerBody
	}
	return d.body
}

func opBytes(d pendingDoc) int {
	if d.eager != nil {
		return len(d.eagerBody) + batchOpOverhead
	}
	return len(d.body) + stampBytes(d.writer) + batchOpOverhead
}

func opsBytes(docs []pendingDoc) int {
	n := 0
	for _, d := range docs {
		n += opBytes(d)
	}
	return n
}

// inline adds documents to the batch, the worker items reserved for this
// process's fetches locked to it when eager says so.
func (w *ackWriter) inline(b *TransactionalBatch, docs []pendingDoc, eager bool) {
	for _, d := range docs {
		if d.eager != nil && eager {
			w.locked = append(w.locked, eagerWrite{op: b.Len(), lock: d.eager})
			b.CreateItem(d.eagerBody, nil)
			continue
		}
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
			return nil, refuse(w.op, "encode outbox entry", err)
		}
		all = append(all, sizedEntry{entry: e, size: len(raw) + 1})
	}
	return all, nil
}

// relayedBody marks an encoded queue document as delivered by an outbox
// (queueDoc.Relayed), without decoding it again.
func relayedBody(body []byte) []byte {
	return append([]byte(relayedPrefix), body[1:]...)
}

const relayedPrefix = `{"relayed":true,`

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
			return l, refuse(w.op, fmt.Sprintf("a document for partition %q is %d bytes; with its envelope it fits neither the commit batch nor an outbox part (%d bytes)", e.entry.PK, len(e.entry.Doc), partCap), ErrDocumentTooLarge)
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
			return nil, nil, refuse(w.op, "encode outbox part", err)
		}
		staged = append(staged, body)
		doc.Parts = append(doc.Parts, outboxPartRef{ID: part.ID, Entries: len(entries)})
	}
	body, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, refuse(w.op, "encode outbox", err)
	}
	b.CreateItem(body, nil)
	for _, ref := range doc.Parts {
		keepStaged(b, ref.ID)
	}
	if n := b.encodedBytes(); n > MaxBatchBytes {
		return nil, nil, refuse(w.op, fmt.Sprintf("the commit batch would be %d bytes; at most %d are allowed", n, MaxBatchBytes), ErrBatchTooLarge)
	}
	return doc, staged, nil
}
