package cdb

import (
	"context"
	"time"
	"unicode/utf8"
)

// Recording a parked instance (ParkRecorder): the runtime gives back the
// batch of a turn whose code diverged from the history, and the instance
// document says so, for every reader of the store, until a turn commits.
//
// The record rides on the abandon's own batch (the instance's release,
// If-Match on the lock's ETag): it costs no request, and it is written
// exactly when the batch is given back. Its count and since are computed
// from the document the lock read, not incremented on the server, so a
// park whose response was lost and is written again cannot count twice:
// the second write meets a changed ETag and is refused.

// parkedDoc is the instance document's record of a park; times in ms.
type parkedDoc struct {
	Reason  string `json:"reason"`
	Since   int64  `json:"since"`
	Count   uint32 `json:"count"`
	RetryAt int64  `json:"retryAt"`
}

// ParkOrchestrationItem gives the batch back as AbandonOrchestrationItem
// (delay, true) does and records the park on the instance document in the
// same batch.
func (p *CosmosProvider) ParkOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, reason string) error {
	const op = "ParkOrchestrationItem"
	lock, err := p.heldOrchestration(op, lockToken)
	if err != nil {
		return err
	}
	defer lock.mu.Unlock()
	release := p.abandonOps(lock, delay)
	release.AppendSet("/parked", nextPark(lock.inst.Parked, p.nowMs(), delay, reason))
	if err := p.releaseBatch(ctx, op, lock, release, delay, true); err != nil {
		return asOperation(op, err)
	}
	p.releasedWithoutCommit(lock, delay)
	return nil
}

// nextPark is the record after one more park at now.
func nextPark(prev *parkedDoc, now int64, delay time.Duration, reason string) parkedDoc {
	next := parkedDoc{Reason: cutReason(reason), Since: now, Count: 1, RetryAt: now + max(delay, 0).Milliseconds()}
	if prev != nil {
		next.Since, next.Count = prev.Since, prev.Count+1
	}
	return next
}

// cutReason keeps at most MaxParkReasonBytes of reason, whole runes only.
func cutReason(reason string) string {
	if len(reason) <= MaxParkReasonBytes {
		return reason
	}
	cut := reason[:MaxParkReasonBytes]
	for !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut
}

// parkedInfo is the record as readers get it; nil when not parked.
func parkedInfo(d *parkedDoc) *ParkedInfo {
	if d == nil {
		return nil
	}
	return &ParkedInfo{
		Reason: d.Reason, Since: time.UnixMilli(d.Since).UTC(), Count: d.Count,
		RetryAt: time.UnixMilli(d.RetryAt).UTC(),
	}
}
