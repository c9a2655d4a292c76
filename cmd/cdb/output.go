package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// The JSON that `-o json` prints. Its field names are part of the CLI's
// interface (docs/cli.md lists them): they are the CLI's own, not the
// library's, so a rename in the library does not break a script.

// instanceJSON is one instance in `instances` and the head of `show`.
type instanceJSON struct {
	InstanceID           string     `json:"instance_id"`
	Status               string     `json:"status"`
	OrchestrationName    string     `json:"orchestration_name"`
	OrchestrationVersion string     `json:"orchestration_version"`
	CurrentExecutionID   uint64     `json:"current_execution_id"`
	Output               *string    `json:"output"`
	ParentInstanceID     *string    `json:"parent_instance_id"`
	CreatedAt            *time.Time `json:"created_at"`
	UpdatedAt            *time.Time `json:"updated_at"`
	// Parked is set while a runtime keeps retrying the instance's turn
	// because its code no longer matches its history; null otherwise.
	Parked *parkedJSON `json:"parked"`
}

// parkedJSON is why and since when an instance is parked
// (cdb.ParkedInfo).
type parkedJSON struct {
	Reason  string    `json:"reason"`
	Since   time.Time `json:"since"`
	Count   uint32    `json:"count"`
	RetryAt time.Time `json:"retry_at"`
}

// instancesJSON is `instances -o json`: a page of at most -limit
// instances, newest first.
type instancesJSON struct {
	Instances []instanceJSON `json:"instances"`
	// Next is the -after of the next page, null on the last page.
	Next *string `json:"next"`
	// Scanned counts the instances the store listed for this page; more
	// than the page holds when -name is a pattern matched here.
	Scanned int `json:"scanned"`
}

// showJSON is `show -o json`; history is the current execution's, each
// event in duroxide's JSON form.
type showJSON struct {
	instanceJSON
	CustomStatus *string           `json:"custom_status"`
	Executions   []executionJSON   `json:"executions"`
	History      []cdb.Event       `json:"history"`
	KV           map[string]string `json:"kv"`
}

type executionJSON struct {
	ExecutionID uint64     `json:"execution_id"`
	Status      string     `json:"status"`
	Output      *string    `json:"output"`
	EventCount  int        `json:"event_count"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// metricsJSON is `metrics -o json`.
type metricsJSON struct {
	TotalInstances     uint64 `json:"total_instances"`
	RunningInstances   uint64 `json:"running_instances"`
	CompletedInstances uint64 `json:"completed_instances"`
	FailedInstances    uint64 `json:"failed_instances"`
	TotalExecutions    uint64 `json:"total_executions"`
	TotalEvents        uint64 `json:"total_events"`
	// The queues are what a fetch could take now (due and unlocked), as
	// top's orchestrator_queue and worker_queue count them; the not due
	// are the unlocked items that wait by design (timers, delayed retries,
	// parked messages).
	OrchestratorQueue  int `json:"orchestrator_queue"`
	WorkerQueue        int `json:"worker_queue"`
	OrchestratorNotDue int `json:"orchestrator_not_due"`
	WorkerNotDue       int `json:"worker_not_due"`
	// Outbox is the outbox documents stored (top's outbox).
	Outbox uint64 `json:"outbox"`
	// Held orchestrator messages (cdb.HeldMessages); the oldest in RFC 3339.
	ParkedMessages uint64 `json:"parked_messages"`
	OldestParked   string `json:"oldest_parked,omitempty"`
	PoisonMessages uint64 `json:"poison_messages"`
	OldestPoison   string `json:"oldest_poison,omitempty"`
}

// startJSON is `start -o json`.
type startJSON struct {
	InstanceID        string `json:"instance_id"`
	OrchestrationName string `json:"orchestration_name"`
	// OrchestrationVersion is -version; null lets the runtime's registry
	// decide.
	OrchestrationVersion *string `json:"orchestration_version"`
	// Enqueued is false when the instance existed and -if-exists ignore
	// started nothing; ExistingStatus is then its status.
	Enqueued       bool    `json:"enqueued"`
	ExistingStatus *string `json:"existing_status"`
}

// raiseJSON is `raise -o json`; InstanceStatus is the instance's status
// when the event was sent.
type raiseJSON struct {
	InstanceID     string `json:"instance_id"`
	Event          string `json:"event"`
	Data           string `json:"data"`
	Queue          bool   `json:"queue"`
	InstanceStatus string `json:"instance_status"`
}

// cancelJSON is `cancel -o json`; InstanceStatus is the instance's status
// when the cancellation was requested.
type cancelJSON struct {
	InstanceID     string `json:"instance_id"`
	Reason         string `json:"reason"`
	InstanceStatus string `json:"instance_status"`
}

func instanceToJSON(info cdb.InstanceInfo) instanceJSON {
	return instanceJSON{
		InstanceID:           info.InstanceID,
		Status:               string(info.Status),
		OrchestrationName:    info.OrchestrationName,
		OrchestrationVersion: info.OrchestrationVersion,
		CurrentExecutionID:   info.CurrentExecutionID,
		Output:               info.Output,
		ParentInstanceID:     info.ParentInstanceID,
		CreatedAt:            msTime(info.CreatedAt),
		UpdatedAt:            msTime(info.UpdatedAt),
		Parked:               parkedToJSON(info.Parked),
	}
}

func parkedToJSON(p *cdb.ParkedInfo) *parkedJSON {
	if p == nil {
		return nil
	}
	return &parkedJSON{Reason: p.Reason, Since: p.Since.UTC(), Count: p.Count, RetryAt: p.RetryAt.UTC()}
}

func executionToJSON(e cdb.ExecutionInfo) executionJSON {
	out := executionJSON{
		ExecutionID: e.ExecutionID, Status: string(e.Status), Output: e.Output, EventCount: e.EventCount,
		StartedAt: msTime(e.StartedAt),
	}
	if e.CompletedAt != nil {
		out.CompletedAt = msTime(*e.CompletedAt)
	}
	return out
}

// msTime is a time in ms since the epoch as a UTC time, nil when unset.
func msTime(ms uint64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(int64(ms)).UTC()
	return &t
}

// outputFormat is the -o flag: text (the default) or json.
type outputFormat string

const (
	formatText outputFormat = "text"
	formatJSON outputFormat = "json"
)

func (f *outputFormat) String() string { return string(*f) }

func (f *outputFormat) Set(s string) error {
	switch outputFormat(strings.ToLower(s)) {
	case formatText, formatJSON:
		*f = outputFormat(strings.ToLower(s))
		return nil
	}
	return fmt.Errorf("%q is not one of text, json", s)
}

// registerOutput adds -o to a flag set.
func registerOutput(fs *flag.FlagSet, f *outputFormat) {
	*f = formatText
	fs.Var(f, "o", "output `format`: text or json (json field names are in docs/cli.md)")
}

// writeJSON prints v indented, for people and jq alike.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
