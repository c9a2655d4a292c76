package cdb

// Claims ahead: a worker look at the queue that claims an item claims, in
// the same batch, the items after it in its partition that this
// process's other fetches will take next (a turn's activities, queued
// together), locked ahead for them as a commit locks its activities
// eagerly (handover.go): a backlog's queued activities cost a query and a
// batch per run of a partition, not a query and a claim each. In the store
// they are items this process claimed (H1), so what holds for a claimed
// item holds for them; the ready list hands them out or gives them back.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// maxClaimedAhead bounds the items one claim takes ahead: a batch holds 100
// operations, and a run of a partition is a turn's activities.
const maxClaimedAhead = 32

// aheadContentMaxBytes bounds what a claim batch's answer carries (it
// answers with the items claimed, whose inputs may be megabytes): the items
// ahead are claimed while their heads' lengths say the answer stays within
// it, as the lock batch asks its messages back only under
// lockContentMaxBytes.
const aheadContentMaxBytes = 256 * 1024

// answerBytes is the most an item whose head d is takes in a claim's
// answer: its item at three bytes a UTF-16 unit (escaped), and the rest of
// the document.
func answerBytes(d queueDoc) int { return 3*d.ItemLength + 1024 }

// aheadClaim is an item a look claims ahead, with its lock.
type aheadClaim struct {
	doc   queueDoc
	token string
	until int64
}

// errAheadRefused says a claim batch failed on one of its items (another
// fetch took it since the query): the look claims its own item alone.
var errAheadRefused = errors.New("an item claimed ahead was taken meanwhile")

// claimWorkAhead claims c for this fetch and, when this process's other
// fetches will take more (the ready list's depth), the candidates after c
// in its partition (rest, in the query's order) for them; a session's
// items are claimed alone (their session's claim comes first). Whether the
// fetch itself has a session config does not matter: the items ahead are
// sessionless, and the ready list hands them to any fetch their tag
// admits (durable's worker dispatchers all fetch with one).
func (p *CosmosProvider) claimWorkAhead(ctx context.Context, c queueDoc, rest []queueDoc, lockTimeout time.Duration, tags TagFilter) (fetchedWork, error) {
	if c.Session != nil {
		return p.claimWork(ctx, c, lockTimeout, tags)
	}
	r := p.readyItems.Reserve()
	ahead := p.reserveAhead(r, c, rest)
	if len(ahead) == 0 {
		r.Release()
		return p.claimWork(ctx, c, lockTimeout, tags)
	}
	res, locks, err := p.claimBatch(ctx, c, ahead, lockTimeout, tags)
	p.forgetUnclaimed(ahead, locks)
	if errors.Is(err, errAheadRefused) {
		r.Release()
		return p.claimWork(ctx, c, lockTimeout, tags)
	}
	r.Settle(locks)
	if len(locks) > 0 {
		p.workSignal.announce(handoff.Repeated(handoff.ItemReady(), len(locks))...)
		p.workSignal.consume(handoff.InPartition(c.PK), len(locks))
		p.giveBackIfClosing(ctx) // Keeps: H5: Close may have given back the ready list meanwhile
	}
	return res, err
}

// forgetUnclaimed lets go of this process's claims on the items ahead the
// batch did not lock: those it did stay claimed here until they are let go,
// as a fetch's own item does.
func (p *CosmosProvider) forgetUnclaimed(ahead []aheadClaim, locks []*workLock) {
	locked := map[string]bool{}
	for _, l := range locks {
		locked[l.token] = true
	}
	for _, a := range ahead {
		if !locked[a.token] {
			p.workClaims.forget(itemKey(a.doc.PK, a.doc.ID))
		}
	}
}

// reserveAhead reserves, for the candidates of c's partition after it that
// no fetch of this process claims, a place each among what this process's
// fetches take next, and marks them claimed here.
func (p *CosmosProvider) reserveAhead(r *handoff.Reservation[*workLock], c queueDoc, rest []queueDoc) []aheadClaim {
	var ahead []aheadClaim
	now := p.nowMs()
	budget := aheadContentMaxBytes - answerBytes(c)
	for _, s := range rest {
		if len(ahead) == maxClaimedAhead || answerBytes(s) > budget {
			break
		}
		if s.PK != c.PK || s.Session != nil || p.workClaims.busy(itemKey(s.PK, s.ID), now) {
			continue
		}
		lockFor, ok := r.Take(s.Tag)
		if !ok {
			break
		}
		until := p.lockUntil(lockFor)
		if !p.workClaims.take(itemKey(s.PK, s.ID), now, until) {
			continue
		}
		budget -= answerBytes(s)
		ahead = append(ahead, aheadClaim{doc: s, token: newLockToken("work_"), until: until})
	}
	return ahead
}

