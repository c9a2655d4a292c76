package cdb

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// The worker queue: one document per ActivityExecuteMessage in its instance's
// partition, with a deterministic id, claimed by a conditional patch.

// EnqueueForWorker writes an ActivityExecuteMessage, visible at once.
func (p *CosmosProvider) EnqueueForWorker(ctx context.Context, item WorkItem) error {
	const op = "EnqueueForWorker"
	act, ok := item.(ActivityExecuteMessage)
	if !ok {
		if item == nil {
			return refuse(op, "work item is nil", ErrInvalidInput)
		}
		return refuse(op, fmt.Sprintf("%s belongs on the orchestrator queue; only ActivityExecute goes to the worker queue", item.Kind()), ErrInvalidInput)
	}
	if err := validateInstanceID(op, act.Instance); err != nil {
		return err
	}
	pk := partitionKey(act.Instance)
	body, err := p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID), immediateAt(p.nowMs(), p.nextSeq()), p.ownWrites.workWriter(act, p.nowMs()), nil, "")
	if err != nil {
		return refuse(op, "", err)
	}
	body = markedOnConsume(body)
	// A lost response is resolved by sending again: a 409 after an
	// unknown outcome is this write, not an item queued before.
	err = p.createOnce(ctx, pk, body, false)
	if IsConflict(err) {
		// The same activity identity is queued already; keep both, as
		// duroxide's SQLite provider would.
		body, err = p.newWorkDoc(act, workDocID(act.ExecutionID, act.ID)+"|"+newLockToken(""), immediateAt(p.nowMs(), p.nextSeq()), p.ownWrites.workWriter(act, p.nowMs()), nil, "")
		if err != nil {
			return refuse(op, "", err)
		}
		body = markedOnConsume(body)
		err = p.createOnce(ctx, pk, body, false)
	}
	if err != nil {
		return asOperation(op, err)
	}
	p.bell.ring(queueWorker, p.now())
	if act.SessionID == nil || !p.announceSessionWork(*act.SessionID, instancePartitionKey(act.Instance)) {
		p.workSignal.announcePartitions(instancePartitionKey(act.Instance))
	}
	return nil
}

