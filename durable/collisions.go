package durable

import (
	"context"
	"fmt"

	"github.com/duroxide-go/cdb"
)

// collisionNotices are the failures owed to the parents whose child starts
// in this batch name an instance that already exists. Such a start is never
// run (a finished instance takes no more turns, a running one keeps the
// start it has), so without a notice its parent would wait forever. As in
// duroxide (0.1.30 for a finished instance, 0.1.32 for a running one) the
// parent gets SubOrchestrationFailedMessage with an application error whose message says
// the id already exists. The one start that is not a collision is the
// running child's own parent sending the same call again: the same parent
// instance and event id, and a parent execution both name and agree on;
// a start without that execution (written by 0.1.29) cannot show it is the
// same call.
func (r *Runtime) collisionNotices(ctx context.Context, item *cdb.OrchestrationItem, h historyState, b batch) []cdb.WorkItem {
	finished := h.completed || h.failed
	var notices []cdb.WorkItem
	for _, msg := range item.Messages {
		s, ok := msg.(cdb.StartOrchestrationMessage)
		if !ok || s.ParentInstance == nil || s.ParentID == nil {
			continue // a client's duplicate start has no one to tell
		}
		if creating, ok := b.start.(cdb.StartOrchestrationMessage); ok && h.started == nil && creating == s {
			continue // the start that creates the instance
		}
		if !finished && sameCall(b.parent, s) {
			continue // the running child's own call, delivered again
		}
		message := fmt.Sprintf("sub-orchestration instance id '%s' already exists", item.Instance)
		if finished {
			message += " and is terminal"
		}
		r.turnLog(item).Warn("a sub-orchestration's instance id already exists; failing its parent's call",
			"parent", *s.ParentInstance, "parent_id", *s.ParentID, "finished", finished)
		parent := newParentLink(s.ParentInstance, s.ParentID, s.ParentExecutionID)
		notices = append(notices, cdb.SubOrchestrationFailedMessage{
			ParentInstance:    parent.instance,
			ParentExecutionID: parentExecutionOf(ctx, parent, item.Instance, r.parentExecution),
			ParentID:          parent.eventID,
			Details:           cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: message},
		})
	}
	return notices
}

// sameCall reports whether a child start repeats the call of owner, the
// parent the running instance reports to.
func sameCall(owner *parentLink, s cdb.StartOrchestrationMessage) bool {
	return owner != nil && owner.instance == *s.ParentInstance && owner.eventID == *s.ParentID &&
		owner.executionID != nil && s.ParentExecutionID != nil && *owner.executionID == *s.ParentExecutionID
}
