package cdb

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Queue names, for leases and logs.
const (
	queueOrchestrator = "orchestrator"
	queueWorker       = "worker"
)

// candidateQuery finds the oldest visible, unlocked items of one queue. It
// runs once per partition key range (ORDER BY and TOP are allowed there, not
// across partitions: R4), reading at most CandidatesPerRange documents per
// range whatever the backlog.
type candidateQuery struct {
	docType string
	pk      string // set: this partition alone, one request
	index   queueIndex
	now     int64    // ms: what is visible and unlocked as of then
	slots   []int    // nil: every slot
	skip    []string // partition keys not to return (held or contended)
	where   []string // extra conditions
	params  []QueryParameter
	// headOnly selects the fields ranking and claiming need, not the
	// item: a worker item's claim returns the whole document anyway, and
	// an activity's input may be megabytes.
	headOnly bool
}

// queueHeadFields are what a worker candidate query returns of each item.
const queueHeadFields = "c.id, c.pk, c.type, c.instance, c.slot, c.visibleAt, c.seq, c.lockToken, c.lockedUntil, c.attempts, " +
	"c.exec, c.activity, c.session, c.sessionKey, c.tag, c._etag"

func (q candidateQuery) text() string {
	var b strings.Builder
	fields := "*"
	if q.headOnly {
		fields = queueHeadFields
	}
	b.WriteString("SELECT TOP @top " + fields + " FROM c WHERE c.type = @type AND " + visibleCondition + " AND c.lockedUntil <= @now")
	if q.slots != nil {
		b.WriteString(" AND ARRAY_CONTAINS(@slots, c.slot)")
	}
	if len(q.skip) > 0 {
		b.WriteString(" AND NOT ARRAY_CONTAINS(@skip, c.pk)")
	}
	for _, w := range q.where {
		b.WriteString(" AND (")
		b.WriteString(w)
		b.WriteString(")")
	}
	b.WriteString(q.index.orderBy())
	return b.String()
}

// visibleCondition selects the queue items visible to a fetch: those due
// by its clock (@now), and immediate ones up to its horizon (@visible,
// visibleHorizon), never an item with a due time before it.
const visibleCondition = "(c.visibleAt <= @now OR (c.visibleAt <= @visible AND c.seqVisible = true))"

// queueTime places a queue item: when it becomes visible, and its seq.
type queueTime struct {
	visibleAt int64 // ms
	seq       int64
	immediate bool // visible from its seq's millisecond (queueDoc.SeqVisible), not at a due time
}

// immediateAt places an item visible at once: at visibleAt, the writer's
// clock or its seq's millisecond (sequencedVisibleAt).
func immediateAt(visibleAt, seq int64) queueTime {
	return queueTime{visibleAt: visibleAt, seq: seq, immediate: true}
}

// dueAt places an item that must not be served before due.
func dueAt(due, seq int64) queueTime { return queueTime{visibleAt: due, seq: seq} }

// setDue adds to ops what makes the queue item d visible at due again (an
// abandon, a set-aside): a due time, so no fetch serves it before, and no
// writer's to take any more: a stamp says its writer takes the item as it
// writes it (ownwrites.go), and would otherwise hold the others off again
// from due on, for a process that does not look for it.
func setDue(ops *PatchOperations, d queueDoc, due int64) {
	ops.AppendSet("/visibleAt", due)
	if d.SeqVisible {
		ops.AppendRemove("/seqVisible")
	}
	if d.Writer != "" {
		ops.AppendRemove("/writer")
	}
}

