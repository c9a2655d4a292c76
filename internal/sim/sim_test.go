package sim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed    = flag.Int64("sim.seed", 0, "run only this seed (0: the bounded set)")
	flagVerbose = flag.Bool("sim.log", false, "log the nodes' warnings to stderr")
	flagTrace   = flag.String("sim.trace", "", "with -sim.log, also log the nodes' debug records that mention one of these comma-separated texts (instance ids)")
	flagEnable  = flag.String("sim.enable", "", "comma-separated Features/Faults toggles to turn on besides Passing's, e.g. Sessions,Crashes")
	flagAll     = flag.Bool("sim.all", false, "turn every feature and fault on")
	flagRate    = flag.Float64("sim.rate", 0, "fault rate (0: the configuration's)")
	flagCount   = flag.Int("sim.scenarios", 0, "scenarios per seed (0: the configuration's)")
	flagBacklog = flag.Int("sim.backlog", 0, "most events queued for one instance (0: the configuration's)")
	flagSkew    = flag.Duration("sim.skew", 0, "most a node's clock is off (0: the configuration's)")
	flagFanOut  = flag.Int("sim.fanout", 0, "widest fan-out, with wide fan-outs on when over 100 (0: the configuration's)")
	flagStrict  = flag.Bool("sim.strict", false, "fail on the configuration's pending invariants too (Config.Pending)")
	flagWire    = flag.String("sim.wire", "", "write every request that mentions this text (an instance id) to a file under the temporary directory (wire.go)")
	flagStall   = flag.Duration("sim.stall", 0, "how long the run may show no progress at all before a wait gives up (0: the configuration's)")
)

// boundedSeeds are the seeds `go test` runs with Passing().
var boundedSeeds = []int64{1, 2, 3, 4, 5}

// TestSimulation runs the bounded seeds with the configuration that holds
// today (Passing); -sim.seed=N replays one.
func TestSimulation(t *testing.T) {
	seeds := boundedSeeds
	if *flagSeed != 0 {
		seeds = []int64{*flagSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := configFromFlags(t, seed)
			runAndReport(t, cfg)
		})
	}
}

// configFromFlags is Passing(seed) widened by the -sim.* flags.
func configFromFlags(t *testing.T, seed int64) Config {
	cfg := Passing(seed)
	if *flagAll {
		cfg.Features = AllFeatures()
		cfg.Faults = AllFaults(0.05)
	}
	if err := cfg.Enable(strings.Split(*flagEnable, ",")...); err != nil {
		t.Fatal(err)
	}
	if *flagRate > 0 {
		cfg.Faults.Rate = *flagRate
	}
	if *flagCount > 0 {
		cfg.Scenarios = *flagCount
	}
	if *flagBacklog > 0 {
		cfg.Features.BacklogMax = *flagBacklog
	}
	if *flagSkew > 0 {
		cfg.Faults.ClockSkew = *flagSkew
	}
	if *flagStrict {
		cfg.Pending = nil
	}
	if *flagStall > 0 {
		cfg.Stall = *flagStall
	}
	if *flagFanOut > 0 {
		cfg.Features.FanOuts = true
		cfg.Features.FanOutMax = *flagFanOut
		cfg.Features.WideFanOuts = cfg.Features.WideFanOuts || *flagFanOut > 100
	}
	addDiagnostics(&cfg)
	flag.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "sim.") && f.Name != "sim.seed" {
			cfg.ReplayFlags += fmt.Sprintf(" -%s=%s", f.Name, f.Value)
		}
	})
	return cfg
}

func runAndReport(t *testing.T, cfg Config) Report {
	t.Helper()
	// No deadline here: the run's waits end by the no-progress rule
	// (progress.go), a soak's also by its hard cap; the test binary's
	// -timeout is the last resort.
	report, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	report.Print(os.Stdout)
	if !report.OK() {
		t.Errorf("seed %d: %d invariant violations; replay with: %s%s", cfg.Seed, len(report.Violations), report.Replay, firstViolations(report.Violations))
	}
	return report
}

