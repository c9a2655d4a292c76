package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// runDemo runs an order-processing workload through the runtime and the
// Cosmos DB provider: on the embedded in-memory Cosmos DB, or on the account
// in COSMOS_* when COSMOS_ENDPOINT is set. It shows progress while it runs
// and a summary at the end. On an account (not an emulator on loopback) it
// processes fewer orders and paces their starts to an RU budget, so a new
// 400 RU/s container is not throttled into a timeout.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	target, err := demoTargetFromEnv()
	if err != nil {
		return err
	}
	def := demoDefaultsFor(target)
	fs := newFlagSet("demo", stderr)
	orders := fs.Int("orders", def.orders, "orders to process (fewer on an account, to fit a new container's 400 RU/s)")
	concurrency := fs.Int("concurrency", 4, "orchestration and worker dispatchers")
	ruPerSecond := fs.Float64("ru-per-second", def.ruPerSecond, "RU per second the demo paces the orders' starts to, on average; 0 does not pace "+
		"(paced on an account; not in memory or on an emulator on loopback)")
	latency := fs.Duration("latency", 0, "latency added per request by the in-memory Cosmos DB, e.g. 5ms")
	keep := fs.Bool("keep", false, "on COSMOS_ENDPOINT, keep the demo's container to explore with cdb instances and cdb show")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *orders < 1 || *orders > 10000 || *concurrency < 1 || *ruPerSecond < 0 {
		return usageError{msg: "-orders must be 1..10000, -concurrency at least 1 and -ru-per-second at least 0"}
	}
	meter := newBreakdownMeter()
	provider, where, cleanup, err := demoProvider(ctx, *latency, *keep, meter)
	if err != nil {
		return err
	}
	defer cleanup()
	d := newDemo(provider, *orders, stdout)
	d.meter = meter
	width := terminalWidth(stdout)
	printWrapped(stdout, fmt.Sprintf("cdb demo: %d orders, %d:%d dispatchers, on %s", *orders, *concurrency, *concurrency, where), width, 2)
	switch {
	case *ruPerSecond > 0:
		d.pace(*ruPerSecond)
		printWrapped(stdout, fmt.Sprintf("pacing: orders start so that the demo uses about %.0f RU/s on average (an order costs about %d RU; "+
			"-ru-per-second 0 does not pace)", *ruPerSecond, demoOrderRU), width, 2)
	case target == targetLocal:
		printWrapped(stdout, "not paced: the endpoint is an emulator on loopback, with no RU/s to pay for (-ru-per-second N paces)", width, 2)
	}
	fmt.Fprintln(stdout)
	if err := d.run(ctx, *concurrency); err != nil {
		return err
	}
	d.explain(target != targetInMemory && *keep, provider.Container().ID())
	return nil
}

// explain says how to open the order the summary showed, and its child,
// with cdb show: in the kept container, or by running the demo where its
// store outlives it.
func (d *demo) explain(kept bool, container string) {
	switch {
	case d.shown == "":
	case kept:
		// A command a line, to copy whole.
		fmt.Fprintf(d.out, "\nexplore it (the instances, the order above, its payment):\n  cdb instances -container %s\n  cdb show -container %s %s\n",
			container, container, d.shown)
		if d.shownChild != "" {
			fmt.Fprintf(d.out, "  cdb show -container %s %s\n", container, d.shownChild)
		}
	default:
		fmt.Fprintln(d.out)
		printWrapped(d.out, "to open these instances with cdb show, run the demo with -keep on an account or on cdb emulator (COSMOS_ENDPOINT)",
			terminalWidth(d.out), 0)
	}
}

// demoDefaults are the flag defaults that depend on where the demo runs.
type demoDefaults struct {
	orders      int
	ruPerSecond float64 // 0: not paced
}

// demoDefaultsFor: in memory and on an emulator on loopback, 60 orders as
// fast as they go; on an account, 12 orders paced to 300 RU/s, which leaves
// a new container's 400 RU/s room for the dispatchers' polling.
func demoDefaultsFor(target demoTarget) demoDefaults {
	if target == targetAccount {
		return demoDefaults{orders: 12, ruPerSecond: 300}
	}
	return demoDefaults{orders: 60}
}

// demoOrderRU is about what one order costs: measured with `cdb demo
// -orders 12` on the in-memory Cosmos DB's RU model (Microsoft's documented
// charges, one partition key range), 15,474 RU for 12 orders with their
// payments and ledger.
const demoOrderRU = 1300

