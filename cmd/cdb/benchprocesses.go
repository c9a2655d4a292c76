package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/bench"
	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// `cdb bench -processes N` runs the stress protocol in N OS processes at
// once against one endpoint (the in-memory Cosmos DB served on loopback,
// or the account in COSMOS_* / -endpoint), each a runtime with its own
// orchestrations in flight, sharing the dispatch slots through process
// leases; -kill-after kills one of them mid-run and reports how long its
// share took to move to the others.

// benchLeaseDuration is the process leases' default duration in a
// multi-process run: short, so a killed process's share moves within
// seconds.
const benchLeaseDuration = 6 * time.Second

// processResult is what `cdb bench-process` prints: its run, and its
// process leases' requests.
type processResult struct {
	Result        bench.Result `json:"result"`
	LeaseRequests int64        `json:"lease_requests"`
}

// runBenchProcess is the hidden `cdb bench-process`: one process of a
// multi-process bench. The key comes from COSMOS_KEY, never the command
// line; the result goes to stdout as JSON.
func runBenchProcess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		endpoint, database, container, id string
		orch, workers, inFlight, tasks    int
		duration, lease, wait, timeout    time.Duration
		shapeName                         string
	)
	fs := newFlagSet("bench-process", stderr)
	fs.StringVar(&endpoint, "endpoint", "", "the account's endpoint")
	fs.StringVar(&database, "database", "duroxide", "database")
	fs.StringVar(&container, "container", benchContainer, "container")
	fs.StringVar(&id, "process-id", "", "this process's id in the process leases")
	fs.IntVar(&orch, "orch", 16, "orchestration dispatchers")
	fs.IntVar(&workers, "workers", 16, "worker dispatchers")
	fs.IntVar(&inFlight, "inflight", 20, "orchestrations in flight")
	fs.IntVar(&tasks, "tasks", 5, "activities per orchestration")
	fs.StringVar(&shapeName, "shape", string(bench.ShapeFanOut), "the orchestration kept in flight")
	fs.DurationVar(&wait, "wait", time.Second, "the timers' timer, the events' delay")
	fs.DurationVar(&timeout, "orchestration-timeout", time.Minute, "how long one orchestration may take")
	fs.DurationVar(&duration, "duration", 10*time.Second, "how long to keep launching")
	fs.DurationVar(&lease, "lease", benchLeaseDuration, "process lease duration")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key := os.Getenv(cdb.EnvKey)
	if endpoint == "" || id == "" || key == "" {
		return usageError{msg: "-endpoint, -process-id and " + cdb.EnvKey + " are required"}
	}
	shape, err := bench.ParseShape(shapeName)
	if err != nil {
		return usageError{msg: "-shape: " + err.Error()}
	}
	cfg := cdb.Config{Endpoint: endpoint, Key: key, Database: database, Container: container, SkipBootstrap: true}
	cfg.ClientOptions.TLS.InsecureSkipVerify = os.Getenv(cdb.EnvSkipTLS) == "true"
	cfg.ClientOptions.TLS.CAFile = os.Getenv(cdb.EnvCAFile)
	harness, err := harnessProvider(ctx, cfg)
	if err != nil {
		return err
	}
	defer harness.Close()
	cfg.ProcessLeases = &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: lease}
	p, err := harnessProvider(ctx, cfg) // a client of its own, with process leases
	if err != nil {
		return err
	}
	defer p.Close()
	leasesBefore, err := p.ProcessLeases()
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, bench.Config{OrchestrationConcurrency: orch, WorkerConcurrency: workers,
		MaxInFlight: inFlight, TasksPerInstance: tasks, Duration: duration, Shape: shape, Wait: wait, WaitTimeout: timeout}, bench.Target{Provider: p, Harness: harness})
	if err != nil {
		return err
	}
	leasesAfter, err := p.ProcessLeases()
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(processResult{Result: res, LeaseRequests: leasesAfter.Requests - leasesBefore.Requests})
}

// processesRun is the aggregate of one multi-process run.
type processesRun struct {
	processes, orch, workers int
	latency                  time.Duration
	results                  []processResult // of the processes that finished
	killed                   string          // the process killed, if any
	shareMoved               time.Duration   // from the kill until a survivor's renewal left it out
	hostCPU                  string          // the machine's CPU busy / stolen during the run
}

