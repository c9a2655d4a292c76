package cdb

// Orchestration ends told in process (OrchestrationEndWatcher): a caller
// waiting for an instance to finish is woken by the commit of its ending
// turn in this process, instead of learning it from its next status poll.

import "sync"

var _ OrchestrationEndWatcher = (*CosmosProvider)(nil)

// endWatches are the watches of this process's callers waiting for
// instances to end. The zero value has none and is ready to use.
type endWatches struct {
	mu         sync.Mutex
	byInstance map[string]map[chan struct{}]struct{}
}

// WatchOrchestrationEnd implements OrchestrationEndWatcher: ended is
// closed when a turn of instance that this provider commits leaves it
// Completed or Failed.
func (p *CosmosProvider) WatchOrchestrationEnd(instance string) (ended <-chan struct{}, stop func()) {
	return p.endings.watch(instance)
}

// watch registers a watch of instance; stop unregisters it, and may be
// called more than once, before or after the end.
func (w *endWatches) watch(instance string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byInstance == nil {
		w.byInstance = map[string]map[chan struct{}]struct{}{}
	}
	set := w.byInstance[instance]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.byInstance[instance] = set
	}
	set[ch] = struct{}{}
	return ch, func() { w.unwatch(instance, ch) }
}

func (w *endWatches) unwatch(instance string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.byInstance[instance]
	delete(set, ch)
	if len(set) == 0 {
		delete(w.byInstance, instance)
	}
}

// committed wakes the watches of instance when a turn committed status:
// the statuses a waiter for completion stops at. ContinuedAsNew is not one
// (the instance goes on in its next execution).
func (w *endWatches) committed(instance string, status InstanceStatus) {
	if status != StatusCompleted && status != StatusFailed {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byInstance[instance] {
		close(ch)
	}
	delete(w.byInstance, instance)
}
