package cdb

// Acking an orchestration item: a turn commits in exactly one transactional
// batch; history too large for it is staged in expiring parts first.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// tombstoneTTL is how long a cancelled activity's tombstone lives, in
// seconds; it only has to outlive the worker that held the activity.
const tombstoneTTL = 24 * 60 * 60

// AckOrchestrationItem commits a turn atomically: the instance document
// (which releases the lock), the consumed messages, the turn's history,
// the execution, new queue items, cancellations, and an outbox document for
// everything that belongs to other partitions or would not fit.
func (p *CosmosProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []Event, workerItems, orchestratorItems []WorkItem, metadata ExecutionMetadata, cancelledActivities []ScheduledActivityIdentifier) error {
	const op = "AckOrchestrationItem"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	ctx = p.keepingOrchestrationLock(ctx, lock)
	req := &ackRequest{op: op, executionID: executionID, delta: historyDelta, workerItems: workerItems, orchItems: orchestratorItems,
		metadata: metadata, cancelled: cancelledActivities}
	if lock.start == nil {
		return p.ackSqueezing(ctx, lock, req)
	}
	if !lock.start.BeginCommit() { // Keeps: H9
		p.endLock(lock)
		return refuse(op, "Invalid lock token: the start was handed back to its caller", ErrInvalidLockToken)
	}
	err = p.ackSqueezing(ctx, lock, req)
	return p.settleFirstTurn(ctx, lock, err)
}

// ackRequest is the turn an AckOrchestrationItem call commits.
type ackRequest struct {
	op                     string
	executionID            uint64
	delta                  []Event
	workerItems, orchItems []WorkItem
	metadata               ExecutionMetadata
	cancelled              []ScheduledActivityIdentifier
}

// ackSqueezing commits a turn, planning it tighter each time the store
// refuses the batch as too large. It is called, and returns, with lock.mu
// held.
func (p *CosmosProvider) ackSqueezing(ctx context.Context, lock *orchestrationLock, req *ackRequest) error {
	var tooLarge error // the store's 413 that made the plan tighter
	for squeeze := 0; ; squeeze++ {
		err := p.ackPlanned(ctx, lock, req, squeeze)
		if tooLarge != nil && errors.Is(err, ErrRefused) && !errors.Is(err, ErrInvalidLockToken) {
			// The tighter plan cannot hold what the store refused: its
			// answer stands, and it is not ours to call final.
			return tooLarge
		}
		if squeeze == maxCommitSqueeze || !IsRequestEntityTooLarge(err) {
			return err
		}
		p.log.Warn("cdb: the store refused a commit as too large; planning it tighter", "instance", lock.inst.Instance,
			"batch_budget", commitBudgetBytes(squeeze+1), "error", err)
		tooLarge = err
	}
}

// maxCommitSqueeze bounds how often a commit the store refused as too large
// (413: its size accounting differs from ours) is planned again, each time
// with half the batch budget: the last plan's batch holds at most a
// sixteenth of what the first one's did.
const maxCommitSqueeze = 4

