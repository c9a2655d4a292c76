package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	rt "github.com/duroxide-go/cdb/durable"
)

// First-turn rounds (Features.FirstTurnStarts). A node's start takes the
// first-turn path (first_turn_start.go) only when it has no delay and an
// orchestration fetch of that very process is running at that moment, less
// the starts already ready or promised to such fetches: the provider counts
// the fetch calls in progress (eagerReady.reserve with depth = running),
// whatever the instance's slot, so process leases play no part. A process
// with no orchestration fetch (worker-only, or a client-only application),
// short polling, or eager dispatch off never takes it; nor does a start
// through a process whose dispatchers are all busy with turns. Half of the
// workload's starts go through the application, which has no fetch, and a
// random node of those left is worker-only or short-polling about half of
// the time: so the workload's own starts, about one per scenario, reach
// the path a few times per seed.
//
// A round, beside every scenario's own work, starts instances
// through a starter node (its fetches wait) or another node whose fetches
// do, and aims the path's faults at it:
//   - a burst of starts from two callers at once (every round begins with
//     one; a burst round has a larger one), some exclusive
//     (IfExistsFail: the first try of a start nobody else makes is never
//     refused as existing, exclusive-start);
//   - a fault forced on the first turn's commit (its answer lost, a dropped
//     connection, a throttle, an unavailable or timed-out account);
//   - the node crashing at that commit, before it is sent or once it
//     applied;
//   - the node paused for longer than the provider waits for the commit,
//     before the start (its fetches are held in their queries, so the ready
//     turn is given back after a poll interval and the start written the
//     usual way once the pause ends), and at times crashed during the pause
//     while the start is pending; or paused as the commit is sent (the
//     caller waits for the commit under way);
//   - a first turn that holds its dispatcher for longer than the provider
//     waits (spec.StallMs): the caller hands the start back and writes it
//     the usual way, and the stalled turn's commit is refused;
//   - two starts of one id racing through two nodes: exclusive ones, of
//     which exactly one succeeds on its first try, or IfExistsIgnore ones.
//
// The caller retries a start whose call failed (a crash, an unknown
// outcome) through any client, as an application would; every instance
// must then run exactly once with the outcome its input determines, which
// the invariants check as for any start.

// invExclusiveStart: an exclusive start is refused as existing only when
// another start of the id was made.
const invExclusiveStart = "exclusive-start"

// firstTurnEvery: every firstTurnEvery-th scenario runs a round.
const firstTurnEvery = 1

// firstTurnPlan is what a round does.
type firstTurnPlan int

const (
	planBurst firstTurnPlan = iota
	planFaultOnCommit
	planCrashCommitting
	planPauseBeforeStart
	planPauseCommitting
	planRace
	planStalledTurn
	planLostAnswerUnreadable
)

// firstTurnPlans are the plans, weighted by repetition.
var firstTurnPlans = []firstTurnPlan{planBurst, planBurst, planBurst, planFaultOnCommit, planFaultOnCommit,
	planCrashCommitting, planPauseBeforeStart, planPauseCommitting, planRace, planStalledTurn}

// commitFaults are the faults aimed at a first turn's commit; a lost
// answer (the commit applied) is the one the start must resolve by reading.
var commitFaults = []string{faultLoseResponse, faultLoseResponse, faultLoseResponse, faultDrop, faultThrottle, faultUnavailable, faultTimeout, faultGone}

// goFirstTurnRound starts scenario idx's round, if it has one, beside the
// scenario's own work; the returned wait returns the instances it started
// once it is done.
func (h *harness) goFirstTurnRound(ctx context.Context, idx int, rng *rand.Rand) (wait func() []string) {
	if !h.env.cfg.Features.FirstTurnStarts || h.nodes == nil || idx%firstTurnEvery != 0 {
		return func() []string { return nil }
	}
	own := rand.New(rand.NewSource(rng.Int63())) // the scenario's rng stays its own goroutine's
	done := make(chan []string, 1)
	go func() { done <- h.firstTurnRound(ctx, idx, own) }()
	return func() []string { return <-done }
}

