package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The relay delivers outbox documents (R2): right after the commit that
// wrote them, and, for those a crash or an error left behind, from the
// reconciler, which looks for outbox documents older than OutboxMinAge
// every ReconcileInterval. Every delivered document has a deterministic id,
// so delivering twice is a 409, which counts as delivered. The outbox
// document is deleted once all its entries are in place.
//
// If a process dies after delivering but before deleting the outbox
// document, and the target consumes (deletes) a delivered message before the
// reconciler runs, the reconciler delivers that message again; the target's
// instance document remembers the relayed ids it consumed, and its next
// fetch drops the copy (rememberConsumed, withoutRedelivered).

// relay is the provider's outbox delivery goroutine.
type relay struct {
	p     *CosmosProvider
	queue chan relayJob
}

// relayJob is an outbox document to deliver, or only to delete when its
// entries were delivered already.
type relayJob struct {
	doc       outboxDoc
	delivered bool
}

func newRelay(p *CosmosProvider) *relay {
	return &relay{p: p, queue: make(chan relayJob, 1024)}
}

// deliverNow delivers a committed outbox document's entries in the caller's
// request, so the effects are visible when the commit returns, and leaves
// deleting the document to the relay. On failure the relay retries it all.
func (r *relay) deliverNow(ctx context.Context, doc outboxDoc) {
	for _, e := range doc.Entries {
		if err := r.deliverEntry(ctx, e); err != nil {
			r.p.log.Debug("cdb: outbox delivery failed; the relay will retry", "outbox", doc.ID, "error", err)
			r.enqueue(relayJob{doc: doc})
			return
		}
	}
	r.p.orchSignal.notify()
	r.p.workSignal.notify()
	r.enqueue(relayJob{doc: doc, delivered: true})
}

// deliverSoon hands a committed outbox document to the relay.
func (r *relay) deliverSoon(doc outboxDoc) { r.enqueue(relayJob{doc: doc}) }

// enqueue queues a job; when the relay is saturated the reconciler finds the
// document later, so nothing is lost.
func (r *relay) enqueue(job relayJob) {
	select {
	case r.queue <- job:
	default:
		r.p.log.Warn("cdb: outbox relay saturated; the reconciler will deliver", "outbox", job.doc.ID)
	}
}

// run delivers until ctx ends.
func (r *relay) run(ctx context.Context) {
	ticker := time.NewTicker(r.p.cfg.ReconcileInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-r.queue:
			if err := r.run1(ctx, job); err != nil && ctx.Err() == nil {
				r.p.log.Debug("cdb: outbox delivery failed; the reconciler will retry", "outbox", job.doc.ID, "error", err)
			}
		case <-ticker.C:
			if err := r.reconcile(ctx); err != nil && ctx.Err() == nil {
				r.p.log.Warn("cdb: outbox reconciliation failed", "error", err)
			}
		}
	}
}

func (r *relay) run1(ctx context.Context, job relayJob) error {
	if job.delivered {
		return r.remove(ctx, job.doc)
	}
	return r.deliver(ctx, job.doc)
}

// deliver writes every entry of doc, then deletes doc.
func (r *relay) deliver(ctx context.Context, doc outboxDoc) error {
	for _, e := range doc.Entries {
		if err := r.deliverEntry(ctx, e); err != nil {
			return fmt.Errorf("deliver outbox %s: %w", doc.ID, err)
		}
	}
	r.p.orchSignal.notify()
	r.p.workSignal.notify()
	return r.remove(ctx, doc)
}

// remove deletes a delivered outbox document.
func (r *relay) remove(ctx context.Context, doc outboxDoc) error {
	_, err := r.p.container.DeleteItem(ctx, NewPartitionKeyString(doc.PK), doc.ID, nil)
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("delete delivered outbox %s: %w", doc.ID, err)
	}
	return nil
}

func (r *relay) deliverEntry(ctx context.Context, e outboxEntry) error {
	pk := NewPartitionKeyString(e.PK)
	if e.Upsert {
		_, err := r.p.container.UpsertItem(ctx, pk, e.Doc, nil)
		return err
	}
	_, err := r.p.container.CreateItem(ctx, pk, e.Doc, nil)
	if IsConflict(err) {
		return nil // delivered before
	}
	return err
}

// reconcile delivers outbox documents that have waited longer than
// OutboxMinAge. The query filters only, as a cross-partition query must (R4).
func (r *relay) reconcile(ctx context.Context) error {
	cutoff := r.p.now().Add(-r.p.cfg.OutboxMinAge).UnixMilli()
	res, err := r.p.container.QueryItems(ctx, "SELECT * FROM c WHERE c.type = @type AND c.createdAt <= @cutoff",
		[]QueryParameter{{Name: "@type", Value: docOutbox}, {Name: "@cutoff", Value: cutoff}}, nil)
	if err != nil {
		return err
	}
	for _, raw := range res.Items {
		var doc outboxDoc
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("decode outbox document: %w", err)
		}
		if err := r.deliver(ctx, doc); err != nil {
			return err
		}
	}
	return r.p.finishPendingDeletions(ctx)
}

// ReconcileOutbox delivers every undelivered outbox document older than
// OutboxMinAge, and finishes every deletion older than that which its
// process left half done, now instead of at the reconciler's next tick.
func (p *CosmosProvider) ReconcileOutbox(ctx context.Context) error {
	return p.outbox.reconcile(ctx)
}
