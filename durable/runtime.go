package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/duroxide-go/cdb"
)

// Runtime runs orchestrations and activities of a Registry against a
// provider: orchestration dispatchers replay turns, worker dispatchers run
// activities. Several runtimes (processes) may share one provider.
type Runtime struct {
	provider cdb.Provider
	registry *Registry
	opts     Options
	log      *slog.Logger
	client   *Client
	id       string
	filter   cdb.DispatcherCapabilityFilter
	sessions *sessionTracker
	// startedAt is when Start began, on the runtime's clock and on the
	// machine's.
	startedAt, startedAtReal time.Time

	// fetchCtx ends when shutdown begins: no new work is fetched. workCtx
	// ends when shutdown runs out of time (or Start's context ends): turns
	// in flight are abandoned, activities are cancelled (their locks kept
	// for the grace, see Shutdown).
	fetchCtx     context.Context
	stopFetching context.CancelFunc
	workCtx      context.Context
	stopWork     context.CancelFunc
	loops        sync.WaitGroup

	mu         sync.Mutex
	executions map[string]uint64 // instance → latest execution this runtime committed

	admission *admissionHolds // batches given back waiting for a successor's start (admission.go)
	parked    *parkedTurns    // instances parked for nondeterminism (nondeterminism_policy.go)
	metrics   *runtimeMetrics // nil without a Meter (telemetry.go)
}

// serviceClock is a provider that reads time as its store does
// (cdb.CosmosProvider): the runtime's default clock.
type serviceClock interface{ ServiceTime() time.Time }

// Run runs a runtime until ctx ends, then shuts it down gracefully: it
// stops fetching work and lets the turns and activities in flight finish,
// for at most Options.ShutdownTimeout, before it abandons what is left
// (Shutdown). It is a worker process's natural main: given the context of
// signal.NotifyContext, a SIGTERM lets the work in flight finish. It
// returns Start's error, or Shutdown's (nil when everything finished in
// time). Use Start for a runtime the program stops itself.
func Run(ctx context.Context, provider cdb.Provider, registry *Registry, opts Options) error {
	rt, err := Start(context.WithoutCancel(ctx), provider, registry, opts)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stopping, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.opts.ShutdownTimeout)
	defer cancel()
	return rt.Shutdown(stopping)
}

// Start validates the options and starts the dispatchers. The runtime runs
// until Shutdown, or until ctx ends, which abandons the work in flight at
// once, as a crash would: a turn is run again elsewhere, an activity's
// context is cancelled. To let work in flight finish, call Shutdown with a
// context that allows the time, or run the runtime with Run, which does
// when its context ends (the graceful path for signal.NotifyContext).
func Start(ctx context.Context, provider cdb.Provider, registry *Registry, opts Options) (*Runtime, error) {
	if provider == nil || registry == nil {
		return nil, fmt.Errorf("durable: start: %w: provider and registry are required", ErrInvalidInput)
	}
	if c, ok := provider.(serviceClock); ok && opts.Now == nil {
		opts.Now = c.ServiceTime
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	id, err := randomID()
	if err != nil {
		return nil, fmt.Errorf("durable: start: %w", err)
	}
	r := &Runtime{
		provider: provider, registry: registry, opts: opts, log: opts.Logger.With("runtime", id),
		client: NewClient(provider), id: id, filter: opts.capabilityFilter(),
		sessions: newSessionTracker(), startedAt: opts.Now(), startedAtReal: time.Now(),
		executions: map[string]uint64{}, admission: newAdmissionHolds(),
		parked: newParkedTurns(), metrics: newRuntimeMetrics(opts.Telemetry.Meter),
	}
	r.client.parked = r.parked.lookup
	r.client.tracer = opts.Telemetry.Tracer
	// Start's context bounds the runtime's life, but none of its values
	// reach the dispatchers: a span there would parent every turn.
	r.workCtx, r.stopWork = spanFreeContext(ctx)
	r.fetchCtx, r.stopFetching = context.WithCancel(r.workCtx)
	r.startDispatchers()
	return r, nil
}

func (r *Runtime) startDispatchers() {
	if !r.opts.WorkerOnly {
		for slot := range r.opts.OrchestrationConcurrency {
			r.spawn(func() { r.orchestrationLoop(slot) })
		}
	}
	if r.opts.WorkerTagFilter.Mode() == cdb.TagFilterNone {
		return // an orchestration-only runtime runs no activities
	}
	var owners []string
	var workers sync.WaitGroup
	for slot := range r.opts.WorkerConcurrency {
		owner := r.sessionOwner(slot)
		if len(owners) == 0 || owners[len(owners)-1] != owner {
			owners = append(owners, owner)
		}
		workers.Add(1)
		r.spawn(func() {
			defer workers.Done()
			r.workerLoop(slot, owner)
		})
	}
	workersDone := make(chan struct{})
	go func() {
		workers.Wait()
		close(workersDone)
	}()
	r.spawn(func() { r.sessionManager(owners, workersDone) })
}

func (r *Runtime) spawn(loop func()) {
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		loop()
	}()
}

