package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
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
// An item the writer handed out is the writer's, whoever acks it in the
// end (a lock that lapses after the hand-out is its runtime's, which
// one-holder judges), and one a write of the writer's to it (a give-back,
// a refresh) left after a fault lapsed by design: counted apart.
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
	// lapsed are the items others consumed after a write of their
	// writer's to them (a give-back, a refresh) met a fault: left to
	// expire by design, not hidden for a fetch that did not take them.
	lapsed    int
	givenBack map[string]int // writer → items it gave back to the queue unconsumed
	ended     int            // items a cancellation's tombstone or a deletion removed unconsumed
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
	// items follow each worker item from its commit to what ended its wait
	// for its writer's fetch (eager-not-hidden, close-gives-back); nil for
	// starts.
	items  map[stampKey]*eagerItem
	wall   func() time.Time // the wall clock, which times the reports
	hidden hiddenTotals
	// removedFirst are the worker items seen removed before their
	// creation was seen, by the lsn of the removal: the account applies a
	// batch before its transport reports it, so a deletion's sweep (another
	// request, another goroutine) may be reported in between. A creation
	// of a lower lsn is then of an item already gone.
	removedFirst map[stampKey]int64
}

// eagerItem is one worker item a commit wrote locked to its writer,
// followed until something ended its wait for the writer's fetch: the
// writer's provider handed it out, or gave it back, an ack consumed it, a
// tombstone or a deletion removed it, or a claim took it (after its lock
// expired).
type eagerItem struct {
	writer  string
	created time.Time // the commit's report (wall clock): the account applied it
	// createdMs is the account's clock at that report; until its lock's
	// expiry, ms on the account's clock.
	createdMs, until int64
	ended            time.Time // zero while it waits
	how              string    // what ended the wait (eagerEnd...)
	by               string    // the node that did
	// handedOut: the writer's provider handed it to its runtime (a
	// handler may run it: at a shutdown its lock lapses, R21).
	handedOut bool
	// faultedWrite: a write of the writer to it met a fault (a give-back
	// or a refresh that failed): it may then wait for its lock's expiry.
	faultedWrite bool
	renewedTo    int64 // the last expiry a renewal of the writer's set (0: none)
	consumed     bool  // an ack consumed it (whatever ended its wait)
	// byOther: another node's ack consumed it while its writer was up,
	// neither handed out nor given back by the writer (eager-taken-by-writer).
	byOther bool
	// waitExcused: it waited until its lock expired, and checkNotHidden
	// found the wait excused (its writer stalled on it, a clock jump, a
	// write that met a fault, or a lock too short for any fetch to serve
	// it): not held against its writer by eager-taken-by-writer either.
	waitExcused bool
}

// expiry is the wall time its lock expires, as the account's clock ran at
// its commit's report.
func (it *eagerItem) expiry() time.Time {
	return it.created.Add(time.Duration(it.until-it.createdMs) * time.Millisecond)
}

// What ended an eagerly locked item's wait for its writer's fetch.
const (
	eagerEndHandedOut = "handed-out"
	eagerEndGivenBack = "given-back"
	eagerEndConsumed  = "consumed"
	eagerEndRemoved   = "removed"
	eagerEndTaken     = "taken"
)

// end ends item's wait, if it still waits.
func (it *eagerItem) end(how, by string, at time.Time) {
	if it == nil || !it.ended.IsZero() {
		return
	}
	it.ended, it.how, it.by = at, how, by
}

// newEagerItems follows eager activities: a worker's ack consumes its item
// with its first operation.
func newEagerItems(gone func(string) bool, now func() time.Time) *eagerItems {
	return &eagerItems{docType: "work", what: "worker items", consumes: func(ops []batchOp, i int) bool { return i == 0 && isWorkerAck(ops) },
		open: map[stampKey]string{}, own: map[string]int{}, others: map[string]int{}, givenBack: map[string]int{}, gone: gone, now: now,
		items: map[stampKey]*eagerItem{}, wall: time.Now, removedFirst: map[stampKey]int64{}}
}

