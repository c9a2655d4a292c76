package sim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"time"
)

// shutdownWhileRunning (Faults.Shutdowns) waits for the stubborn activity of
// the incarnation run to run, and shuts its node's runtime down with a
// context that ends almost at once (a deploy): the runtime must keep the
// activity's lock until the body returns or its cancellation grace ends
// (one-holder).
func (h *harness) shutdownWhileRunning(ctx context.Context, id, run string) {
	if h.shutdown == nil || !h.env.cfg.Faults.Shutdowns {
		return
	}
	var on string
	found := h.env.progress.waitUntil(ctx, 10*time.Millisecond, func() bool {
		on = h.env.rec.runningOn(run)
		return on != ""
	})
	if found && h.shutdown(ctx, on) {
		h.env.stats.crash("shutdown-with-activity")
		h.env.logger.Info("node shut down while an activity ran", "node", on, "instance", id)
	}
}

// crashCommittingContinueAsNew (Features.LargeContinueAsNew) crashes the
// node that commits the instance's next turn whose ContinueAsNew goes
// through an outbox, and keeps it down for minutes of simulated time.
func (h *harness) crashCommittingContinueAsNew(ctx context.Context, id string, rng *rand.Rand) {
	if h.crashCommitting == nil {
		return
	}
	instance := []byte(fmt.Sprintf("%q", id))
	match := func(op string, body []byte) bool {
		// The turn's documents: its outbox, and the instance and
		// execution documents now reading ContinuedAsNew (the message
		// itself may sit in a staged outbox part).
		return op == "Batch" && bytes.Contains(body, []byte(`"type":"outbox"`)) && bytes.Contains(body, instance) &&
			bytes.Contains(body, []byte("ContinuedAsNew"))
	}
	down := time.Duration(2+rng.Intn(4)) * time.Minute
	go h.crashCommitting(context.WithoutCancel(ctx), match, down)
}
