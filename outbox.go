package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// The relay delivers outbox documents (the effects a commit wrote for other
// partitions and what overflowed its batch): right after the commit that
// wrote them, in the ack's own request, and, for those an error or a crash
// left behind, from the reconciler. The guarantees (ARCHITECTURE.md, Outbox):
//
//   - Exactly once. Every delivered document has a deterministic id, so
//     delivering it again is a 409. A batch of entries into the outbox's
//     own partition applies once with the progress past it
//     (relaybatch.go). A queue item an outbox delivered on its own carries
//     `relayed`; whoever consumes it (a worker's ack, a turn's ack) replaces
//     it with a consumedMarker of the same id instead of deleting it, so a
//     relay that delivers it again after it was consumed also gets a 409.
//     Markers expire after consumedMarkerTTL, far longer than an outbox
//     waits for a live process to take it over.
//   - One relay at a time. An outbox names its owner (a lease token) and
//     the owner's last sign of life (beatAt), renewed while it delivers; no
//     relay takes an outbox whose beat is younger than OutboxMinAge, and
//     taking one is a PATCH conditioned on its ETag. The owner records its
//     progress (delivered) with each beat and when it stops, so a relay that
//     takes over goes on from there.
//   - Order. An instance's outboxes are delivered in commit order (their
//     rev): an ack that commits an outbox while an older one of its
//     instance is pending (known from this process's relay, or seen by the
//     fetch's load) queues behind it; so does the reconciler.
//   - No stall. The reconciler goes on past an outbox it cannot deliver,
//     and always runs the deletion pass.

// consumedMarkerTTL is how long a consumed relayed item's marker lives, in
// seconds: it only has to outlive the outbox that delivered the item, which
// a live process takes over within OutboxMinAge and a reconcile interval.
const consumedMarkerTTL = 24 * 60 * 60

// relay is the provider's outbox delivery: the chains of outboxes this
// process is delivering, per instance partition, and the goroutine that
// retries them, deletes delivered outboxes and runs the reconciler.
type relay struct {
	p    *CosmosProvider
	kick chan struct{}

	mu      sync.Mutex
	chains  map[string]*outboxChain // by partition key
	cleanup []*pendingOutbox        // delivered, to be deleted
	deleted map[string]bool         // ids in cleanup: delivered, though they still exist
}

// outboxChain is an instance's pending outboxes in commit order. One
// goroutine at a time works a chain (busy).
type outboxChain struct {
	items    []*pendingOutbox
	busy     bool
	retryAt  int64 // ms, provider clock: when a stopped chain is tried again
	failures int
}

// pendingOutbox is one outbox as this process knows it.
type pendingOutbox struct {
	id, pk  string
	rev     uint64
	created int64
	parts   []outboxPartRef // for deleting; set once the document is known
	// doc is the document when known: the commit's own, or as read or
	// taken over. nil means read it first.
	doc *outboxDoc
	// token is this process's lease when it holds the outbox.
	token string
	// etag, owner and beat are as last seen, for taking it over.
	etag  ETag
	owner string
	beat  int64
	// committedHere marks an outbox this process's ack committed: its
	// chain is kept until it is delivered, by whomever, so this process's
	// later turns of the instance queue behind it.
	committedHere bool
	// self: the outbox writes into its own partition (outboxDoc.Self).
	self bool
}

// outboxRef is an outbox as a query sees it, without its entries.
type outboxRef struct {
	ID        string `json:"id"`
	PK        string `json:"pk"`
	Rev       uint64 `json:"rev"`
	CreatedAt int64  `json:"createdAt"`
	Owner     string `json:"owner"`
	BeatAt    int64  `json:"beatAt"`
	Self      bool   `json:"self"`
	ETag      ETag   `json:"_etag"`
}

func (o outboxRef) pending() *pendingOutbox {
	return &pendingOutbox{id: o.ID, pk: o.PK, rev: o.Rev, created: o.CreatedAt, etag: o.ETag, owner: o.Owner, beat: o.BeatAt, self: o.Self}
}

// deliveryResult is how far one attempt at an outbox got.
type deliveryResult int

