package handoff

import "sync"

// EndWatches are this process's callers waiting for instances to end: a
// commit of this process that ends an instance wakes them, and may leave
// them the status it wrote (S), so they need not read it. The zero value
// has none and is ready to use.
type EndWatches[S any] struct {
	mu         sync.Mutex
	byInstance map[string]map[chan struct{}]struct{}
	told       map[<-chan struct{}]S // the statuses the ends of closed watches left, until they are stopped
}

// Watch registers a watch of instance: ended is closed when Ended is
// called for it; stop unregisters it, and may be called more than once,
// before or after the end.
func (w *EndWatches[S]) Watch(instance string) (ended <-chan struct{}, stop func()) {
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

func (w *EndWatches[S]) unwatch(instance string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.byInstance[instance]
	delete(set, ch)
	if len(set) == 0 {
		delete(w.byInstance, instance)
	}
	delete(w.told, ch)
}

// Ended wakes every watch of instance; with told, each keeps status for
// its waiter (Told) until it is stopped.
func (w *EndWatches[S]) Ended(instance string, status S, told bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.byInstance[instance] {
		close(ch)
		if told {
			if w.told == nil {
				w.told = map[<-chan struct{}]S{}
			}
			w.told[ch] = status
		}
	}
	delete(w.byInstance, instance)
}

// Told is the status the end that closed ended left, if it left one.
func (w *EndWatches[S]) Told(ended <-chan struct{}) (S, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.told[ended]
	return st, ok
}

// Len counts the watches registered and not yet woken or stopped.
func (w *EndWatches[S]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, set := range w.byInstance {
		n += len(set)
	}
	return n
}
