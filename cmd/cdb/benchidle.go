package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/duroxide-go/cdb/internal/bench"
)

// runBenchIdle measures the cost of doing nothing (`cdb bench -idle`): for
// each added latency, -processes runtimes (each with a provider and a
// client of its own, in this one OS process) on an in-memory Cosmos DB of
// -ranges partition key ranges, with -waiting instances waiting for an
// event never raised, for -duration; then how long a start written by a
// client that runs no runtime waits to be taken.
func runBenchIdle(ctx context.Context, o benchOptions, stdout io.Writer) error {
	var results []bench.IdleResult
	if o.format != formatJSON {
		fmt.Fprintf(stdout, "idle cost on the in-memory Cosmos DB: %d processes, %d partition key ranges, %d instances waiting for an event, %s per run\n",
			max(o.processes, 1), o.ranges, o.waiting, o.duration)
		fmt.Fprintln(stdout, "requests and RU are the account's, every process's together; pickup is how long a start from a client that runs no runtime waited for its first turn (median / slowest of 5)")
		fmt.Fprintln(stdout)
		fmt.Fprintln(stdout, "| added latency | requests/s | RU/s | documents/query | pickup | requests/s by operation |")
		fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	}
	for _, lat := range o.latencies {
		res, err := bench.MeasureIdle(ctx, bench.IdleConfig{Processes: o.processes, Ranges: o.ranges, Waiting: o.waiting, Duration: o.duration, Latency: lat})
		if err != nil {
			return err
		}
		results = append(results, res)
		if o.format != formatJSON {
			fmt.Fprintf(stdout, "| %s | %.2f | %.2f | %.1f | %s / %s | %s |\n", lat, res.RequestsPerSecond, res.RUPerSecond, res.DocumentsPerQuery,
				res.Pickup.Round(time.Millisecond), res.PickupMax.Round(time.Millisecond), byOperation(res.ByOperation))
		}
	}
	if o.format == formatJSON {
		return writeJSON(stdout, results)
	}
	return nil
}

// byOperation lists per-second counts, the largest first.
func byOperation(m map[string]float64) string {
	ops := make([]string, 0, len(m))
	for op := range m {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return m[ops[i]] > m[ops[j]] || m[ops[i]] == m[ops[j]] && ops[i] < ops[j] })
	s := ""
	for i, op := range ops {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %.2f", op, m[op])
	}
	return s
}
