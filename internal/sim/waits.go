package sim

// Completion waits (wait): one in waitShare of the instances the scenarios
// start and then leave alone (not deleted, pruned, started again, nor
// continued as new) is followed by a waiter, durable.Client's
// WaitForCompletion through a node that runs orchestrations: the node
// whose client started it when that one does, since its runtime may take
// the start at once and hold the instance, so that the wait is told the
// end by the ending commit and skips its reads while the instance is held
// (endwatch.go). A waiter whose node crashes or is shut down waits again
// through another (redone), as does one whose reads met a burst of
// refusals the run injected (isInjectedRefusal). So:
//   - a wait returns the state and output (or failure) the scenario
//     expects;
//   - the store holds the end a wait returns: the observer's read right
//     after it is the same terminal status (a told status is the commit's,
//     never one the store does not hold yet);
//   - a wait through a node that stayed up returns within its bound of the
//     end becoming visible to the observer (or of its own start, when that
//     was later). A pause of the node, a fault on one of its requests to
//     the instance's partition, or a jump of the simulated clock in
//     between excuses a later return (excused); the bound then counts from
//     the last of them. The bound is drawn for the host as the run
//     measured it at its start, and widens in proportion when the host was
//     measured slower while the wait ran (slowed; hostspeed.go).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

const (
	// waitShare: one instance in waitShare is followed by a waiter.
	waitShare = 4
	// waitLookEvery is how often a waiter sees whether its node is up and
	// reads, through the observer, whether the end is visible yet.
	waitLookEvery = 25 * time.Millisecond
	// waitTimeout is WaitForCompletion's own bound; the run's end cuts the
	// wait long before.
	waitTimeout = time.Hour
	// waitPollMost is the client's poll backoff at its longest (a
	// second, once a wait has lasted five): a wait that reads learns of an
	// end at most this late, plus a read.
	waitPollMost = time.Second
)

// completionWaits are the run's waiters and what they counted.
type completionWaits struct {
	ctx      context.Context // ends every wait
	cancel   context.CancelFunc
	env      *env
	observer *rt.Client
	viol     *violations
	nodes    func() []*node // the nodes up now
	wg       sync.WaitGroup

	// host samples the host's slowness while waits run: a bound follows
	// the host as it was during the wait, not only at the run's start.
	host *hostWatch

	mu      sync.Mutex
	waiters []*waiter
	totals  waitTotals
}

// waitTotals are the report's counts.
type waitTotals struct {
	// onStarter: waits that began through the node their start went
	// through (the told and held paths are likelier there); slowed: waits
	// that returned past the bound drawn for the host at the run's start,
	// within the one the host's slowness during the wait gave them
	waits, onStarter, told, held, reads, redone, excused, slowed, unreturned int
}

// waiter follows one instance.
type waiter struct {
	e   *expectation
	rng *rand.Rand // its own goroutine's

	// Guarded by completionWaits.mu.
	node     *node     // the node of the attempt under way; nil between attempts
	began    time.Time // when that attempt began
	seenEnd  time.Time // when the observer first read the instance ended (zero: not yet)
	returned bool
	// overdue is the node it was still waiting through past its bound
	// (overdueBound) when the run's waits were settled, since overdueFrom.
	overdue      *node
	overdueFrom  time.Time
	overdueBound time.Duration
}

// attemptEnd is how one attempt of a wait ended.
type attemptEnd int

const (
	attemptDone attemptEnd = iota // returned (checked), failed for good, or cut by the run's end
	attemptRedo                   // its node went down, or a retryable error: wait again
)

// waitAnswer is what WaitForCompletion returned, and when.
type waitAnswer struct {
	st  rt.Status
	err error
	at  time.Time
}

func newCompletionWaits(ctx context.Context, e *env, observer *rt.Client, viol *violations, nodes func() []*node) *completionWaits {
	ctx, cancel := context.WithCancel(ctx)
	return &completionWaits{ctx: ctx, cancel: cancel, env: e, observer: observer, viol: viol, nodes: nodes, host: &hostWatch{}}
}

// follow starts a waiter for e's instance, when the seed's draw for it says
// so; through is the client its start was accepted by.
func (w *completionWaits) follow(e *expectation, through *rt.Client) {
	if w == nil || e == nil || !awaitable(e) {
		return
	}
	rng := rand.New(rand.NewSource(w.env.cfg.Seed ^ idHash(e.instance)))
	if rng.Intn(waitShare) != 0 {
		return
	}
	w.host.start(w.ctx, &w.wg)
	wt := &waiter{e: e, rng: rng}
	first := w.runnerThrough(through)
	w.mu.Lock()
	w.waiters = append(w.waiters, wt)
	w.totals.waits++
	if first != nil {
		w.totals.onStarter++
	}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run(wt, first)
	}()
}

