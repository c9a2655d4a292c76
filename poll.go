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
			announced, announcedAt, hasAnnounced = sig.takeToken()
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
		if next := sig.nextPoll(w.view); next.After(now) && next.Before(wakeAt) {
			wakeAt = next
		} else if outcome == outcomeBusy {
			// Candidates exist but are held; look again soon.
			if soon := now.Add(contentionBackoff); soon.Before(wakeAt) {
				wakeAt = soon
			}
		}
		if announced, announcedAt, hasAnnounced = sig.takeToken(); hasAnnounced {
			continue // announced while this fetch looked
		}
		wake, cancel := sig.await()
		timer := time.NewTimer(wakeAt.Sub(now))
		select {
		case <-ctx.Done():
		case announced = <-wake:
			hasAnnounced = true
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
		if w, ok := cancel(); ok {
			announced, hasAnnounced = w, true
		}
		if ctx.Err() != nil {
			if hasAnnounced {
				sig.announce(announced) // hand it to another fetch
			}
			return zero, false, ctx.Err()
		}
	}
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