// runBenchProcesses runs each latency and concurrency with o.processes
// processes and prints a row per run.
func runBenchProcesses(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "shape %s in %d processes at once: %d in flight per process, each %s, %s per run\n",
		o.shape, o.processes, o.inFlight, o.shape.Describe(int(o.tasks), o.wait), o.duration)
	fmt.Fprintln(stdout, "orch/s is the processes' sum; requests, RU and 412s are the runtimes' providers', summed and divided by the orchestrations all completed;")
	fmt.Fprintln(stdout, "p50 and p99 are over every orchestration the processes completed; lease requests are per process per second;")
	fmt.Fprintln(stdout, "host CPU is the machine's CPU time during the run, busy / stolen by the hypervisor (Linux only; steal slows a run the code did not)")
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| processes | added latency | orch:worker per process | orch/s | p50 | p99 | requests/orch | RU/orch | 412/item | lease requests/s | completed/failed | share moved after kill | host CPU |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, lat := range o.latencies {
		for _, c := range o.pairs {
			cpu := readHostCPU()
			run, err := benchProcessesOnce(ctx, o, lat, c, stderr)
			if err != nil {
				return err
			}
			run.hostCPU = readHostCPU().usageSince(cpu)
			printProcessesRun(stdout, o, run)
		}
	}
	return nil
}

func printProcessesRun(out io.Writer, o benchOptions, run processesRun) {
	var orchPerSec, ru float64
	var completed, failed int
	var requests, pf, items, leaseRequests int64
	var latencies []time.Duration
	var elapsed float64
	for _, r := range run.results {
		res := r.Result
		orchPerSec += res.OrchestrationsPerSecond
		completed += res.Completed
		failed += res.Failed
		requests += res.Provider.Requests
		ru += res.Provider.RequestCharge
		pf += res.Provider.PreconditionFailed
		items += res.Turns + res.WorkerItems
		leaseRequests += r.LeaseRequests
		elapsed += res.Elapsed.Seconds()
		latencies = append(latencies, res.Latencies...)
	}
	slices.Sort(latencies)
	p50, p99 := bench.Percentile(latencies, 0.50), bench.Percentile(latencies, 0.99)
	perOrch := func(v float64) float64 { return v / float64(max(completed, 1)) }
	latency := run.latency.String()
	if o.onEndpoint {
		latency = "network"
	}
	moved := "-"
	if run.killed != "" {
		moved = fmt.Sprintf("%s (%s killed)", run.shareMoved.Round(100*time.Millisecond), run.killed)
		if run.shareMoved == 0 {
			moved = "not seen (" + run.killed + " killed)"
		}
	}
	fmt.Fprintf(out, "| %d | %s | %d:%d | %.2f | %s | %s | %.1f | %.0f | %.2f | %.2f | %d/%d | %s | %s |\n",
		run.processes, latency, run.orch, run.workers, orchPerSec, p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		perOrch(float64(requests)), perOrch(ru), float64(pf)/float64(max(items, 1)),
		float64(leaseRequests)/max(elapsed, 1e-9), completed, failed, moved, cmp.Or(run.hostCPU, "-"))
}

