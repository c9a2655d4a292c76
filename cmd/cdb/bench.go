package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
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
	shape       bench.Shape
	wait        time.Duration // the timers' timer, and how long the events shape waits to raise its event
	orchTimeout time.Duration // how long one orchestration may take before the run fails
	conn        connection
	onEndpoint  bool
	description string
	verbose     bool
	format      outputFormat
	processes   int           // 0: one in-process run
	killAfter   time.Duration // with processes: kill one process this long into a run
	lease       time.Duration // with processes: the process leases' duration
	idle        bool          // measure the cost of doing nothing (benchidle.go)
	ranges      int           // with idle: the container's partition key ranges
	waiting     int           // with idle: instances waiting for an event never raised
}

func parseBenchFlags(args []string, stderr io.Writer) (benchOptions, error) {
	o := benchOptions{inFlight: 20, tasks: 5, conn: connection{defaultContainer: benchContainer}}
	fs := newFlagSet("bench", stderr)
	latencies := fs.String("latency", "0,5ms,70ms", "comma-separated latencies added per request by the in-memory Cosmos DB")
	concurrency := fs.String("concurrency", "1:1,2:2,4:4,16:16", "comma-separated orchestration:worker dispatcher counts")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each run keeps launching orchestrations")
	fs.Var(&o.inFlight, "inflight", "`n` orchestrations in flight")
	fs.Var(&o.tasks, "tasks", "`n` activities per orchestration (fanout, sequence) or children (children)")
	shape := fs.String("shape", string(bench.ShapeFanOut), "the orchestration kept in flight: "+shapeHelp())
	fs.DurationVar(&o.wait, "wait", time.Second, "the timers shape's timer, and how long after its start the events shape's event is raised")
	fs.DurationVar(&o.orchTimeout, "orchestration-timeout", time.Minute, "how long one orchestration may take, from its start to its end seen, before the run fails (a backlog's wait grows with -inflight)")
	fs.BoolVar(&o.verbose, "v", false, "also print the provider's requests per orchestration by operation")
	fs.IntVar(&o.processes, "processes", 0, "run each configuration in `n` OS processes at once, sharing the slots through process leases (0: one run in this process)")
	fs.DurationVar(&o.lease, "lease", benchLeaseDuration, "with -processes: the process leases' duration (renewed every third of it)")
	fs.DurationVar(&o.killAfter, "kill-after", 0, "with -processes of at least 2: kill one process this long into each run and report how long its share took to move")
	fs.BoolVar(&o.idle, "idle", false, "measure what processes with no work spend: -processes runtimes (here in this one OS process, each with a client of its own), -ranges, -waiting, each -latency, for -duration; in-memory Cosmos DB only")
	fs.IntVar(&o.ranges, "ranges", 1, "with -idle: the container's partition key ranges")
	fs.IntVar(&o.waiting, "waiting", 0, "with -idle: `n` instances waiting for an event that is never raised")
	registerOutput(fs, &o.format)
	o.conn.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.duration <= 0 {
		return o, usageError{msg: fmt.Sprintf("-duration must be positive, got %s", o.duration)}
	}
	if o.processes < 0 {
		return o, usageError{msg: fmt.Sprintf("-processes must not be negative, got %d", o.processes)}
	}
	if o.killAfter < 0 || o.killAfter > 0 && o.processes < 2 {
		return o, usageError{msg: "-kill-after needs -processes of at least 2 and a positive duration"}
	}
	if o.shape, err = bench.ParseShape(*shape); err != nil {
		return o, usageError{msg: "-shape: " + err.Error()}
	}
	if o.wait <= 0 {
		return o, usageError{msg: fmt.Sprintf("-wait must be positive, got %s", o.wait)}
	}
	if o.orchTimeout <= 0 {
		return o, usageError{msg: fmt.Sprintf("-orchestration-timeout must be positive, got %s", o.orchTimeout)}
	}
	if o.lease < time.Second {
		return o, usageError{msg: fmt.Sprintf("-lease must be at least 1s, got %s", o.lease)}
	}
	if o.ranges < 1 || o.ranges > 64 {
		return o, usageError{msg: fmt.Sprintf("-ranges must be 1 to 64, got %d", o.ranges)}
	}
	if o.waiting < 0 {
		return o, usageError{msg: fmt.Sprintf("-waiting must not be negative, got %d", o.waiting)}
	}
	if !o.idle && (o.ranges != 1 || o.waiting != 0) {
		return o, usageError{msg: "-ranges and -waiting apply to -idle only"}
	}
	if o.processes > 0 && !o.idle && (o.verbose || o.format == formatJSON) {
		return o, usageError{msg: "-processes prints the table only (no -v, no -o json)"}
	}
	fs.Visit(func(f *flag.Flag) { o.latencySet = o.latencySet || f.Name == "latency" })
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
	if o.onEndpoint && o.idle {
		return o, usageError{msg: "-idle measures the in-memory Cosmos DB only, not " + cdb.EnvEndpoint + " or -endpoint"}
	}
	if o.idle && !o.latencySet {
		o.latencies = []time.Duration{0}
	}
	if o.onEndpoint {
		o.latencies = []time.Duration{0}
	}
	return o, nil
}

