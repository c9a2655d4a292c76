package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/bench"
)

// runBench runs duroxide's stress protocol (DESIGN.md §7) at each added
// latency and concurrency and prints a Markdown table. On the in-memory
// Cosmos DB unless COSMOS_ENDPOINT is set (then -latency does not apply).
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	latencies := fs.String("latency", "0,5ms,70ms", "comma-separated latencies added per request by the in-memory Cosmos DB")
	concurrency := fs.String("concurrency", "1:1,2:2,4:4,16:16", "comma-separated orchestration:worker dispatcher counts")
	duration := fs.Duration("duration", 10*time.Second, "how long each run keeps launching orchestrations")
	inFlight := fs.Int("inflight", 20, "orchestrations in flight")
	tasks := fs.Int("tasks", 5, "activities per orchestration")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	lats, err := parseLatencies(*latencies)
	if err != nil {
		return err
	}
	pairs, err := parseConcurrency(*concurrency)
	if err != nil {
		return err
	}
	target, where, cleanup, err := benchTarget(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stdout, "duroxide stress protocol on %s: %d in flight, %d activities of 10 ms each, %s per run\n\n", where, *inFlight, *tasks, *duration)
	fmt.Fprintln(stdout, "| added latency | orch:worker | orch/s | activities/s | requests/orch | RU/orch | p50 | p99 | completed/failed |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|")
	for _, lat := range lats {
		for _, c := range pairs {
			res, err := bench.Run(ctx, bench.Config{
				OrchestrationConcurrency: c[0], WorkerConcurrency: c[1], MaxInFlight: *inFlight,
				Duration: *duration, TasksPerInstance: *tasks, Latency: lat,
			}, target)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "| %s | %d:%d | %.2f | %.1f | %.1f | %.0f | %s | %s | %d/%d |\n", lat, c[0], c[1],
				res.OrchestrationsPerSecond, res.ActivitiesPerSecond, res.RequestsPerOrchestration, res.RUPerOrchestration,
				res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond), res.Completed, res.Failed)
		}
	}
	return nil
}

// benchTarget is the account in COSMOS_* when set, else fresh in-memory
// accounts (one per run, made by bench.Run).
func benchTarget(ctx context.Context) (bench.Target, string, func(), error) {
	if os.Getenv(cdb.EnvEndpoint) == "" {
		return bench.Target{}, "the in-memory Cosmos DB", func() {}, nil
	}
	cfg, err := cdb.ConfigFromEnv()
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	cfg.Container = fmt.Sprintf("bench-%d", time.Now().UnixNano())
	p, err := cdb.NewProvider(ctx, cfg)
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	cleanup := func() {
		_ = p.Container().Delete(context.Background())
		_ = p.Close()
	}
	return bench.Target{Provider: p}, cfg.Endpoint + " (container " + cfg.Container + ", deleted afterwards)", cleanup, nil
}

func parseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil || d < 0 {
			return nil, usageError{msg: fmt.Sprintf("-latency: %q is not a duration like 5ms", part)}
		}
		out = append(out, d)
	}
	return out, nil
}

func parseConcurrency(s string) ([][2]int, error) {
	var out [][2]int
	for _, part := range strings.Split(s, ",") {
		o, w, ok := strings.Cut(strings.TrimSpace(part), ":")
		no, err1 := strconv.Atoi(o)
		nw, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || no < 1 || nw < 1 {
			return nil, usageError{msg: fmt.Sprintf("-concurrency: %q is not like 2:2", part)}
		}
		out = append(out, [2]int{no, nw})
	}
	return out, nil
}
