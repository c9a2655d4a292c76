package cdb

import (
	"context"
	"strconv"
	"time"
)

// Writes whose response was lost. The client returns such a write
// as OutcomeUnknown: it may or may not have been applied. Where the write
// creates documents with ids fixed before the first send, sending it again
// tells: a 409 after an unknown outcome is our own earlier write. Resolving
// it here means a caller never sees a retryable error for a write that
// happened, and never repeats one that did.

// maxResends bounds how often a write of unknown outcome is sent again.
const maxResends = 5

// resendDelay spaces resends: the connection that lost the response may
// need a moment.
func resendDelay(attempt int) time.Duration {
	return min(25*time.Millisecond<<attempt, time.Second)
}

// waitToResend sleeps before a resend, or returns the context's error.
func waitToResend(ctx context.Context, attempt int) error {
	t := time.NewTimer(resendDelay(attempt))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// createOnce creates a document whose id is unique to this write, resending
// it while the outcome is unknown. It reports whether an earlier send's
// outcome was unknown, which makes a 409 this write's own.
func (p *CosmosProvider) createOnce(ctx context.Context, pk PartitionKey, body []byte, unknown bool) error {
	for attempt := 0; ; attempt++ {
		_, err := p.container.CreateItem(ctx, pk, body, nil)
		switch {
		case err == nil:
			return nil
		case unknown && IsConflict(err):
			return nil // the lost response's write
		case IsOutcomeUnknown(err) && attempt < maxResends:
			unknown = true
			if werr := waitToResend(ctx, attempt); werr != nil {
				return err
			}
			continue
		}
		return err
	}
}

// executeBatchOnce runs a batch of creates whose ids are fixed, resending it
// while the outcome is unknown, and reports whether any send's outcome was:
// then a 409 may be the caller's own earlier write, for it to tell.
func (p *CosmosProvider) executeBatchOnce(ctx context.Context, b *TransactionalBatch) (resp TransactionalBatchResponse, unknown bool, err error) {
	for attempt := 0; ; attempt++ {
		resp, err = p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err == nil || !IsOutcomeUnknown(err) || attempt >= maxResends {
			return resp, unknown, err
		}
		unknown = true
		if werr := waitToResend(ctx, attempt); werr != nil {
			return resp, unknown, err
		}
	}
}

// failedWithConflict says a batch failed on operation idx with a 409.
func failedWithConflict(resp TransactionalBatchResponse, idx int) bool {
	i, err := resp.FailedOperation()
	return i == idx && IsConflict(err)
}

// readLatest point-reads a document as the partition's primary has it, as
// a one-read transactional batch. A read-back after a write whose response
// was lost must see that write; a plain read may not under Session
// consistency, as the lost response took the write's session token with it.
// A missing document is a 404 *CosmosError, as ReadItem's.
func (p *CosmosProvider) readLatest(ctx context.Context, pk PartitionKey, id string) (ItemResponse, error) {
	res, err := p.readLatestMany(ctx, pk, []string{id})
	if err != nil {
		return ItemResponse{}, err
	}
	return res[0], nil
}

// readLatestMany reads several documents of one partition from its
// primary, in one batch; any missing one makes it a 404.
func (p *CosmosProvider) readLatestMany(ctx context.Context, pk PartitionKey, ids []string) ([]ItemResponse, error) {
	return p.container.readItemsInOneBatch(ctx, pk, ids)
}

// enqueuedMarkerTTL is how long the marker of a consumed enqueued item
// lives, in seconds: far longer than createOnce resends for.
const enqueuedMarkerTTL = 10 * 60

// markedOnConsume marks an encoded queue document enqueued from outside a
// commit (queueDoc.ConsumedTTL), without decoding it again: its consumer
// leaves a marker, so a resend of the enqueue after a lost response is a
// 409 even when the item was consumed in between.
func markedOnConsume(body []byte) []byte {
	return append([]byte(`{"consumedTtl":`+strconv.Itoa(enqueuedMarkerTTL)+`,`), body[1:]...)
}