// runBench runs duroxide's stress protocol at each added latency and
// concurrency and prints a Markdown table (with -v, a second one by
// operation) or, with -o json, the whole results. On the in-memory Cosmos
// DB, or on the account in COSMOS_* or -endpoint, in a container of its own.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.idle {
		return runBenchIdle(ctx, o, stdout)
	}
	if o.processes > 0 {
		return runBenchProcesses(ctx, o, stdout, stderr)
	}
	target, where, cleanup, err := benchTarget(ctx, &o.conn, o.onEndpoint, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	report := benchReport{opts: o, out: stdout, where: where}
	report.begin()
	for _, lat := range o.latencies {
		for _, c := range o.pairs {
			res, err := bench.Run(ctx, bench.Config{
				OrchestrationConcurrency: c[0], WorkerConcurrency: c[1], MaxInFlight: int(o.inFlight),
				Duration: o.duration, TasksPerInstance: int(o.tasks), Latency: lat, Shape: o.shape, Wait: o.wait,
				WaitTimeout: o.orchTimeout,
			}, target)
			if err != nil {
				return err
			}
			report.add(res)
		}
	}
	return report.end()
}

// benchReport prints the runs as they finish (text) or all at the end
// (-o json).
type benchReport struct {
	opts  benchOptions
	out   io.Writer
	where string
	runs  []bench.Result
}

func (r *benchReport) begin() {
	if r.opts.format == formatJSON {
		return
	}
	step := r.opts.shape.Step()
	fmt.Fprintf(r.out, "%s on %s: %d in flight, each %s, %s per run\n", r.title(), r.where, r.opts.inFlight, r.opts.shape.Describe(int(r.opts.tasks), r.opts.wait), r.opts.duration)
	fmt.Fprintln(r.out, "requests, RU and 412s are the runtime's provider's, the starts' enqueue included; the harness's status polls are counted apart, on a client of their own")
	fmt.Fprintf(r.out, "%s p50 is %s\n", step, stepLatencyMeaning(r.opts.shape))
	fmt.Fprintln(r.out)
	fmt.Fprintf(r.out, "| added latency | orch:worker | orch/s | p50 | p99 | requests/orch | turns/orch | RU/orch | %[2]s/s | requests/%[1]s | RU/%[1]s | %[1]s p50 | 412/item | harness requests/orch | completed/failed |\n", step, r.opts.shape.Steps())
	fmt.Fprintln(r.out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
}

// title names the run: duroxide's stress protocol, or the shape.
func (r *benchReport) title() string {
	if r.opts.shape == bench.ShapeFanOut {
		return "duroxide stress protocol (fanout)"
	}
	return "shape " + string(r.opts.shape)
}

// stepLatencyMeaning says what a step's latency measures in shape.
func stepLatencyMeaning(shape bench.Shape) string {
	switch shape {
	case bench.ShapeSequence:
		return "from one activity's start to the next one's (its 10 ms included, a timer between them left out)"
	case bench.ShapeTimers:
		return "from the timer's due time to the completion seen"
	case bench.ShapeEvents:
		return "from the event's raise to the completion seen"
	default:
		return "the orchestration's: its steps run at once"
	}
}

func (r *benchReport) add(res bench.Result) {
	r.runs = append(r.runs, res)
	if r.opts.format == formatJSON {
		return
	}
	fmt.Fprintf(r.out, "| %s | %d:%d | %.2f | %s | %s | %.1f | %.2f | %.0f | %.1f | %.2f | %.1f | %s | %.2f | %.1f | %d/%d |\n",
		r.latency(res), res.Config.OrchestrationConcurrency, res.Config.WorkerConcurrency,
		res.OrchestrationsPerSecond, res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond),
		res.RequestsPerOrchestration, res.TurnsPerOrchestration, res.RUPerOrchestration,
		res.StepsPerSecond, res.RequestsPerStep, res.RUPerStep, res.StepP50.Round(100*time.Microsecond),
		res.PreconditionFailedPerItem, res.HarnessRequestsPerOrchestration, res.Completed, res.Failed)
}