// newWorkDoc encodes a worker-queue document placed at at; writer is its
// own-writes stamp (ownwrites.go), "" for none; pinned the instance's pinned
// version when a turn schedules it; orch the instance's orchestration name
// when the writer knows it.
func (p *CosmosProvider) newWorkDoc(act ActivityExecuteMessage, id string, at queueTime, writer string, pinned *uint64, orch string) ([]byte, error) {
	doc, err := workDoc(act, id, at, writer, pinned, orch)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// workDoc is newWorkDoc's document before it is encoded.
func workDoc(act ActivityExecuteMessage, id string, at queueTime, writer string, pinned *uint64, orch string) (queueDoc, error) {
	encoded, err := MarshalWorkItem(act)
	if err != nil {
		return queueDoc{}, fmt.Errorf("encode ActivityExecute: %w", err)
	}
	return queueDoc{
		ID: id, PK: instancePartitionKey(act.Instance), Type: docWork, Instance: act.Instance,
		Slot: activitySlot(act), VisibleAt: at.visibleAt, Seq: at.seq, SeqVisible: at.immediate,
		Exec: act.ExecutionID, Activity: act.ID, Session: act.SessionID, Tag: act.Tag,
		Item: string(encoded), Writer: writer, Pinned: pinned, Trace: act.Trace, Orch: orch,
	}, nil
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
	const op = "FetchWorkItem"
	if tags.Mode() == TagFilterNone {
		return nil, "", 0, nil
	}
	defer p.ownWrites.workFetch(tags)()
	defer p.readyItems.Fetching(tags, lockTimeout)()
	watch := queueWatch{queue: queueWorker, signal: p.workSignal, leaseKey: workLeaseKey(session, tags), view: p.workView(session, tags),
		own: p.ownerSignalFor(session)}
	res, found, err := poll(ctx, p, watch, pollTimeout,
		func(ctx context.Context, scope lookScope) (fetchedWork, pollOutcome, error) {
			return p.tryFetchWork(ctx, scope, lockTimeout, session, tags)
		})
	if err != nil {
		return nil, "", 0, asOperation(op, err)
	}
	if !found {
		return nil, "", 0, nil
	}
	return res.item, res.token, res.attempts, nil
}

// workView names the queue as a fetch with these filters sees it, for the
// poll windows of an idle queue. Fetches with a session config share one
// view, whatever their owner, unless the owner holds a session: only an
// owner's own sessions widen what its query can find (the sessions other
// owners hold are left out of it), so a look that found nothing, by any
// owner, found nothing for an owner that holds none. The runtime gives
// each worker dispatcher an owner of its own, and an idle queue must not
// cost a query per dispatcher.
func (p *CosmosProvider) workView(session *SessionFetchConfig, tags TagFilter) string {
	switch {
	case session == nil:
		return "nosession/" + tags.String()
	case p.sessions.holdsAny(session.OwnerID, p.nowMs()):
		return ownerWorkView(session.OwnerID, tags)
	default:
		return sharedSessionWorkView(tags)
	}
}

// workLeaseKey names the worker fetches that share slots: same tags, with
// or without a session config, whatever the owner.
func workLeaseKey(session *SessionFetchConfig, tags TagFilter) string {
	if session == nil {
		return queueWorker + "/nosession/" + tags.String()
	}
	return queueWorker + "/" + sharedSessionWorkView(tags)
}

func ownerWorkView(owner string, tags TagFilter) string {
	return "session:" + owner + "/" + tags.String()
}

func sharedSessionWorkView(tags TagFilter) string { return "session/" + tags.String() }

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

// tryFetchWork takes one look at the worker queue. A look woken for an
// item locked ahead for this process's fetches takes one of those (no
// request), and so does a look at the whole queue unless one is due to go
// to the queue first (queueLookDue: one a poll interval); a look woken for
// a partition, and the look that is due, query the queue first and take a
// ready item only when the queue has nothing for it. So a busy process
// takes what it locked ahead within its window (what it gives back costs a
// claim and a query again), and queued work still waits no more than about
// a poll interval behind it (queueSignal.nextToken).
func (p *CosmosProvider) tryFetchWork(ctx context.Context, scope lookScope, lockTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (fetchedWork, pollOutcome, error) {
	if !scope.readyOnly(handoff.ReadyItem) {
		if scope.pk == "" && !p.workSignal.queueLookDue() {
			if ready, ok := p.takeEager(ctx, lockTimeout, tags); ok {
				return ready, outcomeFound, nil
			}
		}
		res, outcome, err := p.queryAndClaimWork(ctx, scope, lockTimeout, session, tags)
		if err != nil || outcome == outcomeFound {
			return res, outcome, err
		}
		if ready, ok := p.takeEager(ctx, lockTimeout, tags); ok {
			return ready, outcomeFound, nil
		}
		return res, outcome, nil
	}
	if res, ok := p.takeEager(ctx, lockTimeout, tags); ok {
		return res, outcomeFound, nil
	}
	return fetchedWork{}, outcomeEmpty, nil // taken by another look already
}

// queryAndClaimWork is a look at the queue: one candidate query, then
// locks on candidates in order until one holds. Sessions another owner
// holds are left out of the query until their locks end; one met in this
// look costs its claim attempt but not a place in the lock budget, so items
// behind it are still reached. An item that cannot be taken (an error, an
// undecodable item) does not fail the look while others can be.
func (p *CosmosProvider) queryAndClaimWork(ctx context.Context, scope lookScope, lockTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (fetchedWork, pollOutcome, error) {
	where, params := workFilter(session, tags)
	if session != nil {
		if held := p.sessions.heldElsewhere(session.OwnerID, p.nowMs()); len(held) > 0 {
			where = append(where, "NOT IS_DEFINED(c.session) OR NOT ARRAY_CONTAINS(@heldSessions, c.session)")
			params = append(params, QueryParameter{Name: "@heldSessions", Value: held})
		}
	}
	if scope.pk == "" && p.ownWrites != nil {
		cond, condParams := p.ownWrites.workerCondition(p.nowMs())
		where, params = append(where, cond), append(params, condParams...)
	}
	cands, err := p.runCandidateQuery(ctx, candidateQuery{docType: docWork, pk: scope.pk, slots: scope.slots, where: where, params: params, headOnly: true})
	if err != nil {
		return fetchedWork{}, outcomeEmpty, err
	}
	if len(cands) == 0 {
		if session != nil && scope.whole() {
			// Whoever looked, nobody without a session of their own finds
			// more (see workView).
			p.workSignal.closeFor(sharedSessionWorkView(tags), p.now(), p.cfg.PollInterval)
		}
		return fetchedWork{}, outcomeEmpty, nil
	}
	look := newSessionLook()
	tried := 0
	var firstErr error
	for i, c := range cands {
		if tried == maxLockAttempts {
			break
		}
		if c.Session != nil && session != nil {
			ready, err := p.sessionReady(ctx, look, *c.Session, session)
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			if !ready {
				continue // held elsewhere: not a lock attempt
			}
		}
		now := p.nowMs()
		if !p.workClaims.take(itemKey(c.PK, c.ID), now, now+lockTimeout.Milliseconds()) {
			continue // another fetch of this process has it: not a lock attempt
		}
		tried++
		res, err := p.claimWorkAhead(ctx, c, cands[i+1:], lockTimeout, tags)
		if err != nil {
			p.workClaims.forget(itemKey(c.PK, c.ID))
		}
		switch {
		case err == nil:
			others := p.announceOwnersWork(cands[i+1:])
			if scope.pk == "" {
				p.announceOthers(others)
			}
			return res, outcomeFound, nil
		case errors.Is(err, errContended), errors.Is(err, errUndecodableWork):
		default:
			firstErr = cmp.Or(firstErr, err)
		}
	}
	return fetchedWork{}, outcomeBusy, firstErr
}

// announceOwnersWork announces the candidates a look saw but did not take
// that belong to sessions this process's owners hold to those owners
// (sessionwork.go), whatever the look's scope: the queue's announcements
// of their partitions went, most often, to fetches that cannot take them.
// It returns the other candidates.
func (p *CosmosProvider) announceOwnersWork(cands []queueDoc) []queueDoc {
	others := make([]queueDoc, 0, len(cands))
	for _, c := range cands {
		if c.Session == nil || !p.announceSessionWork(*c.Session, c.PK) {
			others = append(others, c)
		}
	}
	return others
}

// announceOthers hands the candidates a look at many partitions saw but
// did not take to this process's other fetches, one announcement per item,
// so they look where the work is instead of all querying the queue.
func (p *CosmosProvider) announceOthers(cands []queueDoc) {
	var pks []string
	now := p.nowMs()
	for _, c := range cands {
		if len(pks) == maxAnnouncedPerLook {
			break
		}
		if !p.workClaims.busy(itemKey(c.PK, c.ID), now) {
			pks = append(pks, c.PK)
		}
	}
	p.workSignal.announcePartitions(pks...)
}

// errUndecodableWork is a candidate that was locked but does not decode; it was
// released (or failed as poison) already.
var errUndecodableWork = errors.New("worker item does not decode")

// claimWork locks one candidate with a patch conditioned on its ETag: of
// two dispatchers that saw the same item, one wins.
func (p *CosmosProvider) claimWork(ctx context.Context, c queueDoc, lockTimeout time.Duration, tags TagFilter) (fetchedWork, error) {
	ctx = p.tel.withOrchestrationName(ctx, c.Orch)
	token := newLockToken("work_")
	claimedAt, until := p.nowMs(), p.lockUntil(lockTimeout)
	resp, err := p.container.PatchItem(ctx, NewPartitionKeyString(c.PK), c.ID, claimOps(token, until), &ItemOptions{IfMatch: &c.ETag, EnableContentResponseOnWrite: true})
	if IsOutcomeUnknown(err) && ctx.Err() != nil {
		return fetchedWork{}, p.giveBackCutClaim(ctx, c, token, err)
	}
	if IsOutcomeUnknown(err) {
		// Read it back: a claim that applied is ours to go on with, rather
		// than an item locked by nobody until its lock expires. The read
		// runs on a context of its own, since the caller may go away while
		// it is on its way, and the claim is then given back.
		own, cancel := givingBack(ctx)
		resp, err = p.readLatest(own, NewPartitionKeyString(c.PK), c.ID)
		cancel()
		if gone := ctx.Err(); gone != nil {
			return fetchedWork{}, p.giveBackCutClaim(ctx, c, token, gone)
		}
		if err == nil && !claimedBy(resp.Value, token) {
			return fetchedWork{}, errContended
		}
	}
	if IsPreconditionFailed(err) || IsNotFound(err) {
		return fetchedWork{}, errContended
	}
	if err != nil {
		return fetchedWork{}, err
	}
	var doc queueDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return fetchedWork{}, fmt.Errorf("decode claimed work item: %w", err)
	}
	doc.ETag = resp.ETag
	return p.claimedWork(ctx, doc, token, until, claimedAt, lockTimeout, tags)
}

// claimedWork hands this fetch the item doc it claimed under token, until
// (ms), at claimedAt (ms): renewed first when the claim took long.
func (p *CosmosProvider) claimedWork(ctx context.Context, doc queueDoc, token string, until, claimedAt int64, lockTimeout time.Duration, tags TagFilter) (fetchedWork, error) {
	lock := &workLock{token: token, pk: doc.PK, doc: doc, lockedUntil: until, lockedAt: claimedAt, activity: activityKey{doc.Exec, doc.Activity},
		fetchedBy: tags, fetchTimeout: lockTimeout}
	if err := p.refreshClaim(ctx, lock, lockTimeout); err != nil {
		return fetchedWork{}, err
	}
	if p.endedHere(lock) { // Keeps: H4: this process's deletion or cancellation began while the claim was on its way
		return fetchedWork{}, errContended
	}
	p.workLocks.Put(token, lock)
	p.chains.Await(lock.pk, lock.activity) // its completion comes here
	item, err := doc.workItem()
	if err != nil {
		p.setAsideUndecodableWork(ctx, lock, err)
		return fetchedWork{}, errUndecodableWork
	}
	return fetchedWork{item: WithVisibleAt(item, time.UnixMilli(doc.VisibleAt)), token: token, attempts: doc.Attempts}, nil
}

// giveBackCutClaim gives back the claim of c under token that its fetch's
// caller cut off (a runtime stopping cancels its fetches) if it applied:
// the item would stay hidden for a lock's length. It returns cause.
func (p *CosmosProvider) giveBackCutClaim(ctx context.Context, c queueDoc, token string, cause error) error {
	ctx, cancel := givingBack(ctx)
	defer cancel()
	resp, err := p.readLatest(ctx, NewPartitionKeyString(c.PK), c.ID)
	if err != nil || !claimedBy(resp.Value, token) {
		return cause
	}
	var doc queueDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return cause
	}
	ops := unlockOps()
	ops.AppendSet("/attempts", max(doc.Attempts, 1)-1) // the claim's attempt is given back with it
	etag := resp.ETag
	if _, err := p.container.PatchItem(ctx, NewPartitionKeyString(c.PK), c.ID, ops, &ItemOptions{IfMatch: &etag}); err != nil {
		p.log.Warn("cdb: could not give back a claim its fetch's caller cut off; it will expire", "item", c.ID, "error", err)
		return cause
	}
	p.bell.ring(queueWorker, p.now()) // visible again, and this process's fetches are stopping
	return cause
}

// refreshClaim renews, before the item is handed out, a claim that has
// less left than leftToHandOut asks (its request took long, or it was
// locked ahead and waited): a lock that expired on its way is never handed
// out (duroxide-pg 0.1.36's lesson), since another worker may take the
// item and run the activity beside it. A renewal that does not land on an
// expired claim passes the item over.
func (p *CosmosProvider) refreshClaim(ctx context.Context, lock *workLock, lockTimeout time.Duration) error {
	if leftToHandOut(p.leftOn(lock.lockedUntil), lockTimeout) {
		return nil // Keeps: H3
	}
	until := p.lockUntil(lockTimeout)
	var ops PatchOperations
	ops.AppendSet("/lockedUntil", until)
	etag := lock.doc.ETag
	resp, err := p.container.PatchItem(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID, ops, &ItemOptions{IfMatch: &etag})
	switch {
	case err == nil:
		lock.doc.ETag, lock.doc.LockedUntil, lock.lockedUntil = resp.ETag, until, until
		return nil
	case p.nowMs() >= lock.lockedUntil:
		p.log.Debug("cdb: a claimed work item's lock expired before it could be refreshed; passing it over", "item", lock.doc.ID, "error", err)
		return errContended
	case IsOutcomeUnknown(err):
		lock.doc.ETag = "" // it may have applied: the next write reads the item back first (knownETag)
		return nil
	case IsPreconditionFailed(err) || IsNotFound(err): // Keeps: H4
		// Written since by someone else (a cancellation's tombstone, a
		// claim after a pause) or deleted: not ours to hand out.
		p.log.Debug("cdb: a claimed work item changed or went before it could be refreshed; passing it over", "item", lock.doc.ID, "error", err)
		return errContended
	default:
		return nil // still ours: the runtime's renewal tries again
	}
}

// claimedBy says a queue document's body carries this lock token.
func claimedBy(body []byte, token string) bool {
	var head struct {
		LockToken string `json:"lockToken"`
	}
	return json.Unmarshal(body, &head) == nil && head.LockToken == token
}

// claimOps lock a work item.
func claimOps(token string, until int64) PatchOperations {
	var ops PatchOperations
	ops.AppendSet("/lockToken", token)
	ops.AppendSet("/lockedUntil", until)
	ops.AppendIncrement("/attempts", 1)
	return ops
}

// undecodablePoisonAttempts is how often an undecodable worker item is
// fetched before it fails as poison: duroxide's default max_attempts.
const undecodablePoisonAttempts = 10

// setAsideUndecodableWork handles a locked item this version cannot decode (a
// kind a newer version wrote, during a rolling upgrade). It cannot be handed
// to the runtime, so the provider does what the runtime would: below the
// poison bound it releases the item, its attempt counted, visible again
// after a growing delay (a node that can decode it may take it meanwhile);
// past the bound it acks the item with an ActivityFailed poison error built
// from the document's identity fields and holding the item's text, so the
// orchestration fails instead of waiting forever.
func (p *CosmosProvider) setAsideUndecodableWork(ctx context.Context, lock *workLock, cause error) {
	doc := lock.doc
	if doc.Attempts > undecodablePoisonAttempts {
		err := p.AckWorkItem(ctx, lock.token, undecodablePoison(doc, cause))
		if err == nil {
			p.tel.poisoned(ctx, queueWorker, 1)
			p.log.Error("worker item does not decode; failed its activity as poison", "item", doc.ID,
				"instance", doc.Instance, "attempts", doc.Attempts, "error", cause)
			return
		}
		p.log.Error("worker item does not decode, and its poison failure could not be written", "item", doc.ID,
			"instance", doc.Instance, "attempts", doc.Attempts, "error", cause, "ack_error", err)
	}
	delay := undecodableWorkDelay(doc.Attempts)
	p.log.Warn("worker item does not decode; released for a node that can", "item", doc.ID, "instance", doc.Instance,
		"attempts", doc.Attempts, "retry_in", delay, "error", cause)
	if err := p.AbandonWorkItem(ctx, lock.token, delay, false); err != nil {
		p.log.Warn("could not release an undecodable worker item; its lock will expire", "item", doc.ID, "error", err)
	}
}

// undecodableWorkDelay grows with the attempts: 1 s·2^(n-1), at most a minute.
func undecodableWorkDelay(attempts uint32) time.Duration {
	return min(time.Second<<min(max(attempts, 1)-1, 6), time.Minute)
}

// maxPoisonText bounds the item text a poison error carries, so the
// completion always fits in a document.
const maxPoisonText = 64 << 10

// undecodablePoison is the failure an undecodable item's activity reports.
func undecodablePoison(doc queueDoc, cause error) ActivityFailedMessage {
	text := doc.Item
	if len(text) > maxPoisonText {
		text = text[:maxPoisonText] + "…(truncated)"
	}
	return ActivityFailedMessage{Instance: doc.Instance, ExecutionID: doc.Exec, ID: doc.Activity, Details: PoisonError{
		AttemptCount: doc.Attempts, MaxAttempts: undecodablePoisonAttempts,
		Message:     fmt.Sprintf("worker item %s does not decode (%v): %s", doc.ID, cause, text),
		MessageType: PoisonActivity{Instance: doc.Instance, ExecutionID: doc.Exec, ActivityName: encodedActivityName(doc.Item), ActivityID: doc.Activity},
	}}
}

// encodedActivityName reads the name out of an encoded work item of an
// unknown kind, if it has one.
func encodedActivityName(encoded string) string {
	var outer map[string]json.RawMessage
	if json.Unmarshal([]byte(encoded), &outer) != nil || len(outer) != 1 {
		return ""
	}
	for _, inner := range outer {
		var fields struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(inner, &fields) == nil {
			return fields.Name
		}
	}
	return ""
}

// heldWork returns the lock for token if it is still this process's and
// valid.
func (p *CosmosProvider) heldWork(ctx context.Context, op, token string) (*workLock, error) {
	lock, ok := p.workLocks.Get(token)
	if !ok {
		return nil, refuse(op, "unknown lock token: the work item was acked, abandoned or never fetched here", ErrInvalidLockToken)
	}
	lock.mu.Lock()
	if lock.done {
		lock.mu.Unlock()
		return nil, refuse(op, "the work item was already acked or abandoned", ErrInvalidLockToken)
	}
	if p.nowMs() >= lock.lockedUntil {
		lock.done = true
		lock.mu.Unlock()
		p.forgetWork(lock)
		p.tel.lockLost(ctx, lockKindWorkItem)
		return nil, refuse(op, "the work item's lock expired", ErrInvalidLockToken)
	}
	return lock, nil
}

// AckWorkItem deletes the held item and enqueues its completion in one
// batch; it fails permanently when the item was cancelled or its lock lost.
func (p *CosmosProvider) AckWorkItem(ctx context.Context, lockToken string, completion WorkItem) error {
	const op = "AckWorkItem"
	if completion != nil {
		switch completion.(type) {
		case ActivityCompletedMessage, ActivityFailedMessage:
		default:
			return refuse(op, fmt.Sprintf("a completion is ActivityCompleted or ActivityFailed, not %s", completion.Kind()), ErrInvalidInput)
		}
	}
	// The completion is encoded before the lock's mutex is taken: encoding
	// a result of megabytes takes a while on a busy machine, and the
	// renewals that keep the lock must not wait behind it.
	var completionDoc []byte
	var completionMsg *queueDoc // the message itself, when it is written in the item's partition
	if completion != nil {
		if lock, ok := p.workLocks.Get(lockToken); ok {
			doc, msg, err := p.encodeCompletion(lock, completion)
			if err != nil {
				return err
			}
			completionDoc, completionMsg = doc, msg
		}
	}
	lock, err := p.heldWork(ctx, op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	defer p.returningFetch(lock)()
	ctx = p.tel.withOrchestrationName(ctx, lock.doc.Orch)
	keep := p.keepingWorkLock(ctx, lock) // the ack's own requests; the chain's hand-over keeps the chain's lock
	if err := p.knownETag(keep, op, lock); err != nil {
		return err
	}
	claim := p.claimForChain(lock, completionMsg, len(completionDoc))
	var claimed *queueDoc // the completion as written, claimed with its chain
	unsure := false       // the ack may have written it, and cannot tell
	defer func() { p.handOverChain(ctx, claim.settle(p, claimed, unsure)) }()
	plain := completionDoc
	if claim.doc != nil {
		completionDoc = claim.body
	}
	if completionDoc != nil && completionMsg == nil {
		// An outbox the reconciler delivers: rung whatever the answer (a
		// lost one may have applied).
		defer p.bell.ring(bellChores, p.now())
	}
	resp, unsure, err := p.sendWorkAck(keep, lock, completionDoc, claim.opens)
	if claim.opens != nil {
		inst, refused := p.openingOutcome(resp, unsure, err)
		p.chainOpened(claim, inst, refused)
		switch {
		case unsure || err == nil && resp.Success && inst == nil:
			claimed = claim.doc // it may be written: the chain's give-back releases it
		case refused && err == nil && !resp.Success && failedAt(resp) == openChainOp:
			claim.doc = nil // another holds the instance: the completion goes as it would without a chain
			resp, unsure, err = p.sendWorkAck(keep, lock, plain, nil)
		}
	}
	if err != nil {
		return asOperation(op, err)
	}
	if !resp.Success {
		idx, opErr := resp.FailedOperation()
		if idx == 0 && missingOrChanged(opErr) {
			return p.lostWork(ctx, op, lock)
		}
		return asOperation(op, opErr)
	}
	lock.done = true
	p.forgetWork(lock)
	p.noteSessionActivity(lock)
	if claim.doc != nil {
		if len(resp.OperationResults) > 1 {
			claim.doc.ETag = resp.OperationResults[1].ETag
		}
		claimed = claim.doc
		return nil // its chained turn takes it
	}
	if completion != nil {
		p.announceMessage(lock.pk, p.now())
	}
	return nil
}

// openChainOp is where a worker ack's batch locks the instance of a chain
// it opens: after the item and its completion.
const openChainOp = 2

// sendWorkAck sends a worker ack's batch: the item consumed (If-Match),
// the completion created, and, for a chain the ack opens, the instance
// locked with it (answered with the instance document). A lost answer is
// resolved by reading the item back; unsure says the ack may have applied
// and that read failed.
func (p *CosmosProvider) sendWorkAck(ctx context.Context, lock *workLock, completionDoc []byte, opens *orchestrationLock) (resp TransactionalBatchResponse, unsure bool, err error) {
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
	etag := lock.doc.ETag
	consumeItem(b, lock.doc, &TransactionalBatchItemOptions{IfMatch: &etag})
	if completionDoc != nil {
		b.CreateItem(completionDoc, nil)
	}
	var opts *TransactionalBatchOptions
	if opens != nil {
		b.PatchItem(instanceDocID, p.openChainOps(opens), nil)
		opts = &TransactionalBatchOptions{EnableContentResponseOnWrite: true}
	}
	resp, err = p.container.ExecuteTransactionalBatch(ctx, b, opts)
	for attempt := 0; IsOutcomeUnknown(err) && attempt < maxResends; attempt++ {
		applied, rerr := p.workAckApplied(ctx, lock)
		switch {
		case rerr != nil:
			return resp, true, err // cannot tell yet: the caller retries, and so do we then
		case applied:
			resp, err = TransactionalBatchResponse{Success: true}, nil
		default:
			resp, err = p.container.ExecuteTransactionalBatch(ctx, b, opts)
		}
	}
	return resp, IsOutcomeUnknown(err), err
}

// openingOutcome is what the ack's batch says of the chain it opened: the
// instance document it locked (nil when the batch applied but its answer
// was lost, or cannot be told), or refused when nothing was locked.
func (p *CosmosProvider) openingOutcome(resp TransactionalBatchResponse, unsure bool, err error) (inst *instanceDoc, refused bool) {
	switch {
	case unsure:
		return nil, false
	case err != nil || !resp.Success:
		return nil, true
	case len(resp.OperationResults) <= openChainOp:
		return nil, false // applied, read back: the chain's give-back reads the instance
	}
	r := resp.OperationResults[openChainOp]
	var doc instanceDoc
	if json.Unmarshal(r.ResourceBody, &doc) != nil {
		return nil, false
	}
	doc.ETag = r.ETag
	return &doc, false
}

// failedAt is the index of a failed batch's failing operation.
func failedAt(resp TransactionalBatchResponse) int {
	idx, _ := resp.FailedOperation()
	return idx
}

// workAckApplied tells whether an ack of ours whose response was lost
// committed, from the item as the partition's primary has it: gone, or
// replaced by its consumed marker, means it did (only the lock's holder
// consumes an item); still ours and unchanged means it did not. Anything
// else (a cancellation's tombstone, another holder) is a lost lock, which
// the resent batch reports.
func (p *CosmosProvider) workAckApplied(ctx context.Context, lock *workLock) (bool, error) {
	resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID)
	if IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	var doc queueDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return false, fmt.Errorf("decode work item %s: %w", lock.doc.ID, err)
	}
	return doc.Type == docConsumed, nil
}

