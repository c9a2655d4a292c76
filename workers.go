package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// The worker queue: one document per ActivityExecute in its instance's
// partition, with a deterministic id, claimed by a conditional patch.

// EnqueueForWorker writes an ActivityExecute, visible at once.
func (p *CosmosProvider) EnqueueForWorker(ctx context.Context, item WorkItem) error {
	const op = "enqueue_for_worker"
	act, ok := item.(ActivityExecute)
	if !ok {
		if item == nil {
			return Permanent(op, "work item is nil")
		}
		return Permanent(op, fmt.Sprintf("%s belongs on the orchestrator queue; only ActivityExecute goes to the worker queue", item.Kind()))
	}
	if err := validateInstanceID(op, act.Instance); err != nil {
		return err
	}
	pk := partitionKey(act.Instance)
	body, err := p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID), p.nowMs())
	if err != nil {
		return Permanent(op, err.Error())
	}
	_, err = p.container.CreateItem(ctx, pk, body, nil)
	if IsConflict(err) {
		// The same activity identity is queued already; keep both, as
		// duroxide's SQLite provider would.
		body, err = p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID)+"|"+newLockToken(""), p.nowMs())
		if err != nil {
			return Permanent(op, err.Error())
		}
		_, err = p.container.CreateItem(ctx, pk, body, nil)
	}
	if err != nil {
		return wrap(op, err)
	}
	p.workSignal.notify()
	return nil
}

// newWorkDoc encodes a worker-queue document.
func (p *CosmosProvider) newWorkDoc(act ActivityExecute, id string, nowMs int64) ([]byte, error) {
	encoded, err := MarshalWorkItem(act)
	if err != nil {
		return nil, fmt.Errorf("encode ActivityExecute: %w", err)
	}
	return json.Marshal(queueDoc{
		ID: id, PK: instancePartitionKey(act.Instance), Type: docWork, Instance: act.Instance,
		Slot: dispatchSlot(act.Instance), VisibleAt: nowMs, Seq: p.nextSeq(),
		Exec: act.ExecutionID, Activity: act.ID, Session: act.SessionID, SessionKey: sessionKey(act.Instance, act.SessionID), Tag: act.Tag,
		Item: string(encoded),
	})
}

// fetchedWork is what a successful worker fetch returns.
type fetchedWork struct {
	item     WorkItem
	token    string
	attempts uint32
}

