// Package bench runs duroxide's stress protocol (DESIGN.md §7, reference
// §4.2) on the Cosmos DB provider: a fan-out orchestration of short
// activities, kept at a fixed number in flight, measured in orchestrations
// and activities per second, requests and RU per orchestration, and
// per-instance latency.
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

// Result is what a run measured.
type Result struct {
	Config                   Config
	Launched, Completed      int
	Failed                   int
	Elapsed                  time.Duration
	OrchestrationsPerSecond  float64
	ActivitiesPerSecond      float64
	RequestsPerOrchestration float64
	RUPerOrchestration       float64
	P50, P99                 time.Duration
}

// Target is where a run's provider lives.
type Target struct {
	// Provider is the provider to run on; its Client's statistics count the
	// requests and RU. Nil: a fresh in-memory Cosmos DB with Config.Latency.
	Provider *cdb.CosmosProvider
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
	provider := target.Provider
	if provider == nil {
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Latency: cfg.Latency})
		p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client()})
		if err != nil {
			return Result{}, fmt.Errorf("bench: provider: %w", err)
		}
		defer p.Close()
		provider = p
	}
	reg, err := newRegistry(cfg.ActivityDelay)
	if err != nil {
		return Result{}, fmt.Errorf("bench: registry: %w", err)
	}
	rt, err := durable.Start(ctx, provider, reg, durable.Options{
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

	before := provider.Client().Stats()
	start := time.Now()
	latencies, launched, failed, err := pump(ctx, cfg, rt.Client())
	elapsed := time.Since(start)
	after := provider.Client().Stats()
	if err != nil {
		return Result{}, err
	}
	return summarize(cfg, launched, failed, latencies, elapsed, after.Requests-before.Requests, after.RequestCharge-before.RequestCharge), nil
}

// pump keeps MaxInFlight orchestrations running until Duration passes (or
// Orchestrations were launched), then waits for them all.
func pump(ctx context.Context, cfg Config, client *durable.Client) (latencies []time.Duration, launched, failed int, err error) {
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
			took, ok, err := runOne(ctx, client, instance, input, cfg.WaitTimeout)
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
func runOne(ctx context.Context, client *durable.Client, instance, input string, timeout time.Duration) (time.Duration, bool, error) {
	start := time.Now()
	if err := client.StartOrchestration(ctx, instance, fanOutName, input); err != nil {
		return 0, false, fmt.Errorf("bench: start %s: %w", instance, err)
	}
	status, err := client.WaitForCompletion(ctx, instance, timeout)
	if errors.Is(err, context.DeadlineExceeded) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("bench: wait for %s: %w", instance, err)
	}
	return time.Since(start), status.State == durable.StateCompleted, nil
}

func summarize(cfg Config, launched, failed int, latencies []time.Duration, elapsed time.Duration, requests int64, charge float64) Result {
	r := Result{Config: cfg, Launched: launched, Completed: len(latencies), Failed: failed, Elapsed: elapsed}
	secs := elapsed.Seconds()
	if secs > 0 {
		r.OrchestrationsPerSecond = float64(r.Completed) / secs
		r.ActivitiesPerSecond = float64(r.Completed*cfg.TasksPerInstance) / secs
	}
	if r.Completed > 0 {
		r.RequestsPerOrchestration = float64(requests) / float64(r.Completed)
		r.RUPerOrchestration = charge / float64(r.Completed)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	r.P50 = percentile(latencies, 0.50)
	r.P99 = percentile(latencies, 0.99)
	return r
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}