const (
	resultDelivered deliveryResult = iota // every entry is in place (or the outbox is gone)
	resultHeld                            // the outbox is this process's to deliver
	resultBlocked                         // another live relay holds it: wait
	resultFailed                          // an entry or a write failed: try again later
)

func newRelay(p *CosmosProvider) *relay {
	return &relay{p: p, kick: make(chan struct{}, 1), chains: map[string]*outboxChain{}, deleted: map[string]bool{}}
}

// committed takes an outbox an ack just committed, after the older outboxes
// of its instance the fetch's load saw, and delivers the instance's chain up
// to it, in the ack's request, so the effects are in place when the ack
// returns; unless another goroutine is working the chain, which goes on to
// it. known says doc is what was committed; otherwise (an earlier try of the
// ack committed) the stored document is read first.
func (r *relay) committed(ctx context.Context, pk string, older []outboxRef, doc *outboxDoc, known bool) {
	own := &pendingOutbox{id: doc.ID, pk: pk, rev: doc.Rev, created: doc.CreatedAt, parts: doc.Parts,
		token: doc.Owner, owner: doc.Owner, beat: doc.BeatAt, committedHere: true, self: doc.Self}
	if known {
		own.doc = doc
	}
	if !r.enlist(pk, older, own) && !r.awaitOrClaim(ctx, pk, own) {
		return
	}
	if _, err := r.work(ctx, pk, own); err != nil {
		r.p.log.Debug("cdb: outbox delivery stopped; the relay will go on", "outbox", doc.ID, "error", err)
	}
}

// enlist adds outboxes to pk's chain in commit order, and claims the chain
// for the caller unless another goroutine works it.
func (r *relay) enlist(pk string, older []outboxRef, own *pendingOutbox) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := r.chains[pk]
	if ch == nil {
		ch = &outboxChain{}
		r.chains[pk] = ch
	}
	for _, o := range older {
		if o.Rev > 0 && o.ID != own.id && !r.deleted[o.ID] && !ch.has(o.ID) {
			ch.insert(o.pending())
		}
	}
	ch.insert(own)
	if ch.busy {
		return false
	}
	ch.busy = true
	return true
}

// awaitOrClaim waits, when another goroutine works pk's chain (the
// reconciler, say, which took the outbox for a stale one while the ack was
// slow), until that goroutine has delivered own, so the ack still returns
// with its effects in place; should it let go of the chain first, the
// caller claims the chain (true) and delivers own itself. It gives up when
// ctx ends: the relay delivers own later.
func (r *relay) awaitOrClaim(ctx context.Context, pk string, own *pendingOutbox) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		ch := r.chains[pk]
		queued := ch != nil && ch.holds(own)
		claimed := queued && !ch.busy
		if claimed {
			ch.busy = true
		}
		r.mu.Unlock()
		if !queued || claimed {
			return claimed // delivered (or dropped) by the other goroutine, or ours now
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// holds says o itself (not another copy of its outbox) is in the chain.
func (ch *outboxChain) holds(o *pendingOutbox) bool {
	for _, item := range ch.items {
		if item == o {
			return true
		}
	}
	return false
}

func (ch *outboxChain) has(id string) bool {
	for _, o := range ch.items {
		if o.id == id {
			return true
		}
	}
	return false
}

// insert keeps the chain in commit order.
func (ch *outboxChain) insert(o *pendingOutbox) {
	i := sort.Search(len(ch.items), func(i int) bool { return o.before(ch.items[i]) })
	ch.items = append(ch.items, nil)
	copy(ch.items[i+1:], ch.items[i:])
	ch.items[i] = o
}

func (o *pendingOutbox) before(other *pendingOutbox) bool {
	if o.rev != other.rev {
		return o.rev < other.rev
	}
	return o.created < other.created
}

func (ch *outboxChain) holdsCommittedHere() bool {
	for _, o := range ch.items {
		if o.committedHere {
			return true
		}
	}
	return false
}

// work delivers pk's chain in order, up to and including until (all of it
// when until is nil), then releases the chain. The caller has claimed it.
// resultDelivered means it got that far.
func (r *relay) work(ctx context.Context, pk string, until *pendingOutbox) (deliveryResult, error) {
	for {
		head := r.head(pk)
		if head == nil {
			r.release(pk, resultDelivered)
			return resultDelivered, nil
		}
		res, err := r.advance(ctx, head)
		if res != resultDelivered {
			r.release(pk, res)
			return res, err
		}
		r.delivered(pk, head)
		if head == until {
			r.release(pk, resultDelivered)
			return resultDelivered, nil
		}
	}
}

// deliverBeforeFetch delivers pk's pending outboxes (this process's chain,
// and those a fetch's load saw) when one of them writes into pk itself, so
// that a fetch hands over the instance's messages only once every message
// its commits wrote is in the queue: a batch without an overflowed
// ContinueAsNew message would read as the finished execution's, and one
// without an overflowed event would put later messages before it. It waits
// for another goroutine of this process working the chain, and takes over
// an outbox whose relay shows no life; it reports false when one is still
// pending (a live relay of another process holds it, or a delivery
// failed). The caller checks pendingSelf first.
func (r *relay) deliverBeforeFetch(ctx context.Context, pk string, seen []outboxRef) (bool, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var res deliveryResult
	var err error
	// A second try when blocked: what this process knew of an outbox may be
	// stale (another relay took it over, and has since stopped); the try
	// reads it again.
	for try := 0; try < 2 && (try == 0 || res == resultBlocked); try++ {
		for !r.claimWithSeen(pk, seen) {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-tick.C:
			}
		}
		res, err = r.work(ctx, pk, nil)
	}
	return res == resultDelivered, err
}

