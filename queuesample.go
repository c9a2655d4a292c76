package cdb

import (
	"context"
	"time"
)

// A queue sample is the provider's gauges read once, on demand: what `cdb
// top` shows an operator, from the same queries the gauge sampler sends
// (provider_telemetry.go), so the two never disagree on what a depth or an
// age is.

// Backlog is how much waits somewhere, and how long the oldest of it has.
type Backlog struct {
	Count uint64
	// OldestAge is the oldest's age at the sample's Time; 0 when Count is
	// 0 (and for one whose time is ahead of the service's clock).
	OldestAge time.Duration
}

// QueueSample is one look at the container's queues. Counts are taken per
// partition key range and summed (the gateway refuses aggregates across
// partitions): 5 queries per range, 6 with a since; nothing is read twice.
type QueueSample struct {
	// Time is the service's time when the sample began; the ages are
	// measured to it.
	Time time.Time
	// Orchestrator and Worker are each queue's items a fetch could take
	// now: visible (due) and unlocked. Not what waits by design (timers,
	// delayed retries, parked messages), unlike GetQueueDepths. The age is
	// since the oldest became visible. The cdb.queue.depth and
	// cdb.queue.oldest_age gauges. One COUNT and MIN query per queue and
	// range.
	Orchestrator, Worker Backlog
	// Outbox is the outbox documents stored: commits whose effects on
	// other partitions are not delivered yet, or delivered and not yet
	// deleted by their relay's next pass; the age is since the oldest's
	// commit. The cdb.outbox.* gauges. One query per range.
	Outbox Backlog
	// Parked and Poison are GetHeldMessages' held orchestrator messages:
	// parked until their instance starts, and set aside as poison for an
	// operator; the age is since the oldest was enqueued. The
	// cdb.messages.held* gauges. One query per kind and range.
	Parked, Poison Backlog
	// Since is the since SampleQueues was given; Completed counts the
	// instances whose current execution ended Completed or Failed (a
	// cancellation fails) at or after it, by the provider's clock at the
	// commit. A continue-as-new is no end: the instance goes on. An
	// instance deleted or restarted since is not counted, nor one whose
	// commit was on its way when the sample was taken (the next sample
	// since this one's Time counts it). Zero Since: 0, and no query; else
	// one COUNT query per range.
	Since     time.Time
	Completed uint64
	// Requests and RequestCharge are what the sample cost: its query pages
	// (a retried request counts once) and their RU.
	Requests      int
	RequestCharge float64
}

// SampleQueues reads the queue sample: each queue's depth and oldest age,
// the outbox backlog, the held messages and, with a non-zero since, the
// instances that ended since then. It costs 5 queries per partition key
// range, 6 with a since (QueueSample says which), each a COUNT (and MIN)
// the range's index answers; the sample's Requests and RequestCharge say
// what it cost. A Cosmos DB-specific report beside the contract's metrics,
// as GetHeldMessages is.
func (p *CosmosProvider) SampleQueues(ctx context.Context, since time.Time) (QueueSample, error) {
	const op = "SampleQueues"
	s := QueueSample{Time: p.now(), Since: since}
	var cost queryCost
	for _, part := range p.queueSampleParts() {
		if err := part.fill(ctx, &s, &cost); err != nil {
			return QueueSample{}, asOperation(op, err)
		}
	}
	if !since.IsZero() {
		n, err := p.completedSince(ctx, since, &cost)
		if err != nil {
			return QueueSample{}, asOperation(op, err)
		}
		s.Completed = n
	}
	s.Requests, s.RequestCharge = cost.requests, cost.charge
	return s, nil
}

// queueSamplePart fills one part of a sample, and records that part's
// gauges: the gauge sampler takes each part on its own, so one that fails
// costs the others nothing.
type queueSamplePart struct {
	what   string
	fill   func(ctx context.Context, s *QueueSample, cost *queryCost) error
	record func(ctx context.Context, s QueueSample)
}

func (p *CosmosProvider) queueSampleParts() []queueSamplePart {
	return []queueSamplePart{
		{"queues", p.sampleQueueBacklogs, p.recordQueueGauges},
		{"outbox", p.sampleOutboxBacklog, p.recordOutboxGauges},
		{"held messages", p.sampleHeldBacklogs, p.recordHeldGauges},
	}
}

// sampleQueueBacklogs fills each queue's depth and oldest age: one query
// per queue and partition key range.
func (p *CosmosProvider) sampleQueueBacklogs(ctx context.Context, s *QueueSample, cost *queryCost) error {
	for _, q := range []struct {
		into    *Backlog
		docType string
	}{{&s.Orchestrator, docMessage}, {&s.Worker, docWork}} {
		n, oldest, err := p.queueBacklog(ctx, q.docType, cost)
		if err != nil {
			return err
		}
		*q.into = Backlog{Count: n, OldestAge: ageOfMs(s.Time, oldest)}
	}
	return nil
}

// sampleOutboxBacklog fills the outbox backlog and its oldest's age: one
// query per partition key range.
func (p *CosmosProvider) sampleOutboxBacklog(ctx context.Context, s *QueueSample, cost *queryCost) error {
	n, oldest, err := p.outboxBacklog(ctx, cost)
	if err != nil {
		return err
	}
	s.Outbox = Backlog{Count: n, OldestAge: ageOfMs(s.Time, oldest)}
	return nil
}

// sampleHeldBacklogs fills the parked and the poison messages and their
// oldest's age: one query per kind and partition key range.
func (p *CosmosProvider) sampleHeldBacklogs(ctx context.Context, s *QueueSample, cost *queryCost) error {
	h, err := p.heldMessages(ctx, cost)
	if err != nil {
		return err
	}
	s.Parked = Backlog{Count: h.Parked, OldestAge: ageOf(s.Time, h.OldestParked)}
	s.Poison = Backlog{Count: h.Poison, OldestAge: ageOf(s.Time, h.OldestPoison)}
	return nil
}

// completedSince counts the named, undeleted instances whose current
// execution ended Completed or Failed at or after since: one COUNT query per
// partition key range.
func (p *CosmosProvider) completedSince(ctx context.Context, since time.Time, cost *queryCost) (uint64, error) {
	return p.countPerRangeCosting(ctx,
		"c.type = @inst AND IS_DEFINED(c.name) AND NOT IS_DEFINED(c.deleting) AND c.completedAt >= @since AND (c.status = @completed OR c.status = @failed)",
		[]QueryParameter{{Name: "@inst", Value: docInstance}, {Name: "@since", Value: since.UnixMilli()},
			{Name: "@completed", Value: StatusCompleted}, {Name: "@failed", Value: StatusFailed}}, cost)
}

// ageOfMs is how long before at a time in ms was; 0 for none, and for one
// ahead of at.
func ageOfMs(at time.Time, ms *int64) time.Duration {
	if ms == nil {
		return 0
	}
	return max(at.Sub(time.UnixMilli(*ms)), 0)
}

// ageOf is how long before at t was; 0 for none, and for one ahead of at.
func ageOf(at time.Time, t *time.Time) time.Duration {
	if t == nil {
		return 0
	}
	return max(at.Sub(*t), 0)
}

// queryCost adds up what per-range queries cost: their pages and RU.
type queryCost struct {
	requests int
	charge   float64
}

// add counts byRange's pages and charge; a nil cost counts nothing.
func (c *queryCost) add(byRange map[string]QueryResult) {
	if c == nil {
		return
	}
	for _, res := range byRange {
		c.requests += res.Pages
		c.charge += res.RequestCharge
	}
}
