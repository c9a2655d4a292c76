package handoff

import (
	"cmp"
	"sync"
	"time"
)

// Filter is what a fetch takes: a tag filter, named by String, that
// matches an item's tag (nil: no tag).
type Filter interface {
	String() string
	Matches(tag *string) bool
}

// Ready is what this process keeps of one queue for hand-over: its fetches
// (by filter, with their lock timeout) and how many items they take, the
// items commits under way reserved for them, and the items written locked
// for them and not handed out yet. T is a worker item's lock or a locked
// turn. A nil Ready (no fetch ever waits, or eager dispatch is off) keeps
// nothing, and every method of it does nothing.
type Ready[T any] struct {
	mu       sync.Mutex
	fetches  map[string]*fetches // by Filter.String()
	promised int                 // reserved by reservations not settled yet
	ready    []readyItem[T]      // locked, not handed out yet
	window   time.Duration       // the poll interval, over which the fetches are counted
	ahead    bool                // lock ahead for busy dispatchers too (fetches.depth, patience)
	now      func() int64        // ms, the provider's clock
	until    func(T) int64       // an item's lock expiry (ms)
	tag      func(T) *string     // an item's tag, for the fetches' filters
}

// readyItem is a ready item and until when it may wait for a fetch (ms).
type readyItem[T any] struct {
	item       T
	giveBackAt int64
}

// fetches are the fetches of one filter: those running now, and per
// window (a poll interval) the most running at once and the fetch calls,
// this window's and the last one's.
type fetches struct {
	filter      Filter
	running     int
	lockTimeout time.Duration // the latest fetch's
	windowStart int64         // ms
	peak, calls [2]int        // [0] this window, [1] the last one
	// turnaround is how long a dispatcher takes, on average, from taking
	// an item to fetching again (its handler and its ack); 0 until one
	// came back.
	turnaround time.Duration
}

// NewReady is a ready list, nil when off. ahead locks for busy dispatchers
// too (what the fetches take within the items' horizon, readyHorizon), not
// only for fetches running now; window is the poll interval; now the
// provider's clock (ms); until and tag read an item's lock expiry (ms) and
// tag.
func NewReady[T any](off, ahead bool, window time.Duration, now func() int64, until func(T) int64, tag func(T) *string) *Ready[T] {
	if off {
		return nil
	}
	return &Ready[T]{fetches: map[string]*fetches{}, window: window, ahead: ahead, now: now, until: until, tag: tag}
}

// Fetching records a running fetch call until the returned function is
// called.
func (e *Ready[T]) Fetching(f Filter, lockTimeout time.Duration) (done func()) {
	return e.register(f, lockTimeout, true)
}

// Returning records, until the returned function is called, a dispatcher
// that will fetch again as soon as it lets go of what it fetched: counted
// as running, not as a fetch call. takenAt (ms, 0: unknown) is when it
// took the item: its return measures the dispatchers' turnaround.
func (e *Ready[T]) Returning(f Filter, lockTimeout time.Duration, takenAt int64) (done func()) {
	back := e.register(f, lockTimeout, false)
	if e == nil || takenAt <= 0 {
		return back
	}
	return func() {
		back()
		e.served(f, time.Duration(e.now()-takenAt)*time.Millisecond)
	}
}

// served folds one dispatcher's turnaround into its filter's average.
func (e *Ready[T]) served(filter Filter, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.fetches[filter.String()]
	if f == nil || d <= 0 {
		return
	}
	if f.turnaround == 0 {
		f.turnaround = d
		return
	}
	f.turnaround += (d - f.turnaround) / 8
}

func (e *Ready[T]) register(filter Filter, lockTimeout time.Duration, call bool) (done func()) {
	if e == nil {
		return func() {}
	}
	key := filter.String()
	e.mu.Lock()
	f := e.fetches[key]
	if f == nil {
		f = &fetches{filter: filter}
		e.fetches[key] = f
	}
	f.roll(e.now(), e.window)
	f.running++
	f.peak[0] = max(f.peak[0], f.running)
	if call {
		f.calls[0]++
	}
	f.lockTimeout = lockTimeout
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		f.running--
	}
}

// roll starts a new window when the current one is over.
func (f *fetches) roll(nowMs int64, window time.Duration) {
	switch elapsed := nowMs - f.windowStart; {
	case elapsed < window.Milliseconds():
		return
	case elapsed < 2*window.Milliseconds():
		f.peak[1], f.calls[1] = f.peak[0], f.calls[0]
	default:
		f.peak[1], f.calls[1] = 0, 0 // a whole window without a fetch
	}
	f.peak[0], f.calls[0] = f.running, 0
	f.windowStart = nowMs
}