// pendingSelf says an outbox that writes into pk is pending: in this
// process's chain, or among those a load saw and this process has not
// delivered since.
func (r *relay) pendingSelf(pk string, seen []outboxRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range seen {
		if o.Self && !r.deleted[o.ID] {
			return true
		}
	}
	if ch := r.chains[pk]; ch != nil {
		for _, o := range ch.items {
			if o.self {
				return true
			}
		}
	}
	return false
}

// claimWithSeen adds the outboxes a load saw to pk's chain, in commit
// order, and claims the chain unless another goroutine works it.
func (r *relay) claimWithSeen(pk string, seen []outboxRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := r.chains[pk]
	if ch == nil {
		ch = &outboxChain{}
		r.chains[pk] = ch
	}
	if ch.busy {
		return false
	}
	for _, o := range seen {
		if o.Rev > 0 && !r.deleted[o.ID] && !ch.has(o.ID) {
			ch.insert(o.pending())
		}
	}
	ch.busy = true
	return true
}

func (r *relay) head(pk string) *pendingOutbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.chains[pk]; ch != nil && len(ch.items) > 0 {
		return ch.items[0]
	}
	return nil
}

// delivered takes a delivered outbox off its chain and queues its deletion.
func (r *relay) delivered(pk string, o *pendingOutbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.chains[pk]; ch != nil {
		for i, item := range ch.items {
			if item == o {
				ch.items = append(ch.items[:i:i], ch.items[i+1:]...)
				ch.failures = 0
				break
			}
		}
	}
	if o.doc != nil || o.token != "" {
		r.cleanup = append(r.cleanup, o)
		r.deleted[o.id] = true
	}
}

// release ends a goroutine's work on a chain: an empty chain goes away; a
// stopped one is tried again later, unless nothing this process committed
// depends on it (the reconciler finds it again); one left for the relay
// goroutine wakes it.
func (r *relay) release(pk string, res deliveryResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := r.chains[pk]
	if ch == nil {
		return
	}
	ch.busy = false
	switch {
	case len(ch.items) == 0:
		delete(r.chains, pk)
	case res == resultDelivered:
		r.wake() // an ack delivered up to its own outbox; the relay goes on
	case !ch.holdsCommittedHere():
		delete(r.chains, pk)
	case res == resultBlocked:
		ch.retryAt = r.p.nowMs() + r.retryDelay().Milliseconds()
	default:
		ch.failures++
		ch.retryAt = r.p.nowMs() + r.backoff(ch.failures).Milliseconds()
	}
}

func (r *relay) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// retryDelay is how often a chain waiting for another relay looks again.
func (r *relay) retryDelay() time.Duration {
	return min(max(r.p.cfg.OutboxMinAge/4, 10*time.Millisecond), time.Second)
}

