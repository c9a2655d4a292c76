package cdb

// The queue bell: how an idle process learns that another process wrote
// work, without querying every partition key range of the container every
// poll interval. An idle look at a queue is a query per range, so its cost
// grows with the ranges times the processes; the bell is one small
// document in a partition of its own, with a counter per queue and the
// processes listening to it.
//
// A long-polling process listens: it lists itself in the document, until
// a time it renews (listenerLease), and once it has been listed for
// bellViewMaxAge without a gap, its idle looks read the counters (one
// point read per poll interval for both queues, every half interval while
// they skip: bellwatch.go) and query a queue only
// when its counter moved since their last query, or unrungLookEvery poll
// intervals passed since then. A process that writes work another process
// may take (an enqueue, a commit's messages and activities, a give-back, a
// worker's completion, a relay's delivery, a timer or delay coming due)
// rings the queue's bell when its view of the document, never older than
// bellViewMaxAge when it decides, lists another live listener: it
// increments the counter, soon after the write (or the time it comes due)
// and at most once per ringGap per queue (later writes within the gap ring
// together at its end). So a process alone on a container never rings, and
// work this process writes is announced to its own fetches at once, as
// before (queuesignal.go): the bell is only for the others.
//
// Invariant: every write of work visible to other processes, made once a
// listener has been listed for bellViewMaxAge, is followed within ringGap
// of the write (or of the time it comes due) by an increment of its
// queue's counter; a look records the counter it read before its query,
// and only a look that began once its process was so listed is recorded.
// So a look skipped because the counter did not move misses only work
// written without a ring: by a process of an earlier version, made visible
// by a lock that expired (its holder died), or a ring that failed; that
// work is found by the look unrungLookEvery poll intervals after the last.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
)

const (
	bellDocID = "bell"
	docBell   = "bell"
	// unrungLookEvery is how many poll intervals an idle look may skip the
	// query of a queue whose bell did not ring: the bound on how late work
	// written without a ring is seen.
	unrungLookEvery = 15
	// bellViewMaxAge is the oldest view of the listeners a writer decides
	// on, and so how long a listener is listed before it skips a look.
	bellViewMaxAge = 5 * time.Second
	// listenerLease is how long a listing lasts; a listener renews it
	// every third of it, and a listing a third past its end is pruned.
	listenerLease = 30 * time.Second
	// bellFlushTimeout bounds the last rings a closing process sends.
	bellFlushTimeout = 2 * time.Second
	// maxPrunedListeners keeps a listing's PATCH within Cosmos DB's 10
	// operations.
	maxPrunedListeners = 8
	// maxDueRings bounds the rings a process keeps for work that comes due
	// later; past it, such work waits for the unrung look.
	maxDueRings = 256
	// bellChores is the counter of the chore leader's looks across the
	// container (the outbox reconciler's): rung by every write of an
	// outbox or a deletion intent.
	bellChores = "chores"
)

// bellDoc is the bell document: a counter per queue, incremented by every
// ring, and the listeners, process id → the end of its listing (ms).
type bellDoc struct {
	ID           string           `json:"id"`
	PK           string           `json:"pk"`
	Type         string           `json:"type"`
	Orchestrator int64            `json:"orchestrator"`
	Worker       int64            `json:"worker"`
	Chores       int64            `json:"chores"`
	Listeners    map[string]int64 `json:"listeners"`
}

// bellCounters are the document's counters, each named as its field.
var bellCounters = [...]string{queueOrchestrator, queueWorker, bellChores}

// count is the counter named queue.
func (d bellDoc) count(queue string) int64 {
	switch queue {
	case queueWorker:
		return d.Worker
	case bellChores:
		return d.Chores
	}
	return d.Orchestrator
}

// listenedToBy says a process other than me listens, as of nowMs.
func (d bellDoc) listenedToBy(me string, nowMs int64) bool {
	for id, until := range d.Listeners {
		if id != me && until > nowMs {
			return true
		}
	}
	return false
}

// bellProcessID names this process among the listeners: its process
// lease id, or one of its own.
func bellProcessID(leaseID string) string {
	if leaseID != "" {
		return leaseID
	}
	return "p-" + uuid.NewString()
}

// bellPartitionKey is the bell document's partition.
func bellPartitionKey() string { return instancePartitionKey("bell|" + bellDocID) }

