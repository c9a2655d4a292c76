package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// The cost of doing nothing: what processes with no work spend on a
// container, measured on the in-memory Cosmos DB by what the account
// served. It grows with what the processes poll (the partition key
// ranges, the processes), and must not grow with what merely waits (the
// instances waiting for an event, whose documents the polls must not
// read), so each is a knob.

// IdleConfig is one idle measurement.
type IdleConfig struct {
	// Processes is how many runtimes run, each with a provider and a client
	// of its own as a process has (default 1); more than one share the
	// dispatch slots through process leases.
	Processes int
	// Ranges is the container's partition key ranges (default 1).
	Ranges int
	// Waiting instances each wait for an event that is never raised,
	// started before the measurement (default none).
	Waiting int
	// Duration is how long the measurement lasts, after the processes
	// settled (default 10s).
	Duration time.Duration
	// Latency is added per request by the in-memory Cosmos DB.
	Latency time.Duration
}

func (c IdleConfig) withDefaults() IdleConfig {
	c.Processes = max(c.Processes, 1)
	c.Ranges = max(c.Ranges, 1)
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	return c
}

// IdleResult is what an idle measurement found.
type IdleResult struct {
	Config IdleConfig
	// RequestsPerSecond and RUPerSecond are what the account served, for
	// every process together.
	RequestsPerSecond float64
	RUPerSecond       float64
	// ByOperation is requests per second by operation.
	ByOperation map[string]float64
	// DocumentsPerQuery is how many documents a query page evaluated on
	// average (what the index handed it, or a scan read): what a query is
	// charged for beyond its base, so that a poll whose cost grew with the
	// waiting documents shows here.
	DocumentsPerQuery float64
	// Pickup is how long a start written by a client that runs no runtime
	// (so no process was told of it) waited to be taken: from its enqueue
	// to its orchestration's first turn committed, seen at the end of
	// the measurement; the median of pickupSamples starts written at
	// different points of the idle looks' cycle, and PickupMax the
	// slowest of them.
	Pickup, PickupMax time.Duration
}

// pickupSamples is how many starts the pickup is measured on, each
// pickupGap after the last was taken: one sample says little, as a start
// may come just before an idle look or just after one.
const (
	pickupSamples = 5
	pickupGap     = 370 * time.Millisecond
)

// idleSettle is how long the processes run before the measurement: their
// startup (bootstrap, leases, the first looks, the listing at the queue
// bell until every writer's view has it, the two looks that settle its
// counts, and the chore leader's two looks across the container, a
// reconcile interval apart, that settle the chores' count) is not idling.
const idleSettle = 16 * time.Second

// MeasureIdle runs cfg's processes with nothing to do and measures what
// they spend.
func MeasureIdle(ctx context.Context, cfg IdleConfig) (IdleResult, error) {
	cfg = cfg.withDefaults()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: cfg.Ranges, Latency: cfg.Latency})
	reg, err := newRegistry(0, newStepClock(nil))
	if err != nil {
		return IdleResult{}, fmt.Errorf("bench: registry: %w", err)
	}
	var runtimes []*durable.Runtime
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, rt := range runtimes {
			_ = rt.Shutdown(shutdownCtx)
		}
	}()
	for i := 0; i < cfg.Processes; i++ {
		rt, err := startIdleProcess(ctx, acct, reg, cfg.Processes, i)
		if err != nil {
			return IdleResult{}, err
		}
		runtimes = append(runtimes, rt)
	}
	if err := startWaiting(ctx, runtimes[0].Client(), cfg.Waiting); err != nil {
		return IdleResult{}, err
	}
	if err := sleep(ctx, idleSettle); err != nil {
		return IdleResult{}, err
	}
	before := acct.Counts()
	if err := sleep(ctx, cfg.Duration); err != nil {
		return IdleResult{}, err
	}
	after := acct.Counts()
	pickup, slowest, err := measurePickups(ctx, acct)
	if err != nil {
		return IdleResult{}, err
	}
	secs := cfg.Duration.Seconds()
	r := IdleResult{Config: cfg, Pickup: pickup, PickupMax: slowest, ByOperation: map[string]float64{},
		RequestsPerSecond: float64(after.Requests-before.Requests) / secs,
		RUPerSecond:       (after.RequestCharge - before.RequestCharge) / secs}
	if queries := after.ByOperation["Query"] - before.ByOperation["Query"]; queries > 0 {
		r.DocumentsPerQuery = float64(after.DocumentsScanned-before.DocumentsScanned) / float64(queries)
	}
	for op, n := range after.ByOperation {
		if d := n - before.ByOperation[op]; d > 0 {
			r.ByOperation[op] = float64(d) / secs
		}
	}
	return r, nil
}

