package cdb

// Ready turns: instances whose next turn this process made ready for its
// own orchestration fetches, without a candidate query or a lock batch: a
// start written by its first turn (handover_starts.go) and a chained turn
// (handover_chains.go). This file is their ready list and their hand-over
// through the fetch's own path (makeTurn).
//
// How many starts go this way is bounded by the orchestration fetches of
// this process that wait now, less the turns already ready or reserved for
// them. Not for busy dispatchers, as activities are: a dispatcher busy with
// a turn may well take queued messages next (they go first), so a start
// kept for it would often wait a poll interval to be handed back, and its
// caller with it.

import (
	"context"
	"errors"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// newReadyTurns is the ready list of turns: started instances' first turns
// and chained turns. An orchestration fetch takes any instance, so fetches
// register as the default-only tag filter and an instance has no tag; a
// start is locked only for fetches running now, not ahead.
func newReadyTurns(off bool, window time.Duration, now func() int64) *handoff.Ready[*lockedTurn] {
	return handoff.NewReady(off, false, window, now, func(t *lockedTurn) int64 { return t.until }, func(*lockedTurn) *string { return nil })
}

// turnName is the orchestration a ready turn is of, as far as known.
func turnName(t *lockedTurn) string {
	if t.inst.Name != "" || len(t.lock.messages) == 0 {
		return t.inst.Name
	}
	return t.lock.messages[0].Orch
}

// takeReadyTurn hands a fetch a turn made ready for it (a start this
// process locked for it, a chained turn); found is false when none is
// ready (or none could be made). A turn whose execution is pinned at a
// version filter excludes is given back, for a dispatcher that can replay
// it (runtimes of two builds may share a provider), as the lock batch's
// condition passes such an instance over.
func (p *CosmosProvider) takeReadyTurn(ctx context.Context, filter *DispatcherCapabilityFilter) (res fetchedOrchestration, found bool, err error) {
	for t, ok := p.readyTurns.Take(DefaultOnlyFilter(), p.nowMs()); ok; t, ok = p.readyTurns.Take(DefaultOnlyFilter(), p.nowMs()) {
		if t.lock.start != nil && t.lock.start.HandedBack() {
			continue // its caller writes it the usual way
		}
		if pinnedOutside(filter, t.inst.Pinned) {
			p.giveBackTurn(ctx, t)
			continue
		}
		if t.chained {
			t.requery = t.requery || p.readLongAgo(t.lock) // a busy runtime may take it a while after it was made ready
		}
		got, err := p.makeTurn(p.tel.withOrchestrationName(ctx, turnName(t)), t)
		if got != nil {
			return *got, true, nil
		}
		if t.chained {
			p.orchLocks.Remove(t.lock.token)
		}
		p.handBackStart(t.lock) // its caller writes it the usual way
		p.announceDeferred(t.lock.pk)
		if err != nil && failsTheFetch(err) {
			return fetchedOrchestration{}, false, err
		}
		if err != nil && !errors.Is(err, errContended) {
			p.log.Error("cdb: cannot hand over an instance started here; its lock's expiry gives it back", "partitionKey", t.lock.pk, "error", err)
		}
	}
	return fetchedOrchestration{}, false, nil
}