// awaitable: an instance that must end completed or failed and stays so.
// An Inbox continues as new and is pruned; the scenarios that delete or
// start an id again do not come through startAwaited.
func awaitable(e *expectation) bool {
	return e.spec.Kind != kindInbox && (e.want.State == rt.StateCompleted || e.want.State == rt.StateFailed)
}

// idHash draws a waiter from the seed and the instance's id, so the choice
// does not depend on the order the scenarios' goroutines get here in.
func idHash(id string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return int64(h.Sum64())
}

// runnerThrough is the node whose client through is, when it is up and
// runs orchestrations (nil otherwise: the application's client).
func (w *completionWaits) runnerThrough(through *rt.Client) *node {
	for _, n := range w.nodes() {
		if n.client == through && runsTurns(n) {
			return n
		}
	}
	return nil
}

// runsTurns: a node whose runtime takes orchestration turns (not a
// worker-only node, nor an old build that replays no version in use).
func runsTurns(n *node) bool {
	return n.runtime != nil && !n.settings.runtime.WorkerOnly && n.settings.runtime.SupportedReplayVersions == nil
}

// pick draws a live node that runs orchestrations, waiting while none is
// up (a slot restarting); nil when the run's waits end first.
func (w *completionWaits) pick(wt *waiter) *node {
	for {
		var up []*node
		for _, n := range w.nodes() {
			if runsTurns(n) {
				up = append(up, n)
			}
		}
		if len(up) > 0 {
			return up[wt.rng.Intn(len(up))]
		}
		if !sleepCtx(w.ctx, 20*time.Millisecond) {
			return nil
		}
	}
}

// run waits for wt's instance through n, and again through another node
// each time the one it waits through goes down.
func (w *completionWaits) run(wt *waiter, n *node) {
	for {
		if n == nil || n.down.Load() {
			if n = w.pick(wt); n == nil {
				return
			}
		}
		if w.attempt(wt, n) == attemptDone {
			return
		}
		w.count(&w.totals.redone, 1)
		if !sleepCtx(w.ctx, 20*time.Millisecond) {
			return
		}
	}
}

// attempt is one WaitForCompletion through n, watched: the attempt is cut
// when n goes down, and meanwhile the observer looks for the end.
func (w *completionWaits) attempt(wt *waiter, n *node) attemptEnd {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	counts := &waitCounts{}
	client := rt.NewClient(countedProvider{CosmosProvider: n.provider, counts: counts})
	w.beginAttempt(wt, n)
	answered := make(chan waitAnswer, 1)
	go func() {
		st, err := client.WaitForCompletion(ctx, wt.e.instance, waitTimeout)
		answered <- waitAnswer{st: st, err: err, at: time.Now()}
	}()
	look := time.NewTicker(waitLookEvery)
	defer look.Stop()
	for {
		select {
		case a := <-answered:
			w.tally(counts)
			return w.answered(wt, n, a, counts)
		case <-look.C:
			if n.down.Load() {
				w.env.logger.Info("wait redone", "instance", wt.e.instance, "node", n.id, "down", true)
				cancel()
				<-answered
				w.tally(counts)
				w.endAttempt(wt)
				return attemptRedo
			}
			w.lookForEnd(wt)
		}
	}
}

func (w *completionWaits) beginAttempt(wt *waiter, n *node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.node, wt.began = n, time.Now()
}

func (w *completionWaits) endAttempt(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.node = nil
}

// answered handles what one attempt returned.
func (w *completionWaits) answered(wt *waiter, n *node, a waitAnswer, counts *waitCounts) attemptEnd {
	switch {
	case a.err == nil:
		w.check(wt, n, a, counts)
		return attemptDone
	case w.ctx.Err() != nil:
		return attemptDone // the run's waits ended: finish judged it
	case n.down.Load() || errors.Is(a.err, errNodeDown) || cdb.IsRetryable(a.err) || isInjectedRefusal(a.err):
		w.env.logger.Info("wait redone", "instance", wt.e.instance, "node", n.id, "down", n.down.Load(), "error", a.err)
		w.endAttempt(wt)
		return attemptRedo
	}
	w.markReturned(wt)
	w.viol.add(invWait, wt.e.instance, fmt.Sprintf("WaitForCompletion through %s failed: %v", n.id, a.err))
	return attemptDone
}

// isInjectedRefusal says err is a refusal (401, 403) the run injected:
// the application's requests meet none at random, so it is a burst on the
// node's reads of a partition (lostAnswerUnreadable), past the client's
// tries. A real account refuses so for a moment (a credential or a role
// propagating), and a wait that reports it to its application, which
// waits again, did its job.
func isInjectedRefusal(err error) bool {
	var ce *cdb.CosmosError
	if !errors.As(err, &ce) || ce.StatusCode != 401 && ce.StatusCode != 403 {
		return false
	}
	return strings.Contains(ce.Message, injectedFaultMessage)
}