// backoff is the wait after the n-th failure in a row of a chain.
func (r *relay) backoff(n int) time.Duration {
	d := 250 * time.Millisecond << min(n-1, 8)
	return min(d, r.p.cfg.ReconcileInterval)
}

// advance delivers one outbox: the caller's own goes straight on; another
// relay's is taken over first, if its owner shows no life.
func (r *relay) advance(ctx context.Context, o *pendingOutbox) (deliveryResult, error) {
	if o.doc == nil || o.token == "" || o.owner != o.token {
		res, err := r.acquire(ctx, o)
		if res != resultHeld {
			return res, err
		}
	}
	return r.deliver(ctx, o)
}

// acquire makes o this process's: it reads o when needed (gone means
// delivered), and takes it over with a PATCH conditioned on its ETag when
// its owner's beat is older than OutboxMinAge.
func (r *relay) acquire(ctx context.Context, o *pendingOutbox) (deliveryResult, error) {
	if o.etag == "" {
		doc, err := r.read(ctx, o)
		if IsNotFound(err) {
			return resultDelivered, nil
		}
		if err != nil {
			return resultFailed, err
		}
		r.learn(o, doc)
	}
	if o.token != "" && o.owner == o.token {
		return resultHeld, nil // ours all along (an earlier try of the ack committed it)
	}
	if o.owner != "" && r.p.nowMs()-o.beat < r.p.cfg.OutboxMinAge.Milliseconds() {
		o.etag = "" // look again next time
		return resultBlocked, nil
	}
	token := newLockToken("relay_")
	now := r.p.nowMs()
	var ops PatchOperations
	ops.AppendSet("/owner", token)
	ops.AppendSet("/beatAt", now)
	etag := o.etag
	resp, err := r.p.container.PatchItem(ctx, NewPartitionKeyString(o.pk), o.id, ops, &ItemOptions{IfMatch: &etag, EnableContentResponseOnWrite: true})
	switch {
	case IsNotFound(err):
		return resultDelivered, nil
	case IsPreconditionFailed(err):
		o.etag = "" // another relay moved first
		return resultBlocked, nil
	case err != nil:
		return resultFailed, fmt.Errorf("take over outbox %s: %w", o.id, err)
	}
	var doc outboxDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return resultFailed, fmt.Errorf("decode outbox %s: %w", o.id, err)
	}
	doc.ETag = resp.ETag
	r.learn(o, &doc)
	o.token = token
	r.p.log.Info("cdb: took over an outbox its relay left", "outbox", o.id, "delivered", doc.Delivered)
	return resultHeld, nil
}

// learn takes what the stored document says into o. The fields only the
// goroutine working o's chain uses are set as they are; rev and created
// order the chain, which an ack's enlist reads at any time, and self tells
// a fetch to deliver it first, so they change under the relay's lock.
func (r *relay) learn(o *pendingOutbox, doc *outboxDoc) {
	o.doc, o.etag, o.owner, o.beat, o.parts = doc, doc.ETag, doc.Owner, doc.BeatAt, doc.Parts
	r.mu.Lock()
	defer r.mu.Unlock()
	o.rev, o.created, o.self = doc.Rev, doc.CreatedAt, doc.Self
}

func (r *relay) read(ctx context.Context, o *pendingOutbox) (*outboxDoc, error) {
	resp, err := r.p.container.ReadItem(ctx, NewPartitionKeyString(o.pk), o.id, nil)
	if err != nil {
		return nil, err
	}
	var doc outboxDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return nil, fmt.Errorf("decode outbox %s: %w", o.id, err)
	}
	doc.ETag = resp.ETag
	return &doc, nil
}