// FetchWorkItem claims the oldest visible, unlocked worker item that the
// session and tag rules allow.
func (p *CosmosProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (WorkItem, string, uint32, error) {
	const op = "fetch_work_item"
	if tags.Mode() == TagFilterNone {
		return nil, "", 0, nil
	}
	res, found, err := poll(ctx, p, p.workSignal, queueWorker, workView(session, tags), pollTimeout,
		func(ctx context.Context, slots []int) (fetchedWork, pollOutcome, error) {
			return p.tryFetchWork(ctx, slots, lockTimeout, session, tags)
		})
	if err != nil {
		return nil, "", 0, wrap(op, err)
	}
	if !found {
		return nil, "", 0, nil
	}
	return res.item, res.token, res.attempts, nil
}

// workView names the queue as a fetch with these filters sees it.
func workView(session *SessionFetchConfig, tags TagFilter) string {
	if session == nil {
		return "nosession/" + tags.String()
	}
	return "session:" + session.OwnerID + "/" + tags.String()
}

// workFilter is the session and tag part of the worker candidate query.
func workFilter(session *SessionFetchConfig, tags TagFilter) ([]string, []QueryParameter) {
	var where []string
	var params []QueryParameter
	if session == nil {
		where = append(where, "NOT IS_DEFINED(c.session)")
	}
	switch tags.Mode() {
	case TagFilterDefaultOnly:
		where = append(where, "NOT IS_DEFINED(c.tag)")
	case TagFilterTags:
		where = append(where, "ARRAY_CONTAINS(@tags, c.tag)")
		params = append(params, QueryParameter{Name: "@tags", Value: tags.Tags()})
	case TagFilterDefaultAnd:
		where = append(where, "NOT IS_DEFINED(c.tag) OR ARRAY_CONTAINS(@tags, c.tag)")
		params = append(params, QueryParameter{Name: "@tags", Value: tags.Tags()})
	}
	return where, params
}

func (p *CosmosProvider) tryFetchWork(ctx context.Context, slots []int, lockTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (fetchedWork, pollOutcome, error) {
	where, params := workFilter(session, tags)
	if session != nil {
		// Sessions another owner holds: leave their items out for a moment.
		if held := p.contended.active("session:"+session.OwnerID, p.now()); len(held) > 0 {
			where = append(where, "NOT IS_DEFINED(c.sessionKey) OR NOT ARRAY_CONTAINS(@heldSessions, c.sessionKey)")
			params = append(params, QueryParameter{Name: "@heldSessions", Value: held})
		}
	}
	cands, err := p.runCandidateQuery(ctx, candidateQuery{docType: docWork, slots: slots, where: where, params: params})
	if err != nil {
		return fetchedWork{}, outcomeEmpty, err
	}
	if len(cands) == 0 {
		return fetchedWork{}, outcomeEmpty, nil
	}
	for i, c := range cands {
		if i == maxLockAttempts {
			break
		}
		res, err := p.claimWork(ctx, c, lockTimeout, session)
		if err == errContended {
			continue
		}
		if err != nil {
			return fetchedWork{}, outcomeBusy, err
		}
		return res, outcomeFound, nil
	}
	return fetchedWork{}, outcomeBusy, nil
}

// claimWork locks one candidate with a patch conditioned on its ETag: of
// two dispatchers that saw the same item, one wins (R3). A session-bound
// item is locked in one batch with its session's claim.
func (p *CosmosProvider) claimWork(ctx context.Context, c queueDoc, lockTimeout time.Duration, session *SessionFetchConfig) (fetchedWork, error) {
	token := newLockToken("work_")
	until := p.nowMs() + lockTimeout.Milliseconds()
	var body []byte
	var etag ETag
	if c.Session != nil && session != nil {
		resp, err := p.claimSessionWork(ctx, c, lockTimeout, session, token)
		if err != nil {
			return fetchedWork{}, err
		}
		body, etag = resp.OperationResults[1].ResourceBody, resp.OperationResults[1].ETag
	} else {
		resp, err := p.container.PatchItem(ctx, NewPartitionKeyString(c.PK), c.ID, claimOps(token, until), &ItemOptions{IfMatch: &c.ETag, EnableContentResponseOnWrite: true})
		if IsPreconditionFailed(err) || IsNotFound(err) {
			return fetchedWork{}, errContended
		}
		if err != nil {
			return fetchedWork{}, err
		}
		body, etag = resp.Value, resp.ETag
	}
	var doc queueDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return fetchedWork{}, fmt.Errorf("decode claimed work item: %w", err)
	}
	doc.ETag = etag
	item, err := UnmarshalWorkItem([]byte(doc.Item))
	if err != nil {
		return fetchedWork{}, fmt.Errorf("decode work item %s: %w", doc.ID, err)
	}
	p.workLocks.put(token, &workLock{token: token, pk: doc.PK, doc: doc, lockedUntil: until})
	return fetchedWork{item: item, token: token, attempts: doc.Attempts}, nil
}

// heldWork returns the lock for token if it is still this process's and
// valid.
func (p *CosmosProvider) heldWork(op, token string) (*workLock, error) {
	lock, ok := p.workLocks.get(token)
	if !ok {
		return nil, Permanent(op, "unknown lock token: the work item was acked, abandoned or never fetched here")
	}
	lock.mu.Lock()
	if lock.done {
		lock.mu.Unlock()
		return nil, Permanent(op, "the work item was already acked or abandoned")
	}
	if p.nowMs() >= lock.lockedUntil {
		lock.done = true
		lock.mu.Unlock()
		p.workLocks.remove(token)
		return nil, Permanent(op, "the work item's lock expired")
	}
	return lock, nil
}

// AckWorkItem deletes the held item and enqueues its completion in one
// batch; it fails permanently when the item was cancelled or its lock lost.
func (p *CosmosProvider) AckWorkItem(ctx context.Context, lockToken string, completion WorkItem) error {
	const op = "ack_work_item"
	lock, err := p.heldWork(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	if completion != nil {
		switch completion.(type) {
		case ActivityCompleted, ActivityFailed:
		default:
			return Permanent(op, fmt.Sprintf("a completion is ActivityCompleted or ActivityFailed, not %s", completion.Kind()))
		}
	}
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	etag := lock.doc.ETag
	consumeItem(b, lock.doc, &TransactionalBatchItemOptions{IfMatch: &etag})
	if completion != nil {
		if err := p.addCompletion(b, lock, completion); err != nil {
			return err
		}
	}
	if lock.doc.Session != nil {
		touchSession(b, *lock.doc.Session, p.nowMs())
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return wrap(op, err)
	}
	if !resp.Success {
		if idx, ce, _ := resp.FailedOperation(); idx == 0 && isGone(ce) {
			return p.lostWork(op, lock)
		}
		return batchFailure(op, resp)
	}
	lock.done = true
	p.workLocks.remove(lockToken)
	if completion != nil {
		p.orchSignal.notify()
	}
	return nil
}

// addCompletion adds the completion message to the ack's batch; one for
// another instance goes through an outbox document instead.
func (p *CosmosProvider) addCompletion(b *TransactionalBatch, lock *workLock, completion WorkItem) error {
	const op = "ack_work_item"
	target := completion.InstanceID()
	id := "m|w|" + lock.token
	body, err := p.newMessageDoc(completion, id, p.nowMs())
	if err != nil {
		return Permanent(op, err.Error())
	}
	if instancePartitionKey(target) == lock.pk {
		b.CreateItem(body, nil)
		return nil
	}
	// Left to the reconciler (no owner, no order among the instance's
	// outboxes); the message is marked relayed, so its consumer leaves a
	// marker.
	doc := outboxDoc{ID: "o|" + lock.token, PK: lock.pk, Type: docOutbox, Instance: lock.doc.Instance, CreatedAt: p.nowMs(),
		Entries: []outboxEntry{{PK: instancePartitionKey(target), Doc: relayedBody(body)}}}
	ob, err := json.Marshal(doc)
	if err != nil {
		return Permanent(op, err.Error())
	}
	b.CreateItem(ob, nil)
	return nil
}

// RenewWorkItemLock extends a held, still valid work item lock.
func (p *CosmosProvider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	lock, err := p.heldWork(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	now := p.nowMs()
	until := now + extendFor.Milliseconds()
	var ops PatchOperations
	ops.AppendSet("/lockedUntil", until)
	etag := lock.doc.ETag
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	b.PatchItem(lock.doc.ID, ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	if lock.doc.Session != nil {
		touchSession(b, *lock.doc.Session, now)
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return wrap(op, err)
	}
	if !resp.Success {
		if idx, ce, _ := resp.FailedOperation(); idx == 0 && isGone(ce) {
			return p.lostWork(op, lock)
		}
		return batchFailure(op, resp)
	}
	lock.doc.ETag = resp.OperationResults[0].ETag
	lock.lockedUntil = until
	return nil
}

// isGone says a write conditioned on a held item's ETag failed because the
// item changed (a tombstone, another holder) or went away.
func isGone(ce *CosmosError) bool {
	return ce != nil && (ce.StatusCode == http.StatusPreconditionFailed || ce.StatusCode == http.StatusNotFound)
}

// lostWork forgets a lock the item no longer honours and reports it: the
// runtime's signal that the activity was cancelled.
func (p *CosmosProvider) lostWork(op string, lock *workLock) error {
	lock.done = true
	p.workLocks.remove(lock.token)
	return Permanent(op, "the work item was cancelled or its lock was lost")
}

// AbandonWorkItem releases a held item, visible again after delay.
func (p *CosmosProvider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_work_item"
	lock, ok := p.workLocks.get(lockToken)
	if !ok {
		return Permanent(op, "unknown lock token: the work item was acked, abandoned or never fetched here")
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	if lock.done {
		return Permanent(op, "the work item was already acked or abandoned")
	}
	ops := unlockOps()
	ops.AppendSet("/visibleAt", p.now().Add(max(delay, 0)).UnixMilli())
	if ignoreAttempt {
		ops.AppendSet("/attempts", max(lock.doc.Attempts, 1)-1)
	}
	etag := lock.doc.ETag
	_, err := p.container.PatchItem(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID, ops, &ItemOptions{IfMatch: &etag})
	if IsPreconditionFailed(err) || IsNotFound(err) {
		return p.lostWork(op, lock)
	}
	if err != nil {
		return wrap(op, err)
	}
	lock.done = true
	p.workLocks.remove(lockToken)
	if delay > 0 {
		p.workSignal.notifyAt(p.now().Add(delay))
	} else {
		p.workSignal.notify()
	}
	return nil
}
