package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// The admin side: metrics, queue depths and deletion. Counts are taken per
// partition key range and summed here: the gateway refuses aggregates across
// partitions.

// countPerRange sums `SELECT VALUE COUNT(1) FROM c WHERE <where>` over every
// partition key range.
func (p *CosmosProvider) countPerRange(ctx context.Context, where string, params []QueryParameter) (uint64, error) {
	return p.countPerRangeCosting(ctx, where, params, nil)
}

// countPerRangeCosting is countPerRange that adds what its queries cost to
// cost (nil: to nothing).
func (p *CosmosProvider) countPerRangeCosting(ctx context.Context, where string, params []QueryParameter, cost *queryCost) (uint64, error) {
	byRange, err := p.container.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c WHERE "+where, params, nil)
	if err != nil {
		return 0, err
	}
	cost.add(byRange)
	var total uint64
	for _, res := range byRange {
		for _, raw := range res.Items {
			var n uint64
			if err := json.Unmarshal(raw, &n); err != nil {
				return 0, fmt.Errorf("decode count: %w", err)
			}
			total += n
		}
	}
	return total, nil
}

// sumPerRange sums `SELECT VALUE SUM(<expr>) FROM c WHERE <where>` over every
// partition key range.
func (p *CosmosProvider) sumPerRange(ctx context.Context, expr, where string, params []QueryParameter) (uint64, error) {
	byRange, err := p.container.QueryItemsPerRange(ctx, "SELECT VALUE SUM("+expr+") FROM c WHERE "+where, params, nil)
	if err != nil {
		return 0, err
	}
	var total uint64
	for _, res := range byRange {
		for _, raw := range res.Items {
			var n float64
			if err := json.Unmarshal(raw, &n); err != nil {
				return 0, fmt.Errorf("decode sum: %w", err)
			}
			total += uint64(n)
		}
	}
	return total, nil
}

// GetSystemMetrics counts instances by the status of their current
// execution, executions and events.
func (p *CosmosProvider) GetSystemMetrics(ctx context.Context) (SystemMetrics, error) {
	const op = "GetSystemMetrics"
	var m SystemMetrics
	instances := "c.type = @inst AND IS_DEFINED(c.name) AND NOT IS_DEFINED(c.deleting) AND " + liveRetention
	counts := []struct {
		into  *uint64
		where string
		extra []QueryParameter
	}{
		{&m.TotalInstances, instances, nil},
		{&m.RunningInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: StatusRunning}}},
		{&m.CompletedInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: StatusCompleted}}},
		{&m.FailedInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: StatusFailed}}},
		{&m.TotalExecutions, "c.type = @exec", nil},
	}
	for _, c := range counts {
		params := append([]QueryParameter{{Name: "@inst", Value: docInstance}, {Name: "@exec", Value: docExecution}, p.retainNowParam()}, c.extra...)
		n, err := p.countPerRange(ctx, c.where, usedParams(c.where, params))
		if err != nil {
			return SystemMetrics{}, asOperation(op, err)
		}
		*c.into = n
	}
	events, err := p.sumPerRange(ctx, "c.events", "c.type = @exec", []QueryParameter{{Name: "@exec", Value: docExecution}})
	if err != nil {
		return SystemMetrics{}, asOperation(op, err)
	}
	m.TotalEvents = events
	return m, nil
}

// usedParams keeps the parameters the query text names, since Cosmos DB
// refuses unused ones on some versions.
func usedParams(text string, params []QueryParameter) []QueryParameter {
	var out []QueryParameter
	for _, p := range params {
		if containsWord(text, p.Name) {
			out = append(out, p)
		}
	}
	return out
}

func containsWord(text, word string) bool {
	for i := 0; i+len(word) <= len(text); i++ {
		if text[i:i+len(word)] != word {
			continue
		}
		end := i + len(word)
		if end == len(text) || !isIdentByte(text[end]) {
			return true
		}
	}
	return false
}

func isIdentByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// GetQueueDepths counts the unlocked items of each queue.
func (p *CosmosProvider) GetQueueDepths(ctx context.Context) (QueueDepths, error) {
	const op = "GetQueueDepths"
	now := p.nowMs()
	var d QueueDepths
	for _, q := range []struct {
		into    *int
		docType string
	}{{&d.OrchestratorQueue, docMessage}, {&d.WorkerQueue, docWork}} {
		n, err := p.countPerRange(ctx, "c.type = @type AND c.lockedUntil <= @now",
			[]QueryParameter{{Name: "@type", Value: q.docType}, {Name: "@now", Value: now}})
		if err != nil {
			return QueueDepths{}, asOperation(op, err)
		}
		*q.into = int(n)
	}
	return d, nil
}

