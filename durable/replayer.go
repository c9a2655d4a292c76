package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"

	"github.com/duroxide-go/cdb"
)

// Replayer runs orchestration code against recorded histories, in memory,
// so a unit test can tell before a deploy whether the new code still
// replays the instances that are running (Temporal's WorkflowReplayer). A
// history comes from a file `cdb show -o json` wrote, from a store, or from
// the test itself. Each execution is replayed without its terminal event:
// the code must decide every recorded event in order, and end as the
// execution ended (or, for a running one, wait without scheduling anything
// new). The first difference is a *DivergenceError.
type Replayer struct {
	registry *Registry
}

// NewReplayer returns a replayer of the orchestrations registered in
// registry (the code about to be deployed). A history runs the version its
// OrchestrationStarted records.
func NewReplayer(registry *Registry) *Replayer { return &Replayer{registry: registry} }

// DivergenceError is the first place where orchestration code does not
// reproduce a recorded history.
type DivergenceError struct {
	// Instance is the instance the history is of.
	Instance string
	// ExecutionID is the execution the history is of.
	ExecutionID uint64
	// Orchestration is the registered name that was replayed.
	Orchestration string
	// Version is the registered version that was replayed.
	Version string
	// EventIndex is the position in the execution's history (from 0) of
	// the first event the code does not reproduce; the history's length
	// when the code goes on where a running execution's history ends.
	EventIndex int
	// EventID is that event's id, 0 past the end of the history.
	EventID uint64
	// Expected is what the history records there (`activity "Reserve"`,
	// `completed with output "ok"`).
	Expected string
	// Actual is what the code does instead: the first event it adds, or
	// how it ends.
	Actual string
}

// Error names the execution, the place and both sides.
func (e *DivergenceError) Error() string {
	return fmt.Sprintf("durable: %s execution %d (%s %s) diverges from its history at index %d (event %d): history has %s, the code did %s",
		e.Instance, e.ExecutionID, e.Orchestration, e.Version, e.EventIndex, e.EventID, e.Expected, e.Actual)
}

// ReplayHistory replays one execution's history (its OrchestrationStarted
// first, its terminal event last when it ended) and returns nil, a
// *DivergenceError, or an error that kept it from replaying (an empty
// history, an orchestration not registered).
func (r *Replayer) ReplayHistory(ctx context.Context, history []cdb.Event) error {
	if len(history) == 0 {
		return fmt.Errorf("durable: replay: %w: empty history", ErrInvalidInput)
	}
	x, err := r.newExecutionReplay(history)
	if err != nil {
		return err
	}
	return x.replay(ctx)
}

// ReplayFile replays the history in a file written by `cdb show -o json`
// (the instance's current execution).
func (r *Replayer) ReplayFile(ctx context.Context, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("durable: replay file: %w", err)
	}
	var shown struct {
		History []cdb.Event `json:"history"`
	}
	if err := json.Unmarshal(raw, &shown); err != nil {
		return fmt.Errorf("durable: replay file %s: %w", path, err)
	}
	return r.ReplayHistory(ctx, shown.History)
}

// ReplayInstance replays every execution of instance that provider keeps
// (only the latest when the provider has no Admin), oldest first, and
// returns the first divergence.
func (r *Replayer) ReplayInstance(ctx context.Context, provider cdb.Provider, instance string) error {
	histories, err := executionHistories(ctx, provider, instance)
	if err != nil {
		return fmt.Errorf("durable: replay instance %q: %w", instance, err)
	}
	for _, history := range histories {
		if err := r.ReplayHistory(ctx, history); err != nil {
			return err
		}
	}
	return nil
}

// executionHistories reads every execution's history of instance.
func executionHistories(ctx context.Context, provider cdb.Provider, instance string) ([][]cdb.Event, error) {
	admin, ok := provider.Admin()
	if !ok {
		history, err := provider.Read(ctx, instance)
		return [][]cdb.Event{history}, err
	}
	executions, err := admin.ListExecutions(ctx, instance)
	if err != nil {
		return nil, err
	}
	if len(executions) == 0 {
		return nil, cdb.ErrInstanceNotFound
	}
	out := make([][]cdb.Event, 0, len(executions))
	for _, exec := range executions {
		history, err := admin.ReadHistoryWithExecutionID(ctx, instance, exec)
		if err != nil {
			return nil, err
		}
		out = append(out, history)
	}
	return out, nil
}

