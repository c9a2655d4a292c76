package cdb

// The bell's watcher: how a ring reaches an idle process's fetches within
// half a poll interval. An idle look happens once per poll interval per
// view, and a look that skips its query (bell.go, quiet) waits for the
// next: a ring just after it would wait that interval, plus the ring's
// own gap and round trips, so work another process wrote was taken more
// than a poll interval after its write. While this process's idle
// looks skip, the watcher reads the counters every half poll interval and
// rouses the fetches of a queue whose counter moved: the view's next look
// comes at once, and the bell's judgement (which the watcher does not
// change) makes it query.
//
// Invariant: while a heard process's idle looks skip their queries, a ring
// of a queue is followed within half a poll interval (and a read's round
// trip) by an idle look at that queue by one fetch of each of its views.
// The watcher only wakes: what a look may skip is still the bell's to say,
// so a watcher that fails (a read refused, a rouse lost) delays a look by
// at most the poll interval it saves, and skips nothing.

import (
	"context"
	"time"
)

// watch reads the counters every half poll interval while this process's
// idle looks skip their queries, and calls rouse with each queue whose
// counter moved since the watcher's last read, until ctx ends.
func (b *queueBell) watch(ctx context.Context, rouse func(queue string)) {
	if b == nil || !b.listens {
		return
	}
	every := b.poll / 2
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if !b.skipping(time.Now()) {
			continue
		}
		// A view read or written within the last half tick is as good as
		// one read now; one read a tick ago is not.
		doc, err := b.freshView(ctx, every/2)
		if err != nil {
			b.log.Debug("cdb: the queue bell's watcher could not read it; idle looks find rung work at their next poll", "error", err)
			continue
		}
		for _, queue := range b.movedSinceWatched(doc) {
			rouse(queue)
		}
	}
}

// skipping says an idle look skipped its query within the last two poll
// intervals (the looks of an idle view come one a poll interval): the
// process is idle and heard, and a ring would otherwise wait for a look.
func (b *queueBell) skipping(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.skippedAt.IsZero() && now.Sub(b.skippedAt) < 2*b.poll
}

// movedSinceWatched notes the queues' counters in doc and says which moved
// since the watcher last noted them (all of them, the first time: a look
// they rouse that has nothing to do skips).
func (b *queueBell) movedSinceWatched(doc bellDoc) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var moved []string
	for _, queue := range [...]string{queueOrchestrator, queueWorker} {
		count := doc.count(queue)
		if last, ok := b.watched[queue]; !ok || last != count {
			moved = append(moved, queue)
		}
		b.watched[queue] = count
	}
	return moved
}