// HeldMessages counts the orchestrator messages kept out of the queue's way,
// which cost an idle queue nothing: parked messages, waiting for their
// instance's start (or a ContinueAsNew message an outbox still delivers)
// until a deadline, and poison messages, set aside for an operator because
// they never decoded. Oldest is the enqueue time of the oldest of each
// kind; nil when there is none.
type HeldMessages struct {
	Parked       uint64     `json:"parked"`
	OldestParked *time.Time `json:"oldest_parked,omitempty"`
	Poison       uint64     `json:"poison"`
	OldestPoison *time.Time `json:"oldest_poison,omitempty"`
}

// GetHeldMessages counts the parked and the poison orchestrator messages,
// with the oldest of each: one COUNT and MIN query per kind and partition
// key range, summed here. A Cosmos DB-specific report beside the
// contract's metrics, which have no place for them.
func (p *CosmosProvider) GetHeldMessages(ctx context.Context) (HeldMessages, error) {
	h, err := p.heldMessages(ctx, nil)
	return h, asOperation("GetHeldMessages", err)
}

// heldMessages is GetHeldMessages, adding what its queries cost to cost
// (nil: to nothing); the gauges and SampleQueues share it.
func (p *CosmosProvider) heldMessages(ctx context.Context, cost *queryCost) (HeldMessages, error) {
	var h HeldMessages
	for _, k := range []struct {
		count  *uint64
		oldest **time.Time
		where  string
		params []QueryParameter
	}{
		{&h.Parked, &h.OldestParked, "c.type = @type AND IS_DEFINED(c.heldFrom)", []QueryParameter{{Name: "@type", Value: docMessage}}},
		{&h.Poison, &h.OldestPoison, "c.type = @type", []QueryParameter{{Name: "@type", Value: docPoisonMessage}}},
	} {
		n, oldest, err := p.countAndOldestPerRange(ctx, k.where, k.params, cost)
		if err != nil {
			return HeldMessages{}, err
		}
		*k.count, *k.oldest = n, oldest
	}
	return h, nil
}

// countAndOldestPerRange counts the queue documents where says, per
// partition key range, and finds the lowest seq among them: its enqueue
// time is the oldest's.
func (p *CosmosProvider) countAndOldestPerRange(ctx context.Context, where string, params []QueryParameter, cost *queryCost) (uint64, *time.Time, error) {
	n, lowest, err := p.countAndMinPerRange(ctx, "c.seq", where, params, cost)
	if err != nil || lowest == nil {
		return n, nil, err
	}
	oldest := time.UnixMicro(*lowest)
	return n, &oldest, nil
}

// countAndMinPerRange counts the documents where says and finds the lowest
// value of field (an integer path) among them: one COUNT and MIN query per
// partition key range (the gateway refuses aggregates across partitions),
// summed and compared here. lowest is nil when none matched. What the
// queries cost is added to cost (nil: to nothing).
func (p *CosmosProvider) countAndMinPerRange(ctx context.Context, field, where string, params []QueryParameter, cost *queryCost) (n uint64, lowest *int64, err error) {
	byRange, err := p.container.QueryItemsPerRange(ctx, "SELECT COUNT(1) AS n, MIN("+field+") AS lowest FROM c WHERE "+where, params, nil)
	if err != nil {
		return 0, nil, err
	}
	cost.add(byRange)
	for _, res := range byRange {
		for _, raw := range res.Items {
			var row struct {
				N      uint64 `json:"n"`
				Lowest *int64 `json:"lowest"`
			}
			if err := json.Unmarshal(raw, &row); err != nil {
				return 0, nil, fmt.Errorf("decode count and lowest %s: %w", field, err)
			}
			n += row.N
			if row.N > 0 && row.Lowest != nil && (lowest == nil || *row.Lowest < *lowest) {
				lowest = row.Lowest
			}
		}
	}
	return n, lowest, nil
}

