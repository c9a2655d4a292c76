package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Chained turns (chain-claims, chain-taken-early, chain-ended-by-writer,
// chain-reads-others): a commit that locked activities eagerly for its own
// workers may keep its instance locked, writing the instance document with
// the token lock_chain.<ack token> and an expiry a lock timeout after the
// commit was planned; that process's worker acks then write the
// activities' completions already claimed with the kept lock (its token,
// its expiry, one attempt). A worker ack may open a chain too, when the
// instance is free and other activities of it run on the ack's process:
// its batch patches the instance's lock to a chain token, and its
// siblings' acks claim their completions with it, maybe landing before
// the opening (held as early claims until it lands) or for good when the
// opening was refused (another held the instance: the writer then
// releases them). The transports see how each chain ends: the writer's next
// turn acks with the chain's token (by-writer), the writer gives it back (a
// write that clears the instance's lock: released), or a lock batch takes
// the instance once the lock expired (taken-over). So:
//   - chain-claims: a completion claimed with a chain carries the chain's
//     expiry and one attempt, is written by the chain's writer, and the
//     batches of the writer's chained turn, or its give-back, consume or
//     unlock it. One left claimed when the chain ended, or claimed with a
//     chain that never opened and not released, stays hidden until the
//     expiry; only its writer's crash, or an ack whose answer was lost
//     (the writer never learnt it wrote the completion), excuses that;
//   - chain-taken-early: no other process's lock takes a live writer's
//     chain before it expired on the account's clock (give or take the
//     nodes' clock skew, by which a lock's condition may read the expiry
//     early);
//   - chain-ended-by-writer: a writer that was up ends most of at least
//     chainMinSample of its chains itself; a chain taken over after a
//     renewal or a give-back of its writer met a fault or lost its answer,
//     the writer was paused, or the clock jumped during the chain is not
//     counted against it (each lets a chain expire by design);
//   - chain-reads-others: a chained turn takes the completions its chain
//     claimed without a request, and queries the partition under the
//     chain's token only now and then; so along a hold (chain after chain
//     of one writer on one instance, each written by the ack of the one
//     before) a chained turn that did not read is acked within the writer's
//     poll interval of the hold's last read (the first chain's commit, for
//     the fetch read before it), give or take a turn (readSlack). A pause
//     of the writer, or a fault on one of its requests to the partition,
//     during the turn excuses a late one, and so does a large turn; a host
//     measured slower than at the run's start stretches the bound by as
//     much (slowerThanMeasured).
//
// The nodes' transports report concurrently, so a give-back and the lock
// batch that followed it may be reported in either order. The account
// numbers the writes of a partition key range (the answer's LSN), so the
// writes are kept as reported and replayed per partition in the account's
// order when the run is checked.
const (
	chainMinSample = 12
	chainMaxShare  = 0.5
	chainPrefix    = "lock_chain."
	// chainTurnAllowance is what the runtime's replay of a chained turn
	// may take on an idle host (chain-reads-others), scaled with the host.
	chainTurnAllowance = 50 * time.Millisecond
	// instanceDocument is the id of an instance's document in its
	// partition.
	instanceDocument = "inst"
)

// How a chain ended.
const (
	chainByWriter  = "by-writer"
	chainReleased  = "released"
	chainTakenOver = "taken-over"
	chainDeleted   = "deleted"
)

// chainWrite is one committed write of a partition that bears on chains.
type chainWrite struct {
	lsn     int64
	arrival int // the order of the reports, for writes the account did not number
	node    string
	at      time.Time // the wall time of the report: who was gone by then
	nowMs   int64     // the account's clock at the report, no earlier than the write
	inst    *instanceChange
	touched []string // the other documents it patched, replaced or deleted
	claims  []claimedCompletion
	staged  string // the chain token of an ack whose staged part it created (a large turn's)
}

// instanceChange is what a write did to the instance document's lock.
type instanceChange struct {
	kind        string // "write" (the whole document), "patch" or "delete"
	instance    string
	lockToken   *string // nil: a patch that left it
	lockedUntil *int64
	lastAck     string
	// marked says the write marks the instance for a deletion: from then
	// on the deletion has it, whoever's lock it carries.
	marked bool
}

// claimedCompletion is a message a write created claimed with a chain.
type claimedCompletion struct {
	id, token   string
	lockedUntil int64
	attempts    int
}

// chainedTurns keeps the writes that bear on chains, and replays them once
// to check and count.
type chainedTurns struct {
	mu       sync.Mutex
	writes   map[string][]chainWrite // by partition key
	lost     map[stampKey]bool       // claimed completions whose write's answer did not reach its node
	reads    map[string][]chainRead  // by chain token: the queries of its partition under it
	arrivals int
	nodes    chainNodes
	now      func() time.Time // the account's clock
	wall     func() time.Time // the wall clock, which times the reports
	skew     time.Duration    // the most a node's clock is off
	turn     time.Duration    // what a turn's own work (the runtime's replay) may take on this host
	outcome  *chainOutcome
}

// chainNodes is what the checks know of the nodes.
type chainNodes struct {
	gone func(node string, at time.Time) bool // crashed or shut down by then
	// stalled: paused, or drew a fault for a request of partition pk, at
	// some time in between
	stalled func(node, pk string, from, to time.Time) bool
	// writeFaulted: a write of node to document id of partition pk (a
	// renewal or a give-back of the instance document) met a fault or
	// lost its answer in between; paused: node was paused in between
	writeFaulted func(node, pk, id string, from, to time.Time) bool
	paused       func(node string, from, to time.Time) bool
	jumped       func(from, to time.Time) bool   // the account's clock jumped in between
	poll         func(node string) time.Duration // its provider's PollInterval
	// slower is what a bound d lacks for from..to on a host measured
	// slower then than at the run's start (slowerThanMeasured); nil: 0.
	slower func(from, to time.Time, d time.Duration) time.Duration
}

// chainRead is a query of a chained instance's partition under the
// chain's token whose answer reached its node.
type chainRead struct {
	node string
	at   time.Time
}

func newChainedTurns(nodes chainNodes, now func() time.Time, skew, turn time.Duration) *chainedTurns {
	return &chainedTurns{writes: map[string][]chainWrite{}, lost: map[stampKey]bool{}, reads: map[string][]chainRead{},
		nodes: nodes, now: now, wall: time.Now, skew: skew, turn: turn}
}

// observe keeps one write of node that the account carried out, or one of
// its queries under a chain's token; answered says whether its answer
// reached the node.
func (c *chainedTurns) observe(node string, req *http.Request, body []byte, resp *http.Response, answered bool) {
	if operationOf(req) == "Query" {
		if token, ok := readChainQuery(body); ok && answered {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.reads[token] = append(c.reads[token], chainRead{node: node, at: c.wall()})
		}
		return
	}
	w, ok := readChainWrite(req, body, resp.StatusCode)
	if !ok {
		return
	}
	w.node, w.at, w.nowMs = node, c.wall(), c.now().UnixMilli()
	w.lsn, _ = strconv.ParseInt(resp.Header.Get("lsn"), 10, 64)
	pk := partitionKeyOf(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	w.arrival = c.arrivals
	c.arrivals++
	c.writes[pk] = append(c.writes[pk], w)
	if !answered {
		for _, cl := range w.claims {
			c.lost[stampKey{pk, cl.id}] = true
		}
	}
}

// readChainQuery reads the chain token a query's @token parameter names
// (a chained turn completing its batch, completeBatch); false for any
// other query.
func readChainQuery(body []byte) (string, bool) {
	var q struct {
		Parameters []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"parameters"`
	}
	if json.Unmarshal(body, &q) != nil {
		return "", false
	}
	for _, p := range q.Parameters {
		var token string
		if p.Name == "@token" && json.Unmarshal(p.Value, &token) == nil && strings.HasPrefix(token, chainPrefix) {
			return token, true
		}
	}
	return "", false
}

// readChainWrite reads what a committed request wrote to instance
// documents and queue messages; false when nothing that bears on chains.
func readChainWrite(req *http.Request, body []byte, status int) (chainWrite, bool) {
	var w chainWrite
	switch op := operationOf(req); op {
	case "Batch":
		if status != http.StatusOK { // 207: rolled back, nothing of it happened
			return w, false
		}
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil {
			return w, false
		}
		for _, o := range ops {
			w.add(strings.ToLower(o.OperationType), o.ID, o.ResourceBody)
		}
	case "CreateItem", "UpsertItem", "ReplaceItem", "PatchItem", "DeleteItem":
		segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		id := "" // a create or upsert names it in its body
		if n := len(segments); n >= 2 && segments[n-2] == "docs" {
			id = segments[n-1]
		}
		w.add(strings.ToLower(strings.TrimSuffix(op, "Item")), id, body)
	}
	return w, w.inst != nil || len(w.touched) > 0 || len(w.claims) > 0 || w.staged != ""
}

// add reads one operation of a write. A batch's reads (a read from the
// partition's primary is a batch of them) write nothing.
func (w *chainWrite) add(kind, id string, body json.RawMessage) {
	if kind == "read" {
		return
	}
	writesWhole := kind == "create" || kind == "upsert" || kind == "replace"
	if id == "" && writesWhole {
		id = idOf(body)
	}
	switch {
	case id == instanceDocument:
		w.inst = readInstanceChange(kind, body)
	case kind == "create" || kind == "upsert":
		if cl, ok := readClaimedCompletion(body); ok {
			w.claims = append(w.claims, cl)
		}
		if token, ok := stagedFor(id); ok {
			w.staged = token
		}
	case kind == "patch" || kind == "replace" || kind == "delete":
		w.touched = append(w.touched, id)
	}
}

// stagedFor reads the ack token a document's id names, when it is a chain's
// (hp|<token>|n, v|<token>, op|<token>|n, kv|<bucket>|<token>|n: the parts
// a large turn stages before its commit).
func stagedFor(id string) (string, bool) {
	for _, segment := range strings.Split(id, "|") {
		if strings.HasPrefix(segment, chainPrefix) {
			return segment, true
		}
	}
	return "", false
}

func readInstanceChange(kind string, body json.RawMessage) *instanceChange {
	switch kind {
	case "delete":
		return &instanceChange{kind: "delete"}
	case "patch":
		return readInstancePatch(body)
	}
	var doc struct {
		Instance    string `json:"instance"`
		LockToken   string `json:"lockToken"`
		LockedUntil int64  `json:"lockedUntil"`
		LastAck     string `json:"lastAck"`
		Deleting    string `json:"deleting"`
	}
	_ = json.Unmarshal(body, &doc)
	return &instanceChange{kind: "write", instance: doc.Instance, lockToken: &doc.LockToken, lockedUntil: &doc.LockedUntil, lastAck: doc.LastAck, marked: doc.Deleting != ""}
}

// readInstancePatch reads the lock fields a patch of the instance document
// sets.
func readInstancePatch(body json.RawMessage) *instanceChange {
	var patch struct {
		Operations []struct {
			Op    string          `json:"op"`
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		} `json:"operations"`
	}
	ch := &instanceChange{kind: "patch"}
	if json.Unmarshal(body, &patch) != nil {
		return ch
	}
	for _, o := range patch.Operations {
		if o.Op != "set" && o.Op != "replace" && o.Op != "add" {
			continue
		}
		switch o.Path {
		case "/lockToken":
			var token string
			if json.Unmarshal(o.Value, &token) == nil {
				ch.lockToken = &token
			}
		case "/lockedUntil":
			var until int64
			if json.Unmarshal(o.Value, &until) == nil {
				ch.lockedUntil = &until
			}
		case "/deleting":
			var intent string
			ch.marked = json.Unmarshal(o.Value, &intent) == nil && intent != ""
		}
	}
	return ch
}

func readClaimedCompletion(body json.RawMessage) (claimedCompletion, bool) {
	var doc struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		LockToken   string `json:"lockToken"`
		LockedUntil int64  `json:"lockedUntil"`
		Attempts    int    `json:"attempts"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Type != "msg" || !strings.HasPrefix(doc.LockToken, chainPrefix) {
		return claimedCompletion{}, false
	}
	return claimedCompletion{id: doc.ID, token: doc.LockToken, lockedUntil: doc.LockedUntil, attempts: doc.Attempts}, true
}

// chainOutcome is what the replay found.
type chainOutcome struct {
	chains, open, claims int
	openedByAcks         int // chains a worker ack opened (a patch of the instance's lock)
	ends                 map[string]int
	takenFromLive        int            // chains taken while their writer was up (after they expired)
	lapsed               int            // of those, taken after a pause, a fault or a clock jump (lapsed)
	own, others          map[string]int // writer → chains it ended itself, chains others took while it was up
	leftClaimed, excused int
	read, unread         int // chained turns acked by their writer that queried the partition, and that did not
	unreadExcused        int // ... of which late ones a stall of the writer or a large turn excused
	violations           []Violation
	// longestHold is, by partition, the most chains one writer kept in a
	// row, each written by the ack of the one before.
	longestHold map[string]int
}

// replayed replays the writes once, per partition in the account's order.
func (c *chainedTurns) replayed() *chainOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outcome != nil {
		return c.outcome
	}
	out := &chainOutcome{ends: map[string]int{}, own: map[string]int{}, others: map[string]int{}, longestHold: map[string]int{}}
	pks := make([]string, 0, len(c.writes))
	for pk := range c.writes {
		pks = append(pks, pk)
	}
	sort.Strings(pks)
	for _, pk := range pks {
		writes := slices.Clone(c.writes[pk])
		sort.SliceStable(writes, func(i, j int) bool {
			if writes[i].lsn != writes[j].lsn {
				return writes[i].lsn < writes[j].lsn
			}
			return writes[i].arrival < writes[j].arrival
		})
		p := &partitionChains{c: c, out: out, pk: pk, byToken: map[string]*chainRecord{}}
		for _, w := range writes {
			p.apply(w)
		}
		if p.open != nil {
			out.open++
		}
		p.unopened()
	}
	c.outcome = out
	return out
}

// chainRecord is one chain, as the replay follows it.
type chainRecord struct {
	instance, token, writer string
	until                   int64             // the instance's lock expiry as last written
	claimUntil              int64             // the expiry the commit wrote, which its claims carry
	claims                  map[string]string // claimed completion → the node that wrote it
	touched                 map[string]bool   // documents written while it was open, by the batch that ended it too
	end                     string            // "" while open
	lastRead                time.Time         // the hold's last read of the partition, as of the chain's commit
	staged                  bool              // its chained turn staged parts before its commit: a large turn
	lastClaim               time.Time         // when the last completion claimed with it was reported
	began                   time.Time         // when its commit was reported
	hold                    int               // its place in its hold: 1 for a hold's first chain
}

// partitionChains replays one partition's writes; called with c.mu held.
type partitionChains struct {
	c       *chainedTurns
	out     *chainOutcome
	pk      string
	open    *chainRecord // the chain the instance document holds now
	byToken map[string]*chainRecord
	ended   *chainRecord // the chain the write being applied ended by its writer's ack, if any
	// early are completions claimed with a chain no instance document
	// carried yet, by token: a worker ack that opens a chain locks the
	// instance in its own batch, and a sibling's claim may land first, or
	// for good when the opening was refused (then its writer releases it).
	early map[string]map[string]earlyClaim
}

// earlyClaim is a completion claimed with a chain before the chain opened.
type earlyClaim struct {
	w  chainWrite
	cl claimedCompletion
}

func (p *partitionChains) apply(w chainWrite) {
	p.ended = nil
	for _, id := range w.touched {
		for _, claims := range p.early {
			delete(claims, id) // released (a refused opening's) or consumed
		}
	}
	if p.open != nil {
		for _, id := range w.touched {
			p.open.touched[id] = true
		}
		if w.inst == nil && w.staged == p.open.token && w.node == p.open.writer {
			p.open.staged = true
		}
	}
	if w.inst != nil {
		p.instance(w)
	}
	for _, cl := range w.claims {
		p.claim(w, cl)
	}
}

// instance follows a write of the instance document.
func (p *partitionChains) instance(w chainWrite) {
	ch := w.inst
	if o := p.open; o != nil {
		switch {
		case ch.kind == "delete":
			p.end(o, w, chainDeleted)
		case ch.kind == "write" && ch.lastAck == o.token:
			p.acked(o, w)
		case ch.kind == "write" && *ch.lockToken == o.token:
			o.until = *ch.lockedUntil
		case ch.kind == "write":
			p.taken(o, w) // a write the chain's ETag did not fence
		case ch.lockToken == nil:
			if ch.lockedUntil != nil {
				o.until = *ch.lockedUntil // a renewal; other patches (a deletion's mark) leave the lock
			}
		case *ch.lockToken == "":
			p.end(o, w, chainReleased)
		case *ch.lockToken != o.token:
			p.taken(o, w)
		}
	}
	if p.open == nil && opensChain(ch) {
		o := &chainRecord{instance: ch.instance, token: *ch.lockToken, writer: w.node, until: *ch.lockedUntil,
			claimUntil: *ch.lockedUntil, claims: map[string]string{}, touched: map[string]bool{}, lastRead: w.at, began: w.at, hold: 1}
		if prev := p.ended; prev != nil && prev.writer == w.node && ch.lastAck == prev.token {
			o.lastRead = prev.lastRead // the hold goes on: the chained turn that chained again
			o.hold = prev.hold + 1
		}
		p.out.longestHold[p.pk] = max(p.out.longestHold[p.pk], o.hold)
		p.open, p.byToken[o.token] = o, o
		p.out.chains++
		if ch.kind == "patch" {
			p.out.openedByAcks++
		}
		for _, e := range p.early[o.token] {
			p.claimInto(o, e.w, e.cl) // a sibling's, landed before the opening
		}
		delete(p.early, o.token)
	}
}

// opensChain says a write of the instance document keeps it for a chain: a
// commit's (the whole document) or a worker ack's (a patch of its lock:
// the ack opened the chain, the instance was free, so its messages count as
// read then, as the provider counts them).
func opensChain(ch *instanceChange) bool {
	return (ch.kind == "write" || ch.kind == "patch") && ch.lockToken != nil && ch.lockedUntil != nil && strings.HasPrefix(*ch.lockToken, chainPrefix)
}

// acked ends a chain by an ack with its token: its writer's chained turn.
func (p *partitionChains) acked(o *chainRecord, w chainWrite) {
	if w.node != o.writer {
		p.violate(invChainTakenEarly, o, fmt.Sprintf("chain %s of %s was acked by %s with the chain's token (lsn %d)", o.token, o.writer, w.node, w.lsn))
		p.taken(o, w)
		return
	}
	p.readOthers(o, w)
	p.end(o, w, chainByWriter)
	p.ended = o
}

// readOthers follows the hold's reads of the partition up to w, the
// writer's ack of o's chained turn: a turn that did not read is acked
// within the writer's poll interval of the hold's last read, give or take
// readSlack. A pause of the writer, or a fault drawn for one of its
// requests to the partition, during the turn excuses a later ack (the
// turn's requests waited, or were tried again), and so does a large turn,
// which stages parts before its commit: its processing and requests are
// bounded by nothing this check knows. The times are the wall times of
// the reports, not the account's clock: the simulated clock jumps ahead
// (clock.go), which moves the account's and every node's clock and so
// makes a chained turn read rather than skip, but would stretch a gap the
// writer did not wait. Each read is reported before its node gets the
// answer, so before the ack it led to.
func (p *partitionChains) readOthers(o *chainRecord, w chainWrite) {
	read := false
	for _, r := range p.c.reads[o.token] {
		if r.node == o.writer && !r.at.After(w.at) {
			read = true
			if r.at.After(o.lastRead) {
				o.lastRead = r.at
			}
		}
	}
	if read {
		p.out.read++
		return
	}
	p.out.unread++
	poll := p.c.nodes.poll(o.writer)
	gap := w.at.Sub(o.lastRead)
	bound := poll + p.c.readSlack(poll)
	if gap <= bound {
		return
	}
	if o.staged || p.c.nodes.stalled(o.writer, p.pk, turnBegan(o), w.at) || gap <= bound+p.c.nodes.slowerBy(o.lastRead, w.at, bound) {
		p.out.unreadExcused++
		return
	}
	p.violate(invChainReadsOthers, o, fmt.Sprintf("%s acked the chained turn of chain %s (lsn %d) without reading the partition %s after the hold's last read; its poll interval is %s",
		o.writer, o.token, w.lsn, gap.Round(time.Millisecond), poll))
}

// slowerBy is what bound d lacks for from..to on a host that was measured
// slower then than at the run's start: the bound's timers and the turn's
// replay alike stretch with the host.
func (n chainNodes) slowerBy(from, to time.Time, d time.Duration) time.Duration {
	if n.slower == nil {
		return 0
	}
	return n.slower(from, to, d)
}

// turnBegan is the earliest o's chained turn may have been handed over: a
// stall before then delayed the completions, which the writer's rule
// already weighs (it reads once a poll interval has passed when it hands
// the turn over), not the turn.
func turnBegan(o *chainRecord) time.Time {
	if o.lastClaim.After(o.lastRead) {
		return o.lastClaim
	}
	return o.lastRead
}

// readSlack is what a chained turn may add to its writer's poll interval
// between the last read and its ack: the turn itself (the wait for a
// fetch, which gives the turn back after a poll interval; the runtime's
// replay, c.turn; the ack's request) and the nodes' clock skew. The
// writer's own clock decides, so its skew cancels out; it is counted all
// the same, as margin.
func (c *chainedTurns) readSlack(poll time.Duration) time.Duration {
	return 2*poll + c.skew + c.turn
}

// taken ends a chain by another lock: legal once the chain expired, or
// when its writer is gone.
func (p *partitionChains) taken(o *chainRecord, w chainWrite) {
	if !p.c.nodes.gone(o.writer, w.at) {
		p.out.takenFromLive++
		if p.lapsed(o, w.at) {
			p.out.lapsed++
		} else {
			p.out.others[o.writer]++
		}
		if early := o.until - w.nowMs; w.node != o.writer && early > p.c.skew.Milliseconds() {
			p.violate(invChainTakenEarly, o, fmt.Sprintf("%s took the instance (lsn %d) %d ms before chain %s of %s, which was up, expired (at %d on the account's clock)",
				w.node, w.lsn, early, o.token, o.writer, o.until))
		}
	}
	p.close(o, chainTakenOver)
}

// lapsed says o may have expired by design before at: since its commit,
// a renewal or a give-back of its writer met a fault or lost its answer,
// the writer was paused, or the clock jumped.
func (p *partitionChains) lapsed(o *chainRecord, at time.Time) bool {
	n := p.c.nodes
	return n.writeFaulted != nil && n.writeFaulted(o.writer, p.pk, instanceDocument, o.began, at) ||
		n.paused != nil && n.paused(o.writer, o.began, at) || n.jumped != nil && n.jumped(o.began, at)
}

// end ends a chain by its writer's batch (or a deletion); the completions
// claimed with it that the chained turn's batches did not touch are left
// claimed.
func (p *partitionChains) end(o *chainRecord, w chainWrite, how string) {
	p.close(o, how)
	if how == chainDeleted {
		return
	}
	if w.node == o.writer {
		p.out.own[o.writer]++
	} else if !p.c.nodes.gone(o.writer, w.at) {
		p.out.others[o.writer]++
	}
	ids := make([]string, 0, len(o.claims))
	for id := range o.claims {
		if !o.touched[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		p.left(o, id, o.claims[id], w, fmt.Sprintf("%s ended the chain %s (lsn %d) without consuming or unlocking it", w.node, how, w.lsn))
	}
}

func (p *partitionChains) close(o *chainRecord, how string) {
	o.end = how
	p.open = nil
	p.out.ends[how]++
}

// claim follows a completion written claimed with a chain.
func (p *partitionChains) claim(w chainWrite, cl claimedCompletion) {
	p.out.claims++
	o := p.byToken[cl.token]
	if o == nil {
		if p.early == nil {
			p.early = map[string]map[string]earlyClaim{}
		}
		if p.early[cl.token] == nil {
			p.early[cl.token] = map[string]earlyClaim{}
		}
		p.early[cl.token][cl.id] = earlyClaim{w: w, cl: cl} // the chain may open later, or be refused and release it
		return
	}
	p.claimInto(o, w, cl)
}

// claimInto follows a completion written claimed with chain o.
func (p *partitionChains) claimInto(o *chainRecord, w chainWrite, cl claimedCompletion) {
	if w.node != o.writer || cl.lockedUntil != o.claimUntil || cl.attempts != 1 {
		p.violate(invChainClaims, o, fmt.Sprintf("%s wrote completion %s claimed with chain %s of %s (lsn %d) with expiry %d and %d attempts; the chain's expiry is %d",
			w.node, cl.id, o.token, o.writer, w.lsn, cl.lockedUntil, cl.attempts, o.claimUntil))
	}
	switch o.end {
	case "":
		o.claims[cl.id] = w.node
		o.lastClaim = w.at
	case chainByWriter, chainReleased:
		if !o.touched[cl.id] {
			p.left(o, cl.id, w.node, w, fmt.Sprintf("it was written (lsn %d) after the chain ended %s", w.lsn, o.end))
		}
	}
	// A chain taken over or deleted hides nothing: its lock expired, or its
	// partition is gone.
}

// unopened checks the completions claimed with a chain that never opened
// (its opening ack could not lock the instance): its writer released each,
// unless it is gone or never learnt it wrote it; any other was hidden until
// its expiry.
func (p *partitionChains) unopened() {
	for token, claims := range p.early {
		for id, e := range claims {
			p.out.leftClaimed++
			if p.c.lost[stampKey{p.pk, id}] || p.c.nodes.gone(e.w.node, e.w.at) {
				p.out.excused++
				continue
			}
			p.out.violations = append(p.out.violations, Violation{Invariant: invChainClaims,
				Detail: fmt.Sprintf("%s wrote completion %s of partition %s claimed with %s (lsn %d), a token no instance document carried, and never released it", e.w.node, id, p.pk, token, e.w.lsn)})
		}
	}
}

// left notes a completion left claimed with an ended chain, hidden until
// its expiry; excused when its writer is gone or never got its answer.
func (p *partitionChains) left(o *chainRecord, id, node string, w chainWrite, how string) {
	p.out.leftClaimed++
	if p.c.lost[stampKey{p.pk, id}] || p.c.nodes.gone(node, w.at) {
		p.out.excused++
		return
	}
	p.violate(invChainClaims, o, fmt.Sprintf("completion %s, written by %s claimed with chain %s, was left claimed until %d: %s", id, node, o.token, o.claimUntil, how))
}

func (p *partitionChains) violate(invariant string, o *chainRecord, detail string) {
	p.out.violations = append(p.out.violations, Violation{Invariant: invariant, Instance: o.instance, Detail: detail})
}

// check reports what the replay found broken, and the live writers that
// left most of their chains to expire.
func (c *chainedTurns) check(v *violations, describe func(node string) string) {
	out := c.replayed()
	for _, x := range out.violations {
		v.add(x.Invariant, x.Instance, x.Detail)
	}
	for _, w := range writersLeavingMost(out.own, out.others, chainMinSample, chainMaxShare) {
		v.add(invChainEndedByWriter, "", fmt.Sprintf("%s kept %d instances locked for its activities' completions and ended %d of those chains itself: %d were left to expire while it was up (%s)",
			w, out.own[w]+out.others[w], out.own[w], out.others[w], describe(w)))
	}
}

// longestHold is the most chains one writer kept in a row on partition
// pk.
func (c *chainedTurns) longestHold(pk string) int { return c.replayed().longestHold[pk] }

// summary is the counts, for the report: so a seed's log shows the path
// ran and was checked.
func (c *chainedTurns) summary() string {
	out := c.replayed()
	checked := 0
	for w, n := range out.own {
		if n+out.others[w] >= chainMinSample {
			checked++
		}
	}
	return fmt.Sprintf("chains=%d opened-by-acks=%d by-writer=%d released=%d taken-over=%d open=%d claimed-completions=%d taken-from-live=%d (lapsed %d) deleted=%d left-claimed=%d excused=%d writers-checked=%d read=%d unread=%d unread-excused=%d",
		out.chains, out.openedByAcks, out.ends[chainByWriter], out.ends[chainReleased], out.ends[chainTakenOver], out.open, out.claims,
		out.takenFromLive, out.lapsed, out.ends[chainDeleted], out.leftClaimed, out.excused, checked, out.read, out.unread, out.unreadExcused)
}
