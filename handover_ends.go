package cdb

// Orchestration ends told in process (OrchestrationEndWatcher): a caller
// waiting for an instance to finish is woken by the commit of its ending
// turn in this process, instead of learning it from its next status poll.

var (
	_ OrchestrationEndWatcher  = (*CosmosProvider)(nil)
	_ OrchestrationEndReporter = (*CosmosProvider)(nil)
	_ OrchestrationHolder      = (*CosmosProvider)(nil)
)

// WatchOrchestrationEnd implements OrchestrationEndWatcher: ended is
// closed when a turn of instance that this provider commits leaves it
// Completed or Failed.
func (p *CosmosProvider) WatchOrchestrationEnd(instance string) (ended <-chan struct{}, stop func()) {
	return p.endings.Watch(instance)
}

// EndedStatus implements OrchestrationEndReporter.
func (p *CosmosProvider) EndedStatus(ended <-chan struct{}) (OrchestrationStatus, bool) {
	return p.endings.Told(ended)
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

// tellEnd wakes the watches of instance when a turn of this process
// committed inst with a status a waiter for completion stops at
// (ContinuedAsNew is not one: the instance goes on in its next execution),
// and leaves them the status when the document holds it whole (an output
// stored apart needs a read).
func (p *CosmosProvider) tellEnd(instance string, inst *instanceDoc) {
	if inst.Status != StatusCompleted && inst.Status != StatusFailed {
		return
	}
	p.endings.Ended(instance, statusOfInstance(inst, inst.Output), inst.OutputRef == "")
}