// queueBacklog counts the items of a queue (docType) a fetch could take
// now, visible and unlocked, and finds the visibility time (ms) of the
// oldest: one query per partition key range, on the range the queue index
// serves. Unlike GetQueueDepths it leaves out what is not due yet (timers,
// delayed retries, parked messages), which waits by design.
func (p *CosmosProvider) queueBacklog(ctx context.Context, docType string, cost *queryCost) (uint64, *int64, error) {
	now := p.nowMs()
	return p.countAndMinPerRange(ctx, "c.visibleAt", "c.type = @type AND "+visibleCondition+" AND c.lockedUntil <= @now",
		[]QueryParameter{{Name: "@type", Value: docType}, {Name: "@now", Value: now}, {Name: "@visible", Value: p.visibleHorizon(now)}}, cost)
}

// outboxBacklog counts the outbox documents still stored (not yet
// delivered, or delivered and not yet deleted by their relay's next pass)
// and finds the commit time (ms) of the oldest: one query per partition key
// range.
func (p *CosmosProvider) outboxBacklog(ctx context.Context, cost *queryCost) (uint64, *int64, error) {
	return p.countAndMinPerRange(ctx, "c.createdAt", "c.type = @type", []QueryParameter{{Name: "@type", Value: docOutbox}}, cost)
}

// instanceRow is what listings and bulk operations need of an instance.
type instanceRow struct {
	Instance    string         `json:"instance"`
	Parent      *string        `json:"parent"`
	Status      InstanceStatus `json:"status"`
	CompletedAt *int64         `json:"completedAt"`
	CreatedAt   int64          `json:"createdAt"`
	Deleting    string         `json:"deleting"`
	Name        string         `json:"name"`
	StartMsg    string         `json:"startMsg"`
}

// liveInstances lists the named instances the filter's ids and cutoff match,
// with a cross-partition query that only filters and projects (all the
// gateway allows across partitions), leaving out every instance that a
// deletion marked, itself or through an ancestor: a deletion marks its root
// first, so a tree never lists half deleted.
func (p *CosmosProvider) liveInstances(ctx context.Context, filter InstanceFilter) ([]instanceRow, error) {
	rows, _, err := p.liveInstanceDocs(ctx, filter, false)
	return rows, err
}

// liveInstanceDocs is liveInstances, and with nameless the nameless
// instance documents that record a start (queued starts, unless a turn
// consumed them), left out too when a deletion reaches them.
func (p *CosmosProvider) liveInstanceDocs(ctx context.Context, filter InstanceFilter, nameless bool) (named, starts []instanceRow, err error) {
	if filter.InstanceIDs != nil && len(*filter.InstanceIDs) == 0 {
		return nil, nil, nil
	}
	q := "SELECT c.instance, c.parent, c.status, c.completedAt, c.createdAt, c.deleting, c.name, c.startMsg FROM c WHERE c.type = @type AND " + liveRetention
	if !nameless {
		q += " AND IS_DEFINED(c.name)"
	}
	params := []QueryParameter{{Name: "@type", Value: docInstance}, p.retainNowParam()}
	if filter.CompletedBefore != nil {
		q += " AND c.completedAt < @before"
		params = append(params, QueryParameter{Name: "@before", Value: *filter.CompletedBefore})
	}
	res, err := p.container.QueryItems(ctx, q, params, nil)
	if err != nil {
		return nil, nil, err
	}
	byID := map[string]instanceRow{}
	for _, raw := range res.Items {
		var r instanceRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, nil, fmt.Errorf("decode instance row: %w", err)
		}
		byID[r.Instance] = r
	}
	var wanted map[string]bool
	if filter.InstanceIDs != nil {
		wanted = map[string]bool{}
		for _, id := range *filter.InstanceIDs {
			wanted[id] = true
		}
	}
	for id, r := range byID {
		switch {
		case wanted != nil && !wanted[id], markedInTree(byID, r):
		case r.Name != "":
			named = append(named, r)
		case r.StartMsg != "":
			starts = append(starts, r)
		}
	}
	return named, starts, nil
}

// markedInTree reports whether r or one of its ancestors is being deleted.
func markedInTree(byID map[string]instanceRow, r instanceRow) bool {
	seen := map[string]bool{}
	for {
		if r.Deleting != "" {
			return true
		}
		if r.Parent == nil || seen[*r.Parent] {
			return false
		}
		seen[*r.Parent] = true
		parent, ok := byID[*r.Parent]
		if !ok {
			return false
		}
		r = parent
	}
}

