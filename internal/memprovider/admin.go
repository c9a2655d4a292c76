package memprovider

import (
	"context"
	"fmt"
	"sort"

	"github.com/duroxide-go/cdb"
)

// instanceIDs returns every instance id in creation order.
func (p *Provider) instanceIDs() []string {
	ids := make([]string, 0, len(p.instances))
	for id := range p.instances {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return p.instances[ids[i]].seq < p.instances[ids[j]].seq })
	return ids
}

func reversed(ids []string) []string {
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}

// ListInstances returns every instance id, newest first.
func (p *Provider) ListInstances(ctx context.Context) ([]string, error) {
	if err := p.begin(ctx, "ListInstances"); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return reversed(p.instanceIDs()), nil
}

// ListInstancesByStatus returns the instances whose current execution has
// this status, newest first.
func (p *Provider) ListInstancesByStatus(ctx context.Context, status cdb.InstanceStatus) ([]string, error) {
	if err := p.begin(ctx, "ListInstancesByStatus"); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	out := []string{}
	for _, id := range reversed(p.instanceIDs()) {
		if exec := p.currentExecutionRow(id); exec != nil && exec.status == status {
			out = append(out, id)
		}
	}
	return out, nil
}

// ListExecutions returns the execution ids of an instance in ascending order.
func (p *Provider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	if err := p.begin(ctx, "ListExecutions"); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.executionIDs(instance), nil
}

