package cdb

import "context"

// Priority-based execution: an account with the feature on throttles the
// requests marked Low before the High ones once they pass its RU/s
// (https://aka.ms/CosmosDB/PriorityBasedExecution). A request without the
// header is High. An account without the feature ignores the header, so
// sending it is always safe. The provider marks its background work Low
// (Config.BackgroundPriority) so that a throttled account slows its sweeps
// before its orchestrations; the client also makes Low requests yield to
// the others after a 429 (backgroundbudget.go).

const headerPriorityLevel = "x-ms-cosmos-priority-level"

// PriorityLevel is a request's priority under priority-based execution, by
// the names the azcosmos SDK gives them.
type PriorityLevel string

const (
	// PriorityLevelHigh is every request's priority unless told otherwise.
	PriorityLevelHigh PriorityLevel = "High"
	// PriorityLevelLow requests are throttled first, where the account has
	// priority-based execution on, and wait for the client's 429s to stop
	// (ClientOptions.Background) wherever they go.
	PriorityLevelLow PriorityLevel = "Low"
)

// priorityLevelKey carries a PriorityLevel in a context.
type priorityLevelKey struct{}

// ContextWithPriorityLevel returns ctx whose requests carry level in the
// x-ms-cosmos-priority-level header; "" takes the mark away (no header:
// High).
func ContextWithPriorityLevel(ctx context.Context, level PriorityLevel) context.Context {
	return context.WithValue(ctx, priorityLevelKey{}, level)
}

// priorityLevel is what ContextWithPriorityLevel put on ctx; "" for none.
func priorityLevel(ctx context.Context) PriorityLevel {
	level, _ := ctx.Value(priorityLevelKey{}).(PriorityLevel)
	return level
}
