package cdb

// Fetching an orchestration item, the decisions: which instances a look
// tries, in what order, which it passes over and for how long. The poll loop
// (poll.go) waits, the candidate query (queuequery.go) asks, the lock batch
// (orchestration_lock.go) takes, and the batch (orchestration_batch.go) is
// read with the lock kept fresh.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// fetchedOrchestration is what a successful fetch returns.
type fetchedOrchestration struct {
	item     *OrchestrationItem
	token    string
	attempts uint32
}

// FetchOrchestrationItem locks one instance that has visible messages and
// returns its batch with its current execution's history.
func (p *CosmosProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*OrchestrationItem, string, uint32, error) {
	const op = "FetchOrchestrationItem"
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, "", 0, nil // a dispatcher that supports nothing gets nothing
	}
	defer p.ownWrites.orchestrationFetch(filter)()
	defer p.readyTurns.Fetching(DefaultOnlyFilter(), lockTimeout)()
	p.orchLockTimeout.Store(int64(lockTimeout))
	fk := filterKey(filter)
	watch := queueWatch{queue: queueOrchestrator, signal: p.orchSignal, leaseKey: queueOrchestrator + "/" + fk, view: fk}
	res, found, err := poll(ctx, p, watch, pollTimeout,
		func(ctx context.Context, scope lookScope) (fetchedOrchestration, pollOutcome, error) {
			return p.tryFetchOrchestration(ctx, scope, lockTimeout, filter)
		})
	if err != nil {
		return nil, "", 0, asOperation(op, err)
	}
	if !found {
		return nil, "", 0, nil
	}
	return res.item, res.token, res.attempts, nil
}

// maxLockAttempts bounds the instances one look tries to lock.
const maxLockAttempts = 4

// filterKey names a capability filter, so contention notes of one filter do
// not hide instances from another.
func filterKey(filter *DispatcherCapabilityFilter) string {
	if filter == nil {
		return "*"
	}
	r := filter.SupportedDuroxideVersions[0]
	return strconv.FormatUint(r.Min.PackedVersion(), 10) + "-" + strconv.FormatUint(r.Max.PackedVersion(), 10)
}

