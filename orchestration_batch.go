package cdb

// An orchestration item's batch: the messages taken with the lock, in send
// order, with the rules on what waits (a continue-as-new's successor, a
// start, an undecodable message), read while the lock is kept fresh.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// loadKeepingLock loads what the turn needs while the lock is renewed in
// the background: a large history can take longer to read than a short lock
// lasts, and a lock that expired before the runtime saw it would be taken by
// another dispatcher, whose own load would outlast its lock in turn.
func (p *CosmosProvider) loadKeepingLock(ctx context.Context, lock *orchestrationLock, inst *instanceDoc) (*instanceState, error) {
	if s, ok := p.stateWithoutLoad(inst); ok {
		return s, nil // no request: nothing to keep the lock through
	}
	var state *instanceState
	err := p.keepingFreshLock(ctx, "FetchOrchestrationItem", lock, func() error {
		var err error
		state, err = p.loadState(ctx, inst)
		return err
	})
	return state, err
}

// deliverOwnOutboxes keeps the fetch's invariant: no batch is handed over
// while a committed outbox of its instance that writes into the instance's
// own partition is pending. Such an outbox (known from the load, or from
// this process's relay) is delivered first, taken over when its relay shows
// no life, with the lock kept fresh meanwhile. settled says none is left
// pending; delivered says one was delivered, so the batch must be read
// again to hold its messages.
func (p *CosmosProvider) deliverOwnOutboxes(ctx context.Context, lock *orchestrationLock) (settled, delivered bool, err error) {
	seen := lock.state.pendingOutboxes
	if !p.outbox.pendingSelf(lock.pk, seen) {
		return true, false, nil
	}
	err = p.keepingFreshLock(ctx, "FetchOrchestrationItem", lock, func() error {
		var err error
		settled, err = p.outbox.deliverBeforeFetch(ctx, lock.pk, seen)
		return err
	})
	if settled && err == nil {
		// The state is this fetch's (the instance is held): later fetches
		// and acks need not look at these outboxes again.
		lock.state.pendingOutboxes = nil
	}
	return settled && err == nil, settled, err
}

// heldMessageDelay is how long a batch held back (for its instance's start,
// or for messages of its own commits still in an outbox) stays invisible, so it
// leaves the head of the queue instead of being locked and released again
// by every look.
const heldMessageDelay = time.Second

// holdBack releases the lock and makes the batch visible again after
// heldMessageDelay, giving back its attempt; the returned error tells the
// fetch to pass the instance over.
func (p *CosmosProvider) holdBack(ctx context.Context, lock *orchestrationLock, why string) error {
	if err := p.writeHold(ctx, lock, heldMessageDelay); err != nil {
		return err
	}
	return &skipError{reason: why} // invisible for a while: no note needed, so a start still shows
}

// releasedSince says a holder gave the instance's lock back (an abandon)
// about when, or after, the candidate query at seen ran: that query saw the
// given-back messages locked, and the batch without them would put newer
// messages before them. The margin covers clocks that disagree.
func releasedSince(inst *instanceDoc, seen int64) bool {
	return inst.ReleasedAt > 0 && inst.ReleasedAt >= seen-releaseMargin.Milliseconds()
}

// releaseMargin is how far apart the clocks of a releasing process and a
// fetching one may be for releasedSince to see the release.
const releaseMargin = time.Second

// takeDecodable decodes the locked batch. A message that does not decode
// (say a kind a newer version wrote during a rolling upgrade) leaves the
// batch with its attempt counted: it is queued again later, and set aside
// as a poison message after maxUndecodableAttempts, so it never blocks its
// instance or the queue. When nothing decodable is left, the lock is
// released and the instance passed over.
func (p *CosmosProvider) takeDecodable(ctx context.Context, lock *orchestrationLock) ([]WorkItem, uint32, error) {
	var good, bad []queueDoc
	var items []WorkItem
	var attempts uint32
	for _, m := range lock.messages {
		item, err := m.workItem()
		if err != nil {
			p.log.Warn("cdb: an orchestrator message does not decode", "instance", m.Instance, "message", m.ID, "attempts", m.Attempts, "error", err)
			bad = append(bad, m)
			continue
		}
		good = append(good, m)
		items = append(items, item)
		attempts = max(attempts, m.Attempts)
	}
	inSendOrder(good, items)
	lock.messages = good
	if len(bad) == 0 {
		return items, attempts, nil
	}
	if err := p.setAsideUndecodable(ctx, lock, bad, len(good) == 0); err != nil {
		if len(good) > 0 {
			p.releaseQuietly(ctx, lock)
		}
		return nil, 0, err
	}
	if len(good) == 0 {
		return nil, 0, &skipError{reason: "only undecodable messages"} // now invisible for a while
	}
	return items, attempts, nil
}

