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
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.sampleGauges(ctx, min(interval, maxGaugeSampleTime))
		}
	}
}

// sampleGauges takes one sample within limit: a part that fails is logged
// and skipped until the next interval, never retried here.
func (p *CosmosProvider) sampleGauges(parent context.Context, limit time.Duration) {
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	for _, part := range []struct {
		what   string
		sample func(context.Context) error
	}{
		{"queues", p.sampleQueues},
		{"outbox", p.sampleOutbox},
		{"held messages", p.sampleHeldMessages},
	} {
		if err := part.sample(ctx); err != nil {
			if parent.Err() != nil {
				return // Close: no failure to report
			}
			p.log.Debug("cdb: a gauge sample failed; skipped until the next interval", "gauges", part.what, "error", err)
		}
	}
	p.sampleLeaseSlots(ctx)
}

// sampleQueues records each queue's depth and the age of its oldest item:
// one query per queue and partition key range.
func (p *CosmosProvider) sampleQueues(ctx context.Context) error {
	for _, q := range []struct{ name, docType string }{{queueOrchestrator, docMessage}, {queueWorker, docWork}} {
		n, oldest, err := p.queueBacklog(ctx, q.docType)
		if err != nil {
			return err
		}
		attr := slog.String(attrQueue, q.name)
		p.tel.queueDepth.Record(ctx, float64(n), attr)
		p.tel.queueOldestAge.Record(ctx, p.ageOfMs(oldest), attr)
	}
	return nil
}

// sampleOutbox records the outbox backlog and its oldest's age: one query
// per partition key range.
func (p *CosmosProvider) sampleOutbox(ctx context.Context) error {
	n, oldest, err := p.outboxBacklog(ctx)
	if err != nil {
		return err
	}
	p.tel.outboxBacklog.Record(ctx, float64(n))
	p.tel.outboxOldest.Record(ctx, p.ageOfMs(oldest))
	return nil
}

// sampleHeldMessages records the parked and the poison messages and their
// oldest's age: GetHeldMessages, one query per kind and partition key range.
func (p *CosmosProvider) sampleHeldMessages(ctx context.Context) error {
	h, err := p.GetHeldMessages(ctx)
	if err != nil {
		return err
	}
	for _, k := range []struct {
		kind   string
		n      uint64
		oldest *time.Time
	}{{heldKindParked, h.Parked, h.OldestParked}, {heldKindPoison, h.Poison, h.OldestPoison}} {
		attr := slog.String(attrHeldKind, k.kind)
		p.tel.held.Record(ctx, float64(k.n), attr)
		age := 0.0
		if k.oldest != nil {
			age = max(p.now().Sub(*k.oldest).Seconds(), 0)
		}
		p.tel.heldOldestAge.Record(ctx, age, attr)
	}
	return nil
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

// ageOfMs is the age in seconds, by the service's time, of a time in ms;
// 0 for none, and for one a clock put ahead.
func (p *CosmosProvider) ageOfMs(at *int64) float64 {
	if at == nil {
		return 0
	}
	return max(float64(p.nowMs()-*at)/1000, 0)
}

// orchestrationLockLost counts an instance lock this process lost, once
// however many of its holder's calls learn of it (a renewal, then the
// ack, then the abandon). The caller holds lock.mu, or is the fetch that
// took the lock and has not handed it over yet.
func (p *CosmosProvider) orchestrationLockLost(ctx context.Context, lock *orchestrationLock) {
	if lock.lost {
		return
	}
	lock.lost = true
	p.tel.lockLost(ctx, lockKindOrchestration)
}
