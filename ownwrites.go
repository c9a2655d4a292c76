package cdb

import (
	"encoding/json"
	"sync"
	"time"
)

// With process leases, most queue items land in slots another process
// owns: the slot follows the instance (or the activity), not the writer.
// The writer announces each item to its own fetches, which take it at once
// (a query of that one partition and a claim); the owner would otherwise
// find the same item at its next idle look and race the writer for it, a
// lost claim (412) and a wasted query for one of them, most of the time at
// low load. So an item may say which process wrote it and will take it
// (queueDoc.Writer), and the other processes' looks at their shares leave
// it alone for a poll interval (writerGrace): long enough for the writer,
// short enough that work the writer cannot get to (it died, or its fetches
// are all busy) still moves.
//
// A stamp is advice that others follow without asking, so it must not
// outlive what made it true. The invariant: a process stamps an item only
// when its own fetch will take it, that is, when all of these hold:
//   - it writes the item itself, into the item's partition, and announces
//     it to its own fetches right after: an item an outbox delivers (to
//     another instance, or overflow) is never stamped, since the relay
//     announces nothing;
//   - it polls long (Config.ShortPolling fetches never wait for an
//     announcement: they look at their share, which may not hold the item);
//   - a fetch of the item's queue is running in this process, and every
//     running one would take it: on the worker queue its tag filter matches
//     and the item belongs to no session (the session's owner takes those);
//     on the orchestrator queue its capability filter admits the instance's
//     pinned version, as the writer knows it (a start: not pinned yet; a
//     turn's own messages: the turn's pin; a completion: the pin its worker
//     item carries; an event from outside: unknown, so stamped only for
//     fetches without a filter);
//   - the item is visible now (a later one is announced by a wake-up of
//     every fetch, not by partition);
//   - on the worker queue, its fetches are not booked: a worker item the
//     ready list had no room for (handoff's depth, what the fetches take
//     in half an item's patience, longer than the grace) waits behind
//     that much ready work, so it is left unstamped for whoever looks.
// A write that moves an item's visibility (an abandon, a set-aside) removes
// its stamp (setDue). And the damage of a stamp that is wrong anyway (a
// writer that died, or an older version's stamp) is bounded: a worker item
// is left alone for a poll interval after it became visible, and an
// instance only while its oldest waiting message is that fresh, so a stream
// of fresh stamped messages never holds an instance back for longer than
// one poll interval in all (leaveToWriters).

// ownWrites records the fetches this process runs right now: on the
// orchestrator queue by capability filter, on the worker queue by tag
// filter.
type ownWrites struct {
	id     string
	grace  time.Duration // how long others leave a stamped item to its writer
	stamps bool          // this process stamps its writes (long polling)
	now    func() time.Time
	mu     sync.Mutex
	orch   map[string]*orchestrationFetches // by filterKey
	byTags map[string]*tagFetches           // by TagFilter.String()
}

type orchestrationFetches struct {
	filter  *DispatcherCapabilityFilter
	running int
}

type tagFetches struct {
	filter  TagFilter
	running int
}

func newOwnWrites(id string, grace time.Duration, stamps bool, now func() time.Time) *ownWrites {
	return &ownWrites{id: id, grace: grace, stamps: stamps, now: now,
		orch: map[string]*orchestrationFetches{}, byTags: map[string]*tagFetches{}}
}

// orchestrationFetch records a running fetch of the orchestrator queue with
// filter until the returned function is called.
func (o *ownWrites) orchestrationFetch(filter *DispatcherCapabilityFilter) (done func()) {
	if o == nil {
		return func() {}
	}
	key := filterKey(filter)
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.orch[key]
	if !ok {
		f = &orchestrationFetches{filter: filter}
		o.orch[key] = f
	}
	f.running++
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if f.running--; f.running == 0 {
			delete(o.orch, key)
		}
	}
}

