package durable

import (
	"fmt"
	"slices"

	"github.com/duroxide-go/cdb"
)

// droppedFutureReason is the reason recorded for Select losers.
const droppedFutureReason = "dropped_future"

// droppedSchedules are the scheduling event ids of this turn's Select
// losers, by kind, each kind in id order.
type droppedSchedules struct {
	activities []uint64
	children   []uint64
	childIDs   map[uint64]string // scheduling event id → child id as scheduled
	external   []uint64
	queue      []uint64
	reasons    map[uint64]string // scheduling event id → breadcrumb reason
}

// collectDropped turns the Select losers into cancellation breadcrumbs and
// side effects (duroxide's collect_cancelled_from_context). When replaying,
// every loser the persisted history recorded must be dropped again, or the
// code has changed: nondeterminism.
func (r *replayRun) collectDropped() *turnResult {
	dropped := r.droppedSchedules()
	if problem := r.engine.droppedMismatch(dropped); problem != "" {
		res := failed(nondeterminism(problem))
		return &res
	}
	r.engine.recordDropped(dropped)
	return nil
}

func (r *replayRun) droppedSchedules() droppedSchedules {
	d := droppedSchedules{childIDs: map[uint64]string{}, reasons: map[uint64]string{}}
	for _, f := range r.octx.takeDropped() {
		id, bound := r.octx.bindings[f.token]
		if !bound {
			continue
		}
		d.reasons[id] = f.reason
		switch f.kind {
		case futureActivity:
			d.activities = append(d.activities, id)
		case futureSubOrchestration:
			d.children = append(d.children, id)
			d.childIDs[id] = r.octx.childInstances[f.token]
		case futureExternal:
			d.external = append(d.external, id)
		case futureQueue:
			d.queue = append(d.queue, id)
		}
	}
	// Breadcrumbs are written in id order within each kind (duroxide
	// 0.1.32), not in the order the code happened to drop the losers. Only
	// new events depend on it: replay checks recorded losers as a set.
	for _, ids := range [][]uint64{d.activities, d.children, d.external, d.queue} {
		slices.Sort(ids)
	}
	return d
}

// droppedMismatch compares, kind by kind, the losers recorded in the
// persisted history with those the code dropped this time among the
// persisted schedules. A recorded loser the code no longer drops is
// nondeterminism; new drops are allowed (a loser may be dropped turns
// after it was scheduled).
func (e *replayEngine) droppedMismatch(d droppedSchedules) string {
	if e.persistedLen == 0 {
		return ""
	}
	persisted := e.baseline[:e.persistedLen]
	checks := []struct {
		what     string
		ids      []uint64
		schedule func(cdb.EventKind) bool
		cancel   func(cdb.EventKind) (string, bool)
	}{
		{"activities", d.activities, isKind[cdb.ActivityScheduled], activityCancelReason},
		{"sub-orchestrations", d.children, isKind[cdb.SubOrchestrationScheduled], childCancelReason},
		{"external waits", d.external, isKind[cdb.ExternalSubscribed], externalCancelReason},
		{"queue waits", d.queue, isKind[cdb.QueueSubscribed], queueCancelReason},
	}
	for _, c := range checks {
		recorded := droppedInHistory(persisted, c.cancel)
		for _, id := range recorded {
			if !slices.Contains(c.ids, id) || !isScheduledAs(persisted, id, c.schedule) {
				return fmt.Sprintf("cancellation mismatch (%s): history dropped the future of event %d, the code does not", c.what, id)
			}
		}
	}
	return ""
}

// droppedInHistory lists the schedules a history cancelled as Select losers.
func droppedInHistory(history []cdb.Event, cancel func(cdb.EventKind) (string, bool)) []uint64 {
	var ids []uint64
	for _, ev := range history {
		if reason, ok := cancel(ev.Kind); ok && reason == droppedFutureReason && ev.SourceEventID != nil {
			ids = append(ids, *ev.SourceEventID)
		}
	}
	return ids
}

func isScheduledAs(history []cdb.Event, id uint64, schedule func(cdb.EventKind) bool) bool {
	for _, ev := range history {
		if ev.EventID == id {
			return schedule(ev.Kind)
		}
	}
	return false
}

func isKind[T cdb.EventKind](k cdb.EventKind) bool {
	_, ok := k.(T)
	return ok
}

// The reasons of the four cancellation events, for droppedMismatch.

func activityCancelReason(k cdb.EventKind) (string, bool) {
	v, ok := k.(cdb.ActivityCancelRequested)
	return v.Reason, ok
}

func childCancelReason(k cdb.EventKind) (string, bool) {
	v, ok := k.(cdb.SubOrchestrationCancelRequested)
	return v.Reason, ok
}

func externalCancelReason(k cdb.EventKind) (string, bool) {
	v, ok := k.(cdb.ExternalSubscribedCancelled)
	return v.Reason, ok
}

func queueCancelReason(k cdb.EventKind) (string, bool) {
	v, ok := k.(cdb.QueueSubscriptionCancelled)
	return v.Reason, ok
}

// recordDropped writes a breadcrumb for each loser not cancelled before, and
// queues the side effects: lock stealing for activities, CancelInstance for
// children. Subscriptions need no side effect.
func (e *replayEngine) recordDropped(d droppedSchedules) {
	already := cancelledSchedules(e.history())
	breadcrumb := func(id uint64, kind cdb.EventKind) bool {
		if already[id] {
			return false
		}
		already[id] = true
		e.appendEvent(ptr(id), kind)
		return true
	}
	for _, id := range d.activities {
		if breadcrumb(id, cdb.ActivityCancelRequested{Reason: d.reasons[id]}) {
			e.droppedActivities = append(e.droppedActivities, id)
		}
	}
	for _, id := range d.children {
		if breadcrumb(id, cdb.SubOrchestrationCancelRequested{Reason: d.reasons[id]}) {
			e.droppedChildren = append(e.droppedChildren, droppedChild{instance: d.childIDs[id], reason: d.reasons[id]})
		}
	}
	for _, id := range d.external {
		breadcrumb(id, cdb.ExternalSubscribedCancelled{Reason: d.reasons[id]})
	}
	for _, id := range d.queue {
		breadcrumb(id, cdb.QueueSubscriptionCancelled{Reason: d.reasons[id]})
	}
}

// droppedChild is a child to cancel, as scheduled, with why.
type droppedChild struct {
	instance string
	reason   string // the breadcrumb's reason
}

// childCancelMessage is the reason a cancelled child is told, by why its
// parent cancelled it.
func childCancelMessage(breadcrumb string) string {
	if breadcrumb == cancelRequestedReason {
		return parentCancelledReason
	}
	return "parent dropped sub-orchestration future"
}

// cancelledSchedules are the schedules some cancellation event refers to.
func cancelledSchedules(history []cdb.Event) map[uint64]bool {
	out := map[uint64]bool{}
	for _, ev := range history {
		switch ev.Kind.(type) {
		case cdb.ActivityCancelRequested, cdb.SubOrchestrationCancelRequested,
			cdb.ExternalSubscribedCancelled, cdb.QueueSubscriptionCancelled:
			if ev.SourceEventID != nil {
				out[*ev.SourceEventID] = true
			}
		}
	}
	return out
}
