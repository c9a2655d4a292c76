package main

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// The demo's cost and latency breakdown, read from the metrics the client
// and the runtime report to its breakdownMeter: what each orchestration's
// requests cost by Cosmos DB operation, the percentiles of request, turn
// and activity durations, and those of turns' and activities'
// schedule-to-start (how long work waited in its queue once takeable).

// The instruments and attributes the breakdown reads, as the library
// names them.
const (
	instrumentRequestCharge    = "azure.cosmosdb.client.operation.request_charge"
	instrumentRequestDuration  = "db.client.operation.duration"
	instrumentCompletions      = "durable.orchestration.completions"
	instrumentTurnDuration     = "durable.orchestration.turn.duration"
	instrumentActivityDuration = "durable.activity.duration"
	instrumentTurnWait         = "durable.orchestration.turn.schedule_to_start"
	instrumentActivityWait     = "durable.activity.schedule_to_start"

	attrOperation         = "db.operation.name"
	attrOrchestrationName = "durable.orchestration.name"
	attrActivityName      = "durable.activity.name"
)

// unnamedRequests labels the requests that carry no orchestration name:
// those sent before a fetch knows its instance (the candidate query, the
// lock batch, a first turn's fetch), and the workers', the clients' and
// the outbox relay's.
const unnamedRequests = "(fetch/other)"

// breakdown is the figures the demo prints at its end, read from the
// meter at one moment.
type breakdown struct {
	costs     []orchestrationCost // by RU, most first; unnamedRequests last
	latencies []latencyRow
	waits     []latencyRow // schedule-to-start of turns and activities
}

// orchestrationCost is the RU an orchestration's requests consumed, by
// operation, and how many of its executions ended.
type orchestrationCost struct {
	name       string
	ended      float64
	operations []operationCost // by RU, most first
}

type operationCost struct {
	name  string
	calls uint64 // operations, each with its retries
	ru    float64
}

func (c orchestrationCost) ru() float64 {
	total := 0.0
	for _, op := range c.operations {
		total += op.ru
	}
	return total
}

func (c orchestrationCost) calls() uint64 {
	var total uint64
	for _, op := range c.operations {
		total += op.calls
	}
	return total
}

// latencyRow is the distribution of one kind of duration for one name.
type latencyRow struct {
	kind, name string // "request", "turn" or "activity"; the operation, orchestration or activity
	count      uint64
	p50, p99   time.Duration
}

// readBreakdown reads the breakdown's figures from m.
func readBreakdown(m *breakdownMeter) breakdown {
	return breakdown{costs: readCosts(m), latencies: readLatencies(m), waits: readWaits(m)}
}

func readCosts(m *breakdownMeter) []orchestrationCost {
	byName := map[string]*orchestrationCost{}
	cost := func(name string) *orchestrationCost {
		if name == "" {
			name = unnamedRequests
		}
		c, ok := byName[name]
		if !ok {
			c = &orchestrationCost{name: name}
			byName[name] = c
		}
		return c
	}
	for _, g := range m.groups(instrumentRequestCharge, attrOrchestrationName, attrOperation) {
		c := cost(g.values[0])
		c.operations = append(c.operations, operationCost{name: g.values[1], calls: g.dist.count, ru: g.dist.sum})
	}
	for _, g := range m.groups(instrumentCompletions, attrOrchestrationName) {
		cost(g.values[0]).ended += g.dist.sum
	}
	costs := make([]orchestrationCost, 0, len(byName))
	for _, c := range byName {
		sort.SliceStable(c.operations, func(i, j int) bool { return c.operations[i].ru > c.operations[j].ru })
		costs = append(costs, *c)
	}
	sort.Slice(costs, func(i, j int) bool {
		a, b := costs[i], costs[j]
		if (a.name == unnamedRequests) != (b.name == unnamedRequests) {
			return b.name == unnamedRequests
		}
		if a.ru() != b.ru() {
			return a.ru() > b.ru()
		}
		return a.name < b.name
	})
	return costs
}

// latencySource is a histogram the breakdown reads, by one attribute.
type latencySource struct{ kind, instrument, key string }

