package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/duroxide-go/cdb"
)

// workerLoop is one worker dispatcher slot. A slot runs one activity at a
// time; the ack of one that returned goes on in the background while the
// slot fetches and runs the next (at most Options.WorkerAcksInFlight such
// acks a slot): the slot is for running activities, and an ack's round
// trip to the store is most of a short activity's time. The loop ends once
// its last ack did.
func (r *Runtime) workerLoop(slot int, sessionOwner string) {
	workerID := fmt.Sprintf("work-%d-%s", slot, orElse(r.opts.WorkerNodeID, r.id))
	acking := newAcksUnderWay(r.opts.WorkerAcksInFlight)
	defer acking.wait()
	r.pollLoop(workerID, func() (bool, error) { return r.processNextWorkItem(workerID, sessionOwner, acking) })
}

// acksUnderWay bounds a slot's acks on their way to the store: a place is
// taken before an ack begins and given back when it ended.
type acksUnderWay chan struct{}

func newAcksUnderWay(n int) acksUnderWay { return make(acksUnderWay, n) }

// begin takes a place, waiting for one while all are taken.
func (a acksUnderWay) begin() { a <- struct{}{} }

// end gives back the place of an ack that ended.
func (a acksUnderWay) end() { <-a }

// wait returns once no ack is under way.
func (a acksUnderWay) wait() {
	for range cap(a) {
		a.begin()
	}
}

// sessionOwner is the identity a slot claims sessions with: the stable
// node id shared by all slots, or an ephemeral per-slot id.
func (r *Runtime) sessionOwner(slot int) string {
	if r.opts.WorkerNodeID != "" {
		return r.opts.WorkerNodeID
	}
	return fmt.Sprintf("work-%d-%s", slot, r.id)
}

// lockedActivity is a fetched, locked activity.
type lockedActivity struct {
	cdb.ActivityExecuteMessage
	token    string
	attempt  uint32
	workerID string
}

func (r *Runtime) processNextWorkItem(workerID, sessionOwner string, acking acksUnderWay) (bool, error) {
	var session *cdb.SessionFetchConfig
	if r.sessions.distinct() < r.opts.MaxSessionsPerRuntime {
		session = &cdb.SessionFetchConfig{OwnerID: sessionOwner, LockTimeout: r.opts.SessionLockTimeout}
	}
	item, token, attempt, err := r.provider.FetchWorkItem(r.fetchCtx, r.opts.WorkerLockTimeout,
		r.opts.LongPollTimeout, session, r.opts.WorkerTagFilter)
	if err != nil || item == nil {
		return false, err
	}
	act, ok := item.(cdb.ActivityExecuteMessage)
	if !ok {
		r.log.Error("worker queue returned a non-activity item; abandoning it", "kind", item.Kind())
		r.abandonWork(token, time.Second, false)
		return true, nil
	}
	r.metrics.activityFetched(r.workCtx, act.Name, r.opts.Now(), act.VisibleAt)
	// The lock is renewed until the item is acked or released, not only
	// while the handler runs: an ack of a large result on a throttled
	// store, a refused result followed by its failure, or a poison failure
	// can each outlast what is left of a lock.
	ctx, cancel := context.WithCancelCause(r.workCtx)
	stopRenewal := r.renewWorkLock(token, cancel)
	release := func() {}
	// settled ends what the item held once it is acked or given back: here,
	// or in the background ack that takes it over.
	settled := func() {
		release()
		stopRenewal()
		cancel(nil)
	}
	handedOver := false
	defer func() {
		if !handedOver {
			settled()
		}
	}()
	w := lockedActivity{ActivityExecuteMessage: act, token: token, attempt: attempt, workerID: workerID}
	if act.SessionID != nil {
		release = r.sessions.acquire(*act.SessionID, r.opts.Now)
		if r.sessions.distinct() > r.opts.MaxSessionsPerRuntime {
			// Another slot claimed a new session meanwhile: give it back.
			r.abandonWork(token, 100*time.Millisecond, true)
			return true, nil
		}
	}
	if attempt > r.opts.MaxAttempts {
		r.poisonAttempts(w)
		return true, nil
	}
	if attempt > 1 {
		// An operator reads here that the activity runs again (at least
		// once), after a crash or a lost lock.
		r.activityLog(w).Info("running an activity again: an earlier delivery ended without its result stored (a process stopped, lost its lock or gave it back)",
			"attempt", attempt, "activity_id", act.ID)
	}
	handedOver = r.executeActivity(ctx, w, acking, settled)
	return true, nil
}

