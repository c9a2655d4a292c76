package durable

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// approvedOrder runs the original Order workflow on a new in-memory store
// until it completes, and returns the store.
func approvedOrder(t *testing.T) cdb.Provider {
	p := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = p.Close() })
	h := deployment(t, p, "Reserve")
	h.start("order", "Order", "42")
	h.waitForHistory("order", hasEvent[cdb.ExternalSubscribed])
	require.NoError(t, h.client.RaiseEvent(h.ctx, "order", "approve", "yes"))
	require.Equal(t, "approved yes", h.completed("order"))
	require.NoError(t, h.rt.Shutdown(context.Background()))
	return p
}

// orderRegistry registers Order with code, as a test of a deploy would.
func orderRegistry(t *testing.T, code OrchestrationFunc) *Registry {
	r := NewRegistry()
	require.NoError(t, r.RegisterOrchestration("Order", code))
	return r
}

func TestReplayerReplaysTheSameCodeClean(t *testing.T) {
	p := approvedOrder(t)
	replayer := NewReplayer(orderRegistry(t, reserveThenApprove("Reserve")))
	require.NoError(t, replayer.ReplayInstance(context.Background(), p, "order"))

	history, err := NewClient(p).ReadHistory(context.Background(), "order")
	require.NoError(t, err)
	require.NoError(t, replayer.ReplayHistory(context.Background(), history))
	running := history[:len(history)-2] // before the approval: the execution waits
	require.IsType(t, cdb.ExternalSubscribed{}, running[len(running)-1].Kind)
	require.NoError(t, replayer.ReplayHistory(context.Background(), running))
}

// A changed first activity diverges at the history's second event (index
// 1, event 2), the recorded schedule.
func TestReplayerReportsTheFirstDivergence(t *testing.T) {
	p := approvedOrder(t)
	err := NewReplayer(orderRegistry(t, reserveThenApprove("Charge"))).ReplayInstance(context.Background(), p, "order")
	var d *DivergenceError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, &DivergenceError{Instance: "order", ExecutionID: 1, Orchestration: "Order", Version: "1.0.0",
		EventIndex: 1, EventID: 2, Expected: `activity "Reserve"`, Actual: `activity "Charge"`}, d)
	assert.EqualError(t, err, `durable: order execution 1 (Order 1.0.0) diverges from its history at index 1 (event 2): history has activity "Reserve", the code did activity "Charge"`)
}

// Code that does more than the history records diverges where the history
// ends the execution; code that returns early, where it did something else.
func TestReplayerReportsCodeThatDoesMoreOrLess(t *testing.T) {
	p := approvedOrder(t)
	history, err := NewClient(p).ReadHistory(context.Background(), "order")
	require.NoError(t, err)
	end := len(history) - 1

	audits := orderRegistry(t, func(ctx *OrchestrationContext, input string) (string, error) {
		out, err := reserveThenApprove("Reserve")(ctx, input)
		if err != nil {
			return "", err
		}
		_, err = ctx.ScheduleActivity("Audit", out).Await()
		return out, err
	})
	var d *DivergenceError
	require.ErrorAs(t, NewReplayer(audits).ReplayHistory(context.Background(), history), &d)
	assert.Equal(t, end, d.EventIndex)
	assert.Equal(t, history[end].EventID, d.EventID)
	assert.Equal(t, `completed with output "approved yes"`, d.Expected)
	assert.Equal(t, `activity "Audit"`, d.Actual)

	skips := orderRegistry(t, func(ctx *OrchestrationContext, input string) (string, error) { return "skipped", nil })
	require.ErrorAs(t, NewReplayer(skips).ReplayHistory(context.Background(), history), &d)
	assert.Equal(t, 1, d.EventIndex)
	assert.Equal(t, `activity "Reserve"`, d.Expected)
	assert.Equal(t, `completed with output "skipped"`, d.Actual)
}

func TestReplayerRefusesAnUnregisteredOrchestration(t *testing.T) {
	p := approvedOrder(t)
	err := NewReplayer(NewRegistry()).ReplayInstance(context.Background(), p, "order")
	assert.EqualError(t, err, "durable: replay order execution 1: orchestration Order 1.0.0 is not registered")
}

