package memprovider

import "github.com/duroxide-go/cdb"

var (
	_ cdb.OrchestrationEndWatcher  = (*Provider)(nil)
	_ cdb.OrchestrationEndReporter = (*Provider)(nil)
)

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
	delete(p.endTold, ch)
}

// EndedStatus implements cdb.OrchestrationEndReporter.
func (p *Provider) EndedStatus(ended <-chan struct{}) (cdb.OrchestrationStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.endTold[ended]
	return st, ok
}

// endedLocked wakes the watches of instance, whose turn committed the
// status end, and keeps it for them; p.mu is held.
func (p *Provider) endedLocked(instance string, end cdb.OrchestrationStatus) {
	if end.Status != cdb.StatusCompleted && end.Status != cdb.StatusFailed {
		return
	}
	for ch := range p.endWatches[instance] {
		close(ch)
		p.endTold[ch] = end
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
