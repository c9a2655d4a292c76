package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// Instance-level reads: custom status, instance and execution info and
// stats, histories, listings and the instance tree.

// GetCustomStatus returns the custom status when its version is newer than
// lastSeenVersion.
func (p *CosmosProvider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*string, uint64, bool, error) {
	const op = "GetCustomStatus"
	inst, err := p.liveInstanceDoc(ctx, op, instance)
	if err != nil {
		return nil, 0, false, err
	}
	if !inst.exists() || inst.CustomVersion <= lastSeenVersion {
		return nil, 0, false, nil
	}
	return inst.CustomStatus, inst.CustomVersion, true, nil
}

// ReadOrchestrationStatus reads the instance document: one request for an
// instance without a parent (its ancestors are read too, as a deletion of
// one of them hides it).
func (p *CosmosProvider) ReadOrchestrationStatus(ctx context.Context, instance string) (OrchestrationStatus, error) {
	const op = "ReadOrchestrationStatus"
	if err := validateInstanceID(op, instance); err != nil {
		return OrchestrationStatus{}, err
	}
	inst, err := p.readInstance(ctx, instance)
	if err != nil {
		return OrchestrationStatus{}, asOperation(op, err)
	}
	st, err := p.liveStatus(ctx, inst)
	if err != nil {
		return OrchestrationStatus{}, asOperation(op, err)
	}
	return st, nil
}

// liveStatus is the status inst describes (nil: none), unless a deletion
// reaches it; its ancestors are read for that, and its output when stored
// apart.
func (p *CosmosProvider) liveStatus(ctx context.Context, inst *instanceDoc) (OrchestrationStatus, error) {
	if !inst.exists() {
		queued, err := p.readQueuedStart(ctx, inst)
		if err != nil || queued == nil {
			return OrchestrationStatus{}, err
		}
		return queued.status(), nil
	}
	if marked, err := p.deletionReaches(ctx, inst); err != nil || marked {
		return OrchestrationStatus{}, err
	}
	output, err := p.resolveOutput(ctx, inst.PK, inst.Output, inst.OutputRef)
	if err != nil {
		return OrchestrationStatus{}, err
	}
	return statusOfInstance(inst, output), nil
}

// statusOfInstance is the status an instance document describes, with its
// current execution's output (read apart when it is stored apart).
func statusOfInstance(inst *instanceDoc, output *string) OrchestrationStatus {
	status := inst.Status
	if status == "" || status == StatusUnknown {
		status = StatusRunning
	}
	return OrchestrationStatus{
		Found: true, Status: status, Output: output,
		CustomStatus: inst.CustomStatus, CustomStatusVersion: inst.CustomVersion,
		Parked: parkedInfo(inst.Parked),
	}
}

// GetInstanceStats reports the current execution's history size, the merged
// KV view's size and the carried-forward events, with one query; nil for an
// unknown instance.
func (p *CosmosProvider) GetInstanceStats(ctx context.Context, instance string) (*SystemStats, error) {
	const op = "GetInstanceStats"
	inst, err := p.liveInstanceDoc(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	if !inst.exists() {
		return nil, nil
	}
	docs, err := p.queryKV(ctx, inst.PK, max(inst.CurrentExec, InitialExecutionID), inst.KVMerged, allBuckets)
	if err != nil {
		return nil, asOperation(op, err)
	}
	kv, err := kvView(docs, inst.KVMerged)
	if err != nil {
		return nil, asOperation(op, err)
	}
	stats := &SystemStats{}
	execDoc := docs.exec
	if execDoc != nil {
		stats.HistoryEventCount = uint64(execDoc.Events)
		stats.HistorySizeBytes = uint64(execDoc.Bytes)
		stats.QueuePendingCount = uint64(execDoc.CarryForward)
	}
	for _, v := range kv.merged() {
		stats.KVUserKeyCount++
		stats.KVTotalValueBytes += uint64(len(v))
	}
	return stats, nil
}

// ListInstances lists every instance, newest first, queued starts too.
func (p *CosmosProvider) ListInstances(ctx context.Context) ([]string, error) {
	return p.listInstances(ctx, "ListInstances", true, func(instanceRow) bool { return true })
}

// ListInstancesByStatus lists the instances whose current execution has
// status, or the queued starts for StatusQueued.
func (p *CosmosProvider) ListInstancesByStatus(ctx context.Context, status InstanceStatus) ([]string, error) {
	return p.listInstances(ctx, "ListInstancesByStatus", status == StatusQueued, func(r instanceRow) bool { return r.Status == status })
}

// listInstances lists the live instances keep accepts, newest first, and
// with queued the queued starts among them (as StatusQueued): each
// nameless document recording a start costs one point read of its
// message, which tells whether that start is still queued.
func (p *CosmosProvider) listInstances(ctx context.Context, op string, queued bool, keep func(instanceRow) bool) ([]string, error) {
	rows, starts, err := p.liveInstanceDocs(ctx, InstanceFilter{}, queued)
	if err != nil {
		return nil, asOperation(op, err)
	}
	for _, r := range starts {
		start, err := p.readQueuedStart(ctx, &instanceDoc{PK: instancePartitionKey(r.Instance), Instance: r.Instance, StartMsg: r.StartMsg})
		if err != nil {
			return nil, asOperation(op, err)
		}
		if start != nil {
			r.Status = StatusQueued
			rows = append(rows, r)
		}
	}
	// Newest first, and among instances created in the same millisecond by
	// id, as QueryInstances orders them (newerRow): the ranges answer in no
	// set order.
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].CreatedAt != rows[j].CreatedAt {
			return rows[i].CreatedAt > rows[j].CreatedAt
		}
		return rows[i].Instance > rows[j].Instance
	})
	ids := []string{}
	for _, r := range rows {
		if keep(r) {
			ids = append(ids, r.Instance)
		}
	}
	return ids, nil
}