// Every history of the recorded corpus (every version's) replays clean on
// the code that wrote it.
func TestReplayerReplaysTheRecordedCorpus(t *testing.T) {
	registry := NewRegistry()
	require.NoError(t, registry.RegisterOrchestration("Competition", competition))
	for _, w := range recordedWorkloads() {
		require.NoError(t, registry.RegisterOrchestration(w.name, w.fn))
	}
	replayer := NewReplayer(registry)
	files, err := filepath.Glob(filepath.Join("testdata", "recorded", "*", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		var rec recordedInstance
		require.NoError(t, json.Unmarshal(raw, &rec))
		for exec, history := range rec.Executions {
			assert.NoError(t, replayer.ReplayHistory(context.Background(), history), "%s execution %d", file, exec)
		}
	}
}

// recordedEnd runs code as orchestration "Shape" on a new in-memory store
// until it ends, and returns its history and a replayer of other code.
func recordedEnd(t *testing.T, code OrchestrationFunc) ([]cdb.Event, func(OrchestrationFunc) *Replayer) {
	p := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = p.Close() })
	h := newHarness(t, p)
	h.activity("Reserve", func(_ ActivityContext, input string) (string, error) { return input, nil })
	h.orchestration("Shape", code)
	h.run()
	h.start("shape", "Shape", "42")
	h.wait("shape")
	history, err := h.client.ReadHistory(h.ctx, "shape")
	require.NoError(t, err)
	return history, func(code OrchestrationFunc) *Replayer {
		r := NewRegistry()
		require.NoError(t, r.RegisterOrchestration("Shape", code))
		return NewReplayer(r)
	}
}

// reserveThenStatus reserves, sets its custom status to status in the turn
// that ends it (none when status is ""), and completes.
func reserveThenStatus(status string) OrchestrationFunc {
	return func(ctx *OrchestrationContext, input string) (string, error) {
		out, err := ctx.ScheduleActivity("Reserve", input).Await()
		if err != nil {
			return "", err
		}
		if status != "" {
			ctx.SetCustomStatus(&status)
		}
		return out, nil
	}
}

// A custom status set in the turn that ends the execution is one of that
// turn's decisions: the same code replays clean. The replayer reported a
// divergence at the status event, since the replay stopped where the code
// returned and the status came out again as a new decision.
func TestReplayerReplaysAStatusSetInTheTurnThatEndsTheExecution(t *testing.T) {
	history, replayerOf := recordedEnd(t, reserveThenStatus("done"))
	require.IsType(t, cdb.CustomStatusUpdated{}, history[len(history)-2].Kind)
	require.NoError(t, replayerOf(reserveThenStatus("done")).ReplayHistory(context.Background(), history))
	require.NoError(t, replayerOf(reserveThenStatus("other")).ReplayHistory(context.Background(), history),
		"a status is matched by its kind, as a turn's replay matches it")
}

// Code that no longer sets the status the last turn recorded diverges
// there (the replayer passed it: the replay stopped where the code
// returned, before the status event); code that sets one more diverges
// where the history ends the execution.
func TestReplayerReportsALastTurnThatDecidesLessOrMore(t *testing.T) {
	history, replayerOf := recordedEnd(t, reserveThenStatus("done"))
	statusAt := len(history) - 2
	var d *DivergenceError
	require.ErrorAs(t, replayerOf(reserveThenStatus("")).ReplayHistory(context.Background(), history), &d)
	assert.Equal(t, &DivergenceError{Instance: "shape", ExecutionID: 1, Orchestration: "Shape", Version: "1.0.0",
		EventIndex: statusAt, EventID: history[statusAt].EventID, Expected: "CustomStatusUpdated", Actual: `completed with output "42"`}, d)

	more := func(ctx *OrchestrationContext, input string) (string, error) {
		out, err := reserveThenStatus("done")(ctx, input)
		ctx.SetKV("audited", "yes")
		return out, err
	}
	require.ErrorAs(t, replayerOf(more).ReplayHistory(context.Background(), history), &d)
	end := len(history) - 1
	assert.Equal(t, &DivergenceError{Instance: "shape", ExecutionID: 1, Orchestration: "Shape", Version: "1.0.0",
		EventIndex: end, EventID: history[end].EventID, Expected: `completed with output "42"`, Actual: "KeyValueSet"}, d)
}

// An execution that ends with an activity it never awaited records that
// activity's cancellation before its end, as it records the waits still
// open: the replay decides them as the ending turn did.
func TestReplayerReplaysWhatAnEndingTurnCancelled(t *testing.T) {
	fireAndForget := func(ctx *OrchestrationContext, input string) (string, error) {
		ctx.ScheduleActivity("Reserve", input)
		ctx.WaitForEvent("never")
		return "left", nil
	}
	history, replayerOf := recordedEnd(t, fireAndForget)
	require.IsType(t, cdb.ActivityCancelRequested{}, history[len(history)-2].Kind)
	require.NoError(t, replayerOf(fireAndForget).ReplayHistory(context.Background(), history))
}