// maxUndecodableAttempts is how many fetches may find a message undecodable
// before it is set aside; a newer process that can decode it has had as many
// chances to take it.
const maxUndecodableAttempts = 10

// docPoisonMessage is the type of an orchestrator message set aside because
// it never decoded: kept for an operator, out of every queue query.
const docPoisonMessage = "msg-poison"

// setAsideUndecodable writes the undecodable messages back in one batch:
// unlocked and visible again after a delay that grows with their attempts,
// or, past maxUndecodableAttempts, retyped as poison messages. With
// releaseInstance the same batch frees the instance lock.
func (p *CosmosProvider) setAsideUndecodable(ctx context.Context, lock *orchestrationLock, bad []queueDoc, releaseInstance bool) error {
	ctx, cancel := givingBack(ctx) // a fetch whose caller went away still gives back what it locked
	defer cancel()
	now := p.now()
	var poisoned []queueDoc
	for _, m := range bad {
		if m.Attempts >= maxUndecodableAttempts {
			poisoned = append(poisoned, m)
		}
	}
	resp, err := p.sendOnHeldETag(ctx, "FetchOrchestrationItem", lock, func(etag ETag) *TransactionalBatch {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
		if releaseInstance {
			release := unlockOps()
			release.AppendSet("/releasedAt", now.UnixMilli())
			b.PatchItem(instanceDocID, release, &TransactionalBatchItemOptions{IfMatch: &etag})
		}
		for _, m := range bad {
			ops := unlockOps()
			if m.Attempts >= maxUndecodableAttempts {
				ops.AppendSet("/type", docPoisonMessage)
			} else {
				setDue(&ops, m, now.Add(undecodableDelay(m.Attempts)).UnixMilli())
			}
			b.PatchItem(m.ID, ops, nil)
		}
		return b
	})
	if err != nil {
		return err
	}
	if !resp.Success {
		return errContended // another holder after an expiry; the next look sees
	}
	for _, m := range poisoned {
		p.log.Error("cdb: set aside an orchestrator message that never decoded", "instance", m.Instance, "message", m.ID, "attempts", m.Attempts)
	}
	p.tel.poisoned(ctx, queueOrchestrator, len(poisoned))
	return nil
}

// undecodableDelay spaces the looks at a message that does not decode.
func undecodableDelay(attempts uint32) time.Duration {
	return min(time.Duration(attempts)*time.Second, 30*time.Second)
}

func hasContinueAsNew(items []WorkItem) bool {
	for _, it := range items {
		if _, ok := it.(ContinueAsNewMessage); ok {
			return true
		}
	}
	return false
}

