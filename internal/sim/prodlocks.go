package sim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	rt "github.com/duroxide-go/cdb/durable"
)

// Production lock lengths (Features.ProductionLocks). The run's other
// nodes hold locks of 3 s, or a few hundred ms scaled to the host, which
// the runtime renews at half their timeout; production's are 15 s and
// more, which the runtime renews a buffer before they expire
// (durable.renewalInterval: timeout - buffer once the timeout is 15 s or
// more). A lock handed out with less left than that interval expires
// before its first renewal (rule R19), and a lock an eager commit wrote is
// counted from the commit's plan: a slow commit eats it. So a run has a
// production node: orchestration and worker dispatchers, long polling,
// eager dispatch, an orchestrator lock of 15-20 s renewed 2 s before it
// expires and a worker lock of 16-18 s renewed 1 s before, drawn from the
// seed (production's 30 s worker lock renewed 5 s before has the same
// shape; the round below costs a lock's length, and a buffer well under a
// quarter of the lock leaves the gap it needs). It is never crashed,
// paused or shut down (its locks would hold its work for their whole
// length, which only makes a run longer), and the first-turn rounds leave
// it alone.
//
// A slow-commit round, once a run, starts a one-activity chain through the
// production node with its commit's batch held back before it is sent
// (slowCommitDelay: a quarter of the worker lock, less a margin): the
// activity is locked eagerly at the plan, and the commit applies with a
// little more than three quarters of the lock left. The provider hands
// such an item out without renewing it first (it renews one with less
// left: refreshClaim), but that is less than the runtime's renewal
// interval (the lock less its buffer, a quarter of the lock being more
// than the buffer): its lock expires 2.5-3 s before the runtime first
// renews it. The activity runs 3 s past that expiry on its first run
// (spec.FirstMs), so unless the hand-out leaves the runtime time to renew
// first, another fetch takes the item while it runs: one-holder (an
// activity never runs twice at once while the node that holds it is
// healthy) then fails. The second run returns at once, so the round costs
// about a lock's length. A busy production node's fetches may take queued
// work first and leave the item to be given back after a poll interval;
// the round then tries again, up to slowCommitTries times.
const slowCommitMargin = 500 * time.Millisecond

// productionLocks draws a production node's lock options.
func productionLocks(rng *rand.Rand, o *rt.Options) {
	o.OrchestratorLockTimeout = time.Duration(15+rng.Intn(6)) * time.Second
	o.OrchestratorLockRenewalBuffer = 2 * time.Second
	o.WorkerLockTimeout = time.Duration(16+rng.Intn(3)) * time.Second
	o.WorkerLockRenewalBuffer = time.Second
	// A session idle timeout must exceed the worker lock's renewal
	// interval (durable.Options.validate).
	o.SessionIdleTimeout = o.WorkerLockTimeout + 5*time.Second
}

// hasProductionLocks says a node's runtime renews its worker locks a
// buffer before they expire (durable.renewalInterval).
func hasProductionLocks(o rt.Options) bool { return o.WorkerLockTimeout >= 15*time.Second }

// productionNode is the run's production node, nil when none is up.
func (h *harness) productionNode() *node {
	if h.nodes == nil {
		return nil
	}
	for _, n := range h.nodes() {
		if n.role.production {
			return n
		}
	}
	return nil
}

// slowCommitRounds are what the slow-commit rounds did, for the report.
type slowCommitRounds struct {
	mu                sync.Mutex
	rounds, slowed    int
	delay, lock, left time.Duration // the last slowed round's: the delay, the worker lock, what it had left at its hand-out
	instances         []string
}

// slowCommitDelay is how long a commit of a node whose worker lock is
// lock is held back: so that it applies with a little more than three
// quarters of the lock left (the provider hands it out without renewing
// it first), but less than the runtime's renewal interval.
func slowCommitDelay(lock time.Duration) time.Duration {
	return lock/4 - slowCommitMargin
}

// startSlowCommitRound starts the run's slow-commit round beside the
// scenarios; wg waits for it.
func (h *harness) startSlowCommitRound(ctx context.Context, wg *sync.WaitGroup) {
	if !h.env.cfg.Features.ProductionLocks || h.nodes == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.slowCommitRound(ctx)
	}()
}

