package sim

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// Scenario kinds that are not a single orchestration kind.
const (
	scenarioWideFanOut  = "WideFanOut"
	scenarioLargeFanOut = "LargeFanOut"
	scenarioCancel      = "Cancel" // a Sleeper cancelled from outside
	scenarioReuse       = "DeleteReuse"
	scenarioTreeDelete  = "TreeDelete" // a parent and child deleted through a process that dies or stalls part way
	scenarioBigCAN      = "BigContinueAsNew"
	scenarioRefused     = "RefusedTurn"
	scenarioShutdown    = "Shutdown" // a node shut down while a stubborn activity runs on it
)

// expectation is what one instance must end with.
type expectation struct {
	instance string
	spec     spec
	want     outcome
	// sender is the instance whose activities feed this Inbox: they may
	// legitimately run twice (at least once), and then send an event twice.
	sender string
	kv     map[string]string // the store a KV instance must end with
}

// harness drives the workload on the nodes and keeps the expectations.
type harness struct {
	env *env
	// caller returns the client of a random live node for the workload's
	// calls from outside (nil when none is up); crash kills a node and
	// starts its replacement.
	caller func() *rt.Client
	crash  func(ctx context.Context)
	// The hooks of the in-process run (nil in the two-process scenario):
	// eventCaller is the client an event is raised through (the
	// application, or with MixedNodes or BadClock any live node);
	// clientNode starts a client-only process; shutdown shuts the named
	// node's runtime down while it works and replaces the node;
	// crashCommitting crashes the next node whose batch matches, keeps its
	// slot empty for down, and restarts it.
	eventCaller func() *rt.Client
	// startCaller is the client a start goes through (nil: caller).
	startCaller     func() *rt.Client
	nodes           func() []*node
	clientNode      func(ctx context.Context) (*node, error)
	shutdown        func(ctx context.Context, node string) bool
	crashCommitting func(ctx context.Context, match func(op string, body []byte) bool, down time.Duration)
	observer        *rt.Client // faultless, for watching; it runs no reconciler
	viol            *violations
	// waits follow some instances with WaitForCompletion (waits.go; nil:
	// none, as in the two-process scenario).
	waits *completionWaits

	mu     sync.Mutex
	expect map[string]*expectation
	// accepted are the instances whose last start was reported accepted
	// and that nothing deleted since (start-kept).
	accepted map[string]bool
}

func (h *harness) noteAccepted(instance string, accepted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.accepted == nil {
		h.accepted = map[string]bool{}
	}
	h.accepted[instance] = accepted
}

func (h *harness) acceptedStart(instance string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.accepted[instance]
}

func (h *harness) expectOutcome(e *expectation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expect[e.instance] = e
}

// expectationOf is instance's expectation (nil: none).
func (h *harness) expectationOf(instance string) *expectation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.expect[instance]
}

func (h *harness) expectations() []*expectation {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*expectation, 0, len(h.expect))
	for _, e := range h.expect {
		out = append(out, e)
	}
	return out
}

// kinds are the scenario kinds the features allow, weighted by repetition.
func kinds(f Features, faults Faults) []string {
	var ks []string
	add := func(on bool, kind string, weight int) {
		for range weight {
			if on {
				ks = append(ks, kind)
			}
		}
	}
	add(f.Chains, kindChain, 3)
	add(f.FanOuts, kindFanOut, 3)
	add(f.WideFanOuts, scenarioWideFanOut, 1)
	add(f.LargeFanOuts, scenarioLargeFanOut, 1)
	add(f.Timers, kindTimer, 2)
	add(f.SubOrchestrations, kindParent, 2)
	add(f.DetachedStarts, kindDetach, 2)
	add(f.QueueEvents, kindInbox, 3)
	add(f.ExternalEvents, kindWaiter, 2)
	add(f.ActivityEvents, kindSender, 2)
	add(f.Sessions, kindSessions, 2)
	add(f.KV, kindKV, 2)
	add(f.Cancellation, kindRace, 1)
	add(f.Cancellation, scenarioCancel, 2)
	add(f.DeleteReuse, scenarioReuse, 2)
	add(f.TreeDeletes, scenarioTreeDelete, 3)
	add(f.LargeContinueAsNew, scenarioBigCAN, 2)
	add(f.LargeValues, kindBigKV, 1)
	add(f.LargeValues, kindBigOut, 1)
	add(f.RefusedTurns, scenarioRefused, 1)
	add(faults.Shutdowns, scenarioShutdown, 2)
	add(f.EagerCancels, scenarioEager, 2)
	add(f.ChainShutdowns, scenarioChainShutdown, 4)
	return ks
}

