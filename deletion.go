package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Deleting instances spans partitions, and Cosmos DB has no cross-partition
// transaction. So a deletion is an intent carried out in steps that converge:
//
//  1. In one batch in the first instance's partition (the root of a tree):
//     the intent document, listing every instance with the life of its
//     instance document, and the first instance's mark (`deleting` on its
//     instance document).
//  2. The other instances' marks. A marked instance reads as deleted: reads,
//     listings and the admin side leave it out, and a fetch cannot lock it.
//     The mark changes the instance document's ETag, so a turn in flight
//     cannot commit (its ack is If-Match) and recreates nothing. Then the
//     children the caller could not list (started, not yet named) are
//     added and marked (adoptLateChildren), and the intent records that all
//     are marked.
//  3. Each partition's documents are deleted, in batches, until a query
//     finds none left; the marked instance document goes last.
//  4. The intent document is deleted. The deletion is done at step 3's end:
//     an intent that cannot be deleted is left to the reconciler (below),
//     and the caller is told of success, or it would delete again.
//
// A deletion has one owner at a time, which renews its beat on the intent
// while it works; a process that dies or pauses leaves the intent and the
// marks, readers keep honouring them, and once the beat is older than
// AbandonedDeletionAge the reconciler of any process takes the deletion
// over and finishes it. Every write is fenced so that an owner that lost
// the deletion, or resumes after it was finished, can neither mark nor
// sweep what is not the deletion's: a mark applies only to the life of the
// instance document the intent names, and every sweep batch applies only
// while the instance document carries the intent's mark.

const docDeletion = "delete"

// deletionDoc is a deletion intent.
type deletionDoc struct {
	ID        string   `json:"id"`
	PK        string   `json:"pk"`
	Type      string   `json:"type"`
	Instance  string   `json:"instance"`
	IDs       []string `json:"ids"`
	CreatedAt int64    `json:"createdAt"`
	// Marked says every instance carries the intent's mark, so sweeping may
	// have begun: a resumed deletion marks nothing again.
	Marked bool `json:"marked,omitempty"`
	// Lives names, for each id whose instance document existed when the
	// deletion was decided, that document's life (instanceDoc.Life; empty
	// for a document written before lives existed). Only that life is
	// marked: a new life of the id is not the deletion's. Nil in an intent
	// written before lives existed, whose marks are not conditioned.
	Lives map[string]string `json:"lives"`
	// Owner is the lease of the process carrying the deletion out, BeatAt
	// (ms) its last sign of life.
	Owner  string `json:"owner,omitempty"`
	BeatAt int64  `json:"beatAt,omitempty"`

	ETag ETag `json:"_etag,omitempty"`
}

// maxDeleteRounds bounds the query-and-delete rounds of one partition.
const maxDeleteRounds = 5

// errDeletionLost says the deleter no longer owns its deletion: another
// process took it over, or finished it.
var errDeletionLost = errors.New("another process owns the deletion now")

// errMarkGone says a partition's instance document no longer carries the
// deletion's mark: the partition was swept to the end, and whatever is in
// it now is a new life's.
var errMarkGone = errors.New("the instance document no longer carries the deletion's mark")

// DeleteInstancesAtomic deletes exactly these instances. Running instances
// need force; an instance whose child is not among ids is refused, before
// anything is written.
func (p *CosmosProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error) {
	const op = "DeleteInstancesAtomic"
	if len(ids) == 0 {
		return DeleteInstanceResult{}, nil
	}
	lives, err := p.checkDeletable(ctx, op, ids, force)
	if err != nil {
		return DeleteInstanceResult{}, err
	}
	result, err := p.deleteWithIntent(ctx, ids, lives)
	return result, asOperation(op, err)
}

