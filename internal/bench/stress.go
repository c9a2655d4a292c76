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
	"sort"
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
	Orchestrations   int
	TasksPerInstance int           // activities per orchestration (default 5)
	ActivityDelay    time.Duration // each activity's work (default 10ms)
	WaitTimeout      time.Duration // per orchestration (default 60s)
	Latency          time.Duration // added per request by the in-memory Cosmos DB
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
}

func (p *countingProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []cdb.Event, workerItems, orchestratorItems []cdb.WorkItem, metadata cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	err := p.Provider.AckOrchestrationItem(ctx, lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelled)
	if err == nil {
		p.turns.Add(1)
	}
	return err
}

func (p *countingProvider) AckWorkItem(ctx context.Context, lockToken string, completion cdb.WorkItem) error {
	err := p.Provider.AckWorkItem(ctx, lockToken, completion)
	if err == nil {
		p.workerItems.Add(1)
	}
	return err
}

// InstancePrefix begins the id of every instance a run starts, so a
// caller can find them in a container it shares.
const InstancePrefix = "stress-"

const (
	fanOutName   = "FanoutOrchestration"
	activityName = "ProcessTask"
)

// fanOut schedules task_count activities and waits for them all.
func fanOut(ctx *durable.OrchestrationContext, input string) (string, error) {
	var in struct {
		TaskCount int `json:"task_count"`
	}
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		return "", fmt.Errorf("fan-out input: %w", err)
	}
	futures := make([]*durable.Future, in.TaskCount)
	for i := range futures {
		futures[i] = ctx.ScheduleActivity(activityName, fmt.Sprintf(`{"task":%d}`, i))
	}
	for i, r := range ctx.Join(futures...) {
		if r.Err != nil {
			return "", fmt.Errorf("task %d: %w", i, r.Err)
		}
	}
	return fmt.Sprintf(`{"tasks":%d}`, in.TaskCount), nil
}

func newRegistry(delay time.Duration) (*durable.Registry, error) {
	reg := durable.NewRegistry()
	if err := reg.RegisterOrchestration(fanOutName, fanOut); err != nil {
		return nil, err
	}
	err := reg.RegisterActivity(activityName, func(ctx durable.ActivityContext, input string) (string, error) {
		select {
		case <-time.After(delay):
			return input, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	return reg, err
}

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
	reg, err := newRegistry(cfg.ActivityDelay)
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
	latencies, launched, failed, err := pump(ctx, cfg, rt.Client(), durable.NewClient(harness))
	elapsed := time.Since(start)
	after := snapshotOf(target, counted)
	if err != nil {
		return Result{}, err
	}
	return summarize(cfg, launched, failed, latencies, elapsed, before, after), nil
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

// pump keeps MaxInFlight orchestrations running until Duration passes (or
// Orchestrations were launched), then waits for them all.
func pump(ctx context.Context, cfg Config, starter, waiter *durable.Client) (latencies []time.Duration, launched, failed int, err error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		inFlight atomic.Int64
		firstErr error
	)
	slots := make(chan struct{}, cfg.MaxInFlight)
	deadline := time.Now().Add(cfg.Duration)
	runID := time.Now().UnixNano()
	input := fmt.Sprintf(`{"task_count":%d}`, cfg.TasksPerInstance)
	for n := 0; ; n++ {
		if cfg.Orchestrations > 0 && n == cfg.Orchestrations || cfg.Orchestrations == 0 && time.Now().After(deadline) {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil, 0, 0, ctx.Err()
		}
		launched++
		inFlight.Add(1)
		wg.Add(1)
		go func(instance string) {
			defer wg.Done()
			defer func() { <-slots; inFlight.Add(-1) }()
			took, ok, err := runOne(ctx, starter, waiter, instance, input, cfg.WaitTimeout)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = err
			case ok:
				latencies = append(latencies, took)
			default:
				failed++
			}
		}(fmt.Sprintf("%s%d-%d", InstancePrefix, runID, n))
	}
	wg.Wait()
	return latencies, launched, failed, firstErr
}

// runOne starts one orchestration and waits for it.
func runOne(ctx context.Context, starter, waiter *durable.Client, instance, input string, timeout time.Duration) (time.Duration, bool, error) {
	start := time.Now()
	// The ids are new: the client's check of a taken id would only add a
	// read to what is measured.
	if err := starter.StartOrchestration(ctx, instance, fanOutName, input, durable.WithIfExists(durable.IfExistsEnqueue)); err != nil {
		return 0, false, fmt.Errorf("bench: start %s: %w", instance, err)
	}
	status, err := waiter.WaitForCompletion(ctx, instance, timeout)
	if errors.Is(err, context.DeadlineExceeded) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("bench: wait for %s: %w", instance, err)
	}
	return time.Since(start), status.State == durable.StateCompleted, nil
}

func summarize(cfg Config, launched, failed int, latencies []time.Duration, elapsed time.Duration, before, after snapshot) Result {
	r := Result{
		Config: cfg, Launched: launched, Completed: len(latencies), Failed: failed, Elapsed: elapsed,
		Provider: usageBetween(before.provider, after.provider), Harness: usageBetween(before.harness, after.harness),
		Turns: after.turns - before.turns, WorkerItems: after.workerItems - before.workerItems,
	}
	if secs := elapsed.Seconds(); secs > 0 {
		r.OrchestrationsPerSecond = float64(r.Completed) / secs
		r.ActivitiesPerSecond = float64(r.Completed*cfg.TasksPerInstance) / secs
	}
	if r.Completed > 0 {
		n := float64(r.Completed)
		r.RequestsPerOrchestration = float64(r.Provider.Requests) / n
		r.RUPerOrchestration = r.Provider.RequestCharge / n
		r.HarnessRequestsPerOrchestration = float64(r.Harness.Requests) / n
		r.TurnsPerOrchestration = float64(r.Turns) / n
	}
	if items := r.Turns + r.WorkerItems; items > 0 {
		r.PreconditionFailedPerItem = float64(r.Provider.PreconditionFailed) / float64(items)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	r.Latencies = latencies
	r.P50 = Percentile(latencies, 0.50)
	r.P99 = Percentile(latencies, 0.99)
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