// firstTurnRound runs scenario idx's round and returns the instances it
// started.
func (h *harness) firstTurnRound(ctx context.Context, idx int, rng *rand.Rand) []string {
	n := h.firstTurnNode(rng, nil)
	if n == nil {
		return nil
	}
	plans := firstTurnPlans
	if h.env.cfg.Features.LostFirstTurnReads {
		plans = append(slices.Clone(plans), planLostAnswerUnreadable, planLostAnswerUnreadable)
	}
	plan := plans[rng.Intn(len(plans))]
	h.env.stats.scenario("FirstTurns")
	r := firstTurnRun{h: h, idx: idx, rng: rng}
	// Every round begins with a burst, the plan's own starts come after.
	size := 2 + rng.Intn(3)
	if plan == planBurst {
		size = 4 + rng.Intn(5)
	}
	r.burst(ctx, n, size)
	switch plan {
	case planFaultOnCommit:
		r.faultOnCommit(ctx, n)
	case planCrashCommitting:
		r.crashCommitting(ctx, n)
	case planPauseBeforeStart:
		r.pauseBeforeStart(ctx, n)
	case planPauseCommitting:
		r.pauseCommitting(ctx, n)
	case planRace:
		r.race(ctx, n)
	case planStalledTurn:
		r.stalledTurn(ctx, n)
	case planLostAnswerUnreadable:
		r.lostAnswerUnreadable(ctx, n)
	}
	return r.instances
}

// firstTurnNode picks a live node whose orchestration fetches wait, the
// starter when it is up, other than not; nil when there is none.
func (h *harness) firstTurnNode(rng *rand.Rand, not *node) *node {
	var starter *node
	var others []*node
	for _, n := range h.nodes() {
		switch {
		case n == not || !fetchesWait(n) || n.role.production:
		case n.role.starter:
			starter = n
		default:
			others = append(others, n)
		}
	}
	if starter != nil && (len(others) == 0 || rng.Intn(4) > 0) {
		return starter
	}
	if len(others) == 0 {
		return nil
	}
	return others[rng.Intn(len(others))]
}

// fetchesWait says n's runtime has orchestration fetches that wait for
// work (so its starts may take the first-turn path), and replays today's
// executions (not an old build).
func fetchesWait(n *node) bool {
	s := n.settings
	return n.runtime != nil && !s.runtime.WorkerOnly && !s.provider.ShortPolling && !s.provider.DisableEagerDispatch &&
		s.runtime.SupportedReplayVersions == nil
}

// firstTurnRun is one round: its random draws and the instances it started.
type firstTurnRun struct {
	h   *harness
	idx int
	rng *rand.Rand // drawn from one goroutine at a time

	mu        sync.Mutex
	count     int
	instances []string
}

// next is a fresh instance of the round with a small spec (a one-activity
// chain, or a short timer), expected to end as its input says.
func (r *firstTurnRun) next() (string, spec) {
	return r.nextAdjusted(nil)
}

// nextAdjusted is next with adjust applied to the spec first.
func (r *firstTurnRun) nextAdjusted(adjust func(*spec)) (string, spec) {
	r.mu.Lock()
	i := r.count
	r.count++
	id := fmt.Sprintf("s%d-firstturn-%d", r.idx, i)
	r.instances = append(r.instances, id)
	r.mu.Unlock()
	run := fmt.Sprintf("%d.f%d", r.idx, i)
	s := spec{Kind: kindChain, Run: run, N: 1, SleepMs: r.rng.Intn(20)}
	if r.rng.Intn(3) == 0 {
		s = spec{Kind: kindTimer, Run: run, SleepMs: 20 + r.rng.Intn(80)}
	}
	if adjust != nil {
		adjust(&s)
	}
	r.h.expectOutcome(&expectation{instance: id, spec: s, want: expected(s)})
	return id, s
}