// deleteWithIntent carries out a deletion of ids (the lives of their
// instance documents as read) as this process's: its intent, then the
// marks and the sweep (finish).
func (p *CosmosProvider) deleteWithIntent(ctx context.Context, ids []string, lives map[string]string) (DeleteInstanceResult, error) {
	now := p.nowMs()
	intent := deletionDoc{ID: "d|" + newLockToken(""), PK: instancePartitionKey(ids[0]), Type: docDeletion,
		Instance: ids[0], IDs: ids, CreatedAt: now, Lives: lives, Owner: newLockToken("del_"), BeatAt: now}
	p.deleting.claim(intent.ID)
	defer p.deleting.release(intent.ID)
	d := &deleter{p: p, intent: intent}
	if err := d.record(ctx); err != nil {
		return DeleteInstanceResult{}, err
	}
	return d.finish(ctx)
}

// checkDeletable applies duroxide's refusals (Running without force, a
// child left behind) and returns the lives of the instance documents the
// deletion is to remove.
func (p *CosmosProvider) checkDeletable(ctx context.Context, op string, ids []string, force bool) (map[string]string, error) {
	wanted := map[string]bool{}
	for _, id := range ids {
		if err := validateInstanceID(op, id); err != nil {
			return nil, err
		}
		wanted[id] = true
	}
	lives := map[string]string{}
	for _, id := range ids {
		stored, err := p.readInstance(ctx, id)
		if err != nil {
			return nil, asOperation(op, err)
		}
		if stored != nil {
			lives[id] = stored.Life
			if err := p.checkRunning(ctx, op, stored, force); err != nil {
				return nil, err
			}
		}
		children, err := p.ListChildren(ctx, id)
		if err != nil {
			return nil, asOperation(op, err)
		}
		for _, child := range children {
			if !wanted[child] {
				return nil, refuse(op, fmt.Sprintf("instance %q has child %q, which is not being deleted: delete the whole tree", id, child), ErrOrphanedChild)
			}
		}
	}
	return lives, nil
}

// checkRunning refuses a Running instance without force, unless a
// deletion already marked it or an ancestor (it reads as deleted).
func (p *CosmosProvider) checkRunning(ctx context.Context, op string, stored *instanceDoc, force bool) error {
	if force {
		return nil
	}
	if !stored.exists() {
		return p.checkQueued(ctx, op, stored)
	}
	if stored.Status != StatusRunning {
		return nil
	}
	marked, err := p.deletionReaches(ctx, stored)
	if err != nil {
		return asOperation(op, err)
	}
	if !marked {
		return refuse(op, fmt.Sprintf("instance %q is Running; use force=true to delete it", stored.Instance), ErrInstanceRunning)
	}
	return nil
}

// checkQueued refuses a queued start without force, as a Running instance
// is refused: it is not finished either.
func (p *CosmosProvider) checkQueued(ctx context.Context, op string, stored *instanceDoc) error {
	queued, err := p.readQueuedStart(ctx, stored)
	if err != nil {
		return asOperation(op, err)
	}
	if queued != nil {
		return refuse(op, fmt.Sprintf("instance %q is Queued; use force=true to delete it", queued.start.Instance), ErrInstanceRunning)
	}
	return nil
}

// deleter carries out one deletion intent while it owns it. Its writes to
// the intent are conditioned on its ownership; it renews its beat every
// third of AbandonedDeletionAge and stops once another process took the
// deletion over (errDeletionLost).
type deleter struct {
	p      *CosmosProvider
	intent deletionDoc
	etag   ETag // of the intent, as this deleter last wrote it
}

// record is step 1: the intent with the first instance's mark.
func (d *deleter) record(ctx context.Context) error {
	body, err := json.Marshal(d.intent)
	if err != nil {
		return err
	}
	// Rung whatever the answer (a lost one may have applied): the chore
	// leader finishes the deletion should this process stop.
	defer d.p.bell.ring(bellChores, d.p.now())
	b := d.p.container.NewTransactionalBatch(NewPartitionKeyString(d.intent.PK))
	b.CreateItem(body, nil)
	if ops, ok := d.markOps(d.intent.IDs[0]); ok {
		b.PatchItem(instanceDocID, ops, nil)
	}
	resp, err := d.p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if resp.Success {
		d.etag = resp.OperationResults[0].ETag
		return nil
	}
	if idx, err := resp.FailedOperation(); idx != 1 || !missingOrChanged(err) {
		return asOperation("DeleteInstancesAtomic", err)
	}
	// The first instance's life is gone already: record the intent alone.
	created, err := d.p.container.CreateItem(ctx, NewPartitionKeyString(d.intent.PK), body, nil)
	if err != nil {
		return err
	}
	d.etag = created.ETag
	return nil
}

