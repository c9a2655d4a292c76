package sim

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// The idle budget (idle-budget): a process whose queues show no work sends
// about one request per second per queue, however many held, parked or
// filtered messages sit in them; a queue's poll is one candidate query per
// partition key range, so the budget is per queue and range. The workload's nodes poll every 10–100 ms
// to make a run fast, so the budget is measured on a probe: a process with
// the provider's and the runtime's default polling, started once the
// workload has drained, whose transport counts its requests over
// idleWindow after a warm-up.
const (
	idleWarmUp = time.Second
	idleWindow = 4 * time.Second
	// idleQueues are the queues an idle process polls: orchestrations and
	// activities.
	idleQueues = 2
	// idlePerSecond is the budget per queue and range per second, with a
	// quarter's room; idleBackground per range is the process's background
	// in a window (the reconciler's look every 5s, a fetch that overlaps
	// the window's edge).
	idlePerSecond  = 1.25
	idleBackground = 2
)

// idleProbe is the probe process of the quiet phase.
type idleProbe struct {
	node  *node
	began time.Time
	from  int64
}

// startIdleProbe starts the probe (faults off) and returns once its warm-up
// is over; nil when it could not start (the harness reports that).
func (h *harness) startIdleProbe(ctx context.Context) *idleProbe {
	s := nodeSettings{provider: cdb.Config{SkipBootstrap: true, Now: h.env.clock.now}, runtime: rt.Options{Now: h.env.clock.now}}
	var n *node
	ok := h.env.progress.waitUntil(ctx, 50*time.Millisecond, func() bool {
		var err error
		n, err = startNode(ctx, h.env, "idle-probe", -1, s, false)
		return err == nil
	})
	if !ok {
		h.viol.add(invHarness, "", "the idle probe did not start")
		return nil
	}
	n.quiet()
	sleepCtx(ctx, idleWarmUp)
	return &idleProbe{node: n, began: time.Now(), from: n.transport.requests.Load()}
}

// check waits out the window and compares the probe's requests with the
// budget, then stops the probe.
func (p *idleProbe) check(ctx context.Context, v *violations, ranges, held int) {
	if p == nil {
		return
	}
	defer p.node.shutdown(context.WithoutCancel(ctx))
	sleepCtx(ctx, idleWindow-time.Since(p.began))
	elapsed := time.Since(p.began)
	sent := p.node.transport.requests.Load() - p.from
	budget := int64(idlePerSecond*idleQueues*float64(ranges)*elapsed.Seconds()) + int64(idleBackground*ranges) + 2
	if sent > budget {
		v.add(invIdleBudget, "", fmt.Sprintf("an idle process sent %d requests in %s over %d ranges (budget %d: %.2f per second per queue and range) with %d events held for ids that never started",
			sent, elapsed.Round(time.Millisecond), ranges, budget, idlePerSecond, held))
	}
}

// neverStartedEvents is how many events NeverStartedEvents raises for ids
// that never start.
const neverStartedEvents = 10

// raiseForNeverStarted (Features.NeverStartedEvents) raises events for
// ids nothing ever starts (a mistyped id, a client that raced a delete),
// and returns how many.
func (h *harness) raiseForNeverStarted(ctx context.Context, rng *rand.Rand) int {
	if !h.env.cfg.Features.NeverStartedEvents {
		return 0
	}
	raised := 0
	for i := range neverStartedEvents {
		id := fmt.Sprintf("never-started-%d-%d", i, rng.Intn(1000))
		err := h.call(ctx, func(ctx context.Context, c *rt.Client) error { return c.RaiseEvent(ctx, id, "hello", "x") })
		if err != nil {
			h.viol.add(invHarness, id, fmt.Sprintf("raise an event for an id that never starts: %v", err))
			continue
		}
		raised++
	}
	return raised
}