// completeBatch makes the batch the instance's oldest messages, with one
// more query and batch, where the candidates may have missed some: the
// fetch just delivered the instance's own outbox (deliverOwnOutboxes); the
// instance's execution continued as new and the batch lacks the
// ContinueAsNew message (without it the runtime would read the batch as a
// finished execution's and consume it; a commit writes that message
// visible from time zero, so this is for one written by an older version
// or delivered by another relay after the candidate query); or a holder
// gave the lock back after the candidate query saw its messages locked
// (releasedSince). The batch becomes the ContinueAsNew message (or start),
// if any, and the oldest other messages up to limit (MaxMessagesPerTurn,
// or a chained turn's room), as many of those as one batch can claim
// beside releasing the messages the lock took that no longer fit, which
// it releases in the same request, so none waits for the lock to expire. With unpark it takes the
// instance's parked messages too (parking.go), at their place: those that
// do not fit go back to the queue unparked, as many as the batch has room
// for; the instance document keeps saying parkedUntil until none is left.
func (p *CosmosProvider) completeBatch(ctx context.Context, lock *orchestrationLock, now, until int64, unpark bool, limit int) ([]WorkItem, uint32, error) {
	key := NewPartitionKeyString(lock.pk)
	visibleNow := visibleCondition
	if unpark {
		visibleNow = "(" + visibleCondition + " OR IS_DEFINED(c.heldFrom))"
	}
	res, err := p.container.QueryItems(ctx,
		"SELECT * FROM c WHERE c.pk = @pk AND c.type = @type AND "+visibleNow+" AND (c.lockedUntil <= @now OR c.lockToken = @token)"+p.queueIndex.orderBy(),
		[]QueryParameter{{Name: "@pk", Value: lock.pk}, {Name: "@type", Value: docMessage}, {Name: "@now", Value: now},
			{Name: "@visible", Value: p.visibleHorizon(now)}, {Name: "@token", Value: lock.token}},
		&QueryOptions{PartitionKey: &key})
	if err != nil {
		return nil, 0, err
	}
	visible := make([]queueDoc, 0, len(res.Items))
	items := make([]WorkItem, 0, len(res.Items))
	for _, raw := range res.Items {
		var m queueDoc
		if err := json.Unmarshal(raw, &m); err != nil {
			continue // a broken document: the regular path sets it aside
		}
		item, err := m.workItem()
		if err != nil {
			continue
		}
		visible = append(visible, m)
		items = append(items, item)
	}
	if unpark {
		sortInOrder(visible, items)
	}
	held := map[string]bool{}
	for _, m := range lock.messages {
		held[m.ID] = true
	}
	keep := claimableInOneBatch(continueAsNewFirst(items, limit), visible, items, held)
	b := p.container.NewTransactionalBatch(key)
	var batch, claimed []queueDoc
	var batchItems []WorkItem
	var attempts uint32
	kept := map[int]bool{}
	for _, i := range keep {
		m := visible[i]
		kept[i] = true
		if !held[m.ID] {
			ops := messageClaimOps(lock.token, until)
			if m.HeldFrom != 0 {
				unparkOps(&ops, m)
				m.VisibleAt, m.HeldFrom = m.HeldFrom, 0
			}
			b.PatchItem(m.ID, ops, nil)
			m.Attempts++
			claimed = append(claimed, m)
		}
		delete(held, m.ID)
		batch = append(batch, m)
		batchItems = append(batchItems, items[i])
		attempts = max(attempts, m.Attempts)
	}
	// Taken by the lock, left for the next turn: a chain may have claimed
	// more than one batch holds beside the claims.
	var left []queueDoc
	for _, m := range lock.messages {
		if held[m.ID] {
			left = append(left, m)
		}
	}
	if ahead := len(left) - (MaxBatchOperations - b.Len()); ahead > 0 {
		if err := p.releaseMessagesAhead(ctx, lock, left[:ahead], func(queueDoc) PatchOperations { return unlockOps() }); err != nil {
			return nil, 0, err
		}
		left = left[ahead:]
	}
	for _, m := range left {
		b.PatchItem(m.ID, unlockOps(), nil)
	}
	parkedLeft := false
	for i, m := range visible {
		if kept[i] || m.HeldFrom == 0 || m.LockToken == lock.token {
			continue
		}
		if b.Len() == MaxBatchOperations {
			parkedLeft = true // the next turn's fetch unparks the rest
			continue
		}
		var ops PatchOperations
		unparkOps(&ops, m)
		b.PatchItem(m.ID, ops, nil)
	}
	if b.Len() > 0 {
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			// It may have applied: what it claimed is the lock's to give
			// back with the rest, or those messages would stay locked for
			// the lock's length while newer ones went to the next fetch.
			lock.messages = append(slices.Clip(lock.messages), claimed...)
			return nil, 0, err
		}
		if !resp.Success {
			return nil, 0, errContended // a message went away meanwhile: try again later
		}
	}
	inSendOrder(batch, batchItems)
	lock.messages = batch
	lock.queriedAt = now
	lock.leftBehind = lock.leftBehind || len(batch) < len(visible)
	if len(held) > 0 {
		// Left for the next turn, which no write announces: this
		// process's fetches are told once the lock is let go, as of a
		// message that came while it was held. (An idle look may come
		// only many poll intervals later, behind a quiet queue bell.)
		if !p.wakeLater.deferIfHeld(lock.pk, p.holdsInstance) {
			p.orchSignal.announcePartitions(lock.pk)
		}
	}
	lock.unparked = unpark && !parkedLeft
	return batchItems, attempts, nil
}

// inSendOrder orders a batch as its messages were sent: by seq, the
// partition's enqueue order (sequencer.go), as duroxide's providers hand a
// batch over in insertion order. The queue serves instances by
// (visibleAt, seq), which puts a message with a due time (a timer already
// due) by its due time; within a batch the runtime sees what was sent in
// the order it was sent (race_replay's queue-race decisions depend on it).
func inSendOrder(docs []queueDoc, items []WorkItem) {
	sortBatch(docs, items, func(a, b queueDoc) int { return cmp.Compare(a.Seq, b.Seq) })
}

