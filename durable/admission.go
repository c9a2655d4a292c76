package durable

import (
	"sync"

	"github.com/duroxide-go/cdb"
)

// The continue-as-new admission window (duroxide 0.1.32). Between the
// turn that continues an execution as new and the first turn of its
// successor, messages for the instance can be fetched without the
// ContinueAsNew message that starts the successor: a provider's visibility
// cutoff, an abandon's delay (a runtime without the handler hides the start
// with backoff during a rolling upgrade) or a lock can keep it out of the
// batch. Such a batch reads as the finished execution's, and consuming it
// would lose what the successor must see. So a fetch of an execution that
// continued as new, without its successor's start, gives back the inputs
// that belong to the instance rather than to the finished execution: the
// batch is abandoned with the unregistered-handler backoff, its attempt
// undone (ignore_attempt), until the successor's start comes with them.
// Completions of the finished execution alone are consumed, as before.
// Should the start never come (lost, or set aside as poison), the holds
// count attempts after MaxAttempts of them, so the poison path ends the
// instance instead of holding its inputs for ever.

// awaitsSuccessor reports a batch of an execution that continued as new
// that does not start the successor.
func (b batch) awaitsSuccessor(h historyState) bool {
	return h.continuedAsNew && !h.completed && !h.failed && !b.continueAsNew
}

// holdsInstanceInputs reports whether messages, fetched for the finished
// execution executionID, carry something its successor must see: an event,
// a queue message, a cancellation or a start (for the logical instance, not
// for one execution), or a completion addressed to a later execution.
func holdsInstanceInputs(messages []cdb.WorkItem, executionID uint64) bool {
	for _, msg := range messages {
		switch m := msg.(type) {
		case cdb.QueueEventMessage, cdb.ExternalRaisedMessage, cdb.CancelInstanceMessage, cdb.StartOrchestrationMessage:
			return true
		case cdb.ActivityCompletedMessage:
			if m.ExecutionID > executionID {
				return true
			}
		case cdb.ActivityFailedMessage:
			if m.ExecutionID > executionID {
				return true
			}
		case cdb.TimerFiredMessage:
			if m.ExecutionID > executionID {
				return true
			}
		case cdb.SubOrchestrationCompletedMessage:
			if m.ParentExecutionID > executionID {
				return true
			}
		case cdb.SubOrchestrationFailedMessage:
			if m.ParentExecutionID > executionID {
				return true
			}
		}
	}
	return false
}

// admissionHolds counts, per instance, the batches this runtime gave back
// in a row while waiting for a successor's start; the count spaces the
// holds (backoff doubling) and bounds how long they leave the attempt
// alone.
type admissionHolds struct {
	mu    sync.Mutex
	count map[string]uint32
}

func newAdmissionHolds() *admissionHolds { return &admissionHolds{count: map[string]uint32{}} }

// next counts one more hold of instance and returns how many there were.
func (a *admissionHolds) next(instance string) uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.count[instance]++
	return a.count[instance]
}

// forget ends instance's holds: its successor started, or its batch was
// taken.
func (a *admissionHolds) forget(instance string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.count, instance)
}

// holdForSuccessor gives a batch back to wait for the successor's start:
// after the unregistered-handler backoff of this hold, with its attempt
// undone while the holds stay within MaxAttempts.
func (r *Runtime) holdForSuccessor(item *cdb.OrchestrationItem, token string, attempt uint32) {
	holds := r.admission.next(item.Instance)
	delay := r.opts.unregisteredBackoff(holds)
	ignoreAttempt := holds <= r.opts.MaxAttempts
	r.turnLog(item).Warn("the execution continued as new and its successor's start is not in the batch; giving the instance's inputs back until it comes",
		"messages", len(item.Messages),
		"hold", holds, "attempt", attempt, "backoff", delay, "attempt_counted", !ignoreAttempt)
	r.abandonOrchestration(token, delay, ignoreAttempt)
}
