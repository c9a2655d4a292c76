package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// The queue bell (bell-rung): an idle look of a long-polling process that
// has been listed at the bell for a while skips its query until another
// process rings the queue's bell, or for a bounded number of poll
// intervals. So a write of work another process may take must be followed
// by a ring of its writer's, soon, whenever the writer's view of the bell
// lists a listener other than itself (bell.go in the provider). The
// transports see the listings, the rings and the writes of work visible at
// once (a message or a worker item created unlocked and visible now: an
// enqueue, a commit's messages and queued activities, a worker's
// completion, a relay's delivery) that is still there at the ring's bound
// (not taken, nor removed by its writer as a refused start's message is),
// and of what the chore leader's looks across the container find (an
// outbox, a deletion intent: the chores' counter) still there then.
// A write is judged when another node's
// listing, written at least a view's age (and the slack) before it, still
// held a lease's worth past the judgement's end, with no leave between:
// every view its writer may have decided on lists that listener. Such a
// write must be followed, within the writer's ring gap and the slack, by a
// ring of its queue's bell by its writer, unless the writer went down, or
// was paused or drew a fault on the bell's partition meanwhile (a ring
// that failed is sent again a gap later), or a clock jumped (a view's age
// is then not known). Give-backs (a release, an
// abandon) and work that comes due later ring too, and are not judged
// here: the look the bell lets through every bounded number of intervals
// finds what a ring missed, which the workload's progress then shows.
const invBellRung = "bell-rung"

// Of the provider's bell (bell.go): its document, how long a writer's view
// of it may be, and how long a listing lasts.
const (
	bellDocID          = "bell"
	bellViewMaxAge     = 5 * time.Second
	bellListenerLease  = 30 * time.Second
	bellRingGapDivisor = 4 // a process rings a queue at most once per poll interval / 4
)

// bellWatch follows the bell's listings and rings, and the writes of work.
type bellWatch struct {
	now  func() time.Time // the account's clock, which visibleAt is on
	wall func() time.Time // the wall clock, which times the reports
	mu   sync.Mutex
	pk   string // the bell's partition, once seen
	// listings by node: when each listing or leave was seen (wall).
	listings map[string][]bellListing
	rings    map[string]map[string][]time.Time // node → queue → rings (wall)
	writes   []bellWrite
	// removals are when items were deleted or replaced (wall): work gone
	// by the ring's bound (taken, or a refused start's message its writer
	// removed at once) needs no ring.
	removals map[stampKey][]time.Time
	totals   bellTotals
}

type bellListing struct {
	at    time.Time
	leave bool
}

type bellWrite struct {
	node, queue, pk, id string
	at                  time.Time // wall, when the account's answer was seen
}

type bellTotals struct {
	listings, leaves, rings, writes int
	gone, judged, excused, late     int
}

func newBellWatch(now func() time.Time) *bellWatch {
	return &bellWatch{now: now, wall: time.Now, listings: map[string][]bellListing{}, rings: map[string]map[string][]time.Time{},
		removals: map[stampKey][]time.Time{}}
}

// observe reads one request of node that the account carried out.
func (b *bellWatch) observe(node string, req *http.Request, body []byte, status int) {
	if b == nil || status >= 300 {
		return
	}
	pk := partitionKeyOf(req)
	if operationOf(req) == "PatchItem" && docIDOf(req) == bellDocID {
		b.patched(node, pk, body)
		return
	}
	documentWrites(req, body, status, func(doc json.RawMessage) { b.created(node, pk, doc) },
		func(id string) { b.removed(stampKey{pk, id}) })
}

