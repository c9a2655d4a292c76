package cdb

import (
	"context"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// DisableSessionTokensForTest makes c keep and send no session tokens, as a
// client blind to Session consistency would; on a FakeAccount with
// StaleReadsWithoutSessionToken it then reads the lagging replica. Tests of
// package cdb_test use it to show that the fake's stale mode is real.
func DisableSessionTokensForTest(c *Client) { c.sessions.disable() }

// WaitingFetchesForTest is how many long-polling fetches of queue
// ("orchestrator" or "worker") wait for an announcement in p.
func WaitingFetchesForTest(p *CosmosProvider, queue string) int {
	sig := p.workSignal
	if queue == queueOrchestrator {
		sig = p.orchSignal
	}
	sig.mu.Lock()
	defer sig.mu.Unlock()
	return len(sig.waiters)
}

// AnnouncementsForTest are the partitions announced to p's worker fetches
// while none waited, oldest first (an eager item's announcement reads
// "(eager)").
func AnnouncementsForTest(p *CosmosProvider) []string {
	p.workSignal.mu.Lock()
	defer p.workSignal.mu.Unlock()
	var out []string
	for _, t := range p.workSignal.tokens {
		pk := t.wake.PK
		if t.wake.Kind == handoff.ReadyItem {
			pk = "(eager)"
		}
		for range t.items {
			out = append(out, pk)
		}
	}
	return out
}

// AnnouncementDeferredForTest says an announcement of pk waits for p to let
// go of the instance's lock.
func AnnouncementDeferredForTest(p *CosmosProvider, pk string) bool {
	p.wakeLater.mu.Lock()
	defer p.wakeLater.mu.Unlock()
	return p.wakeLater.m[pk]
}

// AfterAckPlannedForTest makes f run in each ack of p between its planning
// and its commit, while renewals of the lock may run.
func AfterAckPlannedForTest(p *CosmosProvider, f func()) { p.afterPlanForTest = f }

// RenewProcessLeaseForTest renews p's slot lease now, as its background
// renewal would at its next interval.
func RenewProcessLeaseForTest(ctx context.Context, p *CosmosProvider) error {
	return p.processLeases.renew(ctx)
}

// DispatchSlotForTest is the dispatch slot of an instance's messages.
func DispatchSlotForTest(instance string) int { return dispatchSlot(instance) }

// ActivitySlotForTest is the dispatch slot of an activity's worker item.
func ActivitySlotForTest(act ActivityExecuteMessage) int { return activitySlot(act) }

// KVBucketForTest is the store bucket of a KV key.
func KVBucketForTest(key string) int { return kvBucket(key) }

// CheckIndexUpgradeForTest reads the container once, as the provider does
// every indexUpgradeCheck while its new queue index is built, and says
// whether the queues order by (type, visibleAt, seq) now.
func CheckIndexUpgradeForTest(ctx context.Context, p *CosmosProvider) bool {
	return p.checkIndexUpgrade(ctx)
}

// QueueOrderByForTest is the ORDER BY the queue queries use now.
func QueueOrderByForTest(p *CosmosProvider) string { return p.queueIndex.orderBy() }
