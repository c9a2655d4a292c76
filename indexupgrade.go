package cdb

import (
	"context"
	"sync/atomic"
	"time"
)

// Upgrading the queue index in place. A container made by an earlier
// version orders its queues by (visibleAt, seq); an operator adds
// (type, visibleAt, seq) to its indexing policy, and the service builds it
// in the background, during which a query ordered by it may be refused or
// incomplete. So the provider orders by the new index only once the
// container reports the transformation done (100%): while it runs, and the
// earlier index is still listed, the queues keep the earlier order, and the
// provider reads the container again every indexUpgradeCheck until it can
// switch. The switch happens once, from legacy to by-type, never back.

// indexUpgradeCheck is how often a provider waiting for the new index to be
// built reads the container (one metadata read).
const indexUpgradeCheck = 2 * time.Minute

// indexChoice is the composite index the queue queries order by now.
type indexChoice struct{ current atomic.Int32 }

func newIndexChoice(q queueIndex) *indexChoice {
	c := &indexChoice{}
	c.current.Store(int32(q))
	return c
}

func (c *indexChoice) get() queueIndex { return queueIndex(c.current.Load()) }

func (c *indexChoice) orderBy() string { return c.get().orderBy() }

// servingIndex is the index the queues may order by now: the one the
// policy prefers, unless that is (type, visibleAt, seq) still being built
// while (visibleAt, seq) is there to serve meanwhile; waiting says so.
func servingIndex(props ContainerProperties, preferred queueIndex) (q queueIndex, waiting bool) {
	building := props.IndexTransformationProgress >= 0 && props.IndexTransformationProgress < 100
	if preferred != queueIndexByType || !building || !listsIndex(props.IndexingPolicy, queueIndexLegacy) {
		return preferred, false
	}
	return queueIndexLegacy, true
}

// listsIndex reports whether the policy has a composite index serving q's
// order.
func listsIndex(policy *IndexingPolicy, q queueIndex) bool {
	if policy == nil {
		return false
	}
	for _, ci := range policy.CompositeIndexes {
		if compositeServes(ci, queueOrders[q]) {
			return true
		}
	}
	return false
}

// watchIndexUpgrade switches the queues to (type, visibleAt, seq) once the
// container reports it built; it returns when it has, or ctx ends.
func (p *CosmosProvider) watchIndexUpgrade(ctx context.Context) {
	t := time.NewTicker(indexUpgradeCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.checkIndexUpgrade(ctx) {
			return
		}
	}
}

// checkIndexUpgrade reads the container once; true when the queues now
// order by (type, visibleAt, seq).
func (p *CosmosProvider) checkIndexUpgrade(ctx context.Context) bool {
	props, err := p.container.Read(ctx)
	if err != nil {
		p.log.Debug("cdb: could not read the container to see whether its new queue index is built", "error", err)
		return false
	}
	q, waiting := servingIndex(props, queueIndexByType)
	if waiting || !listsIndex(props.IndexingPolicy, queueIndexByType) {
		return false
	}
	p.queueIndex.current.Store(int32(q))
	p.log.Info("cdb: the container's (type, visibleAt, seq) index is built; the queues order by it now",
		"database", p.cfg.Database, "container", p.cfg.Container)
	return true
}