// activityRuns is which run of an activity one delivery is: its retry
// policy's attempt and the provider's delivery of the item.
type activityRuns struct{ attempt, delivery uint32 }

// runs is which run of its activity w is.
func (w lockedActivity) runs() activityRuns {
	return activityRuns{attempt: max(deref32(w.RetryAttempt), 1), delivery: w.attempt}
}

// laterDelivery is the delivery an outcome records: nil for the first,
// which is the rule, so only a run after a lost one is marked.
func (w lockedActivity) laterDelivery() *uint32 {
	if w.attempt <= 1 {
		return nil
	}
	return ptr(w.attempt)
}

// activityLog is the logger of an activity's records: each carries the
// instance, the execution and the activity's name (under this runtime's
// keys "instance" and "activity", and duroxide's "execution_id").
func (r *Runtime) activityLog(w lockedActivity) *slog.Logger {
	return traceLog(r.log.With("instance", w.Instance, "execution_id", w.ExecutionID, "activity", w.Name), w.Trace)
}

// errLockLost cancels an activity whose worker lock could not be renewed:
// its orchestration ended or cancelled it (lock stealing).
var errLockLost = errors.New("durable: activity lock lost")

// activityResult is what a handler returned.
type activityResult struct {
	output string
	err    error
}

// executeActivity runs the handler and acks its result, under the
// activity's span; ctx is cancelled when the lock is lost (or the runtime
// stops), which cancels the handler. A result is acked in the background
// (acking), once the slot has a place for its ack, and settled called after it;
// handedOver says so (otherwise the caller settles the item).
func (r *Runtime) executeActivity(ctx context.Context, w lockedActivity, acking acksUnderWay, settled func()) (handedOver bool) {
	ctx, span := r.startActivitySpan(ctx, w)
	fn, ok := r.registry.activity(w.Name)
	if !ok {
		r.handleUnregisteredActivity(ctx, w)
		r.metrics.activityUnregistered(ctx, w.Name, w.runs())
		endActivitySpan(span, activityNotRegistered, errActivityNotRegistered)
		return false
	}
	results := make(chan activityResult, 1) // the handler never blocks on it
	actx := ActivityContext{Context: ctx, instance: w.Instance, executionID: w.ExecutionID, activityID: w.ID,
		name: w.Name, sessionID: w.SessionID, tag: w.Tag, workerID: w.workerID, client: r.client, clock: r.opts.Now,
		attempt: deref32(w.RetryAttempt), delivery: w.attempt}
	began := time.Now()
	go func() { results <- runActivity(fn, actx, w.Input) }()

	select {
	case res := <-results:
		acking.begin()
		go func() {
			defer acking.end()
			defer settled()
			outcome := r.ackActivity(ctx, w, res)
			endActivitySpan(span, outcome, res.err)
			r.metrics.activityEnded(ctx, w.Name, w.runs(), outcome, time.Since(began))
		}()
		return true
	case <-ctx.Done():
		failure := context.Cause(ctx)
		outcome := r.interruptActivity(ctx, w, failure, results)
		endActivitySpan(span, outcome, failure)
		r.metrics.activityEnded(ctx, w.Name, w.runs(), outcome, time.Since(began))
		return false
	}
}

// runActivity calls the handler, turning a panic into a failure.
func runActivity(fn ActivityFunc, ctx ActivityContext, input string) (res activityResult) {
	defer func() {
		if p := recover(); p != nil {
			res = activityResult{err: fmt.Errorf("activity panicked: %v", p)}
		}
	}()
	out, err := fn(ctx, input)
	return activityResult{output: out, err: err}
}

// renewWorkLock renews the worker lock; retryable failures are retried,
// and the first permanent one (the lock is gone: the activity was
// cancelled, or its lock expired) cancels the activity with errLockLost.
func (r *Runtime) renewWorkLock(token string, cancel context.CancelCauseFunc) (stop func()) {
	first, interval := r.renewalSchedule(token, r.opts.WorkerLockTimeout, r.opts.WorkerLockRenewalBuffer,
		cdb.LockRemainingReporter.WorkItemLockRemaining)
	// Not bounded by the work context: a stopping runtime keeps the lock of
	// an activity whose handler still runs (interruptActivity bounds that
	// by the grace), so no other runtime runs it meanwhile.
	return r.renewEvery(context.WithoutCancel(r.workCtx), first, interval, func(ctx context.Context) error {
		return r.provider.RenewWorkItemLock(ctx, token, r.opts.WorkerLockTimeout)
	}, func(err error) {
		r.log.Debug("activity lock lost; cancelling the activity", "error", err)
		cancel(errLockLost)
	})
}

