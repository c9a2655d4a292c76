package providertest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// TraceCarrying checks the optional cdb.TraceCarrier, which duroxide has
// not: the Go-only trace contexts of starts and activities come back from
// the store, outside duroxide's JSON. Run it with RunModule; on a provider
// without the capability its tests skip.
func TraceCarrying() Module {
	return Module{Name: "trace_carrying", Tests: []Test{
		{Name: "TestAStartsTraceReachesEveryTurnOfItsInstance", Run: TestAStartsTraceReachesEveryTurnOfItsInstance},
		{Name: "TestAStartsTraceOutlivesContinueAsNew", Run: TestAStartsTraceOutlivesContinueAsNew},
		{Name: "TestAStartAfterItsInstancesFirstMessageStillCarriesItsTrace", Run: TestAStartAfterItsInstancesFirstMessageStillCarriesItsTrace},
		{Name: "TestAnActivitysTraceReachesItsWorker", Run: TestAnActivitysTraceReachesItsWorker},
		{Name: "TestAChildStartsTraceReachesTheChildsTurn", Run: TestAChildStartsTraceReachesTheChildsTurn},
		{Name: "TestItemsWithoutATraceComeBackWithNone", Run: TestItemsWithoutATraceComeBackWithNone},
	}}
}

// Trace contexts of the module's tests: well-formed W3C traceparents.
var (
	startTrace = cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=start"}
	turnTrace  = cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"}
	childTrace = cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-a3ce929d0e0e4736-01"}
)

// traceCarrier is a new provider that carries trace contexts; the test
// skips when it does not.
func traceCarrier(t *testing.T, f Factory) cdb.Provider {
	t.Helper()
	p := f.NewProvider(t, ProviderOptions{})
	if _, ok := p.(cdb.TraceCarrier); !ok {
		t.Skipf("%T does not implement the optional cdb.TraceCarrier this module checks", p)
	}
	return p
}

// tracedStart is StartItem carrying trace.
func tracedStart(instance string, trace cdb.TraceContext) cdb.StartOrchestrationMessage {
	start := startOf(instance)
	start.Trace = trace
	return start
}

// fetchTracedStart enqueues inst's start carrying startTrace and fetches
// its first turn, which must be inst's and continue that trace.
func fetchTracedStart(ctx context.Context, t *testing.T, p cdb.Provider, inst string) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token := enqueueAndFetchOrchestration(ctx, t, p, tracedStart(inst, startTrace))
	require.Equal(t, inst, item.Instance)
	assert.Equal(t, startTrace, item.TraceContext, "the first turn continues the start's trace")
	return item, token
}

// ackStarted acks the first turn of inst's execution with its
// OrchestrationStarted event alone.
func ackStarted(ctx context.Context, t *testing.T, p cdb.Provider, token, inst string, execution uint64) {
	t.Helper()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, execution,
		[]cdb.Event{StartedEvent(inst, execution)}, nil, nil, TestOrchMetadata(), nil))
}

// ackScheduling acks the first turn of act's instance, which schedules act
// (event 2).
func ackScheduling(ctx context.Context, t *testing.T, p cdb.Provider, token string, act cdb.ActivityExecuteMessage) {
	t.Helper()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{
		StartedEvent(act.Instance, cdb.InitialExecutionID),
		newEvent(2, act.Instance, cdb.InitialExecutionID, cdb.ActivityScheduled{Name: act.Name, Input: act.Input}),
	}, []cdb.WorkItem{act}, nil, TestOrchMetadata(), nil))
}

// assertLaterTurnTrace raises an event to inst, whose turn, of execution,
// must carry want, and acks that turn; what names the turn.
func assertLaterTurnTrace(ctx context.Context, t *testing.T, p cdb.Provider, inst string, execution uint64, want cdb.TraceContext, what string) {
	t.Helper()
	item, token := enqueueAndFetchOrchestration(ctx, t, p, cdb.ExternalRaisedMessage{Instance: inst, Name: "go", Data: "{}"})
	assert.Equal(t, execution, item.ExecutionID, what)
	assert.Equal(t, want, item.TraceContext, what)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, execution, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// TestAStartsTraceReachesEveryTurnOfItsInstance: the first turn's item
// carries the start's trace, its start message too, and so does the item
// of a later turn, whose batch has no start.
func TestAStartsTraceReachesEveryTurnOfItsInstance(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	item, token := fetchTracedStart(ctx, t, p, "traced")
	require.Len(t, item.Messages, 1)
	assert.Equal(t, startTrace, cdb.TraceContextOf(item.Messages[0]), "the start message keeps its trace")
	ackStarted(ctx, t, p, token, "traced", cdb.InitialExecutionID)

	assertLaterTurnTrace(ctx, t, p, "traced", cdb.InitialExecutionID, startTrace, "a later turn continues the start's trace")
}

// TestAStartsTraceOutlivesContinueAsNew: the next execution's turns
// continue the trace of the instance's start, not a trace of their own
// (a ContinueAsNew message carries none).
func TestAStartsTraceOutlivesContinueAsNew(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	const inst = "traced-can"
	_, token := fetchTracedStart(ctx, t, p, inst)
	can := cdb.ContinueAsNewMessage{Instance: inst, Orchestration: "TestOrch", Input: "{}", Version: ptr("1.0.0")}
	md := TestOrchMetadata()
	md.Status = ptr(cdb.StatusContinuedAsNew)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{
		StartedEvent(inst, cdb.InitialExecutionID),
		newEvent(2, inst, cdb.InitialExecutionID, cdb.OrchestrationContinuedAsNew{Input: "{}"}),
	}, nil, []cdb.WorkItem{can}, md, nil))

	item, token := fetchOrchestration(ctx, t, p, lockLong, "the ContinueAsNew message is queued")
	assert.Equal(t, startTrace, item.TraceContext, "the next execution's first turn")
	ackStarted(ctx, t, p, token, inst, 2)

	assertLaterTurnTrace(ctx, t, p, inst, 2, startTrace, "a later turn of the next execution")
}

