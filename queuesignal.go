package cdb

import (
	"slices"
	"sync"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// queueSignal coordinates the fetches of one queue in this process. It wakes
// waiting fetches when this process puts work on the queue (or when work it
// wrote becomes visible), and keeps an idle queue to about one query per
// poll interval however many fetches wait: after a query that found
// nothing, only the fetch that claims the next poll queries again.
type queueSignal struct {
	mu         sync.Mutex
	changed    chan struct{}    // closed by notify and rouse
	generation uint64           // counts notifies
	unseen     bool             // a notify no short-polling fetch has acted on
	looked     uint64           // generation at the last look at the queue, plus one (0: never)
	idleUntil  map[string]pause // per view (filter): no poll before it ends unless notified
	wake       *time.Timer      // pending notify for work that becomes visible later
	wakeAt     time.Time
	waiters    []chan handoff.Wake // waiting long-polling fetches, oldest first
	// tokens are the partitions announced while no fetch waited, the
	// first announced first, each with its items: a fan-out's items take
	// one place, so the bound counts partitions, not items.
	tokens []wakeToken
	seq    uint64 // counts the announcements kept
	// readyRun counts the tokens of things made ready here taken since
	// the last partition's (takeToken); pollInterval is how long a
	// partition's announcement waits behind such things before it takes
	// every readyPerAgedPartition+1st fetch.
	readyRun     int
	pollInterval time.Duration
	// queueLookAt is when a look last went to the queue before what was
	// made ready here (queueLookDue).
	queueLookAt time.Time
	// spills counts the announcements dropped (maxWakeTokens waited), and
	// spillsSeen those the looks at the whole queue accounted for since:
	// while spills is ahead, the queue holds work this process wrote that
	// no announcement names. spilledAt is when the first such one was
	// dropped, and lastAgedSpill says the last fetch that went to aged
	// work went to it (spillLookDue). sinceAgedTurn counts the
	// announcements taken since aged work last had its turn (a look at the
	// whole queue for dropped work, an aged partition's announcement).
	spills, spillsSeen uint64
	spilledAt          time.Time
	lastAgedSpill      bool
	sinceAgedTurn      int
	// aged says the last look at the whole queue took work that had
	// waited a poll interval or more, and sinceWhole counts the announcements
	// taken since a look at the whole queue (agedLookDue).
	aged       bool
	sinceWhole int
	// shortPolling fetches never wait, so an announcement reopens every
	// view's idle window for them, as a notify does.
	shortPolling bool
	// coalesce keeps at most one pending announcement per partition: on the
	// orchestrator queue one fetch takes all of an instance's messages.
	coalesce bool
	// now is the provider's clock, the one the times given to notifyAt
	// are read on.
	now func() time.Time
}

func newQueueSignal(shortPolling bool, pollInterval time.Duration, now func() time.Time) *queueSignal {
	return &queueSignal{changed: make(chan struct{}), idleUntil: map[string]pause{}, shortPolling: shortPolling, pollInterval: pollInterval, now: now}
}

// newCoalescingQueueSignal is a signal whose announcements for one partition
// wait as one (the orchestrator queue's).
func newCoalescingQueueSignal(shortPolling bool, pollInterval time.Duration, now func() time.Time) *queueSignal {
	q := newQueueSignal(shortPolling, pollInterval, now)
	q.coalesce = true
	return q
}

// wakeToken is an announcement kept while no fetch waited (a partition, or
// things made ready here): how many items were announced with it, and the
// announcement that last added one (seq), and since when its items wait
// (the first of them was announced).
type wakeToken struct {
	wake  handoff.Wake
	items int
	last  uint64
	since time.Time
	// run is how many more of its items are taken before it goes to the
	// back (takeToken); 0 until it is first taken.
	run int
}

// maxWakeTokens bounds the partitions whose announcements are kept for
// fetches to come (announcements of things made ready here are bounded by
// the ready lists, and are never dropped: nothing but their announcement
// sends a fetch to them while the queue has work). Those that find it
// reached are dropped, not the oldest:
// the fetches take the kept ones first, and the work of the dropped ones,
// written later, is found by looks at the whole queue (oldest first),
// which are then not held to the poll interval (claimPoll). Before, the
// bound counted items and dropped the oldest: a burst of 50 fan-outs of 20
// left its first items to the idle poll (17 items a poll interval) while
// the fetches served the newest, and instances waited 45 s. The bound is
// well above what a busy process has announced at once (a partition an
// instance with queued work), because dropped work is found slowly: each
// look at the whole queue takes one item and counts the sixteen it
// announces as found, whether or not those were the dropped ones, so
// with 256 a backlog of 500 fan-outs left some instances' activities
// unannounced, unlooked-for, for over a minute. A token is a few words.
const maxWakeTokens = 4096

// announce says this process just put work on the queue, one wake-up per
// item (in a partition, or made ready here): it wakes one waiting fetch per
// item, which looks in that partition alone or takes a ready item, and
// keeps the rest for the next fetches to call. Unlike notify it wakes no
// other fetch, and does not reopen the idle windows.
func (q *queueSignal) announce(wakes ...handoff.Wake) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unseen = true
	if q.shortPolling {
		clear(q.idleUntil)
		return
	}
	for _, w := range wakes {
		if len(q.waiters) > 0 {
			waiter := q.waiters[0]
			q.waiters = q.waiters[1:]
			waiter <- w // buffered, and each waiter gets at most one
			continue
		}
		q.keep(w)
	}
}