// queueBell is this process's side of the bell.
type queueBell struct {
	container *ContainerClient
	pk, id    string
	listens   bool // this process long-polls: its idle looks may skip
	now       func() time.Time
	poll      time.Duration
	log       *slog.Logger
	wake      chan struct{}

	mu sync.Mutex
	// The document as last read or written, and when, on the provider's
	// clock and on the machine's.
	view               bellDoc
	viewAt, viewAtReal time.Time
	// skippedAt is when an idle look last skipped its query (the
	// machine's clock), and watched the counters as the watcher last read
	// them (bellwatch.go).
	skippedAt time.Time
	watched   map[string]int64
	// This process's listing: until when, and since when without a gap
	// (zero: not listed).
	listedUntil, listedSince time.Time
	// Per queue and view, the counter the view's last query read, and when.
	looked map[string]bellLook
	// Rings owed now, owed when work comes due, and each queue's last.
	owed   map[string]bool
	due    map[string][]time.Time
	rungAt map[string]time.Time
	// written counts, per counter, this process's own writes that ring
	// it, whether or not anybody else listens: the chores' looks are this
	// process's too.
	written map[string]int64
}

// bellLook is what one look that queried read of its queue's counter:
// settled when the look before it had read the same count. A look skips
// only on a settled count: a ring's work and the counter live in different
// partitions, whose replicas a real account does not order for a reader of
// both, so one query after a ring might run on a replica behind the
// writer's; the query that follows, a poll interval later, does not.
type bellLook struct {
	count int64
	// at is the look's time on the provider's clock, atReal on the
	// machine's: a skip needs the last look recent on both, so that a
	// provider's clock that stands still or goes back does not skip for
	// good.
	at, atReal time.Time
	settled    bool
	own        int64 // this process's writes that rang the counter, then
	found      bool  // the look found work (a chores look skips only after an empty one)
}

func newQueueBell(container *ContainerClient, id string, listens bool, now func() time.Time, poll time.Duration, log *slog.Logger) *queueBell {
	return &queueBell{container: container, pk: bellPartitionKey(), id: id, listens: listens, now: now, poll: poll, log: log,
		wake: make(chan struct{}, 1), looked: map[string]bellLook{}, watched: map[string]int64{}, owed: map[string]bool{},
		due: map[string][]time.Time{}, rungAt: map[string]time.Time{}, written: map[string]int64{}}
}

// ringGap is the shortest time between two rings of one queue by this
// process.
func (b *queueBell) ringGap() time.Duration { return b.poll / 4 }

// ring owes queue a ring for work visible to others from at on. Work
// visible now that a fresh view says nobody else listens for owes nothing,
// decided here, so a process alone sends nothing for its writes.
func (b *queueBell) ring(queue string, at time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.written[queue]++
	now := b.now()
	switch {
	case at.After(now):
		if len(b.due[queue]) < maxDueRings {
			b.due[queue] = append(b.due[queue], at)
		}
	case b.viewFresh(now) && !b.view.listenedToBy(b.id, now.UnixMilli()):
		b.mu.Unlock()
		return
	default:
		b.owed[queue] = true
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run sends the rings owed until ctx ends, then those still owed.
func (b *queueBell) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(b.sendDue(ctx))
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), bellFlushTimeout)
			b.sendDue(flush)
			b.leave(flush)
			cancel()
			return
		case <-b.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// sendDue sends one ring for the queues owed one whose gap passed, when
// another process listens, and says how long until the next may be owed.
func (b *queueBell) sendDue(ctx context.Context) time.Duration {
	queues, wait := b.takeDue()
	if len(queues) == 0 {
		return wait
	}
	view, err := b.freshView(ctx, bellViewMaxAge)
	if err == nil && !view.listenedToBy(b.id, b.now().UnixMilli()) {
		return wait // nobody else listens: nothing to ring
	}
	if err == nil {
		err = b.send(ctx, queues)
	}
	if err != nil {
		b.log.Debug("cdb: could not ring the queue bell; idle processes find the work at their next unrung look", "error", err)
		b.mu.Lock()
		for _, q := range queues {
			b.owed[q] = true
		}
		b.mu.Unlock()
		return b.ringGap()
	}
	return min(wait, b.ringGap())
}

// takeDue takes the queues owed a ring now (their due rings came due and
// their gap passed), marking them rung, and says how long until the next.
func (b *queueBell) takeDue() ([]string, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	wait := time.Hour
	var queues []string
	for _, q := range bellCounters {
		later := b.due[q][:0]
		for _, at := range b.due[q] {
			if at.After(now) {
				later = append(later, at)
				wait = min(wait, at.Sub(now))
			} else {
				b.owed[q] = true
			}
		}
		b.due[q] = later
		if !b.owed[q] {
			continue
		}
		if next := b.rungAt[q].Add(b.ringGap()); next.After(now) {
			wait = min(wait, next.Sub(now))
			continue
		}
		delete(b.owed, q)
		b.rungAt[q] = now
		queues = append(queues, q)
	}
	return queues, max(wait, time.Millisecond)
}