// ackPlanned plans a turn's commit with the batch budget halved squeeze
// times, stages what the plan stages, and commits it. It is called, and
// returns, with lock.mu held; it lets go of it while planning.
func (p *CosmosProvider) ackPlanned(ctx context.Context, lock *orchestrationLock, req *ackRequest, squeeze int) error {
	op := req.op
	if p.nowMs() >= lock.lockedUntil.Load() {
		p.orchestrationLockLost(ctx, lock)
		p.settleUnconfirmed(ctx, lock) // this try ends the ack: no later one tells
		return refuse(op, "Instance lock expired", ErrInvalidLockToken)
	}
	// Planning a large turn takes CPU time (seconds for megabytes on a
	// loaded machine): the lock's renewals go on meanwhile, or it would
	// expire under the plan.
	view := lock.planningView()
	lock.mu.Unlock()
	// What the plan reserves of this process's fetches is settled by
	// applied, or released here whatever else happens.
	reservation := p.readyItems.Reserve() // Keeps: H7
	defer reservation.Release()
	plan, err := p.planAck(view, req, squeeze, reservation)
	if p.afterPlanForTest != nil {
		p.afterPlanForTest()
	}
	lock.mu.Lock()
	if err != nil {
		return err
	}
	if lock.start != nil {
		lock.start.Planned(plan)
	}
	if lock.done {
		return refuse(op, "Invalid lock token: the lock was acked or abandoned while the ack was planned", ErrInvalidLockToken)
	}
	// The plan's instance document names the orchestration, its first
	// turn's too (from the metadata).
	ctx = p.tel.withOrchestrationName(ctx, cmp.Or(plan.inst.Name, lock.inst.Name))
	if len(plan.staged) > 0 {
		// Staging a large turn takes requests of its own: keep the lock
		// for it, so no other dispatcher takes the instance meanwhile and
		// the turn can commit.
		if err := p.stageKeepingLock(ctx, op, lock, plan.staged); err != nil {
			return asOperation(op, err)
		}
		if lock.done {
			return refuse(op, "Invalid lock token: the lock was acked or abandoned while the turn was staged", ErrInvalidLockToken)
		}
	}
	// The lock was valid when the ack came; renewals since (during the
	// planning or the staging) gave it a new ETag. The commit is ours only
	// if nobody took the instance meanwhile, which this ETag checks.
	plan.batch.setIfMatch(instanceWrite, lock.inst.ETag)
	restore := p.withdrawCancelled(ctx, plan) // Keeps: H4, H5
	answered, err := p.commit(ctx, op, lock, plan)
	if err != nil {
		restore()
		return err
	}
	p.applied(ctx, lock, plan, answered) // Keeps: H6
	return nil
}

// applied does what follows a commit that applied, whether its answer told
// so (answered) or reads found it later (its answer lost, or an earlier try
// of the same ack committed): the chain, the items locked for this
// process's fetches, this process's view and announcements, the end
// watches, and the outbox's delivery. Every path that finds a commit
// applied comes here, so none leaves an item locked for nobody.
func (p *CosmosProvider) applied(ctx context.Context, lock *orchestrationLock, plan *ackPlan, answered bool) {
	p.noteCancelled(plan) // Keeps: H4
	ready, queued := plan.eagerLocks(), plan.newWork-len(plan.eager)
	if !answered {
		// Which try committed, and which items it locked, is not known:
		// every item some try may have locked goes to the fetches, each
		// read back before it is handed out (its token is the same on
		// every try, and one not locked is passed over to the queue).
		ready, queued = plan.lockable, plan.newWork
	}
	// Chained before its eager items are handed out, whose completions
	// write into the chain, and before afterCommit announces what came
	// during the turn, which the chained turn then takes.
	switch {
	case answered && plan.chain != nil:
		p.startChain(ctx, plan.chain, plan, ready)
	case plan.foundChained():
		plan.chain.inst.LockedUntil = plan.found.LockedUntil
		plan.chain.lockedUntil.Store(plan.found.LockedUntil)
		p.startChain(ctx, plan.chain, plan, ready)
	case !answered:
		p.giveBackUnseenChain(ctx, lock) // if some try kept one
	}
	// Ready before afterCommit announces them.
	if plan.reservation != nil {
		plan.reservation.Settle(ready)
	} else {
		p.readyItems.Offer(ready...)
	}
	p.giveBackIfClosing(ctx) // Keeps: H5: no fetch of this process will take them
	p.afterCommit(lock, plan, len(ready), queued)
	if plan.outbox != nil {
		p.outbox.committed(ctx, lock.pk, lock.state.pendingOutboxes, plan.outbox, answered)
	}
}

// A turn whose events would crowd the commit batch writes them in parts
// before the commit (ARCHITECTURE.md, Large turns). Parts expire unless the
// commit, which references them from the turn's history document, makes them
// permanent; so a failed commit leaves only expiring documents that no
// history names.
const (
	stageHistoryAbove   = 512 * 1024  // encoded events from which a turn stages them
	maxHistoryPartBytes = 1024 * 1024 // encoded events per part
	stagedPartTTL       = 24 * 60 * 60
)