// call runs f against a random live node's client until it succeeds or
// fails permanently; a retryable error is retried as any caller would.
func (h *harness) call(ctx context.Context, f func(context.Context, *rt.Client) error) error {
	return retry(ctx, h.env.stats, h.env.progress, func(ctx context.Context) error {
		c := h.caller()
		if c == nil {
			return errNodeDown
		}
		return f(ctx, c)
	})
}

// callStart is call through the client starts go through.
func (h *harness) callStart(ctx context.Context, f func(context.Context, *rt.Client) error) error {
	if h.startCaller == nil {
		return h.call(ctx, f)
	}
	return retry(ctx, h.env.stats, h.env.progress, func(ctx context.Context) error {
		c := h.startCaller()
		if c == nil {
			return errNodeDown
		}
		return f(ctx, c)
	})
}

// callEvent is call through the client events are raised from.
func (h *harness) callEvent(ctx context.Context, f func(context.Context, *rt.Client) error) error {
	if h.eventCaller == nil {
		return h.call(ctx, f)
	}
	return retry(ctx, h.env.stats, h.env.progress, func(ctx context.Context) error {
		c := h.eventCaller()
		if c == nil {
			return errNodeDown
		}
		return f(ctx, c)
	})
}

func (h *harness) start(ctx context.Context, instance string, s spec) error {
	_, err := h.startThrough(ctx, instance, s)
	return err
}

// startThrough is start; it returns the client whose start was accepted.
func (h *harness) startThrough(ctx context.Context, instance string, s spec) (*rt.Client, error) {
	h.env.stats.scenario(s.Kind)
	var through *rt.Client
	err := h.callStart(ctx, func(ctx context.Context, c *rt.Client) error {
		through = c
		// Enqueued unchecked, as before the client checked ids: a start
		// retried after an ambiguous failure may find its own instance.
		return c.StartOrchestration(ctx, instance, s.Kind, s.encode(), rt.WithIfExists(rt.IfExistsEnqueue))
	})
	if err != nil {
		h.viol.add(invHarness, instance, fmt.Sprintf("start %s: %v", s.Kind, err))
		return nil, err
	}
	h.noteAccepted(instance, true)
	return through, nil
}

// startExpecting starts instance and expects what its spec determines.
func (h *harness) startExpecting(ctx context.Context, instance string, s spec) error {
	h.expectOutcome(&expectation{instance: instance, spec: s, want: expected(s)})
	return h.start(ctx, instance, s)
}

// startAwaited starts e's instance, expects e, and may have a waiter
// follow it (waits.go): only an instance the scenario neither deletes,
// prunes nor starts again comes here.
func (h *harness) startAwaited(ctx context.Context, e *expectation) {
	h.expectOutcome(e)
	through, err := h.startThrough(ctx, e.instance, e.spec)
	if err == nil {
		h.waits.follow(e, through)
	}
}