// removed notes an item deleted or replaced.
func (b *bellWatch) removed(key stampKey) {
	if !strings.HasPrefix(key.id, "m|") && !strings.HasPrefix(key.id, "w|") && !strings.HasPrefix(key.id, "o|") && !strings.HasPrefix(key.id, "d|") {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removals[key] = append(b.removals[key], b.wall())
}

// goneWithin says the item was removed between from and to.
func (b *bellWatch) goneWithin(key stampKey, from, to time.Time) bool {
	for _, at := range b.removals[key] {
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

// patched reads a patch of the bell: a listing, a leave, rings.
func (b *bellWatch) patched(node, pk string, body []byte) {
	var patch struct {
		Operations []struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		} `json:"operations"`
	}
	if json.Unmarshal(body, &patch) != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.wall()
	b.pk = pk
	for i, o := range patch.Operations {
		switch {
		case strings.HasPrefix(o.Path, "/listeners/") && o.Op == "set" && i == 0: // a listing sets its own first
			b.listings[node] = append(b.listings[node], bellListing{at: now})
			b.totals.listings++
		case strings.HasPrefix(o.Path, "/listeners/") && o.Op == "remove" && len(patch.Operations) == 1: // a leave removes its own alone
			b.listings[node] = append(b.listings[node], bellListing{at: now, leave: true})
			b.totals.leaves++
		case o.Op == "incr" && (o.Path == "/orchestrator" || o.Path == "/worker" || o.Path == "/chores"):
			if b.rings[node] == nil {
				b.rings[node] = map[string][]time.Time{}
			}
			q := strings.TrimPrefix(o.Path, "/")
			b.rings[node][q] = append(b.rings[node][q], now)
			b.totals.rings++
		}
	}
}

// created notes a queue item created unlocked and visible now.
func (b *bellWatch) created(node, pk string, body json.RawMessage) {
	var doc struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		LockToken string `json:"lockToken"`
		VisibleAt int64  `json:"visibleAt"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.LockToken != "" || doc.VisibleAt > b.now().UnixMilli() {
		return
	}
	var queue string
	switch doc.Type {
	case "msg":
		queue = "orchestrator"
	case "work":
		queue = "worker"
	case "outbox", "delete": // what the reconciler looks for
		queue = "chores"
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes = append(b.writes, bellWrite{node: node, queue: queue, pk: pk, id: doc.ID, at: b.wall()})
	b.totals.writes++
}

// bellNodes is what the check knows of the nodes.
type bellNodes struct {
	gone    func(node string, at time.Time) bool
	stalled func(node, pk string, from, to time.Time) bool
	jumped  func(from, to time.Time) bool // a clock jump: a view's age is then not known
	poll    func(node string) time.Duration
	slack   time.Duration
	// slower is what the bound adds when the host was slower between two
	// times than when the run measured it (other test binaries started
	// since), as for the hidden items (eagerNodes.slower; nil: nothing).
	slower func(from, to time.Time) time.Duration
}

// check judges every write whose writer's view surely listed another
// listener, up to the end of the run (writes too recent to judge are
// left).
func (b *bellWatch) check(v *violations, n bellNodes, end time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.writes {
		bound := n.poll(w.node)/bellRingGapDivisor + n.slack
		if n.slower != nil {
			bound += n.slower(w.at, w.at.Add(bound))
		}
		if n.poll(w.node) <= 0 || w.at.Add(bound).After(end) || !b.surelyHeardBy(w.node, w.at, bound, n.slack) {
			continue
		}
		// Gone by the bound (reported up to a bound early: the account
		// applies a batch before its transport reports it): nothing to find.
		if b.goneWithin(stampKey{w.pk, w.id}, w.at.Add(-bound), w.at.Add(bound)) {
			b.totals.gone++
			continue
		}
		b.totals.judged++
		if b.rangWithin(w.node, w.queue, w.at, w.at.Add(bound)) {
			continue
		}
		from := w.at.Add(-bellViewMaxAge - n.slack)
		if n.gone(w.node, w.at.Add(bound)) || n.stalled(w.node, b.pk, from, w.at.Add(bound)) || n.jumped(from, w.at.Add(bound)) {
			b.totals.excused++
			continue
		}
		b.totals.late++
		v.add(invBellRung, w.pk, fmt.Sprintf("%s wrote %s (the %s queue's) at %s while another process listened at the bell, and did not ring it within %s",
			w.node, w.id, w.queue, stamp(w.at), bound.Round(time.Millisecond)))
	}
}

// surelyHeardBy says a node other than writer listened at at, in every
// view writer may have decided on: its latest listing at least a view's
// age (and the slack) before at still held past at+bound, with no leave
// since.
func (b *bellWatch) surelyHeardBy(writer string, at time.Time, bound, slack time.Duration) bool {
	seenBy := at.Add(-bellViewMaxAge - slack)
	for node, ls := range b.listings {
		if node == writer {
			continue
		}
		var last *bellListing
		left := false
		for i := range ls {
			switch l := &ls[i]; {
			case !l.at.After(seenBy) && !l.leave:
				last, left = l, false
			case l.leave && !l.at.After(at.Add(bound)):
				left = true
			}
		}
		if last != nil && !left && last.at.Add(bellListenerLease-slack).After(at.Add(bound)) {
			return true
		}
	}
	return false
}

// rangWithin says node rang queue between from and to.
func (b *bellWatch) rangWithin(node, queue string, from, to time.Time) bool {
	rings := b.rings[node][queue]
	i := sort.Search(len(rings), func(i int) bool { return !rings[i].Before(from) })
	return i < len(rings) && !rings[i].After(to)
}

// summary is the counts, for the report: so a seed's log shows the bell
// rang and was judged.
func (b *bellWatch) summary() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.totals
	return fmt.Sprintf("listings=%d leaves=%d rings=%d writes of work visible at once=%d (gone by the bound %d; judged %d: rung in time %d, excused %d, late %d)",
		t.listings, t.leaves, t.rings, t.writes, t.gone, t.judged, t.judged-t.excused-t.late, t.excused, t.late)
}
