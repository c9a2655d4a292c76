package memprovider

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/duroxide-go/cdb"
)

// ParkOrchestrationItem is cdb.ParkRecorder: the abandon of a turn whose
// code diverged from the history, its attempt given back, with the park
// recorded on the instance row until a turn of it commits.
func (p *Provider) ParkOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, reason string) error {
	return p.giveBack(ctx, "ParkOrchestrationItem", lockToken, delay, true, func(inst *instanceRow, now int64) {
		inst.parked = nextPark(inst.parked, now, delay, reason)
	})
}

// nextPark is the record after one more park at now: since is kept from
// the parks before it, the count grows.
func nextPark(prev *cdb.ParkedInfo, now int64, delay time.Duration, reason string) *cdb.ParkedInfo {
	next := &cdb.ParkedInfo{
		Reason: wholeRunesUpTo(reason, cdb.MaxParkReasonBytes), Since: time.UnixMilli(now).UTC(), Count: 1,
		RetryAt: time.UnixMilli(after(now, max(delay, 0))).UTC(),
	}
	if prev != nil {
		next.Since, next.Count = prev.Since, prev.Count+1
	}
	return next
}

// wholeRunesUpTo keeps at most n bytes of s without splitting a rune.
func wholeRunesUpTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cloneParked copies a park record for a reader.
func cloneParked(p *cdb.ParkedInfo) *cdb.ParkedInfo {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