// sortBatch sorts a batch's documents and their decoded items together,
// stably, by order.
func sortBatch(docs []queueDoc, items []WorkItem, order func(a, b queueDoc) int) {
	idx := make([]int, len(docs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return order(docs[a], docs[b]) })
	sortedDocs := make([]queueDoc, len(docs))
	sortedItems := make([]WorkItem, len(items))
	for to, from := range idx {
		sortedDocs[to], sortedItems[to] = docs[from], items[from]
	}
	copy(docs, sortedDocs)
	copy(items, sortedItems)
}

// holdWithoutContinueAsNew keeps a batch of an instance whose execution
// continued as new from the runtime while its ContinueAsNew message is
// queued but cannot be taken (locked under a token whose holder is gone,
// delayed by an abandon): without it the runtime reads the batch as the
// finished execution's and consumes its messages unseen. The batch is held
// back (heldMessageDelay) until the message can be taken; it returns nil,
// to go on, only when no ContinueAsNew message is queued at all (one
// written by an older version and lost, or set aside as poison): the
// batch then goes to the runtime as before.
func (p *CosmosProvider) holdWithoutContinueAsNew(ctx context.Context, lock *orchestrationLock) error {
	_, queued, err := p.queuedMessage(ctx, lock.pk, continueAsNewTag)
	if err != nil {
		p.releaseQuietly(ctx, lock)
		return err
	}
	if !queued {
		p.log.Warn("cdb: an instance continued as new and its ContinueAsNew message is gone; its batch goes to the runtime as the finished execution's",
			"instance", lock.inst.Instance)
		return nil
	}
	return p.holdBack(ctx, lock, "its ContinueAsNew message cannot be taken yet")
}

// Tags a message's item starts with: its kind's serde tag.
const (
	continueAsNewTag      = `{"ContinueAsNew"`
	startOrchestrationTag = `{"StartOrchestration"`
)

// queuedMessage finds the first message of pk's queue whose item starts
// with tag, visible or not, locked or not, and decodes it (nil when it does
// not decode: found says it is there all the same).
func (p *CosmosProvider) queuedMessage(ctx context.Context, pk, tag string) (item WorkItem, found bool, err error) {
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx,
		"SELECT TOP 1 VALUE c.item FROM c WHERE c.pk = @pk AND c.type = @type AND STARTSWITH(c.item, @tag)",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@type", Value: docMessage}, {Name: "@tag", Value: tag}},
		&QueryOptions{PartitionKey: &key})
	if err != nil {
		return nil, false, fmt.Errorf("look for a queued %s message: %w", strings.Trim(tag, `{"`), err)
	}
	if len(res.Items) == 0 {
		return nil, false, nil
	}
	var raw string
	if json.Unmarshal(res.Items[0], &raw) == nil {
		item, _ = UnmarshalWorkItem([]byte(raw))
	}
	return item, true, nil
}

// claimableInOneBatch is keep less its newest messages the lock does not
// hold, as many as it takes for one batch to claim the rest and release
// the held ones it leaves out: a chained turn holds up to its room, and
// messages that came unclaimed meanwhile come first.
func claimableInOneBatch(keep []int, visible []queueDoc, items []WorkItem, held map[string]bool) []int {
	ops := len(held) // each held message left out is released
	for _, i := range keep {
		if held[visible[i].ID] {
			ops--
		} else {
			ops++
		}
	}
	for j := len(keep) - 1; j >= 0 && ops > MaxBatchOperations; j-- {
		if i := keep[j]; !held[visible[i].ID] && !startsAnExecution(items[i]) {
			keep = slices.Delete(keep, j, j+1)
			ops--
		}
	}
	return keep
}

// continueAsNewFirst picks up to limit messages, oldest first, always
// keeping the first ContinueAsNew message or start: a batch without it
// would read as a finished execution's, or as one never started.
func continueAsNewFirst(items []WorkItem, limit int) []int {
	can := slices.IndexFunc(items, startsAnExecution)
	var keep []int
	for i := range items {
		room := limit - len(keep)
		if can > i {
			room-- // keep a place for the ContinueAsNew message
		}
		if i == can || room > 0 {
			keep = append(keep, i)
		}
		if len(keep) == limit {
			break
		}
	}
	return keep
}

// startsAnExecution says a message starts an execution: a start or a
// ContinueAsNew message.
func startsAnExecution(it WorkItem) bool {
	switch it.(type) {
	case StartOrchestrationMessage, ContinueAsNewMessage:
		return true
	}
	return false
}