// burst starts size instances through n from two callers at once, each
// waiting for its start as an application's request handler would; a
// quarter of them exclusive.
func (r *firstTurnRun) burst(ctx context.Context, n *node, size int) {
	type start struct {
		id     string
		s      spec
		policy rt.IfExists
	}
	starts := make([]start, size)
	for i := range starts {
		id, s := r.next()
		policy := rt.IfExistsEnqueue
		if r.rng.Intn(4) == 0 {
			policy = rt.IfExistsFail
		}
		starts[i] = start{id, s, policy}
	}
	var wg sync.WaitGroup
	for caller := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := caller; i < len(starts); i += 2 {
				st := starts[i]
				_ = r.h.startOnNode(ctx, n, st.id, st.s, st.policy, false)
			}
		}()
	}
	wg.Wait()
}

// faultOnCommit starts one instance through n with a fault aimed at its
// first turn's commit.
func (r *firstTurnRun) faultOnCommit(ctx context.Context, n *node) {
	id, s := r.next()
	kind := commitFaults[r.rng.Intn(len(commitFaults))]
	n.transport.faultOn.Store(&faultTrigger{match: firstTurnCommitOf(id), kind: kind})
	_ = r.h.startOnNode(ctx, n, id, s, r.policy(), false)
}

// crashCommitting starts one instance through n, which crashes at its
// first turn's commit: before sending it (nothing of the start exists) or
// once it applied (the caller never hears of it, and retries).
func (r *firstTurnRun) crashCommitting(ctx context.Context, n *node) {
	id, s := r.next()
	after := r.rng.Intn(2) == 0
	label := "first-turn-commit-before"
	if after {
		label = "first-turn-commit-after"
	}
	wait := n.owner.armCrash(n, firstTurnCommitOf(id), after, label)
	// The crash, if the start took the first-turn path, comes before the
	// start's first try returns; a start that went the usual way never
	// sends such a commit, and its return disarms the crash.
	startDone, stopWaiting := context.WithCancel(ctx)
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		wait(startDone, time.Minute)
	}()
	_ = r.h.startOnNode(ctx, n, id, s, r.policy(), false)
	stopWaiting()
	<-crashed
}

// pauseBeforeStart pauses n for longer than a start waits for its first
// turn's commit, then starts an instance through it: the fetches that
// would take it are held in their queries, so the ready turn is given back
// after a poll interval and the start written the usual way once the pause
// ends. A third of the time n crashes half way through the pause, the
// start still pending.
func (r *firstTurnRun) pauseBeforeStart(ctx context.Context, n *node) {
	id, s := r.next()
	d := firstTurnWait + time.Duration(200+r.rng.Intn(800))*time.Millisecond
	crash := r.rng.Intn(3) == 0
	n.transport.pause(d)
	r.h.env.stats.crash("first-turn-paused-before-start")
	if crash {
		go func() {
			if sleepCtx(ctx, d/2) {
				n.owner.crashNow(ctx, n, "first-turn-start-pending")
			}
		}()
	}
	_ = r.h.startOnNode(ctx, n, id, s, r.policy(), false)
}

// pauseCommitting starts an instance through n, which pauses for longer
// than the provider's wait as its first turn's commit is sent: the caller
// waits for the commit under way, and the commit applies late. Mostly an
// exclusive start: one handed back while its commit is under way would be
// written as well and, meeting its own instance, refused as existing.
func (r *firstTurnRun) pauseCommitting(ctx context.Context, n *node) {
	id, s := r.next()
	d := firstTurnWait + time.Duration(200+r.rng.Intn(800))*time.Millisecond
	policy := rt.IfExistsFail
	if r.rng.Intn(4) == 0 {
		policy = rt.IfExistsEnqueue
	}
	stats := r.h.env.stats
	n.transport.pauseOn.Store(&pauseTrigger{match: firstTurnCommitOf(id), d: d, fired: func() { stats.crash("first-turn-paused-committing") }})
	_ = r.h.startOnNode(ctx, n, id, s, policy, false)
}

