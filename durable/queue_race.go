package durable

import (
	"log/slog"
	"maps"

	"github.com/duroxide-go/cdb"
)

// duroxide 0.1.31's queue-race rules, for the executions whose start is
// stamped 0.1.31 or later; earlier executions (this runtime stamps its own
// 0.1.29) keep the rules they were recorded under and replay identically.
//
//   - A dropped Select loser that waits for a queue message or an event
//     stops taking a place in matching the moment it is dropped, not when
//     its cancellation breadcrumb is applied at the end of the turn, so a
//     message that arrives later in the same turn goes to the next
//     subscription.
//   - Continue-as-new carries exactly the arrivals the code did not read:
//     an arrival matched to a subscription the code never awaited (a held
//     dequeue) is carried too, wherever it is in the queue.

// queueRaceRulesSince is the first duroxide version whose executions
// follow the queue-race rules.
func queueRaceRulesSince() cdb.SemanticVersion { return cdb.NewSemanticVersion(0, 1, 31) }

// queueRaceRulesFor reports whether an execution whose start carries stamp
// follows the queue-race rules; a stamp that does not parse keeps the
// legacy ones.
func queueRaceRulesFor(stamp string) bool {
	v, err := cdb.ParseSemanticVersion(stamp)
	return err == nil && !v.Less(queueRaceRulesSince())
}

// cancelAtDrop takes a dropped wait out of matching at once, under the
// queue-race rules; a loser not bound to its event yet is taken out when
// it is bound.
func (c *OrchestrationContext) cancelAtDrop(f *Future) {
	if !c.queueRaceRules || (f.kind != futureQueue && f.kind != futureExternal) {
		return
	}
	id, bound := c.bindings[f.token]
	if !bound {
		c.cancelOnBind[f.token] = f.kind
		return
	}
	c.cancelWait(f.kind, id)
}

// cancelWait takes the wait bound to scheduleID out of matching.
func (c *OrchestrationContext) cancelWait(kind futureKind, scheduleID uint64) {
	switch kind {
	case futureQueue:
		c.queue.cancel(scheduleID)
	case futureExternal:
		c.external.cancel(scheduleID)
	}
}

// unreadQueueMessages are the queue messages to carry into the next
// execution under the queue-race rules: every arrival, in arrival order,
// but those matched to a subscription whose value the code read. Matching
// is FIFO per queue over the subscriptions not cancelled (dropped or
// ended), in binding order. At most cdb.MaxCarryForwardEvents are carried,
// the rest dropped with a warning.
func unreadQueueMessages(history []cdb.Event, cancelled, read map[uint64]bool, log *slog.Logger, instance string) []cdb.CarryForwardEvent {
	ended := map[uint64]bool{}
	maps.Copy(ended, cancelled)
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.QueueSubscriptionCancelled); ok && ev.SourceEventID != nil {
			ended[*ev.SourceEventID] = true
		}
	}
	active := map[string][]uint64{} // per queue, in binding order
	for _, ev := range history {
		if k, ok := ev.Kind.(cdb.QueueSubscribed); ok && !ended[ev.EventID] {
			active[k.Name] = append(active[k.Name], ev.EventID)
		}
	}
	position := map[string]int{}
	var out []cdb.CarryForwardEvent
	for _, ev := range history {
		k, ok := ev.Kind.(cdb.QueueEventDelivered)
		if !ok {
			continue
		}
		n := position[k.Name]
		position[k.Name]++
		if subs := active[k.Name]; n < len(subs) && read[subs[n]] {
			continue
		}
		out = append(out, cdb.CarryForwardEvent{Name: k.Name, Data: k.Data})
	}
	return capCarryForward(out, instance, log)
}
