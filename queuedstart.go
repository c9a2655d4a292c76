package cdb

import (
	"context"
	"encoding/json"
	"fmt"
)

// A queued start is a start accepted and not yet run: EnqueueStartIfAbsent
// wrote its message beside a nameless instance document that records the
// message's id (startMsg), and no turn has consumed it yet (no process
// runs, or none has come to it). It is a state of its own, StatusQueued,
// that every read tells alike: the start that meets it is refused as
// existing, the status and instance reads describe it from its message,
// and messages sent to it wait for it (parking.go). Its history is empty
// until its first turn.

// queuedStart is a queued start as its message describes it.
type queuedStart struct {
	start    StartOrchestrationMessage
	queuedAt int64 // ms, when the store wrote its message
}

// readQueuedStart reads the start inst records when it is still queued:
// nil for a named instance document, one recording no start, or a start
// whose message a turn consumed (a consumed marker) or that is gone.
func (p *CosmosProvider) readQueuedStart(ctx context.Context, inst *instanceDoc) (*queuedStart, error) {
	if inst == nil || inst.exists() || inst.StartMsg == "" {
		return nil, nil
	}
	res, err := p.readLatest(ctx, NewPartitionKeyString(inst.PK), inst.StartMsg)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	queued, err := decodeQueuedStart(inst.Instance, inst.StartMsg, res.Value)
	if queued != nil && inst.CreatedAt > 0 {
		// The time the listings order it by: the document's, in ms.
		queued.queuedAt = inst.CreatedAt
	}
	return queued, err
}

// decodeQueuedStart decodes a start message document; nil when it is not
// a queued message (a consumed marker or a poison message starts nothing).
// A queued message whose item does not read as a start is still a queued
// start of instance, whose orchestration is unknown here: the fetch that
// takes it decides what it is.
func decodeQueuedStart(instance, id string, value []byte) (*queuedStart, error) {
	var doc struct {
		Type string `json:"type"`
		Item string `json:"item"`
		Ts   int64  `json:"_ts"`
	}
	if err := json.Unmarshal(value, &doc); err != nil {
		return nil, fmt.Errorf("decode start message %s: %w", id, err)
	}
	if doc.Type != docMessage {
		return nil, nil
	}
	queued := &queuedStart{start: StartOrchestrationMessage{Instance: instance}, queuedAt: doc.Ts * 1000}
	if item, err := UnmarshalWorkItem([]byte(doc.Item)); err == nil {
		if start, ok := item.(StartOrchestrationMessage); ok {
			queued.start = start
		}
	}
	return queued, nil
}

// status is the status a queued start reads as.
func (q *queuedStart) status() OrchestrationStatus {
	return OrchestrationStatus{Found: true, Status: StatusQueued}
}

// info is the instance info a queued start reads as: what its message
// names, its first execution, no output.
func (q *queuedStart) info() InstanceInfo {
	return InstanceInfo{
		InstanceID:           q.start.Instance,
		OrchestrationName:    q.start.Orchestration,
		OrchestrationVersion: derefOr(q.start.Version, "unknown"),
		CurrentExecutionID:   InitialExecutionID,
		Status:               StatusQueued,
		CreatedAt:            uint64(max(q.queuedAt, 0)),
		UpdatedAt:            uint64(max(q.queuedAt, 0)),
		ParentInstanceID:     q.start.ParentInstance,
	}
}