func (p *Provider) executionIDs(instance string) []uint64 {
	ids := []uint64{}
	for id := range p.executions[instance] {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ReadHistoryWithExecutionID has ReadWithExecution's contract.
func (p *Provider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]cdb.Event, error) {
	const op = "ReadHistoryWithExecutionID"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.readExecution(op, instance, executionID)
}

// ReadHistory returns the latest execution's history.
func (p *Provider) ReadHistory(ctx context.Context, instance string) ([]cdb.Event, error) {
	const op = "ReadHistory"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.readExecution(op, instance, p.latestExecution(instance))
}

// LatestExecutionID returns the highest execution id, 1 when there is none.
func (p *Provider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	if err := p.begin(ctx, "LatestExecutionID"); err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	return p.latestExecution(instance), nil
}

// GetInstanceInfo describes an instance and its current execution; an
// unknown instance is a permanent error.
func (p *Provider) GetInstanceInfo(ctx context.Context, instance string) (cdb.InstanceInfo, error) {
	const op = "GetInstanceInfo"
	if err := p.begin(ctx, op); err != nil {
		return cdb.InstanceInfo{}, err
	}
	defer p.mu.Unlock()
	inst := p.instances[instance]
	if inst == nil {
		return cdb.InstanceInfo{}, refuse(op, fmt.Sprintf("Instance %s not found", instance), cdb.ErrInstanceNotFound)
	}
	info := cdb.InstanceInfo{
		InstanceID:           instance,
		OrchestrationName:    inst.name,
		OrchestrationVersion: "unknown",
		CurrentExecutionID:   inst.currentExecution,
		Status:               cdb.StatusUnknown,
		CreatedAt:            uint64(inst.createdAt),
		UpdatedAt:            uint64(inst.updatedAt),
		ParentInstanceID:     cloneString(inst.parent),
		Parked:               cloneParked(inst.parked),
	}
	if inst.version != nil {
		info.OrchestrationVersion = *inst.version
	}
	if exec := p.executions[instance][inst.currentExecution]; exec != nil {
		info.Status = exec.status
		info.Output = cloneString(exec.output)
	}
	return info, nil
}

// GetExecutionInfo describes one execution; a missing one is an error.
func (p *Provider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (cdb.ExecutionInfo, error) {
	const op = "GetExecutionInfo"
	if err := p.begin(ctx, op); err != nil {
		return cdb.ExecutionInfo{}, err
	}
	defer p.mu.Unlock()
	exec := p.executions[instance][executionID]
	if exec == nil {
		return cdb.ExecutionInfo{}, refuse(op, fmt.Sprintf("Execution %d not found for instance %s", executionID, instance), cdb.ErrExecutionNotFound)
	}
	info := cdb.ExecutionInfo{
		ExecutionID: executionID,
		Status:      exec.status,
		Output:      cloneString(exec.output),
		StartedAt:   uint64(exec.startedAt),
		EventCount:  len(p.history[instance][executionID]),
	}
	if exec.completedAt != nil {
		t := uint64(*exec.completedAt)
		info.CompletedAt = &t
	}
	return info, nil
}

// GetSystemMetrics counts instances by the status of their current
// execution, and all executions and events.
func (p *Provider) GetSystemMetrics(ctx context.Context) (cdb.SystemMetrics, error) {
	if err := p.begin(ctx, "GetSystemMetrics"); err != nil {
		return cdb.SystemMetrics{}, err
	}
	defer p.mu.Unlock()
	var m cdb.SystemMetrics
	for id := range p.instances {
		m.TotalInstances++
		if exec := p.currentExecutionRow(id); exec != nil {
			switch exec.status {
			case cdb.StatusRunning:
				m.RunningInstances++
			case cdb.StatusCompleted:
				m.CompletedInstances++
			case cdb.StatusFailed:
				m.FailedInstances++
			}
		}
	}
	for _, execs := range p.executions {
		m.TotalExecutions += uint64(len(execs))
	}
	for _, byExec := range p.history {
		for _, events := range byExec {
			m.TotalEvents += uint64(len(events))
		}
	}
	return m, nil
}

// GetQueueDepths counts the messages of each queue not held by a valid lock.
func (p *Provider) GetQueueDepths(ctx context.Context) (cdb.QueueDepths, error) {
	if err := p.begin(ctx, "GetQueueDepths"); err != nil {
		return cdb.QueueDepths{}, err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	var d cdb.QueueDepths
	for _, r := range p.orchQueue {
		l := p.locks[r.instance]
		if r.lockToken == "" || l == nil || l.token != r.lockToken || l.lockedUntil <= now {
			d.OrchestratorQueue++
		}
	}
	for _, r := range p.workQueue {
		if r.lockToken == "" || r.lockedUntil <= now {
			d.WorkerQueue++
		}
	}
	return d, nil
}

// children returns the direct children of an instance in creation order.
func (p *Provider) children(instance string) []string {
	out := []string{}
	for _, id := range p.instanceIDs() {
		if parent := p.instances[id].parent; parent != nil && *parent == instance {
			out = append(out, id)
		}
	}
	return out
}

// ListChildren returns an instance's direct sub-orchestrations; empty for a
// leaf or an unknown instance.
func (p *Provider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	if err := p.begin(ctx, "ListChildren"); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.children(instance), nil
}

// GetParentID returns the parent of a sub-orchestration, nil for a root; an
// unknown instance is an error.
func (p *Provider) GetParentID(ctx context.Context, instance string) (*string, error) {
	const op = "GetParentID"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	inst := p.instances[instance]
	if inst == nil {
		return nil, refuse(op, fmt.Sprintf("Instance %s not found", instance), cdb.ErrInstanceNotFound)
	}
	return cloneString(inst.parent), nil
}

// tree is the instance followed by all its descendants, breadth first.
func (p *Provider) tree(instance string) cdb.InstanceTree {
	t := cdb.InstanceTree{RootID: instance}
	seen := map[string]bool{}
	pending := []string{instance}
	for len(pending) > 0 {
		id := pending[0]
		pending = pending[1:]
		if seen[id] {
			continue
		}
		seen[id] = true
		t.AllIDs = append(t.AllIDs, id)
		pending = append(pending, p.children(id)...)
	}
	return t
}

// GetInstanceTree returns an instance and all its descendants, root first.
// An unknown instance gives a tree of just that id, as duroxide's default does.
func (p *Provider) GetInstanceTree(ctx context.Context, instance string) (cdb.InstanceTree, error) {
	if err := p.begin(ctx, "GetInstanceTree"); err != nil {
		return cdb.InstanceTree{}, err
	}
	defer p.mu.Unlock()
	return p.tree(instance), nil
}

// DeleteInstancesAtomic deletes exactly these instances and all their data,
// all or nothing.
func (p *Provider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (cdb.DeleteInstanceResult, error) {
	const op = "DeleteInstancesAtomic"
	if err := p.begin(ctx, op); err != nil {
		return cdb.DeleteInstanceResult{}, err
	}
	defer p.mu.Unlock()
	return p.deleteInstancesLocked(op, ids, force)
}

func (p *Provider) deleteInstancesLocked(op string, ids []string, force bool) (cdb.DeleteInstanceResult, error) {
	var res cdb.DeleteInstanceResult
	if len(ids) == 0 {
		return res, nil
	}
	if !force {
		for _, id := range ids {
			if exec := p.currentExecutionRow(id); exec != nil && exec.status == cdb.StatusRunning {
				return res, refuse(op, fmt.Sprintf(
					"Instance %s is still running. Use force=true to delete anyway, or cancel first.", id), cdb.ErrInstanceRunning)
			}
		}
	}
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	// Orphan check: a child left behind would lose its parent.
	for _, id := range p.instanceIDs() {
		if parent := p.instances[id].parent; parent != nil && set[*parent] && !set[id] {
			return res, refuse(op, fmt.Sprintf(
				"Cannot delete: instance %s has child %s that was created after tree traversal. Re-fetch the tree and retry.",
				*parent, id), cdb.ErrOrphanedChild)
		}
	}

	for id := range set {
		for _, events := range p.history[id] {
			res.EventsDeleted += uint64(len(events))
		}
		res.ExecutionsDeleted += uint64(len(p.executions[id]))
		delete(p.history, id)
		delete(p.executions, id)
		delete(p.locks, id) // an in-flight turn can no longer ack and recreate the instance
		delete(p.kvStore, id)
		delete(p.kvDelta, id)
		delete(p.instances, id)
	}
	orch := p.removeOrch(func(r *orchRow) bool { return set[r.instance] })
	work := p.removeWork(func(r *workRow) bool { return set[r.instance] }) // stale workers' acks now fail
	res.QueueMessagesDeleted = uint64(orch + work)
	res.InstancesDeleted = uint64(len(ids))
	return res, nil
}

// DeleteInstance deletes a root instance with its whole tree; a
// sub-orchestration or an unknown instance is an error.
func (p *Provider) DeleteInstance(ctx context.Context, instance string, force bool) (cdb.DeleteInstanceResult, error) {
	const op = "DeleteInstance"
	if err := p.begin(ctx, op); err != nil {
		return cdb.DeleteInstanceResult{}, err
	}
	defer p.mu.Unlock()
	inst := p.instances[instance]
	if inst == nil {
		return cdb.DeleteInstanceResult{}, refuse(op, fmt.Sprintf("Instance %s not found", instance), cdb.ErrInstanceNotFound)
	}
	if inst.parent != nil {
		return cdb.DeleteInstanceResult{}, refuse(op,
			fmt.Sprintf("Cannot delete sub-orchestration %s directly. Delete root instance instead.", instance), cdb.ErrSubOrchestration)
	}
	return p.deleteInstancesLocked(op, p.tree(instance).AllIDs, force)
}

func terminal(status cdb.InstanceStatus) bool { return status.IsTerminal() }

// matches applies an InstanceFilter's id and completed_before criteria to an
// instance whose current execution is exec (nil if missing).
func matches(filter cdb.InstanceFilter, id string, exec *executionRow) bool {
	if filter.InstanceIDs != nil {
		found := false
		for _, want := range *filter.InstanceIDs {
			if want == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if filter.CompletedBefore != nil {
		if exec == nil || exec.completedAt == nil || *exec.completedAt < 0 ||
			uint64(*exec.completedAt) >= *filter.CompletedBefore {
			return false
		}
	}
	return true
}

// DeleteInstanceBulk deletes the terminal root instances matching the
// filter, each with its whole tree; running instances are skipped.
func (p *Provider) DeleteInstanceBulk(ctx context.Context, filter cdb.InstanceFilter) (cdb.DeleteInstanceResult, error) {
	const op = "DeleteInstanceBulk"
	if err := p.begin(ctx, op); err != nil {
		return cdb.DeleteInstanceResult{}, err
	}
	defer p.mu.Unlock()
	var total cdb.DeleteInstanceResult
	limit := int(filter.EffectiveLimit())
	var roots []string
	for _, id := range p.instanceIDs() {
		if len(roots) >= limit {
			break
		}
		exec := p.currentExecutionRow(id)
		if p.instances[id].parent != nil || exec == nil || !terminal(exec.status) || !matches(filter, id, exec) {
			continue
		}
		roots = append(roots, id)
	}
	for _, root := range roots {
		if p.instances[root] == nil {
			continue // already deleted as part of an earlier tree
		}
		res, err := p.deleteInstancesLocked(op, p.tree(root).AllIDs, true)
		if err != nil {
			return total, err
		}
		total = total.Add(res)
	}
	return total, nil
}

// PruneExecutions deletes an instance's old executions and their history,
// never the current one nor a running one; KV is instance-scoped and stays.
func (p *Provider) PruneExecutions(ctx context.Context, instance string, options cdb.PruneOptions) (cdb.PruneResult, error) {
	const op = "PruneExecutions"
	if err := p.begin(ctx, op); err != nil {
		return cdb.PruneResult{}, err
	}
	defer p.mu.Unlock()
	return p.pruneLocked(op, instance, options)
}

func (p *Provider) pruneLocked(op, instance string, options cdb.PruneOptions) (cdb.PruneResult, error) {
	inst := p.instances[instance]
	if inst == nil {
		return cdb.PruneResult{}, refuse(op, fmt.Sprintf("Instance %s not found", instance), cdb.ErrInstanceNotFound)
	}
	ids := p.executionIDs(instance) // ascending
	keep := map[uint64]bool{}
	if options.KeepLast != nil {
		for i := 0; i < int(*options.KeepLast) && i < len(ids); i++ {
			keep[ids[len(ids)-1-i]] = true
		}
	}
	res := cdb.PruneResult{InstancesProcessed: 1}
	for _, id := range ids {
		exec := p.executions[instance][id]
		if id == inst.currentExecution || exec.status == cdb.StatusRunning || keep[id] {
			continue
		}
		if options.CompletedBefore != nil && (exec.completedAt == nil || *exec.completedAt < 0 ||
			uint64(*exec.completedAt) >= *options.CompletedBefore) {
			continue
		}
		res.ExecutionsDeleted++
		res.EventsDeleted += uint64(len(p.history[instance][id]))
		delete(p.history[instance], id)
		delete(p.executions[instance], id)
	}
	return res, nil
}

// PruneExecutionsBulk prunes every instance matching the filter, running
// ones included (long continue-as-new chains).
func (p *Provider) PruneExecutionsBulk(ctx context.Context, filter cdb.InstanceFilter, options cdb.PruneOptions) (cdb.PruneResult, error) {
	const op = "PruneExecutionsBulk"
	if err := p.begin(ctx, op); err != nil {
		return cdb.PruneResult{}, err
	}
	defer p.mu.Unlock()
	var total cdb.PruneResult
	limit := int(filter.EffectiveLimit())
	n := 0
	for _, id := range p.instanceIDs() {
		if n >= limit {
			break
		}
		if !matches(filter, id, p.currentExecutionRow(id)) {
			continue
		}
		n++
		res, err := p.pruneLocked("PruneExecutions", id, options)
		if err != nil {
			return total, err
		}
		total = total.Add(res)
	}
	return total, nil
}
