package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/duroxide-go/cdb"
)

// orchestrationLoop is one orchestration dispatcher. It runs one turn at a
// time; the commit of a turn that ran goes on in the background while the
// dispatcher fetches and runs the next (at most
// Options.OrchestrationAcksInFlight such commits a dispatcher), as a
// worker slot's acks do: a commit is a round trip, most of a turn's time,
// and with a backlog a dispatcher that waited for each ran one turn per
// round trip. The loop ends once its last commit did.
func (r *Runtime) orchestrationLoop(slot int) {
	workerID := fmt.Sprintf("orch-%d-%s", slot, r.id)
	acking := newAcksUnderWay(r.opts.OrchestrationAcksInFlight)
	defer acking.wait()
	r.pollLoop(workerID, func() (bool, error) {
		item, token, attempt, err := r.provider.FetchOrchestrationItem(r.fetchCtx,
			r.opts.OrchestratorLockTimeout, r.opts.LongPollTimeout, &r.filter)
		if err != nil || item == nil {
			return false, err
		}
		r.handleOrchestrationItem(item, token, attempt, acking)
		return true, nil
	})
}

// handleOrchestrationItem processes a locked item and measures its turn,
// once its commit ended (which may be after it returns: acking). Once an
// item is locked its turn runs to completion, shutdown or not, so it can
// be acked.
func (r *Runtime) handleOrchestrationItem(item *cdb.OrchestrationItem, token string, attempt uint32, acking acksUnderWay) {
	fetched := time.Now()
	name := orchestrationNameOf(item)
	turnCtx := r.turnContext(name)
	r.metrics.turnFetched(turnCtx, name, r.opts.Now(), item.VisibleAt)
	ctx, span := r.startTurnSpan(turnCtx, item, name)
	r.lockAndProcess(ctx, item, token, attempt, turnEnd{acking: acking, ended: func(outcome turnOutcome) {
		endTurnSpan(span, outcome)
		r.metrics.turnEnded(ctx, name, outcome, time.Since(fetched))
	}})
}

// turnEnd is how a turn ends: ended is called once with its outcome, when
// its commit ended, which goes on in the background with a place among
// acking's.
type turnEnd struct {
	acking acksUnderWay
	ended  func(turnOutcome)
}

// then is end with more done first when the turn ends.
func (end turnEnd) then(first func()) turnEnd {
	ended := end.ended
	end.ended = func(o turnOutcome) {
		first()
		ended(o)
	}
	return end
}

// turnContext is the context a turn's provider calls and measurements run
// under. It is made per turn, with the orchestration's name, so that what
// a turn's Cosmos DB requests are labelled with is decided in one place.
func (r *Runtime) turnContext(name string) context.Context {
	if name == "" {
		return r.workCtx
	}
	return cdb.ContextWithMetricAttributes(r.workCtx, slog.String(attrOrchestrationName, name))
}

// turnLog is the logger of a turn's records: each carries the instance,
// the execution the batch was fetched for, and the orchestration's name,
// so a turn's records correlate as duroxide's do (under this runtime's
// keys "instance" and "orchestration", and duroxide's "execution_id"), and
// the trace id of the instance's start when it carried one.
func (r *Runtime) turnLog(item *cdb.OrchestrationItem) *slog.Logger {
	return traceLog(r.log.With("instance", item.Instance, "execution_id", item.ExecutionID, "orchestration", orchestrationNameOf(item)),
		item.TraceContext)
}

// lockAndProcess runs the turn of an item whose version this runtime
// replays, renewing the instance lock until the turn ended.
func (r *Runtime) lockAndProcess(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32, end turnEnd) {
	if pinned, ok := pinnedVersion(item.History); ok && !replaysPinned(r.opts.replayRange(), pinned) && !startsSuccessor(item.Messages) {
		// Defence in depth: the provider's filter should have skipped it.
		// A batch that starts the successor of an execution that continued
		// as new replays none of it: the successor runs at this runtime's
		// version, whatever its predecessor's was.
		r.turnLog(item).Warn("execution pinned at an incompatible duroxide version; abandoning", "pinned", pinned.String())
		r.abandonOrchestration(token, time.Second, false)
		end.ended(turnAbandoned)
		return
	}
	end = end.then(r.renewOrchestrationLock(token))
	if outcome, underWay := r.processOrchestrationItem(ctx, item, token, attempt, end); !underWay {
		end.ended(outcome)
	}
}