func (r *benchReport) end() error {
	if r.opts.format == formatJSON {
		return writeJSON(r.out, r.json())
	}
	r.printStepCosts()
	if !r.opts.verbose {
		return nil
	}
	fmt.Fprintln(r.out)
	fmt.Fprintln(r.out, "The provider's requests by operation:")
	fmt.Fprintln(r.out)
	fmt.Fprintln(r.out, "| added latency | orch:worker | operation | requests/orch | RU/orch | 412/orch |")
	fmt.Fprintln(r.out, "|---|---|---|---|---|---|")
	for _, res := range r.runs {
		for _, op := range operationsByRequests(res.Provider.ByOperation) {
			s, n := res.Provider.ByOperation[op], float64(max(res.Completed, 1))
			fmt.Fprintf(r.out, "| %s | %d:%d | %s | %.2f | %.0f | %.2f |\n", r.latency(res),
				res.Config.OrchestrationConcurrency, res.Config.WorkerConcurrency, op,
				float64(s.Requests)/n, s.RequestCharge/n, float64(s.PreconditionFailed)/n)
		}
	}
	return nil
}

// printStepCosts prints, for sequences run one at a time, what their
// early and late steps cost.
func (r *benchReport) printStepCosts() {
	header := false
	for _, res := range r.runs {
		if res.EarlySteps == nil || res.LateSteps == nil {
			continue
		}
		if !header {
			fmt.Fprintln(r.out)
			fmt.Fprintln(r.out, "What a step cost along the sequence (the provider's, averaged over ten steps with one timer among them):")
			fmt.Fprintln(r.out)
			fmt.Fprintln(r.out, "| added latency | orch:worker | steps | requests/step | RU/step | steps | requests/step | RU/step | late/early RU |")
			fmt.Fprintln(r.out, "|---|---|---|---|---|---|---|---|---|")
			header = true
		}
		e, l := res.EarlySteps, res.LateSteps
		fmt.Fprintf(r.out, "| %s | %d:%d | %d-%d | %.2f | %.1f | %d-%d | %.2f | %.1f | %.2f |\n", r.latency(res),
			res.Config.OrchestrationConcurrency, res.Config.WorkerConcurrency, e.From, e.To, e.Requests, e.RU, l.From, l.To, l.Requests, l.RU, l.RU/max(e.RU, 1e-9))
	}
}

// latency is a run's added latency as the table shows it.
func (r *benchReport) latency(res bench.Result) string {
	if r.opts.onEndpoint {
		return "network"
	}
	return res.Config.Latency.String()
}

// operationsByRequests orders operations by requests, most first.
func operationsByRequests(by map[string]cdb.OperationStats) []string {
	ops := make([]string, 0, len(by))
	for op := range by {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		a, b := by[ops[i]], by[ops[j]]
		if a.Requests != b.Requests {
			return a.Requests > b.Requests
		}
		return ops[i] < ops[j]
	})
	return ops
}

// benchJSON is `bench -o json`: the runs in the order they ran. Like the
// other commands' JSON, its field names are the CLI's own.
type benchJSON struct {
	Target          string         `json:"target"`
	Shape           string         `json:"shape"`
	Step            string         `json:"step"` // what one step of the shape is: activity, timer, event or child
	WaitMs          float64        `json:"wait_ms"`
	InFlight        int            `json:"in_flight"`
	Tasks           int            `json:"tasks"`
	ActivityDelayMs float64        `json:"activity_delay_ms"`
	DurationS       float64        `json:"duration_s"`
	Runs            []benchRunJSON `json:"runs"`
}

