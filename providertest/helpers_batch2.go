package providertest

import (
	"time"

	"github.com/duroxide-go/cdb"
)

// Helpers shared by the multi_execution, queue_semantics, poison_message,
// long_polling and custom_status ports. Names carry a b2 prefix so they
// cannot collide with helpers other ports add to the package.

// b2Event is duroxide's Event::with_event_id(id, instance, execution, None,
// kind): an event stamped with the current time and duroxide version.
func b2Event(eventID uint64, instance string, executionID uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID:         eventID,
		InstanceID:      instance,
		ExecutionID:     executionID,
		TimestampMs:     uint64(time.Now().UnixMilli()),
		DuroxideVersion: "0.1.29",
		Kind:            kind,
	}
}

// b2TestOrchStarted is the OrchestrationStarted kind of a TestOrch 1.0.0
// execution with the given input.
func b2TestOrchStarted(input string) cdb.OrchestrationStarted {
	return cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: input}
}

// b2Activity is an untagged, session-less ActivityExecute.
func b2Activity(instance string, executionID, id uint64, name, input string) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: executionID, ID: id, Name: name, Input: input}
}

// b2Completed is the ActivityCompleted a worker acks activity id with.
func b2Completed(instance string, executionID, id uint64, result string) cdb.ActivityCompletedMessage {
	return cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: executionID, ID: id, Result: result}
}
