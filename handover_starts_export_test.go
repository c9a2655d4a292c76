package cdb

import (
	"context"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// SettleFirstTurnAfterForTest settles, as a first turn's failed ack would
// (with ackErr), a start whose first turn was token's commit writing the
// history document historyID; it returns the error for the runtime and
// whether the start counts as committed (false: handed back).
func (p *CosmosProvider) SettleFirstTurnAfterForTest(ctx context.Context, instance, token, historyID string, ackErr error) (error, bool) {
	s := handoff.NewStart[*ackPlan]()
	s.BeginCommit()
	s.Planned(&ackPlan{historyID: historyID})
	lock := &orchestrationLock{token: token, pk: instancePartitionKey(instance), start: s}
	err := p.settleFirstTurn(ctx, lock, ackErr)
	return err, s.State() == handoff.StartCommitted
}

// HistoryDocIDForTest is the id of an execution's history document whose
// first event is first.
func HistoryDocIDForTest(exec, first uint64) string { return historyDocID(exec, first) }