// deliver writes o's entries from its recorded progress on: those into its
// own partition a batch at a time with the progress (relaybatch.go), the
// others one at a time, renewing its beat (and recording progress) every
// third of OutboxMinAge; it stops when another relay took o over
// meanwhile.
func (r *relay) deliver(ctx context.Context, o *pendingOutbox) (deliveryResult, error) {
	doc := o.doc
	entries := outboxEntries{r: r, doc: doc}
	total := doc.total()
	renewEvery := max(r.p.cfg.OutboxMinAge.Milliseconds()/3, 1)
	shells := map[string]bool{}
	for i := doc.Delivered; i < total; i = doc.Delivered {
		run, err := r.nextRun(ctx, &entries, o.pk, i, total)
		if err != nil {
			r.record(ctx, o, i)
			return resultFailed, fmt.Errorf("deliver outbox %s entry %d: %w", o.id, i, err)
		}
		if len(run) > 0 {
			if res, err := r.deliverRun(ctx, o, i, run, shells); res != resultHeld {
				return res, err
			}
			continue
		}
		if r.p.nowMs()-o.beat >= renewEvery {
			if res, err := r.renew(ctx, o, i); res != resultHeld {
				return res, err
			}
		}
		e, err := entries.at(ctx, i)
		if err == nil {
			err = r.deliverEntry(ctx, e, shells)
		}
		if err != nil {
			r.record(ctx, o, i)
			return resultFailed, fmt.Errorf("deliver outbox %s entry %d: %w", o.id, i, err)
		}
		doc.Delivered = i + 1
	}
	r.p.tel.outboxDelivered(ctx)
	r.p.orchSignal.notify()
	r.p.workSignal.notify()
	return resultDelivered, nil
}

// renew is the owner's sign of life, with its progress; it fails when
// another relay took the outbox over.
func (r *relay) renew(ctx context.Context, o *pendingOutbox, delivered int) (deliveryResult, error) {
	now := r.p.nowMs()
	var ops PatchOperations
	ops.SetCondition(ownedBy(o.token))
	ops.AppendSet("/beatAt", now)
	ops.AppendSet("/delivered", delivered)
	_, err := r.p.container.PatchItem(ctx, NewPartitionKeyString(o.pk), o.id, ops, nil)
	switch {
	case IsNotFound(err):
		return resultDelivered, nil // another relay finished it
	case IsPreconditionFailed(err):
		o.token, o.etag = "", ""
		return resultBlocked, nil
	case err != nil:
		return resultFailed, fmt.Errorf("renew outbox %s: %w", o.id, err)
	}
	o.beat = now
	return resultHeld, nil
}

// record notes how far a stopped delivery got, for whoever goes on. It is
// best effort: a relay that goes on from an earlier point meets 409s.
func (r *relay) record(ctx context.Context, o *pendingOutbox, delivered int) {
	var ops PatchOperations
	ops.SetCondition(ownedBy(o.token))
	ops.AppendSet("/delivered", delivered)
	if _, err := r.p.container.PatchItem(ctx, NewPartitionKeyString(o.pk), o.id, ops, nil); err != nil {
		r.p.log.Debug("cdb: could not record outbox progress", "outbox", o.id, "error", err)
	}
}

// ownedBy is the PATCH condition "this relay still owns the outbox". Lease
// tokens are hex, so inlining one is safe.
func ownedBy(token string) string {
	return "from c where c.owner = '" + token + "'"
}

// total is the number of entries of an outbox, inline and staged.
func (d *outboxDoc) total() int {
	n := len(d.Entries)
	for _, p := range d.Parts {
		n += p.Entries
	}
	return n
}

// outboxEntries reads an outbox's entries by index, loading its staged parts
// one at a time as delivery reaches them.
type outboxEntries struct {
	r      *relay
	doc    *outboxDoc
	part   int // index in doc.Parts of loaded, -1 for none
	first  int // entry index of loaded[0]
	loaded []outboxEntry
}

func (s *outboxEntries) at(ctx context.Context, i int) (outboxEntry, error) {
	if i < len(s.doc.Entries) {
		return s.doc.Entries[i], nil
	}
	if s.loaded != nil && i >= s.first && i < s.first+len(s.loaded) {
		return s.loaded[i-s.first], nil
	}
	first := len(s.doc.Entries)
	for _, ref := range s.doc.Parts {
		if i < first+ref.Entries {
			part, err := s.r.readPart(ctx, s.doc.PK, ref.ID)
			if err != nil {
				return outboxEntry{}, err
			}
			if len(part.Entries) != ref.Entries {
				return outboxEntry{}, fmt.Errorf("outbox part %s holds %d entries, not %d", ref.ID, len(part.Entries), ref.Entries)
			}
			s.first, s.loaded = first, part.Entries
			return s.loaded[i-first], nil
		}
		first += ref.Entries
	}
	return outboxEntry{}, fmt.Errorf("outbox %s has no entry %d", s.doc.ID, i)
}

