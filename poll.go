package cdb

// The poll loop: a fetch waits on its queue's signal, looks in an announced
// partition, its own slots or the whole queue, and keeps an idle queue to
// about one query per poll interval.

import (
	"context"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// queueWatch is what a fetch polls.
type queueWatch struct {
	queue  string       // queueOrchestrator or queueWorker
	signal *queueSignal // the queue's, in this process
	// leaseKey names the slots' lanes and shares (LeaseProvider): the queue
	// and the filters of the fetch, whatever its session owner, since
	// processes (and fetches) with other filters take other items from the
	// same slots.
	leaseKey string
	// view names what a look that found nothing found empty: the filters,
	// and a session owner's own sessions.
	view string
	// own is the partitions announced to the fetch's session owner alone
	// (sessionwork.go), looked in before the queue's announcements.
	own ownerSignal
}

// pollOutcome is what one look at a queue found.
type pollOutcome int

// lookScope is where one look at a queue searches: what was announced (a
// partition: a single-partition query; something made ready here: no
// query at all), some dispatch slots, or, with neither, the whole queue.
type lookScope struct {
	wake  handoff.Wake
	pk    string // the announced partition's, "" for none
	slots []int
}

// announcedScope is the look an announcement calls for.
func announcedScope(w handoff.Wake) lookScope {
	s := lookScope{wake: w}
	if w.Partitioned() {
		s.pk = w.PK
	}
	return s
}

// readyOnly says the look takes something made ready here, or nothing.
func (s lookScope) readyOnly(k handoff.Kind) bool { return s.wake.Kind == k }

// whole says the look queries the whole queue.
func (s lookScope) whole() bool { return s.wake == handoff.Wake{} && s.slots == nil }

// pollAttempt tries once to take work from a queue within scope.
type pollAttempt[T any] func(ctx context.Context, scope lookScope) (T, pollOutcome, error)

// poll runs attempts until one finds work, the poll timeout passes (long
// polling) or once (short polling). Fetches of this process wait on the
// queue's signal: work this process writes is announced with its
// partition, and wakes one waiting fetch per item, which looks in that
// partition alone; an idle queue is queried about once per PollInterval in
// all, whatever the number of fetches, by whichever fetch claims the poll.
func poll[T any](ctx context.Context, p *CosmosProvider, w queueWatch, pollTimeout time.Duration, attempt pollAttempt[T]) (T, bool, error) {
	sig := w.signal
	var zero T
	deadline := p.now().Add(pollTimeout)
	// A fetch is fresh (looks at its own slots) only when the queue changed
	// since anyone last looked, so dispatchers that call in turn do not each
	// query an idle queue.
	seen, ok := sig.lastLook()
	if !ok {
		seen = ^uint64(0)
	}
	announced, hasAnnounced := handoff.Wake{}, false
	var announcedAt uint64 // the kept announcements when announced was taken from them (0: handed over)
	for {
		if !hasAnnounced && !p.cfg.ShortPolling {
			if announced, hasAnnounced = w.own.take(); !hasAnnounced {
				announced, announcedAt, hasAnnounced = sig.takeToken()
			}
		}
		if hasAnnounced {
			res, outcome, err := attempt(ctx, announcedScope(announced))
			hasAnnounced = false
			if err != nil || outcome == outcomeFound {
				return res, outcome == outcomeFound, err
			}
			if outcome == outcomeEmpty {
				sig.drained(announced, announcedAt)
			}
			announcedAt = 0
		}
		changed, gen := sig.state()
		res, outcome, err := pollOnce(ctx, p, w, gen != seen, attempt)
		if err != nil {
			return zero, false, err
		}
		if outcome == outcomeFound {
			return res, true, nil
		}
		sig.lookedAt(gen)
		seen = gen
		now := p.now()
		if p.cfg.ShortPolling || !now.Before(deadline) {
			return zero, false, nil
		}
		wakeAt := deadline
		if next := sig.nextPoll(w.view, now); next.After(now) && next.Before(wakeAt) {
			wakeAt = next
		} else if outcome == outcomeBusy {
			// Candidates exist but are held; look again soon.
			if soon := now.Add(contentionBackoff); soon.Before(wakeAt) {
				wakeAt = soon
			}
		}
		if announced, hasAnnounced = w.own.take(); hasAnnounced {
			continue // announced to its owner while this fetch looked
		}
		if announced, announcedAt, hasAnnounced = sig.takeToken(); hasAnnounced {
			continue // announced while this fetch looked
		}
		announced, hasAnnounced = awaitAnnounced(ctx, w, changed, wakeAt.Sub(now))
		if ctx.Err() != nil {
			return zero, false, ctx.Err()
		}
	}
}

// awaitAnnounced waits, at most for d, until the queue changes or something
// is announced to the fetch: to its session owner (preferred: nothing
// else takes it) or to the queue's fetches. What it was handed but does
// not return (a second announcement, or any when ctx ends) goes back to
// where it came from, for another fetch.
func awaitAnnounced(ctx context.Context, w queueWatch, changed <-chan struct{}, d time.Duration) (handoff.Wake, bool) {
	sig := w.signal
	wake, cancel := sig.await()
	ownWake, ownCancel := w.own.await()
	timer := time.NewTimer(d)
	var queued, owned handoff.Wake
	var hasQueued, hasOwned bool
	select {
	case <-ctx.Done():
	case queued = <-wake:
		hasQueued = true
	case owned = <-ownWake:
		hasOwned = true
	case <-changed:
	case <-timer.C:
	}
	timer.Stop()
	if got, ok := cancel(); ok {
		queued, hasQueued = got, true
	}
	if got, ok := ownCancel(); ok {
		owned, hasOwned = got, true
	}
	switch {
	case ctx.Err() != nil:
		if hasQueued {
			sig.announce(queued) // hand it to another fetch
		}
		if hasOwned {
			w.own.giveBack(owned)
		}
		return handoff.Wake{}, false
	case hasOwned:
		if hasQueued {
			sig.announce(queued)
		}
		return owned, true
	}
	return queued, hasQueued
}

// pollOnce takes one look at the queue. A long-polling fetch queries its
// own slots when the queue changed since its last look, and the whole queue
// when it claims the queue's poll; a short-polling fetch queries the whole
// queue unless a recent query found it empty and nothing changed since.
// Only a query that finds no candidates at all closes the queue for a poll
// interval, so contention never reads as emptiness.
func pollOnce[T any](ctx context.Context, p *CosmosProvider, w queueWatch, fresh bool, attempt pollAttempt[T]) (T, pollOutcome, error) {
	var zero T
	sig := w.signal
	if p.cfg.ShortPolling {
		if !sig.takeChange() && !sig.isOpen(w.view, p.now()) {
			return zero, outcomeEmpty, nil
		}
		return lookAt(ctx, p, w, p.idleScope(w.leaseKey), attempt)
	}
	slots, release := p.cfg.Leases.Acquire(w.leaseKey)
	defer release()
	if slots != nil && fresh {
		res, outcome, err := attempt(ctx, lookScope{slots: slots})
		if err != nil || outcome == outcomeFound {
			return res, outcome, err
		}
	}
	claimed := sig.claimPoll(w.view, p.now(), p.cfg.PollInterval)
	if !claimed && !(fresh && slots == nil) {
		return zero, outcomeEmpty, nil
	}
	idle := p.idleScope(w.leaseKey)
	if idle != nil && fresh && len(idle) == len(slots) {
		return zero, outcomeEmpty, nil // the fresh look just queried the same share
	}
	record := func() {}
	if claimed && !fresh && !sig.spilled() {
		var quiet bool
		if quiet, record = p.quietBell(ctx, w); quiet {
			return zero, outcomeEmpty, nil // the window claimPoll opened stays closed
		}
	}
	res, outcome, err := lookAt(ctx, p, w, idle, attempt)
	if err == nil {
		record()
	}
	return res, outcome, err
}

// quietBell says an idle look of w may skip its query: no other process
// rang the queue's bell since w's last look (bell.go); record notes the
// look that queries.
func (p *CosmosProvider) quietBell(ctx context.Context, w queueWatch) (quiet bool, record func()) {
	return p.bell.quiet(ctx, w.queue, w.view)
}

// rouse ends the idle windows of queue's views and wakes their fetches:
// another process rang its bell (bellwatch.go).
func (p *CosmosProvider) rouse(queue string) {
	switch queue {
	case queueOrchestrator:
		p.orchSignal.rouse()
	case queueWorker:
		p.workSignal.rouse()
	}
}

// idleScope is what an idle look queries: every slot, unless process
// leases narrow it to this process's share.
func (p *CosmosProvider) idleScope(leaseKey string) []int {
	if scoper, ok := p.cfg.Leases.(idleScoper); ok {
		return scoper.idleScope(leaseKey)
	}
	return nil
}

// lookAt queries the slots of an idle look (nil: every slot) and keeps the
// queue's poll window closed only when it found nothing.
func lookAt[T any](ctx context.Context, p *CosmosProvider, w queueWatch, slots []int, attempt pollAttempt[T]) (T, pollOutcome, error) {
	sig, view := w.signal, w.view
	spills := sig.spillMark()
	res, outcome, err := attempt(ctx, lookScope{slots: slots})
	switch {
	case err != nil:
		sig.reopen(view)
	case outcome == outcomeEmpty:
		sig.spillEmpty(spills)
		sig.closeFor(view, p.now(), p.cfg.PollInterval)
	case outcome == outcomeFound:
		// The attempt announced the other candidates it saw.
		sig.spillTaken()
		sig.mayHoldMore()
	default:
		sig.reopen(view)
	}
	return res, outcome, err
}