// tryFetchOrchestration takes one look. A look woken for an instance
// locked ahead for this process's fetches (started or chained here) takes
// one of those (no request); so does a look woken for an instance a commit
// of this process keeps locked, whose chained turn is due now, and a look
// at the whole queue unless one is due to go to the queue first
// (queueLookDue), as tryFetchWork's. Any other look queries the queue
// first and takes a ready instance only when the queue had nothing for it.
func (p *CosmosProvider) tryFetchOrchestration(ctx context.Context, scope lookScope, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (fetchedOrchestration, pollOutcome, error) {
	if scope.readyOnly(handoff.ReadyTurn) {
		return p.lookReadyTurn(ctx, filter)
	}
	if scope.pk != "" {
		if chained, ready := p.chains.Want(scope.pk); chained {
			p.handOverChain(ctx, ready)
			return p.lookReadyTurn(ctx, filter) // none while a worker ack still writes into the chain
		}
	}
	if scope.pk == "" && !p.orchSignal.queueLookDue() {
		if res, outcome, err := p.lookReadyTurn(ctx, filter); err != nil || outcome == outcomeFound {
			return res, outcome, err
		}
	}
	res, outcome, err := p.queryAndLockOrchestration(ctx, scope, lockTimeout, filter)
	if err != nil || outcome == outcomeFound {
		return res, outcome, err
	}
	if ready, found, err := p.takeReadyTurn(ctx, filter); err != nil || found {
		return ready, outcomeFoundIf(found), err
	}
	return res, outcome, nil
}

// lookReadyTurn is a look that takes a ready turn or nothing.
func (p *CosmosProvider) lookReadyTurn(ctx context.Context, filter *DispatcherCapabilityFilter) (fetchedOrchestration, pollOutcome, error) {
	res, found, err := p.takeReadyTurn(ctx, filter)
	return res, outcomeFoundIf(found), err
}

// outcomeFoundIf is outcomeFound when found, else outcomeEmpty.
func outcomeFoundIf(found bool) pollOutcome {
	if found {
		return outcomeFound
	}
	return outcomeEmpty
}

// queryAndLockOrchestration is a look at the queue: a candidate query, then
// lock attempts on its instances, oldest first. Instances another fetch of
// this process is locking right now are passed over without a request;
// when every attempt meets contention, it queries once more without the
// contended instances, so contention does not read as emptiness.
func (p *CosmosProvider) queryAndLockOrchestration(ctx context.Context, scope lookScope, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (fetchedOrchestration, pollOutcome, error) {
	fk := filterKey(filter)
	outcome := outcomeEmpty
	if scope.pk != "" && p.wakeLater.deferIfHeld(scope.pk, p.holdsInstance) {
		return fetchedOrchestration{}, outcome, nil // announced again when this process lets it go
	}
	if scope.pk != "" {
		if res, err := p.lockSighted(ctx, scope.pk, lockTimeout, filter); err != nil || res != nil {
			if res != nil {
				return *res, outcomeFound, nil
			}
			return fetchedOrchestration{}, outcome, err
		}
	}
	for round := 0; round < 2; round++ {
		// The lock batch's condition uses the query's time, so an instance
		// is locked only if it was free when its messages were read: one
		// whose lock expired in between held messages the query did not
		// see, and a batch without them would put newer ones first, out of
		// their sender's order.
		seen := p.nowMs()
		q := candidateQuery{docType: docMessage, now: seen, pk: scope.pk, slots: scope.slots}
		if scope.pk == "" {
			// A look at one announced partition leaves nothing out: held
			// here, it was deferred above; contended, the lock attempt says so.
			q.skip = p.skippedInstances(fk)
		}
		cands, err := p.runCandidateQuery(ctx, q)
		if err != nil {
			return fetchedOrchestration{}, outcome, err
		}
		if len(cands) == 0 {
			p.sawQueue(scope, 0)
			return fetchedOrchestration{}, outcome, nil
		}
		groups := groupByInstance(cands)
		if scope.pk == "" {
			groups = p.leaveToWriters(groups, seen)
			if len(groups) == 0 {
				return fetchedOrchestration{}, outcome, nil
			}
		}
		outcome = outcomeBusy
		res, contended, err := p.lockFirstFree(ctx, groups, seen, lockTimeout, filter, fk)
		if err != nil || res != nil {
			if res != nil {
				if scope.pk == "" {
					p.announceOtherInstances(groups, res.item.Instance, seen)
					p.sawQueue(scope, oldestOf(groups, res.item.Instance))
				}
				return *res, outcomeFound, nil
			}
			return fetchedOrchestration{}, outcome, err
		}
		if !contended || scope.pk != "" {
			break // a second query of one partition would see the same
		}
	}
	p.sawQueue(scope, 0)
	return fetchedOrchestration{}, outcome, nil
}

// lockSighted locks pk's instance with what a look at the whole queue saw
// of it (sightings.go), while that is fresh. res is nil when there was no
// such sighting or the lock did not take: a message went meanwhile, the
// instance is held, or the lock failed, and the fetch queries the
// partition as it would have.
func (p *CosmosProvider) lockSighted(ctx context.Context, pk string, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*fetchedOrchestration, error) {
	s, ok := p.sightings.take(pk, p.sightingsFrom())
	if !ok || !p.locking.claim(pk) {
		return nil, nil
	}
	res, err := p.lockAndLoad(ctx, s.group, s.seen, lockTimeout, filter)
	p.locking.release(pk)
	if res == nil {
		p.announceDeferred(pk) // not taken after all
	}
	var skip *skipError
	if err != nil && !errors.As(err, &skip) && !errors.Is(err, errContended) && failsTheFetch(err) {
		return nil, err
	}
	return res, nil
}

// sightingsFrom is the time (ms) from which what a look saw of an
// instance still stands in for a query of its partition: a poll interval
// ago, at most a second.
func (p *CosmosProvider) sightingsFrom() int64 {
	return p.nowMs() - min(p.cfg.PollInterval, time.Second).Milliseconds()
}

// sawQueue tells the signal how long the instance a look at the whole
// queue (or at some slots) took had waited, from its oldest message's
// visibleAt (0: it took none). Only what a look takes counts: a
// candidate it cannot take (parked, held back, locked elsewhere) is no
// backlog of this process's.
func (p *CosmosProvider) sawQueue(scope lookScope, oldestTakenMs int64) {
	if scope.pk == "" {
		p.orchSignal.sawQueue(oldestTakenMs, scope.slots != nil)
	}
}

// oldestOf is the visibleAt of instance's oldest candidate in groups (0:
// none).
func oldestOf(groups []instanceGroup, instance string) int64 {
	pk := instancePartitionKey(instance)
	for _, g := range groups {
		if g.pk != pk {
			continue
		}
		for _, d := range g.docs {
			if d.HeldFrom == 0 {
				return d.VisibleAt // a parked message waits for its start, not for a fetch
			}
		}
	}
	return 0
}

// leaveToWriters drops the instances with a message another process wrote
// lately and takes itself (ownwrites.go), while their oldest waiting
// message is fresh. Whole instances, not messages: a batch without the
// writer's message would put later ones before it.
func (p *CosmosProvider) leaveToWriters(groups []instanceGroup, nowMs int64) []instanceGroup {
	if p.ownWrites == nil {
		return groups
	}
	return slices.DeleteFunc(groups, func(g instanceGroup) bool { return p.ownWrites.leavesInstance(g.docs, nowMs) })
}

// announceOtherInstances hands the instances a look at many partitions (at
// seen) saw but did not lock to this process's other fetches, with what it
// saw of each (sightings.go).
func (p *CosmosProvider) announceOtherInstances(groups []instanceGroup, taken string, seen int64) {
	var pks []string
	for _, g := range groups {
		if len(pks) == maxAnnouncedPerLook {
			break
		}
		if g.pk != instancePartitionKey(taken) && !p.holdsInstance(g.pk) {
			pks = append(pks, g.pk)
			if !g.parked() {
				p.sightings.keep(g, seen, p.sightingsFrom()) // a parked one's lock may only unpark: its look decides
			}
		}
	}
	p.orchSignal.announcePartitions(pks...)
}

// holdsInstance says this process holds pk's instance lock, or one of its
// fetches is taking it.
func (p *CosmosProvider) holdsInstance(pk string) bool {
	return p.locking.has(pk) || p.holdsInstanceLock(pk)
}

// lockFirstFree tries the groups in order and returns the first instance it
// locks; contended reports whether any attempt met another holder, or
// learned of an instance to leave out, so that a second query is worth it.
// Instances a fetch cannot take (held for a start, outside the filter,
// locked elsewhere, broken) are noted until they might be taken and do not
// use up the lock attempts of real contention.
func (p *CosmosProvider) lockFirstFree(ctx context.Context, groups []instanceGroup, seen int64, lockTimeout time.Duration, filter *DispatcherCapabilityFilter, fk string) (*fetchedOrchestration, bool, error) {
	tried, skipped, contended := 0, 0, false
	for _, g := range groups {
		if tried == maxLockAttempts || skipped == maxSkipsPerLook {
			break
		}
		if !p.locking.claim(g.pk) {
			contended = true
			// Another fetch of this process is locking it, maybe without
			// the messages this look saw: look again once it lets go.
			p.wakeLater.deferIfHeld(g.pk, p.holdsInstance)
			continue
		}
		res, err := p.lockAndLoad(ctx, g, seen, lockTimeout, filter)
		p.locking.release(g.pk)
		if res == nil {
			p.announceDeferred(g.pk) // not taken after all
		}
		var skip *skipError
		switch {
		case errors.As(err, &skip) && p.wakeLater.deferIfHeld(g.pk, p.holdsInstance):
			// Another fetch of this process locked it after this look
			// checked: looked at again when that fetch lets go, which
			// will not wait for its lock to expire.
			skipped++
			contended = true
			continue
		case errors.As(err, &skip):
			skipped++
			p.contended.noteUntil(fk, g.pk, p.now(), skip.until)
			contended = true
			continue
		case errors.Is(err, errContended):
			tried++
			p.contended.note(fk, g.pk, p.now())
			contended = true
			continue
		case err != nil && !failsTheFetch(err):
			// One instance's permanent trouble must not stop the queue.
			skipped++
			p.log.Error("cdb: cannot fetch an instance; passing it over", "partitionKey", g.pk, "error", err)
			now := p.now()
			p.contended.noteUntil(fk, g.pk, now, now.Add(brokenInstanceBackoff))
			contended = true
			continue
		case err != nil:
			return nil, contended, err
		case res == nil:
			tried++
			continue // orphan messages dropped
		}
		return res, contended, nil
	}
	return nil, contended, nil
}

// maxSkipsPerLook bounds the instances one look passes over for reasons
// other than contention, so a head full of them costs a bounded number of
// requests before the next query leaves them out.
const maxSkipsPerLook = 16

// brokenInstanceBackoff is how long an instance whose fetch failed
// permanently is left out of this process's queries.
const brokenInstanceBackoff = 30 * time.Second

// skipError says a candidate instance cannot be taken before until (zero
// when its messages left the head of the queue by themselves).
type skipError struct {
	until  time.Time
	reason string
}

func (e *skipError) Error() string { return "instance passed over: " + e.reason }

// failsTheFetch says an error is the store's or the caller's (a request that
// may work when retried, a cancelled context), not one instance's: the
// fetch returns it rather than pass the instance over.
func failsTheFetch(err error) bool {
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, errUndecodable):
		return false // the instance's own: it is set aside
	}
	return retryableError(err)
}