func (r *relay) readPart(ctx context.Context, pk, id string) (*outboxPart, error) {
	resp, err := r.p.container.ReadItem(ctx, NewPartitionKeyString(pk), id, nil)
	if err != nil {
		return nil, fmt.Errorf("read outbox part %s: %w", id, err)
	}
	var part outboxPart
	if err := json.Unmarshal(resp.Value, &part); err != nil {
		return nil, fmt.Errorf("decode outbox part %s: %w", id, err)
	}
	return &part, nil
}

// deliverEntry writes one entry. shells holds the partitions whose
// instance document this pass of the outbox created: a start delivered
// beside an instance document it did not create is settled as a client's
// start is (settleStart), so a deletion still under way in that partition
// cannot sweep it unseen.
func (r *relay) deliverEntry(ctx context.Context, e outboxEntry, shells map[string]bool) error {
	if err := r.writeEntry(ctx, e, shells); err != nil {
		return err
	}
	// Rung as each entry lands, not once an outbox is done: a large
	// outbox's delivery takes seconds, one cut short (taken over, failed)
	// never gets to the end, and a deletion delivers entries too. Rings
	// within a gap go together.
	if e.Role != entryShell {
		r.p.bell.ring(queueOrchestrator, r.p.now())
		r.p.bell.ring(queueWorker, r.p.now())
	}
	return nil
}

// writeEntry is deliverEntry's write.
func (r *relay) writeEntry(ctx context.Context, e outboxEntry, shells map[string]bool) error {
	pk := NewPartitionKeyString(e.PK)
	if e.Upsert {
		_, err := r.p.container.UpsertItem(ctx, pk, e.Doc, nil)
		return err
	}
	_, err := r.p.container.CreateItem(ctx, pk, e.Doc, nil)
	switch {
	case err == nil && e.Role == entryShell:
		shells[e.PK] = true
		return nil
	case e.Role == entryStart && !shells[e.PK] && (err == nil || IsConflict(err)):
		return r.settleStart(ctx, e, err == nil)
	case IsConflict(err):
		return nil // delivered before (and maybe consumed since: its marker)
	}
	return err
}

// settleStart settles a start the relay delivered beside an instance
// document it did not create. A start delivered before (written, a 409
// now) is settled while it waits; its consumer's marker means it began.
func (r *relay) settleStart(ctx context.Context, e outboxEntry, written bool) error {
	var head struct {
		ID       string `json:"id"`
		Instance string `json:"instance"`
	}
	if err := json.Unmarshal(e.Doc, &head); err != nil {
		return fmt.Errorf("decode outbox entry: %w", err)
	}
	if !written {
		resp, err := r.p.readLatest(ctx, NewPartitionKeyString(e.PK), head.ID)
		switch {
		case IsNotFound(err):
			return transient("deliver", fmt.Sprintf("the start of %q went away while it was delivered; delivering it again", head.Instance), nil)
		case err != nil:
			return err
		}
		var doc struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(resp.Value, &doc); err != nil {
			return fmt.Errorf("decode start %s: %w", head.ID, err)
		}
		if doc.Type == docConsumed {
			return nil
		}
	}
	return r.p.settleStart(ctx, "deliver", head.Instance, e.Doc)
}