// scenario runs one scenario: starts its instances and does what it does
// from outside (events, cancels, deletes), then waits for its instances.
func (h *harness) scenario(ctx context.Context, idx int, kind string, rng *rand.Rand) {
	id := fmt.Sprintf("s%d-%s", idx, strings.ToLower(kind))
	run := fmt.Sprintf("%d.0", idx)
	f := h.env.cfg.Features
	var instances []string
	startOne := func(instance string, s spec) {
		instances = append(instances, instance)
		h.startAwaited(ctx, &expectation{instance: instance, spec: s, want: expected(s)})
	}
	firstTurns := h.goFirstTurnRound(ctx, idx, rng)
	cancelRound := h.goEagerCancelRound(ctx, idx, rng)
	switch kind {
	case kindChain:
		s := h.activitySpec(rng, spec{Kind: kindChain, Run: run, N: 1 + rng.Intn(5), Size: rng.Intn(2000)})
		if rng.Intn(4) == 0 {
			// A long run of short activities: its writer holds the
			// instance through chain after chain (chain-reads-others).
			s.N, s.SleepMs = 12+rng.Intn(12), min(s.SleepMs, 30)
		}
		startOne(id, s)
	case kindFanOut:
		startOne(id, h.activitySpec(rng, spec{Kind: kindFanOut, Run: run, N: 2 + rng.Intn(max(f.FanOutMax-1, 1)), Size: rng.Intn(2000)}))
	case scenarioWideFanOut:
		n := 101 + rng.Intn(max(f.FanOutMax-100, 1))
		startOne(id, spec{Kind: kindFanOut, Run: run, N: n, Size: rng.Intn(200)})
	case scenarioLargeFanOut:
		n := 101 + rng.Intn(max(f.FanOutMax-100, 1))
		startOne(id, spec{Kind: kindFanOut, Run: run, N: n, Size: f.LargePayloadBytes/2 + rng.Intn(f.LargePayloadBytes/2+1)})
	case kindTimer:
		startOne(id, spec{Kind: kindTimer, Run: run, SleepMs: 50 + rng.Intn(450)})
	case kindParent:
		startOne(id, h.activitySpec(rng, spec{Kind: kindParent, Run: run, N: 1 + rng.Intn(4)}))
	case kindDetach:
		target := id + "-detached"
		child := spec{Kind: kindChain, Run: run + ".d", N: 1 + rng.Intn(3)}
		h.expectOutcome(&expectation{instance: target, spec: child, want: expected(child)})
		instances = append(instances, target)
		startOne(id, spec{Kind: kindDetach, Run: run, Target: target, Child: &child})
	case kindInbox:
		s := spec{Kind: kindInbox, Run: run, N: 1 + rng.Intn(f.BacklogMax), Batch: 1 + rng.Intn(10)}
		startOne(id, s)
		h.feedInbox(ctx, id, s, rng, 0)
	case kindWaiter:
		s := spec{Kind: kindWaiter, Run: run, N: 1 + rng.Intn(3), Batch: rng.Intn(3)}
		startOne(id, s)
		h.raiseEvents(ctx, id, s, rng.Intn(2) == 0)
	case kindSender:
		rx := spec{Kind: kindInbox, Run: run + ".rx", N: 1 + rng.Intn(8), Batch: 1 + rng.Intn(5)}
		h.expectOutcome(&expectation{instance: id + "-rx", spec: rx, want: expected(rx), sender: id})
		instances = append(instances, id+"-rx")
		_ = h.start(ctx, id+"-rx", rx)
		startOne(id, spec{Kind: kindSender, Run: run, N: rx.N, Target: id + "-rx", Child: &rx})
	case kindSessions:
		startOne(id, spec{Kind: kindSessions, Run: run, N: 2 + rng.Intn(5), SleepMs: 20 + rng.Intn(150), Session: fmt.Sprintf("session-%d", rng.Intn(2))})
	case kindKV:
		s := spec{Kind: kindKV, Run: run, N: 3 + rng.Intn(10), Batch: 2 + rng.Intn(4)}
		instances = append(instances, id)
		h.startAwaited(ctx, &expectation{instance: id, spec: s, want: expected(s), kv: kvFinal(s.N)})
	case kindRace:
		child := spec{Kind: kindSleeper, Run: run + ".sleeper", SleepMs: 5000, Compensate: rng.Intn(2) == 0}
		h.expectOutcome(&expectation{instance: id + "-child", spec: child, want: expected(child)})
		instances = append(instances, id+"-child")
		startOne(id, spec{Kind: kindRace, Run: run, SleepMs: 100 + rng.Intn(300), Target: id + "-child", Child: &child})
	case scenarioCancel:
		startOne(id, spec{Kind: kindSleeper, Run: run, SleepMs: 3000, Compensate: rng.Intn(2) == 0})
		h.cancelLater(ctx, id, rng)
	case scenarioReuse:
		h.deleteAndReuse(ctx, idx, id, rng)
		instances = append(instances, id)
	case scenarioTreeDelete:
		h.treeDelete(ctx, idx, id, rng)
		instances = append(instances, id)
	case scenarioBigCAN:
		s := spec{Kind: kindInbox, Run: run, N: 4 + rng.Intn(12), Batch: 1 + rng.Intn(3),
			Pad: strings.Repeat("c", 700*1024+rng.Intn(250*1024))}
		startOne(id, s)
		h.crashCommittingContinueAsNew(ctx, id, rng)
		// Paced, so events keep coming while the committer is down.
		h.feedInbox(ctx, id, s, rng, time.Duration(100+rng.Intn(300))*time.Millisecond)
	case kindBigKV:
		s := spec{Kind: kindBigKV, Run: run, N: 4, Batch: 10, Size: 60 * 1024}
		instances = append(instances, id)
		h.startAwaited(ctx, &expectation{instance: id, spec: s, want: expected(s), kv: bigKVFinal(s)})
	case kindBigOut:
		startOne(id, spec{Kind: kindBigOut, Run: run, Size: 1000*1024 + rng.Intn(150*1024)})
	case scenarioRefused:
		s := spec{Kind: kindChain, Run: run, N: 1, Size: refusedSize}
		instances = append(instances, id)
		h.startAwaited(ctx, &expectation{instance: id, spec: s, want: outcome{State: rt.StateFailed}})
	case scenarioShutdown:
		s := spec{Kind: kindChain, Run: run, N: 1, SleepMs: 800 + rng.Intn(1200), Stubborn: true}
		startOne(id, s)
		h.shutdownWhileRunning(ctx, id, s.Run)
	case scenarioEager:
		instances = append(instances, h.eagerCancelScenario(ctx, id, run, rng)...)
	case scenarioChainShutdown:
		s := spec{Kind: kindChain, Run: run, N: 20 + rng.Intn(20), SleepMs: rng.Intn(3)}
		startOne(id, s)
		h.shutdownWhileChained(ctx, id, s.Run, rng)
	}
	instances = append(instances, firstTurns()...)
	instances = append(instances, cancelRound()...)
	h.waitTerminal(ctx, instances)
}