// Shutdown stops fetching work and waits for the turns and activities in
// flight to finish. When ctx ends first, it cancels them and returns ctx's
// error once they are over: a turn is abandoned for another runtime to
// run again; an activity's context is cancelled, and its handler gets
// ActivityCancellationGrace to return. Within the grace the activity's
// lock (and its session's) is kept and renewed, so no other runtime runs
// the same activity, or its session's next, meanwhile; a result it
// returns within the grace is acked (a failure is released for a retry
// instead, since it may be the cancellation's).
//
// A handler that ignores its cancellation past the grace still keeps its
// item: the item is never released while its handler may run. Its result
// is dropped and its lock is no longer renewed, so the item stays hidden
// until the lock expires (at most WorkerLockTimeout after the grace) and
// only then runs again elsewhere, beside the handler should it still run.
// Its session is not released either and stays this runtime's until the
// session's lock expires (at most SessionLockTimeout after the grace).
// Shutdown does not renew such locks until the handler returns: that
// would make it wait without bound on code that ignores it. So Shutdown
// returns at most a grace after ctx ends (plus the requests that release
// the locks of work that did stop), and every lock it held is then
// released, except those of handlers past their grace, left to expire.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.stopFetching()
	stopped := make(chan struct{})
	go func() {
		r.loops.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
		r.stopWork()
		return nil
	case <-ctx.Done():
		r.stopWork()
		<-stopped
		return fmt.Errorf("durable: shutdown: work in flight abandoned: %w", ctx.Err())
	}
}

// Client is a client on the runtime's provider.
func (r *Runtime) Client() *Client { return r.client }

// ID identifies this runtime in logs and worker ids.
func (r *Runtime) ID() string { return r.id }

// recordExecution remembers an instance's latest execution after an ack,
// for the completions its children send it.
func (r *Runtime) recordExecution(instance string, executionID uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.executions[instance] = executionID
}

// parentExecutionOf is the parent execution a child's result goes to: the
// one the child's start named (duroxide 0.1.30 stamps the scheduling
// execution), so a child that outlives that execution reports to it and
// the parent's next execution never sees the result; for a start written
// by 0.1.29, which names none, recoverExecution finds it.
func parentExecutionOf(ctx context.Context, link *parentLink, child string,
	recoverExecution func(ctx context.Context, parent, child string) uint64) uint64 {
	if link.executionID != nil {
		return *link.executionID
	}
	return recoverExecution(ctx, link.instance, child)
}

// parentExecution recovers the parent execution a child's result is
// addressed to when the child's start did not name it (written by duroxide
// 0.1.29): a generated child id names the execution that scheduled it (see
// autoChildSuffix); otherwise the parent's latest execution is asked of
// the provider (a child only starts once its parent's turn is committed),
// then what this runtime last committed for the parent, then 1.
func (r *Runtime) parentExecution(ctx context.Context, parent, child string) uint64 {
	if id, ok := executionFromChildID(parent, child); ok {
		return id
	}
	if admin, ok := r.provider.Admin(); ok {
		if id, err := admin.LatestExecutionID(ctx, parent); err == nil {
			return id
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.executions[parent]; ok {
		return id
	}
	return cdb.InitialExecutionID
}

func (r *Runtime) turnEnv() turnEnv {
	return turnEnv{now: r.opts.Now, log: r.log, parentExecution: r.parentExecution, errorTypes: r.registry}
}

// cleanupContext bounds the calls that release locks after the work
// context has ended (abandons during a hard stop).
func (r *Runtime) cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.workCtx), cleanupTimeout)
}

// cleanupTimeout bounds a call that releases or settles a lock after the
// work context may have ended.
const cleanupTimeout = 5 * time.Second

// idle waits out the rest of the minimum poll interval after a fetch that
// found nothing; a fetch that already took that long (a long poll) goes
// again at once. It reports false when fetching has stopped.
func (r *Runtime) idle(fetchStarted time.Time) bool {
	rest := r.opts.MinPollInterval - time.Since(fetchStarted)
	if rest <= 0 {
		return r.fetchCtx.Err() == nil
	}
	return sleep(r.fetchCtx, rest)
}

// fetchBackoff is the pause after a failed fetch: retryable errors, and
// permanent statuses the store answered (a 401 or 403 that may pass),
// back off exponentially (100ms·2^n, at most 3s); the provider's own
// refusals wait 100ms.
func fetchBackoff(err error, consecutive *uint32) time.Duration {
	if errors.Is(err, cdb.ErrRefused) {
		*consecutive = 0
		return 100 * time.Millisecond
	}
	*consecutive++
	return min(100*time.Millisecond<<min(*consecutive, 6), 3*time.Second)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pollLoop is a dispatcher loop: fetch and process until fetching stops,
// pacing idle polls and backing off after errors.
func (r *Runtime) pollLoop(what string, next func() (found bool, err error)) {
	var failures uint32
	for r.fetchCtx.Err() == nil {
		started := time.Now()
		found, err := next()
		if err != nil {
			if r.fetchCtx.Err() != nil {
				return // the fetch was interrupted by shutdown
			}
			delay := fetchBackoff(err, &failures)
			level := slog.LevelWarn
			if !cdb.IsRetryable(err) && !errors.Is(err, cdb.ErrRefused) {
				level = slog.LevelError // the store refused: say so, with its status
			}
			r.log.Log(r.fetchCtx, level, "fetch failed", append(storeStatus(err),
				"dispatcher", what, "error", err, "retryable", cdb.IsRetryable(err), "backoff", delay)...)
			if !sleep(r.fetchCtx, delay) {
				return
			}
			continue
		}
		failures = 0
		if !found && !r.idle(started) {
			return
		}
	}
}

// randomID names a runtime: a random UUID, so runtimes sharing a provider
// never share a worker id or session owner.
func randomID() (string, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("runtime id: %w", err)
	}
	return id.String(), nil
}