// selectInstances lists the live instances the filter and keep match,
// oldest first, up to the filter's limit.
func (p *CosmosProvider) selectInstances(ctx context.Context, filter InstanceFilter, keep func(instanceRow) bool) ([]instanceRow, error) {
	all, err := p.liveInstances(ctx, filter)
	if err != nil {
		return nil, err
	}
	var rows []instanceRow
	for _, r := range all {
		if keep(r) {
			rows = append(rows, r)
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].CreatedAt < rows[j].CreatedAt })
	if limit := int(filter.EffectiveLimit()); len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}

func isTerminal(status InstanceStatus) bool { return status.IsTerminal() }

// DeleteInstanceBulk deletes the terminal root instances the filter matches,
// each with its whole tree. Running instances are skipped.
func (p *CosmosProvider) DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error) {
	const op = "DeleteInstanceBulk"
	var result DeleteInstanceResult
	roots, err := p.selectInstances(ctx, filter, func(r instanceRow) bool { return r.Parent == nil && isTerminal(r.Status) })
	if err != nil {
		return result, asOperation(op, err)
	}
	for _, root := range roots {
		tree, err := p.GetInstanceTree(ctx, root.Instance)
		if err != nil {
			return result, asOperation(op, err)
		}
		r, err := p.DeleteInstancesAtomic(ctx, tree.AllIDs, true)
		if err != nil {
			return result, asOperation(op, err)
		}
		result = result.Add(r)
	}
	return result, nil
}

// executionRow is what pruning needs of an execution.
type executionRow struct {
	docVersion
	Type        string         `json:"type"`
	Exec        uint64         `json:"exec"`
	Status      InstanceStatus `json:"status"`
	CompletedAt *int64         `json:"completedAt"`
	Events      int            `json:"events"`
}

// PruneExecutions deletes old executions and their history: never the
// current execution, never a Running one, and never KV (instance-scoped).
func (p *CosmosProvider) PruneExecutions(ctx context.Context, instance string, options PruneOptions) (PruneResult, error) {
	const op = "PruneExecutions"
	if err := validateInstanceID(op, instance); err != nil {
		return PruneResult{}, err
	}
	inst, err := p.readLiveInstance(ctx, instance)
	if err != nil {
		return PruneResult{}, asOperation(op, err)
	}
	if !inst.exists() {
		return PruneResult{}, refuse(op, fmt.Sprintf("instance %q not found", instance), ErrInstanceNotFound)
	}
	r, err := p.pruneInstance(ctx, inst, options)
	return r, asOperation(op, err)
}

// maxPruneRounds bounds the list-and-delete rounds of one instance's prune.
const maxPruneRounds = 3

// pruneInstance deletes the executions the options doom, in rounds: a
// document changed since its listing (a retention's TTL given meanwhile)
// is listed again and deleted in the next, its execution counted once, as
// long as the instance is the same life.
func (p *CosmosProvider) pruneInstance(ctx context.Context, inst *instanceDoc, options PruneOptions) (PruneResult, error) {
	result := PruneResult{InstancesProcessed: 1}
	counted := map[string]bool{}
	for round := 0; round < maxPruneRounds; round++ {
		if round > 0 {
			again, err := p.readInstanceDoc(ctx, inst.PK)
			if err != nil || again == nil || again.Life != inst.Life {
				return result, err
			}
			inst = again
		}
		changed, err := p.pruneRound(ctx, inst, options, &result, counted)
		if err != nil || changed == 0 {
			return result, err
		}
	}
	return result, nil
}

// pruneRound lists the instance's executions and deletes the doomed ones,
// counting into result what counted has not seen; it reports how many
// listed documents had changed since.
func (p *CosmosProvider) pruneRound(ctx context.Context, inst *instanceDoc, options PruneOptions, result *PruneResult, counted map[string]bool) (int, error) {
	res, err := p.container.QueryItems(ctx,
		"SELECT c.id, c._etag, c.type, c.exec, c.status, c.completedAt, ARRAY_LENGTH(c.eventIds) AS events FROM c WHERE c.pk = @pk AND (c.type = @exe OR c.type = @hist OR c.type = @part OR c.type = @value)",
		[]QueryParameter{{Name: "@pk", Value: inst.PK}, {Name: "@exe", Value: docExecution}, {Name: "@hist", Value: docHistory}, {Name: "@part", Value: docHistPart},
			{Name: "@value", Value: docValue}}, wholePartitionRead(inst.PK))
	if err != nil {
		return 0, err
	}
	var execs, hist []executionRow
	for _, raw := range res.Items {
		var r executionRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return 0, fmt.Errorf("decode execution row: %w", err)
		}
		if r.Type == docExecution {
			execs = append(execs, r)
		} else {
			hist = append(hist, r)
		}
	}
	doomed := pruneCandidates(execs, inst.CurrentExec, options)
	var docs []docVersion
	for _, h := range hist {
		if doomed[h.Exec] {
			docs = append(docs, h.docVersion)
			if !counted[h.ID] {
				counted[h.ID] = true
				result.EventsDeleted += uint64(h.Events)
			}
		}
	}
	for _, e := range execs {
		if doomed[e.Exec] {
			docs = append(docs, e.docVersion) // after its history: a reader never sees history without its execution
			if !counted[e.ID] {
				counted[e.ID] = true
				result.ExecutionsDeleted++
			}
		}
	}
	return p.deleteDocs(ctx, inst.PK, docs)
}