// activitySpec adds the random activity traits: long activities (longer
// than a short worker lock) and the gpu tag.
func (h *harness) activitySpec(rng *rand.Rand, s spec) spec {
	f := h.env.cfg.Features
	if f.LongActivities && rng.Intn(4) == 0 {
		s.SleepMs = 800 + rng.Intn(700)
	} else {
		s.SleepMs = rng.Intn(30)
	}
	if f.Tags && rng.Intn(3) == 0 {
		s.Tag = tagGPU
	}
	return s
}

// feedInbox sends the Inbox its events in order, in a burst (a backlog for
// its continue-as-new) or paced; with Prune on it prunes the instance's old
// executions half way.
// pace, when set, is the gap between two events instead.
func (h *harness) feedInbox(ctx context.Context, id string, s spec, rng *rand.Rand, pace time.Duration) {
	burst := rng.Intn(2) == 0
	for seq := 1; seq <= s.N; seq++ {
		switch {
		case pace > 0:
			sleepCtx(ctx, pace)
		case !burst:
			sleepCtx(ctx, time.Duration(rng.Intn(40))*time.Millisecond)
		}
		data := eventData(s.Run, seq)
		err := h.callEvent(ctx, func(ctx context.Context, c *rt.Client) error { return c.EnqueueEvent(ctx, id, queueName, data) })
		if err != nil {
			h.viol.add(invHarness, id, fmt.Sprintf("enqueue event %d: %v", seq, err))
			return
		}
		h.env.stats.count(&h.env.stats.EventsSent, 1)
		if seq == s.N/2 && h.env.cfg.Features.Prune {
			h.prune(ctx, id)
		}
	}
}