// ListExecutions lists the instance's execution ids, ascending.
func (p *CosmosProvider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	const op = "ListExecutions"
	if err := validateInstanceID(op, instance); err != nil {
		return nil, err
	}
	pk := instancePartitionKey(instance)
	res, err := p.container.QueryItems(ctx, "SELECT VALUE c.exec FROM c WHERE c.pk = @pk AND c.type = @type",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@type", Value: docExecution}}, wholePartitionRead(pk))
	if err != nil {
		return nil, asOperation(op, err)
	}
	execs := make([]uint64, 0, len(res.Items))
	for _, raw := range res.Items {
		var e uint64
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, refuse(op, "decode execution id", err)
		}
		execs = append(execs, e)
	}
	sort.Slice(execs, func(i, j int) bool { return execs[i] < execs[j] })
	return execs, nil
}

// ReadHistoryWithExecutionID is ReadWithExecution.
func (p *CosmosProvider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error) {
	return p.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory is Read.
func (p *CosmosProvider) ReadHistory(ctx context.Context, instance string) ([]Event, error) {
	return p.Read(ctx, instance)
}

// LatestExecutionID is the current execution, 1 for an unknown instance.
func (p *CosmosProvider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	const op = "LatestExecutionID"
	if err := validateInstanceID(op, instance); err != nil {
		return 0, err
	}
	exec, err := p.latestExecution(ctx, instance)
	if err != nil {
		return 0, asOperation(op, err)
	}
	return max(exec, InitialExecutionID), nil
}

// GetInstanceInfo describes an instance; an unknown one is an error.
func (p *CosmosProvider) GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error) {
	const op = "GetInstanceInfo"
	inst, err := p.liveInstanceDoc(ctx, op, instance)
	if err != nil {
		return InstanceInfo{}, err
	}
	if !inst.exists() {
		return p.queuedStartInfo(ctx, op, instance, inst)
	}
	output, err := p.resolveOutput(ctx, inst.PK, inst.Output, inst.OutputRef)
	if err != nil {
		return InstanceInfo{}, asOperation(op, err)
	}
	info := instanceInfoOf(inst)
	info.Output = output
	return info, nil
}

// queuedStartInfo describes an instance without a named document: a
// queued start, or not found.
func (p *CosmosProvider) queuedStartInfo(ctx context.Context, op, instance string, inst *instanceDoc) (InstanceInfo, error) {
	queued, err := p.readQueuedStart(ctx, inst)
	if err != nil {
		return InstanceInfo{}, asOperation(op, err)
	}
	if queued == nil {
		return InstanceInfo{}, refuse(op, fmt.Sprintf("instance %q not found", instance), ErrInstanceNotFound)
	}
	return queued.info(), nil
}

// instanceInfoOf describes an instance from its document, all but its
// output (which may live in a value document).
func instanceInfoOf(inst *instanceDoc) InstanceInfo {
	status := inst.Status
	if status == "" {
		status = StatusUnknown
	}
	return InstanceInfo{
		InstanceID:           inst.Instance,
		OrchestrationName:    inst.Name,
		OrchestrationVersion: derefOr(inst.Version, "unknown"),
		CurrentExecutionID:   max(inst.CurrentExec, InitialExecutionID),
		Status:               status,
		CreatedAt:            uint64(inst.CreatedAt),
		UpdatedAt:            uint64(inst.UpdatedAt),
		ParentInstanceID:     inst.Parent,
		Parked:               parkedInfo(inst.Parked),
	}
}

