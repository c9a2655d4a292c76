package durable

// externalEvents matches raised events to WaitForEvent waits. A wait is
// either buffered (WaitForEvent in an execution under the buffered-events
// rule, events.go) or a duroxide subscription (WaitForEventUnbuffered, and
// WaitForEvent in executions started before the rule).
//
// Subscriptions match the way duroxide does: by name and arrival index.
// The n-th active subscription to a name gets the n-th event of that name
// that arrived while a subscription was waiting; subscriptions cancelled
// by a Select do not take a slot.
//
// An event no subscription is waiting for goes to the buffer when the
// execution buffers events, where buffered waits take it as DequeueEvent
// takes a queue message (FIFO per name, a cancelled wait consumes
// nothing); otherwise it stays in the history and is never delivered.
type externalEvents struct {
	subs      map[uint64]externalSub // scheduling event id → subscription
	nextIndex map[string]int
	arrivals  map[string][]string
	cancelled map[uint64]bool

	buffering   bool            // the execution buffers unclaimed events
	buffer      queueMessages   // buffered waits and the events they share
	buffered    map[uint64]bool // scheduling event ids of buffered waits
	bufferOrder []string        // the names of the buffered events, in arrival order
	read        map[uint64]bool // buffered waits whose event the code read
	unbuffered  map[string]bool // names waited for with WaitForEventUnbuffered
}

type externalSub struct {
	name  string
	index int // position among the subscriptions to name
}

func newExternalEvents() externalEvents {
	return externalEvents{
		subs: map[uint64]externalSub{}, nextIndex: map[string]int{},
		arrivals: map[string][]string{}, cancelled: map[uint64]bool{},
		buffer: newQueueMessages(), buffered: map[uint64]bool{}, read: map[uint64]bool{},
		unbuffered: map[string]bool{},
	}
}

// bind records the wait of a scheduling event.
func (m *externalEvents) bind(scheduleID uint64, name string, buffered bool) {
	if buffered {
		m.buffered[scheduleID] = true
		m.buffer.bind(scheduleID, name)
		return
	}
	m.unbuffered[name] = true
	m.subs[scheduleID] = externalSub{name: name, index: m.nextIndex[name]}
	m.nextIndex[name]++
}

// arrive takes an event in: a waiting subscription takes it first, then the
// buffer, if the execution has one. It reports whether anyone can read it.
func (m *externalEvents) arrive(name, data string) bool {
	switch {
	case m.hasWaitingSlot(name):
		m.arrivals[name] = append(m.arrivals[name], data)
	case m.buffering:
		m.buffer.deliver(name, data)
		m.bufferOrder = append(m.bufferOrder, name)
	default:
		return false
	}
	return true
}

// hasWaitingSlot reports whether an event of this name would be taken by a
// subscription: there are more active subscriptions to it than events
// delivered to them so far.
func (m *externalEvents) hasWaitingSlot(name string) bool {
	active := 0
	for id, sub := range m.subs {
		if sub.name == name && !m.cancelled[id] {
			active++
		}
	}
	return active > len(m.arrivals[name])
}

// cancel marks a wait dropped; it never resolves and frees its slot, or
// leaves the buffered event it was matched to for the next wait. A wait
// dropped before it is bound is cancelled before its kind is known, so
// both matchings hear of it.
func (m *externalEvents) cancel(scheduleID uint64) {
	m.buffer.cancel(scheduleID)
	m.cancelled[scheduleID] = true
}

// lookup returns the event for a wait, if it has arrived.
func (m *externalEvents) lookup(scheduleID uint64) (string, bool) {
	if m.buffered[scheduleID] {
		return m.buffer.lookup(scheduleID)
	}
	sub, ok := m.subs[scheduleID]
	if !ok || m.cancelled[scheduleID] {
		return "", false
	}
	index := sub.index
	for id, other := range m.subs {
		if other.name == sub.name && other.index < sub.index && m.cancelled[id] {
			index-- // cancelled subscriptions before this one take no slot
		}
	}
	arrivals := m.arrivals[sub.name]
	if index >= len(arrivals) {
		return "", false
	}
	return arrivals[index], true
}

// queueMessages is the persistent mailbox behind DequeueEvent: FIFO per
// name, messages wait for a subscription however early they arrive, and a
// cancelled subscription consumes nothing.
type queueMessages struct {
	subs      []queueSub // in binding (history) order
	arrivals  map[string][]string
	cancelled map[uint64]bool
}

type queueSub struct {
	scheduleID uint64
	name       string
}

func newQueueMessages() queueMessages {
	return queueMessages{arrivals: map[string][]string{}, cancelled: map[uint64]bool{}}
}

func (m *queueMessages) bind(scheduleID uint64, name string) {
	m.subs = append(m.subs, queueSub{scheduleID: scheduleID, name: name})
}

func (m *queueMessages) deliver(name, data string) {
	m.arrivals[name] = append(m.arrivals[name], data)
}

func (m *queueMessages) cancel(scheduleID uint64) { m.cancelled[scheduleID] = true }

// lookup returns the message for a subscription: its position among the
// active subscriptions to the same name picks the arrival, so matching is
// strict FIFO whatever order the futures are awaited in.
func (m *queueMessages) lookup(scheduleID uint64) (string, bool) {
	name, ok := m.nameOf(scheduleID)
	if !ok || m.cancelled[scheduleID] {
		return "", false
	}
	position := 0
	for _, sub := range m.subs {
		if sub.scheduleID == scheduleID {
			break
		}
		if sub.name == name && !m.cancelled[sub.scheduleID] {
			position++
		}
	}
	arrivals := m.arrivals[name]
	if position >= len(arrivals) {
		return "", false
	}
	return arrivals[position], true
}

func (m *queueMessages) nameOf(scheduleID uint64) (string, bool) {
	for _, sub := range m.subs {
		if sub.scheduleID == scheduleID {
			return sub.name, true
		}
	}
	return "", false
}
