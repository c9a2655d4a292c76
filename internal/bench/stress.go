// Package bench runs duroxide's stress protocol on the Cosmos DB provider:
// a fan-out orchestration of short activities, kept at a fixed number in
// flight, measured in orchestrations
// and activities per second, per-instance latency, and per orchestration
// the provider's requests (by operation) and RU, the turns committed and
// the 412s per work item. Orchestrations are started through the runtime's
// client, as an application in the same process starts them (one request
// each, counted with the provider's, and woken in process); the harness's
// status polls run on a provider and Client of their own on the same
// container, so their requests are reported apart, and the runtime's
// provider tells them when an orchestration ended, as it tells a client in
// its process.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// Config is one stress run. The zero value of each field is duroxide's
// protocol default.
type Config struct {
	OrchestrationConcurrency int           // orchestration dispatchers (default 1)
	WorkerConcurrency        int           // worker dispatchers (default 1)
	MaxInFlight              int           // orchestrations running at once (default 20)
	Duration                 time.Duration // how long to keep launching (default 10s)
	// Orchestrations, when set, launches exactly this many instead of
	// running for Duration (for go test -bench).
	Orchestrations int
	// Shape is the orchestration kept in flight (default fanout).
	Shape            Shape
	TasksPerInstance int           // activities (or children) per orchestration (default 5)
	ActivityDelay    time.Duration // each activity's work (default 10ms)
	// Wait is the timers shape's timer, and how long after its start the
	// events shape's event is raised (default 1s).
	Wait        time.Duration
	WaitTimeout time.Duration // per orchestration (default 60s)
	Latency     time.Duration // added per request by the in-memory Cosmos DB
}