// depth is how many items may be ready or reserved for f's fetches. Ahead:
// what they take within the items' horizon (readyHorizon), so that the
// last of them is taken before its patience ends: the calls of the last
// window, scaled, or, when they waited (a wide fan-out written to idle
// dispatchers), what the dispatchers seen fetching at once take at their
// turnaround (a window until one came back); never fewer than one per such
// dispatcher (a dispatcher acking counts: it fetches next). Otherwise: one
// per fetch running now (waiting, or acking and about to).
func (f *fetches) depth(nowMs int64, window time.Duration, ahead bool) int {
	if !ahead {
		return f.running
	}
	f.roll(nowMs, window)
	horizon := readyHorizon(window, patience(window, ahead, f.lockTimeout))
	dispatchers := max(f.peak[0], f.peak[1])
	byCalls := int(int64(f.calls[1]) * int64(horizon) / int64(window))
	byTurnaround := int(int64(dispatchers) * int64(horizon) / int64(cmp.Or(f.turnaround, window)))
	return max(dispatchers, byCalls, byTurnaround)
}

// readyHorizon is how far ahead the fetches are locked for: their items'
// patience less a window (the slack a rate measured over the last window
// needs, and the give-back's period), or half the patience if that is
// more. An item made ready beyond it would outwait its patience and go back
// to the queue, to be queried and claimed again, while one queued because
// the list was full costs that at once; so a backlog that fits within it
// waits ready at no request an item. Half a patience held a busy process's
// backlog only in part: the rest's queries and claims took its workers'
// time, and the backlog grew. What waits beyond it waits in the queue, for
// any process.
func readyHorizon(window, patience time.Duration) time.Duration {
	return patience - min(window, patience/2)
}

// patience is how long an item locked for fetches of lockTimeout may wait
// ready before it is given back: a window; ahead, half the lock timeout
// if that is longer. A busy process's dispatchers take what it locked
// ahead in turn, so a backlog waits ready rather than in the queue, where
// each item would cost a query and a claim again; half a lock bounds how
// much of its share a process keeps from the others should it slow down.
func patience(window time.Duration, ahead bool, lockTimeout time.Duration) time.Duration {
	if !ahead {
		return window
	}
	return max(window, lockTimeout/2)
}

// Reservation is what one write (a commit, a start) reserved of the
// fetches: taken and ended in one function, settled with what the write
// locked once it applied, released with nothing otherwise. A nil one
// reserves nothing.
type Reservation[T any] struct {
	list     *Ready[T]
	taken    int
	patience time.Duration // the longest its items may wait ready
	// keep is what an item's lock must have left when it goes back: its
	// lock less its patience (the fetches' lock timeout, ahead).
	keep time.Duration
}

// Reserve begins a write's reservation.
func (e *Ready[T]) Reserve() *Reservation[T] {
	if e == nil {
		return nil
	}
	return &Reservation[T]{list: e}
}

// Take promises one item with tag to the fetches that take it, when fewer
// than their depth are promised or ready, and says how long to lock it:
// the shortest lock timeout of those fetches, and, ahead, the item's
// patience on top, so that it goes out with a whole lock (H3) however long
// it waited ready.
func (r *Reservation[T]) Take(tag *string) (time.Duration, bool) {
	if r == nil {
		return 0, false
	}
	e := r.list
	e.mu.Lock()
	defer e.mu.Unlock()
	free := -len(e.ready) - e.promised
	var timeout time.Duration
	now := e.now()
	for _, f := range e.fetches {
		if depth := f.depth(now, e.window, e.ahead); depth > 0 && f.filter.Matches(tag) {
			free += depth
			if timeout == 0 || f.lockTimeout < timeout {
				timeout = f.lockTimeout
			}
		}
	}
	if free <= 0 || timeout <= 0 {
		return 0, false
	}
	e.promised++
	r.taken++
	wait := patience(e.window, e.ahead, timeout)
	r.patience = max(r.patience, wait)
	lockFor := timeout
	if e.ahead {
		lockFor += wait
	}
	r.keep = max(r.keep, lockFor-wait)
	return lockFor, true
}

