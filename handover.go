package cdb

// The hand-over wing (handover*.go): what this process locks in the store
// for its own fetches and hands them without a request. This file holds
// eager activities (a turn's worker items written locked, in its commit
// batch, for this process's waiting worker fetches, and handed out without
// a query or a claim), what makes ready lists stale (cancellations,
// deletions), and the give-backs: of what no fetch took within a poll
// interval, and of everything at Close. handover_turns.go holds the ready
// turns, handover_chains.go the chained turns, handover_starts.go the
// starts written by their first turn, handover_ends.go the ends told in
// process. The process-local state is internal/handoff's, and so are the
// rules the wing keeps (H1-H9 in its package doc), each marked where it is
// kept ("Keeps: Hn").
//
// How many items are locked for this process's fetches at once (ready, or
// reserved by commits under way) is bounded by what its fetches take in
// half a poll interval (half the fetch calls of the last one), and at least
// one per dispatcher seen fetching at once (waiting, or about to: a
// dispatcher acking or abandoning an item fetches again next,
// returningFetch). An item queued instead costs a dispatcher of this
// process a query and a claim, three times what a locked one costs it, so
// while its dispatchers are busy, locking for them serves the work sooner;
// the bound keeps an item's wait for them to about half a poll interval.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// eagerToken is the lock token an ack writes into the worker item of an
// activity it locks eagerly: the same for every try of the ack.
func eagerToken(ackToken string, act ActivityExecuteMessage) string {
	return "work_" + strings.TrimPrefix(ackToken, "lock_") + "." + strconv.FormatUint(act.ExecutionID, 10) + "." + strconv.FormatUint(act.ID, 10)
}

// takeEager hands a fetch an item one of this process's commits locked for
// it, without a query or a claim; found is false when none is ready.
func (p *CosmosProvider) takeEager(ctx context.Context, lockTimeout time.Duration, tags TagFilter) (fetchedWork, bool) {
	for {
		lock, ok := p.readyItems.Take(tags, p.nowMs())
		if !ok {
			return fetchedWork{}, false
		}
		lock.fetchedBy, lock.fetchTimeout, lock.handedOutAt = tags, lockTimeout, p.nowMs()
		res, ok, unread := p.handOutEager(ctx, lock, lockTimeout)
		if ok {
			return res, true
		}
		if unread {
			// Put back, to be read again by a later fetch or given back:
			// this fetch goes on without the ready list.
			return fetchedWork{}, false
		}
	}
}

// withdrawCancelled takes the items plan's commit cancels out of the ready
// list before the commit is sent, so that no fetch of this process is
// handed one without a request once their tombstones may be written
// (R20). restore puts them back for a commit that failed, or may have: to
// be read back before they are handed out, so that one a commit did
// tombstone is passed over; once Close began they are given back at once
// (H5: Close may have given back the ready list while the commit was on
// its way).
func (p *CosmosProvider) withdrawCancelled(ctx context.Context, plan *ackPlan) (restore func()) {
	if len(plan.cancels) == 0 {
		return func() {}
	}
	cancelled := map[workRef]bool{}
	for _, c := range plan.cancels {
		cancelled[c] = true
		// An item a fetch took from the ready list before this is not
		// handed out once the cancellation is on its way (handOutEager).
		p.ended.Ending(activityEnded(c.pk, c.activity))
	}
	withdrawn := p.readyItems.Drop(func(l *workLock) bool { return cancelled[workRef{pk: l.pk, activity: l.activity}] })
	return func() {
		for c := range cancelled {
			p.ended.NotEnded(activityEnded(c.pk, c.activity))
		}
		for _, l := range withdrawn {
			l.doc.ETag = ""
		}
		p.readyItems.Offer(withdrawn...)
		p.giveBackIfClosing(ctx) // Keeps: H5
	}
}

// endedKeep is how long this process remembers what its own writes ended:
// far longer than any lock an item is handed out under.
const endedKeep = 10 * time.Minute

// Keys of what this process's writes end (handoff.Ended): a partition a
// deletion swept, an activity a commit cancelled.
func partitionEnded(pk string) string { return "p|" + pk }

func activityEnded(pk string, a activityKey) string {
	return "a|" + pk + "|" + strconv.FormatUint(a.exec, 10) + "|" + strconv.FormatUint(a.id, 10)
}

// endedHere says an item locked eagerly belongs to what a write of this
// process ended since: its instance's deletion, or its cancellation. Its
// commit's answer may have come after that write was sent, so dropping the
// ready items then could not reach it.
func (p *CosmosProvider) endedHere(lock *workLock) bool {
	return p.ended.Since(partitionEnded(lock.pk), lock.lockedAt) || p.ended.Since(activityEnded(lock.pk, lock.activity), lock.lockedAt)
}