// flushCleanup deletes delivered outboxes with their parts, in one batch
// each (so no outbox ever names a missing part); failures stay queued.
func (r *relay) flushCleanup(ctx context.Context) error {
	r.mu.Lock()
	todo := r.cleanup
	r.cleanup = nil
	r.mu.Unlock()
	var errs []error
	for i, o := range todo {
		if err := r.remove(ctx, o); err != nil {
			errs = append(errs, err)
			r.mu.Lock()
			r.cleanup = append(r.cleanup, todo[i:]...)
			r.mu.Unlock()
			break
		}
		r.mu.Lock()
		delete(r.deleted, o.id)
		r.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (r *relay) remove(ctx context.Context, o *pendingOutbox) error {
	pk := NewPartitionKeyString(o.pk)
	if len(o.parts) == 0 {
		_, err := r.p.container.DeleteItem(ctx, pk, o.id, nil)
		if err != nil && !IsNotFound(err) {
			return fmt.Errorf("delete delivered outbox %s: %w", o.id, err)
		}
		return nil
	}
	b := r.p.container.NewTransactionalBatch(pk)
	b.DeleteItem(o.id, nil)
	for _, part := range o.parts {
		b.DeleteItem(part.ID, nil)
	}
	resp, err := r.p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return fmt.Errorf("delete delivered outbox %s: %w", o.id, err)
	}
	if !resp.Success {
		idx, opErr := resp.FailedOperation()
		if idx == 0 && IsNotFound(opErr) {
			return nil // another relay deleted it, with its parts
		}
		return fmt.Errorf("delete delivered outbox %s: %w", o.id, asOperation("outbox", opErr))
	}
	return nil
}

// run retries stopped chains and deletes delivered outboxes until ctx
// ends. Reconciling has a loop of its own (reconcileEvery): its looks are
// background work, which waits while the account throttles
// (backgroundbudget.go), and the retries of this process's deliveries
// must not wait behind them.
func (r *relay) run(ctx context.Context) {
	retry := time.NewTicker(r.retryDelay())
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry.C:
		}
		if err := r.drain(ctx, false); err != nil && ctx.Err() == nil {
			r.p.log.Debug("cdb: outbox delivery stopped; the relay will retry", "error", err)
		}
	}
}

// reconcileEvery reconciles every ReconcileInterval until ctx ends.
func (r *relay) reconcileEvery(ctx context.Context) {
	runEvery(ctx, r.p.cfg.ReconcileInterval, func() {
		if err := r.reconcile(ctx); err != nil && ctx.Err() == nil {
			r.p.log.Warn("cdb: outbox reconciliation left work undone", "error", err)
		}
	})
}

// drain deletes delivered outboxes and works every chain nobody works
// whose retry time has come (every one, when force).
func (r *relay) drain(ctx context.Context, force bool) error {
	errs := []error{r.flushCleanup(ctx)}
	for _, pk := range r.claimReady(force) {
		_, err := r.work(ctx, pk, nil)
		errs = append(errs, err)
	}
	errs = append(errs, r.flushCleanup(ctx))
	return errors.Join(errs...)
}

func (r *relay) claimReady(force bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.p.nowMs()
	var ready []string
	for pk, ch := range r.chains {
		if !ch.busy && (force || ch.retryAt <= now) {
			ch.busy = true
			ready = append(ready, pk)
		}
	}
	return ready
}

// reconcile delivers what this process's chains still hold, then, on the
// process that leads the container's chores, every
// outbox whose owner shows no life, per instance in commit order; an
// outbox it cannot deliver holds back only its own instance's later ones.
// Then it deletes what was delivered and finishes abandoned deletions,
// whatever failed before. The query filters and projects only: the gateway
// refuses more across partitions.
func (r *relay) reconcile(ctx context.Context) error {
	errs := []error{r.drain(ctx, true)}
	if !r.p.leadsChores() {
		return errors.Join(errs...) // another process looks across the container
	}
	// The looks across the container, the cleanup, the deletions and the
	// retention are background work; the delivery of what the look finds
	// is not: a turn of its instance waits for it (awaitOrClaim).
	look := r.p.background(ctx)
	// Behind a quiet bell, after a look that found nothing, nothing was
	// written since that this look would find (bell.go, quietChores).
	quiet, record := r.p.bell.quietChores(look, r.p.cfg.ReconcileInterval)
	var outboxes, intents int
	var lookErr error
	if !quiet {
		outboxes, lookErr = r.reconcileOutboxes(ctx, look)
		errs = append(errs, lookErr)
	}
	errs = append(errs, r.flushCleanup(look))
	if !quiet {
		var err error
		if intents, err = r.p.finishPendingDeletions(look); err != nil {
			errs = append(errs, fmt.Errorf("finish pending deletions: %w", err))
		} else if lookErr == nil {
			record(outboxes+intents > 0)
		}
	}
	if r.p.retainer != nil && r.p.retainer.lookDue(r.p.now()) {
		if err := r.p.reconcileRetention(look); err != nil {
			errs = append(errs, fmt.Errorf("retention: %w", err))
		}
	}
	return errors.Join(errs...)
}