// executionReplay is one execution being replayed: its history up to the
// terminal event (body) and that event, if it ended.
type executionReplay struct {
	instance string
	exec     uint64
	name     string
	version  string
	fn       OrchestrationFunc
	body     []cdb.Event
	terminal *cdb.Event
}

func (r *Replayer) newExecutionReplay(history []cdb.Event) (*executionReplay, error) {
	started, err := firstStarted(history)
	if err != nil {
		return nil, fmt.Errorf("durable: replay: %w: %w", ErrInvalidInput, err)
	}
	x := &executionReplay{instance: history[0].InstanceID, exec: history[0].ExecutionID, body: history}
	fn, version, ok := r.registry.resolveOrchestration(started.Name, &started.Version)
	if !ok {
		return nil, fmt.Errorf("durable: replay %s execution %d: orchestration %s %s is not registered",
			x.instance, x.exec, started.Name, started.Version)
	}
	x.name, x.version, x.fn = started.Name, version, fn
	if last := history[len(history)-1]; last.IsTerminal() {
		x.body, x.terminal = history[:len(history)-1], &last
	}
	return x, nil
}

// replay replays the body up to the execution's last turn, which the code
// must decide again, and looks for where it diverges only when it does: the
// first prefix the code cannot replay, else where the end differs.
func (x *executionReplay) replay(ctx context.Context) error {
	last := x.lastTurnStart()
	res, err := x.run(ctx, last)
	if err != nil {
		return err
	}
	atEnd := x.compareEnd(last, res)
	if atEnd == nil {
		return nil
	}
	for n := 1; n < last; n++ {
		res, err := x.run(ctx, n)
		if err != nil {
			return err
		}
		if _, diverged := divergence(failedResult(res)); diverged {
			return x.divergenceAt(ctx, n-1)
		}
		if res.State != StateRunning {
			// The code ended where the history goes on.
			if d := x.compareEnd(n, res); d != nil {
				return d
			}
		}
	}
	if _, diverged := divergence(failedResult(res)); diverged {
		return x.divergenceAt(ctx, last-1)
	}
	return atEnd
}

// lastTurnStart is where the decisions of an ended execution's last turn
// begin: after the last event that came to the code (a start, a completion,
// an event, a cancellation). The turn that ended the execution wrote them
// with its end, so replayed up to there the code must decide them again and
// end as recorded; a turn's decisions follow what came to it. A running
// execution is replayed whole, and must decide nothing new.
func (x *executionReplay) lastTurnStart() int {
	if x.terminal == nil {
		return len(x.body)
	}
	for i := len(x.body) - 1; i >= 0; i-- {
		if cameToTheCode(x.body[i].Kind) {
			return i + 1
		}
	}
	return 0
}

// cameToTheCode reports an event that brings the code something (what a
// turn's messages become), as against one the code decided or the turn
// recorded of its own.
func cameToTheCode(kind cdb.EventKind) bool {
	switch kind.(type) {
	case cdb.OrchestrationStarted, cdb.ActivityCompleted, cdb.ActivityFailed, cdb.TimerFired,
		cdb.ExternalEvent, cdb.QueueEventDelivered, cdb.SubOrchestrationCompleted,
		cdb.SubOrchestrationFailed, cdb.OrchestrationCancelRequested:
		return true
	}
	return false
}

// compareEnd compares a replay of the body's first n events that decided
// the rest of it with what the history records from there: the events the
// replay added against the body's rest, one by one, then how it ended
// against the terminal event (or, for a running execution, that it waits).
// It returns the first difference, nil when there is none.
func (x *executionReplay) compareEnd(n int, res ReplayResult) *DivergenceError {
	rest := x.body[n:]
	for k, recorded := range rest {
		if k >= len(res.Delta) {
			d := x.divergence(n+k, describeEvent(recorded.Kind))
			d.Actual = describeOutcome(res)
			return d
		}
		if !sameDecision(recorded.Kind, res.Delta[k].Kind) {
			d := x.divergence(n+k, describeEvent(recorded.Kind))
			d.Actual = describeEvent(res.Delta[k].Kind)
			return d
		}
	}
	beyond := res // what the code did past the history's decisions
	beyond.Delta = res.Delta[len(rest):]
	if x.terminal == nil {
		if len(beyond.Delta) == 0 && res.State == StateRunning {
			return nil
		}
		d := x.divergence(len(x.body), "nothing more (the execution waits)")
		d.Actual = describeDecision(beyond)
		return d
	}
	want, ok := outcomeOf(*x.terminal)
	if ok && len(beyond.Delta) == 0 && want.State == res.State && want.Output == res.Output && errorsEqual(want.Error, res.Error) {
		return nil
	}
	d := x.divergence(len(x.body), describeOutcome(want))
	d.EventID, d.Actual = x.terminal.EventID, describeDecision(beyond)
	return d
}