// TestAStartAfterItsInstancesFirstMessageStillCarriesItsTrace: a message
// that overtook its instance's start (a fetch met it first) does not keep
// the start's trace from the instance's turns, the first or later ones.
func TestAStartAfterItsInstancesFirstMessageStillCarriesItsTrace(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	const inst = "traced-late-start"
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: inst, Name: "early", Data: "{}"}, 0))
	fetchNoOrchestration(ctx, t, p, lockLong, "a message before its instance's start waits for it")

	_, token := fetchTracedStart(ctx, t, p, inst)
	ackStarted(ctx, t, p, token, inst, cdb.InitialExecutionID)

	assertLaterTurnTrace(ctx, t, p, inst, cdb.InitialExecutionID, startTrace, "a later turn continues the start's trace")
}

// TestAnActivitysTraceReachesItsWorker: an activity a turn schedules, and
// one enqueued directly, come back from FetchWorkItem with their traces.
func TestAnActivitysTraceReachesItsWorker(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	const inst = "traced-work"
	_, token := fetchTracedStart(ctx, t, p, inst)
	act := activityExecute(inst, cdb.InitialExecutionID, 2, "Charge", "{}")
	act.Trace = turnTrace
	ackScheduling(ctx, t, p, token, act)
	assertWorkerTrace(ctx, t, p, turnTrace, "an activity a turn scheduled")

	direct := activityExecute(inst, cdb.InitialExecutionID, 3, "Refund", "{}")
	direct.Trace = childTrace
	require.NoError(t, p.EnqueueForWorker(ctx, direct))
	assertWorkerTrace(ctx, t, p, childTrace, "an activity enqueued for the worker")
}

// assertWorkerTrace fetches the next worker item, which must carry want,
// and acks it.
func assertWorkerTrace(ctx context.Context, t *testing.T, p cdb.Provider, want cdb.TraceContext, what string) {
	t.Helper()
	item, token := fetchWork(ctx, t, p, lockLong, "%s is queued", what)
	act, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "an ActivityExecute, got %s", item.Kind())
	assert.Equal(t, want, act.Trace, what)
	require.NoError(t, p.AckWorkItem(ctx, token, activityCompleted(act.Instance, act.ExecutionID, act.ID, "{}")))
}

// TestAChildStartsTraceReachesTheChildsTurn: a start a parent's turn sends
// to another instance (a sub-orchestration) carries its own trace to the
// child's items, not the parent's.
func TestAChildStartsTraceReachesTheChildsTurn(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	const parent, child = "traced-parent", "traced-parent::sub::2"
	_, token := fetchTracedStart(ctx, t, p, parent)
	start := tracedStart(child, childTrace)
	start.ParentInstance, start.ParentID, start.ParentExecutionID = ptr(parent), ptr(uint64(2)), ptr(cdb.InitialExecutionID)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{
		StartedEvent(parent, cdb.InitialExecutionID),
		newEvent(2, parent, cdb.InitialExecutionID, cdb.SubOrchestrationScheduled{Name: "TestOrch", Instance: child, Input: "{}"}),
	}, nil, []cdb.WorkItem{start}, TestOrchMetadata(), nil))

	item, token := fetchOrchestration(ctx, t, p, lockLong, "the child's start is delivered")
	require.Equal(t, child, item.Instance)
	assert.Equal(t, childTrace, item.TraceContext, "the child's first turn continues its start's trace")
	md := TestOrchMetadata()
	md.ParentInstanceID = ptr(parent)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{StartedEvent(child, cdb.InitialExecutionID)}, nil, nil, md, nil))

	assertLaterTurnTrace(ctx, t, p, child, cdb.InitialExecutionID, childTrace, "a later turn of the child")
}

// TestItemsWithoutATraceComeBackWithNone: a start and an activity that
// carry no trace come back with the zero TraceContext, on every turn.
func TestItemsWithoutATraceComeBackWithNone(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := traceCarrier(t, f)
	const inst = "untraced"
	item, token := enqueueAndFetchOrchestration(ctx, t, p, StartItem(inst))
	assert.True(t, item.TraceContext.IsZero(), "a start without a trace: %+v", item.TraceContext)
	ackScheduling(ctx, t, p, token, activityExecute(inst, cdb.InitialExecutionID, 2, "Charge", "{}"))
	assertWorkerTrace(ctx, t, p, cdb.TraceContext{}, "an activity without a trace")

	item, token = fetchOrchestration(ctx, t, p, lockLong, "the activity's completion is queued")
	assert.True(t, item.TraceContext.IsZero(), "a later turn: %+v", item.TraceContext)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}