// lookForEnd notes when the observer first reads the instance ended.
func (w *completionWaits) lookForEnd(wt *waiter) {
	w.mu.Lock()
	seen := !wt.seenEnd.IsZero()
	w.mu.Unlock()
	if seen {
		return
	}
	st, err := w.observer.GetStatus(w.ctx, wt.e.instance)
	if err != nil || !st.IsTerminal() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.seenEnd.IsZero() {
		wt.seenEnd = time.Now()
	}
}

func (w *completionWaits) markReturned(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt.returned = true
}

// check checks a wait that returned an end: what the scenario expects,
// what the store holds right after, and how soon.
func (w *completionWaits) check(wt *waiter, n *node, a waitAnswer, counts *waitCounts) {
	id := wt.e.instance
	// Read at once, and to the end even when the run's waits are ending:
	// the comparison is with the store as the wait returned.
	stored, err := w.observer.GetStatus(context.WithoutCancel(w.ctx), id)
	w.mu.Lock()
	wt.returned = true
	began, seen := wt.began, wt.seenEnd
	if counts.toldWithoutRead() {
		w.totals.told++
	}
	w.mu.Unlock()
	got := describeStatus(a.st)
	switch {
	case err != nil:
		w.viol.add(invHarness, id, fmt.Sprintf("read status after a wait: %v", err))
	case !a.st.IsTerminal():
		w.viol.add(invWait, id, fmt.Sprintf("WaitForCompletion through %s returned %s, which is no end (the store reads %s)", n.id, got, describeStatus(stored)))
	case !stored.IsTerminal():
		w.viol.add(invWait, id, fmt.Sprintf("WaitForCompletion through %s returned %s, but the store reads %s right after", n.id, got, describeStatus(stored)))
	case !sameEnd(a.st, stored):
		w.viol.add(invWait, id, fmt.Sprintf("WaitForCompletion through %s returned %s, but the store reads %s", n.id, got, describeStatus(stored)))
	}
	if _, detail := outcomeMismatch(wt.e, a.st); detail != "" {
		w.viol.add(invWait, id, fmt.Sprintf("WaitForCompletion through %s returned what the scenario does not expect: %s", n.id, detail))
	}
	w.checkPrompt(wt, n, a.at, began, seen)
}

// sameEnd: two terminal statuses with the same state, output and failure.
func sameEnd(a, b rt.Status) bool {
	return a.State == b.State && a.Output == b.Output && describeStatus(a) == describeStatus(b)
}

// checkPrompt: a wait through a node that stayed up returned within its
// bound of the end becoming visible (or of the attempt's start, when
// later), unless the node was held back in between.
func (w *completionWaits) checkPrompt(wt *waiter, n *node, returned, began, seen time.Time) {
	if seen.IsZero() || w.env.rec.goneBy(n.id, returned) {
		return // it returned before the observer read the end, or its node went down
	}
	from := later(seen, began)
	bound := w.boundOver(n, from, returned)
	late := returned.Sub(from)
	if late <= bound {
		if late > w.bound(n) {
			w.count(&w.totals.slowed, 1)
		}
		return
	}
	if w.excused(n, wt.e.instance, from, returned, bound) {
		w.count(&w.totals.excused, 1)
		return
	}
	w.viol.add(invWait, wt.e.instance, fmt.Sprintf(
		"WaitForCompletion through %s returned %s after the end was visible (at %s), over its bound of %s; the node was up, not paused, and drew no fault on the instance's partition in between",
		n.id, late.Round(time.Millisecond), stamp(from), bound))
}

// bound is how late after the end is visible a wait through n may return
// on the host as the run measured it at its start: a lock n holds unseen
// (lost while it was held back) counts until its expiry by n's clock, then
// a poll's backoff, the skew of the two clocks that judge the lock's
// expiry, and a host-scaled turn's slack.
func (w *completionWaits) bound(n *node) time.Duration {
	cfg := w.env.cfg
	return n.settings.runtime.OrchestratorLockTimeout + waitPollMost + 2*cfg.Faults.ClockSkew + hostScaled(cfg, chainTurnAllowance)
}

// boundOver is bound for a wait that ran from..to: widened in proportion
// when the host was measured slower in that span than at the run's start
// (the lock and the turn's slack were drawn for the host then, and every
// renewal, read and turn the wait depends on ran that much slower). A seed
// 1 wait returned 7.5 s after the end, over a 5.5 s bound drawn at the
// start, with its node up and unfaulted, because the machine had become
// busier since. The widening has a ceiling (maxWatchedSlowness), so a wait
// that never learns of an end is still reported.
func (w *completionWaits) boundOver(n *node, from, to time.Time) time.Duration {
	b := w.bound(n)
	if s := w.host.slowestBetween(from, to); s > 0 {
		b = time.Duration(float64(b) * max(s/max(w.env.cfg.HostSlowness, 1), 1))
	}
	return b
}

