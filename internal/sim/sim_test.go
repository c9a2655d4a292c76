package sim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

var (
	flagSeed    = flag.Int64("sim.seed", 0, "run only this seed (0: the bounded set)")
	flagVerbose = flag.Bool("sim.log", false, "log the nodes' warnings to stderr")
)

// boundedSeeds are the seeds `go test` runs with Passing().
var boundedSeeds = []int64{1, 2, 3}

// TestSimulation runs the bounded seeds with the configuration that holds
// today (Passing); -sim.seed=N replays one.
func TestSimulation(t *testing.T) {
	seeds := boundedSeeds
	if *flagSeed != 0 {
		seeds = []int64{*flagSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := Passing(seed)
			cfg.Logger = testLogger()
			runAndReport(t, cfg)
		})
	}
}

func runAndReport(t *testing.T, cfg Config) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	report, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	report.Print(os.Stdout)
	if !report.OK() {
		t.Errorf("seed %d: %d invariant violations; replay with: %s", cfg.Seed, len(report.Violations), report.Replay)
	}
	return report
}

func testLogger() *slog.Logger {
	if !*flagVerbose {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// envInt64 reads an integer environment variable, def when unset.
func envInt64(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