// announcePartitions announces work queued in each of pks, one an item.
func (q *queueSignal) announcePartitions(pks ...string) { q.announce(handoff.InPartitions(pks...)...) }

// keep stores an announcement no fetch waited for.
func (q *queueSignal) keep(w handoff.Wake) {
	if i := slices.IndexFunc(q.tokens, func(t wakeToken) bool { return t.wake == w }); i >= 0 {
		if !q.coalesce {
			q.seq++
			q.tokens[i].items++
			q.tokens[i].last = q.seq
		}
		return
	}
	if w.Partitioned() && q.partitionTokens() == maxWakeTokens {
		if q.spills == q.spillsSeen {
			q.spilledAt = q.now()
		}
		q.spills++
		return
	}
	q.seq++
	q.tokens = append(q.tokens, wakeToken{wake: w, items: 1, last: q.seq, since: q.now()})
}

// mayHoldMore says a look or a released lock may have left work behind
// that no announcement names. Waiting fetches are not woken for it (the
// deferred announcements and the idle poll cover them); short-polling
// fetches, which never wait, look at the whole queue again.
func (q *queueSignal) mayHoldMore() {
	if !q.shortPolling {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unseen = true
	clear(q.idleUntil)
}

// takeToken returns an announcement kept while no fetch waited, and the
// announcements kept so far, for drained. Partitions take turns, a run
// each: the items a partition had when its turn came are taken one after
// the other, and it goes to the back with those announced meanwhile, so a
// partition announced again and again (a busy instance) never keeps the
// ones behind it waiting longer than a run; it keeps its age
// (wakeToken.since), since its items waited from then. A run keeps a
// turn's activities together: taken one a turn of the partitions, a
// backlog spread an instance's fan-out over seconds, and each completion
// made a turn of its own. What this process made ready goes first
// (nextToken).
func (q *queueSignal) takeToken() (w handoff.Wake, at uint64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spillLookDue() {
		q.readyRun, q.lastAgedSpill, q.sinceAgedTurn = 0, true, 0
		return handoff.Wake{}, 0, false // the fetch looks at the whole queue
	}
	if q.agedLookDue() {
		q.sinceWhole = 0
		return handoff.Wake{}, 0, false // the fetch looks at the whole queue, oldest first
	}
	i, agedTurn := q.nextToken()
	if i < 0 {
		return handoff.Wake{}, 0, false
	}
	q.sinceWhole++
	q.sinceAgedTurn++
	if agedTurn {
		q.sinceAgedTurn = 0
	}
	t := &q.tokens[i]
	if t.run == 0 {
		t.run = 1 // things made ready here: one a turn
		if t.wake.Partitioned() {
			t.run = t.items // its turn: what it holds now is its run
		}
	}
	t.items--
	t.run--
	taken := *t
	switch {
	case taken.items == 0:
		q.tokens = slices.Delete(q.tokens, i, i+1)
	case taken.run == 0:
		// To the back, so the partitions take turns, but as old as it
		// was: its items were announced then, and an aged partition
		// keeps its share of the fetches until they run out.
		q.tokens = append(slices.Delete(q.tokens, i, i+1), taken)
	}
	if taken.wake.Partitioned() {
		q.readyRun, q.lastAgedSpill = 0, false
	} else {
		q.readyRun++
	}
	return taken.wake, q.seq, true
}

// consume drops n of w's kept announcements: a look claimed their items
// ahead for this process's fetches, which are told of them as ready ones.
func (q *queueSignal) consume(w handoff.Wake, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.IndexFunc(q.tokens, func(t wakeToken) bool { return t.wake == w })
	if i < 0 {
		return
	}
	t := &q.tokens[i]
	t.items -= n
	t.run = max(t.run-n, 0)
	if t.items <= 0 {
		q.tokens = slices.Delete(q.tokens, i, i+1)
	}
}

// nextToken is the index of the token takeToken takes next, -1 for none;
// agedTurn says it is an aged partition's turn among things made ready.
// What this process made ready (locked ahead for its fetches) goes before
// the partitions announced: it is taken without a request, and what is not
// taken within its window is given back and fetched again, at twice the
// requests, so a busy process that served the queue first would lose the
// eager path exactly when it matters. But a partition whose announcement
// waited a poll interval (the bound on how late queued work is seen) no
// longer waits behind them all: it goes after every readyPerAgedPartition
// of them, so the queue keeps a share of the fetches however fast things
// are made ready.
func (q *queueSignal) nextToken() (i int, agedTurn bool) {
	firstReady := slices.IndexFunc(q.tokens, func(t wakeToken) bool { return !t.wake.Partitioned() })
	firstPartition := slices.IndexFunc(q.tokens, func(t wakeToken) bool { return t.wake.Partitioned() })
	switch {
	case firstReady < 0:
		return firstPartition, false
	case firstPartition < 0:
		return firstReady, false
	case q.readyRun >= readyPerAgedPartition && q.now().Sub(q.tokens[firstPartition].since) >= q.pollInterval:
		return firstPartition, true
	}
	return firstReady, false
}

// spillLookDue says the next fetch looks at the whole queue instead of
// taking an announcement: the queue holds work whose announcement was
// dropped a poll interval ago or more (spills), which only such a look
// finds, and the fetch's turn for aged work came (after
// readyPerAgedPartition announcements of any kind, taking turns with an
// aged partition's announcement). Without it, a busy process whose ready
// announcements never run out left that work for the end of the load: a
// backlog's long tail; and one whose fetches took partitions' announcements
// alone (a worker queue behind a backlog) never looked, since only ready
// ones counted: dropped activities waited over a minute.
// Called with q.mu held.
func (q *queueSignal) spillLookDue() bool {
	if !q.spillWaited() || q.sinceAgedTurn < readyPerAgedPartition {
		return false
	}
	agedPartition := slices.ContainsFunc(q.tokens, func(t wakeToken) bool {
		return t.wake.Partitioned() && q.now().Sub(t.since) >= q.pollInterval
	})
	return !agedPartition || !q.lastAgedSpill
}

// agedLookDue says the next fetch looks at the whole queue instead of
// taking an announcement: the last such look took work that had waited a
// poll interval or more, and readyPerAgedPartition announcements were
// taken since. The queue serves its oldest first, and whatever no
// announcement names (a burst's starts past the bound) is found only so; a busy process whose own completions keep coming otherwise looks
// at the whole queue once a poll interval, and took one such instance a
// look: at 500 fan-outs of 5 in flight, a third of the first 500 starts
// waited over a minute while later orchestrations completed. Called with
// q.mu held.
func (q *queueSignal) agedLookDue() bool {
	return q.aged && q.sinceWhole >= readyPerAgedPartition
}

// sawQueue records what a look at the whole queue (or at some of its
// slots: part) took: the visibleAt of the oldest message of the instance
// it locked (0: none). A look at part of the slots finds aged work, but
// cannot say there is none.
func (q *queueSignal) sawQueue(oldestVisibleMs int64, part bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sinceWhole = 0
	aged := oldestVisibleMs > 0 && q.now().UnixMilli()-oldestVisibleMs >= q.pollInterval.Milliseconds()
	if aged || !part {
		q.aged = aged
	}
}

// spillWaited says the queue holds work whose announcement was dropped,
// the first of it a poll interval ago or more. Called with q.mu held.
func (q *queueSignal) spillWaited() bool {
	return q.spills > q.spillsSeen && q.now().Sub(q.spilledAt) >= q.pollInterval
}

// queueLookDue says a look at the whole queue (or at this process's slots
// of it) goes to the queue before it takes what was made ready here, and
// if so counts it as that look: one does every poll interval, and the
// others take what was made ready first, for the reasons nextToken gives.
// So queued work waits at most about a poll interval behind this
// process's own (what the looks find is announced, and then takes turns
// with it), and a busy process does not pass its own over for the queue.
func (q *queueSignal) queueLookDue() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spillWaited() {
		return true // the look is for work no announcement names (spillLookDue)
	}
	now := q.now()
	if now.Sub(q.queueLookAt) < q.pollInterval {
		return false
	}
	q.queueLookAt = now
	return true
}