// errUndecodable marks a document of an instance that does not decode.
var errUndecodable = errors.New("undecodable document")

// skippedInstances are partitions a candidate query should leave out: those
// this process holds locked, and those it just failed to lock.
func (p *CosmosProvider) skippedInstances(fk string) []string {
	now := p.nowMs()
	skip := p.contended.active(fk, p.now())
	for _, l := range p.orchLocks.Values() {
		until := l.lockedUntil.Load()
		if now-until > forgetExpiredLocksAfter.Milliseconds() {
			p.orchLocks.Remove(l.token) // its holder never came back
			continue
		}
		if until > now && len(skip) < maxSkipped {
			skip = append(skip, l.pk)
		}
	}
	return skip
}

// forgetExpiredLocksAfter is how long a lock this process let expire is
// remembered, so its late ack still gets a clear answer.
const forgetExpiredLocksAfter = time.Minute

// errContended means another dispatcher holds the instance, or the filter
// excludes it, or a candidate went away: try the next one.
var errContended = errors.New("instance contended")

// lockAndLoad takes one instance's lock and makes its batch: the lock
// batch claims the candidate messages, the load reads what the turn needs
// (unless cached), the batch is completed with every message due to it, and
// the item is handed over, or the batch held, parked or dropped instead.
func (p *CosmosProvider) lockAndLoad(ctx context.Context, g instanceGroup, seen int64, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*fetchedOrchestration, error) {
	// The lock batch is the orchestration's cost when a message names it;
	// from the lock on, the instance document does.
	t, err := p.takeInstanceLock(p.tel.withOrchestrationName(ctx, g.orchestration()), g, seen, lockTimeout, filter)
	if err != nil {
		return nil, err
	}
	return p.makeTurn(p.tel.withOrchestrationName(ctx, t.inst.Name), t)
}