// race starts one id through two nodes at once (the same spec: whichever
// wins, the instance runs once): both exclusive, so exactly one succeeds on
// its first try, or both IfExistsIgnore.
func (r *firstTurnRun) race(ctx context.Context, n *node) {
	id, s := r.next()
	other := r.h.firstTurnNode(r.rng, n)
	policy := rt.IfExistsFail
	if r.rng.Intn(3) == 0 {
		policy = rt.IfExistsIgnore
	}
	var wg sync.WaitGroup
	results := make([]raceResult, 2)
	for i, via := range []*node{n, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.h.startOnNode(ctx, via, id, s, policy, true)
		}()
	}
	wg.Wait()
	if policy != rt.IfExistsFail || !results[0].firstTry || !results[1].firstTry {
		return // a retried start may meet its own earlier try
	}
	won := 0
	for _, res := range results {
		if res.err == nil {
			won++
		}
	}
	if won != 1 {
		r.h.viol.add(invExclusiveStart, id, fmt.Sprintf("two exclusive starts of one id raced through two nodes, each answered on its first try, and %d succeeded (%v; %v)", won, results[0].err, results[1].err))
	}
}

// stalledTurn starts a chain through n whose first turn holds its
// dispatcher for longer than the provider waits for the commit: the caller
// hands the start back and writes it the usual way, and the stalled turn's
// commit is refused.
func (r *firstTurnRun) stalledTurn(ctx context.Context, n *node) {
	stall := int(firstTurnWait/time.Millisecond) + 200 + r.rng.Intn(600)
	id, s := r.nextAdjusted(func(s *spec) { *s = spec{Kind: kindChain, Run: s.Run, N: 1, StallMs: stall} })
	_ = r.h.startOnNode(ctx, n, id, s, r.policy(), false)
}

// lostAnswerUnreadable starts a one-activity chain through n whose first
// turn's commit applies with its answer lost, and fails n's reads of the
// instance's partition that follow, a few times, then lets them through:
// the commit is found applied late (by the ack's own reads, or by the
// start's settling once the ack gave up). Refusals (401, 403) fail a read
// after three tries, which the provider does not retry; unavailability
// (503) after the client's nine, which it does. Its activity was locked
// eagerly by the commit: it must be handed out or given back promptly once
// the commit is found, not hidden for its lock's length
// (eager-not-hidden).
func (r *firstTurnRun) lostAnswerUnreadable(ctx context.Context, n *node) {
	id, s := r.nextAdjusted(func(s *spec) { *s = spec{Kind: kindChain, Run: s.Run, N: 1, SleepMs: r.rng.Intn(20)} })
	rf := &readFaults{pk: instancePK(id), kind: []string{fault401, fault403}[r.rng.Intn(2)]}
	rf.left.Store(int32(3 + r.rng.Intn(3)))
	if r.rng.Intn(3) == 0 {
		rf.kind = faultUnavailable
		rf.left.Store(int32(9 + r.rng.Intn(5)))
	}
	stats := r.h.env.stats
	n.transport.faultOn.Store(&faultTrigger{match: firstTurnCommitOf(id), kind: faultLoseResponse, fired: func() {
		n.transport.failReads.Store(rf)
		stats.crash("first-turn-answer-lost-reads-failing")
	}})
	_ = r.h.startOnNode(ctx, n, id, s, r.policy(), false)
	n.transport.failReads.CompareAndSwap(rf, nil)
}

