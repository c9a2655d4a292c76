package cdb

// Chained turns: a turn whose activities this process's own workers run
// (locked eagerly for them, or held by them now) keeps its instance locked
// to this process when it commits, and those workers' acks write the
// completions already claimed with the kept lock (H1, H8). The next turn
// is then made of those completions without a request, and waits for the
// completions of its sibling activities instead of taking them one a
// turn; it reads the instance's partition (one query under the lock,
// completeBatch) only when chainRequeries says so, so that what others
// send the instance is read at least once a poll interval. The chains
// table is internal/handoff's (Chains).
//
// Only a commit batch that holds the whole turn (no outbox) of a running
// instance whose activities this process runs writes a chain; its token is
// a fixed-length digest of the ack's lock token, so every try of one ack
// writes the same one, however many chains came before (H6, R18). A chain
// awaits the activities of its instance this process's workers held or
// were locked for at its start, and those they take while it waits. It is
// handed to a fetch at once when the completion that ends the fan-in
// comes (every awaited activity completed here) or when its turn is full
// (chainTurnMessages: as many as its commit batch has room for); at a gap,
// completionCoalescing after the last completion; at the latest
// chainMaxHold after the first; and as soon as anything else is announced
// for the instance in this process (runChains looks every coalescing
// interval, and none is ended while a worker ack writes into it, H8).
// Invariant: a chain holds a completion no longer than chainMaxHold (and
// the loop's next look), and the one that ends its fan-in not at all; it
// is handed over with at least five eighths of its lock left. It
// is given back (an abandon that counts no attempt, the claimed
// completions with it) when nothing completed within the chain's window,
// when the ready turn waited a poll interval for a fetch, and at Close
// (H5). A worker ack that cannot tell whether it wrote its completion
// counts as a completion that came, and the chained turn then queries: it
// finds the completion by the chain's token if it was written.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// completionCoalescing is how long a chained turn waits, after the latest
// completion of its activities, for the others: activities a turn
// scheduled together finish together, and their acks land within a few
// milliseconds of each other; waiting a little longer than that saves a
// turn per activity and costs a race of activities at most this.
const completionCoalescing = 25 * time.Millisecond

// chainHoldWindows is how many coalescing intervals a chain holds its
// first completion at most while others keep coming within the gap.
const chainHoldWindows = 4

// chainMaxHold is how long a chain of a lock of timeout holds its first
// completion at most, waiting for others: a few coalescing intervals, so
// that a fan-in whose completions keep trickling in is taken a few turns
// rather than one a completion, and at most an eighth of the lock, which
// a chain's window (a quarter at most) and this leave far from its expiry,
// and within what a lock may have used and still go to the runtime
// unrenewed (leftToHandOut) for a lock of 4 s or more.
func chainMaxHold(timeout time.Duration) time.Duration {
	return min(chainHoldWindows*completionCoalescing, timeout/8)
}

// chainTurnReserve is the operations of a chained turn's commit batch
// kept for the turn's own documents: the instance, its execution, its
// history and the history's staged parts (a turn of 80 completions of
// 64 KB, the most a chain claims, stages six), KV chunks, an output's
// staged part, an outbox document; what the turn sends beyond that goes
// through the outbox, as it would for any large turn.
const chainTurnReserve = 20

// chainTurnMessages is how many completions a chained turn takes: as many
// as its commit batch, which consumes each, has room for. Not
// MaxMessagesPerTurn, which bounds what a fetch's lock batch claims (one
// operation each, beside the instance's): a chain's completions come
// claimed by their worker acks, and a fan-in of 50 took two turns under
// it.
const chainTurnMessages = MaxBatchOperations - chainTurnReserve

// chainToken is the lock token an ack writes on the instance it keeps: the
// same for every try of the ack, and of one length however many chains
// came before (the ack's own token may be a chain's): every document id
// derived from a token must stay within Cosmos DB's id limit (R18).
func chainToken(ackToken string) string {
	digest := sha256.Sum256([]byte(ackToken))
	return "lock_chain." + hex.EncodeToString(digest[:16])
}

// chain is an instance this process's commit kept locked (handoff.Chain):
// its lock, and the completions claimed with it.
type chain = handoff.Chain[*orchestrationLock, activityKey, queueDoc]