// startIdleProcess is the i-th of n processes: a provider on a client of
// its own and a runtime on it.
func startIdleProcess(ctx context.Context, acct *cdb.FakeAccount, reg *durable.Registry, n, i int) (*durable.Runtime, error) {
	pcfg := cdb.Config{Client: acct.Client()}
	if n > 1 {
		pcfg.ProcessLeases = &cdb.ProcessLeaseOptions{ProcessID: fmt.Sprintf("idle-%d", i)}
	}
	p, err := cdb.NewProvider(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("bench: provider %d: %w", i, err)
	}
	rt, err := durable.Start(ctx, p, reg, durable.Options{})
	if err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("bench: runtime %d: %w", i, err)
	}
	return rt, nil
}

// startWaiting starts n instances that wait for an event never raised,
// startsAtOnce at a time, each followed by reads of its status until it
// has taken its first turn (a start returns once its first turn committed
// when a fetch of this process takes it, and once it is queued otherwise).
func startWaiting(ctx context.Context, c *durable.Client, n int) error {
	ids := make(chan int)
	errs := make(chan error, startsAtOnce)
	var wg sync.WaitGroup
	for range startsAtOnce {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				if err := startOneWaiting(ctx, c, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := 0; i < n; i++ {
		select {
		case ids <- i:
		case err = <-errs:
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// startOneWaiting starts the i-th waiting instance and returns once it
// waits (Running).
func startOneWaiting(ctx context.Context, c *durable.Client, i int) error {
	id := fmt.Sprintf("waiting-%06d", i)
	if err := c.StartOrchestration(ctx, id, eventName, "{}"); err != nil {
		return fmt.Errorf("bench: start waiting instance %d: %w", i, err)
	}
	for {
		st, err := c.GetStatus(ctx, id)
		if err != nil {
			return fmt.Errorf("bench: status of waiting instance %d: %w", i, err)
		}
		if st.State == durable.StateRunning {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// startsAtOnce is how many waiting instances the idle bench starts at once.
const startsAtOnce = 64

// measurePickups measures pickupSamples pickups through one provider that
// runs no runtime, as another process's client (`cdb start`) would, and
// returns their median and the slowest.
func measurePickups(ctx context.Context, acct *cdb.FakeAccount) (median, slowest time.Duration, err error) {
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), SkipBootstrap: true})
	if err != nil {
		return 0, 0, fmt.Errorf("bench: client provider: %w", err)
	}
	defer p.Close()
	var took []time.Duration
	for i := range pickupSamples {
		if i > 0 {
			if err := sleep(ctx, pickupGap); err != nil {
				return 0, 0, err
			}
		}
		d, err := measurePickup(ctx, p, fmt.Sprintf("pickup-%d", i))
		if err != nil {
			return 0, 0, err
		}
		took = append(took, d)
	}
	slices.Sort(took)
	return took[len(took)/2], took[len(took)-1], nil
}

// measurePickup starts orchestration instance through p and waits for its
// first turn to commit (the event orchestration's wait shows as Running
// with a history).
func measurePickup(ctx context.Context, p *cdb.CosmosProvider, instance string) (time.Duration, error) {
	c := durable.NewClient(p)
	began := time.Now()
	if err := c.StartOrchestration(ctx, instance, eventName, "{}"); err != nil {
		return 0, fmt.Errorf("bench: start the pickup: %w", err)
	}
	for {
		history, err := p.Read(ctx, instance)
		if err != nil {
			return 0, fmt.Errorf("bench: read the pickup: %w", err)
		}
		if len(history) > 0 {
			return time.Since(began), nil
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return 0, errors.Join(errors.New("bench: the pickup was not taken"), err)
		}
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
