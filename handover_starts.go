package cdb

// Starts written by their first turn: a start that a waiting orchestration
// fetch of this process will take is not written when it is enqueued. Its
// instance document and start message stay in memory, locked to this
// process as a lock batch would have locked them (H1); a waiting fetch
// hands the first turn to the runtime, and the turn's commit creates the
// instance document (a create, not a replace) with its history, execution
// and first work. The start's call returns once that commit did. So a
// start and its first turn are one request instead of two.
//
// Until its first turn commits, such a start exists only in its caller's
// call, which has not returned: the caller is told of success only by a
// committed create of the instance (H9, the state machine is
// internal/handoff's Start); any other end of the turn (abandoned, parked,
// held back, given back unfetched, its lock expired, the provider closing,
// the create meeting a document of the id) hands the start back to the
// call, which writes it the usual way; a commit whose outcome cannot be
// told is the caller's unknown outcome, as a lost start batch is, and one
// found applied later is followed as any commit (H6). A caller waits for
// its turn's commit to begin at most firstTurnWait, then hands the start
// back: a start never waits on a turn that its own caller holds up, or
// that a stalled dispatcher holds.

import (
	"context"
	"errors"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// firstTurnStart is a start written by its first turn (handoff.Start),
// with its first turn's commit as planned.
type firstTurnStart = handoff.Start[*ackPlan]

// firstTurnWait is how long a start waits for its first turn's commit to
// begin: far longer than a turn takes to run, far shorter than a caller
// expects a start to take.
const firstTurnWait = time.Second

// startWithFirstTurn offers w's start to a waiting orchestration fetch of
// this process as an unwritten turn, and waits for the turn's end. done
// says the start is decided (committed, or failed with err); false means
// it was handed back: the caller writes it the usual way.
func (p *CosmosProvider) startWithFirstTurn(ctx context.Context, w startWrite, delay time.Duration) (done bool, err error) {
	if delay > 0 || p.closing.Load() {
		return false, nil // not due: it waits in the queue; or no fetch of this process will take it
	}
	reservation := p.readyTurns.Reserve() // Keeps: H7
	defer reservation.Release()
	timeout, ok := reservation.Take(nil)
	if !ok {
		return false, nil
	}
	t := p.unwrittenStartTurn(w, timeout)
	reservation.Settle([]*lockedTurn{t})
	p.orchSignal.announce(handoff.TurnReady(t.lock.pk))
	p.giveBackIfClosing(ctx) // Keeps: H5: Close may have given back the ready turns already
	state, err := t.lock.start.Outcome(ctx, firstTurnWait)
	if state == handoff.StartHandedBack {
		// Its turn may be with the runtime, or still ready: neither keeps
		// the instance from this process's fetches any longer.
		p.orchLocks.Remove(t.lock.token)
	}
	switch {
	case state == handoff.StartCommitted:
		return true, nil
	case state == handoff.StartUnknown:
		return true, err
	case err != nil:
		return true, err // the caller's context ended: nothing was written
	}
	return false, nil
}

// unwrittenStartTurn is w's first turn, locked to this process in memory:
// the instance document a start's batch would create and its message, as
// a lock batch would have claimed them.
func (p *CosmosProvider) unwrittenStartTurn(w startWrite, timeout time.Duration) *lockedTurn {
	now, until := p.nowMs(), p.lockUntil(timeout)
	token := newLockToken("lock_")
	inst := p.lockDoc(w.instance, w.parent, w.id, w.trace)
	inst.LockToken, inst.LockedUntil = token, until
	msg := w.doc
	msg.LockToken, msg.LockedUntil, msg.Attempts = token, until, 1
	lock := &orchestrationLock{token: token, pk: instancePartitionKey(w.instance), timeout: timeout, inst: inst,
		messages: []queueDoc{msg}, queriedAt: now, start: handoff.NewStart[*ackPlan]()}
	lock.lockedUntil.Store(until)
	return &lockedTurn{lock: lock, inst: inst, seen: now, until: until}
}

// handBackStart hands an unwritten start's turn back to its caller, when
// lock is one: nothing is stored to release. It ends the lock.
func (p *CosmosProvider) handBackStart(lock *orchestrationLock) {
	if lock.start == nil {
		return
	}
	lock.start.HandBack()
	p.endLock(lock)
}

// settleFirstTurn ends an unwritten start after its first turn's ack, whose
// error is err: committed, handed back, or unknown when it cannot be told.
// It returns the error for the runtime: nil when the commit is found to
// have applied after all.
func (p *CosmosProvider) settleFirstTurn(ctx context.Context, lock *orchestrationLock, err error) error {
	if err == nil {
		lock.start.End(handoff.StartCommitted, nil)
		return nil
	}
	// The instance's lastAck, or the first turn's history document once a
	// later turn (this process's chain, or another's after the lock
	// expired) moved lastAck on, as for any ack (ackCommitted).
	plan := lock.start.Plan()
	if plan == nil {
		plan = &ackPlan{} // refused before its plan: nothing was sent
	}
	committed, rerr := p.ackCommitted(ctx, lock, plan)
	p.endLock(lock)
	switch {
	case rerr != nil:
		// Whatever the ack's own error says (a lost lock is permanent to
		// the runtime), the start's caller cannot know whether it is
		// started: retryable, as a start batch whose answer was lost.
		lock.start.End(handoff.StartUnknown, transient("start", "whether the start's first turn committed cannot be told yet", errors.Join(err, rerr)))
		p.offerUnconfirmed(ctx, lock, plan)
		return err
	case committed:
		// An answer lost, and the read that would have told failed then:
		// it committed. What follows a commit follows it now (its chain
		// given back, its items made ready, its announcements).
		lock.start.End(handoff.StartCommitted, nil)
		p.applied(ctx, lock, plan, false) // Keeps: H6
		return nil
	}
	lock.start.End(handoff.StartHandedBack, nil)
	return err
}

// offerUnconfirmed makes ready every item a commit whose outcome cannot be
// told may have locked for this process (their tokens are deterministic):
// each is read back before it is handed out or given back, so one the
// commit did lock is not left hidden for a lock's length (H6), and one it
// did not is passed over; waiting fetches are woken for them. The chain
// it may have kept is given back once its instance can be read.
func (p *CosmosProvider) offerUnconfirmed(ctx context.Context, lock *orchestrationLock, plan *ackPlan) {
	for _, l := range plan.lockable {
		l.doc.ETag = ""
	}
	p.readyItems.Offer(plan.lockable...)
	p.workSignal.announce(handoff.Repeated(handoff.ItemReady(), len(plan.lockable))...)
	p.giveBackIfClosing(ctx)         // Keeps: H5
	p.giveBackUnseenChain(ctx, lock) // Keeps: H6
}