// chainTable is this process's chains, by partition key.
type chainTable = handoff.Chains[*orchestrationLock, activityKey, queueDoc]

// activityKey names an activity of an instance.
type activityKey struct{ exec, id uint64 }

// chainWindow is how long a chained instance waits for a first completion
// before it is given back.
func (p *CosmosProvider) chainWindow(lockTimeout time.Duration) time.Duration {
	return min(p.cfg.PollInterval, lockTimeout/4)
}

// chainLockFor is how long a chain keeps its instance locked: its turn's
// lock timeout beyond the longest the chain may wait before the turn is
// handed out (its window for a first completion, its hold after the last,
// and a poll interval ready for a fetch, after which it is given back), so
// that the turn goes to the runtime with a whole lock (H3) and no renewal
// first, however long a busy runtime's dispatchers took to fetch it. The
// wait counted is at most half the timeout: a chain whose process died
// leaves its instance locked at most half a timeout longer than a lock.
func (p *CosmosProvider) chainLockFor(lockTimeout time.Duration) time.Duration {
	wait := p.chainWindow(lockTimeout) + chainMaxHold(lockTimeout) + p.cfg.PollInterval
	return lockTimeout + min(wait, lockTimeout/2)
}

// chainPatience is how long a chain of a lock of lockTimeout waits, and
// for how many completions (handoff.Patience).
func (p *CosmosProvider) chainPatience(lockTimeout time.Duration) handoff.Patience {
	return handoff.Patience{Window: p.chainWindow(lockTimeout), Hold: chainMaxHold(lockTimeout), Room: p.chainRoom}
}

// mayChain says a commit of lock that releases inst may keep it locked to
// this process instead (see the rules above), if its documents all fit the
// batch: it is running, and some of its activities run here, or will
// within the chain's window. Activities locked eagerly behind a backlog of
// this process's ready items (a busy process's workers take them seconds
// later) would see the chain given back unused, a request for nothing:
// their completions reach the next turn through the queue.
func (p *CosmosProvider) mayChain(lock *orchestrationLock, inst instanceDoc, w *ackWriter) bool {
	if p.chains == nil || inst.Status != StatusRunning || len(w.remote) > 0 {
		return false
	}
	if len(p.activitiesRunningHere(lock.pk)) > 0 {
		return true
	}
	return w.eagerPending() && w.reservation.Wait() <= p.chainWindow(lock.timeout)
}

// chainedInstance is inst kept locked, by the ack of lock, to this
// process: under the chain's token, until then (ms; a lock's length from
// now, lockUntil).
func chainedInstance(inst instanceDoc, lock *orchestrationLock, until int64) instanceDoc {
	inst.LockToken = chainToken(lock.token)
	inst.LockedUntil = until
	return inst
}

// chainLock is the lock a chain holds on kept, the instance document its
// commit writes.
func chainLock(lock *orchestrationLock, kept instanceDoc) *orchestrationLock {
	held := &orchestrationLock{token: kept.LockToken, pk: lock.pk, timeout: lock.timeout, inst: kept, queriedAt: lock.queriedAt}
	held.lockedUntil.Store(kept.LockedUntil)
	return held
}

// startChain records a committed chain (its instance document's ETag from
// the commit, if known) and hands its lock to this process's fetches'
// view, so that they leave the instance to it. ready are the items the
// commit made ready for this process's fetches, whose completions the
// chain awaits.
func (p *CosmosProvider) startChain(ctx context.Context, held *orchestrationLock, plan *ackPlan, ready []*workLock) {
	held.inst.ETag = plan.inst.ETag
	since := held.lockedUntil.Load() - p.chainLockFor(held.timeout).Milliseconds() // the plan's time
	awaiting := p.activitiesRunningHere(held.pk)
	for _, l := range ready {
		awaiting = append(awaiting, l.activity)
	}
	hi := newChain(held, since, p.chainPatience(held.timeout), awaiting)
	if held.inst.ETag == "" {
		p.giveBackChain(ctx, hi) // an earlier try committed it: its ETag is read
		return
	}
	p.orchLocks.Put(held.token, held)
	p.chains.Add(hi)
	if p.closing.Load() { // Keeps: H5: Close may have given back the chains already
		for _, c := range p.chains.End(func(c *chain) bool { return c == hi }) {
			p.giveBackChain(ctx, c)
		}
	}
}

