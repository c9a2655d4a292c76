package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Deleting instances spans partitions, and Cosmos DB has no cross-partition
// transaction. So a deletion is an intent carried out in steps that converge:
//
//  1. In one batch in the first instance's partition (the root of a tree):
//     the intent document, listing every instance, and the first instance's
//     mark (`deleting` on its instance document).
//  2. The other instances' marks. A marked instance reads as deleted: reads,
//     listings and the admin side leave it out, and a fetch cannot lock it.
//     The mark changes the instance document's ETag, so a turn in flight
//     cannot commit (its ack is If-Match) and recreates nothing. Then the
//     intent records that all are marked: resumed later, it marks none
//     again, as an unmarked one is by then a new life of its id.
//  3. Each partition's documents are deleted, in batches of 100, until a
//     query finds none left; the marked instance document goes last. A stale
//     worker's ack then fails: its item is gone.
//  4. The intent document is deleted.
//
// A process that dies half way leaves the intent and the marks; readers keep
// honouring them and the reconciler of any process finishes the deletion.

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
	// have begun: from then on an unmarked instance document of one of the
	// ids is a new life of it, which a resumed deletion must not mark.
	Marked bool `json:"marked,omitempty"`
}

// maxDeleteRounds bounds the query-and-delete rounds of one partition.
const maxDeleteRounds = 5

// DeleteInstancesAtomic deletes exactly these instances. Running instances
// need force; an instance whose child is not among ids is refused, before
// anything is written.
func (p *CosmosProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error) {
	const op = "DeleteInstancesAtomic"
	if len(ids) == 0 {
		return DeleteInstanceResult{}, nil
	}
	if err := p.checkDeletable(ctx, op, ids, force); err != nil {
		return DeleteInstanceResult{}, err
	}
	intent := deletionDoc{ID: "d|" + newLockToken(""), PK: instancePartitionKey(ids[0]), Type: docDeletion,
		Instance: ids[0], IDs: ids, CreatedAt: p.nowMs()}
	p.deleting.claim(intent.ID)
	defer p.deleting.release(intent.ID)
	if err := p.recordDeletion(ctx, intent); err != nil {
		return DeleteInstanceResult{}, wrap(op, err)
	}
	result, err := p.finishDeletion(ctx, intent)
	return result, wrap(op, err)
}

// checkDeletable applies duroxide's refusals: Running without force, and a
// child left behind.
func (p *CosmosProvider) checkDeletable(ctx context.Context, op string, ids []string, force bool) error {
	wanted := map[string]bool{}
	for _, id := range ids {
		if err := validateInstanceID(op, id); err != nil {
			return err
		}
		wanted[id] = true
	}
	for _, id := range ids {
		inst, err := p.readLiveInstance(ctx, id)
		if err != nil {
			return wrap(op, err)
		}
		if !force && inst.exists() && inst.Status == StatusRunning {
			return refusal(op, fmt.Sprintf("instance %q is Running; use force=true to delete it", id), ErrInstanceRunning)
		}
		children, err := p.ListChildren(ctx, id)
		if err != nil {
			return wrap(op, err)
		}
		for _, child := range children {
			if !wanted[child] {
				return refusal(op, fmt.Sprintf("instance %q has child %q, which is not being deleted: delete the whole tree", id, child), ErrOrphanedChild)
			}
		}
	}
	return nil
}

// recordDeletion writes the intent with the first instance's mark, then
// marks the others.
func (p *CosmosProvider) recordDeletion(ctx context.Context, intent deletionDoc) error {
	body, err := json.Marshal(intent)
	if err != nil {
		return err
	}
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(intent.PK))
	b.CreateItem(body, nil)
	b.PatchItem(instanceDocID, markOps(intent.ID), nil)
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if !resp.Success {
		if idx, ce, _ := resp.FailedOperation(); idx != 1 || ce == nil || ce.StatusCode != http.StatusNotFound {
			return batchFailure("DeleteInstancesAtomic", resp)
		}
		// No instance document: record the intent alone.
		if _, err := p.container.CreateItem(ctx, NewPartitionKeyString(intent.PK), body, nil); err != nil {
			return err
		}
	}
	return p.markAll(ctx, intent)
}

func markOps(intentID string) PatchOperations {
	var ops PatchOperations
	ops.AppendSet("/deleting", intentID)
	return ops
}

// markAll marks every instance of the intent after the first.
func (p *CosmosProvider) markAll(ctx context.Context, intent deletionDoc) error {
	for _, id := range intent.IDs[1:] {
		_, err := p.container.PatchItem(ctx, partitionKey(id), instanceDocID, markOps(intent.ID), nil)
		if err != nil && !IsNotFound(err) {
			return err
		}
	}
	return nil
}

// finishDeletion carries out steps 2 to 4; it is safe to run again.
func (p *CosmosProvider) finishDeletion(ctx context.Context, intent deletionDoc) (DeleteInstanceResult, error) {
	var result DeleteInstanceResult
	if !intent.Marked {
		if err := p.markAll(ctx, intent); err != nil {
			return result, err
		}
		if err := p.recordMarked(ctx, intent); IsNotFound(err) {
			return result, nil // finished by another process meanwhile
		} else if err != nil {
			return result, err
		}
	}
	deleted := map[string]bool{}
	for _, id := range intent.IDs {
		deleted[instancePartitionKey(id)] = true
	}
	for _, id := range intent.IDs {
		r, err := p.deletePartition(ctx, id, intent.ID, deleted)
		if err != nil {
			return result, err
		}
		result = result.Add(r)
	}
	_, err := p.container.DeleteItem(ctx, NewPartitionKeyString(intent.PK), intent.ID, nil)
	if err != nil && !IsNotFound(err) {
		return result, err
	}
	return result, nil
}