// ackActivity reports the handler's result and says what became of it,
// under ctx's span but not its cancellation. A failure caused by the
// runtime stopping is not the activity's: the item is abandoned for a
// retry.
func (r *Runtime) ackActivity(ctx context.Context, w lockedActivity, res activityResult) activityOutcome {
	if res.err != nil && r.workCtx.Err() != nil {
		r.abandonWork(w.token, 0, true)
		return activityAbandoned
	}
	var completion cdb.WorkItem = cdb.ActivityCompletedMessage{Instance: w.Instance, ExecutionID: w.ExecutionID, ID: w.ID, Result: res.output,
		Delivery: w.laterDelivery()}
	acked := activityCompleted
	if res.err != nil {
		completion = cdb.ActivityFailedMessage{Instance: w.Instance, ExecutionID: w.ExecutionID, ID: w.ID,
			Details: applicationFailure(cdb.AppActivityFailed{}, res.err, r.registry), Delivery: w.laterDelivery()}
		acked = activityFailed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := r.provider.AckWorkItem(ctx, w.token, completion)
	switch {
	case err == nil:
		return acked
	case errors.Is(err, cdb.ErrInvalidLockToken):
		// The lock expired or was taken (a cancellation): the result is
		// not this worker's to commit, and no failure would be either.
		r.activityLog(w).Warn("activity lock lost before its ack; the item is left to its next holder",
			"attempt", w.attempt, "error", err)
	case cdb.IsRetryable(err):
		r.activityLog(w).Warn("activity ack failed; abandoning", "error", err)
		r.abandonWork(w.token, 100*time.Millisecond, false)
	case errors.Is(err, cdb.ErrRefused):
		return r.failRefusedActivity(ctx, w, err)
	default:
		r.abandonStoreRefusal(w, err)
	}
	return activityAbandoned
}

// abandonStoreRefusal releases an activity whose ack the store refused
// with a permanent status that is not the provider's own refusal (a real
// account's transient 401, 403, 404/1003 or 413): the result may be fine,
// so the activity is not failed but runs again after a backoff, its
// attempt counted, so a refusal that never ends reaches poison handling.
func (r *Runtime) abandonStoreRefusal(w lockedActivity, err error) {
	backoff := r.opts.unregisteredBackoff(w.attempt)
	r.activityLog(w).Error("the store refused the activity's ack; abandoning with backoff",
		append(storeStatus(err), "attempt", w.attempt, "backoff", backoff, "error", err)...)
	r.abandonWork(w.token, backoff, false)
}

// maxRefusalText bounds the refusal text a failure carries, so the failure
// itself is small enough to store.
const maxRefusalText = 4 << 10

// failRefusedActivity handles a result the provider itself refused (one
// too large to store, say): running the activity again would give the same
// result, so it fails now, with the refusal as its error. Should that be
// refused too, the activity is failed as poison with the cause. When the
// lock is gone (the activity was cancelled meanwhile) these acks fail as
// well, and nothing is left to do.
func (r *Runtime) failRefusedActivity(ctx context.Context, w lockedActivity, refusal error) activityOutcome {
	cause := refusal.Error()
	if len(cause) > maxRefusalText {
		cause = cause[:maxRefusalText] + "…(truncated)"
	}
	r.activityLog(w).Error("activity result refused by the provider; failing the activity",
		"attempt", w.attempt, "error", refusal)
	failure := cdb.ActivityFailedMessage{Instance: w.Instance, ExecutionID: w.ExecutionID, ID: w.ID,
		Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "the provider refused the activity's result: " + cause}}
	err := r.provider.AckWorkItem(ctx, w.token, failure)
	if err == nil {
		return activityFailed
	}
	switch {
	case errors.Is(err, cdb.ErrInvalidLockToken):
		r.activityLog(w).Warn("activity lock lost before its failure was acked; the item is left to its next holder",
			"error", err)
		return activityAbandoned
	case cdb.IsRetryable(err):
		r.activityLog(w).Warn("activity failure ack failed; abandoning", "error", err)
		r.abandonWork(w.token, 100*time.Millisecond, false)
		return activityAbandoned
	case !errors.Is(err, cdb.ErrRefused):
		r.abandonStoreRefusal(w, err)
		return activityAbandoned
	}
	r.activityLog(w).Error("activity failure refused by the provider too; failing the activity as poison", "error", err)
	if !r.poisonActivity(w, "the provider refused the activity's result: "+cause) {
		return activityAbandoned
	}
	return activityFailed
}