// encodeCompletion is the document an ack creates for its completion: the
// message itself when the instance shares the item's partition, else an
// outbox the reconciler relays; msg is the message before it was encoded,
// nil for an outbox. It reads only what a lock never changes (its token,
// partition and instance), so it needs no mutex.
func (p *CosmosProvider) encodeCompletion(lock *workLock, completion WorkItem) (body []byte, msg *queueDoc, err error) {
	const op = "AckWorkItem"
	target := completion.InstanceID()
	id := "m|w|" + lock.token
	at := immediateAt(p.nowMs(), p.nextSeq())
	if instancePartitionKey(target) == lock.pk {
		pin := unknownPin
		if lock.doc.Pinned != nil {
			pin = pinnedTo(lock.doc.Pinned)
		}
		doc, err := messageDoc(completion, id, at, p.ownWrites.messageWriter(at.visibleAt, pin), lock.doc.Orch, lifeAddress{})
		if err == nil {
			body, err = json.Marshal(doc)
		}
		if err != nil {
			return nil, nil, refuse(op, "", err)
		}
		return body, &doc, documentFits(op, "the completion", body)
	}
	body, err = p.newMessageDoc(completion, id, at, "", lock.doc.Orch) // relayed: never stamped
	if err != nil {
		return nil, nil, refuse(op, "", err)
	}
	// Left to the reconciler (no owner, no order among the instance's
	// outboxes); the message is marked relayed, so its consumer leaves a
	// marker.
	doc := outboxDoc{ID: "o|" + lock.token, PK: lock.pk, Type: docOutbox, Instance: lock.doc.Instance, CreatedAt: p.nowMs(),
		Entries: []outboxEntry{{PK: instancePartitionKey(target), Doc: relayedBody(body)}}}
	ob, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, refuse(op, "", err)
	}
	return ob, nil, documentFits(op, "the completion's outbox", ob)
}

