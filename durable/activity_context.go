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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