// noteCancelled notes the activities plan's commit, which applied, cancelled.
func (p *CosmosProvider) noteCancelled(plan *ackPlan) {
	now := p.nowMs()
	for _, c := range plan.cancels {
		p.ended.Ended(activityEnded(c.pk, c.activity), now)
	}
}

// dropReadyOf forgets what this process keeps ready or chained in pk, as a
// deletion of pk's instance begins: the deletion removes the items, and
// one handed out without a request afterwards would run an activity of a
// deleted instance (R20); a chained turn would run a turn of it. Nothing
// is written: the deletion sweeps the items and fences the instance's
// lock. (A start not written yet is not the deletion's: it has nothing
// stored.)
func (p *CosmosProvider) dropReadyOf(pk string) {
	p.readyItems.Drop(func(l *workLock) bool { return l.pk == pk })
	for _, t := range p.readyTurns.Drop(func(t *lockedTurn) bool { return t.chained && t.lock.pk == pk }) {
		p.orchLocks.Remove(t.lock.token)
	}
	for _, hi := range p.chains.End(func(hi *chain) bool { return hi.PK == pk }) {
		p.orchLocks.Remove(hi.Token)
	}
}

// returningFetch counts the dispatcher that fetched lock's item as a
// running fetch of this process while it acks or abandons the item, until
// the returned function is called.
func (p *CosmosProvider) returningFetch(lock *workLock) (done func()) {
	if lock.fetchTimeout <= 0 {
		return func() {} // locked here, never handed to a fetch
	}
	return p.readyItems.Returning(lock.fetchedBy, lock.fetchTimeout, lock.handedOutAt)
}

// handOutEager makes a ready item the fetch's, as claimWork does a claimed
// one; false passes it over (its lock is not ours after all, or it does not
// decode and was set aside), and unread says it could not be read back and
// waits ready again.
func (p *CosmosProvider) handOutEager(ctx context.Context, lock *workLock, lockTimeout time.Duration) (res fetchedWork, ok, unread bool) {
	if p.endedHere(lock) { // Keeps: H4
		return fetchedWork{}, false, false // the deletion swept it, or the tombstone replaced it
	}
	ctx = p.tel.withOrchestrationName(ctx, lock.doc.Orch)
	if lock.doc.ETag == "" { // Keeps: H2
		// The commit's answer did not say: its lock is ours only if the
		// store has our token on it.
		if _, err := p.readBackWork(ctx, "FetchWorkItem", lock, 0); err != nil {
			if !IsRetryable(err) {
				return fetchedWork{}, false, false // not ours: its commit did not lock it, or it was cancelled
			}
			// Not read (an outage, or the fetch's caller went away): it
			// may be ours, so it waits ready again, to be read by a
			// later fetch or given back (H5), not for its lock's expiry.
			p.log.Debug("cdb: an eagerly locked work item could not be confirmed yet; it waits ready again", "item", lock.doc.ID, "error", err)
			p.readyItems.Offer(lock)
			p.giveBackIfClosing(ctx) // Keeps: H5
			return fetchedWork{}, false, true
		}
	}
	if err := p.refreshClaim(ctx, lock, lockTimeout); err != nil {
		return fetchedWork{}, false, false
	}
	if p.endedHere(lock) { // Keeps: H4: a cancellation or a deletion began while it was read or refreshed
		return fetchedWork{}, false, false
	}
	p.workLocks.Put(lock.token, lock)
	p.chains.Await(lock.pk, lock.activity) // its completion comes here
	item, err := lock.doc.workItem()
	if err != nil {
		p.setAsideUndecodableWork(ctx, lock, err)
		return fetchedWork{}, false, false
	}
	return fetchedWork{item: WithVisibleAt(item, time.UnixMilli(lock.doc.VisibleAt)), token: lock.token, attempts: lock.doc.Attempts}, true, false
}

// giveBackEager releases, as an abandon that counts no attempt, the items
// and instances locked eagerly for this process's fetches that waited
// their patience for a fetch (handoff.Ready; all of them, when all): the
// fetch they were locked for went away (a shutdown, a cancelled call) or
// is busy, and hiding them until their locks expire would stall them for
// a lock's length. One whose release fails is left to its lock's expiry.
// Once taken off the ready lists they are given back on a context of their
// own: the caller's may end meanwhile (Close stops the give-back loop), and
// an item taken off and not given back would be hidden for a lock's length.
// A busy process may hold many ready at once: they go back a few requests
// at a time, so a Close gives back a backlog in a few round trips.
func (p *CosmosProvider) giveBackEager(ctx context.Context, all bool) {
	ctx, cancel := givingBack(ctx)
	defer cancel()
	now := p.nowMs()
	atOnce(p.readyItems.Stale(now, all || p.workersStopped(now)), giveBacksAtOnce, func(lock *workLock) {
		p.workLocks.Put(lock.token, lock)
		if err := p.AbandonWorkItem(ctx, lock.token, 0, true); err != nil {
			p.retryGiveBack(lock, err)
		}
	})
	atOnce(p.readyTurns.Stale(now, all), giveBacksAtOnce, func(t *lockedTurn) { p.giveBackTurn(ctx, t) })
}