func readLatencies(m *breakdownMeter) []latencyRow {
	return readDistributions(m, []latencySource{
		{"request", instrumentRequestDuration, attrOperation},
		{"turn", instrumentTurnDuration, attrOrchestrationName},
		{"activity", instrumentActivityDuration, attrActivityName},
	})
}

func readWaits(m *breakdownMeter) []latencyRow {
	return readDistributions(m, []latencySource{
		{"turn", instrumentTurnWait, attrOrchestrationName},
		{"activity", instrumentActivityWait, attrActivityName},
	})
}

func readDistributions(m *breakdownMeter, sources []latencySource) []latencyRow {
	var rows []latencyRow
	for _, source := range sources {
		for _, g := range m.groups(source.instrument, source.key) {
			rows = append(rows, latencyRow{kind: source.kind, name: g.values[0], count: g.dist.count,
				p50: seconds(g.dist.quantile(0.50)), p99: seconds(g.dist.quantile(0.99))})
		}
	}
	return rows
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// print writes the breakdown in at most 80 columns.
func (b breakdown) print(out io.Writer) {
	if len(b.costs) > 0 {
		b.printCosts(out)
	}
	if len(b.latencies) > 0 {
		fmt.Fprintln(out, "\nlatency: requests (with retries), turns (fetch to ack), activities (run to ack)")
		printLatencyRows(out, "operation or name", b.latencies)
	}
	if len(b.waits) > 0 {
		fmt.Fprintln(out, "\nschedule-to-start: from takeable in the queue to fetched")
		fmt.Fprintln(out, "  (an item given back with a delay: from the delay's end; a timer: its due time)")
		printLatencyRows(out, "orchestration or activity", b.waits)
	}
}

func (b breakdown) printCosts(out io.Writer) {
	fmt.Fprintln(out, "\nRU by orchestration and Cosmos DB operation (db.operation.name)")
	var ru, ended float64
	for _, c := range b.costs {
		ru += c.ru()
		ended += c.ended
		fmt.Fprintf(out, "  %s\n", fitWidth(c.headline(), 78))
		for _, op := range c.operations {
			fmt.Fprintf(out, "    %-26s %7d %-5s %10.0f RU %4.0f%%\n",
				fitWidth(op.name, 26), op.calls, callsWord(op.calls), op.ru, 100*op.ru/max(c.ru(), 1e-9))
		}
	}
	fmt.Fprintf(out, "  in total: %.0f RU, %s\n", ru, perExecution(ru, ended))
	fmt.Fprintf(out, "  %s names no orchestration: queue queries, client calls, the relay,\n", unnamedRequests)
	fmt.Fprintln(out, "  and locks taken on messages that name none (events, a child's result)")
}

func callsWord(n uint64) string {
	if n == 1 {
		return "call"
	}
	return "calls"
}

// headline is an orchestration's total and, for a named one, its cost per
// ended execution.
func (c orchestrationCost) headline() string {
	if c.name == unnamedRequests {
		return fmt.Sprintf("%s: %.0f RU in %d %s", c.name, c.ru(), c.calls(), callsWord(c.calls()))
	}
	return fmt.Sprintf("%s: %.0f RU in %d %s, %s", c.name, c.ru(), c.calls(), callsWord(c.calls()), perExecution(c.ru(), c.ended))
}

func perExecution(ru, ended float64) string {
	if ended == 0 {
		return "no execution ended"
	}
	return fmt.Sprintf("%.1f RU per ended execution (%.0f)", ru/ended, ended)
}

func printLatencyRows(out io.Writer, names string, rows []latencyRow) {
	fmt.Fprintf(out, "  %-9s %-32s %8s %10s %10s\n", "", names, "count", "p50", "p99")
	for _, r := range rows {
		fmt.Fprintf(out, "  %-9s %-32s %8d %10s %10s\n", r.kind, fitWidth(r.name, 32), r.count, formatLatency(r.p50), formatLatency(r.p99))
	}
}

// formatLatency keeps about three significant digits at any scale.
func formatLatency(d time.Duration) string {
	switch {
	case d >= time.Second:
		return threeDigits(d.Seconds()) + "s"
	case d >= time.Millisecond:
		return threeDigits(float64(d)/float64(time.Millisecond)) + "ms"
	}
	return threeDigits(float64(d)/float64(time.Microsecond)) + "µs"
}

func threeDigits(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
