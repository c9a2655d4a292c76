package cdb

import (
	"strings"
	"time"
)

// Management types exchanged through ProviderAdmin (duroxide's
// src/providers/management.rs). Timestamps are milliseconds since the Unix
// epoch; JSON names are the Rust field names.

// InstanceStatus is the status of an execution, and of an instance: its
// current execution's. Its JSON is the bare string, as duroxide stores it.
type InstanceStatus string

// The statuses duroxide stores. A cancelled orchestration is Failed (its
// error says it was cancelled).
const (
	StatusRunning        InstanceStatus = "Running"
	StatusCompleted      InstanceStatus = "Completed"
	StatusFailed         InstanceStatus = "Failed"
	StatusContinuedAsNew InstanceStatus = "ContinuedAsNew"
	// StatusUnknown is reported for an instance with no execution recorded.
	StatusUnknown InstanceStatus = "Unknown"
	// StatusQueued is reported for an instance whose start is accepted and
	// has not run yet (no process runs, or none came to it): its status and
	// instance reads say so, with the orchestration its start names; its
	// history is empty until its first turn; it is deleted with force, as
	// a Running instance is; the listings list it, and select it by this
	// status (InstanceQuery.Statuses, ListInstancesByStatus). It is never
	// stored, and the instance counts (GetSystemMetrics) leave queued
	// starts out (queuedstart.go).
	StatusQueued InstanceStatus = "Queued"
)

// IsTerminal reports whether an execution with this status is over:
// Completed, Failed or ContinuedAsNew.
func (s InstanceStatus) IsTerminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusContinuedAsNew
}

// ParseInstanceStatus returns the status named by s, ignoring case
// ("completed", "RUNNING"); ok is false for any other string.
func ParseInstanceStatus(s string) (status InstanceStatus, ok bool) {
	for _, known := range []InstanceStatus{StatusRunning, StatusCompleted, StatusFailed, StatusContinuedAsNew, StatusUnknown, StatusQueued} {
		if strings.EqualFold(s, string(known)) {
			return known, true
		}
	}
	return "", false
}

// InstanceInfo describes an instance and its current execution.
type InstanceInfo struct {
	InstanceID           string         `json:"instance_id"`
	OrchestrationName    string         `json:"orchestration_name"`
	OrchestrationVersion string         `json:"orchestration_version"` // "unknown" when not stored
	CurrentExecutionID   uint64         `json:"current_execution_id"`
	Status               InstanceStatus `json:"status"` // the current execution's status
	Output               *string        `json:"output"`
	CreatedAt            uint64         `json:"created_at"` // milliseconds since the Unix epoch
	UpdatedAt            uint64         `json:"updated_at"` // milliseconds since the Unix epoch
	ParentInstanceID     *string        `json:"parent_instance_id"`
	// Parked is set while a runtime keeps retrying the instance's turn
	// because its code no longer matches the history (ParkRecorder); nil
	// otherwise. It is this module's own: duroxide's JSON has no such field.
	Parked *ParkedInfo `json:"-"`
}

// ParkedInfo is what the store holds of a parked instance (ParkRecorder).
type ParkedInfo struct {
	// Reason is why the runtime parked it: the nondeterminism message.
	Reason string
	// Since is when the first of the parks in a row was recorded.
	Since time.Time
	// Count is the number of parks in a row (1 at the first).
	Count uint32
	// RetryAt is when the parked batch is due again.
	RetryAt time.Time
}

// OrchestrationStatus is what StatusReader reads of an instance.
type OrchestrationStatus struct {
	Found  bool           // false: no such instance (yet)
	Status InstanceStatus // of the current execution; StatusRunning until it ends
	// Output is the current execution's output once it ended: Completed,
	// the output; Failed, the error's display message; ContinuedAsNew, the
	// next execution's input.
	Output *string
	// CustomStatus is the status the orchestration last set (nil: none);
	// CustomStatusVersion counts its changes (0: never set).
	CustomStatus        *string
	CustomStatusVersion uint64
	// Parked is InstanceInfo.Parked: set while the instance is parked.
	Parked *ParkedInfo
}

// ExecutionInfo describes one execution.
type ExecutionInfo struct {
	ExecutionID uint64         `json:"execution_id"`
	Status      InstanceStatus `json:"status"`
	Output      *string        `json:"output"`
	StartedAt   uint64         `json:"started_at"`   // milliseconds since the Unix epoch
	CompletedAt *uint64        `json:"completed_at"` // milliseconds since the Unix epoch; nil while running
	EventCount  int            `json:"event_count"`
}