func (c Config) withDefaults() Config {
	if c.OrchestrationConcurrency <= 0 {
		c.OrchestrationConcurrency = 1
	}
	if c.WorkerConcurrency <= 0 {
		c.WorkerConcurrency = 1
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 20
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.TasksPerInstance <= 0 {
		c.TasksPerInstance = 5
	}
	if c.Shape == "" {
		c.Shape = ShapeFanOut
	}
	if c.Wait <= 0 {
		c.Wait = time.Second
	}
	if c.ActivityDelay <= 0 {
		c.ActivityDelay = 10 * time.Millisecond
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 60 * time.Second
	}
	return c
}

// Result is what a run measured. The provider's figures are the runtime's
// provider's, the starts' enqueue included; polling the orchestrations'
// status is the harness's, counted apart on a Client of its own.
type Result struct {
	Config              Config
	Launched, Completed int
	Failed              int
	Elapsed             time.Duration
	P50, P99            time.Duration
	// Latencies are the completed orchestrations' times from start to
	// completion, shortest first, so runs in several processes can be
	// merged into exact percentiles.
	Latencies []time.Duration

	OrchestrationsPerSecond float64
	ActivitiesPerSecond     float64

	// Provider is what the runtime's provider spent, Harness what the
	// harness's status polls spent.
	Provider, Harness Usage
	// Turns counts the orchestration turns that committed (acks that
	// succeeded), WorkerItems the worker items acked.
	Turns, WorkerItems int64

	RequestsPerOrchestration        float64 // the provider's
	RUPerOrchestration              float64 // the provider's
	HarnessRequestsPerOrchestration float64
	TurnsPerOrchestration           float64
	// PreconditionFailedPerItem is the provider's 412 responses (claims
	// and locks that lost a race) per work item processed: turns plus
	// worker items.
	PreconditionFailedPerItem float64

	// The shape's steps (Shape.Step: an activity, a timer, an event or a
	// child): how many one orchestration takes, how many completed per
	// second, and the provider's requests and RU per step.
	StepsPerOrchestration int
	StepsPerSecond        float64
	RequestsPerStep       float64
	RUPerStep             float64
	// StepP50 and StepP99 are a step's latency: for fanout and children,
	// whose steps run at once, the orchestration's; for a sequence, from
	// one activity's start to the next one's (the activity's own work
	// included, a timer between them left out); for timers, from the
	// timer's due time to the completion seen; for events, from the
	// raise to the completion seen.
	StepP50, StepP99 time.Duration
	// EarlySteps and LateSteps are, for a sequence run one orchestration
	// at a time (MaxInFlight 1) of at least 22 steps, what a step cost on
	// average over steps 2 to 11 and over the last ten: a cost that grows
	// with the history behind a step shows as LateSteps above EarlySteps.
	EarlySteps, LateSteps *StepCost
}

// Usage is what one Client spent during a run.
type Usage struct {
	Requests           int64
	RequestCharge      float64
	PreconditionFailed int64
	ByOperation        map[string]cdb.OperationStats
}

// RequestsPerOrchestrationByOperation splits the provider's requests per
// completed orchestration by Client operation ("Query", "PatchItem", ...).
func (r Result) RequestsPerOrchestrationByOperation() map[string]float64 {
	out := make(map[string]float64, len(r.Provider.ByOperation))
	if r.Completed == 0 {
		return out
	}
	for op, s := range r.Provider.ByOperation {
		out[op] = float64(s.Requests) / float64(r.Completed)
	}
	return out
}

// usageBetween is what a Client spent between two snapshots of its
// statistics.
func usageBetween(before, after cdb.ClientStats) Usage {
	u := Usage{
		Requests:           after.Requests - before.Requests,
		RequestCharge:      after.RequestCharge - before.RequestCharge,
		PreconditionFailed: after.PreconditionFailed - before.PreconditionFailed,
		ByOperation:        map[string]cdb.OperationStats{},
	}
	for op, a := range after.ByOperation {
		b := before.ByOperation[op]
		d := cdb.OperationStats{
			Operations: a.Operations - b.Operations, Errors: a.Errors - b.Errors,
			Requests: a.Requests - b.Requests, RequestCharge: a.RequestCharge - b.RequestCharge,
			Retries: a.Retries - b.Retries, Throttles: a.Throttles - b.Throttles,
			PreconditionFailed: a.PreconditionFailed - b.PreconditionFailed,
		}
		if d.Requests > 0 || d.Operations > 0 {
			u.ByOperation[op] = d
		}
	}
	return u
}

// Target is where a run's providers live.
type Target struct {
	// Provider is the runtime's provider; its Client's statistics count the
	// provider's requests, RU and 412s. Nil: a fresh in-memory Cosmos DB
	// with Config.Latency, for both providers.
	Provider *cdb.CosmosProvider
	// Harness polls the orchestrations' status: a provider
	// on Provider's container through a Client of its own, so that its
	// requests are not counted as the provider's. Required with Provider.
	Harness *cdb.CosmosProvider

	// wrapHarness, when set, stands between the harness and its provider
	// (tests make the status polling heavier with it).
	wrapHarness func(cdb.Provider) cdb.Provider
}

// onFake is a Target on a fresh in-memory Cosmos DB, and how to close it.
func onFake(ctx context.Context, latency time.Duration) (Target, func(), error) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Latency: latency})
	runtime, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client()})
	if err != nil {
		return Target{}, nil, fmt.Errorf("bench: provider: %w", err)
	}
	harness, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client()})
	if err != nil {
		_ = runtime.Close()
		return Target{}, nil, fmt.Errorf("bench: harness provider: %w", err)
	}
	return Target{Provider: runtime, Harness: harness}, func() { _ = harness.Close(); _ = runtime.Close() }, nil
}

// toldEnds is the harness's provider told the orchestration ends that the
// runtime's provider commits, as an application's client in the runtime's
// process is: the harness learns an orchestration's end, and the status it
// committed, from the runtime's provider instead of its next poll, and
// skips its polls while the runtime's provider holds the instance; the
// reads it makes stay the harness's.
type toldEnds struct {
	*cdb.CosmosProvider // the harness's
	runtime             interface {
		cdb.OrchestrationEndWatcher
		cdb.OrchestrationEndReporter
		cdb.OrchestrationHolder
	}
}

func (p toldEnds) HoldsOrchestration(instance string) bool {
	return p.runtime.HoldsOrchestration(instance)
}

func (p toldEnds) WatchOrchestrationEnd(instance string) (ended <-chan struct{}, stop func()) {
	return p.runtime.WatchOrchestrationEnd(instance)
}

func (p toldEnds) EndedStatus(ended <-chan struct{}) (cdb.OrchestrationStatus, bool) {
	return p.runtime.EndedStatus(ended)
}

// countingProvider counts the work the runtime commits through it.
type countingProvider struct {
	cdb.Provider
	turns, workerItems atomic.Int64
	// acking counts the acks under way: an ending turn's commit tells its
	// end before it returns, so the last ones may still be under way when
	// the run sees its orchestrations end (settled waits for them).
	acking atomic.Int64
}

