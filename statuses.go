package cdb

// The statuses of many instances in few requests (StatusesReader): the
// waits of a durable.Client on many instances share one read of them all.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var _ StatusesReader = (*CosmosProvider)(nil)

// maxStatusesPerQuery bounds the instances one query of
// ReadOrchestrationStatuses names, so its text and parameters stay far
// under the service's limits on a query.
const maxStatusesPerQuery = 100

// statusFields are the fields of an instance document a status needs: no
// history, KV or lock, so a query for many instances returns a little of
// each.
const statusFields = "c.pk, c.instance, c.name, c.parent, c.status, c.output, c.outputRef, c.customStatus, c.customStatusVersion, c.parked, c.deleting, c.retainUntil"

// ReadOrchestrationStatuses implements StatusesReader: one query per
// maxStatusesPerQuery instances, sent to the partition key ranges that hold
// them (one request a range), where ReadOrchestrationStatus is a read each.
// A child's ancestors and an output stored apart are read as
// ReadOrchestrationStatus reads them.
func (p *CosmosProvider) ReadOrchestrationStatuses(ctx context.Context, instances []string) (map[string]OrchestrationStatus, error) {
	const op = "ReadOrchestrationStatuses"
	for i, instance := range instances {
		if err := validateInstanceID(op, instance); err != nil {
			return nil, fmt.Errorf("instances[%d]: %w", i, err)
		}
	}
	unique := slices.Clone(instances)
	slices.Sort(unique)
	unique = slices.Compact(unique)
	out := make(map[string]OrchestrationStatus, len(unique))
	for chunk := range slices.Chunk(unique, maxStatusesPerQuery) {
		docs, err := p.queryStatusDocs(ctx, chunk)
		if err != nil {
			return nil, asOperation(op, err)
		}
		for _, instance := range chunk {
			st, err := p.liveStatus(ctx, docs[instancePartitionKey(instance)])
			if err != nil {
				return nil, asOperation(op, err)
			}
			out[instance] = st
		}
	}
	return out, nil
}

// queryStatusDocs reads the status fields of instances' documents, by
// partition key; an instance without one is absent. One instance's is a
// point read, which costs less than a query.
func (p *CosmosProvider) queryStatusDocs(ctx context.Context, instances []string) (map[string]*instanceDoc, error) {
	if len(instances) == 1 {
		inst, err := p.readInstance(ctx, instances[0])
		if err != nil || inst == nil {
			return nil, err
		}
		return map[string]*instanceDoc{inst.PK: inst}, nil
	}
	keys := make([]PartitionKey, len(instances))
	names := make([]string, len(instances))
	params := []QueryParameter{{Name: "@id", Value: instanceDocID}}
	for i, instance := range instances {
		pk := instancePartitionKey(instance)
		keys[i] = NewPartitionKeyString(pk)
		names[i] = "@k" + strconv.Itoa(i)
		params = append(params, QueryParameter{Name: names[i], Value: pk})
	}
	query := "SELECT " + statusFields + " FROM c WHERE c.id = @id AND c.pk IN (" + strings.Join(names, ", ") + ")"
	res, err := p.container.QueryItemsForPartitionKeys(ctx, query, params, keys, nil)
	if err != nil {
		return nil, err
	}
	docs := make(map[string]*instanceDoc, len(res.Items))
	for _, raw := range res.Items {
		var inst instanceDoc
		if err := json.Unmarshal(raw, &inst); err != nil {
			return nil, fmt.Errorf("decode instance document: %w: %w", errUndecodable, err)
		}
		docs[inst.PK] = &inst
	}
	return docs, nil
}