// run returns the candidates of every range, oldest first.
func (p *CosmosProvider) runCandidateQuery(ctx context.Context, q candidateQuery) ([]queueDoc, error) {
	q.index = p.queueIndex.get()
	now := cmp.Or(q.now, p.nowMs())
	params := append([]QueryParameter{
		{Name: "@top", Value: p.cfg.CandidatesPerRange},
		{Name: "@type", Value: q.docType},
		{Name: "@now", Value: now},
		{Name: "@visible", Value: p.visibleHorizon(now)},
	}, q.params...)
	if q.slots != nil {
		params = append(params, QueryParameter{Name: "@slots", Value: q.slots})
	}
	if len(q.skip) > 0 {
		params = append(params, QueryParameter{Name: "@skip", Value: q.skip})
	}
	var byRange map[string]QueryResult
	if q.pk != "" {
		key := NewPartitionKeyString(q.pk)
		res, err := p.container.QueryItems(ctx, q.text(), params, &QueryOptions{PartitionKey: &key, MaxItemCount: int32(p.cfg.CandidatesPerRange)})
		if err != nil {
			return nil, err
		}
		byRange = map[string]QueryResult{q.pk: res}
	} else {
		var err error
		if byRange, err = p.container.QueryItemsPerRange(ctx, q.text(), params, &QueryOptions{MaxItemCount: int32(p.cfg.CandidatesPerRange)}); err != nil {
			return nil, err
		}
	}
	var docs []queueDoc
	for _, res := range byRange {
		for _, raw := range res.Items {
			var d queueDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return nil, fmt.Errorf("decode queue item: %w", err)
			}
			docs = append(docs, d)
		}
	}
	sortQueueDocs(docs)
	return docs, nil
}

// sortQueueDocs orders queue items as the queue serves them.
func sortQueueDocs(docs []queueDoc) {
	sort.SliceStable(docs, func(i, j int) bool {
		if docs[i].VisibleAt != docs[j].VisibleAt {
			return docs[i].VisibleAt < docs[j].VisibleAt
		}
		return docs[i].Seq < docs[j].Seq
	})
}

// instanceGroup is one instance's candidates, oldest first.
type instanceGroup struct {
	pk   string
	docs []queueDoc
}

// groupByInstance keeps the instances in the order of their oldest item.
func groupByInstance(docs []queueDoc) []instanceGroup {
	index := map[string]int{}
	var groups []instanceGroup
	for _, d := range docs {
		i, ok := index[d.PK]
		if !ok {
			i = len(groups)
			index[d.PK] = i
			groups = append(groups, instanceGroup{pk: d.PK})
		}
		groups[i].docs = append(groups[i].docs, d)
	}
	return groups
}

// contention remembers partitions whose lock this process just failed to
// take, so the next candidate queries leave them out for a moment instead of
// fighting over them.
type contention struct {
	mu    sync.Mutex
	until map[contentionKey]time.Time
}

// contentionKey names what was contended (a partition, or a session) within
// a scope (a capability filter, or a session owner).
type contentionKey struct{ scope, id string }

func newContention() *contention { return &contention{until: map[contentionKey]time.Time{}} }

const contentionBackoff = 200 * time.Millisecond

// maxSkipped bounds the partitions a candidate query leaves out.
const maxSkipped = 256

func (c *contention) note(scope, id string, now time.Time) {
	c.noteUntil(scope, id, now.Add(contentionBackoff))
}

// noteUntil leaves id out of scope's queries until the given time: for
// what a fetch learned it cannot take before then (a lock held by another
// process, a pinned version outside the filter). A later note never
// shortens an earlier one.
func (c *contention) noteUntil(scope, id string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := contentionKey{scope, id}
	if until.After(c.until[key]) {
		c.until[key] = until
	}
}

// active lists the ids of scope contended recently.
func (c *contention) active(scope string, now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for key, until := range c.until {
		if !now.Before(until) {
			delete(c.until, key)
			continue
		}
		if key.scope == scope && len(out) < maxSkipped {
			out = append(out, key.id)
		}
	}
	return out
}

// filterMisses remembers, per capability filter and instance, the fetches
// in a row that found the instance pinned to the same version outside the
// filter, so that each waits twice as long as the last before it looks
// again: such an instance changes only when a compatible dispatcher
// continues it as new, and one that no running dispatcher takes must not
// cost every other process a lock attempt and a read every few seconds for
// as long as it waits (R17).
type filterMisses struct {
	mu sync.Mutex
	m  map[contentionKey]filterMiss
}

type filterMiss struct {
	pinned uint64
	wait   time.Duration
	at     time.Time
}

func newFilterMisses() *filterMisses { return &filterMisses{m: map[contentionKey]filterMiss{}} }

// backoff records a miss of instance id by the filter scope and says how
// long to leave the instance out: filterMissBackoff, doubled for each miss
// in a row (a look soon after the last wait ended, the same pinned
// version), at most maxFilterMissBackoff. Misses nobody followed up are
// forgotten.
func (f *filterMisses) backoff(scope, id string, pinned uint64, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := contentionKey{scope, id}
	wait := filterMissBackoff
	if last, ok := f.m[key]; ok && last.pinned == pinned && now.Sub(last.at) <= 2*last.wait {
		wait = min(2*last.wait, maxFilterMissBackoff)
	}
	for k, miss := range f.m {
		if now.Sub(miss.at) > 2*miss.wait {
			delete(f.m, k)
		}
	}
	f.m[key] = filterMiss{pinned: pinned, wait: wait, at: now}
	return wait
}