// benchRunJSON is one run. Per-orchestration figures divide by completed
// orchestrations; precondition_failed_per_item by turns plus worker items.
type benchRunJSON struct {
	AddedLatencyMs                  *float64       `json:"added_latency_ms"` // null on an account
	OrchestrationConcurrency        int            `json:"orchestration_concurrency"`
	WorkerConcurrency               int            `json:"worker_concurrency"`
	Launched                        int            `json:"launched"`
	Completed                       int            `json:"completed"`
	Failed                          int            `json:"failed"`
	ElapsedS                        float64        `json:"elapsed_s"`
	OrchestrationsPerSecond         float64        `json:"orchestrations_per_second"`
	ActivitiesPerSecond             float64        `json:"activities_per_second"`
	P50Ms                           float64        `json:"p50_ms"`
	P99Ms                           float64        `json:"p99_ms"`
	RequestsPerOrchestration        float64        `json:"requests_per_orchestration"`
	RUPerOrchestration              float64        `json:"ru_per_orchestration"`
	TurnsPerOrchestration           float64        `json:"turns_per_orchestration"`
	PreconditionFailedPerItem       float64        `json:"precondition_failed_per_item"`
	HarnessRequestsPerOrchestration float64        `json:"harness_requests_per_orchestration"`
	Turns                           int64          `json:"turns"`
	WorkerItems                     int64          `json:"worker_items"`
	Provider                        benchUsageJSON `json:"provider"`
	Harness                         benchUsageJSON `json:"harness"`
	// Per step of the shape (bench.Result says what a step's latency
	// measures); early_steps and late_steps only for a sequence run one
	// orchestration at a time.
	StepsPerOrchestration int            `json:"steps_per_orchestration"`
	StepsPerSecond        float64        `json:"steps_per_second"`
	RequestsPerStep       float64        `json:"requests_per_step"`
	RUPerStep             float64        `json:"ru_per_step"`
	StepP50Ms             float64        `json:"step_p50_ms"`
	StepP99Ms             float64        `json:"step_p99_ms"`
	EarlySteps            *benchStepJSON `json:"early_steps,omitempty"`
	LateSteps             *benchStepJSON `json:"late_steps,omitempty"`
}

// benchStepJSON is what a step cost on average over a stretch of a
// sequence.
type benchStepJSON struct {
	From     int     `json:"from"`
	To       int     `json:"to"`
	Requests float64 `json:"requests"`
	RU       float64 `json:"ru"`
}

func stepCostToJSON(c *bench.StepCost) *benchStepJSON {
	if c == nil {
		return nil
	}
	return &benchStepJSON{From: c.From, To: c.To, Requests: c.Requests, RU: c.RU}
}

// benchUsageJSON is what one client spent in a run.
type benchUsageJSON struct {
	Requests           int64                         `json:"requests"`
	RequestCharge      float64                       `json:"request_charge"`
	PreconditionFailed int64                         `json:"precondition_failed"`
	ByOperation        map[string]benchOperationJSON `json:"by_operation"`
}

type benchOperationJSON struct {
	Operations                    int64   `json:"operations"`
	Errors                        int64   `json:"errors"`
	Requests                      int64   `json:"requests"`
	RequestCharge                 float64 `json:"request_charge"`
	Retries                       int64   `json:"retries"`
	Throttles                     int64   `json:"throttles"`
	PreconditionFailed            int64   `json:"precondition_failed"`
	RequestsPerOrchestration      float64 `json:"requests_per_orchestration"`
	RequestChargePerOrchestration float64 `json:"request_charge_per_orchestration"`
}

func (r *benchReport) json() benchJSON {
	out := benchJSON{
		Target: r.where, Shape: string(r.opts.shape), Step: r.opts.shape.Step(), WaitMs: milliseconds(r.opts.wait),
		InFlight: int(r.opts.inFlight), Tasks: int(r.opts.tasks),
		ActivityDelayMs: 10, DurationS: r.opts.duration.Seconds(), Runs: []benchRunJSON{},
	}
	for _, res := range r.runs {
		run := benchRunJSON{
			OrchestrationConcurrency: res.Config.OrchestrationConcurrency, WorkerConcurrency: res.Config.WorkerConcurrency,
			Launched: res.Launched, Completed: res.Completed, Failed: res.Failed, ElapsedS: res.Elapsed.Seconds(),
			OrchestrationsPerSecond: res.OrchestrationsPerSecond, ActivitiesPerSecond: res.ActivitiesPerSecond,
			P50Ms: milliseconds(res.P50), P99Ms: milliseconds(res.P99),
			RequestsPerOrchestration: res.RequestsPerOrchestration, RUPerOrchestration: res.RUPerOrchestration,
			TurnsPerOrchestration: res.TurnsPerOrchestration, PreconditionFailedPerItem: res.PreconditionFailedPerItem,
			HarnessRequestsPerOrchestration: res.HarnessRequestsPerOrchestration, Turns: res.Turns, WorkerItems: res.WorkerItems,
			Provider: usageToJSON(res.Provider, res.Completed), Harness: usageToJSON(res.Harness, res.Completed),
			StepsPerOrchestration: res.StepsPerOrchestration, StepsPerSecond: res.StepsPerSecond,
			RequestsPerStep: res.RequestsPerStep, RUPerStep: res.RUPerStep,
			StepP50Ms: milliseconds(res.StepP50), StepP99Ms: milliseconds(res.StepP99),
			EarlySteps: stepCostToJSON(res.EarlySteps), LateSteps: stepCostToJSON(res.LateSteps),
		}
		if !r.opts.onEndpoint {
			ms := milliseconds(res.Config.Latency)
			run.AddedLatencyMs = &ms
		}
		out.Runs = append(out.Runs, run)
	}
	return out
}