// newEagerStartItems follows eager starts: the first turn's ack consumes
// the start message (a delete, or a consumed marker in its place).
func newEagerStartItems(gone func(string) bool, now func() time.Time) *eagerItems {
	return &eagerItems{docType: "msg", what: "starts", consumes: func([]batchOp, int) bool { return true },
		open: map[stampKey]string{}, own: map[string]int{}, others: map[string]int{}, givenBack: map[string]int{}, gone: gone, now: now,
		firstTurns: newFirstTurnWire(now), wall: time.Now}
}

// triesHook is the transport hook that shows a node's every request try to the
// first-turn observer; nil when there is none.
func (e *eagerItems) triesHook() func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
	if e == nil || e.firstTurns == nil {
		return nil
	}
	return e.firstTurns.observe
}

// observe reads one request of node that the account carried out; lsn is
// its answer's (0: not known), which orders it among the partition's
// writes where the reports do not.
func (e *eagerItems) observe(node string, req *http.Request, body []byte, status int, lsn int64) {
	pk := partitionKeyOf(req)
	switch operationOf(req) {
	case "Batch":
		ops, ok := committedBatch(body, status)
		if !ok {
			return
		}
		for i, o := range ops {
			switch strings.ToLower(o.OperationType) {
			case "create":
				e.created(node, pk, o.ResourceBody, lsn)
			case "delete", "replace":
				if e.consumes(ops, i) {
					e.consumed(node, stampKey{pk, o.ID})
				} else {
					e.removed(stampKey{pk, o.ID}, lsn) // an instance's deletion
				}
			case "upsert":
				e.removed(stampKey{pk, idOf(o.ResourceBody)}, lsn) // a cancelled activity's tombstone
			case "patch":
				e.patched(node, stampKey{pk, o.ID}, o.ResourceBody)
			}
		}
	case "PatchItem":
		if status == http.StatusOK {
			e.patched(node, stampKey{pk, docIDOf(req)}, body)
		}
	case "UpsertItem":
		e.removed(stampKey{pk, idOf(body)}, lsn) // a tombstone an outbox carried
	case "DeleteItem":
		e.removed(stampKey{pk, docIDOf(req)}, lsn)
	}
}

type batchOp struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

// committedBatch is the operations of a transactional batch the account
// committed; false for one rolled back (207: nothing of it happened) or
// one that does not decode.
func committedBatch(body []byte, status int) ([]batchOp, bool) {
	if status != http.StatusOK {
		return nil, false
	}
	var ops []batchOp
	if json.Unmarshal(body, &ops) != nil {
		return nil, false
	}
	return ops, true
}

