package durable

import (
	"github.com/duroxide-go/cdb"
)

// Terminal execution statuses as providers store them.
const (
	statusCompleted      = cdb.StatusCompleted
	statusFailed         = cdb.StatusFailed
	statusContinuedAsNew = cdb.StatusContinuedAsNew
)

// executionMetadata computes what the provider stores about a turn from its
// history delta (duroxide's compute_execution_metadata), so the provider
// never interprets events: name, version, parent and pinned duroxide
// version from an OrchestrationStarted (an execution's first turn only),
// status and output from the first terminal event.
func executionMetadata(delta []cdb.Event) cdb.ExecutionMetadata {
	var md cdb.ExecutionMetadata
	for _, ev := range delta {
		switch k := ev.Kind.(type) {
		case cdb.OrchestrationStarted:
			md.OrchestrationName = ptr(k.Name)
			md.OrchestrationVersion = ptr(k.Version)
			md.ParentInstanceID = k.ParentInstance
			if v, err := cdb.ParseSemanticVersion(ev.DuroxideVersion); err == nil {
				md.PinnedDuroxideVersion = &v
			}
		case cdb.OrchestrationCompleted:
			md.Status, md.Output = ptr(statusCompleted), ptr(k.Output)
			return md
		case cdb.OrchestrationFailed:
			md.Status, md.Output = ptr(statusFailed), ptr(k.Details.DisplayMessage())
			return md
		case cdb.OrchestrationContinuedAsNew:
			md.Status, md.Output = ptr(statusContinuedAsNew), ptr(k.Input)
			return md
		}
	}
	return md
}