// makeTurn makes the batch of an instance whose lock is in hand.
func (p *CosmosProvider) makeTurn(ctx context.Context, t *lockedTurn) (*fetchedOrchestration, error) {
	var err error
	if t.items, t.attempts, err = p.takeDecodable(ctx, t.lock); err != nil {
		return nil, err
	}
	delivered, err := p.loadTurnState(ctx, t)
	if err != nil {
		return nil, err
	}
	if done, err := p.completeTurnBatch(ctx, t, delivered); done || err != nil {
		return nil, err
	}
	return p.handOver(ctx, t)
}

// lockedTurn is a fetch's batch while it is being made.
type lockedTurn struct {
	lock *orchestrationLock
	// inst is the instance document as the lock batch read it: the lock's
	// own copy is the renewals', which run meanwhile.
	inst        instanceDoc
	items       []WorkItem
	attempts    uint32
	seen, until int64 // ms: the candidate query's time, the lock's expiry
	// chained says the lock is one a commit kept (handover_chains.go): its messages
	// are only the completions claimed with it. requery says the batch is
	// completed from a query of the instance's partition all the same
	// (chainRequeries).
	chained, requery bool
}

// takeInstanceLock runs the lock batch on the group's first messages (at
// most a turn's worth).
func (p *CosmosProvider) takeInstanceLock(ctx context.Context, g instanceGroup, seen int64, lockTimeout time.Duration, filter *DispatcherCapabilityFilter) (*lockedTurn, error) {
	msgs := g.docs
	if len(msgs) > p.cfg.MaxMessagesPerTurn {
		msgs = msgs[:p.cfg.MaxMessagesPerTurn]
	}
	token := newLockToken("lock_")
	until := p.lockUntil(lockTimeout)
	inst, locked, err := p.lockInstance(ctx, g.pk, msgs, token, seen, until, filter)
	if err != nil {
		return nil, err
	}
	p.observeSeq(inst.Seq) // what this turn sends goes after what the last one sent
	lock := &orchestrationLock{token: token, pk: g.pk, timeout: lockTimeout, inst: inst, messages: locked, queriedAt: seen,
		leftBehind: len(g.docs) > len(msgs) || len(g.docs) >= p.cfg.CandidatesPerRange}
	lock.lockedUntil.Store(until)
	return &lockedTurn{lock: lock, inst: inst, seen: seen, until: until}, nil
}