// documentWrites hands the documents a request the account carried out
// created (or upserted) to created, and the ids it deleted or replaced to
// removed: a committed batch's operations, or a single document's.
func documentWrites(req *http.Request, body []byte, status int, created func(json.RawMessage), removed func(id string)) {
	switch operationOf(req) {
	case "Batch":
		ops, ok := committedBatch(body, status)
		if !ok {
			return
		}
		for _, o := range ops {
			switch strings.ToLower(o.OperationType) {
			case "create", "upsert":
				created(o.ResourceBody)
			case "delete", "replace":
				removed(o.ID)
			}
		}
	case "CreateItem", "UpsertItem":
		created(body)
	case "DeleteItem", "ReplaceItem":
		removed(docIDOf(req))
	}
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
func (e *eagerItems) created(node, pk string, body json.RawMessage, lsn int64) {
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
	key := stampKey{pk, doc.ID}
	if e.items != nil {
		e.items[key] = &eagerItem{writer: node, created: e.wall(), createdMs: e.now().UnixMilli(), until: doc.LockedUntil}
	}
	if removedAt, ok := e.removedFirst[key]; ok {
		delete(e.removedFirst, key)
		if lsn > 0 && removedAt > lsn {
			e.removeLocked(key) // created, then removed before this report
		}
	}
}

// consumed notes a worker ack of node consuming an item.
func (e *eagerItems) consumed(node string, key stampKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	it := e.items[key]
	if it != nil {
		it.consumed = true
		it.end(eagerEndConsumed, node, e.wall())
	}
	writer, ok := e.open[key]
	if !ok {
		return
	}
	delete(e.open, key)
	switch {
	case writer == node || it != nil && it.handedOut:
		// Taken by its writer's fetch: a lock that lapsed after the
		// hand-out (a renewal that failed, a shutdown's grace) is the
		// runtime's, which one-holder judges.
		e.own[writer]++
	case e.gone(writer):
		e.takenOver++
	case it != nil && it.faultedWrite:
		e.lapsed++
	default:
		e.others[writer]++
		if it != nil {
			it.byOther = true
		}
	}
}

// patched notes a patch of node's: one that clears the lock of an item
// node locked eagerly gives it back to the queue.
func (e *eagerItems) patched(node string, key stampKey, body json.RawMessage) {
	ch := readInstancePatch(body)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch.lockToken == nil {
		if it := e.items[key]; it != nil && ch.lockedUntil != nil && node == it.writer {
			it.renewedTo = *ch.lockedUntil // a refresh at its hand-out, or its runtime's renewal
		}
		return
	}
	if it := e.items[key]; it != nil && *ch.lockToken != "" {
		it.end(eagerEndTaken, node, e.wall()) // a claim: the lock had expired
		return
	}
	if *ch.lockToken != "" {
		return
	}
	if it := e.items[key]; it != nil && it.writer == node {
		it.end(eagerEndGivenBack, node, e.wall())
	}
	if writer, ok := e.open[key]; ok && writer == node {
		delete(e.open, key)
		e.givenBack[writer]++
	}
}

// removed notes an item ended without a worker's ack, by a write of lsn.
func (e *eagerItems) removed(key stampKey, lsn int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, seen := e.items[key]; !seen && e.removedFirst != nil && lsn > 0 && strings.HasPrefix(key.id, "w|") {
		e.removedFirst[key] = lsn
		return
	}
	e.removeLocked(key)
}

// removeLocked ends key's item as removed; called with e.mu held.
func (e *eagerItems) removeLocked(key stampKey) {
	e.items[key].end(eagerEndRemoved, "", e.wall())
	if _, ok := e.open[key]; ok {
		delete(e.open, key)
		e.ended++
	}
}

// handedOut notes node's provider handing an item (of partition pk, id
// doc) to its runtime at the wall time at.
func (e *eagerItems) handedOut(node, pk, doc string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if it := e.items[stampKey{pk, doc}]; it != nil && it.writer == node && it.ended.IsZero() {
		it.handedOut = true
		it.end(eagerEndHandedOut, node, at)
	}
}

// writeTriesHook is the transport hook that shows the eager observer node's
// every request try: a write of the writer's to one of its items that met
// a fault (a give-back, a refresh) may leave it to its lock's expiry.
func (e *eagerItems) writeTriesHook(node string) func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
	if e == nil || e.items == nil {
		return nil
	}
	return func(req *http.Request, body []byte, _ time.Time, fault string, status int, answered bool) {
		if fault == "" && status != 0 && answered {
			return
		}
		pk := partitionKeyOf(req)
		ids := patchedIDs(req, body)
		if len(ids) == 0 {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, id := range ids {
			if it := e.items[stampKey{pk, id}]; it != nil && it.writer == node {
				it.faultedWrite = true
			}
		}
	}
}

// check reports the live writers that left most of what they locked
// eagerly to others, and first-turn starts written twice. For worker
// items it follows checkNotHidden, whose excuses for an item's wait until
// its lock expired hold here too: such an item is counted apart (excused).
func (e *eagerItems) check(v *violations, describe func(node string) string) {
	if e.firstTurns != nil {
		e.firstTurns.check(v)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	others := e.unexcusedOthers()
	for _, w := range writersLeavingMost(e.own, others, eagerMinSample, eagerMaxShare) {
		total := e.own[w] + others[w]
		v.add(invEagerTakenByWriter, "", fmt.Sprintf("%s locked %d %s to itself eagerly and took %d itself: %d were hidden until their locks expired, for a fetch that did not take them (%s)",
			w, total, e.what, e.own[w], others[w], describe(w)))
	}
}

// unexcusedOthers is e.others less the items whose wait checkNotHidden
// excused; called with e.mu held.
func (e *eagerItems) unexcusedOthers() map[string]int {
	others := maps.Clone(e.others)
	for _, it := range e.items {
		if it.byOther && it.waitExcused {
			others[it.writer]--
		}
	}
	return others
}

// excusedOthers counts the items others took whose wait was excused;
// called with e.mu held.
func (e *eagerItems) excusedOthers() int {
	n := 0
	for _, it := range e.items {
		if it.byOther && it.waitExcused {
			n++
		}
	}
	return n
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
	s := fmt.Sprintf("locked=%d by-writer=%d by-others=%d (lapsed %d, wait excused %d) given-back=%d taken-over=%d ended-unconsumed=%d open=%d expired-at-commit=%d writers-checked=%d",
		e.locked, sum(e.own), sum(e.others), e.lapsed, e.excusedOthers(), sum(e.givenBack), e.takenOver, e.ended, len(e.open), e.expiredAtCommit, checked)
	if e.docType == "msg" {
		s += fmt.Sprintf(" written-by-first-turn=%d", e.firstTurnCreates)
	}
	if e.firstTurns != nil {
		s += " " + e.firstTurns.summary()
	}
	return s
}

// Eagerly locked items are not hidden (eager-not-hidden). An item a commit
// wrote locked waits for a fetch of its writer; nothing else can take it
// until its lock expires. So while the writer is up, the item is handed
// to its runtime or given back to the queue within about a poll interval
// (the give-back runs every poll interval, for what waited one) of the
// moment the writer could know the commit applied: never hidden for its
// lock's length. The transports time the commit's report (the account
// applied it), the writer's provider hands items out (handoutProvider),
// and the writer's give-back, an ack, a tombstone, a deletion or another's
// claim end the wait. An item whose lock expired while it still waited
// was hidden for its whole lock: a violation, unless that lock outlived
// the moment the writer could know by no more than hiddenBound (two poll
// intervals and a slack), then nothing could have served it sooner. That
// moment is the commit's report, or the writer's last fault or pause on
// the instance's partition in between (a lost answer and the reads that
// tell whether the commit applied; a fault delays what follows by the
// client's backoff, at most its MaxDelay, which the slack allows for), so
// a commit found applied late is judged from when it could be found. An
// item handed out or given back before its expiry, however late (a loaded
// host gives back one item after another), was not hidden for its lock.
// A writer that crashed or was shut down first is another check's
// (close-gives-back); a clock jump expires every lock; a give-back or
// refresh of the writer's that met a fault leaves its item to its lock's
// expiry, as the provider says.
const invEagerNotHidden = "eager-not-hidden"

// An eagerly locked item waits its patience at most (eager-patience): its
// lock is written for the fetch's lock timeout and the time it may wait
// ready on top, and it is handed out within that wait or given back at
// the give-back that follows (one a poll interval), so that it goes out
// whole and what its writer cannot serve goes to the others while its lock
// still has a lock timeout to run. So an item its writer handed out
// without a renewal, or gave back, had at least the writer's worker lock
// timeout, less a poll interval and the slack, left on its lock then. The
// same excuses hold as above (a fault or a pause of the writer's on the
// item, a clock jump, the writer gone).
const invEagerPatience = "eager-patience"

// eagerNodes is what the hidden-items check knows of the nodes.
type eagerNodes struct {
	gone     func(node string, at time.Time) bool
	heldBack func(node, pk string, from, to time.Time) (time.Time, bool)
	jumped   func(from, to time.Time) bool
	poll     func(node string) time.Duration
	// workerLock is a node's runtime's worker lock timeout.
	workerLock func(node string) time.Duration
	// slack is what the bound adds to two poll intervals: the client's
	// longest backoff, the nodes' skew, the host's scheduling.
	slack time.Duration
	// slower is what the bound adds when the host was slower while an
	// item waited than when the run measured it (other test binaries
	// started since): the host's part of the slack, scaled by the
	// difference (nil: nothing).
	slower func(from, to time.Time) time.Duration
}

// hiddenTotals counts what the hidden-items check saw.
type hiddenTotals struct {
	ended    map[string]int
	waiting  int // still waiting when the run was checked
	checked  int // expired while they waited, their writer up
	excused  int
	hidden   int
	judged   bool
	maxWaitP time.Duration // the longest wait judged (from the last hold-back)
	// patienceJudged counts the items handed out or given back whose
	// lock left was judged (eager-patience).
	patienceJudged int
}

func (e *eagerItems) hiddenBound(n eagerNodes, writer string, from, to time.Time) time.Duration {
	bound := 2*n.poll(writer) + n.slack
	if n.slower != nil {
		bound += n.slower(from, to)
	}
	return bound
}

// checkNotHidden reports the items that waited longer than their bound for
// a writer that was up.
func (e *eagerItems) checkNotHidden(v *violations, n eagerNodes, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.items == nil {
		return
	}
	t := &e.hidden
	t.judged, t.ended = true, map[string]int{}
	keys := make([]stampKey, 0, len(e.items))
	for k := range e.items {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].pk+keys[i].id < keys[j].pk+keys[j].id })
	for _, k := range keys {
		it := e.items[k]
		end, how := it.ended, it.how
		if end.IsZero() {
			end, how = now, "still locked"
			t.waiting++
		} else {
			t.ended[how]++
		}
		// Hidden only until its lock expired: anyone may take it then. An
		// item that waited until then was hidden for its whole lock; one
		// handed out or given back before then was not, even late (a
		// loaded host's give-backs, one request after another), nor one
		// its writer gave back at last (its give-back was under way).
		expired := it.expiry()
		if end.Before(expired) || how == eagerEndGivenBack {
			e.checkPatience(v, n, k, it, end, how, expired)
			continue
		}
		end = expired
		if n.gone(it.writer, end) {
			it.waitExcused = true
			continue // close-gives-back, or a crash: its locks expire
		}
		t.checked++
		from := it.created
		if held, ok := n.heldBack(it.writer, k.pk, it.created, end); ok && held.After(from) {
			from = held
		}
		waited := end.Sub(from)
		bound := e.hiddenBound(n, it.writer, from, end)
		if waited <= bound {
			t.maxWaitP = max(t.maxWaitP, waited)
			it.waitExcused = true
			continue
		}
		if it.faultedWrite || n.jumped(it.created, end) {
			t.excused++
			it.waitExcused = true
			continue
		}
		t.hidden++
		by := ""
		if it.by != "" {
			by = " by " + it.by
		}
		v.add(invEagerNotHidden, k.pk, fmt.Sprintf("worker item %s, locked to %s by its commit at %s (lock until %d on the account's clock), waited %s for it (bound %s) until %s%s at %s, its writer up",
			k.id, it.writer, stamp(it.created), it.until, waited.Round(time.Millisecond), bound.Round(time.Millisecond), how, by, stamp(end)))
	}
}

