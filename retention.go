package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Retention (Config.Retention): a finished instance leaves by itself.
//
// The turn that finishes an instance (Completed or Failed) records
// retainUntil on its instance document, in its own commit, so the moment
// the instance leaves is decided once and survives any crash. Then:
//
//   - From retainUntil on, the instance reads as gone everywhere: a status,
//     a list, a count, its history and KV, exactly as a deletion's mark
//     makes it read (deletionReaches). Reads decide on retainUntil, never on
//     whether the documents are purged yet.
//   - Its documents get a time to live ending no earlier than retainUntil
//     (applyRetention): right after the commit, by this process in the
//     background, the instance document last, so nothing of the instance
//     outlives it. Cosmos DB removes them with spare throughput, where a
//     sweep would pay a delete for each. A process that dies first leaves
//     it to the reconciler, which gives TTLs to every finished instance
//     whose document has none a while after its commit.
//   - A start of the id once retainUntil has passed first deletes what is
//     left of the old life (an ordinary deletion of it and its tree, which
//     a purge that has not reached a document yet needs), then starts a
//     new life; before then the id is taken, as any finished instance's.
//
// A document written after the TTLs were given (a late event, a lock on
// the instance document) has its own or none: the instance document keeps
// its TTL ending at retainUntil on every commit (nextInstanceDoc), and
// what is left after the purge is the next start's to clear.

// maxTTLSeconds is the longest time to live Cosmos DB accepts.
const maxTTLSeconds = math.MaxInt32

// retentionFollowUpGrace is how long after its commit a finished instance
// without TTLs is left to the process that committed it, before the
// reconciler gives them.
const retentionFollowUpGrace = time.Minute

// checkRetention refuses a retention Cosmos DB cannot express.
func checkRetention(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < time.Second:
		return fmt.Errorf("retention %s: want 0 (keep finished instances) or at least a second: %w", d, ErrInvalidInput)
	case d > maxTTLSeconds*time.Second:
		return fmt.Errorf("retention %s: want at most %d seconds, Cosmos DB's longest time to live: %w", d, maxTTLSeconds, ErrInvalidInput)
	}
	return nil
}

// liveRetention is the query filter that leaves out the instance
// documents whose retention ended by @retainNow (ms).
const liveRetention = "(NOT IS_DEFINED(c.retainUntil) OR c.retainUntil > @retainNow)"

// retainNowParam is liveRetention's parameter.
func (p *CosmosProvider) retainNowParam() QueryParameter {
	return QueryParameter{Name: "@retainNow", Value: p.nowMs()}
}

// retainedPast says the instance's retention ended by now (ms): it reads
// as gone.
func (d *instanceDoc) retainedPast(now int64) bool {
	return d != nil && d.RetainUntil > 0 && d.RetainUntil <= now
}

// retainFrom records when a finished instance leaves, and keeps its TTL
// ending then; an instance that runs again (a new life never does, but a
// document read before its retention was recorded may) keeps neither.
func (d *instanceDoc) retainFrom(now int64, retention time.Duration) {
	switch {
	case d.Status != StatusCompleted && d.Status != StatusFailed:
		d.RetainUntil, d.TTL = 0, 0
	case d.RetainUntil == 0 && retention > 0:
		d.RetainUntil = now + retention.Milliseconds()
	}
	if d.TTL > 0 {
		d.TTL = ttlUntil(d.RetainUntil, now)
	}
}

// ttlUntil is the time to live, in whole seconds rounded up, that ends a
// document written at now no earlier than until (ms); at least a second,
// Cosmos DB's least.
func ttlUntil(until, now int64) int {
	secs := (until - now + 999) / 1000
	return int(min(max(secs, 1), maxTTLSeconds))
}

// retainer gives finished instances' partitions their TTLs after the
// commits that finished them, one partition at a time, in the background,
// so a finishing turn waits for none of it.
type retainer struct {
	p     *CosmosProvider
	queue chan retainRequest
	// lastLook is when the reconciler last looked for finished instances
	// without TTLs (unix ms); it looks every retentionLookInterval.
	lastLook atomic.Int64
}

// retentionLookInterval spaces the reconciler's looks for finished
// instances without TTLs: a query across partitions (a request per
// partition key range), usually empty, so an idle process spends little on
// it however many ranges the container has.
const retentionLookInterval = retentionFollowUpGrace

// lookDue says the reconciler should look now, and counts the look.
func (r *retainer) lookDue(now time.Time) bool {
	last := r.lastLook.Load()
	if now.UnixMilli()-last < retentionLookInterval.Milliseconds() {
		return false
	}
	return r.lastLook.CompareAndSwap(last, now.UnixMilli())
}

type retainRequest struct {
	pk    string
	until int64
}

// retainerQueue bounds what waits for the retainer; a request that finds
// it full is left to the reconciler.
const retainerQueue = 1024