// newChain is the chain of held, kept since (ms), waiting for the
// completions of awaiting.
func newChain(held *orchestrationLock, since int64, patience handoff.Patience, awaiting []activityKey) *chain {
	return handoff.NewChain[*orchestrationLock, activityKey, queueDoc](held, held.pk, held.token, held.lockedUntil.Load, since, patience, awaiting)
}

// activitiesRunningHere are the activities of pk's instance this
// process's workers hold now: their completions are written here.
func (p *CosmosProvider) activitiesRunningHere(pk string) []activityKey {
	var out []activityKey
	for _, l := range p.workLocks.Values() {
		if l.pk == pk {
			out = append(out, l.activity)
		}
	}
	return out
}

// handOverChain makes a chained instance's turn ready for this process's
// orchestration fetches, or gives the chain back when no completion came.
func (p *CosmosProvider) handOverChain(ctx context.Context, hi *chain) {
	if hi == nil {
		return
	}
	if hi.Refused {
		p.releaseRefusedChain(ctx, hi)
		return
	}
	if len(hi.Claimed) == 0 && !hi.Announced && !hi.Unsure || hi.Unconfirmed || p.closing.Load() { // Keeps: H5, H6
		p.giveBackChain(ctx, hi)
		return
	}
	lock, now := hi.Lock, p.nowMs()
	lock.messages = hi.Claimed
	t := &lockedTurn{lock: lock, inst: lock.inst, seen: now, until: lock.lockedUntil.Load(), chained: true, requery: p.chainRequeries(hi)}
	p.readyTurns.Offer(t)
	p.orchSignal.announce(handoff.TurnReady(lock.pk))
	p.giveBackIfClosing(ctx) // Keeps: H5: Close may have begun since the check above, and given back the ready turns already
}

// chainRequeries says a chained turn's batch is completed from a query of
// its partition rather than made of the completions the chain claimed:
// something else was announced for the instance, an ack could not tell
// whether it wrote its completion, or this process last read the
// instance's messages a poll interval ago or more. (A chain claims no
// more completions than its turn has room for.)
// The last keeps what others send a held instance from waiting on a chain
// of chains: while this process holds an instance, its messages are read
// at least once a poll interval, as its polling would.
func (p *CosmosProvider) chainRequeries(hi *chain) bool {
	return hi.Announced || hi.Unsure || p.readLongAgo(hi.Lock)
}

// readLongAgo says this process last read the messages of lock's instance
// a poll interval ago or more. A chained turn asks it twice: when it is
// made ready and when a fetch takes it, which a busy runtime may do later.
func (p *CosmosProvider) readLongAgo(lock *orchestrationLock) bool {
	return p.nowMs()-lock.queriedAt >= p.cfg.PollInterval.Milliseconds()
}

// giveBackChain releases a chain, as an abandon that counts no attempt:
// the instance and the completions claimed with it. A chain whose instance
// was not read (its commit's answer did not give the ETag) is read first;
// when that read fails, it waits unconfirmed for the next try while its
// lock could still hold (H6).
func (p *CosmosProvider) giveBackChain(ctx context.Context, hi *chain) {
	ctx, cancel := givingBack(ctx) // ended: nobody else gives it back
	defer cancel()
	lock := hi.Lock
	ctx = p.keepingOrchestrationLock(ctx, lock)
	lock.messages = hi.Claimed
	defer p.orchLocks.Remove(lock.token)
	if lock.inst.ETag == "" {
		inst, err := p.readInstanceLatest(ctx, lock.pk)
		if err != nil {
			p.keepUnconfirmed(hi)
			return
		}
		if inst == nil || inst.LockToken != lock.token {
			return // not kept, or given back or taken over since
		}
		lock.inst = *inst
	}
	if err := p.releaseQuietly(ctx, lock); err != nil && IsRetryable(err) {
		lock.inst.ETag = "" // it may have applied: read back first
		p.keepUnconfirmed(hi)
		return
	}
	p.orchSignal.announcePartitions(lock.pk)
}

