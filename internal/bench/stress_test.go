package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// TestStressRunCompletesEveryOrchestration runs a small stress run and checks
// what it reports is consistent: every launched orchestration completes, and
// each costs provider requests, harness requests and RU.
func TestStressRunCompletesEveryOrchestration(t *testing.T) {
	res, err := Run(context.Background(), Config{Orchestrations: 10, MaxInFlight: 5, OrchestrationConcurrency: 2, WorkerConcurrency: 2}, Target{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Launched != 10 || res.Completed != 10 || res.Failed != 0 {
		t.Fatalf("launched %d, completed %d, failed %d; want 10, 10, 0", res.Launched, res.Completed, res.Failed)
	}
	if res.RequestsPerOrchestration <= 0 || res.HarnessRequestsPerOrchestration <= 0 || res.RUPerOrchestration <= 0 || res.P50 <= 0 || res.P99 < res.P50 {
		t.Fatalf("inconsistent result: %+v", res)
	}
	if len(res.Latencies) != res.Completed || !slices.IsSorted(res.Latencies) {
		t.Fatalf("%d latencies (sorted: %t) for %d orchestrations", len(res.Latencies), slices.IsSorted(res.Latencies), res.Completed)
	}
	if res.P50 != Percentile(res.Latencies, 0.5) || res.P99 != Percentile(res.Latencies, 0.99) {
		t.Fatalf("p50 %s and p99 %s are not the latencies' %v", res.P50, res.P99, res.Latencies)
	}
	var byOp float64
	for _, n := range res.RequestsPerOrchestrationByOperation() {
		byOp += n
	}
	if diff := byOp - res.RequestsPerOrchestration; diff > 1e-9 || diff < -1e-9 {
		t.Fatalf("requests per orchestration by operation add up to %.3f, not %.3f", byOp, res.RequestsPerOrchestration)
	}
	t.Logf("%.1f provider and %.1f harness requests, %.1f RU, %.1f turns per orchestration, p50 %s",
		res.RequestsPerOrchestration, res.HarnessRequestsPerOrchestration, res.RUPerOrchestration, res.TurnsPerOrchestration, res.P50)
}

// heavyPolling makes every status read of the harness cost extra reads, as
// a slow or chatty WaitForCompletion would.
type heavyPolling struct {
	cdb.Provider
	extra int
	reads *atomic.Int64
}

func (h heavyPolling) Read(ctx context.Context, instance string) ([]cdb.Event, error) {
	h.reads.Add(1)
	for range h.extra {
		if _, err := h.Provider.Read(ctx, instance); err != nil {
			return nil, err
		}
	}
	return h.Provider.Read(ctx, instance)
}

// TestHarnessPollingIsNotCountedAsProviderRequests: the harness's status
// polling goes to its own Client, so a harness that polls ten times as hard
// leaves the provider's requests per orchestration where they were, and
// shows in the harness's.
func TestHarnessPollingIsNotCountedAsProviderRequests(t *testing.T) {
	cfg := Config{Orchestrations: 6, MaxInFlight: 1}
	light, err := Run(context.Background(), cfg, Target{})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	heavy, err := Run(context.Background(), cfg, Target{wrapHarness: func(p cdb.Provider) cdb.Provider {
		return heavyPolling{Provider: p, extra: 10, reads: &reads}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if light.Completed != 6 || heavy.Completed != 6 {
		t.Fatalf("completed %d and %d of 6", light.Completed, heavy.Completed)
	}
	if heavy.Harness.Requests < 11*reads.Load() {
		t.Fatalf("the harness counted %d requests for %d status reads of 11 reads each", heavy.Harness.Requests, reads.Load())
	}
	if heavy.RequestsPerOrchestration > 1.5*light.RequestsPerOrchestration {
		t.Fatalf("heavier status polling raised the provider's requests per orchestration from %.1f to %.1f",
			light.RequestsPerOrchestration, heavy.RequestsPerOrchestration)
	}
	t.Logf("provider %.1f / %.1f, harness %.1f / %.1f requests per orchestration (light / heavy polling)",
		light.RequestsPerOrchestration, heavy.RequestsPerOrchestration, light.HarnessRequestsPerOrchestration, heavy.HarnessRequestsPerOrchestration)
}

// endCounting counts the watches of orchestration ends its watcher fired
// before they were stopped.
type endCounting struct {
	cdb.Provider
	watcher cdb.OrchestrationEndWatcher
	fired   *atomic.Int64
}

func (e endCounting) WatchOrchestrationEnd(instance string) (<-chan struct{}, func()) {
	ended, stop := e.watcher.WatchOrchestrationEnd(instance)
	return ended, func() {
		select {
		case <-ended:
			e.fired.Add(1)
		default:
		}
		stop()
	}
}

// TestTheHarnessIsToldOfEndsTheRuntimeCommits: the harness waits on a
// provider of its own, which commits nothing, yet its waits are woken by
// the ends the runtime's provider commits, as a client in the runtime's
// process is.
func TestTheHarnessIsToldOfEndsTheRuntimeCommits(t *testing.T) {
	var fired atomic.Int64
	res, err := Run(context.Background(), Config{Orchestrations: 6, MaxInFlight: 3}, Target{wrapHarness: func(p cdb.Provider) cdb.Provider {
		watcher, ok := p.(cdb.OrchestrationEndWatcher)
		if !ok {
			t.Errorf("the harness's provider %T tells no orchestration ends", p)
			return p
		}
		return endCounting{Provider: p, watcher: watcher, fired: &fired}
	}})
	require.NoError(t, err)
	require.Equal(t, 6, res.Completed)
	// A poll can find an end between its commit and the commit's wake-up,
	// so not every wait need be woken; none woken is the harness deaf.
	assert.Positive(t, fired.Load(), "the harness's waits woken by the runtime's commits")
}

// TestTurnsAreCountedFromCommits: a fan-out of 5 takes at least two turns
// (schedule, then the joined completions), every activity is acked once,
// and the turn count is that of the acks that committed.
func TestTurnsAreCountedFromCommits(t *testing.T) {
	res, err := Run(context.Background(), Config{Orchestrations: 8, MaxInFlight: 4, OrchestrationConcurrency: 2, WorkerConcurrency: 2}, Target{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 8 {
		t.Fatalf("completed %d of 8", res.Completed)
	}
	if res.Turns < 2*8 || res.Turns > 6*8 || res.TurnsPerOrchestration != float64(res.Turns)/8 {
		t.Fatalf("%d turns (%.2f per orchestration) for 8 fan-outs of 5: want 2 to 6 each", res.Turns, res.TurnsPerOrchestration)
	}
	if res.WorkerItems != 5*8 {
		t.Fatalf("%d worker items acked, want 40", res.WorkerItems)
	}
}

// TestFailedAcksAreNotTurns: an ack that does not commit is not a turn.
func TestFailedAcksAreNotTurns(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	counted := &countingProvider{Provider: p}
	if err := counted.AckOrchestrationItem(context.Background(), "no-such-lock", 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil); err == nil {
		t.Fatal("an ack with an unknown lock token succeeded")
	}
	if err := counted.AckWorkItem(context.Background(), "no-such-lock", nil); err == nil {
		t.Fatal("a worker ack with an unknown lock token succeeded")
	}
	if counted.turns.Load() != 0 || counted.workerItems.Load() != 0 {
		t.Fatalf("failed acks counted: %d turns, %d worker items", counted.turns.Load(), counted.workerItems.Load())
	}
}

// TestPreconditionFailuresAreCountedPerItem: claims that lose a race (here
// three worker claim PATCHes answered 412 by the account) are the
// provider's 412s, reported per work item processed. Eager dispatch is off,
// so that every activity is claimed through the queue: a process whose
// commits lock its workers' items ahead sends no claim at all.
func TestPreconditionFailuresAreCountedPerItem(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var target Target
	for _, p := range []**cdb.CosmosProvider{&target.Provider, &target.Harness} {
		var err error
		if *p, err = cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), DisableEagerDispatch: true}); err != nil {
			t.Fatal(err)
		}
		defer (*p).Close()
	}
	remove := acct.InjectFault(cdb.FakeFault{
		Match:  func(r cdb.FakeRequest) bool { return r.Operation == "PatchItem" },
		Kind:   cdb.FaultStatus,
		Status: 412,
		Times:  3,
	})
	defer remove()
	res, err := Run(ctx, Config{Orchestrations: 4, MaxInFlight: 2}, target)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 4 {
		t.Fatalf("completed %d of 4", res.Completed)
	}
	items := res.Turns + res.WorkerItems
	if res.Provider.PreconditionFailed < 3 || res.Provider.ByOperation["PatchItem"].PreconditionFailed < 3 {
		t.Fatalf("%d 412s counted (%d on PatchItem), want at least the 3 injected", res.Provider.PreconditionFailed, res.Provider.ByOperation["PatchItem"].PreconditionFailed)
	}
	if want := float64(res.Provider.PreconditionFailed) / float64(items); res.PreconditionFailedPerItem != want {
		t.Fatalf("%.3f 412s per item, want %d / %d", res.PreconditionFailedPerItem, res.Provider.PreconditionFailed, items)
	}
	if res.Harness.PreconditionFailed != 0 {
		t.Fatalf("the harness counted %d 412s", res.Harness.PreconditionFailed)
	}
}

// BenchmarkStress runs duroxide's stress protocol for b.N orchestrations at
// each added latency and concurrency; ns/op is wall time per orchestration at
// 20 in flight. Run: go test -run '^$' -bench Stress -benchtime 100x ./internal/bench/
func BenchmarkStress(b *testing.B) {
	for _, latency := range []time.Duration{0, 5 * time.Millisecond, 70 * time.Millisecond} {
		for _, c := range []int{1, 2, 4, 16} {
			b.Run(fmt.Sprintf("latency=%s/concurrency=%d:%d", latency, c, c), func(b *testing.B) {
				cfg := Config{Orchestrations: b.N, OrchestrationConcurrency: c, WorkerConcurrency: c, Latency: latency}
				b.ResetTimer()
				res, err := Run(context.Background(), cfg, Target{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(res.OrchestrationsPerSecond, "orch/s")
				b.ReportMetric(res.ActivitiesPerSecond, "act/s")
				b.ReportMetric(res.RequestsPerOrchestration, "req/orch")
				b.ReportMetric(res.HarnessRequestsPerOrchestration, "harness-req/orch")
				b.ReportMetric(res.TurnsPerOrchestration, "turns/orch")
				b.ReportMetric(res.RUPerOrchestration, "RU/orch")
				b.ReportMetric(res.PreconditionFailedPerItem, "412/item")
				b.ReportMetric(float64(res.P50.Milliseconds()), "p50-ms")
				b.ReportMetric(float64(res.P99.Milliseconds()), "p99-ms")
			})
		}
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, n := range v {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4, 5), 0.5, 3 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 3 * time.Millisecond}, // rank 1.5 rounds up
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0, time.Millisecond},
	} {
		if got := Percentile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %s, want %s", tc.sorted, tc.q, got, tc.want)
		}
	}
}
