package cdb

// Eager starts: a start that this process's own waiting orchestration
// fetches will take is written with its instance document already locked
// to this process and its message claimed, in the start's own batch, and
// the instance is handed to a waiting fetch without a candidate query or a
// lock batch (two requests on every orchestration's critical path).
//
// The invariant is eager activities' (eager.go): an eagerly started
// instance is, in the store, exactly an instance this process's fetch
// locked: the instance document carries the lock token and expiry the lock
// batch would have written, the start message the same token, expiry and
// one attempt. So should this process die, or never hand the instance out,
// its lock expires and any fetch takes it, the start's attempt counted. The
// rules:
//   - only a start's first batch (with its new instance document) writes it
//     locked; a start written beside an instance document that existed
//     already, or claiming one, writes its message unlocked;
//   - a start with a delay is never locked (it is not due);
//   - the instance is handed out only once the batch is known to have
//     applied: from its answer, or, when an answer was lost, from a read of
//     both documents on the primary that finds this start's token on the
//     instance document (resolveLockBatch, as for a lock batch);
//   - it is handed out through the fetch's own path (makeTurn), which
//     renews a lock with less than three quarters left before handing it
//     over, and passes over one that expired.
// How many starts are locked is bounded by the orchestration fetches of
// this process that wait now, less the instances already locked or
// reserved for them. Not for busy dispatchers, as activities are: a start
// through the queue costs a dispatcher far less than an activity does (its
// query and lock batch are a turn's, not a third of it), and a dispatcher
// busy with a turn may well take queued messages next (they go first), so
// a start locked for it is often given back a poll interval later, at the
// cost of another batch.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// newEagerStarts is eager starts' registry: started instances' locked
// turns. An orchestration fetch takes any instance, so fetches register as
// the default-only tag filter and an instance has no tag.
func newEagerStarts(off bool, window time.Duration, now func() int64) *eagerReady[*lockedTurn] {
	return newEagerReady(off, false, window, now, func(t *lockedTurn) int64 { return t.until }, func(*lockedTurn) *string { return nil })
}

// eagerStart is a start written locked to this process: what its batch
// writes, and once it answered, the documents as written.
type eagerStart struct {
	token string
	until int64 // ms
	seen  int64 // ms: when the start was planned, the lock's "query time"
	msg   []byte
	doc   queueDoc
	inst  instanceDoc
	// written says the batch that wrote them answered; maybe that a send
	// of them had no answer, so they may be written.
	written, maybe bool
}

// eagerStartScope prefixes the announcement of an eagerly started
// instance: a look with it takes a ready instance or nothing, and never
// queries.
const eagerStartScope = "\x00eager/"

// reserveEagerStart locks w for a waiting fetch of this process, when one
// will take it; the caller settles it (settleEagerStart).
func (p *CosmosProvider) reserveEagerStart(w *startWrite, delay time.Duration) error {
	if delay > 0 {
		return nil
	}
	timeout, ok := p.eagerStarts.reserve(nil)
	if !ok {
		return nil
	}
	doc := w.doc
	now := p.nowMs()
	e := &eagerStart{token: newLockToken("lock_"), until: now + timeout.Milliseconds(), seen: now}
	doc.LockToken, doc.LockedUntil, doc.Attempts = e.token, e.until, 1
	msg, err := json.Marshal(doc)
	if err != nil {
		p.eagerStarts.settle(1, nil)
		return err
	}
	e.doc, e.msg = doc, msg
	w.eager = e
	return nil
}

// lockedForEagerStart sets inst's lock to w's eager one, and says which
// message body goes with it.
func (w *startWrite) lockedForEagerStart(inst *instanceDoc) []byte {
	if w.eager == nil {
		return w.msg
	}
	inst.LockToken, inst.LockedUntil = w.eager.token, w.eager.until
	return w.eager.msg
}