// workersStopped says no worker of this process will take a ready item:
// none fetched in this poll interval or the last, and none holds an item
// it fetched (one running a handler fetches again once it acks). A
// runtime shut down while its provider stays open is one; its ready
// items then go back at once rather than at the end of their patience.
func (p *CosmosProvider) workersStopped(nowMs int64) bool {
	return p.readyItems.Idle(nowMs) && !p.workLocks.Any(func(*workLock) bool { return true })
}

// giveBacksAtOnce bounds the give-back requests in flight at once.
const giveBacksAtOnce = 8

// atOnce calls give for each of items, at most n at a time, and returns
// when every call has.
func atOnce[T any](items []T, n int, give func(T)) {
	if len(items) == 0 {
		return // the chain loop's usual tick: nothing due
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			give(it)
		}()
	}
	wg.Wait()
}

// giveBackTurn releases a ready turn no fetch took: a chained one whose
// release cannot be told waits unconfirmed, to be read back (H5).
func (p *CosmosProvider) giveBackTurn(ctx context.Context, t *lockedTurn) {
	err := p.releaseQuietly(ctx, t.lock)
	if !t.chained {
		return
	}
	p.orchLocks.Remove(t.lock.token)
	if err != nil && IsRetryable(err) {
		t.lock.inst.ETag = "" // it may have applied: read back first
		c := newChain(t.lock, 0, handoff.Patience{}, nil)
		c.Claimed = t.lock.messages // the completions claimed with it go back with it
		p.keepUnconfirmed(c)
		return
	}
	p.orchSignal.announcePartitions(t.lock.pk) // others may have sent it something
}

// runEagerGiveBack gives back, every poll interval, what waited its
// patience for a fetch of this process, until ctx ends.
func (p *CosmosProvider) runEagerGiveBack(ctx context.Context) {
	runEvery(ctx, p.cfg.PollInterval, func() { p.giveBackEager(ctx, false) })
}

// giveBackIfClosing gives back at once everything ready, once Close
// began: what a caller made ready may have come after Close gave the
// ready lists back, and no fetch of this process will take it.
func (p *CosmosProvider) giveBackIfClosing(ctx context.Context) {
	if p.closing.Load() {
		p.giveBackEager(ctx, true)
	}
}

// retryGiveBack puts an item whose give-back failed (err) back among the
// ready ones, to be read back and given back again at the next look or at
// Close, or taken by a fetch meanwhile, while its lock could still hold:
// one taken off the lists and not given back would be hidden for a lock's
// length (H5). One that is not ours any more (err says so) is forgotten.
func (p *CosmosProvider) retryGiveBack(lock *workLock, err error) {
	p.workLocks.Remove(lock.token)
	if !IsRetryable(err) || lock.lockedUntil <= p.nowMs() {
		p.log.Debug("cdb: a work item locked eagerly was not given back: not ours any more", "item", lock.doc.ID, "error", err)
		return
	}
	p.log.Debug("cdb: could not give back a work item locked eagerly yet; it waits ready again", "item", lock.doc.ID, "error", err)
	lock.doc.ETag = "" // the give-back may have applied: read back first
	p.readyItems.Offer(lock)
}

// givingBack is a context for giving back what no fetch of this process
// will take: not bound to the call that found it (a runtime stopping
// cancels its calls), bounded by closeGiveBackTimeout.
func givingBack(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), closeGiveBackTimeout)
}

// closeGiveBackTimeout bounds what Close spends giving back what was
// locked eagerly and never handed out.
const closeGiveBackTimeout = 5 * time.Second

// giveBackAllEager gives back every chain and everything locked eagerly
// and not handed out, as the provider closes: no fetch of this process
// will take it. The chain and give-back loops have stopped (Close), and
// whatever is made ready from now on is given back by its maker (closing);
// what is left is a chain a worker ack still writes into, which that ack
// hands over (so gives back) as it settles. So it goes on until nothing is
// left, or closeGiveBackTimeout.
func (p *CosmosProvider) giveBackAllEager() {
	ctx, cancel := context.WithTimeout(context.Background(), closeGiveBackTimeout)
	defer cancel()
	for {
		p.giveBackAllChains(ctx)
		p.giveBackEager(ctx, true)
		if p.chains.Empty() && p.readyItems.Empty() && p.readyTurns.Empty() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(completionCoalescing):
		}
	}
}

// newReadyItems is eager activities' ready list: worker items' locks,
// locked ahead for busy dispatchers too.
func newReadyItems(off bool, window time.Duration, now func() int64) *handoff.Ready[*workLock] {
	return handoff.NewReady(off, true, window, now, func(l *workLock) int64 { return l.lockedUntil }, func(l *workLock) *string { return l.doc.Tag })
}