// reconcileOutboxes reads every outbox's header across the container
// (with look: background work) and delivers the stale ones (with ctx),
// going on past one it cannot deliver; it says how many outboxes there
// were.
func (r *relay) reconcileOutboxes(ctx, look context.Context) (int, error) {
	res, err := r.p.container.QueryItems(look,
		"SELECT c.id, c.pk, c.rev, c.createdAt, c.owner, c.beatAt, c._etag FROM c WHERE c.type = @type",
		[]QueryParameter{{Name: "@type", Value: docOutbox}}, nil)
	if err != nil {
		return 0, fmt.Errorf("query outboxes: %w", err)
	}
	var errs []error
	for _, group := range outboxGroups(res.Items, r.p.log) {
		if err := r.reconcileGroup(ctx, group); err != nil {
			r.p.log.Warn("cdb: could not deliver an outbox; going on with the others", "instance", group[0].PK, "error", err)
			errs = append(errs, err)
		}
	}
	return len(res.Items), errors.Join(errs...)
}

// outboxGroups sorts outbox rows into groups delivered in order: an
// instance's ordered outboxes by rev, and each unordered one alone.
func outboxGroups(rows []json.RawMessage, log *slog.Logger) [][]outboxRef {
	byPK := map[string][]outboxRef{}
	var groups [][]outboxRef
	for _, raw := range rows {
		var ref outboxRef
		if err := json.Unmarshal(raw, &ref); err != nil {
			log.Warn("cdb: undecodable outbox row", "error", err)
			continue
		}
		if ref.Rev == 0 {
			groups = append(groups, []outboxRef{ref})
			continue
		}
		byPK[ref.PK] = append(byPK[ref.PK], ref)
	}
	for _, refs := range byPK {
		sort.Slice(refs, func(i, j int) bool {
			if refs[i].Rev != refs[j].Rev {
				return refs[i].Rev < refs[j].Rev
			}
			return refs[i].CreatedAt < refs[j].CreatedAt
		})
		groups = append(groups, refs)
	}
	return groups
}

// reconcileGroup delivers a group's outboxes up to the first one a live
// relay holds.
func (r *relay) reconcileGroup(ctx context.Context, group []outboxRef) error {
	cutoff := r.p.nowMs() - r.p.cfg.OutboxMinAge.Milliseconds()
	var stale []*pendingOutbox
	for _, ref := range group {
		if ref.Owner != "" && ref.BeatAt > cutoff {
			break // a live relay delivers it; the later ones wait for it
		}
		stale = append(stale, ref.pending())
	}
	if len(stale) == 0 {
		return nil
	}
	if group[0].Rev == 0 {
		return r.reconcileAlone(ctx, stale[0])
	}
	if !r.adopt(stale[0].pk, stale) {
		return nil // this process works that instance's chain
	}
	_, err := r.work(ctx, stale[0].pk, nil)
	return err
}

// adopt makes a chain of outboxes the reconciler found, unless this
// process has one for the instance already.
func (r *relay) adopt(pk string, items []*pendingOutbox) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.chains[pk]; ok {
		return false
	}
	r.chains[pk] = &outboxChain{items: items, busy: true}
	return true
}

// reconcileAlone delivers an unordered outbox (a worker's).
func (r *relay) reconcileAlone(ctx context.Context, o *pendingOutbox) error {
	res, err := r.advance(ctx, o)
	if res == resultDelivered {
		r.mu.Lock()
		r.cleanup = append(r.cleanup, o)
		r.deleted[o.id] = true
		r.mu.Unlock()
	}
	return err
}

// ReconcileOutbox delivers, now instead of at the reconciler's next tick,
// what this process's relay still holds and every outbox whose relay shows
// no life for OutboxMinAge, and finishes every deletion older than
// AbandonedDeletionAge that its process left half done. It goes on past
// what fails, and reports it.
func (p *CosmosProvider) ReconcileOutbox(ctx context.Context) error {
	return p.outbox.reconcile(ctx)
}