// markOps marks id's instance document, on the condition that it is still
// the life the intent names; false when the intent names none (the id had
// no instance document: whatever is there now is a new life).
func (d *deleter) markOps(id string) (PatchOperations, bool) {
	var ops PatchOperations
	if d.intent.Lives != nil {
		life, ok := d.intent.Lives[id]
		if !ok {
			return ops, false
		}
		if life == "" {
			ops.SetCondition("from c where not is_defined(c.life)")
		} else {
			ops.SetCondition("from c where c.life = " + sqlString(life))
		}
	}
	ops.AppendSet("/deleting", d.intent.ID)
	return ops, true
}

// markAll marks every instance of the intent after the first.
func (d *deleter) markAll(ctx context.Context) error {
	return d.mark(ctx, d.intent.IDs[1:])
}

// mark marks ids, each on the life the intent names.
func (d *deleter) mark(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if err := d.renewIfDue(ctx); err != nil {
			return err
		}
		ops, ok := d.markOps(id)
		if !ok {
			continue
		}
		_, err := d.p.container.PatchItem(ctx, partitionKey(id), instanceDocID, ops, nil)
		switch {
		case err == nil: // marked: this life's items are the deletion's
			d.p.ended.Ended(partitionEnded(instancePartitionKey(id)), d.p.nowMs())
			d.p.dropReadyOf(instancePartitionKey(id)) // Keeps: H4
		case !IsNotFound(err) && !IsPreconditionFailed(err):
			return err
		}
	}
	return nil
}

// maxAdoptRounds bounds the rounds of adoptLateChildren: one per
// generation of children found late.
const maxAdoptRounds = 8

// adoptLateChildren adds to the deletion the children its caller's listing
// could not see, and marks them: a child whose start was delivered (its
// instance document names its parent, newLockDoc) but whose first turn had
// not committed, or committed after the listing. Left out, such a child
// would run for its deleted parent under its deterministic id, and drop the
// start of the parent's next life as one from another life (lives.go). It
// runs once every instance of the intent carries the mark, so a child whose
// instance document appears after its query had its start delivered after
// its parent's mark, and its first turn, which reads the parent, drops that
// start. A child another deletion marks is that deletion's. An intent
// written before lives were recorded is finished as it was recorded.
func (d *deleter) adoptLateChildren(ctx context.Context) error {
	if d.intent.Lives == nil {
		return nil
	}
	for round := 0; round < maxAdoptRounds; round++ {
		late, err := d.p.lateChildren(ctx, d.intent.IDs)
		if err != nil || len(late) == 0 {
			return err
		}
		ids := slices.Clone(d.intent.IDs)
		lives := maps.Clone(d.intent.Lives)
		for _, c := range late {
			ids = append(ids, c.Instance)
			lives[c.Instance] = c.Life
		}
		if err := d.writeIntent(ctx, func(ops *PatchOperations) {
			ops.AppendSet("/ids", ids)
			ops.AppendSet("/lives", lives)
		}); err != nil {
			return err
		}
		d.intent.IDs, d.intent.Lives = ids, lives
		if err := d.mark(ctx, ids[len(ids)-len(late):]); err != nil {
			return err
		}
	}
	d.p.log.Warn("cdb: a deletion kept finding children started late; deleting what it found", "deletion", d.intent.ID)
	return nil
}

// lateChild is an instance document that names a parent among a
// deletion's ids but is not among them.
type lateChild struct {
	Instance string `json:"instance"`
	Life     string `json:"life"`
}

