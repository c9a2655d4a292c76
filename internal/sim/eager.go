package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Eager activities (eager-taken-by-writer): an ack's commit may write a
// worker item already locked to its own process, for a worker fetch of
// that process that is waiting now, and hand it over without a query or a
// claim. Such an item is hidden from every other process until its lock
// expires, so a writer must take what it locks: the transports see each
// item created locked in a batch and the worker ack that consumes it, and
// at the end a writer that was up the whole time and left more than half
// of at least eagerMinSample such items to others is a violation. (Others
// may take one after its lock expired, when the fetch it was locked for
// went away or a pause outlasted the lock; that stays well under half.)
// The items of a writer that crashed or was shut down before they were
// consumed are taken over once their locks expire; they are counted, and
// that every activity completes is the other invariants' to check.
const (
	eagerMinSample = 12
	eagerMaxShare  = 0.5
)

// Eager starts were checked the same way when a start's batch wrote its
// message claimed for a waiting fetch of its own process. Such a start is
// now not written at all until its first turn's commit creates the
// instance (first_turn_start.go), so no start message should be written
// locked: the check follows start messages only (chained completions,
// also written locked, are the chained-turns observer's), and counts none
// unless a regression writes them.
//
// An item its writer gives back (a patch of the writer's that clears its
// lock: no fetch of the writer took it within a poll interval, or the
// writer closed) was not hidden: it went to the queue then. It is counted
// apart (given-back) and not held against the writer.

// eagerItems follows eagerly locked queue items (worker items, or start
// messages) from the batch that wrote them to the ack that consumed them.
type eagerItems struct {
	docType string // "work" or "msg"
	what    string // what the items are, for a violation's text
	// consumes says operation i of a batch consumes its item.
	consumes  func(ops []batchOp, i int) bool
	mu        sync.Mutex
	open      map[stampKey]string // item → the node whose commit locked it
	locked    int                 // items written locked, in all
	own       map[string]int      // writer → items it consumed itself
	others    map[string]int      // writer → items others consumed while it was up
	takenOver int                 // items others consumed after their writer crashed or was shut down
	givenBack map[string]int      // writer → items it gave back to the queue unconsumed
	ended     int                 // items a cancellation's tombstone or a deletion removed unconsumed
	// expiredAtCommit are the items whose lock had run out by the time
	// the commit that wrote them answered.
	expiredAtCommit int
	// firstTurnCreates are instance documents a commit created (a start
	// written by its first turn), counted by the start observer so a
	// seed's log shows that path ran.
	firstTurnCreates int
	// firstTurns follows first turns' commits and hand-backs on the wire
	// (every try, faults included: firstturn_wire.go); nil for worker items.
	firstTurns *firstTurnWire
	gone       func(node string) bool
	now        func() time.Time // the account's clock
}

// newEagerItems follows eager activities: a worker's ack consumes its item
// with its first operation.
func newEagerItems(gone func(string) bool, now func() time.Time) *eagerItems {
	return &eagerItems{docType: "work", what: "worker items", consumes: func(ops []batchOp, i int) bool { return i == 0 && isWorkerAck(ops) },
		open: map[stampKey]string{}, own: map[string]int{}, others: map[string]int{}, givenBack: map[string]int{}, gone: gone, now: now}
}

// newEagerStartItems follows eager starts: the first turn's ack consumes
// the start message (a delete, or a consumed marker in its place).
func newEagerStartItems(gone func(string) bool, now func() time.Time) *eagerItems {
	return &eagerItems{docType: "msg", what: "starts", consumes: func([]batchOp, int) bool { return true },
		open: map[stampKey]string{}, own: map[string]int{}, others: map[string]int{}, givenBack: map[string]int{}, gone: gone, now: now,
		firstTurns: newFirstTurnWire(now)}
}

// triesHook is the transport hook that shows a node's every request try to the
// first-turn observer; nil when there is none.
func (e *eagerItems) triesHook() func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
	if e == nil || e.firstTurns == nil {
		return nil
	}
	return e.firstTurns.observe
}

// observe reads one request of node that the account carried out.
func (e *eagerItems) observe(node string, req *http.Request, body []byte, status int) {
	pk := partitionKeyOf(req)
	switch operationOf(req) {
	case "Batch":
		if status != http.StatusOK { // 207: rolled back, nothing of it happened
			return
		}
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil {
			return
		}
		for i, o := range ops {
			switch strings.ToLower(o.OperationType) {
			case "create":
				e.created(node, pk, o.ResourceBody)
			case "delete", "replace":
				if e.consumes(ops, i) {
					e.consumed(node, stampKey{pk, o.ID})
				} else {
					e.removed(stampKey{pk, o.ID}) // an instance's deletion
				}
			case "upsert":
				e.removed(stampKey{pk, idOf(o.ResourceBody)}) // a cancelled activity's tombstone
			case "patch":
				e.patched(node, stampKey{pk, o.ID}, o.ResourceBody)
			}
		}
	case "PatchItem":
		if status == http.StatusOK {
			segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			e.patched(node, stampKey{pk, segments[len(segments)-1]}, body)
		}
	case "UpsertItem":
		e.removed(stampKey{pk, idOf(body)}) // a tombstone an outbox carried
	case "DeleteItem":
		segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		e.removed(stampKey{pk, segments[len(segments)-1]})
	}
}