// Wait is how long the first item r took would wait ready for a fetch: what
// the fetches' running calls do not take at once of what was ready and
// promised before it, at the rate the fetches took items in the last
// window. 0 when nothing is ahead of it, when r took nothing, and when the
// fetches took nothing in the last window (nothing to tell by).
func (r *Reservation[T]) Wait() time.Duration {
	if r == nil || r.taken == 0 {
		return 0
	}
	e := r.list
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	running, took := 0, 0
	for _, f := range e.fetches {
		f.roll(now, e.window)
		running += f.running
		took += f.calls[1]
	}
	ahead := len(e.ready) + e.promised - r.taken - running
	if ahead <= 0 || took == 0 {
		return 0
	}
	return time.Duration(int64(ahead) * int64(e.window) / int64(took))
}

// Taken counts the items reserved and not settled yet.
func (r *Reservation[T]) Taken() int {
	if r == nil {
		return 0
	}
	return r.taken
}

// Settle ends the reservation: the items the write locked are ready for
// the fetches (maybe more than it took, when the write that applied was an
// earlier try's). An item's patience runs from its lock's writing, not
// from the write's answer: one whose answer was slow (a loaded host, a
// lost answer read back) goes back with what its lock must keep left.
func (r *Reservation[T]) Settle(locked []T) {
	if r == nil {
		return
	}
	e := r.list
	e.mu.Lock()
	defer e.mu.Unlock()
	e.promised -= r.taken
	r.taken = 0
	giveBackAt := e.now() + max(r.patience, e.window).Milliseconds()
	for _, item := range locked {
		at := giveBackAt
		if r.keep > 0 {
			at = min(at, e.until(item)-r.keep.Milliseconds())
		}
		e.ready = append(e.ready, readyItem[T]{item: item, giveBackAt: at})
	}
}

// Release ends the reservation with nothing ready: the write did not
// apply, or its items were settled already.
func (r *Reservation[T]) Release() { r.Settle(nil) }

// Offer makes items ready for the fetches without a reservation, for a
// window: a held instance's turn, or items put back (to be read back),
// which the give-back bounds.
func (e *Ready[T]) Offer(items ...T) {
	if e == nil || len(items) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	giveBackAt := e.now() + e.window.Milliseconds()
	for _, item := range items {
		e.ready = append(e.ready, readyItem[T]{item: item, giveBackAt: giveBackAt})
	}
}

// Take removes and returns the oldest ready item a fetch with filter may
// take, dropping those whose lock expired on the way (the store's queue
// has them back: whoever looks takes them).
func (e *Ready[T]) Take(filter Filter, nowMs int64) (T, bool) {
	var none T
	if e == nil {
		return none, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; i < len(e.ready); {
		item := e.ready[i].item
		if e.until(item) <= nowMs {
			e.ready = append(e.ready[:i], e.ready[i+1:]...)
			continue
		}
		if filter.Matches(e.tag(item)) {
			e.ready = append(e.ready[:i], e.ready[i+1:]...)
			return item, true
		}
		i++
	}
	return none, false
}

// Stale removes and returns the ready items that waited their patience
// for a fetch, or all of them when all; those whose lock expired are
// dropped (the store's queue has them back).
func (e *Ready[T]) Stale(nowMs int64, all bool) []T {
	return e.sift(func(r readyItem[T]) (out, keep bool) {
		if !all && r.giveBackAt > nowMs {
			return false, true
		}
		return e.until(r.item) > nowMs, false
	})
}

// Idle says no fetch runs now, nor ran in this window or the last.
func (e *Ready[T]) Idle(nowMs int64) bool {
	if e == nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, f := range e.fetches {
		f.roll(nowMs, e.window)
		if f.running > 0 || f.peak[0] > 0 || f.peak[1] > 0 {
			return false
		}
	}
	return true
}

// Drop removes and returns the ready items match selects: a write of this
// process ends them (a cancellation, a deletion), so none may be handed
// out without a request.
func (e *Ready[T]) Drop(match func(T) bool) []T {
	return e.sift(func(r readyItem[T]) (out, keep bool) {
		m := match(r.item)
		return m, !m
	})
}

// sift goes through the ready items under the mutex: each is returned
// (out), kept ready, or dropped.
func (e *Ready[T]) sift(decide func(readyItem[T]) (out, keep bool)) []T {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []T
	kept := e.ready[:0]
	for _, r := range e.ready {
		switch take, keep := decide(r); {
		case take:
			out = append(out, r.item)
		case keep:
			kept = append(kept, r)
		}
	}
	e.ready = kept
	return out
}

// Empty says nothing is ready.
func (e *Ready[T]) Empty() bool {
	if e == nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ready) == 0
}
