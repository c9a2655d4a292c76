package durable

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// withTelemetry runs a runtime reporting its spans and metrics to rec.
func withTelemetry(rec *telemetrytest.Recorder) func(*Options) {
	return func(o *Options) { o.Telemetry = cdb.Telemetry{Tracer: rec, Meter: rec} }
}

// startTraced starts a runtime on p reporting to rec, under a context that
// carries a span of its own, which no turn or activity may take as parent.
func startTraced(t *testing.T, p cdb.Provider, registry *Registry, rec *telemetrytest.Recorder) *Runtime {
	t.Helper()
	opts := fastOptions(t)
	withTelemetry(rec)(&opts)
	ctx, span := rec.Start(context.Background(), "runtime-start", cdb.SpanOptions{})
	span.End()
	rt, err := Start(ctx, p, registry, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Shutdown(ctx))
	})
	return rt
}

// shutDown stops runtimes, so that every span they started has ended
// (a client sees an instance complete before the turn that completed it
// ends its span).
func shutDown(t *testing.T, runtimes ...*Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rt := range runtimes {
		require.NoError(t, rt.Shutdown(ctx))
	}
}

// tracedOrder registers Order (two activities, a third that fails, a
// timer, and a Ship child that runs an activity) on registry.
func tracedOrder(t *testing.T, registry *Registry) {
	t.Helper()
	activity := func(out string, err error) ActivityFunc {
		return func(ActivityContext, string) (string, error) { return out, err }
	}
	require.NoError(t, registry.RegisterActivity("Reserve", activity("reserved", nil)))
	require.NoError(t, registry.RegisterActivity("Charge", activity("charged", nil)))
	require.NoError(t, registry.RegisterActivity("Decline", activity("", errors.New("card declined"))))
	require.NoError(t, registry.RegisterActivity("Label", activity("labelled", nil)))
	require.NoError(t, registry.RegisterOrchestration("Ship", func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleActivity("Label", input).Await()
	}))
	require.NoError(t, registry.RegisterOrchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
		for _, name := range []string{"Reserve", "Charge"} {
			if _, err := ctx.ScheduleActivity(name, input).Await(); err != nil {
				return "", err
			}
		}
		if _, err := ctx.ScheduleActivity("Decline", input).Await(); err == nil {
			return "", errors.New("Decline should fail")
		}
		if _, err := ctx.ScheduleTimer(50 * time.Millisecond).Await(); err != nil {
			return "", err
		}
		return ctx.ScheduleSubOrchestration("Ship", input).Await()
	}))
}

// spanIDs are the span ids of spans.
func spanIDs(spans []telemetrytest.SpanRecord) map[string]bool {
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	return ids
}

// assertTurnSpans checks the turn spans of orchestration name: each a
// consumer whose remote parent is one of parents, with its attributes, and
// one per fetched item (the turns metric counts each fetch once).
func assertTurnSpans(t *testing.T, rec *telemetrytest.Recorder, name, instance string, parents map[string]bool) []telemetrytest.SpanRecord {
	t.Helper()
	turns := rec.SpansNamed("orchestration " + name)
	require.NotEmpty(t, turns, "turns of %s", name)
	for _, s := range turns {
		assert.Equal(t, cdb.SpanKindConsumer, s.Kind, s.Name)
		assert.True(t, s.RemoteParent, "%s continues the trace carried through the store", s.Name)
		assert.True(t, parents[s.ParentSpanID], "%s's parent %s", s.Name, s.ParentSpanID)
		assert.True(t, s.Ended, s.Name)
		attrs := s.Attributes()
		assert.Equal(t, instance, attrs["durable.instance.id"], s.Name)
		assert.Equal(t, name, attrs["durable.orchestration.name"], s.Name)
		assert.Equal(t, int64(1), attrs["durable.orchestration.execution_id"], s.Name)
		if attrs["durable.orchestration.turn.outcome"] == "committed" {
			assert.Equal(t, "1.0.0", attrs["durable.orchestration.version"], "%s: a turn that ran has the version its code ran at", s.Name)
		} else {
			assert.Equal(t, "abandoned", attrs["durable.orchestration.turn.outcome"], s.Name)
		}
	}
	fetched := rec.Sum("durable.orchestration.turns", map[string]any{"durable.orchestration.name": name})
	assert.Equal(t, fetched, float64(len(turns)), "one span per fetched item of %s, never two", name)
	return turns
}

// assertActivitySpan checks the one span of activity name: a consumer
// whose remote parent is one of parents, with its attributes and outcome.
func assertActivitySpan(t *testing.T, rec *telemetrytest.Recorder, name, instance, outcome string, parents map[string]bool) {
	t.Helper()
	spans := rec.SpansNamed("activity " + name)
	require.Len(t, spans, 1, "one execution of %s", name)
	s := spans[0]
	assert.Equal(t, cdb.SpanKindConsumer, s.Kind, s.Name)
	assert.True(t, s.RemoteParent, "%s continues the trace carried through the store", s.Name)
	assert.True(t, parents[s.ParentSpanID], "%s's parent is a turn that scheduled it", s.Name)
	assert.True(t, s.Ended, s.Name)
	attrs := s.Attributes()
	assert.Equal(t, instance, attrs["durable.instance.id"], s.Name)
	assert.Equal(t, name, attrs["durable.activity.name"], s.Name)
	assert.Equal(t, int64(1), attrs["durable.activity.attempt"], s.Name)
	assert.Equal(t, int64(1), attrs["durable.activity.delivery"], s.Name)
	assert.Equal(t, outcome, attrs["durable.activity.outcome"], s.Name)
	if outcome == "failed" {
		require.Error(t, s.Err, s.Name)
		assert.Contains(t, s.Err.Error(), "card declined", s.Name)
	} else {
		assert.NoError(t, s.Err, s.Name)
	}
}

