package durable

import (
	"context"
	"time"
)

// ActivityContext is what an activity runs with. Its context.Context is
// cancelled when the activity should stop: its worker lock was lost (the
// orchestration ended or cancelled it) or the runtime is stopping.
type ActivityContext struct {
	context.Context

	instance    string
	executionID uint64
	activityID  uint64
	name        string
	sessionID   *string
	tag         *string
	workerID    string
	attempt     uint32 // the retry policy's attempt, 1 without a policy
	delivery    uint32 // the provider's delivery of this item, 1 for the first
	client      *Client
	clock       func() time.Time
}

// InstanceID is the instance of the orchestration that scheduled the activity.
func (a ActivityContext) InstanceID() string { return a.instance }

// ExecutionID is the execution that scheduled the activity.
func (a ActivityContext) ExecutionID() uint64 { return a.executionID }

// ActivityID is the id of the activity's ActivityScheduled event.
func (a ActivityContext) ActivityID() uint64 { return a.activityID }

// ActivityName is the name the activity was scheduled under.
func (a ActivityContext) ActivityName() string { return a.name }

// SessionID is the session the activity was scheduled on, "" for none.
func (a ActivityContext) SessionID() string { return deref(a.sessionID) }

// Tag is the activity's routing tag, "" for none.
func (a ActivityContext) Tag() string { return deref(a.tag) }

// Attempt is the attempt of its retry policy this run belongs to: 1 for
// the first, 2 for the policy's first retry, and so on; 1 for an activity
// scheduled without a policy. It is the number an operator reads in `cdb
// show`'s timeline and in the durable.activity.attempt metric attribute.
func (a ActivityContext) Attempt() int { return int(max(a.attempt, 1)) }

// Delivery counts the runs of this one attempt: 1 for the first; more when
// an earlier run ended without its result stored (its process stopped, lost
// its lock, or gave it back), so the activity runs again, at least once.
func (a ActivityContext) Delivery() int { return int(max(a.delivery, 1)) }

// WorkerID identifies the worker slot running the activity.
func (a ActivityContext) WorkerID() string { return a.workerID }

// Client is a client on the runtime's provider, for activities that manage
// orchestrations (start, signal, prune, ...).
func (a ActivityContext) Client() *Client { return a.client }

func (a ActivityContext) now() time.Time {
	if a.clock == nil {
		return time.Now()
	}
	return a.clock()
}

func deref32(v *uint32) uint32 {
	if v == nil {
		return 0
	}
	return *v
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
