package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/bench"
)

// benchContainer is where bench runs on a real account unless -container
// says otherwise: never the application's container.
const benchContainer = "cdb-bench"

// benchOptions are the flags of `cdb bench`.
type benchOptions struct {
	latencies   []time.Duration
	latencySet  bool
	pairs       [][2]int
	duration    time.Duration
	inFlight    positiveInt
	tasks       positiveInt
	conn        connection
	onEndpoint  bool
	description string
}

func parseBenchFlags(args []string, stderr io.Writer) (benchOptions, error) {
	o := benchOptions{inFlight: 20, tasks: 5, conn: connection{defaultContainer: benchContainer}}
	fs := newFlagSet("bench", stderr)
	latencies := fs.String("latency", "0,5ms,70ms", "comma-separated latencies added per request by the in-memory Cosmos DB")
	concurrency := fs.String("concurrency", "1:1,2:2,4:4,16:16", "comma-separated orchestration:worker dispatcher counts")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each run keeps launching orchestrations")
	fs.Var(&o.inFlight, "inflight", "`n` orchestrations in flight")
	fs.Var(&o.tasks, "tasks", "`n` activities per orchestration")
	o.conn.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.duration <= 0 {
		return o, usageError{msg: fmt.Sprintf("-duration must be positive, got %s", o.duration)}
	}
	fs.Visit(func(f *flag.Flag) { o.latencySet = o.latencySet || f.Name == "latency" })
	var err error
	if o.latencies, err = parseLatencies(*latencies); err != nil {
		return o, err
	}
	if o.pairs, err = parseConcurrency(*concurrency); err != nil {
		return o, err
	}
	o.onEndpoint = o.conn.configured()
	if o.onEndpoint && o.latencySet {
		return o, usageError{msg: "-latency applies to the in-memory Cosmos DB only, not to " + cdb.EnvEndpoint + " or -endpoint"}
	}
	if o.onEndpoint {
		o.latencies = []time.Duration{0}
	}
	return o, nil
}

// runBench runs duroxide's stress protocol at each added latency and
// concurrency and prints a Markdown table. On the in-memory Cosmos DB, or
// on the account in COSMOS_* or -endpoint, in a container of its own.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	target, where, cleanup, err := benchTarget(ctx, &o.conn, o.onEndpoint)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stdout, "duroxide stress protocol on %s: %d in flight, %d activities of 10 ms each, %s per run\n\n", where, o.inFlight, o.tasks, o.duration)
	fmt.Fprintln(stdout, "| added latency | orch:worker | orch/s | activities/s | requests/orch | RU/orch | p50 | p99 | completed/failed |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|")
	for _, lat := range o.latencies {
		for _, c := range o.pairs {
			res, err := bench.Run(ctx, bench.Config{
				OrchestrationConcurrency: c[0], WorkerConcurrency: c[1], MaxInFlight: int(o.inFlight),
				Duration: o.duration, TasksPerInstance: int(o.tasks), Latency: lat,
			}, target)
			if err != nil {
				return err
			}
			latency := lat.String()
			if o.onEndpoint {
				latency = "network"
			}
			fmt.Fprintf(stdout, "| %s | %d:%d | %.2f | %.1f | %.1f | %.0f | %s | %s | %d/%d |\n", latency, c[0], c[1],
				res.OrchestrationsPerSecond, res.ActivitiesPerSecond, res.RequestsPerOrchestration, res.RUPerOrchestration,
				res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond), res.Completed, res.Failed)
		}
	}
	return nil
}

// benchTarget is the configured account when there is one, else fresh
// in-memory accounts (one per run, made by bench.Run). On an account it
// uses its own container: one it creates and deletes afterwards, or an
// existing one without instances, from which it deletes its instances
// afterwards. It refuses a container that holds instances: they are
// someone's, and bench's would mix with them.
func benchTarget(ctx context.Context, conn *connection, onEndpoint bool) (bench.Target, string, func(), error) {
	if !onEndpoint {
		return bench.Target{}, "the in-memory Cosmos DB", func() {}, nil
	}
	cfg, err := conn.config()
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	cl, err := client(cfg)
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	if err := checkCosmosEndpoint(ctx, cl); err != nil {
		return bench.Target{}, "", nil, err
	}
	existed, err := containerExists(ctx, cl, cfg)
	if err != nil {
		return bench.Target{}, "", nil, err
	}
	cfg.Client = cl
	p, err := cdb.NewProvider(ctx, cfg)
	if err != nil {
		return bench.Target{}, "", nil, describe(cfg.Endpoint, err)
	}
	where := fmt.Sprintf("%s, database %q, container %q", cfg.Endpoint, cfg.Database, cfg.Container)
	if !existed {
		cleanup := func() {
			_ = p.Container().Delete(context.Background())
			_ = p.Close()
		}
		return bench.Target{Provider: p}, where + " (created for this run, deleted afterwards)", cleanup, nil
	}
	ids, err := p.ListInstances(ctx)
	if err == nil && len(ids) > 0 {
		err = fmt.Errorf("container %q already holds instances: bench needs a container of its own (-container, default %s)", cfg.Container, benchContainer)
	}
	if err != nil {
		_ = p.Close()
		return bench.Target{}, "", nil, err
	}
	cleanup := func() {
		deleteBenchInstances(p)
		_ = p.Close()
	}
	return bench.Target{Provider: p}, where + " (existing, its bench instances deleted afterwards)", cleanup, nil
}

// containerExists reads the container, so bench knows whether it is its
// to delete.
func containerExists(ctx context.Context, cl *cdb.Client, cfg cdb.Config) (bool, error) {
	c, err := cl.NewContainer(cfg.Database, cfg.Container)
	if err != nil {
		return false, err
	}
	_, err = c.Read(ctx)
	switch {
	case err == nil:
		return true, nil
	case cdb.IsNotFound(err):
		return false, nil
	default:
		return false, describe(cfg.Endpoint, err)
	}
}

// deleteBenchInstances removes what bench started from a container it did
// not create; it runs after an interrupt too, so it has its own context.
func deleteBenchInstances(p *cdb.CosmosProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids, err := p.ListInstances(ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		if strings.HasPrefix(id, bench.InstancePrefix) {
			if _, err := p.DeleteInstance(ctx, id, true); err != nil && !errors.Is(err, cdb.ErrInstanceNotFound) {
				return
			}
		}
	}
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
