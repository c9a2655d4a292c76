package durable

// Status batches: the waits of one Client on different instances read
// their statuses together, when the provider reads many at once
// (cdb.StatusesReader).

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// statusBatch gathers the status reads of a Client's waits into reads of
// many instances at once: a read asked for while one is under way waits
// for it to return and goes in the next, with every other asked for
// meanwhile. So a lone wait reads at once, and many waits send one read a
// round trip between them, however many instances they wait on.
type statusBatch struct {
	mu      sync.Mutex
	queued  map[string][]chan statusAnswer // by instance: the reads asked for since the last was sent
	sending bool                           // a sender runs: it sends what is queued once its read returns
}

// statusAnswer is one instance's part of a batch's answer.
type statusAnswer struct {
	st  cdb.OrchestrationStatus
	err error
}

// statusBatchTimeout bounds one batch's read: it is sent for many waits,
// so no one wait's context ends it.
const statusBatchTimeout = 30 * time.Second

// status is instance's status as a read sent after this call saw it.
func (b *statusBatch) status(ctx context.Context, instance string, reader cdb.StatusesReader) (cdb.OrchestrationStatus, error) {
	answer := make(chan statusAnswer, 1) // the sender never blocks on a wait that left
	b.mu.Lock()
	if b.queued == nil {
		b.queued = map[string][]chan statusAnswer{}
	}
	b.queued[instance] = append(b.queued[instance], answer)
	if !b.sending {
		b.sending = true
		go b.send(reader)
	}
	b.mu.Unlock()
	select {
	case a := <-answer:
		return a.st, a.err
	case <-ctx.Done():
		return cdb.OrchestrationStatus{}, ctx.Err()
	}
}

// send reads what is queued, one batch after another, until nothing is.
func (b *statusBatch) send(reader cdb.StatusesReader) {
	for {
		b.mu.Lock()
		queued := b.queued
		b.queued = nil
		if len(queued) == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), statusBatchTimeout)
		statuses, err := reader.ReadOrchestrationStatuses(ctx, slices.Sorted(maps.Keys(queued)))
		cancel()
		for instance, waits := range queued {
			a := statusAnswer{st: statuses[instance], err: err}
			for _, w := range waits {
				w <- a
			}
		}
	}
}