// firstViolations lists the first few violations on lines of their own,
// for the failure message: a CI log keeps only its tail, and the report
// printed them before the next seed's summary.
func firstViolations(vs []Violation) string {
	var b strings.Builder
	for i, v := range vs {
		if i == 5 {
			fmt.Fprintf(&b, "\n    ... %d more", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "\n    %s", v)
	}
	return b.String()
}

// addDiagnostics gives cfg the logger and the wire journal the flags ask
// for (-sim.log, -sim.trace, -sim.wire).
func addDiagnostics(cfg *Config) {
	cfg.Logger = testLogger()
	if *flagWire == "" {
		return
	}
	f, err := os.CreateTemp("", "cdb-sim-wire-*.log")
	if err != nil {
		panic(fmt.Sprintf("sim: wire journal: %v", err))
	}
	fmt.Fprintf(os.Stderr, "sim: wire journal of %q in %s\n", *flagWire, f.Name())
	cfg.Wire, cfg.WireMention = f, *flagWire
}

func testLogger() *slog.Logger {
	if !*flagVerbose {
		return nil
	}
	if *flagTrace != "" {
		debug := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
		return slog.New(&traceHandler{next: debug, mentions: strings.Split(*flagTrace, ",")})
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// traceHandler passes on warnings and errors, and the records of any level
// whose message or attributes mention one of some texts (say instance
// ids): a debug log of a whole run is too large to read, one instance's is
// not.
type traceHandler struct {
	next     slog.Handler
	mentions []string
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn || h.mentioned(r) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *traceHandler) mentioned(r slog.Record) bool {
	found := h.mentionedIn(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		found = found || h.mentionedIn(a.Value.String())
		return !found
	})
	return found
}

func (h *traceHandler) mentionedIn(s string) bool {
	for _, m := range h.mentions {
		if m != "" && strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func (h *traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &traceHandler{next: h.next.WithAttrs(attrs), mentions: h.mentions}
}

func (h *traceHandler) WithGroup(name string) slog.Handler {
	return &traceHandler{next: h.next.WithGroup(name), mentions: h.mentions}
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

// TestSoak is `make soak`: SOAK_SECONDS (default 60) of rounds of
// SOAK_ROUND_SECONDS (default 60) each, the first seeded with SOAK_SEED
// (default: from the clock, printed) and each next one with the next seed,
// on Passing's configuration widened by SOAK_ENABLE (comma-separated
// toggles) or SOAK_ALL=1 (every feature and fault at full size) and
// SOAK_RATE. Each round runs on a fresh account: the in-memory account has
// no index, so a container that only grows would make every query, and so
// the run, slower and slower; a round still crashes nodes, loses responses
// and checks every invariant. It is skipped unless SOAK_SECONDS or
// SOAK_SEED is set.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK_SECONDS") == "" && os.Getenv("SOAK_SEED") == "" {
		t.Skip("set SOAK_SECONDS (make soak) to run the soak")
	}
	cfg, flags := soakConfig(t)
	total := time.Duration(envInt64(t, "SOAK_SECONDS", 60)) * time.Second
	round := min(time.Duration(envInt64(t, "SOAK_ROUND_SECONDS", 60))*time.Second, total)
	began := time.Now()
	var summary soakSummary
	for seed := cfg.Seed; time.Since(began) < total; seed++ {
		rc := cfg
		rc.Seed = seed
		rc.Duration = min(round, total-time.Since(began))
		rc.ReplayFlags = flags
		report := runAndReport(t, rc)
		summary.add(report)
		if !report.OK() {
			t.Logf("replay this round with: make soak SOAK_SEED=%d SOAK_SECONDS=%d%s", seed, int(rc.Duration.Seconds()), soakEnvSuffix())
		}
	}
	summary.print(os.Stdout, time.Since(began))
}

// soakSummary adds the rounds of a soak up.
type soakSummary struct {
	rounds, scenarios, instances, activities, faults, crashes, violations int
	failed                                                                []int64
}

func (s *soakSummary) add(r Report) {
	s.rounds++
	r.Stats.mu.Lock()
	s.scenarios += sum(r.Stats.Scenarios)
	s.instances += r.Stats.Instances
	s.activities += r.Stats.Activities
	s.faults += sum(r.Stats.Faults)
	s.crashes += sum(r.Stats.Crashes)
	r.Stats.mu.Unlock()
	s.violations += len(r.Violations)
	if !r.OK() {
		s.failed = append(s.failed, r.Seed)
	}
}

func (s *soakSummary) print(w io.Writer, elapsed time.Duration) {
	fmt.Fprintf(w, "soak: %d rounds in %s: %d scenarios, %d instances checked, %d activities run, %d faults injected, %d node crashes; %d invariant violations",
		s.rounds, elapsed.Round(time.Second), s.scenarios, s.instances, s.activities, s.faults, s.crashes, s.violations)
	if len(s.failed) > 0 {
		fmt.Fprintf(w, " (rounds with seeds %v)", s.failed)
	}
	fmt.Fprintln(w)
}

// TestSoakProcesses is the two-process scenario of `make soak`: `cdb
// emulator`, two `cdb sim-node` workers, one SIGKILLed now and then
// (preferably while an outbox is being delivered) and replaced. It needs
// SIM_CDB_BIN (the built cdb command) and runs SOAK_PROCESS_SECONDS
// (default 30).
func TestSoakProcesses(t *testing.T) {
	bin := os.Getenv("SIM_CDB_BIN")
	if bin == "" {
		t.Skip("set SIM_CDB_BIN to a built cdb command (make soak does) to run the two-process scenario")
	}
	cfg, _ := soakConfig(t)
	cfg.Duration = time.Duration(envInt64(t, "SOAK_PROCESS_SECONDS", 30)) * time.Second
	cfg.Features = ProcessFeatures()
	if os.Getenv("SOAK_ALL") == "1" {
		cfg.Features.LargeFanOuts = true
	}
	report, err := RunProcesses(context.Background(), ProcessConfig{Config: cfg, Binary: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	report.Print(os.Stdout)
	if !report.OK() {
		t.Errorf("two-process scenario, seed %d: %d invariant violations; replay with: %s",
			cfg.Seed, len(report.Violations), report.Replay)
	}
}

// soakConfig reads SOAK_SEED, SOAK_ENABLE, SOAK_ALL and SOAK_RATE.
func soakConfig(t *testing.T) (Config, string) {
	seed := envInt64(t, "SOAK_SEED", 0)
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	fmt.Printf("soak seed=%d\n", seed)
	cfg := Passing(seed)
	if os.Getenv("SOAK_ALL") == "1" {
		cfg.Features = AllFeatures()
		cfg.Faults = AllFaults(0.05)
	}
	if err := cfg.Enable(strings.Split(os.Getenv("SOAK_ENABLE"), ",")...); err != nil {
		t.Fatal(err)
	}
	if rate := os.Getenv("SOAK_RATE"); rate != "" {
		r, err := strconv.ParseFloat(rate, 64)
		if err != nil {
			t.Fatalf("SOAK_RATE=%q: %v", rate, err)
		}
		cfg.Faults.Rate = r
	}
	if os.Getenv("SOAK_STRICT") == "1" {
		cfg.Pending = nil
	}
	cfg.InFlight = 16
	// The soak alone bounds each wait by the wall clock as well, so a
	// livelock cannot keep it from ending; the bounded test has only the
	// no-progress rule.
	cfg.HardCap = 5 * time.Minute
	addDiagnostics(&cfg)
	return cfg, ""
}

func soakEnvSuffix() string {
	var out string
	for _, name := range []string{"SOAK_ENABLE", "SOAK_ALL", "SOAK_RATE"} {
		if v := os.Getenv(name); v != "" {
			out += fmt.Sprintf(" %s=%s", name, v)
		}
	}
	return out
}