// workFetch records a running worker fetch with tags until done is called.
func (o *ownWrites) workFetch(tags TagFilter) (done func()) {
	if o == nil {
		return func() {}
	}
	key := tags.String()
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.byTags[key]
	if !ok {
		f = &tagFetches{filter: tags}
		o.byTags[key] = f
	}
	f.running++
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if f.running--; f.running == 0 {
			delete(o.byTags, key)
		}
	}
}

// instancePin is what a writer knows of the pinned version of the instance
// a message is for.
type instancePin struct {
	known   bool
	version *uint64 // nil: not pinned (yet)
}

// unknownPin is the pin of an instance the writer has not read.
var unknownPin = instancePin{}

// pinnedTo is a known pin (nil: the instance is not pinned).
func pinnedTo(version *uint64) instancePin { return instancePin{known: true, version: version} }

// admits says a fetch with filter can lock an instance with pin.
func (pin instancePin) admits(filter *DispatcherCapabilityFilter) bool {
	if filter == nil {
		return true
	}
	return pin.known && !pinnedOutside(filter, pin.version)
}

// messageWriter is the stamp of an orchestrator message visible at
// visibleAtMs, written directly into the partition of an instance with pin:
// this process when every orchestration fetch it runs can take it now.
func (o *ownWrites) messageWriter(visibleAtMs int64, pin instancePin) string {
	return o.writer(visibleAtMs, func() bool {
		for _, f := range o.orch {
			if !pin.admits(f.filter) {
				return false
			}
		}
		return len(o.orch) > 0
	})
}

// workWriter is the stamp of a worker item written directly into its
// partition: this process when the item belongs to no session and every
// worker fetch it runs matches the item's tag.
func (o *ownWrites) workWriter(act ActivityExecuteMessage, visibleAtMs int64) string {
	if act.SessionID != nil {
		return ""
	}
	return o.writer(visibleAtMs, func() bool {
		for _, f := range o.byTags {
			if !f.filter.Matches(act.Tag) {
				return false
			}
		}
		return len(o.byTags) > 0
	})
}

// writer is this process's id when it stamps its writes, an item visible
// at visibleAtMs is visible now and takes (called with o.mu held) says its
// running fetches take it; "" otherwise, and without process leases.
func (o *ownWrites) writer(visibleAtMs int64, takes func() bool) string {
	if o == nil || !o.stamps || visibleAtMs > o.now().UnixMilli() {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !takes() {
		return ""
	}
	return o.id
}

// stampedBody adds writer's stamp to an encoded queue document written
// without one, without decoding it again.
func stampedBody(body []byte, writer string) []byte {
	if writer == "" {
		return body
	}
	name, _ := json.Marshal(writer) // a string always encodes
	return append(append(append([]byte(`{"writer":`), name...), ','), body[1:]...)
}

// stampBytes is what stampedBody adds to a document.
func stampBytes(writer string) int {
	if writer == "" {
		return 0
	}
	return len(`{"writer":"",`) - 1 + len(writer)
}

// othersSettled is the visibleAt (ms) up to which another process's items
// are no longer left to it: now less the grace.
func (o *ownWrites) othersSettled(nowMs int64) int64 {
	return nowMs - o.grace.Milliseconds()
}

// leavesInstance says a look at the shares should leave an instance whose
// candidate messages are docs (oldest first) to another process that
// stamped one of them: only while the oldest is fresh, so however many
// stamped messages keep arriving, the instance waits one grace at most.
func (o *ownWrites) leavesInstance(docs []queueDoc, nowMs int64) bool {
	if len(docs) == 0 || docs[0].VisibleAt <= o.othersSettled(nowMs) {
		return false
	}
	for _, d := range docs {
		if d.Writer != "" && d.Writer != o.id {
			return true
		}
	}
	return false
}

// workerCondition is the worker candidate query's part that leaves others'
// fresh items to them (a look at the shares or the whole queue).
func (o *ownWrites) workerCondition(nowMs int64) (string, []QueryParameter) {
	return "NOT IS_DEFINED(c.writer) OR c.writer = @me OR c.visibleAt <= @settled", []QueryParameter{
		{Name: "@me", Value: o.id}, {Name: "@settled", Value: o.othersSettled(nowMs)},
	}
}
