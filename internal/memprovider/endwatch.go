package memprovider

import "github.com/duroxide-go/cdb"

var _ cdb.OrchestrationEndWatcher = (*Provider)(nil)

// WatchOrchestrationEnd implements cdb.OrchestrationEndWatcher as the
// Cosmos DB provider does: ended is closed when an AckOrchestrationItem
// of this store leaves instance Completed or Failed.
func (p *Provider) WatchOrchestrationEnd(instance string) (ended <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.endWatches[instance]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		p.endWatches[instance] = set
	}
	set[ch] = struct{}{}
	return ch, func() { p.unwatchEnd(instance, ch) }
}

func (p *Provider) unwatchEnd(instance string, ch chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.endWatches[instance]
	delete(set, ch)
	if len(set) == 0 {
		delete(p.endWatches, instance)
	}
}

// endedLocked wakes the watches of instance, whose turn committed status;
// p.mu is held.
func (p *Provider) endedLocked(instance string, status cdb.InstanceStatus) {
	if status != cdb.StatusCompleted && status != cdb.StatusFailed {
		return
	}
	for ch := range p.endWatches[instance] {
		close(ch)
	}
	delete(p.endWatches, instance)
}

// EndWatches counts the registered watches of orchestration ends, so tests
// can tell that stopped and fired watches are let go.
func (p *Provider) EndWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, set := range p.endWatches {
		n += len(set)
	}
	return n
}
