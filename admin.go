package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// The admin side: metrics, queue depths and deletion. Counts across
// partitions are taken per partition key range, where aggregates are
// allowed, and summed here (R4).

// countPerRange sums `SELECT VALUE COUNT(1) FROM c WHERE <where>` over every
// partition key range.
func (p *CosmosProvider) countPerRange(ctx context.Context, where string, params []QueryParameter) (uint64, error) {
	byRange, err := p.container.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c WHERE "+where, params, nil)
	if err != nil {
		return 0, err
	}
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
	const op = "get_system_metrics"
	var m SystemMetrics
	instances := "c.type = @inst AND IS_DEFINED(c.name)"
	counts := []struct {
		into  *uint64
		where string
		extra []QueryParameter
	}{
		{&m.TotalInstances, instances, nil},
		{&m.RunningInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: "Running"}}},
		{&m.CompletedInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: "Completed"}}},
		{&m.FailedInstances, instances + " AND c.status = @s", []QueryParameter{{Name: "@s", Value: "Failed"}}},
		{&m.TotalExecutions, "c.type = @exec", nil},
	}
	for _, c := range counts {
		params := append([]QueryParameter{{Name: "@inst", Value: docInstance}, {Name: "@exec", Value: docExecution}}, c.extra...)
		n, err := p.countPerRange(ctx, c.where, usedParams(c.where, params))
		if err != nil {
			return SystemMetrics{}, wrap(op, err)
		}
		*c.into = n
	}
	events, err := p.sumPerRange(ctx, "c.events", "c.type = @exec", []QueryParameter{{Name: "@exec", Value: docExecution}})
	if err != nil {
		return SystemMetrics{}, wrap(op, err)
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
	const op = "get_queue_depths"
	now := p.nowMs()
	var d QueueDepths
	for _, q := range []struct {
		into    *int
		docType string
	}{{&d.OrchestratorQueue, docMessage}, {&d.WorkerQueue, docWork}} {
		n, err := p.countPerRange(ctx, "c.type = @type AND c.lockedUntil <= @now",
			[]QueryParameter{{Name: "@type", Value: q.docType}, {Name: "@now", Value: now}})
		if err != nil {
			return QueueDepths{}, wrap(op, err)
		}
		*q.into = int(n)
	}
	return d, nil
}

// DeleteInstancesAtomic deletes exactly these instances. Running instances
// need force; an instance whose child is not among ids is refused. Each
// instance's instance document goes first, so no turn in flight can commit
// into a partition being deleted.
func (p *CosmosProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	var result DeleteInstanceResult
	if len(ids) == 0 {
		return result, nil
	}
	wanted := map[string]bool{}
	for _, id := range ids {
		if err := validateInstanceID(op, id); err != nil {
			return result, err
		}
		wanted[id] = true
	}
	for _, id := range ids {
		inst, err := p.readInstance(ctx, id)
		if err != nil {
			return result, wrap(op, err)
		}
		if !force && inst.exists() && inst.Status == "Running" {
			return result, Permanent(op, fmt.Sprintf("instance %q is Running; use force=true to delete it", id))
		}
		children, err := p.ListChildren(ctx, id)
		if err != nil {
			return result, wrap(op, err)
		}
		for _, child := range children {
			if !wanted[child] {
				return result, Permanent(op, fmt.Sprintf("instance %q has child %q, which is not being deleted: delete the whole tree", id, child))
			}
		}
	}
	for _, id := range ids {
		r, err := p.deletePartition(ctx, id)
		if err != nil {
			return result, wrap(op, err)
		}
		result = result.Add(r)
	}
	return result, nil
}

// partitionRow is what deletion needs to know of a document.
type partitionRow struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Events int    `json:"events"`
}

// deletePartition deletes every document of an instance, the instance
// document first, in batches.
func (p *CosmosProvider) deletePartition(ctx context.Context, instance string) (DeleteInstanceResult, error) {
	var result DeleteInstanceResult
	pk := instancePartitionKey(instance)
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx, "SELECT c.id, c.type, ARRAY_LENGTH(c.eventIds) AS events FROM c WHERE c.pk = @pk",
		[]QueryParameter{{Name: "@pk", Value: pk}}, &QueryOptions{PartitionKey: &key})
	if err != nil {
		return result, err
	}
	rows := make([]partitionRow, 0, len(res.Items))
	for _, raw := range res.Items {
		var r partitionRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return result, fmt.Errorf("decode document row: %w", err)
		}
		switch r.Type {
		case docInstance:
			result.InstancesDeleted++
			rows = append([]partitionRow{r}, rows...)
			continue
		case docExecution:
			result.ExecutionsDeleted++
		case docHistory:
			result.EventsDeleted += uint64(r.Events)
		case docMessage, docWork:
			result.QueueMessagesDeleted++
		}
		rows = append(rows, r)
	}
	for start := 0; start < len(rows); start += MaxBatchOperations {
		end := min(start+MaxBatchOperations, len(rows))
		b := p.container.NewTransactionalBatch(key)
		for _, r := range rows[start:end] {
			b.DeleteItem(r.ID, nil)
		}
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return result, err
		}
		if !resp.Success {
			if _, ce, _ := resp.FailedOperation(); ce != nil && ce.StatusCode == http.StatusNotFound {
				continue // deleted meanwhile; the next call converges
			}
			return result, batchFailure("delete_instances_atomic", resp)
		}
	}
	p.cache.drop(pk)
	return result, nil
}

// DeleteInstanceBulk is not implemented yet (issue #4).
func (p *CosmosProvider) DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error) {
	return DeleteInstanceResult{}, errNotYet("delete_instance_bulk")
}

// PruneExecutions is not implemented yet (issue #4).
func (p *CosmosProvider) PruneExecutions(ctx context.Context, instance string, options PruneOptions) (PruneResult, error) {
	return PruneResult{}, errNotYet("prune_executions")
}

// PruneExecutionsBulk is not implemented yet (issue #4).
func (p *CosmosProvider) PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, options PruneOptions) (PruneResult, error) {
	return PruneResult{}, errNotYet("prune_executions_bulk")
}