func usageToJSON(u bench.Usage, completed int) benchUsageJSON {
	out := benchUsageJSON{
		Requests: u.Requests, RequestCharge: u.RequestCharge, PreconditionFailed: u.PreconditionFailed,
		ByOperation: make(map[string]benchOperationJSON, len(u.ByOperation)),
	}
	for op, s := range u.ByOperation {
		o := benchOperationJSON{
			Operations: s.Operations, Errors: s.Errors, Requests: s.Requests, RequestCharge: s.RequestCharge,
			Retries: s.Retries, Throttles: s.Throttles, PreconditionFailed: s.PreconditionFailed,
		}
		if completed > 0 {
			o.RequestsPerOrchestration = float64(s.Requests) / float64(completed)
			o.RequestChargePerOrchestration = s.RequestCharge / float64(completed)
		}
		out.ByOperation[op] = o
	}
	return out
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchTarget is the configured account when there is one, else fresh
// in-memory accounts (one per run, made by bench.Run). On an account it
// uses its own container: one it creates and deletes afterwards, or an
// existing one without instances, from which it deletes its instances
// afterwards. It refuses a container that holds instances: they are
// someone's, and bench's would mix with them. The harness (starts and
// status polls) has a provider and client of its own on the same container,
// so its requests are not counted as the runtime's.
func benchTarget(ctx context.Context, conn *connection, onEndpoint bool, stderr io.Writer) (bench.Target, string, func(), error) {
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
	checkEndpoint := func(ctx context.Context) error { return checkCosmosEndpoint(ctx, cl) }
	if err := conn.awaitFirstAnswer(ctx, stderr, cl.Endpoint(), checkEndpoint); err != nil {
		return bench.Target{}, "", nil, signedWith(cfg, err)
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
	harness, err := harnessProvider(ctx, cfg)
	if err != nil {
		_ = p.Close()
		return bench.Target{}, "", nil, err
	}
	target := bench.Target{Provider: p, Harness: harness}
	where := fmt.Sprintf("%s, database %q, container %q", cfg.Endpoint, cfg.Database, cfg.Container)
	if !existed {
		cleanup := func() {
			_ = harness.Close()
			_ = p.Container().Delete(context.Background())
			_ = p.Close()
		}
		return target, where + " (created for this run, deleted afterwards)", cleanup, nil
	}
	ids, err := p.ListInstances(ctx)
	if err == nil && len(ids) > 0 {
		err = fmt.Errorf("container %q already holds instances: bench needs a container of its own (-container, default %s)", cfg.Container, benchContainer)
	}
	if err != nil {
		_ = harness.Close()
		_ = p.Close()
		return bench.Target{}, "", nil, err
	}
	cleanup := func() {
		_ = harness.Close()
		deleteBenchInstances(p)
		_ = p.Close()
	}
	return target, where + " (existing, its bench instances deleted afterwards)", cleanup, nil
}

// harnessProvider is a provider on cfg's container through a client of its
// own, so its statistics are the harness's alone.
func harnessProvider(ctx context.Context, cfg cdb.Config) (*cdb.CosmosProvider, error) {
	cl, err := client(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Client = cl
	p, err := cdb.NewProvider(ctx, cfg)
	if err != nil {
		return nil, describe(cfg.Endpoint, fmt.Errorf("harness provider: %w", err))
	}
	return p, nil
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

// shapeHelp lists the shapes for -h.
func shapeHelp() string {
	names := make([]string, 0, len(bench.Shapes()))
	for _, s := range bench.Shapes() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}