// demoProvider is a provider on the account in COSMOS_* (a container of its
// own, deleted afterwards), else on a fresh in-memory Cosmos DB. Its client
// reports to meter, for the breakdown; the provider samples no gauges, which
// the breakdown does not print and which would cost queries.
func demoProvider(ctx context.Context, latency time.Duration, keep bool, meter cdb.Meter) (*cdb.CosmosProvider, string, func(), error) {
	cfg, err := cdb.ConfigFromEnv()
	if errors.Is(err, cdb.ErrEndpointNotSet) {
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 4, Latency: latency})
		p, err := cdb.NewProvider(ctx, cdb.Config{
			Endpoint: acct.Endpoint(), Key: acct.Key(), GaugeInterval: -1,
			ClientOptions: cdb.ClientOptions{Transport: acct.Transport(), Telemetry: cdb.Telemetry{Meter: meter}},
		})
		if err != nil {
			return nil, "", nil, err
		}
		where := "the embedded in-memory Cosmos DB (set COSMOS_ENDPOINT and COSMOS_KEY for a real account)"
		return p, where, func() { _ = p.Close() }, nil
	}
	if err != nil {
		return nil, "", nil, err
	}
	if err := demoSignsWithTheKey(); err != nil {
		return nil, "", nil, err
	}
	cfg = demoAccountConfig(cfg, fmt.Sprintf("cdb-demo-%d", time.Now().UnixNano()))
	cfg.ClientOptions.Telemetry.Meter = meter
	cfg.GaugeInterval = -1
	p, err := cdb.NewProvider(ctx, cfg)
	switch {
	case endpointRefused(err):
		return nil, "", nil, err
	case err != nil:
		return nil, "", nil, fmt.Errorf("connect to %s: %w", cfg.Endpoint, err)
	}
	if keep {
		return p, fmt.Sprintf("%s (container %s, kept)", cfg.Endpoint, cfg.Container), func() { _ = p.Close() }, nil
	}
	cleanup := func() {
		_ = p.Container().Delete(context.Background())
		_ = p.Close()
	}
	return p, fmt.Sprintf("%s (container %s, deleted afterwards)", cfg.Endpoint, cfg.Container), cleanup, nil
}

// demoSignsWithTheKey refuses Entra ID (COSMOS_AUTH) on an account: the
// demo creates a container of its own, which an Entra ID identity may not.
func demoSignsWithTheKey() error {
	lookup, err := dotEnvLookup()
	if err != nil {
		return err
	}
	if auth := lookup(envAuth); auth != "" && auth != authKey {
		return usageError{msg: fmt.Sprintf("the demo creates a container of its own, which Entra ID (%s=%s) may not: run it with the key (%s=key)", envAuth, auth, envAuth)}
	}
	return nil
}

// demoAccountConfig is cfg for the demo's own container on an account. The
// client rides out throttling longer than by default: a burst over the
// container's RU/s answers 429 with the wait in x-ms-retry-after-ms, and
// waiting is all there is to do.
func demoAccountConfig(cfg cdb.Config, container string) cdb.Config {
	cfg.Container = container
	cfg.ClientOptions.Retry.MaxAttempts = max(cfg.ClientOptions.Retry.MaxAttempts, 60)
	cfg.ClientOptions.Retry.MaxElapsed = max(cfg.ClientOptions.Retry.MaxElapsed, 2*time.Minute)
	return cfg
}

// demo is one run of the workload and its counters.
type demo struct {
	provider *cdb.CosmosProvider
	orders   int
	out      io.Writer

	shipped, failed, escalated, activities atomic.Int64
	ledgerDone                             chan struct{}

	pacer *ruPacer // nil: orders start at once

	// meter receives the metrics of the provider's client and of the
	// runtime, for the breakdown; nil: no breakdown.
	meter *breakdownMeter

	// shown is the order whose history the summary printed, shownChild
	// its payment sub-orchestration's instance id.
	shown, shownChild string
}

// pace makes the orders start no faster than ruPerSecond allows.
func (d *demo) pace(ruPerSecond float64) {
	stats := d.provider.Client().Stats
	before := stats().RequestCharge
	d.pacer = newRUPacer(ruPerSecond, demoOrderRU, func() float64 { return stats().RequestCharge - before })
}

