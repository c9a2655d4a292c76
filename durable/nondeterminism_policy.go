package durable

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// Parking on nondeterminism. A deploy that changes an orchestration's code
// under the same name and version makes the turns of its running instances
// diverge from their histories. Failing them, as duroxide does, loses work
// that rolling the deploy back would have saved (an order waiting for an
// approval). So by default a turn that diverges is not committed: its batch
// is given back with a growing delay and its attempt undone, as a turn
// whose orchestration is not registered here is. A provider that records
// parks (cdb.ParkRecorder) writes why, since when and how often on the
// instance in the same write, so that every client and `cdb show` see it,
// until a turn commits; the runtime also keeps the divergence in memory
// for Runtime.ParkedInstances (and for Status.Parked on a provider that
// does not record parks). The instance replays at every retry; once the
// code that wrote its history runs again (the deploy rolled back, here or
// on another runtime) the turn matches and the instance goes on. Nothing
// else is written while it is parked: the history, the custom status and
// the attempt count stay as they were.

// NondeterminismPolicy says what a runtime does with a turn whose code no
// longer matches the instance's history (a nondeterminism error).
type NondeterminismPolicy int

const (
	// ParkOnNondeterminism (the default) leaves the instance running and
	// retries its turn with backoff (UnregisteredBackoffBase doubling up to
	// UnregisteredBackoffMax), never counting the attempt, until code that
	// matches the history runs it; Status.Parked says why it waits. A
	// cancellation still ends it: a diverging turn that carries one fails
	// the instance with the nondeterminism error.
	ParkOnNondeterminism NondeterminismPolicy = iota
	// FailOnNondeterminism fails the instance at once with a
	// cdb.ConfigurationError of kind cdb.ConfigNondeterminism, as duroxide
	// does.
	FailOnNondeterminism
)

// ParkedInstance is an instance whose turns a runtime keeps retrying
// because its code no longer matches its history: as this runtime last saw
// it (Runtime.ParkedInstances), or as the store records it (Status.Parked
// on a provider that records parks, where ExecutionID, Orchestration and
// Version are known only to the parking runtime's client, and Since and
// RetryAt are on the provider's clock).
type ParkedInstance struct {
	// Instance is the parked instance.
	Instance string
	// ExecutionID is the execution whose turn diverged.
	ExecutionID uint64
	// Orchestration and Version are the registration whose code diverged.
	Orchestration string
	// Version is the registered version that ran.
	Version string
	// Error is the nondeterminism: which event of the history the code did
	// not reproduce, and what it did instead.
	Error string
	// Parks counts the diverging turns in a row.
	Parks uint32
	// Since is when the first of them ran (Options.Now).
	Since time.Time
	// RetryAt is when the parked batch is due again (Options.Now).
	RetryAt time.Time
}

// ParkedInstances lists the instances this runtime holds parked for
// nondeterminism, by instance id. An instance leaves the list when a turn
// of it matches its history again here; one another runtime has since
// healed stays listed until this runtime runs a turn of it again.
func (r *Runtime) ParkedInstances() []ParkedInstance { return r.parked.list() }

// parkedTurns are the instances a runtime holds parked, by instance id.
type parkedTurns struct {
	mu   sync.Mutex
	byID map[string]ParkedInstance
}

func newParkedTurns() *parkedTurns { return &parkedTurns{byID: map[string]ParkedInstance{}} }

// park records one more diverging turn of p.Instance and returns the record.
func (s *parkedTurns) park(p ParkedInstance, now time.Time) ParkedInstance {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.byID[p.Instance]
	p.Parks, p.Since = 1, now
	if ok {
		p.Parks, p.Since = prev.Parks+1, prev.Since
	}
	s.byID[p.Instance] = p
	return p
}

// setRetryAt records when the parked batch of instance is due again.
func (s *parkedTurns) setRetryAt(instance string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.byID[instance]; ok {
		p.RetryAt = at
		s.byID[instance] = p
	}
}

func (s *parkedTurns) forget(instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, instance)
}

func (s *parkedTurns) lookup(instance string) (ParkedInstance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byID[instance]
	return p, ok
}

func (s *parkedTurns) list() []ParkedInstance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ParkedInstance, 0, len(s.byID))
	for _, p := range s.byID {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out
}

// parkOnDivergence parks the instance of a turn that diverged from its
// history, when the policy says so, and reports whether it did; any other
// turn clears the instance's record.
func (r *Runtime) parkOnDivergence(ctx context.Context, item *cdb.OrchestrationItem, token string, plan turnPlan, t turn) bool {
	message, diverged := divergence(t.result)
	if !diverged || r.opts.NondeterminismPolicy == FailOnNondeterminism ||
		carriesCancellation(item.Messages) || !r.historyDiverges(ctx, plan) {
		r.parked.forget(item.Instance)
		return false
	}
	now := r.opts.Now()
	p := r.parked.park(ParkedInstance{Instance: item.Instance, ExecutionID: plan.executionID,
		Orchestration: plan.name, Version: plan.version, Error: message}, now)
	backoff := r.opts.unregisteredBackoff(p.Parks)
	r.parked.setRetryAt(item.Instance, now.Add(backoff))
	r.turnLog(item).Warn("orchestration code does not match the history; parking the instance until code that does runs it",
		"version", plan.version, "error", message,
		"parks", p.Parks, "backoff", backoff)
	r.parkOrchestration(token, backoff, message)
	r.metrics.parkedTurn(ctx, plan.name, plan.version)
	return true
}

// parkOrchestration gives the parked batch back for backoff, its attempt
// undone: recorded in the store when the provider can (cdb.ParkRecorder),
// so that every client sees the park, abandoned otherwise. A record the
// store refuses falls back to the plain abandon: a batch left to its lock's
// expiry would count an attempt, and enough of those would make a parked
// instance poison, which parking promises never to do.
func (r *Runtime) parkOrchestration(token string, backoff time.Duration, reason string) {
	recorder, ok := r.provider.(cdb.ParkRecorder)
	if !ok {
		r.abandonOrchestration(token, backoff, true)
		return
	}
	ctx, cancel := r.cleanupContext()
	defer cancel()
	err := recorder.ParkOrchestrationItem(ctx, token, backoff, reason)
	if err == nil {
		return
	}
	r.log.Warn("recording the park failed; giving the batch back without the record", "error", err)
	r.abandonOrchestration(token, backoff, true)
}

// historyDiverges replays the persisted history alone, without the batch,
// and reports whether the code diverges from it: only then can other code
// heal the instance. A batch that fails the turn by itself (a malformed
// completion, a child's system failure passed on) is failed as before, and
// so is a new execution, which has no history to diverge from.
func (r *Runtime) historyDiverges(ctx context.Context, plan turnPlan) bool {
	if len(plan.persisted) == 0 {
		return false
	}
	plan.batch.completions = nil
	t, err := runTurn(ctx, plan, r.turnEnv())
	if err != nil {
		return false
	}
	_, diverged := divergence(t.result)
	return diverged
}

// divergence is the message of a turn that failed with nondeterminism.
func divergence(res turnResult) (string, bool) {
	ce, ok := res.details.(cdb.ConfigurationError)
	if res.kind != turnFailed || !ok || ce.Kind != cdb.ConfigNondeterminism {
		return "", false
	}
	return deref(ce.Message), true
}

// carriesCancellation reports a batch that cancels the instance: a parked
// instance can still be ended.
func carriesCancellation(messages []cdb.WorkItem) bool {
	return slices.ContainsFunc(messages, func(m cdb.WorkItem) bool {
		_, ok := m.(cdb.CancelInstanceMessage)
		return ok
	})
}
