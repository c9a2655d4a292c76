package cdb

import "time"

// CompletionCoalescingForTest is how long a chained turn waits, after its
// latest completion, for the others, so tests on a clock of their own can
// step past it.
const CompletionCoalescingForTest = completionCoalescing

// ChainMaxHoldForTest is how long a chain of a lock of timeout holds its
// first completion at most, waiting for others.
func ChainMaxHoldForTest(timeout time.Duration) time.Duration { return chainMaxHold(timeout) }

// SetChainTurnRoomForTest makes p's chained turns take n completions at
// most, so a test need not run a commit batch's worth of activities.
func SetChainTurnRoomForTest(p *CosmosProvider, n int) { p.chainRoom = n }