// keepUnconfirmed keeps a chain whose instance could not be read back, to
// be given back at its window's end or at Close, while its lock could
// still hold; a chain this process keeps on the instance since goes first.
func (p *CosmosProvider) keepUnconfirmed(hi *chain) {
	lock, now := hi.Lock, p.nowMs()
	if lock.lockedUntil.Load() <= now {
		return // expired: anyone may take the instance
	}
	kept := newChain(lock, now, handoff.Patience{Window: p.chainWindow(lock.timeout)}, nil)
	kept.Claimed = hi.Claimed // Keeps: H8: released with the instance when it is given back
	instance := lock.inst.Instance
	// Once in the table the lock is the chain's next giver's (a fetch
	// woken for its partition, the chain loop): not touched here again.
	if !p.chains.AddUnconfirmed(kept) {
		return
	}
	p.log.Debug("cdb: a chained instance could not be read back; it is given back once it is", "instance", instance)
}

// giveBackAllChains gives back every chain, as the provider closes, a few
// at a time.
func (p *CosmosProvider) giveBackAllChains(ctx context.Context) {
	atOnce(p.chains.All(), giveBacksAtOnce, func(hi *chain) { p.giveBackChain(ctx, hi) })
}

// giveBackUnseenChain gives back the chain a try of lock's ack may have
// committed unseen: the try that answered found the instance changed, or
// no try could be told, and the plan that committed may have held it. Its
// lock holds a chain's lock (chainLockFor) from now at most. giveBackChain reads on a
// context of its own: the ack's caller may have gone (a stopping runtime),
// and the chain is this process's to give back all the same.
func (p *CosmosProvider) giveBackUnseenChain(ctx context.Context, lock *orchestrationLock) {
	if p.chains == nil {
		return
	}
	held := &orchestrationLock{token: chainToken(lock.token), pk: lock.pk, timeout: lock.timeout, inst: lock.inst}
	held.inst.ETag = ""
	held.lockedUntil.Store(p.lockUntil(p.chainLockFor(lock.timeout)))
	p.giveBackChain(ctx, newChain(held, 0, handoff.Patience{}, nil))
}

// runChains hands over or gives back the chained instances that are due, every
// coalescing interval, until ctx ends. Those due together go a few at a
// time: a give-back is a request, and one at a time a busy process's loop
// would fall behind its chains' windows (at 70 ms a request, about 14 a
// second), its chains outliving their locks while their instances wait.
func (p *CosmosProvider) runChains(ctx context.Context) {
	runEvery(ctx, completionCoalescing, func() {
		atOnce(p.chains.Due(p.nowMs(), completionCoalescing), giveBacksAtOnce, func(hi *chain) { p.handOverChain(ctx, hi) })
	})
}

// chainedCompletion is a worker ack's claim on a chain of its instance, and
// the completion it writes claimed with it. opens is the chain's lock when
// the ack's own batch must take it (a chain the ack opened).
type chainedCompletion struct {
	claim   handoff.Claim[activityKey]
	claimed bool
	opens   *orchestrationLock
	doc     *queueDoc // nil: written as it was
	body    []byte
}

// claimForChain claims, for the completion message msg (of encoded size
// bytes) a worker ack writes into its instance's own partition, a chain of
// this process on the instance, or opens one (ackChain): the completion is
// then written claimed with the chain. The claim is settled whatever
// becomes of the ack (settle).
func (p *CosmosProvider) claimForChain(lock *workLock, msg *queueDoc, bytes int) chainedCompletion {
	if msg == nil || bytes > lockContentMaxBytes {
		return chainedCompletion{} // none, another partition's (an outbox), or a large one (encoded again for little)
	}
	now := p.nowMs()
	opened := p.ackChain(lock, now)
	c, opening, ok := p.chains.Open(lock.pk, lock.activity, now, func() *chain { return opened })
	if !ok {
		return chainedCompletion{}
	}
	hc := chainedCompletion{claim: c, claimed: true}
	if opening {
		hc.opens = opened.Lock
	}
	m := *msg
	m.LockToken, m.LockedUntil, m.Attempts = c.Token, c.Until, 1
	if encoded, err := json.Marshal(m); err == nil {
		hc.doc, hc.body = &m, encoded
	}
	return hc
}

