package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/duroxide-go/cdb/internal/bench"
)

// The row of a multi-process run takes its p50 and p99 over every
// orchestration of every process, not from the processes' own percentiles:
// a slow process's tail must show even when the others are fast.
func TestAMultiProcessRowMergesTheProcessesLatencies(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	fast := make([]time.Duration, 99)
	for i := range fast {
		fast[i] = ms(100 + i) // 100..198 ms
	}
	slow := []time.Duration{ms(900), ms(1000), ms(1100)}
	run := processesRun{processes: 2, orch: 1, workers: 1, latency: 70 * time.Millisecond, results: []processResult{
		{Result: bench.Result{Completed: len(fast), Latencies: fast, P50: ms(149), P99: ms(197)}},
		{Result: bench.Result{Completed: len(slow), Latencies: slow, P50: ms(1000), P99: ms(1100)}},
	}}
	var out bytes.Buffer
	printProcessesRun(&out, benchOptions{}, run)
	// 102 latencies: the median is the 51st (151 ms), the 99th percentile
	// the 101st (1 s); the processes' own p50s (149 ms, 1 s) would give
	// neither.
	assert.Contains(t, out.String(), "| 2 | 70ms | 1:1 | 0.00 | 151ms | 1s |")
	assert.Contains(t, out.String(), "| 102/0 | - | - |")
}