type batchOp struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

// isWorkerAck reports the shape of a worker's ack: the item's delete (or
// consumed marker) first, then at most its completion's create. An
// instance's deletion deletes in batches too, but fenced by a patch of the
// instance document first, or many documents at once.
func isWorkerAck(ops []batchOp) bool {
	switch {
	case len(ops) == 0 || len(ops) > 2:
		return false
	case len(ops) == 2 && !strings.EqualFold(ops[1].OperationType, "create"):
		return false
	}
	first := strings.ToLower(ops[0].OperationType)
	return first == "delete" || first == "replace"
}

func idOf(body json.RawMessage) string {
	var doc struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &doc)
	return doc.ID
}

// created notes a worker item a batch wrote already locked, and whether
// its lock had run out by the commit's answer (its expiry is counted from
// before the commit: a commit that took longer than the lock hands the
// item to whoever looks, its first run counted as a second attempt).
func (e *eagerItems) created(node, pk string, body json.RawMessage) {
	var doc struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		LockToken   string `json:"lockToken"`
		LockedUntil int64  `json:"lockedUntil"`
		Item        string `json:"item"`
		LastAck     string `json:"lastAck"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return
	}
	if e.docType == "msg" && doc.Type == "inst" && doc.LastAck != "" {
		e.mu.Lock()
		e.firstTurnCreates++
		e.mu.Unlock()
		return
	}
	if doc.Type != e.docType || doc.LockToken == "" {
		return
	}
	if e.docType == "msg" && !strings.HasPrefix(doc.Item, `{"StartOrchestration"`) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.open[stampKey{pk, doc.ID}] = node
	e.locked++
	if doc.LockedUntil <= e.now().UnixMilli() {
		e.expiredAtCommit++
	}
}

// consumed notes a worker ack of node consuming an item.
func (e *eagerItems) consumed(node string, key stampKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	writer, ok := e.open[key]
	if !ok {
		return
	}
	delete(e.open, key)
	switch {
	case writer == node:
		e.own[writer]++
	case e.gone(writer):
		e.takenOver++
	default:
		e.others[writer]++
	}
}

// patched notes a patch of node's: one that clears the lock of an item
// node locked eagerly gives it back to the queue.
func (e *eagerItems) patched(node string, key stampKey, body json.RawMessage) {
	ch := readInstancePatch(body)
	if ch.lockToken == nil || *ch.lockToken != "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if writer, ok := e.open[key]; ok && writer == node {
		delete(e.open, key)
		e.givenBack[writer]++
	}
}

// removed notes an item ended without a worker's ack.
func (e *eagerItems) removed(key stampKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.open[key]; ok {
		delete(e.open, key)
		e.ended++
	}
}

// check reports the live writers that left most of what they locked
// eagerly to others, and first-turn starts written twice.
func (e *eagerItems) check(v *violations, describe func(node string) string) {
	if e.firstTurns != nil {
		e.firstTurns.check(v)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range writersLeavingMost(e.own, e.others, eagerMinSample, eagerMaxShare) {
		total := e.own[w] + e.others[w]
		v.add(invEagerTakenByWriter, "", fmt.Sprintf("%s locked %d %s to itself eagerly and took %d itself: %d were hidden until their locks expired, for a fetch that did not take them (%s)",
			w, total, e.what, e.own[w], e.others[w], describe(w)))
	}
}

// summary is the counts, for the report: so a seed's log shows the path
// ran.
func (e *eagerItems) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	// checked: the writers with a sample large enough for the bound.
	checked := 0
	for w, n := range e.own {
		if n+e.others[w] >= eagerMinSample {
			checked++
		}
	}
	s := fmt.Sprintf("locked=%d by-writer=%d by-others=%d given-back=%d taken-over=%d ended-unconsumed=%d open=%d expired-at-commit=%d writers-checked=%d",
		e.locked, sum(e.own), sum(e.others), sum(e.givenBack), e.takenOver, e.ended, len(e.open), e.expiredAtCommit, checked)
	if e.docType == "msg" {
		s += fmt.Sprintf(" written-by-first-turn=%d", e.firstTurnCreates)
	}
	if e.firstTurns != nil {
		s += " " + e.firstTurns.summary()
	}
	return s
}
