package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestStressRunCompletesEveryOrchestration runs a small stress run and checks
// what it reports is consistent: every launched orchestration completes, and
// each costs requests.
func TestStressRunCompletesEveryOrchestration(t *testing.T) {
	res, err := Run(context.Background(), Config{Orchestrations: 10, MaxInFlight: 5, OrchestrationConcurrency: 2, WorkerConcurrency: 2}, Target{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Launched != 10 || res.Completed != 10 || res.Failed != 0 {
		t.Fatalf("launched %d, completed %d, failed %d; want 10, 10, 0", res.Launched, res.Completed, res.Failed)
	}
	if res.RequestsPerOrchestration <= 0 || res.RUPerOrchestration <= 0 || res.P50 <= 0 || res.P99 < res.P50 {
		t.Fatalf("inconsistent result: %+v", res)
	}
	t.Logf("%.1f requests and %.1f RU per orchestration, p50 %s", res.RequestsPerOrchestration, res.RUPerOrchestration, res.P50)
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
				b.ReportMetric(res.RUPerOrchestration, "RU/orch")
				b.ReportMetric(float64(res.P50.Milliseconds()), "p50-ms")
				b.ReportMetric(float64(res.P99.Milliseconds()), "p99-ms")
			})
		}
	}
}
