package cdb

// EndWatchesForTest counts the watches of orchestration ends p holds, so
// tests can tell that stopped and fired watches are let go.
func (p *CosmosProvider) EndWatchesForTest() int { return p.endings.Len() }