// eagerStartWritten records the documents a start's batch wrote locked,
// with the ETags of its answer.
func (w *startWrite) eagerStartWritten(inst instanceDoc, resp TransactionalBatchResponse) {
	if w.eager == nil {
		return
	}
	inst.ETag = resp.OperationResults[0].ETag
	w.eager.inst = inst
	w.eager.doc.ETag = resp.OperationResults[len(resp.OperationResults)-1].ETag
	w.eager.written = true
}

// settleEagerStart ends w's reservation: once its batch is known to have
// applied, the instance is ready for the waiting fetches and announced to
// them; ready says so. A start that failed (err) after a send whose answer
// was lost may have applied all the same: it is resolved too, so its
// instance is not left locked for nobody. A start that is not ready is
// announced as any other.
func (p *CosmosProvider) settleEagerStart(ctx context.Context, w startWrite, err error) (ready bool) {
	if w.eager == nil {
		return false
	}
	var t *lockedTurn
	if err == nil || w.eager.maybe {
		t = p.eagerTurn(ctx, w)
	}
	if t == nil {
		p.eagerStarts.settle(1, nil)
		return false
	}
	p.eagerStarts.settle(1, []*lockedTurn{t})
	p.orchSignal.announce(eagerStartScope + t.lock.pk)
	return true
}

// eagerTurn is the locked turn of an eager start whose batch applied, nil
// when it did not, or cannot be told.
func (p *CosmosProvider) eagerTurn(ctx context.Context, w startWrite) *lockedTurn {
	e, pk := w.eager, instancePartitionKey(w.instance)
	inst, msgs := e.inst, []queueDoc{e.doc}
	if !e.written {
		if !e.maybe {
			return nil
		}
		var err error
		inst, msgs, err = p.resolveLockBatch(ctx, pk, e.token, msgs, errEagerStartUnknown)
		if err != nil {
			return nil // not ours, or cannot tell: the lock's expiry tells
		}
	}
	lock := &orchestrationLock{token: e.token, pk: pk, timeout: time.Duration(e.until-e.seen) * time.Millisecond, inst: inst, messages: msgs, queriedAt: e.seen}
	lock.lockedUntil.Store(e.until)
	return &lockedTurn{lock: lock, inst: inst, seen: e.seen, until: e.until}
}

// errEagerStartUnknown is what resolveLockBatch answers when it cannot
// tell whether an eager start applied.
var errEagerStartUnknown = errors.New("eager start: outcome unknown")

// turnName is the orchestration a ready turn is of, as far as known.
func turnName(t *lockedTurn) string {
	if t.inst.Name != "" || len(t.lock.messages) == 0 {
		return t.inst.Name
	}
	return t.lock.messages[0].Orch
}

// takeReadyStart hands a fetch an instance this process started locked
// for it; found is false when none is ready (or none could be made).
func (p *CosmosProvider) takeReadyStart(ctx context.Context) (res fetchedOrchestration, found bool, err error) {
	for t, ok := p.eagerStarts.take(DefaultOnlyFilter(), p.nowMs()); ok; t, ok = p.eagerStarts.take(DefaultOnlyFilter(), p.nowMs()) {
		got, err := p.makeTurn(p.tel.withOrchestrationName(ctx, turnName(t)), t)
		if got != nil {
			return *got, true, nil
		}
		if t.chained {
			p.orchLocks.remove(t.lock.token)
		}
		p.announceDeferred(t.lock.pk)
		if err != nil && failsTheFetch(err) {
			return fetchedOrchestration{}, false, err
		}
		if err != nil && !errors.Is(err, errContended) {
			p.log.Error("cdb: cannot hand over an instance started here; its lock's expiry gives it back", "partitionKey", t.lock.pk, "error", err)
		}
	}
	return fetchedOrchestration{}, false, nil
}

// isEagerStartScope says a look was woken for an eagerly started instance.
func isEagerStartScope(pk string) bool { return strings.HasPrefix(pk, eagerStartScope) }