// claimBatch claims c for this fetch (lockTimeout) and ahead for the ready
// list, in one batch, each on its ETag. A lost answer is read back: what
// the batch claimed is this process's all the same (the ready list reads
// back, before it hands them out or gives them back, the items ahead the
// read could not tell of).
func (p *CosmosProvider) claimBatch(ctx context.Context, c queueDoc, ahead []aheadClaim, lockTimeout time.Duration, tags TagFilter) (fetchedWork, []*workLock, error) {
	ctx = p.tel.withOrchestrationName(ctx, c.Orch)
	token := newLockToken("work_")
	claimedAt, until := p.nowMs(), p.lockUntil(lockTimeout)
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(c.PK))
	etag := c.ETag
	b.PatchItem(c.ID, claimOps(token, until), &TransactionalBatchItemOptions{IfMatch: &etag})
	for _, a := range ahead {
		etag := a.doc.ETag
		b.PatchItem(a.doc.ID, claimOps(a.token, a.until), &TransactionalBatchItemOptions{IfMatch: &etag})
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, &TransactionalBatchOptions{EnableContentResponseOnWrite: true})
	var bodies []ItemResponse
	switch {
	case IsOutcomeUnknown(err):
		bodies, err = p.readClaimsBack(ctx, c, ahead)
		if err != nil {
			return fetchedWork{}, p.aheadUnread(ahead, claimedAt), err
		}
	case err != nil:
		return fetchedWork{}, nil, err
	case !resp.Success:
		return fetchedWork{}, nil, errAheadRefused
	default:
		for _, r := range resp.OperationResults {
			bodies = append(bodies, ItemResponse{Value: r.ResourceBody, ETag: r.ETag})
		}
	}
	locks := p.aheadLocks(ahead, bodies[1:], claimedAt)
	ours := claimedBy(bodies[0].Value, token)
	if gone := ctx.Err(); gone != nil {
		if ours {
			_ = p.giveBackCutClaim(ctx, c, token, gone) // the caller went away: its item goes back, those ahead wait ready
		}
		return fetchedWork{}, locks, errors.Join(errContended, gone)
	}
	if !ours {
		return fetchedWork{}, locks, errContended
	}
	var doc queueDoc
	if err := json.Unmarshal(bodies[0].Value, &doc); err != nil {
		return fetchedWork{}, locks, fmt.Errorf("decode claimed work item: %w", err)
	}
	doc.ETag = bodies[0].ETag
	res, err := p.claimedWork(ctx, doc, token, until, claimedAt, lockTimeout, tags)
	return res, locks, err
}

// readClaimsBack reads c and ahead from their partition's primary after a
// claim batch whose answer was lost, on a context of its own (the fetch's
// caller may have gone; what it claimed is given back then).
func (p *CosmosProvider) readClaimsBack(ctx context.Context, c queueDoc, ahead []aheadClaim) ([]ItemResponse, error) {
	own, cancel := givingBack(ctx)
	defer cancel()
	ids := []string{c.ID}
	for _, a := range ahead {
		ids = append(ids, a.doc.ID)
	}
	res, err := p.readLatestMany(own, NewPartitionKeyString(c.PK), ids)
	if IsNotFound(err) {
		return nil, errContended // one went away: the batch did not apply whole
	}
	return res, err
}

// aheadLocks are the locks of the items ahead the batch claimed, as read
// (bodies, in ahead's order): the others were not claimed.
func (p *CosmosProvider) aheadLocks(ahead []aheadClaim, bodies []ItemResponse, claimedAt int64) []*workLock {
	var locks []*workLock
	for i, a := range ahead {
		if i >= len(bodies) || !claimedBy(bodies[i].Value, a.token) {
			continue
		}
		var doc queueDoc
		if json.Unmarshal(bodies[i].Value, &doc) != nil {
			continue // expires: a fetch takes it then, and sets it aside if it never decodes
		}
		doc.ETag = bodies[i].ETag
		locks = append(locks, &workLock{token: a.token, pk: doc.PK, doc: doc, lockedUntil: a.until, lockedAt: claimedAt, activity: activityKey{doc.Exec, doc.Activity}})
	}
	return locks
}

// aheadUnread are the items ahead of a batch whose outcome could not be
// read: locked for this process maybe, their ETags unknown, so the ready
// list reads each back before it hands it out or gives it back.
func (p *CosmosProvider) aheadUnread(ahead []aheadClaim, claimedAt int64) []*workLock {
	locks := make([]*workLock, 0, len(ahead))
	for _, a := range ahead {
		doc := a.doc
		doc.ETag, doc.LockToken, doc.LockedUntil = "", a.token, a.until
		locks = append(locks, &workLock{token: a.token, pk: doc.PK, doc: doc, lockedUntil: a.until, lockedAt: claimedAt, activity: activityKey{doc.Exec, doc.Activity}})
	}
	return locks
}
