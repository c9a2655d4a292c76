package cdb

import (
	"sync"
	"time"
)

// eagerReady is what eager dispatch keeps of one queue in this process:
// its fetches (by tag filter, with their lock timeout) and how many items
// they take, the items writes under way reserved for them, and the items
// written locked for them and not handed out yet. T is a worker item's lock
// (eager.go) or a started instance's locked turn (eager_start.go). nil when
// fetches never wait (Config.ShortPolling: nobody to hand an item to) or
// eager dispatch is off (Config.DisableEagerDispatch); every method of a
// nil one does nothing.
type eagerReady[T any] struct {
	mu       sync.Mutex
	fetches  map[string]*eagerFetches // by TagFilter.String()
	promised int                      // reserved by writes not settled yet
	ready    []readyItem[T]           // locked, not handed out yet
	window   time.Duration            // the poll interval: what is not taken in it is given back
	ahead    bool                     // lock ahead for busy dispatchers too (eagerFetches.depth)
	now      func() int64             // ms, the provider's clock
	until    func(T) int64            // an item's lock expiry (ms)
	tag      func(T) *string          // an item's tag, for the fetches' filters
}

// readyItem is a ready item and when it became ready (ms).
type readyItem[T any] struct {
	item  T
	since int64
}

// eagerFetches are the fetches of one tag filter: those running now, and
// per window (a poll interval) the most running at once and the fetch
// calls, this window's and the last one's.
type eagerFetches struct {
	filter      TagFilter
	running     int
	lockTimeout time.Duration // the latest fetch's
	windowStart int64         // ms
	peak, calls [2]int        // [0] this window, [1] the last one
}

func newEagerReady[T any](off, ahead bool, window time.Duration, now func() int64, until func(T) int64, tag func(T) *string) *eagerReady[T] {
	if off {
		return nil
	}
	return &eagerReady[T]{fetches: map[string]*eagerFetches{}, window: window, ahead: ahead, now: now, until: until, tag: tag}
}

// fetching records a running fetch call until the returned function is
// called.
func (e *eagerReady[T]) fetching(tags TagFilter, lockTimeout time.Duration) (done func()) {
	return e.register(tags, lockTimeout, true)
}

// returning records, until the returned function is called, a dispatcher
// that will fetch again as soon as it lets go of what it fetched: counted
// as running, not as a fetch call.
func (e *eagerReady[T]) returning(tags TagFilter, lockTimeout time.Duration) (done func()) {
	return e.register(tags, lockTimeout, false)
}

func (e *eagerReady[T]) register(tags TagFilter, lockTimeout time.Duration, call bool) (done func()) {
	if e == nil {
		return func() {}
	}
	key := tags.String()
	e.mu.Lock()
	f := e.fetches[key]
	if f == nil {
		f = &eagerFetches{filter: tags}
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
func (f *eagerFetches) roll(nowMs int64, window time.Duration) {
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
// what they take in half a window (half the calls of the last one), so
// that an item waits half a poll interval at most on average and is rarely
// given back, and never fewer than one per dispatcher seen fetching at
// once (a dispatcher acking counts: it fetches next). Otherwise: one per
// fetch running now (waiting, or acking and about to).
func (f *eagerFetches) depth(nowMs int64, window time.Duration, ahead bool) int {
	if !ahead {
		return f.running
	}
	f.roll(nowMs, window)
	return max(f.peak[0], f.peak[1], f.calls[1]/2)
}

// reserve promises one item with tag to the fetches that take it, when
// fewer than their depth are promised or ready, and says how long to lock
// it (the shortest lock timeout of those fetches).
func (e *eagerReady[T]) reserve(tag *string) (time.Duration, bool) {
	if e == nil {
		return 0, false
	}
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
	return timeout, true
}

// settle ends reserved reservations: the items their write locked are
// ready for the fetches (none when it did not apply; and maybe more than
// reserved, when the write that applied was an earlier try's).
func (e *eagerReady[T]) settle(reserved int, committed []T) {
	if e == nil || reserved == 0 && len(committed) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.promised -= reserved
	now := e.now()
	for _, item := range committed {
		e.ready = append(e.ready, readyItem[T]{item: item, since: now})
	}
}

// offer makes item ready for the fetches without a reservation: a held
// instance's turn (chain.go), which its own stale give-back bounds.
func (e *eagerReady[T]) offer(item T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready = append(e.ready, readyItem[T]{item: item, since: e.now()})
}

// take removes and returns the oldest ready item a fetch with tags may
// take, dropping those whose lock expired on the way (the store's queue
// has them back: whoever looks takes them).
func (e *eagerReady[T]) take(tags TagFilter, nowMs int64) (T, bool) {
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
		if tags.Matches(e.tag(item)) {
			e.ready = append(e.ready[:i], e.ready[i+1:]...)
			return item, true
		}
		i++
	}
	return none, false
}

// stale removes and returns the ready items that waited since before
// readySince (ms) for a fetch, and still hold their lock.
func (e *eagerReady[T]) stale(readySince, nowMs int64) []T {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []T
	kept := e.ready[:0]
	for _, r := range e.ready {
		switch {
		case r.since >= readySince:
			kept = append(kept, r)
		case e.until(r.item) > nowMs:
			out = append(out, r.item)
		}
	}
	e.ready = kept
	return out
}

// empty says nothing is ready.
func (e *eagerReady[T]) empty() bool {
	if e == nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ready) == 0
}

// drop removes and returns the ready items match selects.
func (e *eagerReady[T]) drop(match func(T) bool) []T {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []T
	kept := e.ready[:0]
	for _, r := range e.ready {
		if match(r.item) {
			out = append(out, r.item)
		} else {
			kept = append(kept, r)
		}
	}
	e.ready = kept
	return out
}

// restore makes items dropped earlier ready again.
func (e *eagerReady[T]) restore(items []T) {
	if e == nil || len(items) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for _, item := range items {
		e.ready = append(e.ready, readyItem[T]{item: item, since: now})
	}
}
