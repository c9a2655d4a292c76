package durable

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/duroxide-go/cdb"
)

// ReplayResult is what one replayed turn decided (duroxide's TurnResult and
// the engine's history delta), for checks that a recorded history replays
// identically (the provider validation suite runs them).
type ReplayResult struct {
	// State is StateRunning when the orchestration waits for more work,
	// else how the execution ended: StateCompleted, StateFailed or
	// StateContinuedAsNew.
	State State
	// Output is the output (StateCompleted) or the next execution's input
	// (StateContinuedAsNew).
	Output string
	// Error is why the execution failed (StateFailed), including a
	// cancellation.
	Error cdb.ErrorDetails
	// Delta are the events the turn appends to the history, in order: the
	// messages' completions, then what the code scheduled or cancelled,
	// then, when the execution ends, what it still waited for, cancelled
	// (its open subscriptions, its outstanding activities). The terminal
	// event is not among them. A running execution's history replayed
	// without new messages yields none. A turn stops replaying where the
	// code ends, as duroxide's does, so the history of an execution that
	// ended, replayed without its terminal event, yields the decisions of
	// the turn that ended it again: a Replayer replays such a history.
	Delta []cdb.Event
}

// Replay runs one turn of an execution in memory, as a dispatcher would
// with history (the execution's events, its OrchestrationStarted first)
// and messages (a fetched batch's completions), and reports what the code
// decided. It calls no provider and writes nothing.
func Replay(ctx context.Context, instance string, executionID uint64, history []cdb.Event, messages []cdb.WorkItem, fn OrchestrationFunc) (ReplayResult, error) {
	started, err := firstStarted(history)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("durable: replay %s execution %d: %w", instance, executionID, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := newReplayEngine(instance, executionID, history, len(history), nil, time.Now, log)
	e.prepCompletions(messages)
	id := orchestrationIdentity{instance: instance, executionID: executionID, name: started.Name, version: started.Version}
	res, err := e.execute(ctx, fn, started.Input, id)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("durable: replay %s execution %d: %w", instance, executionID, err)
	}
	if res.kind != turnContinue {
		e.appendTerminalBreadcrumbs(res.kind)
	}
	out := ReplayResult{State: StateRunning, Delta: e.delta}
	switch res.kind {
	case turnCompleted:
		out.State, out.Output = StateCompleted, res.output
	case turnContinueAsNew:
		out.State, out.Output = StateContinuedAsNew, res.input
	case turnFailed:
		out.State, out.Error = StateFailed, res.details
	case turnCancelled:
		out.State, out.Error = StateFailed, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: res.reason}}
	}
	return out, nil
}
