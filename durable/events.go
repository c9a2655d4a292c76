package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// Events raised with Client.RaiseEvent reach WaitForEvent buffered: an
// event nobody waits for yet stays for the next wait of its name, so an
// approval raised while the orchestration still runs a timer or an
// activity is not lost. duroxide delivers an event only to a subscription
// already waiting, and drops it otherwise; WaitForEventUnbuffered keeps
// that behaviour for stores shared with duroxide runtimes.
//
// The rule is revision 1 of this runtime's rules (rules_revision.go): only
// executions whose start carries it buffer, so a history recorded before,
// or by duroxide, replays as it was recorded.

// ErrEventTimeout is what Await returns for a WaitForEvent whose
// WithEventTimeout passed first. The event, should it come later, is left
// for the next wait of its name.
var ErrEventTimeout = errors.New("durable: timed out waiting for the event")

// EventOption configures WaitForEvent and WaitForEventUnbuffered.
type EventOption func(*eventWait)

type eventWait struct {
	timeout    time.Duration
	hasTimeout bool
}

// WithEventTimeout bounds the wait with a durable timer: when the timer
// fires first, Await returns an error that wraps ErrEventTimeout and the
// wait consumes nothing. A timeout of zero or less sets a timer due at once.
func WithEventTimeout(d time.Duration) EventOption {
	return func(w *eventWait) { w.timeout, w.hasTimeout = d, true }
}

// WaitForEvent waits for the next event of this name raised on the
// instance (Client.RaiseEvent); Await returns its data. Events are
// buffered: one raised before the wait, even while the orchestration ran
// other work, is received by the first wait that comes. Each event goes
// to exactly one wait, in the order the events arrived: the n-th wait of
// a name that is not dropped gets the n-th event of that name. A wait that
// loses a Select, or times out, takes no event. Events not read when the
// orchestration continues as new are carried into the next execution.
//
// Executions started by an earlier release of this runtime (or by
// duroxide) keep the rules they were recorded under: there, WaitForEvent
// behaves as WaitForEventUnbuffered.
func (c *OrchestrationContext) WaitForEvent(name string, opts ...EventOption) *Future {
	return c.waitForEvent(name, c.bufferedEvents, opts)
}

// WaitForEventUnbuffered subscribes to an event the way duroxide does: it
// receives only an event raised after the subscription is recorded. An
// event raised while nobody waits for it stays in the history and is never
// delivered, and a continue-as-new does not carry the unread events of a
// name the execution waited for this way. Use it where
// duroxide's semantics are wanted, above all when the store is shared with
// duroxide runtimes that may run the same instances; otherwise prefer
// WaitForEvent, which cannot lose an early event.
func (c *OrchestrationContext) WaitForEventUnbuffered(name string, opts ...EventOption) *Future {
	return c.waitForEvent(name, false, opts)
}

func (c *OrchestrationContext) waitForEvent(name string, buffered bool, opts []EventOption) *Future {
	var w eventWait
	for _, opt := range opts {
		opt(&w)
	}
	wait := c.newFuture(futureExternal, action{kind: actWaitExternal, name: name, buffered: buffered})
	if !w.hasTimeout {
		return wait
	}
	timer := c.scheduleTimerFor(w.timeout, "the timeout of the wait for event "+strconv.Quote(name))
	return c.track(&Future{octx: c, kind: futureFirstOf, parts: []*Future{wait, timer},
		timeoutErr: fmt.Errorf("durable: wait for event %q: %w", name, ErrEventTimeout)})
}

// resolveFirstOf resolves a wait with a timeout as Select(wait, timer)
// would: the event wins a tie, and the loser is dropped.
func (f *Future) resolveFirstOf() bool {
	for i, part := range f.parts {
		if !part.resolve() {
			continue
		}
		f.octx.dropLosers(f.parts, i)
		if i == 0 {
			f.value, f.err = part.value, part.err
		} else {
			f.err = f.timeoutErr
		}
		return true
	}
	return false
}

// carriedEventPrefix marks, in a continue-as-new's carried events, the
// raised events among the queue messages: the carry's wire form is
// duroxide's (name, data) pair, which has no kind. Client.EnqueueEvent
// refuses queue names with the prefix.
const carriedEventPrefix = "__cdb_event:"

// unreadEvents are the buffered events to carry into the next execution:
// every buffered arrival, in arrival order, but those matched to a wait
// whose event the code read. A wait dropped or cancelled takes none. The
// events of a name the execution waited for unbuffered are not carried:
// that code asked for duroxide's semantics, and carrying them into an
// execution that again only subscribes would pile them up, execution after
// execution.
func (m *externalEvents) unreadEvents() []cdb.CarryForwardEvent {
	active := map[string][]uint64{} // per name, in binding order
	for _, sub := range m.buffer.subs {
		if !m.buffer.cancelled[sub.scheduleID] {
			active[sub.name] = append(active[sub.name], sub.scheduleID)
		}
	}
	position := map[string]int{}
	var out []cdb.CarryForwardEvent
	for _, name := range m.bufferOrder {
		n := position[name]
		position[name]++
		if m.unbuffered[name] {
			continue
		}
		if subs := active[name]; n < len(subs) && m.read[subs[n]] {
			continue
		}
		out = append(out, cdb.CarryForwardEvent{Name: carriedEventPrefix + name, Data: m.buffer.arrivals[name][n]})
	}
	return out
}

// carriedItem turns a carried event back into what it was: a raised event
// when it carries the prefix, a queue message otherwise.
func carriedItem(instance string, ev cdb.CarryForwardEvent) cdb.WorkItem {
	if name, ok := strings.CutPrefix(ev.Name, carriedEventPrefix); ok {
		return cdb.ExternalRaisedMessage{Instance: instance, Name: name, Data: ev.Data}
	}
	return cdb.QueueEventMessage{Instance: instance, Name: ev.Name, Data: ev.Data}
}

// checkQueueName refuses the queue names reserved for carried events.
func checkQueueName(queue string) error {
	if strings.HasPrefix(queue, carriedEventPrefix) {
		return fmt.Errorf("queue name %q starts with the reserved %q: %w", queue, carriedEventPrefix, ErrInvalidInput)
	}
	return nil
}

// waitingEvents are the waits of a buffering execution still waiting when
// it ends, in history order: not cancelled in the history, and with no
// event matched to them.
func (m *externalEvents) waitingEvents(history []cdb.Event) []uint64 {
	cancelled := cancelledSchedules(history)
	var out []uint64
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.ExternalSubscribed); !ok || cancelled[ev.EventID] {
			continue
		}
		if _, matched := m.lookup(ev.EventID); !matched {
			out = append(out, ev.EventID)
		}
	}
	return out
}

// logUndelivered reports an event that no wait will ever read: it arrived
// while no subscription waited, in an execution that does not buffer.
func (r *replayRun) logUndelivered(name string) {
	level := slog.LevelWarn
	if r.octx.replaying {
		level = slog.LevelDebug // reported when it arrived
	}
	r.engine.log.Log(context.Background(), level, "external event with no waiting subscription is not delivered",
		"instance", r.engine.instance, "event", name)
}
