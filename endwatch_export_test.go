package cdb

// EndWatchesForTest counts the watches of orchestration ends p holds, so
// tests can tell that stopped and fired watches are let go.
func (p *CosmosProvider) EndWatchesForTest() int {
	p.endings.mu.Lock()
	defer p.endings.mu.Unlock()
	n := 0
	for _, set := range p.endings.byInstance {
		n += len(set)
	}
	return n
}