func (p *countingProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []cdb.Event, workerItems, orchestratorItems []cdb.WorkItem, metadata cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	p.acking.Add(1)
	defer p.acking.Add(-1)
	err := p.Provider.AckOrchestrationItem(ctx, lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelled)
	if err == nil {
		p.turns.Add(1)
	}
	return err
}

func (p *countingProvider) AckWorkItem(ctx context.Context, lockToken string, completion cdb.WorkItem) error {
	p.acking.Add(1)
	defer p.acking.Add(-1)
	err := p.Provider.AckWorkItem(ctx, lockToken, completion)
	if err == nil {
		p.workerItems.Add(1)
	}
	return err
}

// InstancePrefix begins the id of every instance a run starts, so a
// caller can find them in a container it shares.
const InstancePrefix = "stress-"

// Run carries out one stress run.
func Run(ctx context.Context, cfg Config, target Target) (Result, error) {
	cfg = cfg.withDefaults()
	if target.Provider == nil {
		fake, closeFake, err := onFake(ctx, cfg.Latency)
		if err != nil {
			return Result{}, err
		}
		defer closeFake()
		fake.wrapHarness = target.wrapHarness
		target = fake
	}
	if target.Harness == nil {
		return Result{}, errors.New("bench: a target with a provider needs a harness provider too")
	}
	var costs func() cdb.ClientStats
	if cfg.MaxInFlight == 1 {
		costs = target.Provider.Client().Stats
	}
	steps := newStepClock(costs)
	reg, err := newRegistry(cfg.ActivityDelay, steps)
	if err != nil {
		return Result{}, fmt.Errorf("bench: registry: %w", err)
	}
	counted := &countingProvider{Provider: target.Provider}
	rt, err := durable.Start(ctx, counted, reg, durable.Options{
		OrchestrationConcurrency: cfg.OrchestrationConcurrency,
		WorkerConcurrency:        cfg.WorkerConcurrency,
		MinPollInterval:          100 * time.Millisecond,
	})
	if err != nil {
		return Result{}, fmt.Errorf("bench: runtime: %w", err)
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rt.Shutdown(shutdownCtx)
	}()
	var harness cdb.Provider = toldEnds{CosmosProvider: target.Harness, runtime: target.Provider}
	if target.wrapHarness != nil {
		harness = target.wrapHarness(harness)
	}

	before := snapshotOf(target, counted)
	start := time.Now()
	runs, err := pump(ctx, cfg, rt.Client(), durable.NewClient(harness))
	elapsed := time.Since(start)
	counted.settled(ctx)
	after := snapshotOf(target, counted)
	if err != nil {
		return Result{}, err
	}
	if cfg.Shape == ShapeSequence {
		runs.stepLatencies = steps.intervals()
	}
	r := summarize(cfg, runs, elapsed, before, after)
	r.EarlySteps, r.LateSteps = steps.costs()
	return r, nil
}

// snapshot is the counters of a run at one moment.
type snapshot struct {
	provider, harness  cdb.ClientStats
	turns, workerItems int64
}

func snapshotOf(t Target, counted *countingProvider) snapshot {
	return snapshot{
		provider: t.Provider.Client().Stats(), harness: t.Harness.Client().Stats(),
		turns: counted.turns.Load(), workerItems: counted.workerItems.Load(),
	}
}

// outcomes are what the orchestrations of a run came to: the completed
// ones' latencies, from start to completion, and their steps' (as
// Result.StepP50 says).
type outcomes struct {
	latencies, stepLatencies []time.Duration
	launched, failed         int
}

// pump keeps MaxInFlight orchestrations running until Duration passes (or
// Orchestrations were launched), then waits for them all.
func pump(ctx context.Context, cfg Config, starter, waiter *durable.Client) (outcomes, error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		out      outcomes
		firstErr error
	)
	slots := make(chan struct{}, cfg.MaxInFlight)
	deadline := time.Now().Add(cfg.Duration)
	runID := time.Now().UnixNano()
	input, err := json.Marshal(shapeInput{TaskCount: cfg.TasksPerInstance, WaitMs: cfg.Wait.Milliseconds()})
	if err != nil {
		return out, fmt.Errorf("bench: input: %w", err)
	}
	for n := 0; ; n++ {
		if cfg.Orchestrations > 0 && n == cfg.Orchestrations || cfg.Orchestrations == 0 && time.Now().After(deadline) {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return outcomes{}, ctx.Err()
		}
		out.launched++
		wg.Add(1)
		go func(instance string) {
			defer wg.Done()
			defer func() { <-slots }()
			took, step, ok, err := runOne(ctx, cfg, starter, waiter, instance, string(input))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = err
			case ok:
				out.latencies = append(out.latencies, took)
				out.stepLatencies = append(out.stepLatencies, step)
			default:
				out.failed++
			}
		}(fmt.Sprintf("%s%d-%d", InstancePrefix, runID, n))
	}
	wg.Wait()
	return out, firstErr
}