func (h *harness) slowCommitRound(ctx context.Context) {
	var n *node
	if !h.env.progress.waitUntil(ctx, 20*time.Millisecond, func() bool {
		n = h.productionNode()
		return n != nil && fetchesWait(n)
	}) {
		return
	}
	// A busy production node's fetches may take queued work first and
	// leave the item to be given back: a try costs its slow commit then.
	for try := range slowCommitTries {
		if h.slowCommitTry(ctx, n, try) {
			return
		}
	}
}

// slowCommitTries bounds the tries of a slow-commit round.
const slowCommitTries = 3

// slowCommitTry runs one try of the round through n; true when n's
// runtime took the item its slow commit locked.
func (h *harness) slowCommitTry(ctx context.Context, n *node, try int) bool {
	r := h.env.rec.slow
	lock := n.settings.runtime.WorkerLockTimeout
	delay := slowCommitDelay(lock)
	left := lock - delay // at the commit's answer, less what the commit itself took
	id := fmt.Sprintf("slow%d", try)
	s := spec{Kind: kindChain, Run: fmt.Sprintf("slow.%d", try), N: 1, FirstMs: int((left + 3*time.Second) / time.Millisecond)}
	instance := []byte(fmt.Sprintf(`"instance":%q`, id))
	slowed := make(chan struct{})
	n.transport.slowOn.Store(&slowTrigger{d: delay, fired: func() { close(slowed) },
		match: func(op string, seen []byte) bool {
			// The turn's commit that writes the activity locked eagerly.
			return op == "Batch" && bytes.Contains(seen, instance) && bytes.Contains(seen, []byte(`"type":"work"`)) &&
				bytes.Contains(seen, []byte(`"lockToken":"work_`))
		}})
	r.mu.Lock()
	r.rounds++
	r.instances = append(r.instances, id)
	r.mu.Unlock()
	h.expectOutcome(&expectation{instance: id, spec: s, want: expected(s)})
	h.env.stats.scenario("SlowCommit")
	h.startOnNode(ctx, n, id, s, rt.IfExistsEnqueue, false)
	h.waitTerminal(ctx, []string{id})
	select {
	case <-slowed:
		r.mu.Lock()
		r.slowed++
		r.delay, r.lock = delay, lock
		r.mu.Unlock()
	default:
		// The turn ran elsewhere, or locked nothing eagerly: disarm.
		n.transport.slowOn.Store(nil)
	}
	return h.env.rec.eager.handedOutBy(instancePK(id), n.id)
}

// handedOutBy says writer's provider handed out an item of partition pk
// its commit locked.
func (e *eagerItems) handedOutBy(pk, writer string) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, it := range e.items {
		if k.pk == pk && it.writer == writer && it.handedOut {
			return true
		}
	}
	return false
}

// summary is the production node's settings and what the rounds did.
func (r *slowCommitRounds) summary(eager *eagerItems, describe string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := fmt.Sprintf("node: %s; slow-commit tries=%d slowed=%d", describe, r.rounds, r.slowed)
	if r.slowed == 0 {
		return out
	}
	out += fmt.Sprintf(" (held %s of a %s worker lock", r.delay.Round(time.Millisecond), r.lock)
	for _, id := range r.instances {
		out += ", " + id + ": " + eager.fateOf(instancePK(id))
	}
	return out + ")"
}

// fateOf says what became of the items of partition pk a commit locked
// eagerly: what ended their wait, and what their lock had left then.
func (e *eagerItems) fateOf(pk string) string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var fates []string
	for k, it := range e.items {
		if k.pk != pk {
			continue
		}
		if it.ended.IsZero() {
			fates = append(fates, k.id+" still locked")
			continue
		}
		atMs := it.createdMs + it.ended.Sub(it.created).Milliseconds()
		fate := fmt.Sprintf("%s locked at commit with %s left, %s by %s with %s left", k.id,
			time.Duration(it.until-it.createdMs)*time.Millisecond, it.how, it.by, time.Duration(it.until-atMs)*time.Millisecond)
		if it.renewedTo != 0 {
			fate += fmt.Sprintf(" (renewed to %s after it)", time.Duration(it.renewedTo-atMs)*time.Millisecond)
		}
		fates = append(fates, fate)
	}
	if len(fates) == 0 {
		return "no item locked eagerly"
	}
	return strings.Join(fates, "; ")
}

// slowTrigger holds back the first request it matches for d before it is
// sent (a commit that takes seconds).
type slowTrigger struct {
	match func(op string, body []byte) bool
	d     time.Duration
	fired func()
	once  sync.Once
}