// benchProcessesOnce runs one latency and concurrency in o.processes
// processes.
func benchProcessesOnce(ctx context.Context, o benchOptions, latency time.Duration, pair [2]int, stderr io.Writer) (processesRun, error) {
	run := processesRun{processes: o.processes, orch: pair[0], workers: pair[1], latency: latency}
	cfg, stop, err := processesTarget(ctx, o, latency)
	if err != nil {
		return run, err
	}
	defer stop()
	// The container exists before the processes start, so none of them
	// bootstraps it concurrently.
	setup, err := harnessProvider(ctx, cfg)
	if err != nil {
		return run, err
	}
	defer setup.Close()

	exe, err := os.Executable()
	if err != nil {
		return run, fmt.Errorf("bench: find the cdb executable: %w", err)
	}
	procs := make([]*exec.Cmd, o.processes)
	outs := make([]*bytes.Buffer, o.processes)
	errs := make([]*bytes.Buffer, o.processes)
	for i := range procs {
		id := "bench-" + strconv.Itoa(i+1)
		cmd := exec.CommandContext(ctx, exe, "bench-process", "-endpoint", cfg.Endpoint, "-database", cfg.Database,
			"-container", cfg.Container, "-process-id", id, "-orch", strconv.Itoa(pair[0]), "-workers", strconv.Itoa(pair[1]),
			"-inflight", strconv.Itoa(int(o.inFlight)), "-tasks", strconv.Itoa(int(o.tasks)), "-duration", o.duration.String(),
			"-lease", o.lease.String(), "-shape", string(o.shape), "-wait", o.wait.String(),
			"-orchestration-timeout", o.orchTimeout.String())
		cmd.Env = append(os.Environ(), cdb.EnvKey+"="+cfg.Key)
		outs[i], errs[i] = &bytes.Buffer{}, &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], errs[i]
		if err := cmd.Start(); err != nil {
			return run, fmt.Errorf("bench: start process %s: %w", id, err)
		}
		procs[i] = cmd
	}
	var watch sync.WaitGroup
	finished := make(chan struct{})
	if o.killAfter > 0 {
		run.killed = "bench-1"
		watch.Add(1)
		go func() {
			defer watch.Done()
			run.shareMoved = killAndWatch(ctx, finished, setup, procs[0], o.killAfter, o.lease, run.killed)
		}()
	}
	var firstErr error
	for i, cmd := range procs {
		err := cmd.Wait()
		if i == 0 && run.killed != "" {
			continue
		}
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("bench: process bench-%d: %w: %s", i+1, err, bytes.TrimSpace(errs[i].Bytes())))
			continue
		}
		var r processResult
		if err := json.Unmarshal(outs[i].Bytes(), &r); err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("bench: process bench-%d printed no result: %w", i+1, err))
			continue
		}
		run.results = append(run.results, r)
	}
	close(finished)
	watch.Wait()
	return run, firstErr
}

// processesTarget is the account the processes share: the in-memory Cosmos
// DB served on loopback with latency (its own for this run), or the one
// configured.
func processesTarget(ctx context.Context, o benchOptions, latency time.Duration) (cdb.Config, func(), error) {
	if o.onEndpoint {
		cfg, err := o.conn.config()
		if err == nil && cfg.ClientOptions.Credential != nil {
			// The processes sign with the key they are handed
			// (runBenchProcess); a token is not passed on.
			err = usageError{msg: "-processes signs with the key only (COSMOS_KEY); Entra ID (-auth) signs one process: leave -processes out"}
		}
		return cfg, func() {}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return cdb.Config{}, nil, fmt.Errorf("bench: listen: %w", err)
	}
	endpoint := "http://" + ln.Addr().String()
	srv := fakecosmos.New(fakecosmos.Options{Latency: latency, Endpoint: endpoint + "/"})
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = serveUntilDone(serveCtx, ln, srv)
	}()
	cfg := cdb.Config{Endpoint: endpoint, Key: srv.Key(), Database: "duroxide", Container: benchContainer}
	return cfg, func() { cancel(); <-served }, nil
}

// killAndWatch kills proc after d and returns how long it took until a
// surviving process renewed its lease after the killed one's had expired:
// the moment the survivors' shares leave the killed process out. Zero
// when that was not seen before the survivors finished (or ctx ended).
func killAndWatch(ctx context.Context, finished <-chan struct{}, watcher *cdb.CosmosProvider, proc *exec.Cmd, d, lease time.Duration, killed string) time.Duration {
	select {
	case <-time.After(d):
	case <-finished:
		return 0
	case <-ctx.Done():
		return 0
	}
	_ = proc.Process.Kill()
	killedAt := time.Now()
	for {
		if members, err := watcher.ReadProcessLeaseMembers(ctx); err == nil {
			dead, ok := members[killed]
			for id, until := range members {
				// A survivor's lease renewed after the killed one's
				// ended: that renewal no longer counted it.
				if id != killed && (!ok || until.Add(-lease).After(dead)) {
					return time.Since(killedAt)
				}
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-finished:
			return 0
		case <-ctx.Done():
			return 0
		}
	}
}