// ackChain is the chain a worker ack of lock opens when its instance has
// none (nil when it opens none): while other activities of the instance
// run here, the ack locks the instance in its own batch, and their acks
// write their completions claimed with it, so that the turn they make
// needs no candidate query and no lock batch (a busy process's turns went
// through the queue: its commits keep no chain for activities that wait
// seconds behind a backlog). Not while this process holds or is locking
// the instance, nor in a process that runs no orchestration fetch. The
// instance was free until the ack locked it, so what others sent it was
// there for every look: the chain counts its messages read at its opening.
func (p *CosmosProvider) ackChain(lock *workLock, now int64) *chain {
	timeout := time.Duration(p.orchLockTimeout.Load())
	if p.chains == nil || timeout <= 0 || p.closing.Load() || p.holdsInstance(lock.pk) {
		return nil
	}
	var awaiting []activityKey
	for _, a := range p.activitiesRunningHere(lock.pk) {
		if a != lock.activity {
			awaiting = append(awaiting, a)
		}
	}
	if len(awaiting) == 0 {
		return nil // the last running here: its completion takes the queue, as others may be on their way there
	}
	held := &orchestrationLock{token: chainToken(lock.token), pk: lock.pk, timeout: timeout, queriedAt: now}
	held.lockedUntil.Store(p.lockUntil(p.chainLockFor(timeout)))
	return newChain(held, now, p.chainPatience(timeout), awaiting)
}

// openChainOps lock the instance document for a chain its worker ack
// opens: free, or expired, and not being deleted, as a fetch's lock batch
// takes it.
func (p *CosmosProvider) openChainOps(held *orchestrationLock) PatchOperations {
	var ops PatchOperations
	ops.SetCondition(lockCondition(p.expiredByMs(), nil))
	ops.AppendSet("/lockToken", held.token)
	ops.AppendSet("/lockedUntil", held.lockedUntil.Load())
	return ops
}

// chainOpened records what the ack that opened a chain learned: the
// instance document its batch locked (its answer's, or none when the
// ack's outcome was read back), refused when the instance could not be
// locked. An opened chain's lock joins this process's own, so its fetches
// leave the instance to it.
func (p *CosmosProvider) chainOpened(hc chainedCompletion, inst *instanceDoc, refused bool) {
	if hc.opens == nil {
		return
	}
	if inst != nil {
		p.observeSeq(inst.Seq) // what its turn sends goes after what the last one sent
		hc.opens.inst = *inst
		p.orchLocks.Put(hc.opens.token, hc.opens)
	}
	p.chains.Opened(hc.claim, inst != nil, refused)
}

// releaseRefusedChain releases the completions claimed into a chain whose
// opening ack could not lock the instance, and announces them to this
// process's fetches: each only while the chain's token still holds it (one
// that expired since may be another fetch's now).
func (p *CosmosProvider) releaseRefusedChain(ctx context.Context, hi *chain) {
	ctx, cancel := givingBack(ctx) // ended: nobody else releases them
	defer cancel()
	msgs := hi.Claimed
	for len(msgs) > 0 {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(hi.PK))
		for _, m := range msgs {
			ops := unlockOps()
			ops.AppendSet("/attempts", 0)
			ops.SetCondition("from c where c.lockToken = '" + hi.Token + "'")
			b.PatchItem(m.ID, ops, nil)
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			p.log.Warn("cdb: could not release the completions of a chain its worker ack could not open; they are taken once their lock expires", "partitionKey", hi.PK, "error", err)
			return
		}
		if resp.Success {
			break
		}
		idx, opErr := resp.FailedOperation()
		if idx < 0 || idx >= len(msgs) || !missingOrChanged(opErr) {
			p.log.Warn("cdb: could not release the completions of a chain its worker ack could not open; they are taken once their lock expires", "partitionKey", hi.PK, "error", opErr)
			return
		}
		msgs = slices.Delete(slices.Clone(msgs), idx, idx+1) // taken or released since: not this chain's to release
	}
	p.orchSignal.announcePartitions(hi.PK)
}

// settle ends the claim: written is the completion as the ack wrote it,
// nil when it did not, or cannot tell (unsure). It returns the chained
// instance when its turn is due now.
func (hc chainedCompletion) settle(p *CosmosProvider, written *queueDoc, unsure bool) *chain {
	if !hc.claimed {
		return nil
	}
	return p.chains.Completed(hc.claim, written, unsure, p.nowMs())
}