// documentFits refuses, before any request is sent, a document no Cosmos
// DB document can hold.
func documentFits(op, what string, body []byte) error {
	if len(body) > MaxDocumentBytes {
		return refuse(op, fmt.Sprintf("%s is %d bytes encoded; a Cosmos DB document holds at most %d", what, len(body), MaxDocumentBytes), ErrDocumentTooLarge)
	}
	return nil
}

// RenewWorkItemLock extends a held, still valid work item lock. A renewal
// whose outcome is unknown (a lost response, a timeout), or that meets an
// ETag it did not expect (a renewal of ours whose response was lost), is
// resolved by reading the item back: while it still carries our token the
// lock is ours, and its ETag is adopted; a transient failure is never
// read as a lost lock. Only an item gone,
// replaced or locked by another fails the renewal for good.
func (p *CosmosProvider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "RenewWorkItemLock"
	lock, err := p.heldWork(ctx, op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	ctx = p.keepingWorkLock(p.tel.withOrchestrationName(ctx, lock.doc.Orch), lock)
	if err := p.knownETag(ctx, op, lock); err != nil {
		return err
	}
	until := renewedUntil(p.lockUntil(extendFor), lock.lockedUntil)
	for range maxRenewalTries {
		var ops PatchOperations
		ops.AppendSet("/lockedUntil", until)
		etag := lock.doc.ETag
		resp, err := p.container.PatchItem(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID, ops, &ItemOptions{IfMatch: &etag})
		if err == nil {
			lock.doc.ETag, lock.doc.LockedUntil, lock.lockedUntil = resp.ETag, until, until
			p.noteSessionActivity(lock)
			return nil
		}
		if !IsPreconditionFailed(err) && !IsNotFound(err) && !IsOutcomeUnknown(err) {
			return asOperation(op, err)
		}
		applied, err := p.readBackWork(ctx, op, lock, until)
		if err != nil {
			return err
		}
		if applied {
			p.noteSessionActivity(lock)
			return nil
		}
	}
	return transient(op, "the lock renewal did not apply; try again", nil)
}

// maxRenewalTries bounds the writes of one renewal whose outcomes are
// unknown.
const maxRenewalTries = 3

// knownETag makes sure the lock's ETag is the item's: after a write whose
// outcome could not be resolved it is unknown, and read back first.
func (p *CosmosProvider) knownETag(ctx context.Context, op string, lock *workLock) error {
	if lock.doc.ETag != "" {
		return nil
	}
	_, err := p.readBackWork(ctx, op, lock, 0)
	return err
}

// readBackWork reads a held item after a write of ours with an unknown
// outcome. While the item carries our token and its lock has not expired,
// the lock is ours: its ETag and expiry are adopted, and applied reports
// whether the expiry is the one we wrote. Otherwise the lock is lost. When
// the read fails, the ETag stays unknown for the next write to resolve, and
// the error is retryable: nothing says the lock is gone.
func (p *CosmosProvider) readBackWork(ctx context.Context, op string, lock *workLock, until int64) (applied bool, err error) {
	resp, err := p.readLatest(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID)
	if IsNotFound(err) {
		return false, p.lostWork(ctx, op, lock)
	}
	if err != nil {
		lock.doc.ETag = ""
		return false, transient(op, "could not tell whether a write on the held work item applied", err)
	}
	var doc queueDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		lock.doc.ETag = ""
		return false, transient(op, "could not read the held work item back", err)
	}
	if doc.Type == docWorkGone {
		return false, p.endWork(op, lock) // cancelled: the runtime's signal, no lock lost
	}
	if doc.Type != docWork || doc.LockToken != lock.token || doc.LockedUntil <= p.nowMs() {
		return false, p.lostWork(ctx, op, lock)
	}
	if lock.doc.Item == "" {
		lock.doc = doc // a head a query returned (an item claimed ahead, unread): the item itself
	}
	lock.doc.ETag, lock.doc.LockedUntil, lock.lockedUntil = resp.ETag, doc.LockedUntil, doc.LockedUntil
	return doc.LockedUntil == until, nil
}