// excused: between from and to the simulated clock jumped, or n was
// paused or drew a fault on a request to the instance's partition (the
// instance's id is its partition key) within bound of to.
func (w *completionWaits) excused(n *node, instance string, from, to time.Time, bound time.Duration) bool {
	if w.env.clock.jumpedBetween(from, to) {
		return true
	}
	last, ok := w.env.rec.lastHeldBack(n.id, instance, from, to)
	return ok && to.Sub(last) <= bound
}

// finish waits until every waiter has returned or is past its bound,
// reports those past it, and ends the rest with the run's waits.
func (w *completionWaits) finish(ctx context.Context) {
	if w == nil {
		return
	}
	w.env.progress.waitUntil(ctx, 10*time.Millisecond, w.settled)
	w.mu.Lock()
	for _, wt := range w.waiters {
		if wt.returned {
			continue
		}
		w.totals.unreturned++
		if n := wt.overdue; n != nil {
			w.viol.add(invWait, wt.e.instance, fmt.Sprintf(
				"WaitForCompletion through %s had not returned %s after the end was visible (or the node was last held back: at %s), over its bound of %s; the node was up",
				n.id, time.Since(wt.overdueFrom).Round(time.Millisecond), stamp(wt.overdueFrom), wt.overdueBound))
		}
	}
	w.mu.Unlock()
	w.stop()
}

// settled: every waiter has returned or is past its bound (overdue).
func (w *completionWaits) settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	all := true
	for _, wt := range w.waiters {
		if wt.returned || wt.overdue != nil {
			continue
		}
		if wt.node == nil || wt.seenEnd.IsZero() || wt.node.down.Load() {
			all = false // between attempts, or its end not visible yet
			continue
		}
		from := later(wt.seenEnd, wt.began)
		if last, ok := w.env.rec.lastHeldBack(wt.node.id, wt.e.instance, from, now); ok {
			from = later(from, last)
		}
		if bound := w.boundOver(wt.node, from, now); now.Sub(from) > bound {
			wt.overdue, wt.overdueFrom, wt.overdueBound = wt.node, from, bound
			continue
		}
		all = false
	}
	return all
}

// stop ends the waits still under way and waits for their goroutines.
func (w *completionWaits) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
}

func (w *completionWaits) count(field *int, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*field += n
}

// tally adds one attempt's counts to the run's.
func (w *completionWaits) tally(c *waitCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.totals.held += int(c.held.Load())
	w.totals.reads += int(c.reads.Load())
}

// summary is the report's line.
func (w *completionWaits) summary() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.totals
	return fmt.Sprintf("waits=%d on-starter=%d told=%d held-polls=%d reads=%d redone=%d excused=%d slowed=%d unreturned=%d host-slowest=%.1f",
		t.waits, t.onStarter, t.told, t.held, t.reads, t.redone, t.excused, t.slowed, t.unreturned, w.host.slowest())
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitCounts are what one attempt's polls asked its node's provider.
type waitCounts struct {
	held  atomic.Int64 // polls that skipped their read: the provider held the instance
	reads atomic.Int64 // status reads
	told  atomic.Bool  // the provider reported the end its commit wrote
	// readAfterTold: a status read followed the report (a failure is read
	// for its details)
	readAfterTold atomic.Bool
}

// toldWithoutRead: the wait returned the end its provider reported.
func (c *waitCounts) toldWithoutRead() bool { return c.told.Load() && !c.readAfterTold.Load() }

// countedProvider is a node's provider as one wait's client sees it: the
// node's own, with what the wait's polls ask of it counted.
type countedProvider struct {
	*cdb.CosmosProvider
	counts *waitCounts
}

func (p countedProvider) HoldsOrchestration(instance string) bool {
	held := p.CosmosProvider.HoldsOrchestration(instance)
	if held {
		p.counts.held.Add(1)
	}
	return held
}

func (p countedProvider) EndedStatus(ended <-chan struct{}) (cdb.OrchestrationStatus, bool) {
	st, ok := p.CosmosProvider.EndedStatus(ended)
	if ok {
		p.counts.told.Store(true)
	}
	return st, ok
}

func (p countedProvider) ReadOrchestrationStatus(ctx context.Context, instance string) (cdb.OrchestrationStatus, error) {
	p.counts.reads.Add(1)
	if p.counts.told.Load() {
		p.counts.readAfterTold.Store(true)
	}
	return p.CosmosProvider.ReadOrchestrationStatus(ctx, instance)
}