// startsSuccessor reports a batch with a ContinueAsNew message: it starts
// the next execution.
func startsSuccessor(messages []cdb.WorkItem) bool {
	return slices.ContainsFunc(messages, func(m cdb.WorkItem) bool {
		_, ok := m.(cdb.ContinueAsNewMessage)
		return ok
	})
}

// pinnedVersion is the duroxide version that started the execution.
func pinnedVersion(history []cdb.Event) (cdb.SemanticVersion, bool) {
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.OrchestrationStarted); ok {
			v, err := cdb.ParseSemanticVersion(ev.DuroxideVersion)
			return v, err == nil
		}
	}
	return cdb.SemanticVersion{}, false
}

// renewOrchestrationLock renews the instance lock until the returned stop
// is called or a renewal fails (the lock is gone; the ack will say so).
func (r *Runtime) renewOrchestrationLock(token string) (stop func()) {
	first, interval := r.renewalSchedule(token, r.opts.OrchestratorLockTimeout, r.opts.OrchestratorLockRenewalBuffer,
		cdb.LockRemainingReporter.OrchestrationLockRemaining)
	return r.renewEvery(r.workCtx, first, interval, func(ctx context.Context) error {
		return r.provider.RenewOrchestrationItemLock(ctx, token, r.opts.OrchestratorLockTimeout)
	}, func(err error) {
		r.log.Debug("orchestration lock renewal failed", "error", err)
	})
}

// renewalSchedule is when a lock just handed out is renewed: every
// interval (renewalInterval of its timeout), the first time after first.
// A lock made ready ahead of its fetch may have less than its timeout left
// (R19): when the provider says what is left (cdb.LockRemainingReporter),
// the first renewal follows the same rule applied to what is left, never
// later than the interval; otherwise it comes an interval after the fetch.
// Every renewal extends the lock by its whole timeout, so only the first
// needs this. remaining is the reporter's method for the lock's kind.
func (r *Runtime) renewalSchedule(token string, timeout, buffer time.Duration,
	remaining func(cdb.LockRemainingReporter, string) (time.Duration, bool)) (first, interval time.Duration) {
	interval = renewalInterval(timeout, buffer)
	if reporter, ok := r.provider.(cdb.LockRemainingReporter); ok {
		if left, ok := remaining(reporter, token); ok {
			return min(renewalInterval(left, buffer), interval), interval
		}
	}
	return interval, interval
}

