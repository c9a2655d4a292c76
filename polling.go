package cdb

import (
	"sync"
	"time"
)

// queueSignal coordinates the fetches of one queue in this process. It wakes
// waiting fetches when this process puts work on the queue (or when work it
// wrote becomes visible), and keeps an idle queue to about one query per
// poll interval however many fetches wait (R5): after a query that found
// nothing, only the fetch that claims the next poll queries again.
type queueSignal struct {
	mu         sync.Mutex
	changed    chan struct{} // closed by notify
	generation uint64        // counts notifies
	unseen     bool          // a notify no short-polling fetch has acted on
	looked     uint64        // generation at the last look at the queue, plus one (0: never)
	idleUntil  time.Time     // no poll before this unless notified
	wake       *time.Timer   // pending notify for work that becomes visible later
	wakeAt     time.Time
}

func newQueueSignal() *queueSignal {
	return &queueSignal{changed: make(chan struct{})}
}

// notify says there may be new work now.
func (q *queueSignal) notify() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.notifyLocked()
}

func (q *queueSignal) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
	q.generation++
	q.unseen = true
	q.idleUntil = time.Time{}
}

// lastLook is the generation the last look at the queue saw, and whether
// there was one.
func (q *queueSignal) lastLook() (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.looked - 1, q.looked > 0
}

// lookedAt records that a fetch looked at the queue at generation gen.
func (q *queueSignal) lookedAt(gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.looked = gen + 1
}

// takeChange reports, once, that the queue changed since a short-polling
// fetch last looked.
func (q *queueSignal) takeChange() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	was := q.unseen
	q.unseen = false
	return was
}

// notifyAt arranges a notify when work written for a later time becomes
// visible. One timer serves the earliest such time; later ones are found by
// the idle polls.
func (q *queueSignal) notifyAt(at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake != nil && !q.wakeAt.IsZero() && !at.Before(q.wakeAt) {
		return
	}
	if q.wake != nil {
		q.wake.Stop()
	}
	q.wakeAt = at
	q.wake = time.AfterFunc(time.Until(at), func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.wakeAt = time.Time{}
		q.notifyLocked()
	})
}

// state returns the channel closed by the next notify and the current
// generation.
func (q *queueSignal) state() (<-chan struct{}, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.changed, q.generation
}

// claimPoll lets one fetch query the whole queue: true when the poll window
// is open, and then it closes the window for interval, so the fetches that
// wait with it do not all query at once.
func (q *queueSignal) claimPoll(now time.Time, interval time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Before(q.idleUntil) {
		return false
	}
	q.idleUntil = now.Add(interval)
	return true
}

// isOpen reports whether a poll is due.
func (q *queueSignal) isOpen(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !now.Before(q.idleUntil)
}

// closeFor marks the queue idle for interval.
func (q *queueSignal) closeFor(now time.Time, interval time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idleUntil = now.Add(interval)
}

// reopen ends the idle window: the last look found work or could not tell.
func (q *queueSignal) reopen() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idleUntil = time.Time{}
}

// nextPoll is when the current idle window ends.
func (q *queueSignal) nextPoll() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.idleUntil
}

// stop cancels a pending wake timer.
func (q *queueSignal) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake != nil {
		q.wake.Stop()
	}
}