// claimSet is the partitions this process's fetches are locking right now.
type claimSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func newClaimSet() *claimSet { return &claimSet{m: map[string]bool{}} }

// claim marks pk as being locked by the caller; false when another fetch
// already is.
func (c *claimSet) claim(pk string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[pk] {
		return false
	}
	c.m[pk] = true
	return true
}

// has says a fetch is locking pk.
func (c *claimSet) has(pk string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[pk]
}

func (c *claimSet) release(pk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, pk)
}

// itemClaims are the worker items this process's fetches are claiming or
// hold, so two of its fetches that read the same candidates do not both
// send a claim for one item (the loser's request would only meet a 412).
// An entry lasts until the item is let go, or until the lock it was taken
// with would have expired, whichever comes first.
type itemClaims struct {
	mu    sync.Mutex
	until map[string]int64 // item key → ms
}

func newItemClaims() *itemClaims { return &itemClaims{until: map[string]int64{}} }

// take marks key as claimed until the given time; false when another fetch
// of this process claims or holds it.
func (c *itemClaims) take(key string, now, until int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until[key] > now {
		return false
	}
	c.until[key] = until
	return true
}

// busy says another fetch of this process claims or holds key.
func (c *itemClaims) busy(key string, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.until[key] > now
}

func (c *itemClaims) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, key)
}

// itemKey names a queue document within the container.
func itemKey(pk, id string) string { return pk + "/" + id }

// deferredWakes are partitions announced while this process held them:
// their messages wait for the lock to be let go, and are announced then.
type deferredWakes struct {
	mu sync.Mutex
	m  map[string]bool
}

func newDeferredWakes() *deferredWakes { return &deferredWakes{m: map[string]bool{}} }

// deferIfHeld records pk when held says this process holds it. The check
// and the record are one step, so a release that comes after the check
// finds the record (see take).
func (d *deferredWakes) deferIfHeld(pk string, held func(string) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !held(pk) {
		return false
	}
	d.m[pk] = true
	return true
}

// take removes pk's record: call it after the lock is let go.
func (d *deferredWakes) take(pk string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.m[pk]
	delete(d.m, pk)
	return was
}

// pollOutcome is what one look at a queue found.
type pollOutcome int

const (
	outcomeEmpty pollOutcome = iota // no candidates at all
	outcomeBusy                     // candidates, none of which could be taken now
	outcomeFound                    // work taken
)

// lookScope is where one look at a queue searches: one partition (an
// announced one: a single-partition query), some dispatch slots, or, with
// neither, the whole queue.
type lookScope struct {
	pk    string
	slots []int
}

// whole says the look queries the whole queue.
func (s lookScope) whole() bool { return s.pk == "" && s.slots == nil }

// pollAttempt tries once to take work from a queue within scope.
type pollAttempt[T any] func(ctx context.Context, scope lookScope) (T, pollOutcome, error)