// renewEvery calls renew once first has passed and then every interval,
// until stopped or renew fails for good. A retryable failure (a timeout,
// throttling) says nothing about the lock, nor does a permanent status the
// store answered (a real account's transient 401 or 403): each is tried
// again after a short backoff, well before the lock expires, and only the
// provider's own refusal (the lock is gone, or expired while the renewals
// failed) calls failed. Renewals end when parent does.
func (r *Runtime) renewEvery(parent context.Context, first, interval time.Duration, renew func(context.Context) error, failed func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait, retries := first, 0
		for r.waitRenewal(ctx, wait) {
			err := renew(ctx)
			switch {
			case err == nil:
				wait, retries = interval, 0
			case ctx.Err() != nil:
				return
			case cdb.IsRetryable(err) || !errors.Is(err, cdb.ErrRefused):
				wait = renewalRetryDelay(interval, retries)
				retries++
				r.log.Debug("lock renewal failed; trying again", "error", err, "retry_in", wait)
			default:
				failed(err)
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitRenewal waits d before a lock renewal (Options.lockRenewalAfter), or
// until ctx ends; it reports whether ctx is still live.
func (r *Runtime) waitRenewal(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-r.opts.lockRenewalAfter(d):
		return ctx.Err() == nil
	}
}

// renewalRetryDelay spaces the retries of a failed renewal: 100ms·2^n, at
// most a quarter of the renewal interval, so several fit before the lock
// expires.
func renewalRetryDelay(interval time.Duration, retries int) time.Duration {
	return min(100*time.Millisecond<<min(retries, 6), max(interval/4, 10*time.Millisecond))
}

// processOrchestrationItem runs one turn and commits it.
func (r *Runtime) processOrchestrationItem(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32, end turnEnd) (outcome turnOutcome, underWay bool) {
	if attempt > r.opts.MaxAttempts {
		return r.poisonOrchestration(ctx, item, token, attempt), false
	}
	if item.HistoryError != nil {
		// Another node (a newer duroxide) may read it; the attempt count
		// keeps growing until the poison path ends it.
		r.turnLog(item).Warn("history could not be decoded; abandoning",
			"error", *item.HistoryError, "attempt", attempt, "max_attempts", r.opts.MaxAttempts)
		r.abandonOrchestration(token, time.Second, false)
		return turnAbandoned, false
	}
	if attempt > 1 {
		r.turnLog(item).Info("taking over a turn: an earlier fetch of its messages ended without a commit (a process stopped, lost its lock or gave them back)",
			"attempt", attempt, "messages", len(item.Messages))
	}
	h := readHistory(item.History)
	b := readBatch(item.Instance, item.Messages, h, r.log)
	if startHidden(item, b) {
		// The start is queued but not in this batch (an abandon's delay
		// hides it): hand the messages back for it, keeping their attempt,
		// rather than consume them as an instance's never started.
		backoff := r.opts.unregisteredBackoff(attempt)
		r.turnLog(item).Debug("messages before their instance's start; abandoning with backoff", "backoff", backoff)
		r.abandonOrchestration(token, backoff, true)
		return turnAbandoned, false
	}
	if b.awaitsSuccessor(h) && holdsInstanceInputs(item.Messages, item.ExecutionID) {
		r.holdForSuccessor(item, token, attempt)
		return turnAbandoned, false
	}
	r.admission.forget(item.Instance)
	collisions := r.collisionNotices(ctx, item, h, b)
	if b.isTerminal(h) || b.name == "" {
		// A finished execution, or messages for an instance nothing
		// started: consume the batch without a turn, telling the parents
		// of child starts it drops.
		r.turnLog(item).Debug("acking a batch without a turn", "terminal", b.isTerminal(h))
		return r.commit(ctx, item, token, attempt, turn{executionID: item.ExecutionID, orchestratorItems: collisions}), false
	}
	executionID, persisted := item.ExecutionID, item.History
	if b.continueAsNew {
		executionID, persisted = item.ExecutionID+1, nil
	}
	plan := turnPlan{instance: item.Instance, executionID: executionID, name: b.name,
		persisted: persisted, batch: b, kvSnapshot: item.KVSnapshot}
	fn, version, ok := r.registry.resolveOrchestration(b.name, b.version)
	if !ok {
		return r.handleUnregisteredOrchestration(ctx, item, token, attempt, plan), false
	}
	plan.fn, plan.version = fn, version
	turnResolved(ctx, executionID, version)
	t, err := runTurn(ctx, plan, r.turnEnv())
	if err != nil {
		r.turnLog(item).Warn("turn interrupted; abandoning", "error", err)
		r.abandonOrchestration(token, 0, true)
		return turnAbandoned, false
	}
	if r.parkOnDivergence(ctx, item, token, plan, t) {
		return turnParked, false
	}
	t.orchestratorItems = append(t.orchestratorItems, collisions...)
	r.commitUnderWay(ctx, item, token, attempt, t, end)
	return "", true
}

// commitUnderWay commits t in the background once a place among
// end.acking's is free, and ends the turn with the commit's outcome.
func (r *Runtime) commitUnderWay(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32, t turn, end turnEnd) {
	end.acking.begin()
	go func() {
		defer end.acking.end()
		end.ended(r.commit(ctx, item, token, attempt, t))
	}()
}

// startHidden says a batch has neither its instance's start nor history,
// but the store names the instance: its start is queued and cannot be taken
// yet. A store names an instance never started UnknownOrchestration.
func startHidden(item *cdb.OrchestrationItem, b batch) bool {
	return len(item.History) == 0 && item.HistoryError == nil && b.name == "" &&
		item.OrchestrationName != "" && item.OrchestrationName != cdb.UnknownOrchestration
}

// commit acks a turn. Only the provider's own refusal of the turn fails
// the orchestration, with an infrastructure error, as duroxide does.
// A lost lock leaves the turn to the lock's next holder; any other
// permanent error is the store's answer, which says nothing final about
// the turn (a real account's transient 401, 403, 404/1003 and 413 among
// them): the batch is abandoned with backoff, its attempt counted, so a
// refusal that never ends reaches poison handling instead of looping.
func (r *Runtime) commit(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32, t turn) turnOutcome {
	md := executionMetadata(t.delta)
	err := r.ackTurn(ctx, item, token, t, md)
	switch {
	case err == nil:
		r.recordExecution(item.Instance, t.executionID)
		r.timerSpans(ctx, item)
		return turnCommitted
	case errors.Is(err, errAckAbandoned):
		r.turnLog(item).Warn("turn not committed; the batch will be retried", "error", err)
	case errors.Is(err, cdb.ErrInvalidLockToken):
		// The lock expired or another dispatcher took the instance: the
		// turn is not refused, only no longer this dispatcher's, and a
		// failure could not be committed with the lost lock either.
		r.turnLog(item).Warn("instance lock lost before the commit; the batch is left to its next holder", "error", err)
	case ctx.Err() != nil:
		r.turnLog(item).Warn("runtime stopping; turn not committed, abandoning", "error", err)
		r.abandonOrchestration(token, 0, true)
	case len(t.delta) > 0 && errors.Is(err, cdb.ErrRefused):
		r.turnLog(item).Warn("turn refused by the provider; failing the orchestration", "error", err)
		return r.failOnCommitError(ctx, item, token, t, err)
	default:
		backoff := r.opts.unregisteredBackoff(attempt)
		r.turnLog(item).Error("the store refused the turn's commit; abandoning with backoff",
			append(storeStatus(err), "attempt", attempt, "backoff", backoff, "error", err)...)
		r.retryLater(ctx, token, backoff)
	}
	return turnAbandoned
}

// storeStatus are the log attributes of the store's answer behind err: its
// status and substatus, when it has them.
func storeStatus(err error) []any {
	if status, substatus, ok := cdb.StoreStatus(err); ok {
		return []any{"status", status, "substatus", substatus}
	}
	return nil
}

// errAckAbandoned marks an ack given up after its retries, its lock
// released.
var errAckAbandoned = errors.New("ack retries exhausted; item abandoned")

// maxAckRetries bounds the retries of a retryable ack failure.
const maxAckRetries = 5

// ackTurn acks with retries of retryable failures (10ms·2^n backoff); when
// they run out it abandons the item with a short delay. Every commit of a
// turn of item goes through it, so it is where what a turn wrote is
// measured, and where what it schedules takes the trace of the turn's span.
func (r *Runtime) ackTurn(ctx context.Context, item *cdb.OrchestrationItem, token string, t turn, md cdb.ExecutionMetadata) error {
	t = withTurnTrace(ctx, t)
	for attempt := 0; ; attempt++ {
		err := r.provider.AckOrchestrationItem(ctx, token, t.executionID, t.delta,
			t.workerItems, t.orchestratorItems, md, t.cancelled)
		if err == nil {
			r.metrics.turnCommitted(ctx, item, t)
			return nil
		}
		if !cdb.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
		if attempt == maxAckRetries {
			r.retryLater(ctx, token, 50*time.Millisecond)
			return fmt.Errorf("%w: %w", errAckAbandoned, err)
		}
		if !sleep(ctx, 10*time.Millisecond<<attempt) {
			return ctx.Err()
		}
	}
}

// failOnCommitError commits OrchestrationFailed{Infrastructure} for a turn
// the provider refused, in the execution the turn was for. A failed
// instance reads as failed, with its name and cause: when the refused
// turn started its execution (a first turn, or the first turn after a
// continue-as-new), the failure is committed with the turn's start event,
// which names the orchestration, and a child's parent is told. Should that
// be refused too, the start goes without its input and carried events (they
// may be what was refused); should it still fail, the item is abandoned.
func (r *Runtime) failOnCommitError(ctx context.Context, item *cdb.OrchestrationItem, token string, refused turn, cause error) turnOutcome {
	details := infrastructureDetails("AckOrchestrationItem", cause)
	t := r.failureTurn(ctx, item, refused, details, false)
	err := r.ackTurn(ctx, item, token, t, executionMetadata(t.delta))
	if err != nil && errors.Is(err, cdb.ErrRefused) && startsExecution(t) {
		r.turnLog(item).Warn("the failure was refused too; committing it with the start's input left out", "error", err)
		t = r.failureTurn(ctx, item, refused, details, true)
		err = r.ackTurn(ctx, item, token, t, executionMetadata(t.delta))
	}
	if err == nil {
		return turnCommitted
	}
	if !errors.Is(err, errAckAbandoned) {
		r.turnLog(item).Warn("could not commit the failure either; abandoning", "error", err)
		r.retryLater(ctx, token, 50*time.Millisecond)
	}
	return turnAbandoned
}

// failureTurn is the turn that fails refused's execution with details: the
// execution's start when refused began it (slim: without its input and
// carried events), then OrchestrationFailed, and the parent's notice.
func (r *Runtime) failureTurn(ctx context.Context, item *cdb.OrchestrationItem, refused turn, details cdb.ErrorDetails, slim bool) turn {
	t := turn{executionID: refused.executionID}
	var base []cdb.Event
	if refused.executionID == item.ExecutionID {
		base = item.History
	}
	if len(base) == 0 && len(refused.delta) > 0 {
		if k, ok := refused.delta[0].Kind.(cdb.OrchestrationStarted); ok {
			start := refused.delta[0]
			if slim {
				k.Input, k.CarryForwardEvents = "", nil
				start.Kind = k
			}
			t.delta = append(t.delta, start)
		}
	}
	t.delta = append(t.delta, newEvent(item.Instance, t.executionID, nextEventID(slices.Concat(base, t.delta)), nil, r.nowMs(),
		cdb.OrchestrationFailed{Details: details}))
	if parent := parentOf(readHistory(slices.Concat(base, t.delta)).started); parent != nil {
		t.orchestratorItems = []cdb.WorkItem{cdb.SubOrchestrationFailedMessage{ParentInstance: parent.instance,
			ParentExecutionID: parentExecutionOf(ctx, parent, item.Instance, r.parentExecution), ParentID: parent.eventID, Details: details}}
	}
	return t
}

// startsExecution reports a turn that writes its execution's start.
func startsExecution(t turn) bool {
	if len(t.delta) == 0 {
		return false
	}
	_, ok := t.delta[0].Kind.(cdb.OrchestrationStarted)
	return ok
}

// infrastructureDetails turns a provider failure into ErrorDetails.
func infrastructureDetails(op string, err error) cdb.ErrorDetails {
	var pe *cdb.ProviderError
	if errors.As(err, &pe) {
		return pe.ToInfrastructureError()
	}
	return cdb.InfrastructureError{Operation: op, Message: err.Error(), Retryable: cdb.IsRetryable(err)}
}

func nextEventID(history []cdb.Event) uint64 {
	if len(history) == 0 {
		return cdb.InitialEventID
	}
	return history[len(history)-1].EventID + 1
}

func (r *Runtime) nowMs() uint64 { return uint64(max(r.opts.Now().UnixMilli(), 0)) }

// retryLater gives a batch whose commit failed back for another try after
// backoff, its attempt counted. It waits out the backoff holding the lock
// (its renewal runs) and then abandons without a delay, rather than
// abandoning with the delay: an abandon's delay hides only the batch
// (duroxide 0.1.32), and a message that arrived meanwhile would be taken
// before it, out of its sender's order; a held lock keeps the whole
// instance in order. A stopping runtime gives the lock back at once.
func (r *Runtime) retryLater(ctx context.Context, token string, backoff time.Duration) {
	sleep(ctx, backoff)
	r.abandonOrchestration(token, 0, false)
}

// abandonOrchestration releases an instance lock; it runs even after the
// work context has ended, so a stopping runtime does not sit on locks.
func (r *Runtime) abandonOrchestration(token string, delay time.Duration, ignoreAttempt bool) {
	ctx, cancel := r.cleanupContext()
	defer cancel()
	if err := r.provider.AbandonOrchestrationItem(ctx, token, delay, ignoreAttempt); err != nil {
		r.log.Debug("abandon orchestration item failed", "error", err)
	}
}

// poisonOrchestration fails an instance whose messages were fetched more
// than MaxAttempts times, telling its parent.
func (r *Runtime) poisonOrchestration(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32) turnOutcome {
	r.turnLog(item).Warn("orchestration message exceeded max attempts; failing it as poison",
		"attempt", attempt, "max_attempts", r.opts.MaxAttempts)
	r.metrics.poisoned(ctx, "orchestrator")
	if item.HistoryError != nil {
		return r.poisonUndecodable(ctx, item, token, attempt)
	}
	messages, _ := json.Marshal(item.Messages)
	details := cdb.PoisonError{
		AttemptCount: attempt, MaxAttempts: r.opts.MaxAttempts, Message: string(messages),
		MessageType: cdb.PoisonOrchestration{Instance: item.Instance, ExecutionID: item.ExecutionID},
	}
	h := readHistory(item.History)
	b := readBatch(item.Instance, item.Messages, h, r.log)
	var delta []cdb.Event
	next := nextEventID(item.History)
	if len(item.History) == 0 {
		// A start that never got through: record it so the failure has an
		// execution to belong to.
		delta = append(delta, startEvent(turnPlan{instance: item.Instance, executionID: item.ExecutionID,
			name: orElse(b.name, item.OrchestrationName), version: item.Version, batch: b}, r.nowMs()))
		next = cdb.InitialEventID + 1
	}
	delta = append(delta, newEvent(item.Instance, item.ExecutionID, next, nil, r.nowMs(), cdb.OrchestrationFailed{Details: details}))
	md := executionMetadata(delta)
	md.PinnedDuroxideVersion = nil // the execution keeps the version it started with
	t := turn{executionID: item.ExecutionID, delta: delta}
	if b.parent != nil {
		t.orchestratorItems = []cdb.WorkItem{cdb.SubOrchestrationFailedMessage{ParentInstance: b.parent.instance,
			ParentExecutionID: parentExecutionOf(ctx, b.parent, item.Instance, r.parentExecution), ParentID: b.parent.eventID, Details: details}}
	}
	if err := r.ackTurn(ctx, item, token, t, md); err != nil {
		r.turnLog(item).Warn("could not commit the poison failure", "error", err)
		return turnAbandoned
	}
	return turnCommitted
}

// poisonUndecodable fails an instance whose history cannot be decoded. The
// next event id is unknowable, so the failure takes duroxide's sentinel id
// 99999; the provider appends without reading the corrupted rows.
func (r *Runtime) poisonUndecodable(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32) turnOutcome {
	details := cdb.PoisonError{
		AttemptCount: attempt, MaxAttempts: r.opts.MaxAttempts, Message: *item.HistoryError,
		MessageType: cdb.PoisonFailedDeserialization{Instance: item.Instance, ExecutionID: item.ExecutionID, Error: *item.HistoryError},
	}
	const sentinelEventID = 99999
	failedEv := newEvent(item.Instance, item.ExecutionID, sentinelEventID, nil, r.nowMs(), cdb.OrchestrationFailed{Details: details})
	md := executionMetadata([]cdb.Event{failedEv})
	md.OrchestrationName, md.OrchestrationVersion = ptr(item.OrchestrationName), ptr(item.Version)
	t := turn{executionID: item.ExecutionID, delta: []cdb.Event{failedEv}}
	if err := r.ackTurn(ctx, item, token, t, md); err != nil {
		r.turnLog(item).Warn("could not commit the poison failure", "error", err)
		return turnAbandoned
	}
	return turnCommitted
}

func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