func newRetainer(p *CosmosProvider) *retainer {
	return &retainer{p: p, queue: make(chan retainRequest, retainerQueue)}
}

// add asks for pk's TTLs, without waiting.
func (r *retainer) add(pk string, until int64) {
	select {
	case r.queue <- retainRequest{pk: pk, until: until}:
	default:
	}
}

// run gives the TTLs asked for until ctx ends.
func (r *retainer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-r.queue:
			err := r.p.applyRetention(ctx, req.pk, req.until)
			if errors.Is(err, errRetentionBusy) {
				r.p.log.Debug("cdb: a fetch holds a finished instance; the reconciler gives its documents their time to live", "partition", req.pk)
				continue
			}
			if err != nil && ctx.Err() == nil {
				r.p.log.Warn("cdb: could not give a finished instance's documents their time to live; the reconciler will", "partition", req.pk, "error", err)
			}
		}
	}
}

// retainAfterCommit asks for the TTLs of the instance a commit finished.
func (p *CosmosProvider) retainAfterCommit(before, after *instanceDoc) {
	if p.retainer != nil && after.RetainUntil > 0 && after.TTL == 0 && before.RetainUntil != after.RetainUntil {
		p.retainer.add(after.PK, after.RetainUntil)
	}
}

// applyRetention gives every document of pk without a time to live one
// ending at until, the instance document last. Each batch is fenced by the
// instance document still carrying until and no deletion's mark
// (retainHeld), so a deletion, or a new life of the id, is left alone. A
// document changed or gone since its listing is left to the next round.
func (p *CosmosProvider) applyRetention(ctx context.Context, pk string, until int64) error {
	for round := 0; round < maxDeleteRounds; round++ {
		docs, err := p.documentsToExpire(ctx, pk, until)
		if err != nil {
			return err
		}
		if len(docs) == 0 {
			return p.retainInstanceDoc(ctx, pk, until)
		}
		if err := p.expireDocs(ctx, pk, until, docs); errors.Is(err, errRetentionGone) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return fmt.Errorf("retention of partition %q: documents without a time to live kept appearing", pk)
}

// errRetentionGone says the instance document no longer carries the
// retention being applied: deleted, marked, or a new life.
var errRetentionGone = errors.New("the instance document no longer carries the retention")

// retentionRow is what applyRetention lists of a document.
type retentionRow struct {
	docVersion
	Type     string `json:"type"`
	TTL      int    `json:"ttl"`
	TS       int64  `json:"_ts"` // seconds
	Retained bool   `json:"retained"`
}

// outlives says the document would stay past until (ms): it has no time
// to live (or -1, a staged part made permanent), or one that ends later (a
// tombstone's day, which would refuse the next life's item of its id).
func (r retentionRow) outlives(until int64) bool {
	return !r.Retained && (r.TTL <= 0 || (r.TS+int64(r.TTL))*1000 > until)
}

// documentsToExpire lists pk's documents that would outlive until, but its
// instance document, deletion intents, outboxes and queue items: what the
// instance's commits sent elsewhere is delivered however long it takes (a
// child's completion to its parent), and the relay deletes it then; a
// message or an activity is taken and consumed like any other (an
// activity the finishing turn scheduled still runs), and a write to it
// would take it from the fetch that claims it.
func (p *CosmosProvider) documentsToExpire(ctx context.Context, pk string, until int64) ([]docVersion, error) {
	res, err := p.container.QueryItems(ctx, "SELECT c.id, c._etag, c.type, c.ttl, c._ts, c.retained FROM c WHERE c.pk = @pk",
		[]QueryParameter{{Name: "@pk", Value: pk}}, wholePartitionRead(pk))
	if err != nil {
		return nil, fmt.Errorf("list the documents of a finished instance: %w", err)
	}
	docs := make([]docVersion, 0, len(res.Items))
	for _, raw := range res.Items {
		var r retentionRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("decode document row: %w", err)
		}
		if keptFromRetention(r.Type) || !r.outlives(until) {
			continue
		}
		docs = append(docs, r.docVersion)
	}
	return docs, nil
}

// keptFromRetention says a document of this type is not given the
// retention's TTL.
func keptFromRetention(docType string) bool {
	switch docType {
	case docInstance, docDeletion, docOutbox, docOutboxPart, docMessage, docWork:
		return true
	}
	return false
}

// retainHeld is the fence of a retention batch: it applies only while the
// instance document carries until and no deletion's mark, and no fetch
// holds it (the write would change the ETag its holder's ack is
// conditioned on); it changes nothing of it.
func retainHeld(until, now int64) PatchOperations {
	var ops PatchOperations
	ops.SetCondition(fmt.Sprintf("from c where c.retainUntil = %d and not is_defined(c.deleting) and c.lockedUntil <= %d", until, now))
	ops.AppendSet("/retainUntil", until)
	return ops
}

