package cdb

import (
	"context"
	"log/slog"
	"sort"
	"time"
)

// The provider's own metrics (ARCHITECTURE.md, Telemetry): what its
// client's points cannot show. How much waits in the queues and the outbox
// and since when, what is held aside, which locks were lost, what became
// poison. They go to the Meter of the client the provider uses (its
// ClientOptions.Telemetry), so one setting covers the requests and what
// they were for.
//
// Gauges that need queries are sampled by one goroutine every
// Config.GaugeInterval, never on a scrape, and only when a Meter records
// somewhere: a provider without one sends no request for them. Counters are
// recorded where the provider learns of the event anyway, at no request.
const (
	metricQueueDepth      = "cdb.queue.depth"
	metricQueueOldestAge  = "cdb.queue.oldest_age"
	metricOutboxBacklog   = "cdb.outbox.backlog"
	metricOutboxOldestAge = "cdb.outbox.oldest_age"
	metricOutboxDelivered = "cdb.outbox.delivered"
	metricHeld            = "cdb.messages.held"
	metricHeldOldestAge   = "cdb.messages.held.oldest_age"
	metricLeaseSlots      = "cdb.process_lease.slots"
	metricLocksLost       = "cdb.locks.lost"
	metricPoison          = "cdb.poison"

	attrQueue             = "cdb.queue"                  // orchestrator | worker
	attrHeldKind          = "cdb.held.kind"              // parked | poison
	attrLockKind          = "cdb.lock.kind"              // orchestration | work_item | session
	attrLeaseKey          = "cdb.lease.key"              // a process lease key, e.g. "orchestrator/*"
	attrOrchestrationName = "durable.orchestration.name" // on the context of an orchestration's requests

	lockKindOrchestration = "orchestration"
	lockKindWorkItem      = "work_item"
	lockKindSession       = "session"

	heldKindParked = "parked"
	heldKindPoison = "poison"
)

// defaultGaugeInterval is how often the gauges are sampled unless
// Config.GaugeInterval says otherwise: duroxide's gauge_poll_interval.
const defaultGaugeInterval = time.Minute

// maxGaugeSampleTime bounds one sample's requests, so a slow account never
// piles samples up: a sample also ends by the next interval.
const maxGaugeSampleTime = 30 * time.Second

// providerTelemetry is the provider's instruments, made once in
// NewProvider on its client's Meter; with no Meter they are no-ops and on
// is false.
type providerTelemetry struct {
	on bool // a Meter records somewhere: sample the gauges, put attributes on contexts

	queueDepth, queueOldestAge   Gauge
	outboxBacklog, outboxOldest  Gauge
	held, heldOldestAge          Gauge
	leaseSlots                   Gauge
	locksLost, poison, delivered Counter
}

func newProviderTelemetry(client clientTelemetry) providerTelemetry {
	m := client.meter
	if m == nil {
		m = noopMeter{}
	}
	return providerTelemetry{
		on: client.metrics,
		queueDepth: m.Gauge(metricQueueDepth, "{message}",
			"Queue items a fetch could take now: visible and unlocked (sampled every GaugeInterval)."),
		queueOldestAge: m.Gauge(metricQueueOldestAge, "s",
			"How long the oldest item a fetch could take now has been visible; 0 when there is none (sampled)."),
		outboxBacklog: m.Gauge(metricOutboxBacklog, "{outbox}",
			"Outbox documents stored: commits whose effects on other partitions are not yet delivered, or not yet cleaned up (sampled)."),
		outboxOldest: m.Gauge(metricOutboxOldestAge, "s",
			"Age of the oldest outbox document since its commit; 0 when there is none (sampled)."),
		held: m.Gauge(metricHeld, "{message}",
			"Orchestrator messages held out of the queue: parked until their instance starts, or set aside as poison (sampled)."),
		heldOldestAge: m.Gauge(metricHeldOldestAge, "s",
			"Age of the oldest held message of a kind since it was enqueued; 0 when there is none (sampled)."),
		leaseSlots: m.Gauge(metricLeaseSlots, "{slot}",
			"Dispatch slots this process owns per lease key, as of its last process lease renewal."),
		locksLost: m.Counter(metricLocksLost, "{lock}",
			"Locks this process held that ended without its ack or abandon: expired, or taken by another process."),
		poison: m.Counter(metricPoison, "{message}",
			"Queue items the provider set aside as poison because they never decoded."),
		delivered: m.Counter(metricOutboxDelivered, "{outbox}",
			"Outbox documents this process's relay delivered in full."),
	}
}