// interruptActivity handles a cancelled activity: its lock was lost, or the
// runtime is stopping. Either way the handler is given the grace period to
// return. duroxide acks without a completion after a lost lock, expecting
// the ack to fail; but such an ack deletes an item whose lock is still
// held, so the item is abandoned instead: that fails just the same when the
// lock is gone, and when it is not (a transient error) the item runs again
// rather than vanish. A stopping runtime still holds the lock, renewed
// until the handler returns or the grace ends, so no other runtime runs the
// activity while this handler does: a result the handler returns within the
// grace is acked (a failure is abandoned for a retry, since it may be the
// cancellation's).
//
// After the grace the result is dropped, but an item whose handler has not
// returned is never released (R21, a running handler keeps its item),
// whether the runtime is stopping or its lock was reported lost: its lock
// is no longer renewed (the caller settles the item) and lapses by the
// store's clock, and only then can another runtime, or this one, run the
// activity again.
func (r *Runtime) interruptActivity(ctx context.Context, w lockedActivity, cause error, results <-chan activityResult) activityOutcome {
	lockLost := errors.Is(cause, errLockLost)
	if !lockLost {
		r.activityLog(w).Info("runtime stopping; waiting for the activity within its grace, keeping its lock",
			"grace", r.opts.ActivityCancellationGrace)
	}
	grace := time.NewTimer(r.opts.ActivityCancellationGrace)
	defer grace.Stop()
	select {
	case res := <-results:
		if !lockLost {
			return r.ackActivity(ctx, w, res)
		}
		r.abandonWork(w.token, 0, false)
	case <-grace.C:
		// Keeps: a running handler keeps its item (R21).
		r.activityLog(w).Warn("cancelled activity did not stop within the grace period; dropping its result and leaving its lock to lapse",
			"lock_lost", lockLost, "lock_timeout", r.opts.WorkerLockTimeout)
	}
	return activityAbandoned
}

// poisonAttempts fails an activity fetched more than MaxAttempts times.
func (r *Runtime) poisonAttempts(w lockedActivity) {
	r.activityLog(w).Warn("activity exceeded max attempts; failing it as poison",
		"attempt", w.attempt, "max_attempts", r.opts.MaxAttempts)
	message, _ := json.Marshal(w.ActivityExecuteMessage)
	r.poisonActivity(w, string(message))
}

// poisonActivity fails an activity as poison, message saying why, and
// reports whether the failure was acked.
func (r *Runtime) poisonActivity(w lockedActivity, message string) bool {
	details := cdb.PoisonError{
		AttemptCount: w.attempt, MaxAttempts: r.opts.MaxAttempts, Message: message,
		MessageType: cdb.PoisonActivity{Instance: w.Instance, ExecutionID: w.ExecutionID, ActivityName: w.Name, ActivityID: w.ID},
	}
	ctx, cancel := r.cleanupContext()
	defer cancel()
	r.metrics.poisoned(ctx, "worker")
	failure := cdb.ActivityFailedMessage{Instance: w.Instance, ExecutionID: w.ExecutionID, ID: w.ID, Details: details}
	if err := r.provider.AckWorkItem(ctx, w.token, failure); err != nil {
		r.activityLog(w).Warn("could not commit the activity poison failure", "error", err)
		return false
	}
	return true
}

// abandonWork releases a worker lock, even after the work context ended.
func (r *Runtime) abandonWork(token string, delay time.Duration, ignoreAttempt bool) {
	ctx, cancel := r.cleanupContext()
	defer cancel()
	if err := r.provider.AbandonWorkItem(ctx, token, delay, ignoreAttempt); err != nil {
		r.log.Debug("abandon work item failed", "error", err)
	}
}