// pruneCandidates applies duroxide's rules: not the
// current execution, not Running, outside the newest keep_last, completed
// before the cutoff.
func pruneCandidates(execs []executionRow, current uint64, options PruneOptions) map[uint64]bool {
	sort.Slice(execs, func(i, j int) bool { return execs[i].Exec > execs[j].Exec })
	keep := 1
	if options.KeepLast != nil && *options.KeepLast > 1 {
		keep = int(*options.KeepLast)
	}
	doomed := map[uint64]bool{}
	for i, e := range execs {
		switch {
		case e.Exec == current, e.Status == StatusRunning, i < keep:
		case options.CompletedBefore != nil && (e.CompletedAt == nil || uint64(*e.CompletedAt) >= *options.CompletedBefore):
		default:
			doomed[e.Exec] = true
		}
	}
	return doomed
}

// docVersion is a document as a query listed it: its id and the ETag of
// the version listed.
type docVersion struct {
	ID   string `json:"id"`
	ETag ETag   `json:"_etag"`
}

// deleteDocs deletes the listed versions of documents of one partition, in
// batches: one already gone is fine, and so is one written again since
// (If-Match). Executions, history and the sequencer have ids that a new
// life of the instance id writes again; a deletion round that listed the
// old life's must never delete the new life's (another process may have
// finished the deletion, and the id started again, in between). It reports
// how many had changed since their listing.
func (p *CosmosProvider) deleteDocs(ctx context.Context, pk string, docs []docVersion) (int, error) {
	key := NewPartitionKeyString(pk)
	changed := 0
	for start := 0; start < len(docs); start += MaxBatchOperations {
		chunk := docs[start:min(start+MaxBatchOperations, len(docs))]
		b := p.container.NewTransactionalBatch(key)
		for _, d := range chunk {
			b.DeleteItem(d.ID, ifListed(d))
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return changed, err
		}
		if resp.Success {
			continue
		}
		if _, err := resp.FailedOperation(); !missingOrChanged(err) {
			return changed, asOperation("delete", batchError(resp))
		}
		// One went away, or changed, meanwhile: the rest one by one.
		for _, d := range chunk {
			var o *ItemOptions
			if d.ETag != "" {
				o = &ItemOptions{IfMatch: &d.ETag}
			}
			switch _, err := p.container.DeleteItem(ctx, key, d.ID, o); {
			case IsPreconditionFailed(err):
				changed++
			case err != nil && !IsNotFound(err):
				return changed, err
			}
		}
	}
	p.cache.drop(pk)
	return changed, nil
}

// ifListed conditions a delete on the version listed.
func ifListed(d docVersion) *TransactionalBatchItemOptions {
	if d.ETag == "" {
		return nil
	}
	return &TransactionalBatchItemOptions{IfMatch: &d.ETag}
}

// PruneExecutionsBulk prunes every instance the filter matches, Running ones
// included (long continue-as-new chains), and sums the results.
func (p *CosmosProvider) PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, options PruneOptions) (PruneResult, error) {
	const op = "PruneExecutionsBulk"
	var total PruneResult
	rows, err := p.selectInstances(ctx, filter, func(instanceRow) bool { return true })
	if err != nil {
		return total, asOperation(op, err)
	}
	for _, row := range rows {
		inst, err := p.readInstance(ctx, row.Instance)
		if err != nil {
			return total, asOperation(op, err)
		}
		if !inst.exists() {
			continue
		}
		r, err := p.pruneInstance(ctx, inst, options)
		if err != nil {
			return total, asOperation(op, err)
		}
		total = total.Add(r)
	}
	return total, nil
}