// send increments the counters of queues.
func (b *queueBell) send(ctx context.Context, queues []string) error {
	var ops PatchOperations
	for _, q := range queues {
		ops.AppendIncrement("/"+q, 1)
	}
	_, err := b.patch(ctx, ops)
	return err
}

// patch applies ops to the document, creating it (empty) first if there is
// none, and keeps the document it returns as the view.
func (b *queueBell) patch(ctx context.Context, ops PatchOperations) (bellDoc, error) {
	key := NewPartitionKeyString(b.pk)
	opts := &ItemOptions{EnableContentResponseOnWrite: true}
	resp, err := b.container.PatchItem(ctx, key, bellDocID, ops, opts)
	if IsNotFound(err) {
		body, merr := json.Marshal(bellDoc{ID: bellDocID, PK: b.pk, Type: docBell, Listeners: map[string]int64{}})
		if merr != nil {
			return bellDoc{}, merr
		}
		if _, err = b.container.CreateItem(ctx, key, body, nil); err == nil || IsConflict(err) {
			resp, err = b.container.PatchItem(ctx, key, bellDocID, ops, opts)
		}
	}
	if err != nil {
		return bellDoc{}, err
	}
	return b.adopt(resp.Value)
}

// adopt decodes the document as read or written and keeps it as the view.
func (b *queueBell) adopt(body []byte) (bellDoc, error) {
	var doc bellDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return bellDoc{}, fmt.Errorf("decode the queue bell: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.view, b.viewAt, b.viewAtReal = doc, b.now(), time.Now()
	return doc, nil
}

// viewFresh says the view may decide a ring at now; called with b.mu held.
func (b *queueBell) viewFresh(now time.Time) bool { return b.viewYoungerThan(now, bellViewMaxAge) }

// viewYoungerThan says the view was read less than maxAge before now, on
// the provider's clock and on the machine's (pacing.go: a provider's clock
// that stands still must not keep a view for good); one read after now
// (the clock went back) is of unknown age, so not.
func (b *queueBell) viewYoungerThan(now time.Time, maxAge time.Duration) bool {
	age := now.Sub(b.viewAt)
	return !b.viewAt.IsZero() && age >= 0 && age < maxAge && time.Since(b.viewAtReal) < maxAge
}

// freshView is the document as read at most maxAge ago, read again if
// older.
func (b *queueBell) freshView(ctx context.Context, maxAge time.Duration) (bellDoc, error) {
	b.mu.Lock()
	if b.viewYoungerThan(b.now(), maxAge) {
		defer b.mu.Unlock()
		return b.view, nil
	}
	b.mu.Unlock()
	resp, err := b.container.ReadItem(ctx, NewPartitionKeyString(b.pk), bellDocID, nil)
	if IsNotFound(err) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.view, b.viewAt, b.viewAtReal = bellDoc{}, b.now(), time.Now() // never rung, nobody listens
		return b.view, nil
	}
	if err != nil {
		return bellDoc{}, err
	}
	return b.adopt(resp.Value)
}

// quiet says an idle look of view at queue may skip its query: this
// process has been listed long enough, and the bell did not ring since
// the view's last two queries, the last of which is recent. When it may not, record (called
// once the look queried without an error) notes the counter read before
// it. A bell that cannot be read or written is not quiet.
func (b *queueBell) quiet(ctx context.Context, queue, view string) (quiet bool, record func()) {
	noRecord := func() {}
	if b == nil || !b.listens {
		return false, noRecord
	}
	heard, err := b.keepListed(ctx)
	if err != nil {
		b.log.Debug("cdb: could not list this process at the queue bell; the idle look queries the queue", "error", err)
	}
	if !heard {
		b.forget()
		return false, noRecord
	}
	doc, err := b.freshView(ctx, b.poll)
	if err != nil {
		b.log.Debug("cdb: could not read the queue bell; the idle look queries the queue", "error", err)
		return false, noRecord
	}
	skip, rec := b.judge(queue+" "+view, doc.count(queue), 0, unrungLookEvery*b.poll)
	if skip {
		b.mu.Lock()
		b.skippedAt = time.Now()
		b.mu.Unlock()
	}
	return skip, func() { rec(false) }
}

// judge says a look recorded under key may skip its query, given the
// counter it read (count) and this process's own writes that rang it
// (own): the last two looks that queried read the same count, the last
// found nothing, nothing of this process's rang since, and the last is
// less than bound old. record notes a look that queried, and whether it
// found anything.
func (b *queueBell) judge(key string, count, own int64, bound time.Duration) (skip bool, record func(found bool)) {
	now := b.now()
	b.mu.Lock()
	last, ok := b.looked[key]
	b.mu.Unlock()
	if ok && last.settled && !last.found && last.count == count && last.own == own && now.Sub(last.at) < bound && time.Since(last.atReal) < bound {
		return true, func(bool) {}
	}
	settled := ok && last.count == count
	return false, func(found bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.looked[key] = bellLook{count: count, at: now, atReal: time.Now(), settled: settled, own: own, found: found}
	}
}