// readyPerAgedPartition is how many announcements of things made ready
// here go before one of a partition that waited a poll interval.
const readyPerAgedPartition = 3

// partitionTokens counts the kept announcements of partitions.
func (q *queueSignal) partitionTokens() int {
	n := 0
	for _, t := range q.tokens {
		if t.wake.Partitioned() {
			n++
		}
	}
	return n
}

// drained says a look at partition pk, for an announcement taken when at
// announcements were kept, found nothing there: the partition's other
// announcements up to then name work that is gone (taken by a look at the
// whole queue, or by a fetch woken for another item), and are dropped so
// they do not cost a query each. Those kept since stay.
func (q *queueSignal) drained(w handoff.Wake, at uint64) {
	if !w.Partitioned() {
		return // each stands for one thing handed over in process, not a look's worth
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tokens = slices.DeleteFunc(q.tokens, func(t wakeToken) bool { return t.wake == w && t.last <= at })
}

// await registers a waiting fetch: the channel receives the partition of
// the next announcement it is picked for. cancel withdraws it and returns
// a partition it was handed meanwhile, so no announcement is lost.
func (q *queueSignal) await() (announced <-chan handoff.Wake, cancel func() (handoff.Wake, bool)) {
	ch := make(chan handoff.Wake, 1)
	q.mu.Lock()
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	return ch, func() (handoff.Wake, bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				break
			}
		}
		select {
		case w := <-ch:
			return w, true
		default:
			return handoff.Wake{}, false
		}
	}
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
	clear(q.idleUntil)
}

