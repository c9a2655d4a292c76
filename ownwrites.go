package cdb

import (
	"sync"
	"time"
)

// With process leases, most queue items land in slots another process
// owns: the slot follows the instance (or the activity), not the writer.
// The writer announces each item to its own fetches, which take it at once
// (a query of that one partition and a claim); the owner would otherwise
// find the same item at its next idle look and race the writer for it, a
// lost claim (412) and a wasted query for one of them, most of the time at
// low load. So an item says which process wrote it and will take it
// (queueDoc.Writer), and the other processes' looks at their shares leave
// it alone for a poll interval (writerGrace): long enough for the writer,
// short enough that work the writer cannot get to (it died, or its fetches
// are all busy) still moves. An item written by a process that does not
// fetch it (a client, a process whose fetches do not match its tag, a
// session's item, which the session's owner takes) names no writer.

// ownWrites records the fetches this process runs: which queues, and on the
// worker queue which tag filters, a fetch of this process was waiting on
// lately.
type ownWrites struct {
	id     string
	grace  time.Duration // how long others leave a stamped item to its writer
	now    func() time.Time
	mu     sync.Mutex
	orch   fetchActivity
	byTags map[string]*tagFetches // worker fetches by TagFilter.String()
}

// fetchActivity is the fetches of one kind: how many are running, and when
// the last one ended.
type fetchActivity struct {
	running int
	ended   time.Time
}

// recent says a fetch of this kind is running or ended within d: one that
// is still calling will take an item announced to it.
func (a fetchActivity) recent(now time.Time, d time.Duration) bool {
	return a.running > 0 || (!a.ended.IsZero() && now.Sub(a.ended) < d)
}

// forgetFetchesAfter is when a tag filter no fetch has used is dropped
// from ownWrites, so callers that vary their filters do not grow it.
const forgetFetchesAfter = 10 * time.Minute

type tagFetches struct {
	filter TagFilter
	fetchActivity
}

func newOwnWrites(id string, grace time.Duration, now func() time.Time) *ownWrites {
	return &ownWrites{id: id, grace: grace, now: now, byTags: map[string]*tagFetches{}}
}

// orchestrationFetch records a fetch of the orchestrator queue until the
// returned function is called.
func (o *ownWrites) orchestrationFetch() (done func()) {
	if o == nil {
		return func() {}
	}
	return o.track(func() *fetchActivity { return &o.orch })
}

// workFetch records a worker fetch with tags until done is called.
func (o *ownWrites) workFetch(tags TagFilter) (done func()) {
	if o == nil {
		return func() {}
	}
	return o.track(func() *fetchActivity {
		key := tags.String()
		f, ok := o.byTags[key]
		if !ok {
			f = &tagFetches{filter: tags}
			o.byTags[key] = f
		}
		return &f.fetchActivity
	})
}

// track counts one running fetch of the activity chosen (with o.mu held).
func (o *ownWrites) track(activity func() *fetchActivity) (done func()) {
	o.mu.Lock()
	a := activity()
	a.running++
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		a.running--
		a.ended = o.now()
	}
}

// messageWriter is the Writer of an orchestrator message visible at
// visibleAtMs: this process when its orchestration fetches will take it
// now. A message for later is left to whoever looks when it is due.
func (o *ownWrites) messageWriter(visibleAtMs int64) string {
	return o.writer(visibleAtMs, func(now time.Time) bool { return o.orch.recent(now, o.grace) })
}

// workWriter is the Writer of a worker item: this process when a fetch of
// its matches the item's tag and the item is visible now and belongs to no
// session.
func (o *ownWrites) workWriter(act ActivityExecute, visibleAtMs int64) string {
	if act.SessionID != nil {
		return ""
	}
	return o.writer(visibleAtMs, func(now time.Time) bool {
		takes := false
		for key, f := range o.byTags {
			switch {
			case f.recent(now, o.grace):
				takes = takes || f.filter.Matches(act.Tag)
			case now.Sub(f.ended) > forgetFetchesAfter:
				delete(o.byTags, key) // filters no fetch uses any more
			}
		}
		return takes
	})
}

// writer is this process's id when an item visible at visibleAtMs is
// visible now and takes (called with o.mu held) says a fetch of this
// process will take it; "" otherwise, and without process leases.
func (o *ownWrites) writer(visibleAtMs int64, takes func(now time.Time) bool) string {
	if o == nil {
		return ""
	}
	now := o.now()
	if visibleAtMs > now.UnixMilli() {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !takes(now) {
		return ""
	}
	return o.id
}

// othersSettled is the visibleAt (ms) up to which another process's items
// are no longer left to it: now less the grace.
func (o *ownWrites) othersSettled(nowMs int64) int64 {
	return nowMs - o.grace.Milliseconds()
}

// leftToWriter says a look at the shares should leave d to the process
// that wrote it, for now.
func (o *ownWrites) leftToWriter(d queueDoc, nowMs int64) bool {
	return d.Writer != "" && d.Writer != o.id && d.VisibleAt > o.othersSettled(nowMs)
}

// workerCondition is the worker candidate query's part that leaves others'
// fresh items to them (a look at the shares or the whole queue).
func (o *ownWrites) workerCondition(nowMs int64) (string, []QueryParameter) {
	return "NOT IS_DEFINED(c.writer) OR c.writer = @me OR c.visibleAt <= @settled", []QueryParameter{
		{Name: "@me", Value: o.id}, {Name: "@settled", Value: o.othersSettled(nowMs)},
	}
}
