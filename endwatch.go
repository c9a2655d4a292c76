package cdb

// Orchestration ends told in process (OrchestrationEndWatcher): a caller
// waiting for an instance to finish is woken by the commit of its ending
// turn in this process, instead of learning it from its next status poll.

import "sync"

var (
	_ OrchestrationEndWatcher  = (*CosmosProvider)(nil)
	_ OrchestrationEndReporter = (*CosmosProvider)(nil)
	_ OrchestrationHolder      = (*CosmosProvider)(nil)
)

// endWatches are the watches of this process's callers waiting for
// instances to end. The zero value has none and is ready to use.
type endWatches struct {
	mu         sync.Mutex
	byInstance map[string]map[chan struct{}]struct{}
	// told are the statuses the ends of closed watches committed, until
	// their watches are stopped.
	told map[<-chan struct{}]OrchestrationStatus
}

// WatchOrchestrationEnd implements OrchestrationEndWatcher: ended is
// closed when a turn of instance that this provider commits leaves it
// Completed or Failed.
func (p *CosmosProvider) WatchOrchestrationEnd(instance string) (ended <-chan struct{}, stop func()) {
	return p.endings.watch(instance)
}

// EndedStatus implements OrchestrationEndReporter.
func (p *CosmosProvider) EndedStatus(ended <-chan struct{}) (OrchestrationStatus, bool) {
	return p.endings.endedStatus(ended)
}

// HoldsOrchestration implements OrchestrationHolder: this process holds
// instance's lock, unexpired by its clock. Every way such a lock ends goes
// through endLock, and a commit that ends the instance closes its watches
// (afterCommit), so a waiter that skips its reads while this holds misses
// no end. A lock lost unseen (another process took it after a pause here)
// stops counting at its expiry, or sooner when its renewal finds it lost.
func (p *CosmosProvider) HoldsOrchestration(instance string) bool {
	return p.holdsInstanceLock(instancePartitionKey(instance))
}

func (w *endWatches) endedStatus(ended <-chan struct{}) (OrchestrationStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.told[ended]
	return st, ok
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
	delete(w.told, ch)
}

// committed wakes the watches of instance when a turn committed inst with
// a status a waiter for completion stops at (ContinuedAsNew is not one: the
// instance goes on in its next execution), and keeps the status for them
// when the document holds it whole (an output stored apart needs a read).
func (w *endWatches) committed(instance string, inst *instanceDoc) {
	if inst.Status != StatusCompleted && inst.Status != StatusFailed {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byInstance[instance] {
		close(ch)
		if inst.OutputRef == "" {
			if w.told == nil {
				w.told = map[<-chan struct{}]OrchestrationStatus{}
			}
			w.told[ch] = statusOfInstance(inst, inst.Output)
		}
	}
	delete(w.byInstance, instance)
}