// lateChildren lists the unmarked instance documents, named or not, whose
// parent is among ids and which are not.
func (p *CosmosProvider) lateChildren(ctx context.Context, ids []string) ([]lateChild, error) {
	res, err := p.container.QueryItems(ctx,
		"SELECT c.instance, c.life FROM c WHERE c.type = @type AND ARRAY_CONTAINS(@ids, c.parent) "+
			"AND NOT ARRAY_CONTAINS(@ids, c.instance) AND NOT IS_DEFINED(c.deleting)",
		[]QueryParameter{{Name: "@type", Value: docInstance}, {Name: "@ids", Value: ids}}, nil)
	if err != nil {
		return nil, fmt.Errorf("list children started late: %w", err)
	}
	late := make([]lateChild, 0, len(res.Items))
	for _, raw := range res.Items {
		var c lateChild
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("decode a child started late: %w", err)
		}
		late = append(late, c)
	}
	return late, nil
}

// finish carries out steps 2 to 4; it is safe to run again. A deleter that
// lost the deletion to another process returns what it deleted itself,
// without error: the deletion was decided when its intent was written,
// every instance of it reads as deleted since, and the new owner finishes
// it.
func (d *deleter) finish(ctx context.Context) (DeleteInstanceResult, error) {
	result, err := d.carryOut(ctx)
	if errors.Is(err, errDeletionLost) {
		d.p.log.Info("cdb: a deletion went on without this process; its new owner finishes it", "deletion", d.intent.ID)
		return result, nil
	}
	return result, err
}

func (d *deleter) carryOut(ctx context.Context) (DeleteInstanceResult, error) {
	var result DeleteInstanceResult
	if !d.intent.Marked {
		if err := d.markAll(ctx); err != nil {
			return result, err
		}
		if err := d.adoptLateChildren(ctx); err != nil {
			return result, err
		}
		if err := d.writeIntent(ctx, func(ops *PatchOperations) { ops.AppendSet("/marked", true) }); err != nil {
			return result, err
		}
	}
	deleted := map[string]bool{}
	for _, id := range d.intent.IDs {
		deleted[instancePartitionKey(id)] = true
	}
	for _, id := range d.intent.IDs {
		if err := d.renewIfDue(ctx); err != nil {
			return result, err
		}
		r, err := d.p.deletePartition(ctx, id, d.intent.ID, deleted)
		if err != nil {
			return result, err
		}
		result = result.Add(r)
	}
	if err := d.deleteIntent(ctx); err != nil && !errors.Is(err, errDeletionLost) {
		// Every instance is gone: the deletion is done. Its intent is
		// housekeeping, left to the reconciler, which takes over an intent
		// whose owner stopped beating and, finding no mark of it, removes
		// it. A caller told of a failure would delete again, and a next
		// life of the id, started as soon as the first read as deleted,
		// with it.
		d.p.log.Warn("cdb: a finished deletion's intent could not be removed; the reconciler removes it", "deletion", d.intent.ID, "error", err)
	}
	return result, nil
}

// renewIfDue renews the owner's beat when a third of AbandonedDeletionAge
// has passed since the last.
func (d *deleter) renewIfDue(ctx context.Context) error {
	if d.p.nowMs()-d.intent.BeatAt < max(d.p.cfg.AbandonedDeletionAge.Milliseconds()/3, 1) {
		return nil
	}
	return d.writeIntent(ctx, func(*PatchOperations) {})
}

// writeIntent patches the intent, with a new beat, while this deleter owns
// it.
func (d *deleter) writeIntent(ctx context.Context, also func(*PatchOperations)) error {
	now := d.p.nowMs()
	var ops PatchOperations
	ops.SetCondition(ownedBy(d.intent.Owner))
	ops.AppendSet("/beatAt", now)
	also(&ops)
	resp, err := d.p.container.PatchItem(ctx, NewPartitionKeyString(d.intent.PK), d.intent.ID, ops, nil)
	switch {
	case IsNotFound(err) || IsPreconditionFailed(err):
		return errDeletionLost
	case err != nil:
		return fmt.Errorf("renew deletion %s: %w", d.intent.ID, err)
	}
	d.intent.BeatAt, d.etag = now, resp.ETag
	return nil
}

