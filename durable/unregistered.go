package durable

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/duroxide-go/cdb"
)

// UnregisteredPolicy says what becomes of work whose orchestration or
// activity this runtime has not registered: a misspelled name, or a name
// only another runtime (a newer build, during a rolling deploy) knows. It
// applies to activities and to the first start of an orchestration name
// with no version registered here; an instance that has already run, or
// a version missing beside registered ones, always waits with backoff
// until MaxAttempts makes it poison (another runtime may have the code).
type UnregisteredPolicy int

const (
	// UnregisteredFailAfterBackoff (the default) gives the work back with
	// backoff (UnregisteredBackoffBase, doubling) for another runtime to
	// take, and fails it on its UnregisteredAttempts-th fetch: the activity
	// fails, or the instance does, with an error that names what is
	// registered and matches ErrNotRegistered.
	UnregisteredFailAfterBackoff UnregisteredPolicy = iota
	// UnregisteredFailAtOnce fails the work on its first fetch.
	UnregisteredFailAtOnce
	// UnregisteredBackoffUntilPoison is duroxide's behaviour: the work is
	// given back with backoff on every fetch until MaxAttempts makes it
	// poison. Use it while runtimes with different registrations share a
	// store for long (a slow rolling deploy).
	UnregisteredBackoffUntilPoison
)

// failsUnregistered reports whether work without a handler fails on its
// attempt-th fetch rather than being given back.
func (o Options) failsUnregistered(attempt uint32) bool {
	switch o.Unregistered {
	case UnregisteredFailAtOnce:
		return true
	case UnregisteredBackoffUntilPoison:
		return false
	}
	return attempt >= o.UnregisteredAttempts
}

// notRegistered is the failure of work whose handler is missing: not
// retryable, and it names what is registered instead.
func notRegistered(message string) *ApplicationError {
	return &ApplicationError{Type: notRegisteredType, Message: message, NonRetryable: true}
}

// hasOrchestration reports whether any version of name is registered.
func (r *Registry) hasOrchestration(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.orchestrations[name]) > 0
}

// unregisteredActivity describes a missing activity for its failure.
func (r *Registry) unregisteredActivity(name string) string {
	r.mu.RLock()
	names := make([]string, 0, len(r.activities))
	for n := range r.activities {
		if !strings.HasPrefix(n, sysActivityPrefix) {
			names = append(names, n)
		}
	}
	r.mu.RUnlock()
	return fmt.Sprintf("activity %q is not registered%s", name, alternatives(name, names))
}

// unregisteredOrchestration describes a missing orchestration (or a
// missing version of one) for its failure.
func (r *Registry) unregisteredOrchestration(name string, version *string) string {
	r.mu.RLock()
	versions := r.orchestrations[name]
	names := make([]string, 0, len(r.orchestrations))
	for n := range r.orchestrations {
		names = append(names, n)
	}
	r.mu.RUnlock()
	if len(versions) > 0 {
		registered := make([]string, len(versions))
		for i, v := range versions {
			registered[i] = v.version.String()
		}
		return fmt.Sprintf("orchestration %q version %s is not registered (registered versions: %s)",
			name, orElse(deref(version), "chosen by its version policy"), strings.Join(registered, ", "))
	}
	return fmt.Sprintf("orchestration %q is not registered%s", name, alternatives(name, names))
}

// maxListedNames bounds the registered names a failure lists.
const maxListedNames = 20

// alternatives lists the registered names, the closest to name first
// suggested.
func alternatives(name string, registered []string) string {
	if len(registered) == 0 {
		return " (nothing is registered)"
	}
	slices.Sort(registered)
	listed := registered
	if len(listed) > maxListedNames {
		listed = append(slices.Clip(listed[:maxListedNames]), "…")
	}
	text := " (registered: " + strings.Join(listed, ", ") + ")"
	if closest, ok := closestName(name, registered); ok {
		text += fmt.Sprintf("; did you mean %q?", closest)
	}
	return text
}