// recordMarked notes on the intent that every instance is marked, before
// any partition is swept.
func (p *CosmosProvider) recordMarked(ctx context.Context, intent deletionDoc) error {
	var ops PatchOperations
	ops.AppendSet("/marked", true)
	_, err := p.container.PatchItem(ctx, NewPartitionKeyString(intent.PK), intent.ID, ops, nil)
	return err
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
// So it works only while the instance document carries this intent's mark.
// Undelivered effects in the instance's outboxes that target instances
// outside the deletion (a detached start whose delivery failed) are
// delivered first: the turn that wrote them was told it committed.
func (p *CosmosProvider) deletePartition(ctx context.Context, instance, intentID string, deleted map[string]bool) (DeleteInstanceResult, error) {
	var result DeleteInstanceResult
	pk := instancePartitionKey(instance)
	for round := 0; round < maxDeleteRounds; round++ {
		rows, err := p.partitionRows(ctx, pk, intentID)
		if err != nil {
			return result, err
		}
		if !markedBy(rows, intentID) {
			p.cache.drop(pk)
			return result, nil // swept already, or never started
		}
		var docs []docVersion
		for _, r := range rows {
			if r.Type == docInstance {
				continue
			}
			if r.Type == docOutbox {
				if err := p.deliverOutside(ctx, pk, r.ID, deleted); err != nil {
					return result, err
				}
			}
			countDeleted(&result, r)
			docs = append(docs, r.docVersion)
		}
		if err := p.deleteDocs(ctx, pk, docs); err != nil {
			return result, err
		}
		if len(docs) == 0 {
			if err := p.deleteMarkedInstance(ctx, pk, intentID); err != nil {
				return result, err
			}
			result.InstancesDeleted++
			p.cache.drop(pk)
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

// deleteMarkedInstance deletes the instance document if it still carries
// the intent's mark.
func (p *CosmosProvider) deleteMarkedInstance(ctx context.Context, pk, intentID string) error {
	var ops PatchOperations
	ops.SetCondition("from c where c.deleting = " + sqlString(intentID))
	ops.AppendSet("/deleting", intentID)
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(pk))
	b.PatchItem(instanceDocID, ops, nil)
	b.DeleteItem(instanceDocID, nil)
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return err
	}
	if !resp.Success {
		if _, ce, _ := resp.FailedOperation(); ce != nil && (ce.StatusCode == http.StatusNotFound || ce.StatusCode == http.StatusPreconditionFailed) {
			return nil // gone already, or a new life's
		}
		return batchFailure("DeleteInstancesAtomic", resp)
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
	for i := 0; i < doc.total(); i++ {
		e, err := entries.at(ctx, i)
		if err != nil {
			return fmt.Errorf("read outbox %s before deleting it: %w", outboxID, err)
		}
		if deleted[e.PK] {
			continue
		}
		if err := p.outbox.deliverEntry(ctx, e); err != nil {
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
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx, "SELECT c.id, c._etag, c.type, ARRAY_LENGTH(c.eventIds) AS events, c.deleting FROM c WHERE c.pk = @pk AND c.id != @intent",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@intent", Value: intentID}}, &QueryOptions{PartitionKey: &key})
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

// finishPendingDeletions completes the deletions older than
// AbandonedDeletionAge that their process did not finish (never one this
// process is carrying out). The reconciler calls it.
func (p *CosmosProvider) finishPendingDeletions(ctx context.Context) error {
	cutoff := p.now().Add(-p.cfg.AbandonedDeletionAge).UnixMilli()
	res, err := p.container.QueryItems(ctx, "SELECT * FROM c WHERE c.type = @type AND c.createdAt <= @cutoff",
		[]QueryParameter{{Name: "@type", Value: docDeletion}, {Name: "@cutoff", Value: cutoff}}, nil)
	if err != nil {
		return err
	}
	for _, raw := range res.Items {
		var intent deletionDoc
		if err := json.Unmarshal(raw, &intent); err != nil {
			return fmt.Errorf("decode deletion intent: %w", err)
		}
		if !p.deleting.claim(intent.ID) {
			continue // this process is on it
		}
		_, err := p.finishDeletion(ctx, intent)
		p.deleting.release(intent.ID)
		if err != nil {
			return err
		}
	}
	return nil
}

// readLiveInstance reads an instance's document, nil when it does not exist
// or a deletion marked it or any of its ancestors: a deletion records its
// root's mark first, so a tree never reads as half deleted.
func (p *CosmosProvider) readLiveInstance(ctx context.Context, instance string) (*instanceDoc, error) {
	seen := map[string]bool{}
	inst, err := p.readInstance(ctx, instance)
	for cur := inst; err == nil && cur != nil; {
		if cur.Deleting != "" {
			return nil, nil
		}
		if cur.Parent == nil || seen[*cur.Parent] {
			break
		}
		seen[*cur.Parent] = true
		cur, err = p.readInstance(ctx, *cur.Parent)
	}
	if err != nil {
		return nil, err
	}
	return inst, nil
}