func newDemo(p *cdb.CosmosProvider, orders int, out io.Writer) *demo {
	return &demo{provider: p, orders: orders, out: out, ledgerDone: make(chan struct{})}
}

// order is a ProcessOrder input.
type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Items    int    `json:"items"`
	Total    int    `json:"total"`
}

// shipmentWait is how long an order waits for the warehouse before it
// escalates; the warehouse answers some orders later than that.
const shipmentWait = time.Second

// ledgerBatch is how many closed orders one ledger execution books before
// it continues as new.
const ledgerBatch = 10

func (d *demo) registry() (*durable.Registry, error) {
	reg := durable.NewRegistry()
	steps := []error{
		reg.RegisterOrchestration("ProcessOrder", d.processOrder),
		reg.RegisterOrchestration("ChargePayment", chargePayment),
		reg.RegisterOrchestration("Ledger", d.ledger),
		reg.RegisterActivity("ValidateOrder", d.counted(func(_ durable.ActivityContext, in string) (string, error) { return in, nil })),
		reg.RegisterActivity("ReserveItem", d.counted(reserveItem)),
		reg.RegisterActivity("Charge", d.counted(charge)),
		reg.RegisterActivity("Escalate", d.counted(func(_ durable.ActivityContext, in string) (string, error) {
			d.escalated.Add(1)
			return "escalated " + in, nil
		})),
		reg.RegisterActivity("RecordOutcome", d.counted(d.recordOutcome)),
		reg.RegisterActivity("CloseBooks", d.counted(func(_ durable.ActivityContext, in string) (string, error) {
			close(d.ledgerDone)
			return in, nil
		})),
	}
	return reg, errors.Join(steps...)
}

// counted counts an activity's runs for the progress line.
func (d *demo) counted(fn durable.ActivityFunc) durable.ActivityFunc {
	return func(ctx durable.ActivityContext, in string) (string, error) {
		d.activities.Add(1)
		return fn(ctx, in)
	}
}