// loadTurnState loads the instance's state and history into the lock, and
// makes sure every message the instance's own commits wrote is in the
// queue: the load (or this process's relay) knows each pending outbox, so
// one delivered after the load has its messages in place for the batch.
// delivered says an outbox was delivered just now.
func (p *CosmosProvider) loadTurnState(ctx context.Context, t *lockedTurn) (delivered bool, err error) {
	lock := t.lock
	state, err := p.loadKeepingLock(ctx, lock, &t.inst)
	if errors.Is(err, ErrInvalidLockToken) {
		return false, errContended // another dispatcher took the instance meanwhile
	}
	if err != nil {
		p.releaseQuietly(ctx, lock)
		return false, err
	}
	lock.state = state
	settled, delivered, err := p.deliverOwnOutboxes(ctx, lock)
	switch {
	case errors.Is(err, ErrInvalidLockToken):
		return false, errContended // another dispatcher took the instance meanwhile
	case err != nil:
		// The reconciler reports an outbox it cannot deliver; here it only
		// holds the batch back.
		p.log.Debug("cdb: could not deliver an instance's own outbox before its fetch", "instance", t.inst.Instance, "error", err)
		return false, p.holdBack(ctx, lock, "messages of its own commits wait in an outbox")
	case !settled:
		return false, p.holdBack(ctx, lock, "messages of its own commits wait in an outbox")
	}
	return delivered, nil
}

// completeTurnBatch adds to the batch the messages the lock batch could not
// see (parked ones released, an outbox just delivered, a continue-as-new's
// message, messages released since the query) and drops those sent to
// another life of the instance. done says the fetch ends here, without an
// item: the instance was held back or its strays dropped.
func (p *CosmosProvider) completeTurnBatch(ctx context.Context, t *lockedTurn, delivered bool) (done bool, err error) {
	lock, inst := t.lock, &t.inst
	unpark := p.releasesParked(inst, t.items)
	if t.requery || unpark || delivered || inst.Status == StatusContinuedAsNew && !hasContinueAsNew(t.items) || releasedSince(inst, t.seen) {
		limit := p.cfg.MaxMessagesPerTurn
		if t.chained {
			limit = p.chainRoom
		}
		if t.items, t.attempts, err = p.completeBatch(ctx, lock, t.seen, t.until, unpark, limit); err != nil {
			p.releaseQuietly(ctx, lock)
			return true, err
		}
	}
	if inst.Status == StatusContinuedAsNew && !hasContinueAsNew(t.items) {
		if err := p.holdWithoutContinueAsNew(ctx, lock); err != nil {
			return true, err
		}
	}
	if t.items, err = p.withoutStrays(ctx, lock, t.items); err != nil {
		p.releaseQuietly(ctx, lock)
		return true, err
	}
	if len(t.items) == 0 && len(lock.strays) > 0 {
		return true, p.dropStrays(ctx, lock)
	}
	if len(t.items) == 0 && t.chained {
		p.releaseQuietly(ctx, lock) // what it was wanted for was taken meanwhile
		return true, nil
	}
	return false, nil
}

// handOver builds the item and gives it to the runtime under a fresh
// lock, unless the batch is for an instance never started: orphans are
// dropped, messages that overtook their start are parked for it.
func (p *CosmosProvider) handOver(ctx context.Context, t *lockedTurn) (*fetchedOrchestration, error) {
	lock := t.lock
	item, kind := p.buildItem(&t.inst, lock.state, t.items)
	item.VisibleAt = batchVisibleAt(lock)
	if kind != batchOrdinary {
		var err error
		if kind, err = p.startHidden(ctx, lock, item, kind); err != nil {
			p.releaseQuietly(ctx, lock)
			return nil, err
		}
	}
	if kind == batchOrphans {
		return nil, p.dropOrphans(ctx, lock)
	}
	if kind == batchBeforeStart && p.waitingForStart(lock.messages) {
		// Messages that overtook their instance's start (a cancel, an
		// event): keep them for the start rather than consume them.
		return nil, p.park(ctx, lock, startDeadline(lock.messages), "waiting for the instance's start")
	}
	if err := p.refreshFreshLock(ctx, lock); err != nil {
		return nil, err
	}
	p.orchLocks.Put(lock.token, lock)
	return &fetchedOrchestration{item: item, token: lock.token, attempts: t.attempts}, nil
}

// How long a fetch leaves out an instance it learned it cannot take: one
// being deleted; one locked elsewhere (at most until its lock expires);
// one whose pinned version its filter excludes (that changes only when a
// compatible dispatcher continues it as new), at first, and at most after
// misses in a row (filterMisses).
const (
	deletingBackoff      = 5 * time.Second
	maxHeldLockSkip      = 30 * time.Second
	filterMissBackoff    = 10 * time.Second
	maxFilterMissBackoff = 5 * time.Minute
)