// runOne starts one orchestration of the run's shape, raises its event if
// it waits for one, and waits for it. It returns its latency, its step's
// latency, and whether it completed.
func runOne(ctx context.Context, cfg Config, starter, waiter *durable.Client, instance, input string) (took, step time.Duration, ok bool, err error) {
	start := time.Now()
	// The ids are new: the client's check of a taken id would only add a
	// read to what is measured.
	if err := starter.StartOrchestration(ctx, instance, cfg.Shape.orchestration(), input, durable.WithIfExists(durable.IfExistsEnqueue)); err != nil {
		return 0, 0, false, fmt.Errorf("bench: start %s: %w", instance, err)
	}
	stepFrom := start // fanout, children: the steps run at once
	switch cfg.Shape {
	case ShapeTimers:
		stepFrom = start.Add(cfg.Wait)
	case ShapeEvents:
		select {
		case <-time.After(cfg.Wait):
		case <-ctx.Done():
			return 0, 0, false, ctx.Err()
		}
		stepFrom = time.Now()
		if err := starter.RaiseEvent(ctx, instance, benchEvent, `"raised"`); err != nil {
			return 0, 0, false, fmt.Errorf("bench: raise the event of %s: %w", instance, err)
		}
	}
	status, err := waiter.WaitForCompletion(ctx, instance, cfg.WaitTimeout)
	if errors.Is(err, context.DeadlineExceeded) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("bench: wait for %s: %w", instance, err)
	}
	end := time.Now()
	return end.Sub(start), end.Sub(stepFrom), status.State == durable.StateCompleted, nil
}

func summarize(cfg Config, runs outcomes, elapsed time.Duration, before, after snapshot) Result {
	r := Result{
		Config: cfg, Launched: runs.launched, Completed: len(runs.latencies), Failed: runs.failed, Elapsed: elapsed,
		Provider: usageBetween(before.provider, after.provider), Harness: usageBetween(before.harness, after.harness),
		Turns: after.turns - before.turns, WorkerItems: after.workerItems - before.workerItems,
		StepsPerOrchestration: cfg.Shape.steps(cfg),
	}
	if secs := elapsed.Seconds(); secs > 0 {
		r.OrchestrationsPerSecond = float64(r.Completed) / secs
		r.ActivitiesPerSecond = float64(r.Completed*cfg.Shape.activities(cfg)) / secs
		r.StepsPerSecond = float64(r.Completed*r.StepsPerOrchestration) / secs
	}
	if r.Completed > 0 {
		n := float64(r.Completed)
		r.RequestsPerOrchestration = float64(r.Provider.Requests) / n
		r.RUPerOrchestration = r.Provider.RequestCharge / n
		r.HarnessRequestsPerOrchestration = float64(r.Harness.Requests) / n
		r.TurnsPerOrchestration = float64(r.Turns) / n
		r.RequestsPerStep = r.RequestsPerOrchestration / float64(r.StepsPerOrchestration)
		r.RUPerStep = r.RUPerOrchestration / float64(r.StepsPerOrchestration)
	}
	if items := r.Turns + r.WorkerItems; items > 0 {
		r.PreconditionFailedPerItem = float64(r.Provider.PreconditionFailed) / float64(items)
	}
	slices.Sort(runs.latencies)
	slices.Sort(runs.stepLatencies)
	r.Latencies = runs.latencies
	r.P50 = Percentile(runs.latencies, 0.50)
	r.P99 = Percentile(runs.latencies, 0.99)
	r.StepP50 = Percentile(runs.stepLatencies, 0.50)
	r.StepP99 = Percentile(runs.stepLatencies, 0.99)
	return r
}

// Percentile is the q-quantile (0 to 1) of sorted, the nearest rank; zero
// when sorted is empty.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

// settledWait bounds how long a run waits for the acks still under way
// when its last orchestration is seen to end.
const settledWait = 5 * time.Second

// settled waits until no ack is under way, at most settledWait.
func (p *countingProvider) settled(ctx context.Context) {
	deadline := time.Now().Add(settledWait)
	for p.acking.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}