// GetExecutionInfo describes one execution; an unknown one is an error.
func (p *CosmosProvider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error) {
	const op = "GetExecutionInfo"
	if err := validateInstanceID(op, instance); err != nil {
		return ExecutionInfo{}, err
	}
	resp, err := p.container.ReadItem(ctx, partitionKey(instance), executionDocID(executionID), nil)
	if IsNotFound(err) {
		return ExecutionInfo{}, refuse(op, fmt.Sprintf("execution %d of %q not found", executionID, instance), ErrExecutionNotFound)
	}
	if err != nil {
		return ExecutionInfo{}, asOperation(op, err)
	}
	var d executionDoc
	if err := json.Unmarshal(resp.Value, &d); err != nil {
		return ExecutionInfo{}, refuse(op, "decode execution", err)
	}
	output, err := p.resolveOutput(ctx, d.PK, d.Output, d.OutputRef)
	if err != nil {
		return ExecutionInfo{}, asOperation(op, err)
	}
	info := ExecutionInfo{ExecutionID: d.Exec, Status: d.Status, Output: output, StartedAt: uint64(d.StartedAt), EventCount: d.Events}
	if d.CompletedAt != nil {
		completed := uint64(*d.CompletedAt)
		info.CompletedAt = &completed
	}
	return info, nil
}

// ListChildren lists the instances whose parent is instance; none when the
// instance is being deleted.
func (p *CosmosProvider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	const op = "ListChildren"
	inst, err := p.liveInstanceDoc(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	if inst == nil {
		return []string{}, nil
	}
	res, err := p.container.QueryItems(ctx,
		"SELECT VALUE c.instance FROM c WHERE c.type = @type AND IS_DEFINED(c.name) AND NOT IS_DEFINED(c.deleting) AND c.parent = @parent AND "+liveRetention,
		[]QueryParameter{{Name: "@type", Value: docInstance}, {Name: "@parent", Value: instance}, p.retainNowParam()}, nil)
	if err != nil {
		return nil, asOperation(op, err)
	}
	children := make([]string, 0, len(res.Items))
	for _, raw := range res.Items {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, refuse(op, "decode child id", err)
		}
		children = append(children, id)
	}
	sort.Strings(children)
	return children, nil
}

// GetParentID returns the instance's parent, nil for a root; an unknown
// instance is an error.
func (p *CosmosProvider) GetParentID(ctx context.Context, instance string) (*string, error) {
	const op = "GetParentID"
	inst, err := p.liveInstanceDoc(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	if !inst.exists() {
		queued, err := p.queuedStartInfo(ctx, op, instance, inst)
		if err != nil {
			return nil, err
		}
		return queued.ParentInstanceID, nil
	}
	return inst.Parent, nil
}

// GetInstanceTree is the instance and all its descendants.
func (p *CosmosProvider) GetInstanceTree(ctx context.Context, instance string) (InstanceTree, error) {
	return GetInstanceTreeDefault(ctx, p, instance)
}

// DeleteInstance deletes a root instance and its descendants.
func (p *CosmosProvider) DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error) {
	return DeleteInstanceDefault(ctx, p, instance, force)
}

// liveInstanceDoc validates an instance id and reads its instance document,
// nil when the instance does not exist or is being deleted.
func (p *CosmosProvider) liveInstanceDoc(ctx context.Context, op, instance string) (*instanceDoc, error) {
	if err := validateInstanceID(op, instance); err != nil {
		return nil, err
	}
	inst, err := p.readLiveInstance(ctx, instance)
	if err != nil {
		return nil, asOperation(op, err)
	}
	return inst, nil
}

// readInstanceLatest reads an instance document from its partition's
// primary (nil when there is none), to tell what a write whose response
// was lost did.
func (p *CosmosProvider) readInstanceLatest(ctx context.Context, pk string) (*instanceDoc, error) {
	return decodeInstanceRead(p.readLatest(ctx, NewPartitionKeyString(pk), instanceDocID))
}

// readInstanceDoc point-reads an instance document by partition key; nil
// when there is none.
func (p *CosmosProvider) readInstanceDoc(ctx context.Context, pk string) (*instanceDoc, error) {
	return decodeInstanceRead(p.container.ReadItem(ctx, NewPartitionKeyString(pk), instanceDocID, nil))
}

// decodeInstanceRead turns a point read of an instance document into the
// document with its ETag, nil when there is none.
func decodeInstanceRead(resp ItemResponse, err error) (*instanceDoc, error) {
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var inst instanceDoc
	if err := json.Unmarshal(resp.Value, &inst); err != nil {
		return nil, fmt.Errorf("decode instance document: %w: %w", errUndecodable, err)
	}
	inst.ETag = resp.ETag
	return &inst, nil
}
