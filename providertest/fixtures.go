package providertest

import (
	"time"

	"github.com/duroxide-go/cdb"
)

// The events, work items and metadata the tests write, built one way.

// duroxideVersion is the duroxide build the suite's events claim to be
// written by.
const duroxideVersion = "0.1.29"

func ptr[T any](v T) *T { return &v }

// nowMs is wall-clock milliseconds since the Unix epoch, the unit of event
// timestamps.
func nowMs() uint64 { return uint64(time.Now().UnixMilli()) }

// newEvent is event eventID of instance's execution executionID, stamped now
// by duroxideVersion, with no source event.
func newEvent(eventID uint64, instance string, executionID uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     nowMs(),
		DuroxideVersion: duroxideVersion,
		Kind:            kind,
	}
}

// orchestrationStarted is an OrchestrationStarted kind without parent,
// carry-forward events or initial custom status.
func orchestrationStarted(name, version, input string) cdb.OrchestrationStarted {
	return cdb.OrchestrationStarted{Name: name, Version: version, Input: input}
}

// StartItem is the start of a "TestOrch" instance: version "1.0.0", input
// "{}", execution 1.
func StartItem(instance string) cdb.WorkItem {
	return cdb.StartOrchestrationMessage{
		Instance:      instance,
		Orchestration: "TestOrch",
		Input:         "{}",
		Version:       ptr("1.0.0"),
		ExecutionID:   cdb.InitialExecutionID,
	}
}

// StartedEvent is the OrchestrationStarted event (event 1) of a TestOrch
// 1.0.0 execution with input "{}".
func StartedEvent(instance string, executionID uint64) cdb.Event {
	return newEvent(cdb.InitialEventID, instance, executionID, orchestrationStarted("TestOrch", "1.0.0", "{}"))
}

// orchestrationMetadata is ExecutionMetadata with only the name and version
// set.
func orchestrationMetadata(name, version string) cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{OrchestrationName: ptr(name), OrchestrationVersion: ptr(version)}
}

// TestOrchMetadata is the metadata of an instance's first turn.
func TestOrchMetadata() cdb.ExecutionMetadata {
	return orchestrationMetadata("TestOrch", "1.0.0")
}

// activityExecute is an untagged, session-less ActivityExecuteMessage.
func activityExecute(instance string, executionID, id uint64, name, input string) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: executionID, ID: id, Name: name, Input: input}
}

// activityCompleted is the ActivityCompleted a worker acks activity id with.
func activityCompleted(instance string, executionID, id uint64, result string) cdb.ActivityCompletedMessage {
	return cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: executionID, ID: id, Result: result}
}