// quietChores says the chore leader's look across the container for
// outboxes and deletion intents (the outbox reconciler's) may skip its
// queries, as quiet says of an idle look, with three differences: it does
// not list this process (a busy process is not listed, and the others
// would ring for it), so it skips only while the idle looks keep the
// listing; it skips only after a look that found nothing (an outbox a live
// relay holds is looked at every interval until it is gone: its relay may
// die); and this process wrote no outbox or intent since (alone, it rings
// for nobody). every is the looks' interval: unrungLookEvery of them bound
// how late an outbox or intent written without a ring is seen. record
// notes the look that queried, and whether it found any.
func (b *queueBell) quietChores(ctx context.Context, every time.Duration) (quiet bool, record func(found bool)) {
	noRecord := func(bool) {}
	if b == nil || !b.listens {
		return false, noRecord
	}
	b.mu.Lock()
	heard := b.heardAt(b.now())
	b.mu.Unlock()
	if !heard {
		b.forget()
		return false, noRecord
	}
	doc, err := b.freshView(ctx, b.poll)
	if err != nil {
		b.log.Debug("cdb: could not read the queue bell; the reconciler looks across the container", "error", err)
		return false, noRecord
	}
	b.mu.Lock()
	own := b.written[bellChores]
	b.mu.Unlock()
	return b.judge(bellChores, doc.count(bellChores), own, unrungLookEvery*every)
}

// keepListed renews this process's listing when a third of it is gone, and
// says whether it has been listed for bellViewMaxAge without a gap, with
// at least a third of the listing left: every writer's view then lists it.
func (b *queueBell) keepListed(ctx context.Context) (heard bool, err error) {
	b.mu.Lock()
	now := b.now()
	renew := b.listedUntil.Sub(now) < listenerLease*2/3
	b.mu.Unlock()
	if renew {
		err = b.list(ctx, now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heardAt(b.now()), err
}

// heardAt says this process has been listed for bellViewMaxAge without a
// gap as of now, with at least a third of the listing left. Called with
// b.mu held.
func (b *queueBell) heardAt(now time.Time) bool {
	return !b.listedSince.IsZero() && now.Sub(b.listedSince) >= bellViewMaxAge && b.listedUntil.Sub(now) > listenerLease/3
}

// list writes this process's listing, pruning listings long over.
func (b *queueBell) list(ctx context.Context, now time.Time) error {
	until := now.Add(listenerLease)
	var ops PatchOperations
	ops.AppendSet("/listeners/"+b.id, until.UnixMilli())
	for _, id := range b.overListings(now) {
		ops.AppendRemove("/listeners/" + id)
	}
	_, err := b.patch(ctx, ops)
	if err != nil && ops.Len() > 1 {
		// Another process pruned them first: list alone.
		var only PatchOperations
		only.AppendSet("/listeners/"+b.id, until.UnixMilli())
		_, err = b.patch(ctx, only)
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.listedUntil.After(b.now()) {
		b.listedSince = b.now() // a new listing: no writer's view has it yet
	}
	b.listedUntil = until
	return nil
}

// overListings are listings of the view that ended a third of a lease ago
// or more, at most maxPrunedListeners of them.
func (b *queueBell) overListings(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var over []string
	for id, until := range b.view.Listeners {
		if id != b.id && now.UnixMilli()-until > (listenerLease/3).Milliseconds() && processIDPattern.MatchString(id) {
			over = append(over, id)
		}
	}
	sort.Strings(over)
	return over[:min(len(over), maxPrunedListeners)]
}

// forget drops the queries recorded so far: this process is not heard (any
// more), so work may have been written for it without a ring.
func (b *queueBell) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.looked)
}

// leave removes this process's listing, so writers stop ringing for it.
func (b *queueBell) leave(ctx context.Context) {
	b.mu.Lock()
	listed := b.listedUntil.After(b.now())
	b.mu.Unlock()
	if !listed {
		return
	}
	var ops PatchOperations
	ops.AppendRemove("/listeners/" + b.id)
	if _, err := b.container.PatchItem(ctx, NewPartitionKeyString(b.pk), bellDocID, ops, nil); err != nil && !IsNotFound(err) && !isPatchRefused(err) {
		b.log.Debug("cdb: could not remove this process's listing at the queue bell; it ends by itself", "error", err)
	}
}