// sameDecision reports whether a replayed event is the decision the history
// recorded, as a turn's replay matches them (action.matches): a timer by
// its place (its fire time comes from the clock), a custom status by its
// kind, a KV write by key and value, a child by name and input; the rest
// whole.
func sameDecision(recorded, replayed cdb.EventKind) bool {
	switch r := recorded.(type) {
	case cdb.TimerCreated:
		_, ok := replayed.(cdb.TimerCreated)
		return ok
	case cdb.CustomStatusUpdated:
		_, ok := replayed.(cdb.CustomStatusUpdated)
		return ok
	case cdb.KeyValueSet:
		k, ok := replayed.(cdb.KeyValueSet)
		return ok && k.Key == r.Key && k.Value == r.Value
	case cdb.SubOrchestrationScheduled:
		k, ok := replayed.(cdb.SubOrchestrationScheduled)
		return ok && k.Name == r.Name && k.Input == r.Input
	}
	return reflect.DeepEqual(recorded, replayed)
}

// run replays the first n events of the body.
func (x *executionReplay) run(ctx context.Context, n int) (ReplayResult, error) {
	return Replay(ctx, x.instance, x.exec, x.body[:n], nil, x.fn)
}

// failedResult is res as a turn's result, for divergence.
func failedResult(res ReplayResult) turnResult {
	if res.State != StateFailed {
		return turnResult{kind: turnContinue}
	}
	return failed(res.Error)
}

// divergenceAt reports the event at index i, which the code does not
// reproduce: what the code does after the events before it.
func (x *executionReplay) divergenceAt(ctx context.Context, i int) error {
	d := x.divergence(i, describeEvent(x.body[i].Kind))
	if i == 0 {
		d.Actual = "something else"
		return d
	}
	res, err := x.run(ctx, i)
	if err != nil {
		return err
	}
	d.Actual = describeDecision(res)
	return d
}

func (x *executionReplay) divergence(i int, expected string) *DivergenceError {
	d := &DivergenceError{Instance: x.instance, ExecutionID: x.exec, Orchestration: x.name, Version: x.version,
		EventIndex: i, Expected: expected}
	if i < len(x.body) {
		d.EventID = x.body[i].EventID
	}
	return d
}

// outcomeOf is what a terminal event says the execution decided.
func outcomeOf(ev cdb.Event) (ReplayResult, bool) {
	switch k := ev.Kind.(type) {
	case cdb.OrchestrationCompleted:
		return ReplayResult{State: StateCompleted, Output: k.Output}, true
	case cdb.OrchestrationContinuedAsNew:
		return ReplayResult{State: StateContinuedAsNew, Output: k.Input}, true
	case cdb.OrchestrationFailed:
		return ReplayResult{State: StateFailed, Error: k.Details}, true
	}
	return ReplayResult{}, false
}

// describeDecision names what the code did first in a replay: the first
// event it added, else how it ended.
func describeDecision(res ReplayResult) string {
	if len(res.Delta) > 0 {
		return describeEvent(res.Delta[0].Kind)
	}
	return describeOutcome(res)
}

// describeOutcome names how an execution ended, or that it waits.
func describeOutcome(res ReplayResult) string {
	switch res.State {
	case StateCompleted:
		return "completed with output " + strconv.Quote(res.Output)
	case StateContinuedAsNew:
		return "continue-as-new with input " + strconv.Quote(res.Output)
	case StateFailed:
		return "failed: " + res.Error.DisplayMessage()
	}
	return "nothing (it waits)"
}

// errorsEqual compares failures by their JSON form, which is what the
// history records.
func errorsEqual(a, b cdb.ErrorDetails) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errors.Join(errA, errB) == nil && string(ja) == string(jb)
}