// deleteIntent is step 4, by the owner only: the delete is conditioned on
// the version this deleter last wrote, read again when a write's lost
// response left that unknown.
func (d *deleter) deleteIntent(ctx context.Context) error {
	pk := NewPartitionKeyString(d.intent.PK)
	for attempt := 0; attempt < 2; attempt++ {
		etag := d.etag
		_, err := d.p.container.DeleteItem(ctx, pk, d.intent.ID, &ItemOptions{IfMatch: &etag})
		switch {
		case err == nil || IsNotFound(err):
			return nil
		case !IsPreconditionFailed(err):
			return err
		}
		resp, err := d.p.readLatest(ctx, pk, d.intent.ID)
		if IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var stored deletionDoc
		if err := json.Unmarshal(resp.Value, &stored); err != nil {
			return fmt.Errorf("decode deletion intent: %w", err)
		}
		if stored.Owner != d.intent.Owner {
			return errDeletionLost
		}
		d.etag = resp.ETag
	}
	return fmt.Errorf("deletion %s changed under its owner", d.intent.ID)
}

// partitionRow is what deletion needs to know of a document.
type partitionRow struct {
	docVersion
	Type     string `json:"type"`
	Events   int    `json:"events"`
	Deleting string `json:"deleting"`
}

// deletePartition deletes an instance's documents, leaving out the
// deletion intent, until none is left; the instance document, which carries
// the mark, goes last, and then the partition is left alone: whatever is
// written there afterwards (a start of the same id) belongs to a new life.
// So it works only while the instance document carries this intent's mark,
// and each of its batches checks that the mark is still there (sweepDocs).
// Undelivered effects in the instance's outboxes that target instances
// outside the deletion (a detached start whose delivery failed) are
// delivered first: the turn that wrote them was told it committed.
func (p *CosmosProvider) deletePartition(ctx context.Context, instance, intentID string, deleted map[string]bool) (DeleteInstanceResult, error) {
	var result DeleteInstanceResult
	pk := instancePartitionKey(instance)
	defer p.cache.drop(pk)
	p.ended.Ending(partitionEnded(pk))
	defer func() { p.ended.Ended(partitionEnded(pk), p.nowMs()) }()
	p.dropReadyOf(pk) // Keeps: H4
	for round := 0; round < maxDeleteRounds; round++ {
		rows, err := p.partitionRows(ctx, pk, intentID)
		if err != nil {
			return result, err
		}
		if !markedBy(rows, intentID) {
			return result, nil // swept already, or never started
		}
		var docs []docVersion
		var counts DeleteInstanceResult
		for _, r := range rows {
			if r.Type == docInstance {
				continue
			}
			if r.Type == docOutbox {
				if err := p.deliverOutside(ctx, pk, r.ID, deleted); err != nil {
					return result, err
				}
			}
			countDeleted(&counts, r)
			docs = append(docs, r.docVersion)
		}
		if err := p.sweepDocs(ctx, pk, intentID, docs); errors.Is(err, errMarkGone) {
			return result, nil // another process swept it to the end
		} else if err != nil {
			return result, err
		}
		result = result.Add(counts)
		if len(docs) == 0 {
			if err := p.deleteMarkedInstance(ctx, pk, intentID); err != nil {
				return result, err
			}
			result.InstancesDeleted++
			return result, nil
		}
	}
	return result, fmt.Errorf("instance %q still had documents after %d rounds of deletion; the reconciler will finish", instance, maxDeleteRounds)
}

// markedBy says the partition's instance document carries the intent's mark.
func markedBy(rows []partitionRow, intentID string) bool {
	for _, r := range rows {
		if r.Type == docInstance {
			return r.Deleting == intentID
		}
	}
	return false
}

// markHeld is the fence of every sweep batch: it applies only while the
// instance document carries the intent's mark, and leaves the mark as it
// is.
func markHeld(intentID string) PatchOperations {
	var ops PatchOperations
	ops.SetCondition("from c where c.deleting = " + sqlString(intentID))
	ops.AppendSet("/deleting", intentID)
	return ops
}