// processOrder validates an order, reserves its items in parallel, charges
// it through a sub-orchestration, waits for the warehouse (escalating once
// if it is slow), and records the outcome.
func (d *demo) processOrder(ctx *durable.OrchestrationContext, input string) (string, error) {
	var o order
	if err := json.Unmarshal([]byte(input), &o); err != nil {
		return "", err
	}
	setStatus(ctx, "validating")
	if _, err := ctx.ScheduleActivity("ValidateOrder", input).Await(); err != nil {
		return "", d.fail(ctx, o, err)
	}
	setStatus(ctx, fmt.Sprintf("reserving %d items", o.Items))
	reservations := make([]*durable.Future, o.Items)
	for i := range reservations {
		reservations[i] = ctx.ScheduleActivity("ReserveItem", fmt.Sprintf(`{"order":%q,"item":%d}`, o.ID, i))
	}
	for _, r := range ctx.Join(reservations...) {
		if r.Err != nil {
			return "", d.fail(ctx, o, r.Err)
		}
	}
	setStatus(ctx, "charging")
	receipt, err := ctx.ScheduleSubOrchestration("ChargePayment", input).Await()
	if err != nil {
		return "", d.fail(ctx, o, err)
	}
	setStatus(ctx, "awaiting shipment")
	tracking, err := d.awaitShipment(ctx, o)
	if err != nil {
		return "", d.fail(ctx, o, err)
	}
	ctx.SetKV("tracking", tracking)
	ctx.SetKV("receipt", receipt)
	setStatus(ctx, "shipped")
	if _, err := ctx.ScheduleActivity("RecordOutcome", fmt.Sprintf(`{"order":%q,"ok":true,"total":%d}`, o.ID, o.Total)).Await(); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"order":%q,"tracking":%q}`, o.ID, tracking), nil
}

// awaitShipment races the warehouse's message against a timer; a slow
// warehouse gets an escalation and more time. The message comes through the
// instance's persistent queue, so the wait that lost the race loses nothing:
// the next wait takes the message whenever it comes.
func (d *demo) awaitShipment(ctx *durable.OrchestrationContext, o order) (string, error) {
	shipped := ctx.DequeueEvent("shipped")
	if ctx.Select(shipped, ctx.ScheduleTimer(shipmentWait)) == 0 {
		return shipped.Await()
	}
	if _, err := ctx.ScheduleActivity("Escalate", o.ID).Await(); err != nil {
		return "", err
	}
	return ctx.DequeueEvent("shipped").Await()
}

// fail records a failed order, then fails the orchestration with err.
func (d *demo) fail(ctx *durable.OrchestrationContext, o order, err error) error {
	setStatus(ctx, "failed")
	_, _ = ctx.ScheduleActivity("RecordOutcome", fmt.Sprintf(`{"order":%q,"ok":false}`, o.ID)).Await()
	return err
}

func setStatus(ctx *durable.OrchestrationContext, s string) { ctx.SetCustomStatus(&s) }

// chargePayment charges an order, retrying a declined card twice, 200 ms
// and then 400 ms later (durable timers, which the timeline marks).
func chargePayment(ctx *durable.OrchestrationContext, input string) (string, error) {
	declined := durable.RetryPolicy{MaxAttempts: 3, FirstInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaxInterval: time.Second}
	return ctx.ScheduleActivity("Charge", input, durable.WithRetry(declined)).Await()
}

// ledger books closed orders from its persistent queue, ten per execution,
// continuing as new in between, and closes the books when all are in.
func (d *demo) ledger(ctx *durable.OrchestrationContext, input string) (string, error) {
	var state struct{ Booked, Total, Expected int }
	if err := json.Unmarshal([]byte(input), &state); err != nil {
		return "", err
	}
	for i := 0; i < ledgerBatch && state.Booked < state.Expected; i++ {
		amount, err := ctx.DequeueEvent("closed").Await()
		if err != nil {
			return "", err
		}
		var a int
		_ = json.Unmarshal([]byte(amount), &a)
		state.Booked++
		state.Total += a
	}
	next, _ := json.Marshal(state)
	if state.Booked < state.Expected {
		return ctx.ContinueAsNew(string(next))
	}
	return ctx.ScheduleActivity("CloseBooks", string(next)).Await()
}

func reserveItem(ctx durable.ActivityContext, in string) (string, error) {
	return sleepFor(ctx, 5*time.Millisecond, "reserved "+in)
}

// charge declines about one card in ten.
func charge(ctx durable.ActivityContext, in string) (string, error) {
	if rand.IntN(10) == 0 {
		return "", errors.New("card declined")
	}
	return sleepFor(ctx, 10*time.Millisecond, fmt.Sprintf("receipt-%d", rand.IntN(1_000_000)))
}

func sleepFor(ctx durable.ActivityContext, d time.Duration, result string) (string, error) {
	select {
	case <-time.After(d):
		return result, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// recordOutcome counts an order's outcome and books a shipped one in the
// ledger's queue.
func (d *demo) recordOutcome(ctx durable.ActivityContext, in string) (string, error) {
	var r struct {
		Order string `json:"order"`
		OK    bool   `json:"ok"`
		Total int    `json:"total"`
	}
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		return "", err
	}
	amount := 0
	if r.OK {
		d.shipped.Add(1)
		amount = r.Total
	} else {
		d.failed.Add(1)
	}
	return in, ctx.Client().EnqueueEvent(ctx, "ledger", "closed", fmt.Sprint(amount))
}

// run starts the runtime, the orders, the ledger and the warehouse, shows
// progress until every order is settled and the books are closed, and
// prints the summary.
func (d *demo) run(ctx context.Context, concurrency int) error {
	reg, err := d.registry()
	if err != nil {
		return err
	}
	opts := durable.Options{OrchestrationConcurrency: concurrency, WorkerConcurrency: concurrency}
	if d.meter != nil {
		opts.Telemetry.Meter = d.meter
	}
	rt, err := durable.Start(ctx, d.provider, reg, opts)
	if err != nil {
		return err
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rt.Shutdown(stop)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops a paced start loop when progress gives up
	client := rt.Client()
	start := time.Now()
	before := d.provider.Client().Stats()
	if d.meter != nil {
		d.meter.reset() // the breakdown covers the run, as the summary's totals do
	}
	if d.pacer != nil {
		d.pacer.restart()
	}
	if err := client.StartOrchestration(ctx, "ledger", "Ledger", fmt.Sprintf(`{"Booked":0,"Total":0,"Expected":%d}`, d.orders)); err != nil {
		return err
	}
	started := make(chan error, 1)
	go func() { started <- d.startOrders(ctx, client) }()
	if err := d.showProgress(ctx, start, started); err != nil {
		return err
	}
	if err := d.waitForQuiet(ctx, client); err != nil {
		return err
	}
	after := d.provider.Client().Stats()
	var figures *breakdown
	if d.meter != nil {
		b := readBreakdown(d.meter)
		figures = &b
	}
	return d.summarize(ctx, client, time.Since(start), after.Requests-before.Requests, after.RequestCharge-before.RequestCharge, figures)
}

// startOrders starts every order, each when the pacer lets it, with the
// warehouse that will ship it.
func (d *demo) startOrders(ctx context.Context, client *durable.Client) error {
	for i := 0; i < d.orders; i++ {
		if d.pacer != nil {
			if err := d.pacer.wait(ctx, i); err != nil {
				return err
			}
		}
		o := order{ID: fmt.Sprintf("order-%03d", i), Customer: fmt.Sprintf("customer-%02d", i%17), Items: 2 + i%4, Total: 10 + (i*37)%190}
		body, _ := json.Marshal(o)
		if err := client.StartOrchestration(ctx, o.ID, "ProcessOrder", string(body)); err != nil {
			return err
		}
		go d.warehouse(ctx, client, o.ID)
	}
	return nil
}

// waitForQuiet waits until no orchestration is running: the last orders
// commit their final turn just after recording their outcome. A paced demo
// asks less often: each look is a few aggregate queries.
func (d *demo) waitForQuiet(ctx context.Context, client *durable.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	every := 100 * time.Millisecond
	if d.pacer != nil {
		every = time.Second
	}
	for {
		m, err := client.GetSystemMetrics(ctx)
		if err != nil {
			return err
		}
		if m.RunningInstances == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// warehouse ships an order after a while: most quickly, some too late for
// the order's patience.
func (d *demo) warehouse(ctx context.Context, client *durable.Client, id string) {
	delay := time.Duration(100+rand.IntN(1200)) * time.Millisecond
	if rand.IntN(5) == 0 {
		delay = 3*time.Second + time.Duration(rand.IntN(1000))*time.Millisecond
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return
	}
	_ = client.EnqueueEvent(ctx, id, "shipped", fmt.Sprintf("TRK-%06d", rand.IntN(1_000_000)))
}

// showProgress repaints a progress line on a terminal, or prints a line
// every two seconds otherwise, until the books are closed. started reports
// the end of the start loop.
func (d *demo) showProgress(ctx context.Context, start time.Time, started <-chan error) error {
	tty := isTerminal(d.out)
	every := 2 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	limit := d.timeLimit()
	timeout := time.After(limit)
	for {
		select {
		case err := <-started:
			if err != nil {
				return fmt.Errorf("start orders: %w", err)
			}
			started = nil
		case <-d.ledgerDone:
			d.printProgress(tty, start)
			if tty {
				fmt.Fprintln(d.out)
			}
			return nil
		case <-ticker.C:
			d.printProgress(tty, start)
		case <-timeout:
			return fmt.Errorf("the workload did not finish within %s", limit)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// timeLimit is how long the workload may take: five minutes, plus, when
// paced, twice the time its RU budget needs.
func (d *demo) timeLimit() time.Duration {
	limit := 5 * time.Minute
	if d.pacer != nil {
		limit += 2 * d.pacer.timeFor(d.orders)
	}
	return limit
}

func (d *demo) printProgress(tty bool, start time.Time) {
	stats := d.provider.Client().Stats()
	p := demoProgress{
		settled: d.shipped.Load() + d.failed.Load(), orders: int64(d.orders),
		shipped: d.shipped.Load(), failed: d.failed.Load(), escalated: d.escalated.Load(),
		activities: d.activities.Load(), requests: stats.Requests, charge: stats.RequestCharge, elapsed: time.Since(start),
	}
	width := terminalWidth(d.out)
	if tty {
		repaintLine(d.out, p.line(width-1))
		return
	}
	fmt.Fprintln(d.out, p.line(width))
}

// demoProgress is what the progress line reports.
type demoProgress struct {
	settled, orders, shipped, failed, escalated, activities, requests int64
	charge                                                            float64
	elapsed                                                           time.Duration
}

// line is the progress in at most width columns. The orders settled, the
// requests, the RU and the time are always there; the outcomes, a bar and
// the activities come, in that order, as the width allows.
func (p demoProgress) line(width int) string {
	return fitFields(width, []progressField{
		{text: progressBar(int(p.settled), int(p.orders), 10), rank: 2},
		{text: fmt.Sprintf("%d/%d orders", p.settled, p.orders)},
		{text: fmt.Sprintf("%d shipped %d failed %d escalated", p.shipped, p.failed, p.escalated), rank: 1},
		{text: fmt.Sprintf("%d activities", p.activities), rank: 3},
		{text: fmt.Sprintf("%d requests", p.requests)},
		{text: fmt.Sprintf("%.0f RU", p.charge)},
		{text: fmt.Sprintf("%.1fs", p.elapsed.Seconds())},
	})
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// summarize prints the totals, the cost per orchestration, the breakdown
// (when there is one) and one order's history as a timeline.
func (d *demo) summarize(ctx context.Context, client *durable.Client, elapsed time.Duration, requests int64, charge float64, figures *breakdown) error {
	metrics, err := client.GetSystemMetrics(ctx)
	if err != nil {
		return err
	}
	ledgerExecs, err := client.ListExecutions(ctx, "ledger")
	if err != nil {
		return err
	}
	orchestrations := int(metrics.TotalExecutions)
	fmt.Fprintf(d.out, "\nsummary after %.1fs\n", elapsed.Seconds())
	for _, line := range []string{
		fmt.Sprintf("  orders          %d shipped, %d failed (card declined three times),", d.shipped.Load(), d.failed.Load()),
		fmt.Sprintf("                  %d escalated to the warehouse after waiting %s", d.escalated.Load(), shipmentWait),
		fmt.Sprintf("  orchestrations  %d instances, %d executions: orders, their payments", metrics.TotalInstances, metrics.TotalExecutions),
		fmt.Sprintf("                  (sub-orchestrations) and a ledger (continued as new %d times)", len(ledgerExecs)-1),
		fmt.Sprintf("                  %d completed, %d failed, %d running", metrics.CompletedInstances, metrics.FailedInstances, metrics.RunningInstances),
		fmt.Sprintf("  activities      %d", d.activities.Load()),
		fmt.Sprintf("  Cosmos DB       %d requests, %.0f RU", requests, charge),
		fmt.Sprintf("                  %.1f requests and %.0f RU per orchestration execution",
			float64(requests)/float64(max(orchestrations, 1)), charge/float64(max(orchestrations, 1))),
		fmt.Sprintf("  throughput      %.1f orders/s", float64(d.orders)/elapsed.Seconds()),
	} {
		printWrapped(d.out, line, terminalWidth(d.out), 18)
	}
	if figures != nil {
		figures.print(d.out)
	}
	return d.showOneOrder(ctx, client)
}

// showOneOrder prints the history of an order that escalated (or the first
// order) as a timeline.
func (d *demo) showOneOrder(ctx context.Context, client *durable.Client) error {
	ids, err := client.ListInstances(ctx)
	if err != nil {
		return err
	}
	sort.Strings(ids)
	pick := ""
	for _, id := range ids {
		if !strings.HasPrefix(id, "order-") || strings.Contains(id, "::") {
			continue
		}
		if pick == "" {
			pick = id
		}
		history, err := client.ReadHistory(ctx, id)
		if err != nil {
			return err
		}
		if hasActivity(history, "Escalate") {
			pick = id
			break
		}
	}
	if pick == "" {
		return nil
	}
	fmt.Fprintln(d.out)
	printWrapped(d.out, fmt.Sprintf("one order, %s, as stored (cdb show prints the same for any instance):", pick), terminalWidth(d.out), 2)
	history, err := client.ReadHistory(ctx, pick)
	if err != nil {
		return err
	}
	printTimeline(d.out, pick, history)
	d.shown, d.shownChild = pick, firstChild(pick, history)
	return nil
}

// firstChild is the instance id of the first sub-orchestration a history
// scheduled, empty for none.
func firstChild(instance string, history []cdb.Event) string {
	for _, e := range history {
		if s, ok := e.Kind.(cdb.SubOrchestrationScheduled); ok {
			return cdb.BuildChildInstanceID(instance, s.Instance)
		}
	}
	return ""
}

func hasActivity(history []cdb.Event, name string) bool {
	for _, e := range history {
		if s, ok := e.Kind.(cdb.ActivityScheduled); ok && s.Name == name {
			return true
		}
	}
	return false
}