// closestName is the registered name nearest to name by edit distance,
// ignoring case, when it is near enough to be a likely misspelling.
func closestName(name string, registered []string) (string, bool) {
	best, bestDistance := "", -1
	for _, candidate := range registered {
		d := editDistance(strings.ToLower(name), strings.ToLower(candidate))
		if bestDistance < 0 || d < bestDistance {
			best, bestDistance = candidate, d
		}
	}
	limit := max(2, utf8.RuneCountInString(name)/3)
	return best, bestDistance >= 0 && bestDistance <= limit
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			substitution := prev[j-1]
			if ra[i-1] != rb[j-1] {
				substitution++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, substitution)
		}
		prev = cur
	}
	return prev[len(rb)]
}

// handleUnregisteredActivity gives an activity without a handler back with
// backoff, or fails it when the policy says its time is up (acked under
// ctx's span).
func (r *Runtime) handleUnregisteredActivity(ctx context.Context, w lockedActivity) {
	if !r.opts.failsUnregistered(w.attempt) {
		backoff := r.opts.unregisteredBackoff(w.attempt)
		r.activityLog(w).Warn("activity not registered; abandoning with backoff",
			"attempt", w.attempt, "backoff", backoff, "fails_at_attempt", r.failingAttempt(true))
		r.abandonWork(w.token, backoff, false)
		return
	}
	failure := notRegistered(r.registry.unregisteredActivity(w.Name))
	r.activityLog(w).Error("activity not registered; failing it", "attempt", w.attempt, "error", failure.Message)
	r.ackActivity(ctx, w, activityResult{err: failure})
}

// handleUnregisteredOrchestration gives a batch whose orchestration has no
// handler back with backoff, or fails the instance (telling its parent)
// when the policy says its time is up. Only a first start of a name that
// nothing here registers can be a misspelling: an instance that has run
// (or continues as new), or a version missing beside others, means
// runtimes with different code share the store, and it waits for one that
// has it, as duroxide does, until poison.
func (r *Runtime) handleUnregisteredOrchestration(ctx context.Context, item *cdb.OrchestrationItem, token string, attempt uint32, plan turnPlan) turnOutcome {
	version := plan.batch.version
	misspellable := len(item.History) == 0 && plan.executionID == item.ExecutionID && !r.registry.hasOrchestration(plan.name)
	if !misspellable || !r.opts.failsUnregistered(attempt) {
		backoff := r.opts.unregisteredBackoff(attempt)
		r.turnLog(item).Warn("orchestration not registered; abandoning with backoff",
			"version", deref(version), "attempt", attempt, "backoff", backoff,
			"fails_at_attempt", r.failingAttempt(misspellable))
		r.abandonOrchestration(token, backoff, false)
		return turnAbandoned
	}
	failure := notRegistered(r.registry.unregisteredOrchestration(plan.name, version))
	r.turnLog(item).Error("orchestration not registered; failing the instance",
		"version", deref(version), "attempt", attempt, "error", failure.Message)
	details := applicationFailure(cdb.AppOrchestrationFailed{}, failure, nil)
	unrun := turn{executionID: plan.executionID}
	if len(plan.persisted) == 0 {
		plan.version = orElse(deref(version), item.Version)
		unrun.delta = []cdb.Event{startEvent(plan, r.nowMs())}
	}
	return r.commit(ctx, item, token, attempt, r.failureTurn(ctx, item, unrun, details, false))
}

// failingAttempt is the fetch on which work without a handler fails, for
// the logs; 0 when it never does (only poison ends it).
func (r *Runtime) failingAttempt(policyApplies bool) uint32 {
	switch {
	case !policyApplies || r.opts.Unregistered == UnregisteredBackoffUntilPoison:
		return 0
	case r.opts.Unregistered == UnregisteredFailAtOnce:
		return 1
	}
	return r.opts.UnregisteredAttempts
}
