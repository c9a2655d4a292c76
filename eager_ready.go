package cdb

import (
	"sync"
	"time"
)

// eagerReady is what eager dispatch keeps of one queue in this process:
// its fetches running now (by tag filter, with their lock timeout), the
// items writes under way reserved for them, and the items written locked
// for them and not handed out yet. T is a worker item's lock (eager.go) or
// a started instance's locked turn (eager_start.go). nil when fetches never
// wait (Config.ShortPolling: nobody to hand an item to) or eager dispatch
// is off (Config.DisableEagerDispatch); every method of a nil one does
// nothing.
type eagerReady[T any] struct {
	mu       sync.Mutex
	fetches  map[string]*eagerFetches // by TagFilter.String()
	promised int                      // reserved by writes not settled yet
	ready    []readyItem[T]           // locked, not handed out yet
	now      func() int64             // ms, the provider's clock
	until    func(T) int64            // an item's lock expiry (ms)
	tag      func(T) *string          // an item's tag, for the fetches' filters
}

// readyItem is a ready item and when it became ready (ms).
type readyItem[T any] struct {
	item  T
	since int64
}

// eagerFetches are the running fetches of one tag filter.
type eagerFetches struct {
	filter  TagFilter
	running int
	// most is the most running at once since there were none: the
	// dispatchers, busy or not, that fetch with this filter.
	most        int
	lockTimeout time.Duration // the latest fetch's
}

func newEagerReady[T any](off bool, now func() int64, until func(T) int64, tag func(T) *string) *eagerReady[T] {
	if off {
		return nil
	}
	return &eagerReady[T]{fetches: map[string]*eagerFetches{}, now: now, until: until, tag: tag}
}

// fetching records a running fetch until the returned function is called.
func (e *eagerReady[T]) fetching(tags TagFilter, lockTimeout time.Duration) (done func()) {
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
	f.running++
	f.most = max(f.most, f.running)
	f.lockTimeout = lockTimeout
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if f.running--; f.running == 0 {
			delete(e.fetches, key)
		}
	}
}

// reserve promises one item with tag to the fetches that take it, when
// fewer than twice their dispatchers (eager.go) are promised or ready, and
// says how long to lock it (the shortest lock timeout of those fetches).
func (e *eagerReady[T]) reserve(tag *string) (time.Duration, bool) {
	if e == nil {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	free := -len(e.ready) - e.promised
	var timeout time.Duration
	for _, f := range e.fetches {
		if f.filter.Matches(tag) {
			free += 2 * f.most
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
// ready for the fetches (none when it did not apply).
func (e *eagerReady[T]) settle(reserved int, committed []T) {
	if e == nil || reserved == 0 {
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