// lockLost counts a lock of kind this process lost.
func (t *providerTelemetry) lockLost(ctx context.Context, kind string) {
	t.locksLost.Add(ctx, 1, slog.String(attrLockKind, kind))
}

// poisoned counts n items of queue set aside as poison.
func (t *providerTelemetry) poisoned(ctx context.Context, queue string, n int) {
	if n > 0 {
		t.poison.Add(ctx, float64(n), slog.String(attrQueue, queue))
	}
}

// outboxDelivered counts one outbox delivered in full.
func (t *providerTelemetry) outboxDelivered(ctx context.Context) {
	t.delivered.Add(ctx, 1)
}

// withOrchestrationName puts an orchestration's name on the context of the
// requests made for it, so the client's request charge can be summed by
// name. Names are few (a program's orchestrations), ids never go there.
func (t *providerTelemetry) withOrchestrationName(ctx context.Context, name string) context.Context {
	if !t.on || name == "" {
		return ctx
	}
	for _, a := range metricAttributes(ctx) {
		if a.Key == attrOrchestrationName {
			return ctx // the caller (the runtime) named it already
		}
	}
	return ContextWithMetricAttributes(ctx, slog.String(attrOrchestrationName, name))
}

// runGauges samples the gauges every interval until ctx ends.
func (p *CosmosProvider) runGauges(ctx context.Context, interval time.Duration) {
	runEvery(ctx, interval, func() { p.sampleGauges(ctx, min(interval, maxGaugeSampleTime)) })
}

// sampleGauges takes one sample within limit, with SampleQueues' parts: a
// part that fails is logged and skipped until the next interval, never
// retried here, and costs the other parts nothing.
func (p *CosmosProvider) sampleGauges(parent context.Context, limit time.Duration) {
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	for _, part := range p.queueSampleParts() {
		s := QueueSample{Time: p.now()}
		if err := part.fill(ctx, &s, nil); err != nil {
			if parent.Err() != nil {
				return // Close: no failure to report
			}
			p.log.Debug("cdb: a gauge sample failed; skipped until the next interval", "gauges", part.what, "error", err)
			continue
		}
		part.record(ctx, s)
	}
	p.sampleLeaseSlots(ctx)
}

// recordQueueGauges records each queue's depth and the age of its oldest
// item.
func (p *CosmosProvider) recordQueueGauges(ctx context.Context, s QueueSample) {
	for _, q := range []struct {
		name    string
		backlog Backlog
	}{{queueOrchestrator, s.Orchestrator}, {queueWorker, s.Worker}} {
		attr := slog.String(attrQueue, q.name)
		p.tel.queueDepth.Record(ctx, float64(q.backlog.Count), attr)
		p.tel.queueOldestAge.Record(ctx, q.backlog.OldestAge.Seconds(), attr)
	}
}

// recordOutboxGauges records the outbox backlog and its oldest's age.
func (p *CosmosProvider) recordOutboxGauges(ctx context.Context, s QueueSample) {
	p.tel.outboxBacklog.Record(ctx, float64(s.Outbox.Count))
	p.tel.outboxOldest.Record(ctx, s.Outbox.OldestAge.Seconds())
}

// recordHeldGauges records the parked and the poison messages and their
// oldest's age.
func (p *CosmosProvider) recordHeldGauges(ctx context.Context, s QueueSample) {
	for _, k := range []struct {
		kind    string
		backlog Backlog
	}{{heldKindParked, s.Parked}, {heldKindPoison, s.Poison}} {
		attr := slog.String(attrHeldKind, k.kind)
		p.tel.held.Record(ctx, float64(k.backlog.Count), attr)
		p.tel.heldOldestAge.Record(ctx, k.backlog.OldestAge.Seconds(), attr)
	}
}

// sampleLeaseSlots records the slots this process owns per lease key, from
// its last process lease renewal: no request. Without process leases it
// records nothing.
func (p *CosmosProvider) sampleLeaseSlots(ctx context.Context) {
	state, err := p.ProcessLeases()
	if err != nil {
		return
	}
	keys := make([]string, 0, len(state.Shares))
	for key := range state.Shares {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		slots := len(state.Shares[key])
		if state.Shares[key] == nil {
			slots = dispatchSlots // nil: every slot
		}
		p.tel.leaseSlots.Record(ctx, float64(slots), slog.String(attrLeaseKey, key))
	}
}