// childAndTimerOf reads instance's history for its child's instance id and
// its timer's event id.
func childAndTimerOf(t *testing.T, p cdb.Provider, instance string) (string, uint64) {
	t.Helper()
	history, err := p.Read(context.Background(), instance)
	require.NoError(t, err)
	child, timer := "", uint64(0)
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.SubOrchestrationScheduled:
			child = cdb.BuildChildInstanceID(instance, k.Instance)
		case cdb.TimerCreated:
			timer = ev.EventID
		}
	}
	require.NotEmpty(t, child)
	require.NotZero(t, timer)
	return child, timer
}

// An orchestration started under a caller's span, run by two runtimes on
// one store (two processes), is one trace: the start is the caller's
// child, each turn the start's, each activity a turn's, the child's turns
// a parent turn's, and one timer span, backdated to the timer's creation.
func TestSpansFollowAnOrchestrationAcrossTwoProcesses(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			rec := telemetrytest.NewRecorder()
			a, b := twoProcesses(t, pc.name)
			registry := NewRegistry()
			tracedOrder(t, registry)
			first, second := startTraced(t, a, registry, rec), startTraced(t, b, registry, rec)

			ctx, caller := rec.Start(context.Background(), "caller", cdb.SpanOptions{})
			client := NewClient(a, WithTracer(rec))
			require.NoError(t, client.StartOrchestration(ctx, "order", "Order", "A-1"))
			caller.End()
			st, err := client.WaitForCompletion(context.Background(), "order", time.Minute)
			require.NoError(t, err)
			require.Equal(t, StateCompleted, st.State, "%+v", st)
			shutDown(t, first, second)
			callerSpan := rec.SpansNamed("caller")[0]

			starts := rec.SpansNamed("start_orchestration Order")
			require.Len(t, starts, 1)
			start := starts[0]
			assert.Equal(t, cdb.SpanKindProducer, start.Kind)
			assert.Equal(t, callerSpan.SpanID, start.ParentSpanID, "the start is the caller's child")
			assert.False(t, start.RemoteParent)
			assert.Equal(t, map[string]any{"durable.instance.id": "order", "durable.orchestration.name": "Order"}, start.Attributes())
			assert.True(t, start.Ended)

			turns := assertTurnSpans(t, rec, "Order", "order", map[string]bool{start.SpanID: true})
			turnIDs := spanIDs(turns)
			assertActivitySpan(t, rec, "Reserve", "order", "completed", turnIDs)
			assertActivitySpan(t, rec, "Charge", "order", "completed", turnIDs)
			assertActivitySpan(t, rec, "Decline", "order", "failed", turnIDs)

			childID, timerID := childAndTimerOf(t, a, "order")
			child := assertTurnSpans(t, rec, "Ship", childID, turnIDs)
			assertActivitySpan(t, rec, "Label", childID, "completed", spanIDs(child))

			timers := rec.SpansNamed("timer")
			require.Len(t, timers, 1, "one timer fired, one span")
			timer := timers[0]
			assert.Equal(t, cdb.SpanKindInternal, timer.Kind)
			assert.True(t, turnIDs[timer.ParentSpanID], "the timer is a child of the turn that consumed its firing")
			assert.Equal(t, "order", timer.Attributes()["durable.instance.id"])
			assert.Equal(t, int64(timerID), timer.Attributes()["durable.timer.id"])
			for _, turn := range turns {
				if turn.SpanID == timer.ParentSpanID {
					assert.True(t, timer.Start.Before(turn.Start), "backdated to the TimerCreated event: %v, turn %v", timer.Start, turn.Start)
				}
			}

			for _, s := range rec.Spans() {
				if s.Name != "runtime-start" {
					assert.Equal(t, callerSpan.TraceID, s.TraceID, "%s is in the caller's trace", s.Name)
				}
			}
		})
	}
}

