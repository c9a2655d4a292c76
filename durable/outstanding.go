package durable

import (
	"log/slog"

	"github.com/duroxide-go/cdb"
)

// outstanding lists what an execution still waits for when it ends:
// scheduled work neither completed nor cancelled, and subscriptions neither
// satisfied nor cancelled (duroxide's get_outstanding_schedule_ids).
type outstanding struct {
	activities []uint64
	children   []string // child ids as scheduled
	external   []uint64
	queue      []uint64
}

func outstandingSchedules(history []cdb.Event) outstanding {
	var out outstanding
	resolved := map[uint64]bool{} // completed, failed or cancelled schedules
	var activities, children []uint64
	childIDs := map[uint64]string{}
	waiting := map[string][]uint64{} // external subscriptions per name, oldest first
	var externalSubs []uint64
	var queueSubs []queueSub
	queueArrivals := map[string]int{}
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.ActivityScheduled:
			activities = append(activities, ev.EventID)
		case cdb.SubOrchestrationScheduled:
			children = append(children, ev.EventID)
			childIDs[ev.EventID] = k.Instance
		case cdb.ExternalSubscribed:
			externalSubs = append(externalSubs, ev.EventID)
			waiting[k.Name] = append(waiting[k.Name], ev.EventID)
		case cdb.ExternalEvent:
			// An event satisfies the oldest subscription waiting for it.
			if subs := waiting[k.Name]; len(subs) > 0 {
				resolved[subs[0]] = true
				waiting[k.Name] = subs[1:]
			}
		case cdb.ExternalSubscribedCancelled:
			if ev.SourceEventID != nil {
				resolved[*ev.SourceEventID] = true
				removeWaiting(waiting, *ev.SourceEventID)
			}
		case cdb.QueueSubscribed:
			queueSubs = append(queueSubs, queueSub{scheduleID: ev.EventID, name: k.Name})
		case cdb.QueueEventDelivered:
			queueArrivals[k.Name]++
		case cdb.ActivityCompleted, cdb.ActivityFailed, cdb.ActivityCancelRequested,
			cdb.SubOrchestrationCompleted, cdb.SubOrchestrationFailed, cdb.SubOrchestrationCancelRequested,
			cdb.QueueSubscriptionCancelled:
			if ev.SourceEventID != nil {
				resolved[*ev.SourceEventID] = true
			}
		}
	}
	for _, id := range activities {
		if !resolved[id] {
			out.activities = append(out.activities, id)
		}
	}
	for _, id := range children {
		if !resolved[id] {
			out.children = append(out.children, childIDs[id])
		}
	}
	for _, id := range externalSubs {
		if !resolved[id] {
			out.external = append(out.external, id)
		}
	}
	// Queue subscriptions take arrivals per name in order; cancelled ones
	// take none.
	consumed := map[string]int{}
	for _, sub := range queueSubs {
		if resolved[sub.scheduleID] {
			continue
		}
		if consumed[sub.name] < queueArrivals[sub.name] {
			consumed[sub.name]++
			continue
		}
		out.queue = append(out.queue, sub.scheduleID)
	}
	return out
}

func removeWaiting(waiting map[string][]uint64, id uint64) {
	for name, subs := range waiting {
		for i, sub := range subs {
			if sub == id {
				waiting[name] = append(subs[:i:i], subs[i+1:]...)
				return
			}
		}
	}
}

// unmatchedQueueMessages are the queue messages no active subscription
// took, in arrival order, to carry into the next execution; at most
// cdb.MaxCarryForwardEvents, the rest are dropped with a warning.
func unmatchedQueueMessages(history []cdb.Event, log *slog.Logger, instance string) []cdb.CarryForwardEvent {
	cancelled := map[uint64]bool{}
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.QueueSubscriptionCancelled); ok && ev.SourceEventID != nil {
			cancelled[*ev.SourceEventID] = true
		}
	}
	active := map[string]int{}
	for _, ev := range history {
		if k, ok := ev.Kind.(cdb.QueueSubscribed); ok && !cancelled[ev.EventID] {
			active[k.Name]++
		}
	}
	consumed := map[string]int{}
	var out []cdb.CarryForwardEvent
	for _, ev := range history {
		k, ok := ev.Kind.(cdb.QueueEventDelivered)
		if !ok {
			continue
		}
		if consumed[k.Name] < active[k.Name] {
			consumed[k.Name]++
			continue
		}
		out = append(out, cdb.CarryForwardEvent{Name: k.Name, Data: k.Data})
	}
	return capCarryForward(out, instance, log)
}

// capCarryForward keeps the first MaxCarryForwardEvents of the queue
// messages (then raised events) a continue-as-new carries, and says how
// many it dropped.
func capCarryForward(out []cdb.CarryForwardEvent, instance string, log *slog.Logger) []cdb.CarryForwardEvent {
	if len(out) > cdb.MaxCarryForwardEvents {
		log.Warn("dropping queue messages and events beyond the carry-forward limit at continue-as-new",
			"instance", instance, "dropped", len(out)-cdb.MaxCarryForwardEvents, "limit", cdb.MaxCarryForwardEvents)
		out = out[:cdb.MaxCarryForwardEvents]
	}
	return out
}