// sweepDocs deletes the listed versions of a marked partition's documents
// in batches fenced by the mark (markHeld): a round listed before another
// process swept the partition to the end deletes nothing, not even a
// document it listed that the end of the sweep left in place (a start that
// arrived meanwhile, which its writer was told stands). A document gone or
// changed since the listing is left to the next round. errMarkGone when
// the mark is gone.
func (p *CosmosProvider) sweepDocs(ctx context.Context, pk, intentID string, docs []docVersion) error {
	key := NewPartitionKeyString(pk)
	for start := 0; start < len(docs); start += MaxBatchOperations - 1 {
		chunk := slices.Clone(docs[start:min(start+MaxBatchOperations-1, len(docs))])
		for len(chunk) > 0 {
			b := p.container.NewTransactionalBatch(key)
			b.PatchItem(instanceDocID, markHeld(intentID), nil)
			for _, d := range chunk {
				b.DeleteItem(d.ID, ifListed(d))
			}
			resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil {
				return err
			}
			if resp.Success {
				break
			}
			idx, opErr := resp.FailedOperation()
			switch {
			case !missingOrChanged(opErr):
				return asOperation("DeleteInstancesAtomic", opErr)
			case idx == 0:
				return errMarkGone
			}
			chunk = slices.Delete(chunk, idx-1, idx) // gone or changed since the listing
		}
	}
	return nil
}

// deleteMarkedInstance deletes the instance document if it still carries
// the intent's mark.
func (p *CosmosProvider) deleteMarkedInstance(ctx context.Context, pk, intentID string) error {
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(pk))
	b.PatchItem(instanceDocID, markHeld(intentID), nil)
	b.DeleteItem(instanceDocID, nil)
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if !resp.Success {
		_, opErr := resp.FailedOperation()
		if missingOrChanged(opErr) {
			return nil // gone already, or a new life's
		}
		return asOperation("DeleteInstancesAtomic", opErr)
	}
	return nil
}

// deliverOutside delivers an outbox's entries whose targets are not being
// deleted.
func (p *CosmosProvider) deliverOutside(ctx context.Context, pk, outboxID string, deleted map[string]bool) error {
	resp, err := p.container.ReadItem(ctx, NewPartitionKeyString(pk), outboxID, nil)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc outboxDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return fmt.Errorf("decode outbox %s: %w", outboxID, err)
	}
	entries := outboxEntries{r: p.outbox, doc: &doc}
	shells := map[string]bool{}
	for i := 0; i < doc.total(); i++ {
		e, err := entries.at(ctx, i)
		if err != nil {
			return fmt.Errorf("read outbox %s before deleting it: %w", outboxID, err)
		}
		if deleted[e.PK] {
			continue
		}
		if err := p.outbox.deliverEntry(ctx, e, shells); err != nil {
			return fmt.Errorf("deliver outbox %s before deleting it: %w", outboxID, err)
		}
	}
	return nil
}

func countDeleted(result *DeleteInstanceResult, r partitionRow) {
	switch r.Type {
	case docExecution:
		result.ExecutionsDeleted++
	case docHistory:
		result.EventsDeleted += uint64(r.Events)
	case docMessage, docWork:
		result.QueueMessagesDeleted++
	}
}