// A runtime that takes over an orchestration half done (the first one
// stopped) replays its history and adds spans only for what it does now:
// its turns and the activity it runs, no activity, timer or start again.
func TestAReplayAddsNoSpanForWorkAlreadyDone(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			rec := telemetrytest.NewRecorder()
			a, b := twoProcesses(t, pc.name)
			registry := NewRegistry()
			require.NoError(t, registry.RegisterActivity("Reserve", func(ActivityContext, string) (string, error) { return "reserved", nil }))
			require.NoError(t, registry.RegisterActivity("Charge", func(ActivityContext, string) (string, error) { return "charged", nil }))
			require.NoError(t, registry.RegisterOrchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
				if _, err := ctx.ScheduleActivity("Reserve", input).Await(); err != nil {
					return "", err
				}
				if _, err := ctx.ScheduleTimer(20 * time.Millisecond).Await(); err != nil {
					return "", err
				}
				waiting := "waiting"
				ctx.SetCustomStatus(&waiting)
				if _, err := ctx.WaitForEvent("go").Await(); err != nil {
					return "", err
				}
				return ctx.ScheduleActivity("Charge", input).Await()
			}))
			first := startTraced(t, a, registry, rec)
			ctx, caller := rec.Start(context.Background(), "caller", cdb.SpanOptions{})
			client := NewClient(a, WithTracer(rec))
			require.NoError(t, client.StartOrchestration(ctx, "order", "Order", "A-1"))
			caller.End()
			_, err := client.WaitForStatusChange(context.Background(), "order", 0, time.Minute)
			require.NoError(t, err)
			shutDown(t, first)
			before := len(rec.SpansNamed("orchestration Order"))

			second := startTraced(t, b, registry, rec)
			require.NoError(t, NewClient(b).RaiseEvent(context.Background(), "order", "go", "{}"))
			st, err := client.WaitForCompletion(context.Background(), "order", time.Minute)
			require.NoError(t, err)
			require.Equal(t, StateCompleted, st.State, "%+v", st)
			shutDown(t, second)

			start := rec.SpansNamed("start_orchestration Order")
			require.Len(t, start, 1)
			turns := assertTurnSpans(t, rec, "Order", "order", map[string]bool{start[0].SpanID: true})
			assert.Greater(t, len(turns), before, "the second runtime's turns have spans")
			assertActivitySpan(t, rec, "Reserve", "order", "completed", spanIDs(turns))
			assertActivitySpan(t, rec, "Charge", "order", "completed", spanIDs(turns))
			assert.Len(t, rec.SpansNamed("timer"), 1, "the timer fired once, before the restart")
			assert.Len(t, rec.Spans(), 2+len(turns)+2+1+2, "the runtime-start spans, the caller and the start, the turns, two activities, one timer")
		})
	}
}

// A turn's context without a span (no Tracer) leaves what the turn
// schedules untraced.
func TestWithoutATurnSpanScheduledWorkCarriesNoTrace(t *testing.T) {
	scheduled := turn{
		workerItems:       []cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: "order", Name: "Reserve"}},
		orchestratorItems: []cdb.WorkItem{cdb.StartOrchestrationMessage{Instance: "child", Orchestration: "Ship"}},
	}
	got := withTurnTrace(context.Background(), scheduled)
	assert.Equal(t, scheduled, got)
	ctx, span := startSpan(context.Background(), nil, "orchestration Order", cdb.SpanOptions{})
	assert.Equal(t, cdb.NoopSpan{}, span)
	assert.Equal(t, scheduled, withTurnTrace(ctx, scheduled))
}

// On the Cosmos DB provider with request spans, a turn's ack and an
// activity's ack are requests under the turn's and the activity's spans.
func TestRequestSpansNestUnderTurnsAndActivities(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	p := newReportingCosmosProvider(t, cdb.Telemetry{Tracer: rec, RequestSpans: true})
	registry := NewRegistry()
	require.NoError(t, registry.RegisterActivity("Reserve", func(ActivityContext, string) (string, error) { return "reserved", nil }))
	require.NoError(t, registry.RegisterOrchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleActivity("Reserve", input).Await()
	}))
	c := NewClient(p, WithTracer(rec))
	// Started before the runtime runs, so the start writes its own batch (a
	// start a waiting fetch takes is written by the first turn's commit).
	require.NoError(t, c.StartOrchestration(context.Background(), "order", "Order", "A-1"))
	rt := startTraced(t, p, registry, rec)
	st, err := c.WaitForCompletion(context.Background(), "order", time.Minute)
	require.NoError(t, err)
	require.Equal(t, StateCompleted, st.State)
	shutDown(t, rt)

	requestsUnder := func(parents []telemetrytest.SpanRecord) int {
		ids, n := spanIDs(parents), 0
		for _, s := range rec.Spans() {
			if s.Kind == cdb.SpanKindClient && ids[s.ParentSpanID] {
				n++
			}
		}
		return n
	}
	assert.Positive(t, requestsUnder(rec.SpansNamed("start_orchestration Order")), "the start's requests")
	assert.Positive(t, requestsUnder(rec.SpansNamed("orchestration Order")), "the turns' acks")
	assert.Positive(t, requestsUnder(rec.SpansNamed("activity Reserve")), "the activity's ack")
}

// A record of a turn or an activity whose item carries a trace names the
// trace's id; one without a trace adds nothing.
func TestLogRecordsCarryTheTraceIDOfATracedItem(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, nil))
	traced := cdb.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	traceLog(log, traced).Info("turn")
	traceLog(log, cdb.TraceContext{}).Info("untraced")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "trace_id=4bf92f3577b34da6a3ce929d0e0e4736")
	assert.NotContains(t, lines[1], "trace_id")
}
