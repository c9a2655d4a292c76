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
	return p.endWatches.Watch(instance)
}

// EndedStatus implements cdb.OrchestrationEndReporter.
func (p *Provider) EndedStatus(ended <-chan struct{}) (cdb.OrchestrationStatus, bool) {
	return p.endWatches.Told(ended)
}

// endedLocked wakes the watches of instance, whose turn committed the
// status end, and leaves it for them; p.mu is held, so a watch registered
// before the commit is woken by it.
func (p *Provider) endedLocked(instance string, end cdb.OrchestrationStatus) {
	if end.Status != cdb.StatusCompleted && end.Status != cdb.StatusFailed {
		return
	}
	p.endWatches.Ended(instance, end, true)
}

// EndWatches counts the registered watches of orchestration ends, so tests
// can tell that stopped and fired watches are let go.
func (p *Provider) EndWatches() int { return p.endWatches.Len() }
