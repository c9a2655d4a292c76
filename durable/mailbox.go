package durable

// externalEvents matches raised events to WaitForEvent subscriptions the way
// duroxide does: by name and arrival index. The n-th active subscription to
// a name gets the n-th event of that name that arrived while a subscription
// was waiting; subscriptions cancelled by a Select do not take a slot, and
// events that arrive with no subscription waiting stay in the history but
// are never delivered.
type externalEvents struct {
	subs      map[uint64]externalSub // scheduling event id → subscription
	nextIndex map[string]int
	arrivals  map[string][]string
	cancelled map[uint64]bool
}

type externalSub struct {
	name  string
	index int // position among the subscriptions to name
}

func newExternalEvents() externalEvents {
	return externalEvents{
		subs: map[uint64]externalSub{}, nextIndex: map[string]int{},
		arrivals: map[string][]string{}, cancelled: map[uint64]bool{},
	}
}

// bind records the subscription of a scheduling event.
func (m *externalEvents) bind(scheduleID uint64, name string) {
	m.subs[scheduleID] = externalSub{name: name, index: m.nextIndex[name]}
	m.nextIndex[name]++
}

// hasWaitingSlot reports whether an event of this name would be taken:
// there are more active subscriptions to it than events delivered so far.
func (m *externalEvents) hasWaitingSlot(name string) bool {
	active := 0
	for id, sub := range m.subs {
		if sub.name == name && !m.cancelled[id] {
			active++
		}
	}
	return active > len(m.arrivals[name])
}

// deliver appends an arrival.
func (m *externalEvents) deliver(name, data string) {
	m.arrivals[name] = append(m.arrivals[name], data)
}

// cancel marks a subscription dropped; it never resolves and frees its slot.
func (m *externalEvents) cancel(scheduleID uint64) { m.cancelled[scheduleID] = true }

// lookup returns the event for a subscription, if it has arrived.
func (m *externalEvents) lookup(scheduleID uint64) (string, bool) {
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