// checkPatience judges an item handed out or given back at end, before its
// lock's expiry (eager-patience). Called with e.mu held.
func (e *eagerItems) checkPatience(v *violations, n eagerNodes, k stampKey, it *eagerItem, end time.Time, how string, expired time.Time) {
	switch {
	case how != eagerEndHandedOut && how != eagerEndGivenBack,
		how == eagerEndHandedOut && it.renewedTo != 0,
		n.workerLock == nil,
		it.faultedWrite || n.jumped(it.created, end) || n.gone(it.writer, end):
		return
	}
	if _, held := n.heldBack(it.writer, k.pk, it.created, end); held {
		return
	}
	left, need := expired.Sub(end), n.workerLock(it.writer)-n.poll(it.writer)-n.slack
	if n.slower != nil {
		need -= n.slower(it.created, end) // the slack's host part, as the host was then
	}
	e.hidden.patienceJudged++
	if left >= need {
		return
	}
	v.add(invEagerPatience, k.pk, fmt.Sprintf("worker item %s, locked to %s by its commit at %s (lock until %d on the account's clock), was %s at %s with %s of its lock left (at least %s: a worker lock timeout less a poll interval and the slack), its writer up",
		k.id, it.writer, stamp(it.created), it.until, how, stamp(end), left.Round(time.Millisecond), need.Round(time.Millisecond)))
}

// hiddenSummary is the counts, for the eager activities line.
func (e *eagerItems) hiddenSummary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.hidden
	if !t.judged {
		return ""
	}
	return fmt.Sprintf("waits: %s still-locked=%d; expired waiting=%d (within bound=%s longest, excused=%d, hidden=%d); patience judged=%d",
		counts(t.ended), t.waiting, t.checked, t.maxWaitP.Round(time.Millisecond), t.excused, t.hidden, t.patienceJudged)
}
