package cdb

// Carrying trace contexts through the store. The contract's messages are
// duroxide's JSON, byte for byte, so that a store can be shared with
// duroxide: a message's trace context is a Go-only field (json:"-") that a
// provider keeps in its own fields beside the message, never inside it.

// TraceCarrier is an optional capability of a Provider: it keeps the
// Go-only trace contexts of what it queues and hands them back.
//   - StartOrchestrationMessage.Trace comes back as
//     OrchestrationItem.TraceContext on every item of the instance it
//     starts (the first turn's and every later one's, across
//     continue-as-new), a child's start as much as a client's;
//   - ActivityExecuteMessage.Trace comes back on the item FetchWorkItem
//     returns;
//   - an item enqueued without one comes back with the zero TraceContext.
//
// A provider without it loses the traces (each turn and activity starts
// a trace of its own) and works otherwise the same.
type TraceCarrier interface {
	// CarriesTraceContext does nothing: implementing it is the promise
	// above.
	CarriesTraceContext()
}

// The Cosmos provider keeps a message's trace context in its queue
// document's "trace" field, and the start's in the instance's lock
// document's, which every fetch of the instance reads.
var _ TraceCarrier = (*CosmosProvider)(nil)

// CarriesTraceContext is TraceCarrier.
func (p *CosmosProvider) CarriesTraceContext() {}

// TraceContextOf is the trace context a message carries: a start's or an
// activity's Trace, the zero value for every other kind.
func TraceContextOf(item WorkItem) TraceContext {
	switch m := item.(type) {
	case StartOrchestrationMessage:
		return m.Trace
	case ActivityExecuteMessage:
		return m.Trace
	}
	return TraceContext{}
}

// WithTraceContext is item carrying tc, for a provider handing back a
// decoded message: a start or an activity gets tc as its Trace; every
// other kind carries none and is returned as it is.
func WithTraceContext(item WorkItem, tc TraceContext) WorkItem {
	switch m := item.(type) {
	case StartOrchestrationMessage:
		m.Trace = tc
		return m
	case ActivityExecuteMessage:
		m.Trace = tc
		return m
	}
	return item
}

// startTraceOf is the trace context of the first start among items, the
// zero value when none carries one.
func startTraceOf(items []WorkItem) TraceContext {
	for _, it := range items {
		if s, ok := it.(StartOrchestrationMessage); ok && !s.Trace.IsZero() {
			return s.Trace
		}
	}
	return TraceContext{}
}