// rouse ends every view's idle window and wakes the waiting fetches
// without counting as a change: another process wrote work somewhere in
// the queue, so each view's next look is an idle look at the whole queue
// (claimPoll), by one of its fetches, not a look at its own slots by each
// (what a notify's change makes every fetch take).
func (q *queueSignal) rouse() {
	q.mu.Lock()
	defer q.mu.Unlock()
	close(q.changed)
	q.changed = make(chan struct{})
	clear(q.idleUntil)
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

// notifyAt arranges a notify when work written for a later time (on the
// provider's clock) becomes visible. One timer serves the earliest such
// time; later ones are found by the idle polls.
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
	q.wake = time.AfterFunc(at.Sub(q.now()), func() {
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

// Fetches see the queue through a view: their filters (tags, sessions,
// capability range). An idle window belongs to one view, since a queue
// empty for one filter may hold work for another.

// claimPoll lets one fetch of a view query the whole queue: true when the
// view's poll window is open, and then it closes the window for interval,
// so the fetches that wait with it do not all query at once. While dropped
// announcements are not accounted for, every claim is granted: only a look
// at the whole queue finds their work, and one look a poll interval
// (taking one item, announcing 16 more) would leave the last of n such
// items waiting n/17 intervals.
func (q *queueSignal) claimPoll(view string, now time.Time, interval time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.spills > q.spillsSeen || q.aged {
		return true
	}
	if q.idleUntil[view].over(now) {
		q.idleUntil[view] = newIdleWindow(now, interval)
		return true
	}
	return false
}

// newIdleWindow is a view's time without a poll: an interval on the
// provider's clock, bounded by unrungLookEvery intervals on the machine's
// (pacing.go), the bound the bell keeps for work written without a ring.
func newIdleWindow(now time.Time, interval time.Duration) pause {
	return pauseUntil(now, now.Add(interval), unrungLookEvery*interval)
}

// spilled says announcements were dropped since the last look at the
// whole queue, or that look saw aged work: the next look must query,
// whatever else says it is idle.
func (q *queueSignal) spilled() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.spills > q.spillsSeen || q.aged
}

// isOpen reports whether a poll of view is due.
func (q *queueSignal) isOpen(view string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.idleUntil[view].over(now)
}

// spillMark is the announcements dropped so far, taken before a look, so
// that the look, if it finds nothing, accounts for those alone.
func (q *queueSignal) spillMark() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.spills
}

// spillEmpty says a look at the whole queue that began at mark found it
// empty: the work of the announcements dropped before it is gone.
func (q *queueSignal) spillEmpty(mark uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spillsSeen = max(q.spillsSeen, mark)
}

// spillTaken accounts for a look at the whole queue that took an item and
// announced up to maxAnnouncedPerLook others it saw.
func (q *queueSignal) spillTaken() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spillsSeen = min(q.spills, q.spillsSeen+1+maxAnnouncedPerLook)
}

// closeFor marks the view idle for interval.
func (q *queueSignal) closeFor(view string, now time.Time, interval time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idleUntil[view] = newIdleWindow(now, interval)
}

// reopen ends the view's idle window: the last look found work or could
// not tell.
func (q *queueSignal) reopen(view string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.idleUntil, view)
}

// nextPoll is when the view's idle window ends, on the provider's clock
// (now), or sooner when the machine's ends it first.
func (q *queueSignal) nextPoll(view string, now time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.idleUntil[view]
	if real := now.Add(time.Until(w.untilReal)); real.Before(w.until) {
		return real
	}
	return w.until
}

// stop cancels a pending wake timer.
func (q *queueSignal) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wake != nil {
		q.wake.Stop()
	}
}

// maxAnnouncedPerLook bounds the announcements one look hands out.
const maxAnnouncedPerLook = 16