// errRetentionBusy says a fetch holds the instance document: the
// retention is left to the reconciler, which looks again later.
var errRetentionBusy = errors.New("a fetch holds the instance document")

// fenceFailed tells why a retention's fence did not hold: errRetentionGone
// (deleted, marked, a new life) or errRetentionBusy (held by a fetch).
func (p *CosmosProvider) fenceFailed(ctx context.Context, pk string, until int64) error {
	inst, err := p.readInstanceDoc(ctx, pk)
	switch {
	case err != nil:
		return err
	case inst == nil || inst.RetainUntil != until || inst.Deleting != "":
		return errRetentionGone
	}
	return errRetentionBusy
}

// expireDocs gives the listed versions of pk's documents a time to live
// ending at until, in batches fenced by retainHeld.
func (p *CosmosProvider) expireDocs(ctx context.Context, pk string, until int64, docs []docVersion) error {
	key := NewPartitionKeyString(pk)
	for chunk := range slices.Chunk(docs, MaxBatchOperations-1) {
		chunk = slices.Clone(chunk)
		for len(chunk) > 0 {
			b := p.container.NewTransactionalBatch(key)
			b.PatchItem(instanceDocID, retainHeld(until, p.expiredByMs()), nil)
			// retained tells the TTL from a staged part's, which says its
			// commit has not happened (kvState.add).
			var ttl PatchOperations
			ttl.AppendSet("/ttl", ttlUntil(until, p.nowMs()))
			ttl.AppendSet("/retained", true)
			for _, d := range chunk {
				b.PatchItem(d.ID, ttl, ifListed(d))
			}
			resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil {
				return err
			}
			if resp.Success {
				break
			}
			idx, opErr := resp.FailedOperation()
			switch {
			case idx == 0 && (missingOrChanged(opErr) || IsPreconditionFailed(opErr)):
				return p.fenceFailed(ctx, pk, until)
			case !missingOrChanged(opErr):
				return fmt.Errorf("give documents a time to live: %w", opErr)
			}
			chunk = slices.Delete(chunk, idx-1, idx) // gone or changed since the listing
		}
	}
	return nil
}

// retainInstanceDoc gives the instance document its time to live, last.
func (p *CosmosProvider) retainInstanceDoc(ctx context.Context, pk string, until int64) error {
	ops := retainHeld(until, p.expiredByMs())
	ops.AppendSet("/ttl", ttlUntil(until, p.nowMs()))
	_, err := p.container.PatchItem(ctx, NewPartitionKeyString(pk), instanceDocID, ops, nil)
	switch {
	case IsNotFound(err):
		return nil // deleted meanwhile
	case IsPreconditionFailed(err):
		if err := p.fenceFailed(ctx, pk, until); !errors.Is(err, errRetentionGone) {
			return err
		}
		return nil
	}
	return err
}

// reconcileRetention gives their TTLs to the finished instances whose
// committer did not (it died, or its retainer's queue was full), once
// retentionFollowUpGrace has passed since their last commit. The relay's
// reconciler calls it.
func (p *CosmosProvider) reconcileRetention(ctx context.Context) error {
	cutoff := p.now().Add(-retentionFollowUpGrace).UnixMilli()
	res, err := p.container.QueryItems(ctx,
		"SELECT c.pk, c.retainUntil FROM c WHERE c.type = @type AND IS_DEFINED(c.retainUntil) AND NOT IS_DEFINED(c.ttl) AND c.updatedAt <= @cutoff",
		[]QueryParameter{{Name: "@type", Value: docInstance}, {Name: "@cutoff", Value: cutoff}}, nil)
	if err != nil {
		return fmt.Errorf("query finished instances without a time to live: %w", err)
	}
	for _, raw := range res.Items {
		var row struct {
			PK          string `json:"pk"`
			RetainUntil int64  `json:"retainUntil"`
		}
		if err := json.Unmarshal(raw, &row); err != nil {
			return fmt.Errorf("decode a finished instance: %w", err)
		}
		if err := p.applyRetention(ctx, row.PK, row.RetainUntil); err != nil && !errors.Is(err, errRetentionBusy) {
			return err
		}
	}
	return nil
}

// clearRetained deletes what is left of an instance whose retention ended,
// with its tree, so that a start of its id begins a new life: an ordinary
// deletion of that life, whatever TTLs its documents have.
func (p *CosmosProvider) clearRetained(ctx context.Context, inst *instanceDoc) error {
	if _, err := p.deleteWithIntent(ctx, []string{inst.Instance}, map[string]string{inst.Instance: inst.Life}); err != nil {
		return fmt.Errorf("clear instance %q, whose retention ended: %w", inst.Instance, err)
	}
	return nil
}