// SystemMetrics counts instances by the status of their current execution.
type SystemMetrics struct {
	TotalInstances     uint64 `json:"total_instances"`
	TotalExecutions    uint64 `json:"total_executions"`
	RunningInstances   uint64 `json:"running_instances"`
	CompletedInstances uint64 `json:"completed_instances"`
	FailedInstances    uint64 `json:"failed_instances"`
	TotalEvents        uint64 `json:"total_events"`
}

// QueueDepths counts unlocked messages per queue. TimerQueue is always 0:
// timers are delayed orchestrator messages, not a queue of their own.
type QueueDepths struct {
	OrchestratorQueue int `json:"orchestrator_queue"`
	WorkerQueue       int `json:"worker_queue"`
	TimerQueue        int `json:"timer_queue"`
}

// InstanceFilter selects instances for bulk operations; its criteria are ANDed.
type InstanceFilter struct {
	// InstanceIDs restricts the candidates: nil means any instance, an empty
	// list means none.
	InstanceIDs *[]string `json:"instance_ids"`
	// CompletedBefore keeps instances whose current execution completed
	// before this time, in milliseconds since the Unix epoch.
	CompletedBefore *uint64 `json:"completed_before"`
	// Limit caps how many instances are touched; nil means
	// DefaultInstanceFilterLimit.
	Limit *uint32 `json:"limit"`
}

// EffectiveLimit returns Limit, or DefaultInstanceFilterLimit when unset.
func (f InstanceFilter) EffectiveLimit() uint32 {
	if f.Limit == nil {
		return DefaultInstanceFilterLimit
	}
	return *f.Limit
}

// PruneOptions selects the executions to prune; its criteria are ANDed. The
// current execution always survives, so a nil KeepLast, 0 and 1 all keep
// only the current execution.
type PruneOptions struct {
	KeepLast        *uint32 `json:"keep_last"`
	CompletedBefore *uint64 `json:"completed_before"` // milliseconds since the Unix epoch
}

// DeleteInstanceResult counts what a deletion removed.
type DeleteInstanceResult struct {
	InstancesDeleted     uint64 `json:"instances_deleted"`
	ExecutionsDeleted    uint64 `json:"executions_deleted"`
	EventsDeleted        uint64 `json:"events_deleted"`
	QueueMessagesDeleted uint64 `json:"queue_messages_deleted"` // orchestrator plus worker rows
}

// Add returns the sum of two results, for aggregating bulk deletions.
func (r DeleteInstanceResult) Add(other DeleteInstanceResult) DeleteInstanceResult {
	return DeleteInstanceResult{
		InstancesDeleted:     r.InstancesDeleted + other.InstancesDeleted,
		ExecutionsDeleted:    r.ExecutionsDeleted + other.ExecutionsDeleted,
		EventsDeleted:        r.EventsDeleted + other.EventsDeleted,
		QueueMessagesDeleted: r.QueueMessagesDeleted + other.QueueMessagesDeleted,
	}
}

// PruneResult counts what pruning removed.
type PruneResult struct {
	InstancesProcessed uint64 `json:"instances_processed"`
	ExecutionsDeleted  uint64 `json:"executions_deleted"`
	EventsDeleted      uint64 `json:"events_deleted"`
}

// Add returns the sum of two results, for aggregating bulk pruning.
func (r PruneResult) Add(other PruneResult) PruneResult {
	return PruneResult{
		InstancesProcessed: r.InstancesProcessed + other.InstancesProcessed,
		ExecutionsDeleted:  r.ExecutionsDeleted + other.ExecutionsDeleted,
		EventsDeleted:      r.EventsDeleted + other.EventsDeleted,
	}
}

// InstanceTree is a root instance and all its descendants; AllIDs includes
// the root.
type InstanceTree struct {
	RootID string   `json:"root_id"`
	AllIDs []string `json:"all_ids"`
}

// IsRootOnly reports whether the instance has no sub-orchestrations.
func (t InstanceTree) IsRootOnly() bool { return len(t.AllIDs) == 1 }

// Size is the number of instances in the tree, root included.
func (t InstanceTree) Size() int { return len(t.AllIDs) }
