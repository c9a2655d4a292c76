package cdb

import (
	"context"
	"time"
)

// QueueWaits is what one look at the container finds its queues waiting
// for, at the provider's time Now: work a fetch could take now, work a
// process holds locked, effects not delivered yet, and when the next item
// that is not due yet becomes visible. durabletest's auto-skip reads it to
// tell when every process on a test account is idle, and how far it may
// move the clock.
type QueueWaits struct {
	// Now is the provider's time (ServiceTime) the look judged by.
	Now time.Time
	// Ready counts the orchestrator and worker items a fetch could take
	// now: due (or immediate) and unlocked.
	Ready uint64
	// Locked counts the instance documents and queue items locked past
	// Now: a turn or an activity running, an item locked ahead for one,
	// or a lock a crashed process left to expire. Session leases are not
	// counted: an owner holds its session while it waits for work.
	Locked uint64
	// Outbox counts the outbox documents stored: effects on other
	// partitions not delivered yet, or delivered and not deleted yet.
	Outbox uint64
	// NextDue is when the earliest unlocked queue item not due yet
	// becomes visible: a durable timer, a retry's or an abandon's delay, a
	// parked message's deadline. Nil when there is none.
	NextDue *time.Time
}

// Idle says no process has anything to do until NextDue, or until
// something new is written: nothing is ready, locked or undelivered.
func (w QueueWaits) Idle() bool { return w.Ready == 0 && w.Locked == 0 && w.Outbox == 0 }

// queueTypes are the document types of the two queues; lockingTypes
// those a lock is written on (a turn locks its instance document too).
func queueTypes() []string   { return []string{docMessage, docWork} }
func lockingTypes() []string { return []string{docInstance, docMessage, docWork} }

// Conditions of QueueWaits' queries, on @now (ms).
const (
	readyCondition  = "ARRAY_CONTAINS(@queues, c.type) AND (c.visibleAt <= @now OR c.seqVisible = true) AND c.lockedUntil <= @now"
	lockedCondition = "ARRAY_CONTAINS(@locking, c.type) AND c.lockedUntil > @now"
	notDueCondition = "ARRAY_CONTAINS(@queues, c.type) AND c.visibleAt > @now AND (NOT IS_DEFINED(c.seqVisible) OR c.seqVisible = false) AND c.lockedUntil <= @now"
	outboxCondition = "c.type = @outbox"
)

// QueueWaits looks at the queues: 4 queries per partition key range, each
// a COUNT (one with a MIN of visibleAt) the range's index answers, summed
// here. The queries run one after another, so a look taken while
// processes work may see a state that never was (a message delivered
// between two of them); a caller that must not be fooled looks again. A
// Cosmos DB-specific report beside the contract's metrics, as
// GetHeldMessages is.
func (p *CosmosProvider) QueueWaits(ctx context.Context) (QueueWaits, error) {
	const op = "QueueWaits"
	w := QueueWaits{Now: p.now()}
	params := []QueryParameter{
		{Name: "@now", Value: w.Now.UnixMilli()},
		{Name: "@queues", Value: queueTypes()},
		{Name: "@locking", Value: lockingTypes()},
		{Name: "@outbox", Value: docOutbox},
	}
	for _, count := range []struct {
		into  *uint64
		where string
	}{{&w.Ready, readyCondition}, {&w.Locked, lockedCondition}, {&w.Outbox, outboxCondition}} {
		n, err := p.countPerRange(ctx, count.where, usedParams(count.where, params))
		if err != nil {
			return QueueWaits{}, asOperation(op, err)
		}
		*count.into = n
	}
	_, next, err := p.countAndMinPerRange(ctx, "c.visibleAt", notDueCondition, usedParams(notDueCondition, params), nil)
	if err != nil {
		return QueueWaits{}, asOperation(op, err)
	}
	if next != nil {
		due := time.UnixMilli(*next)
		w.NextDue = &due
	}
	return w, nil
}