// forgetWork drops a lock this process no longer holds, and its claim.
func (p *CosmosProvider) forgetWork(lock *workLock) {
	p.workLocks.Remove(lock.token)
	p.workClaims.forget(itemKey(lock.pk, lock.doc.ID))
}

// lostWork counts a lock the item no longer honours, and ends it.
func (p *CosmosProvider) lostWork(ctx context.Context, op string, lock *workLock) error {
	p.tel.lockLost(ctx, lockKindWorkItem)
	return p.endWork(op, lock)
}

// endWork forgets a lock the item no longer honours and reports it: the
// runtime's signal that the activity was cancelled.
func (p *CosmosProvider) endWork(op string, lock *workLock) error {
	lock.done = true
	p.forgetWork(lock)
	return refuse(op, "the work item was cancelled or its lock was lost", ErrInvalidLockToken)
}

// AbandonWorkItem releases a held item, visible again after delay.
func (p *CosmosProvider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "AbandonWorkItem"
	lock, ok := p.workLocks.Get(lockToken)
	if !ok {
		return refuse(op, "unknown lock token: the work item was acked, abandoned or never fetched here", ErrInvalidLockToken)
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	ctx = p.tel.withOrchestrationName(ctx, lock.doc.Orch)
	if lock.done {
		return refuse(op, "the work item was already acked or abandoned", ErrInvalidLockToken)
	}
	defer p.returningFetch(lock)()
	if err := p.knownETag(ctx, op, lock); err != nil {
		return err
	}
	ops := unlockOps()
	setDue(&ops, lock.doc, p.now().Add(max(delay, 0)).UnixMilli())
	if ignoreAttempt {
		ops.AppendSet("/attempts", max(lock.doc.Attempts, 1)-1)
	}
	etag := lock.doc.ETag
	_, err := p.container.PatchItem(ctx, NewPartitionKeyString(lock.pk), lock.doc.ID, ops, &ItemOptions{IfMatch: &etag})
	if IsPreconditionFailed(err) || IsNotFound(err) {
		return p.lostWork(ctx, op, lock)
	}
	if err != nil {
		return asOperation(op, err)
	}
	lock.done = true
	p.forgetWork(lock)
	p.bell.ring(queueWorker, p.now().Add(max(delay, 0)))
	if delay > 0 {
		p.workSignal.notifyAt(p.now().Add(delay))
	} else {
		p.workSignal.announcePartitions(lock.pk)
	}
	return nil
}

// WorkItemLockRemaining implements LockRemainingReporter: how long the
// worker lock token has left by the service's clock, at least (leftOn).
func (p *CosmosProvider) WorkItemLockRemaining(token string) (time.Duration, bool) {
	lock, ok := p.workLocks.Get(token)
	if !ok {
		return 0, false
	}
	lock.mu.Lock()
	defer lock.mu.Unlock()
	return p.leftOn(lock.lockedUntil), true
}

// workLock is a worker-queue item this process holds.
type workLock struct {
	mu          sync.Mutex
	token       string
	pk          string
	doc         queueDoc // as last written by us; its ETag guards the next write
	lockedUntil int64
	done        bool
	activity    activityKey // the item's activity, which never changes
	lockedAt    int64       // ms: when the commit that locked it eagerly was planned, or the claim was sent
	// fetchedBy and fetchTimeout are the filter and lock timeout of the
	// fetch that took the item (zero for one not handed out): the
	// dispatcher that acks or abandons it fetches again next (handover.go).
	fetchedBy    TagFilter
	fetchTimeout time.Duration
	handedOutAt  int64 // ms: when a fetch took it from the ready list
}
