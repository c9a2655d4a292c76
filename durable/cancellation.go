package durable

import (
	"errors"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
)

// Cancellation the code handles. By default a cancellation request
// (Client.CancelInstance, `cdb cancel`, a parent's cancellation) ends an
// execution in the turn that receives it, as duroxide does: no code runs,
// its outstanding work is cancelled and it fails with "canceled: reason".
// An execution that called HandleCancellation instead sees the request:
//
//   - the future HandleCancellation returned resolves with the reason;
//   - every future still waiting at that point (activities, timers, event
//     and queue waits, children, retries) resolves with an error wrapping
//     ErrCancelled, and its work is cancelled as a Select loser's is (an
//     activity's context is cancelled, a child gets the request in turn);
//   - the code goes on and may schedule compensation, for at most the
//     grace HandleCancellation named, counted from the request;
//   - the execution ends as cancelled ("canceled: reason", as by default)
//     when the code returns, whatever it returns, or when the grace ends,
//     whichever comes first; work still outstanding then is cancelled.
//
// The grace is a durable timer the runtime schedules in the code's place
// when it delivers the request, so a crash or a redeploy during the
// compensation neither lengthens nor forgets it. Whether a request is
// delivered is decided where it falls in the history (the code must have
// called HandleCancellation before it), so every replay decides the same.

// ErrCancelled is wrapped by the error Await returns for work that was
// still outstanding when a cancellation request reached an execution that
// handles cancellation (HandleCancellation).
var ErrCancelled = errors.New("durable: the instance was cancelled")

// cancelRequestedReason is the breadcrumb reason of the work a delivered
// cancellation request cancelled.
const cancelRequestedReason = "orchestration_cancel_requested"

// parentCancelledReason is the reason a cancelled parent's children get.
const parentCancelledReason = "parent canceled"

// cancellation is an execution's opt-in to seeing a cancellation request.
type cancellation struct {
	grace      time.Duration
	future     *Future // resolves with the reason
	requested  bool
	reason     string
	graceTimer *Future // scheduled when the request is delivered
}

// HandleCancellation opts this execution in to seeing a cancellation
// request instead of ending at once (see ErrCancelled and the package
// doc's Cancellation section): from this call on, a request resolves the
// returned future with its reason, work still outstanding returns an error
// wrapping ErrCancelled, and the code has grace, counted from the request,
// to compensate before the execution ends as cancelled. Call it at the
// start of the orchestration, before the work a cancellation should
// compensate: a request that arrives before the call ends the execution as
// it would without it. Later calls return the same future and keep the
// first grace. A grace of zero or less is a programming error: it panics,
// which fails the orchestration. Each execution of a continue-as-new chain
// opts in for itself.
func (c *OrchestrationContext) HandleCancellation(grace time.Duration) *Future {
	if grace <= 0 {
		panic(fmt.Errorf("durable: HandleCancellation needs a grace above zero, got %v: %w", grace, ErrInvalidInput))
	}
	if c.cancellation == nil {
		c.cancellation = &cancellation{grace: grace}
		c.cancellation.future = &Future{octx: c, kind: futureCancellation}
	}
	return c.cancellation.future
}

// deliverCancellation hands a cancellation request to code that handles
// it: it resolves the opt-in's future, cancels the work still outstanding
// and schedules the grace's timer, in the code's place, before the code
// runs on. Without an opt-in it does nothing: finalize ends the execution.
func (r *replayRun) deliverCancellation(ev cdb.Event, reason string) {
	c := r.octx.cancellation
	if c == nil || c.requested {
		return
	}
	c.requested, c.reason = true, reason
	err := fmt.Errorf("%w: %s", ErrCancelled, reason)
	for _, f := range r.octx.takeFutures() {
		if !f.hasResult() {
			f.cancel(cancelRequestedReason, err)
		}
	}
	fireAt := ev.TimestampMs + uint64(c.grace.Milliseconds())
	c.graceTimer = r.octx.newFuture(futureTimer, action{kind: actCreateTimer, fireAtMs: fireAt, purpose: "the cancellation grace"})
	r.emitted = append(r.emitted, r.octx.drainEmitted()...)
	r.mustPoll = true
}

// cancelledAfterCompensation is the end of an execution whose code saw a
// cancellation request, once its code returned or its grace ended (a
// continue-as-new during the compensation ends it too); nil while the
// compensation goes on or when no request was delivered.
func (r *replayRun) cancelledAfterCompensation() *turnResult {
	c := r.octx.cancellation
	if c == nil || !c.requested {
		return nil
	}
	if r.output == nil && !c.graceTimer.hasResult() && !r.continuesAsNew() {
		return nil
	}
	return &turnResult{kind: turnCancelled, reason: c.reason, compensated: true}
}

// continuesAsNew reports whether the code asked to continue as new.
func (r *replayRun) continuesAsNew() bool {
	for _, a := range r.engine.pending {
		if a.kind == actContinueAsNew {
			return true
		}
	}
	for _, em := range r.emitted {
		if em.action.kind == actContinueAsNew {
			return true
		}
	}
	return false
}

// hasResult reports whether a future's outcome is already there, without
// taking any step (a retry's next attempt, a wait's loser): such a future
// keeps its result when a cancellation request is delivered.
func (f *Future) hasResult() bool {
	if f.done {
		return true
	}
	c := f.octx
	switch f.kind {
	case futureActivity, futureTimer, futureSubOrchestration:
		_, ok := c.results[f.token]
		return ok
	case futureExternal:
		id, bound := c.bindings[f.token]
		if !bound {
			return false
		}
		_, ok := c.external.lookup(id)
		return ok
	case futureQueue:
		id, bound := c.bindings[f.token]
		if !bound {
			return false
		}
		_, ok := c.queue.lookup(id)
		return ok
	case futureFirstOf:
		for _, part := range f.parts {
			if part.hasResult() {
				return true
			}
		}
	case futureCancellation:
		return c.cancellation.requested
	}
	return false
}