// partitionRows lists a partition's documents but the deletion intent.
func (p *CosmosProvider) partitionRows(ctx context.Context, pk, intentID string) ([]partitionRow, error) {
	res, err := p.container.QueryItems(ctx, "SELECT c.id, c._etag, c.type, ARRAY_LENGTH(c.eventIds) AS events, c.deleting FROM c WHERE c.pk = @pk AND c.id != @intent",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@intent", Value: intentID}}, wholePartitionRead(pk))
	if err != nil {
		return nil, err
	}
	rows := make([]partitionRow, 0, len(res.Items))
	for _, raw := range res.Items {
		var r partitionRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("decode document row: %w", err)
		}
		if r.Type == docDeletion {
			continue // another intent in this partition finishes on its own
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// finishPendingDeletions takes over and completes the deletions whose
// owner's beat is older than AbandonedDeletionAge (never one this process is
// carrying out), and says how many intents are pending, live or not: the
// reconciler looks again next interval while there are any. The query reads
// them all (rarely more than a few), so that a quiet bell may skip it once
// it found none.
func (p *CosmosProvider) finishPendingDeletions(ctx context.Context) (pending int, err error) {
	cutoff := p.now().Add(-p.cfg.AbandonedDeletionAge).UnixMilli()
	res, err := p.container.QueryItems(ctx, "SELECT * FROM c WHERE c.type = @type",
		[]QueryParameter{{Name: "@type", Value: docDeletion}}, nil)
	if err != nil {
		return 0, err
	}
	for _, raw := range res.Items {
		var intent deletionDoc
		if err := json.Unmarshal(raw, &intent); err != nil {
			return len(res.Items), fmt.Errorf("decode deletion intent: %w", err)
		}
		if intent.lastSignOfLife() > cutoff {
			continue // its owner is on it
		}
		if !p.deleting.claim(intent.ID) {
			continue // this process is on it
		}
		err := p.takeOverDeletion(ctx, intent)
		p.deleting.release(intent.ID)
		if err != nil {
			return len(res.Items), err
		}
	}
	return len(res.Items), nil
}

// lastSignOfLife is the intent's owner's last beat, or its creation for
// an intent written before beats existed.
func (d deletionDoc) lastSignOfLife() int64 {
	if d.BeatAt != 0 {
		return d.BeatAt
	}
	return d.CreatedAt
}

// takeOverDeletion makes an abandoned deletion this process's, by a PATCH
// conditioned on the version the query saw (another process taking it
// over, or its owner's late beat, makes it fail), and finishes it.
func (p *CosmosProvider) takeOverDeletion(ctx context.Context, intent deletionDoc) error {
	now := p.nowMs()
	owner := newLockToken("del_")
	var ops PatchOperations
	ops.AppendSet("/owner", owner)
	ops.AppendSet("/beatAt", now)
	etag := intent.ETag
	resp, err := p.container.PatchItem(ctx, NewPartitionKeyString(intent.PK), intent.ID, ops, &ItemOptions{IfMatch: &etag})
	switch {
	case IsNotFound(err) || IsPreconditionFailed(err):
		return nil // finished, renewed or taken over meanwhile
	case err != nil:
		return fmt.Errorf("take over deletion %s: %w", intent.ID, err)
	}
	p.log.Info("cdb: took over a deletion its process left", "deletion", intent.ID, "instance", intent.Instance)
	intent.Owner, intent.BeatAt = owner, now
	d := &deleter{p: p, intent: intent, etag: resp.ETag}
	_, err = d.finish(ctx)
	return err
}

// readLiveInstance reads an instance's document, nil when it does not exist
// or a deletion marked it or any of its ancestors: a deletion records its
// root's mark first, so a tree never reads as half deleted.
func (p *CosmosProvider) readLiveInstance(ctx context.Context, instance string) (*instanceDoc, error) {
	inst, err := p.readInstance(ctx, instance)
	if err != nil || inst == nil {
		return nil, err
	}
	marked, err := p.deletionReaches(ctx, inst)
	if err != nil || marked {
		return nil, err
	}
	return inst, nil
}

// deletionReaches says a deletion marked inst or one of its ancestors, or
// inst's retention ended (retention.go): it reads as gone.
func (p *CosmosProvider) deletionReaches(ctx context.Context, inst *instanceDoc) (bool, error) {
	if inst.retainedPast(p.nowMs()) {
		return true, nil
	}
	seen := map[string]bool{inst.Instance: true}
	for cur := inst; cur != nil; {
		if cur.Deleting != "" {
			return true, nil
		}
		if cur.Parent == nil || seen[*cur.Parent] {
			return false, nil
		}
		seen[*cur.Parent] = true
		var err error
		if cur, err = p.readInstance(ctx, *cur.Parent); err != nil {
			return false, err
		}
	}
	return false, nil
}