func (h *harness) prune(ctx context.Context, id string) {
	keep := uint32(1)
	err := h.call(ctx, func(ctx context.Context, c *rt.Client) error {
		_, err := c.PruneExecutions(ctx, id, cdb.PruneOptions{KeepLast: &keep})
		return err
	})
	if err != nil && !isNotFound(err) {
		h.viol.add(invHarness, id, fmt.Sprintf("prune: %v", err))
		return
	}
	h.env.stats.count(&h.env.stats.Prunes, 1)
}

// raiseEvents raises the Waiter's events, in order: early, at once (before
// the orchestration waits for them, even before its start is taken, which
// the buffered WaitForEvent must keep, once each, across crashes and
// continue-as-new), or else each once its subscription is in history.
func (h *harness) raiseEvents(ctx context.Context, id string, s spec, early bool) {
	// An instance slow under load (turns whose locks expire) is not a
	// stuck one: the raise waits as long as the run progresses, so a late
	// subscription still gets its event and only a real stall shows as
	// stuck.
	for i := range s.N {
		name := waiterEvent(i)
		ok := early || h.waitHistory(ctx, id, func(history []cdb.Event) bool {
			for _, ev := range history {
				if sub, isSub := ev.Kind.(cdb.ExternalSubscribed); isSub && sub.Name == name {
					return true
				}
			}
			return false
		})
		if !ok {
			return // the stuck check reports the instance
		}
		data := eventData(s.Run, i)
		err := h.callEvent(ctx, func(ctx context.Context, c *rt.Client) error { return c.RaiseEvent(ctx, id, name, data) })
		if err != nil {
			h.viol.add(invHarness, id, fmt.Sprintf("raise %s: %v", name, err))
			return
		}
		h.env.stats.count(&h.env.stats.EventsSent, 1)
	}
}

// cancelLater cancels a Sleeper once it runs, or at once (the cancel then
// overtakes the start).
func (h *harness) cancelLater(ctx context.Context, id string, rng *rand.Rand) {
	if rng.Intn(3) > 0 {
		h.waitHistory(ctx, id, func(history []cdb.Event) bool { return len(history) > 0 })
		sleepCtx(ctx, time.Duration(rng.Intn(200))*time.Millisecond)
	}
	err := h.call(ctx, func(ctx context.Context, c *rt.Client) error { return c.CancelInstance(ctx, id, "sim") })
	if err != nil {
		h.viol.add(invHarness, id, fmt.Sprintf("cancel: %v", err))
		return
	}
	h.env.stats.count(&h.env.stats.CancelsSent, 1)
}

// deleteAndReuse runs a chain at id, deletes it (once finished, or forced
// while it runs) and starts the id again with another input: only the
// second incarnation's outcome may show.
func (h *harness) deleteAndReuse(ctx context.Context, idx int, id string, rng *rand.Rand) {
	first := h.activitySpec(rng, spec{Kind: kindChain, Run: fmt.Sprintf("%d.0", idx), N: 1 + rng.Intn(3)})
	if err := h.startExpecting(ctx, id, first); err != nil {
		return
	}
	force := rng.Intn(2) == 0
	if force && rng.Intn(2) == 0 {
		h.restartDuringDeletion(ctx, idx, id, rng)
		return
	}
	if force {
		sleepCtx(ctx, time.Duration(rng.Intn(300))*time.Millisecond)
	} else {
		h.waitTerminal(ctx, []string{id})
		if st, err := h.observer.GetStatus(ctx, id); err != nil || !st.IsTerminal() {
			force = true // slow (or stuck: the final check says so); a plain delete would be refused
		}
	}
	attempts := 0
	err := h.call(ctx, func(ctx context.Context, c *rt.Client) error {
		attempts++
		_, err := c.DeleteInstance(ctx, id, force)
		return err
	})
	if isNotFound(err) && attempts == 1 {
		// The first start was not taken yet: there is no instance to
		// delete, and a second start would be a duplicate of a start that
		// still runs (duroxide keeps the first). Nothing to reuse.
		return
	}
	if isNotFound(err) {
		err = nil // an earlier attempt, whose answer was lost, deleted it
	}
	if err != nil {
		h.viol.add(invHarness, id, fmt.Sprintf("delete (force=%t): %v", force, err))
		return
	}
	h.env.stats.count(&h.env.stats.Deletes, 1)
	h.noteAccepted(id, false)
	second := h.activitySpec(rng, spec{Kind: kindChain, Run: fmt.Sprintf("%d.1", idx), N: 1 + rng.Intn(3)})
	_ = h.startExpecting(ctx, id, second)
}