// poll runs attempts until one finds work, the poll timeout passes (long
// polling) or once (short polling). Fetches of this process wait on the
// queue's signal: work this process writes is announced with its
// partition, and wakes one waiting fetch per item, which looks in that
// partition alone; an idle queue is queried about once per PollInterval in
// all (R5), by whichever fetch claims the poll.
//
// leaseKey names the slots' lanes and shares (LeaseProvider): the queue and
// the filters of the fetch, whatever its session owner, since processes
// (and fetches) with other filters take other items from the same slots.
func poll[T any](ctx context.Context, p *CosmosProvider, sig *queueSignal, leaseKey, view string, pollTimeout time.Duration, attempt pollAttempt[T]) (T, bool, error) {
	var zero T
	deadline := p.now().Add(pollTimeout)
	// A fetch is fresh (looks at its own slots) only when the queue changed
	// since anyone last looked, so dispatchers that call in turn do not each
	// query an idle queue.
	seen, ok := sig.lastLook()
	if !ok {
		seen = ^uint64(0)
	}
	announced, hasAnnounced := "", false
	for {
		if !hasAnnounced && !p.cfg.ShortPolling {
			announced, hasAnnounced = sig.takeToken()
		}
		if hasAnnounced {
			res, outcome, err := attempt(ctx, lookScope{pk: announced})
			hasAnnounced = false
			if err != nil || outcome == outcomeFound {
				return res, outcome == outcomeFound, err
			}
		}
		changed, gen := sig.state()
		res, outcome, err := pollOnce(ctx, p, sig, leaseKey, view, gen != seen, attempt)
		if err != nil {
			return zero, false, err
		}
		if outcome == outcomeFound {
			return res, true, nil
		}
		sig.lookedAt(gen)
		seen = gen
		now := p.now()
		if p.cfg.ShortPolling || !now.Before(deadline) {
			return zero, false, nil
		}
		wakeAt := deadline
		if next := sig.nextPoll(view); next.After(now) && next.Before(wakeAt) {
			wakeAt = next
		} else if outcome == outcomeBusy {
			// Candidates exist but are held; look again soon.
			if soon := now.Add(contentionBackoff); soon.Before(wakeAt) {
				wakeAt = soon
			}
		}
		if announced, hasAnnounced = sig.takeToken(); hasAnnounced {
			continue // announced while this fetch looked
		}
		wake, cancel := sig.await()
		timer := time.NewTimer(wakeAt.Sub(now))
		select {
		case <-ctx.Done():
		case announced = <-wake:
			hasAnnounced = true
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
		if pk, ok := cancel(); ok {
			announced, hasAnnounced = pk, true
		}
		if ctx.Err() != nil {
			if hasAnnounced {
				sig.announce(announced) // hand it to another fetch
			}
			return zero, false, ctx.Err()
		}
	}
}

// pollOnce takes one look at the queue. A long-polling fetch queries its
// own slots when the queue changed since its last look, and the whole queue
// when it claims the queue's poll; a short-polling fetch queries the whole
// queue unless a recent query found it empty and nothing changed since.
// Only a query that finds no candidates at all closes the queue for a poll
// interval, so contention never reads as emptiness.
func pollOnce[T any](ctx context.Context, p *CosmosProvider, sig *queueSignal, leaseKey, view string, fresh bool, attempt pollAttempt[T]) (T, pollOutcome, error) {
	var zero T
	if p.cfg.ShortPolling {
		if !sig.takeChange() && !sig.isOpen(view, p.now()) {
			return zero, outcomeEmpty, nil
		}
		return lookAt(ctx, p, sig, view, p.idleScope(leaseKey), attempt)
	}
	slots, release := p.cfg.Leases.Acquire(leaseKey)
	defer release()
	if slots != nil && fresh {
		res, outcome, err := attempt(ctx, lookScope{slots: slots})
		if err != nil || outcome == outcomeFound {
			return res, outcome, err
		}
	}
	if !sig.claimPoll(view, p.now(), p.cfg.PollInterval) && !(fresh && slots == nil) {
		return zero, outcomeEmpty, nil
	}
	idle := p.idleScope(leaseKey)
	if idle != nil && fresh && len(idle) == len(slots) {
		return zero, outcomeEmpty, nil // the fresh look just queried the same share
	}
	return lookAt(ctx, p, sig, view, idle, attempt)
}

// idleScope is what an idle look queries: every slot, unless process
// leases narrow it to this process's share.
func (p *CosmosProvider) idleScope(leaseKey string) []int {
	if scoper, ok := p.cfg.Leases.(idleScoper); ok {
		return scoper.idleScope(leaseKey)
	}
	return nil
}

// lookAt queries the slots of an idle look (nil: every slot) and keeps the
// queue's poll window closed only when it found nothing.
func lookAt[T any](ctx context.Context, p *CosmosProvider, sig *queueSignal, view string, slots []int, attempt pollAttempt[T]) (T, pollOutcome, error) {
	res, outcome, err := attempt(ctx, lookScope{slots: slots})
	switch {
	case err != nil:
		sig.reopen(view)
	case outcome == outcomeEmpty:
		sig.closeFor(view, p.now(), p.cfg.PollInterval)
	case outcome == outcomeFound:
		// The attempt announced the other candidates it saw.
		sig.mayHoldMore()
	default:
		sig.reopen(view)
	}
	return res, outcome, err
}