// historyForCommit is the turn's history document, with its events inline,
// or, for a large turn (the threshold halved squeeze times), in staged parts
// whose bodies it returns. The parts do not depend on squeeze, so a tighter
// plan of the same ack stages the same documents again.
func historyForCommit(instance, pk string, exec uint64, token string, delta []Event, squeeze int) ([]byte, historyDoc, [][]byte, error) {
	body, d, err := encodeHistory(instance, pk, exec, delta, token)
	if err != nil || len(d.Data) <= stageHistoryAbove>>squeeze {
		return body, d, nil, err
	}
	chunks, err := chunkEvents(delta)
	if err != nil {
		return nil, d, nil, err
	}
	var parts [][]byte
	for i, chunk := range chunks {
		id := "hp|" + token + "|" + strconv.Itoa(i)
		part, err := json.Marshal(historyPart{ID: id, PK: pk, Type: docHistPart, Instance: instance, Exec: exec, Data: chunk, TTL: stagedPartTTL, KV: d.KV, First: d.First})
		if err != nil {
			return nil, d, nil, err
		}
		parts = append(parts, part)
		d.Parts = append(d.Parts, id)
	}
	d.Data = ""
	body, err = json.Marshal(d)
	return body, d, parts, err
}

// chunkEvents splits a delta's encoded events into JSON arrays of at most
// maxHistoryPartBytes, refusing an event no document can hold.
func chunkEvents(delta []Event) ([]string, error) {
	var chunks []string
	var cur []byte
	for _, e := range delta {
		raw, err := MarshalEvent(e)
		if err != nil {
			return nil, fmt.Errorf("encode event %d: %w", e.EventID, err)
		}
		if len(raw) > MaxDocumentBytes-64*1024 {
			return nil, fmt.Errorf("event %d is %d bytes encoded; a Cosmos DB document holds %d: %w", e.EventID, len(raw), MaxDocumentBytes, ErrDocumentTooLarge)
		}
		if len(cur) > 0 && len(cur)+len(raw)+2 > maxHistoryPartBytes {
			chunks = append(chunks, string(append(cur, ']')))
			cur = nil
		}
		if len(cur) == 0 {
			cur = append(cur, '[')
		} else {
			cur = append(cur, ',')
		}
		cur = append(cur, raw...)
	}
	if len(cur) > 0 {
		chunks = append(chunks, string(append(cur, ']')))
	}
	return chunks, nil
}

// stageKeepingLock stages parts while the lock is renewed in the
// background by its timeout whenever half of it is gone, as a fetch keeps
// its lock while it loads (keepingFreshLock): one part of a megabyte on a
// loaded machine can take longer than what is left of a short lock, and a
// renewal that waited for the part to end would find the instance taken.
// It is called, and returns, with lock.mu held; it lets go of it while it
// stages, so the renewals (the background's and the runtime's) can run.
func (p *CosmosProvider) stageKeepingLock(ctx context.Context, op string, lock *orchestrationLock, parts [][]byte) error {
	lock.mu.Unlock()
	defer lock.mu.Lock()
	// The parts keep no lock: the renewals do, and each part gets its whole
	// attempt deadline, however little of the lock is left when it starts.
	staging := keepingNoLock(ctx)
	return p.keepingFreshLock(ctx, op, lock, func() error { return p.stage(staging, lock.pk, parts) })
}

// stage writes a large turn's history and outbox parts; one written by an
// earlier try of the same ack is fine (409).
func (p *CosmosProvider) stage(ctx context.Context, pk string, parts [][]byte) error {
	for _, part := range parts {
		if _, err := p.container.CreateItem(ctx, NewPartitionKeyString(pk), part, nil); err != nil && !IsConflict(err) {
			return fmt.Errorf("stage part: %w", err)
		}
	}
	return nil
}

// heldOrchestration returns this process's lock for token with its mutex
// held (the caller unlocks), or the error for a token it does not hold.
func (p *CosmosProvider) heldOrchestration(op, token string) (*orchestrationLock, error) {
	lock, ok := p.orchLocks.Get(token)
	if !ok {
		return nil, refuse(op, "Invalid lock token", ErrInvalidLockToken)
	}
	lock.mu.Lock()
	if lock.done {
		lock.mu.Unlock()
		return nil, refuse(op, "Invalid lock token: the lock was already acked or abandoned", ErrInvalidLockToken)
	}
	return lock, nil
}