// policy is a single start's IfExists: mostly the workload's enqueue, at
// times exclusive.
func (r *firstTurnRun) policy() rt.IfExists {
	if r.rng.Intn(3) == 0 {
		return rt.IfExistsFail
	}
	return rt.IfExistsEnqueue
}

// raceResult is a start's answer, and whether its first try gave it.
type raceResult struct {
	err      error
	firstTry bool
}

// startOnNode starts instance through n's client (nil: the workload's
// start route), as code running in that process would; a try that fails
// retryably is tried again through the workload's start route, as the
// application retries a call whose process died. racing says another
// start of the id is under way: an exclusive start may then be refused.
func (h *harness) startOnNode(ctx context.Context, n *node, instance string, s spec, policy rt.IfExists, racing bool) raceResult {
	tries := 0
	var exists error // an answer, not a failure to retry
	err := retry(ctx, h.env.stats, h.env.progress, func(ctx context.Context) error {
		tries++
		c := h.startCaller()
		if tries == 1 && n != nil {
			c = n.client
		}
		if c == nil {
			return errNodeDown
		}
		err := c.StartOrchestration(ctx, instance, s.Kind, s.encode(), rt.WithIfExists(policy))
		if errors.Is(err, rt.ErrInstanceExists) {
			exists = err
			return nil
		}
		return err
	})
	if err == nil {
		err = exists
	}
	res := raceResult{err: err, firstTry: tries == 1}
	switch {
	case err == nil:
		h.noteAccepted(instance, true)
		if n != nil && !racing {
			// The starter runs the instance and holds it from its first
			// turn: a wait through it takes the told and held paths.
			h.waits.follow(h.expectationOf(instance), n.client)
		}
	case errors.Is(err, rt.ErrInstanceExists) && (racing || tries > 1):
		// Another start of the id, or an earlier try of this one whose
		// answer was lost: started either way.
		h.noteAccepted(instance, true)
	case errors.Is(err, rt.ErrInstanceExists):
		h.viol.add(invExclusiveStart, instance, fmt.Sprintf("the only start of the id, exclusive, was refused as existing on its first try: %v", err))
	default:
		h.viol.add(invHarness, instance, fmt.Sprintf("start %s (first-turn round): %v", s.Kind, err))
	}
	return res
}

// firstTurnCommitOf matches the commit of instance's first turn: a batch
// that creates its instance document with a lock token acked (a turn's
// commit creates it only for a start not written before).
func firstTurnCommitOf(instance string) func(op string, seen []byte) bool {
	want := []byte(fmt.Sprintf(`"instance":%q`, instance))
	return func(op string, seen []byte) bool {
		if op != "Batch" || !bytes.Contains(seen, want) {
			return false
		}
		_, body, _ := bytes.Cut(seen, []byte("\n")) // the partition key header comes first
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil {
			return false
		}
		for _, o := range ops {
			if !strings.EqualFold(o.OperationType, "create") {
				continue
			}
			var doc wireDoc
			if json.Unmarshal(o.ResourceBody, &doc) == nil && doc.Type == "inst" && doc.LastAck != "" && bytes.Contains(o.ResourceBody, want) {
				return true
			}
		}
		return false
	}
}

// stallingFirstTurn is orch holding its dispatcher for the spec's StallMs
// in the first turn it runs of each Run, on whichever node: the start's
// caller, waiting for that turn's commit, hands the start back after the
// provider's wait. Only once: the instance's next first turn (of the start
// written the usual way) runs at once.
func (a *activities) stallingFirstTurn(orch rt.OrchestrationFunc) rt.OrchestrationFunc {
	return func(ctx *rt.OrchestrationContext, input string) (string, error) {
		if s, err := decodeSpec(input); err == nil && s.StallMs > 0 && !ctx.IsReplaying() {
			if _, done := a.rec.stalled.LoadOrStore(s.Run, true); !done {
				time.Sleep(time.Duration(s.StallMs) * time.Millisecond)
			}
		}
		return orch(ctx, input)
	}
}