// restartDuringDeletion starts the id again as soon as its forced
// deletion reads as done (the instance reads NotFound), while the deletion
// may still be sweeping its partition: the start meets the deletion's mark
// and is refused as retryable until the sweep ends, or lands just after
// its last round. Either way a start reported accepted must run: none may
// be swept with the old life's documents.
func (h *harness) restartDuringDeletion(ctx context.Context, idx int, id string, rng *rand.Rand) {
	started := h.env.progress.waitUntil(ctx, 10*time.Millisecond, func() bool {
		st, err := h.observer.GetStatus(ctx, id)
		return err == nil && st.State != rt.StateNotFound && st.State != rt.StateQueued // its first turn ran
	})
	if !started {
		return // the final checks report the first life
	}
	deleted := make(chan error, 1)
	go func() {
		deleted <- h.call(ctx, func(ctx context.Context, c *rt.Client) error {
			_, err := c.DeleteInstance(ctx, id, true)
			return err
		})
	}()
	var answer error
	answered := false
	gone := h.env.progress.waitUntil(ctx, 2*time.Millisecond, func() bool {
		select {
		case answer = <-deleted:
			answered = true
		default:
		}
		st, err := h.observer.GetStatus(ctx, id)
		return answered || err == nil && st.State == rt.StateNotFound
	})
	defer func() {
		if !answered { // still sweeping while the id starts again
			h.checkDeleteAnswer(id, <-deleted)
		}
	}()
	if !gone || answered && !h.checkDeleteAnswer(id, answer) {
		return
	}
	h.env.stats.count(&h.env.stats.Deletes, 1)
	h.noteAccepted(id, false)
	second := h.activitySpec(rng, spec{Kind: kindChain, Run: fmt.Sprintf("%d.1", idx), N: 1 + rng.Intn(3)})
	_ = h.startExpecting(ctx, id, second)
}

// checkDeleteAnswer reports a forced deletion that failed; a NotFound is
// an earlier attempt's deletion, whose answer was lost.
func (h *harness) checkDeleteAnswer(id string, err error) bool {
	if err != nil && !isNotFound(err) {
		h.viol.add(invHarness, id, fmt.Sprintf("delete (force=true): %v", err))
		return false
	}
	return true
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "not found")
}

// waitHistory polls the instance's latest history until ok holds; false
// when the run stalled first (progress.go). A history that grew is
// progress.
func (h *harness) waitHistory(ctx context.Context, id string, ok func([]cdb.Event) bool) bool {
	seen := -1
	return h.env.progress.waitUntil(ctx, 20*time.Millisecond, func() bool {
		history, err := h.observer.ReadHistory(ctx, id)
		if err != nil {
			return false
		}
		if len(history) > seen {
			if seen >= 0 {
				h.env.progress.mark()
			}
			seen = len(history)
		}
		return ok(history)
	})
}

// waitTerminal waits until every instance has completed or failed, or the
// run stalls (the final check reports what did not finish). An instance
// seen finishing is progress.
func (h *harness) waitTerminal(ctx context.Context, instances []string) {
	for _, id := range instances {
		finished := h.env.progress.waitUntil(ctx, 50*time.Millisecond, func() bool {
			st, err := h.observer.GetStatus(ctx, id)
			return err == nil && st.IsTerminal()
		})
		if !finished {
			return
		}
		h.env.progress.mark()
	}
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
