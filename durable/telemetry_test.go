package durable

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// withMeter runs a harness's runtime reporting to meter.
func withMeter(meter cdb.Meter) func(*Options) {
	return func(o *Options) { o.Telemetry = cdb.Telemetry{Meter: meter} }
}

// newMemoryHarness is a harness on the reference provider.
func newMemoryHarness(t *testing.T) *harness {
	p := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = p.Close() })
	return newHarness(t, p)
}

// stop shuts the runtime down, so that everything it measured has been
// recorded.
func (h *harness) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(h.t, h.rt.Shutdown(ctx))
}

// chargeFailingOnce registers the activity Charge, whose first execution
// fails and every later one returns "charged".
func (h *harness) chargeFailingOnce() {
	var charges atomic.Int32
	h.activity("Charge", func(ActivityContext, string) (string, error) {
		if charges.Add(1) == 1 {
			return "", errors.New("card reader busy")
		}
		return "charged", nil
	})
}

// chargeThenWait is an orchestration's Charge, retried once after
// retryWait, then a timer of timer; it returns Charge's output.
func chargeThenWait(ctx *OrchestrationContext, input string, retryWait, timer time.Duration) (string, error) {
	retry := RetryPolicy{MaxAttempts: 2, FirstInterval: retryWait}
	out, err := ctx.ScheduleActivity("Charge", input, WithRetry(retry)).Await()
	if err != nil {
		return "", err
	}
	if _, err := ctx.ScheduleTimer(timer).Await(); err != nil {
		return "", err
	}
	return out, nil
}

// newReportingCosmosProvider is the Cosmos DB provider on a new fake
// account, through a client that reports to telemetry.
func newReportingCosmosProvider(t *testing.T, telemetry cdb.Telemetry) cdb.Provider {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Telemetry: telemetry})
	require.NoError(t, err)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: client, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestTelemetryInstrumentsHaveTheirNamesKindsAndUnits(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	h := newMemoryHarness(t)
	h.run(withMeter(meter))
	want := map[string][2]string{
		"durable.orchestration.starts":                 {"counter", "{orchestration}"},
		"durable.orchestration.completions":            {"counter", "{orchestration}"},
		"durable.orchestration.failures":               {"counter", "{orchestration}"},
		"durable.orchestration.duration":               {"histogram", "s"},
		"durable.orchestration.turns":                  {"counter", "{turn}"},
		"durable.orchestration.turn.duration":          {"histogram", "s"},
		"durable.orchestration.turn.schedule_to_start": {"histogram", "s"},
		"durable.orchestration.history.size":           {"histogram", "{event}"},
		"durable.orchestration.parked":                 {"counter", "{turn}"},
		"durable.activity.executions":                  {"counter", "{execution}"},
		"durable.activity.duration":                    {"histogram", "s"},
		"durable.activity.schedule_to_start":           {"histogram", "s"},
		"durable.poison":                               {"counter", "{item}"},
	}
	got := map[string][2]string{}
	for _, i := range meter.Instruments() {
		got[i.Name] = [2]string{string(i.Kind), i.Unit}
	}
	assert.Equal(t, want, got)
}

func TestTelemetryReportsASampleOrchestration(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	h := newMemoryHarness(t)
	h.chargeFailingOnce()
	h.activity("Ship", func(_ ActivityContext, input string) (string, error) { return "shipped " + input, nil })
	h.orchestration("Notify", func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleActivity("Ship", input).Await()
	})
	h.orchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
		if _, err := chargeThenWait(ctx, input, 10*time.Millisecond, 20*time.Millisecond); err != nil {
			return "", err
		}
		return ctx.ScheduleSubOrchestration("Notify", input).Await()
	})
	h.run(withMeter(meter))
	h.start("order-1", "Order", "book")
	assert.Equal(t, "shipped book", h.completed("order-1"))
	h.stop()

	order := map[string]any{"durable.orchestration.name": "Order", "durable.orchestration.version": "1.0.0"}
	notify := map[string]any{"durable.orchestration.name": "Notify", "durable.orchestration.version": "1.0.0"}
	assert.Equal(t, 2.0, meter.Sum("durable.orchestration.starts", nil))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.starts", with(order, "durable.orchestration.initiated_by", "client")))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.starts", with(notify, "durable.orchestration.initiated_by", "parent")))
	assert.Equal(t, 2.0, meter.Sum("durable.orchestration.completions", nil))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.completions", with(order, "durable.orchestration.status", "completed")))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.completions", with(notify, "durable.orchestration.status", "completed")))
	assert.Empty(t, meter.Points("durable.orchestration.failures", nil))

	durations := meter.Points("durable.orchestration.duration", nil)
	require.Len(t, durations, 2)
	assert.Greater(t, meter.Sum("durable.orchestration.duration", order), 0.0, "Order waited for a timer")

	// Order: its start, the failed charge, the retry's wait, the charge,
	// the timer, the child's result; Notify: its start, the shipment.
	assert.GreaterOrEqual(t, meter.Sum("durable.orchestration.turns",
		map[string]any{"durable.orchestration.name": "Order", "durable.orchestration.turn.outcome": "committed"}), 6.0)
	assert.GreaterOrEqual(t, meter.Sum("durable.orchestration.turns",
		map[string]any{"durable.orchestration.name": "Notify", "durable.orchestration.turn.outcome": "committed"}), 2.0)
	assert.Equal(t, meter.Sum("durable.orchestration.turns", nil), float64(len(meter.Points("durable.orchestration.turn.duration", nil))))
	for _, p := range meter.Points("durable.orchestration.turn.duration", nil) {
		assert.Greater(t, p.Value, 0.0)
	}
	sizes := meter.Points("durable.orchestration.history.size", map[string]any{"durable.orchestration.name": "Order"})
	require.NotEmpty(t, sizes)
	for i := 1; i < len(sizes); i++ {
		assert.Greater(t, sizes[i].Value, sizes[i-1].Value, "each committed turn of Order adds events")
	}

	// The retry policy's attempts are counted as attempts 1 and 2, each
	// delivered once.
	charge := map[string]any{"durable.activity.name": "Charge", "durable.activity.delivery": "1"}
	assert.Equal(t, 1.0, meter.Sum("durable.activity.executions",
		with(with(charge, "durable.activity.outcome", "failed"), "durable.activity.attempt", "1")))
	assert.Equal(t, 1.0, meter.Sum("durable.activity.executions",
		with(with(charge, "durable.activity.outcome", "completed"), "durable.activity.attempt", "2")))
	assert.Equal(t, 1.0, meter.Sum("durable.activity.executions",
		map[string]any{"durable.activity.name": "Ship", "durable.activity.outcome": "completed", "durable.activity.attempt": "1", "durable.activity.delivery": "1"}))
	assert.Equal(t, 3.0, meter.Sum("durable.activity.executions", nil))
	activityDurations := meter.Points("durable.activity.duration", nil)
	require.Len(t, activityDurations, 3)
	for _, p := range activityDurations {
		assert.Greater(t, p.Value, 0.0)
		assert.Contains(t, []string{"completed", "failed"}, p.Attributes()["durable.activity.outcome"])
	}
	assert.Empty(t, meter.Points("durable.poison", nil))
	assert.Empty(t, meter.Points("durable.orchestration.parked", nil))
}

func TestTelemetryCountsFailuresByKind(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	h := newMemoryHarness(t)
	h.orchestration("Fails", func(*OrchestrationContext, string) (string, error) {
		return "", errors.New("out of stock")
	})
	h.orchestration("CallsMissing", func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Missing", "").Await()
	})
	h.run(withMeter(meter), func(o *Options) { o.Unregistered = UnregisteredFailAtOnce })
	h.start("fails-1", "Fails", "")
	h.start("calls-missing-1", "CallsMissing", "")
	h.start("misspelled-1", "Misspelled", "")
	for _, id := range []string{"fails-1", "calls-missing-1", "misspelled-1"} {
		assert.Equal(t, StateFailed, h.wait(id).State, id)
	}
	h.stop()

	failures := func(name, errorType string) float64 {
		return meter.Sum("durable.orchestration.failures",
			map[string]any{"durable.orchestration.name": name, "error.type": errorType})
	}
	assert.Equal(t, 1.0, failures("Fails", "application"))
	assert.Equal(t, 1.0, failures("CallsMissing", "unregistered"), "a not-registered error passed on keeps its kind")
	assert.Equal(t, 1.0, failures("Misspelled", "unregistered"))
	assert.Equal(t, 3.0, meter.Sum("durable.orchestration.failures", nil))
	assert.Equal(t, 3.0, meter.Sum("durable.orchestration.completions", map[string]any{"durable.orchestration.status": "failed"}))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.starts",
		map[string]any{"durable.orchestration.name": "Misspelled", "durable.orchestration.initiated_by": "client"}),
		"the failure of an unregistered orchestration records its start")
	assert.Equal(t, 1.0, meter.Sum("durable.activity.executions",
		map[string]any{"durable.activity.name": "Missing", "durable.activity.outcome": "not_registered", "durable.activity.attempt": "1"}))
	assert.Empty(t, meter.Points("durable.activity.duration", nil), "no handler ran")
}

func TestTelemetryCountsParkedTurns(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	p := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = p.Close() })
	waitingForApproval(t, p, "order")
	changed := deployment(t, p, "Charge", withMeter(meter))
	require.NoError(t, changed.client.RaiseEvent(context.Background(), "order", "approve", "yes"))
	waitParked(t, changed.rt, "order", 2)
	changed.stop()

	parked := meter.Sum("durable.orchestration.parked",
		map[string]any{"durable.orchestration.name": "Order", "durable.orchestration.version": "1.0.0"})
	assert.GreaterOrEqual(t, parked, 2.0)
	assert.Equal(t, parked, meter.Sum("durable.orchestration.turns",
		map[string]any{"durable.orchestration.name": "Order", "durable.orchestration.turn.outcome": "parked"}))
	assert.Empty(t, meter.Points("durable.orchestration.completions", nil), "a parked instance keeps running")
}

func TestTelemetryCountsContinueAsNewAndCancellation(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	h := newMemoryHarness(t)
	h.orchestration("Loop", func(ctx *OrchestrationContext, input string) (string, error) {
		if input == "" {
			return ctx.ContinueAsNew("again")
		}
		return "looped " + input, nil
	})
	h.orchestration("Waits", func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.WaitForEvent("never").Await()
	})
	h.run(withMeter(meter))
	h.start("loop-1", "Loop", "")
	h.start("waits-1", "Waits", "")
	assert.Equal(t, "looped again", h.completed("loop-1"))
	h.waitForHistory("waits-1", hasEvent[cdb.ExternalSubscribed])
	require.NoError(t, h.client.CancelInstance(h.ctx, "waits-1", "not needed"))
	assert.Equal(t, StateFailed, h.wait("waits-1").State)
	h.stop()

	loop := map[string]any{"durable.orchestration.name": "Loop"}
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.starts", with(loop, "durable.orchestration.initiated_by", "client")))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.starts", with(loop, "durable.orchestration.initiated_by", "continue_as_new")))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.completions", with(loop, "durable.orchestration.status", "continued_as_new")))
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.completions", with(loop, "durable.orchestration.status", "completed")))
	assert.Len(t, meter.Points("durable.orchestration.duration", loop), 2, "each execution has its duration")
	assert.Equal(t, 1.0, meter.Sum("durable.orchestration.completions",
		map[string]any{"durable.orchestration.name": "Waits", "durable.orchestration.status": "canceled"}))
	assert.Empty(t, meter.Points("durable.orchestration.failures", nil), "a cancellation is not a failure")
}

// A turn's and an activity's log records carry the instance, the
// execution and the orchestration's or activity's name, as duroxide's do.
func TestTelemetryLogRecordsCarryCorrelationKeys(t *testing.T) {
	logs := &recordCollector{mu: &sync.Mutex{}, records: &[]map[string]any{}}
	h := newMemoryHarness(t)
	h.orchestration("CallsMissing", func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Missing", "").Await()
	})
	h.run(func(o *Options) {
		o.Unregistered = UnregisteredFailAtOnce
		o.Logger = slog.New(logs)
	})
	h.start("calls-missing-1", "CallsMissing", "")
	h.start("misspelled-1", "Misspelled", "")
	h.wait("calls-missing-1")
	h.wait("misspelled-1")
	h.stop()

	assert.Contains(t, logs.all(), map[string]any{"msg": "activity not registered; failing it",
		"instance": "calls-missing-1", "execution_id": "1", "activity": "Missing"}, "an activity's record")
	assert.Contains(t, logs.all(), map[string]any{"msg": "orchestration not registered; failing the instance",
		"instance": "misspelled-1", "execution_id": "1", "orchestration": "Misspelled"}, "a turn's record")
}

// recordCollector keeps the correlation keys of the ERROR records logged.
type recordCollector struct {
	with    []slog.Attr
	mu      *sync.Mutex
	records *[]map[string]any
}

func (c *recordCollector) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (c *recordCollector) Handle(_ context.Context, r slog.Record) error {
	kept := map[string]any{"msg": r.Message}
	for _, a := range c.with {
		if slices.Contains([]string{"instance", "execution_id", "orchestration", "activity"}, a.Key) {
			kept[a.Key] = a.Value.String()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.records = append(*c.records, kept)
	return nil
}

func (c *recordCollector) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &recordCollector{with: slices.Concat(c.with, attrs), mu: c.mu, records: c.records}
}

func (c *recordCollector) WithGroup(string) slog.Handler { return c }

func (c *recordCollector) all() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.records)
}

func TestTelemetryWithoutAMeterRecordsNothing(t *testing.T) {
	var m *runtimeMetrics = newRuntimeMetrics(nil)
	assert.Nil(t, m)
	// Every recording function takes the nil receiver.
	m.turnEnded(context.Background(), "Order", turnCommitted, time.Second)
	m.turnCommitted(context.Background(), &cdb.OrchestrationItem{}, turn{delta: []cdb.Event{{Kind: cdb.OrchestrationCompleted{}}}})
	m.parkedTurn(context.Background(), "Order", "1.0.0")
	m.activityEnded(context.Background(), "Ship", activityRuns{attempt: 1, delivery: 1}, activityCompleted, time.Second)
	m.activityUnregistered(context.Background(), "Ship", activityRuns{attempt: 1, delivery: 1})
	m.poisoned(context.Background(), "worker")
	m.turnFetched(context.Background(), "Order", time.Now(), time.Now())
	m.activityFetched(context.Background(), "Ship", time.Now(), time.Now())
}

// A provider that does not report when work became takeable (a zero
// VisibleAt) gets no schedule-to-start, rather than one since the epoch.
func TestTelemetryRecordsNoScheduleToStartWithoutAVisibleAt(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	m := newRuntimeMetrics(meter)
	m.turnFetched(context.Background(), "Order", time.Now(), time.Time{})
	m.activityFetched(context.Background(), "Ship", time.Now(), time.Time{})
	assert.Empty(t, meter.Points("durable.orchestration.turn.schedule_to_start", nil))
	assert.Empty(t, meter.Points("durable.activity.schedule_to_start", nil))
}

// An item stamped a little ahead of the clock that fetched it (a writer's
// clock, a sequence's millisecond) waited no time, not a negative one.
func TestTelemetryClampsScheduleToStartAtZero(t *testing.T) {
	meter := telemetrytest.NewRecorder()
	m := newRuntimeMetrics(meter)
	fetched := time.UnixMilli(1_700_000_000_000)
	m.turnFetched(context.Background(), "Order", fetched, fetched.Add(3*time.Millisecond))
	m.activityFetched(context.Background(), "Ship", fetched, fetched.Add(-250*time.Millisecond))
	turns := meter.Points("durable.orchestration.turn.schedule_to_start", nil)
	require.Len(t, turns, 1)
	assert.Equal(t, 0.0, turns[0].Value)
	assert.Equal(t, map[string]any{"durable.orchestration.name": "Order"}, turns[0].Attributes())
	activities := meter.Points("durable.activity.schedule_to_start", nil)
	require.Len(t, activities, 1)
	assert.Equal(t, 0.25, activities[0].Value)
	assert.Equal(t, map[string]any{"durable.activity.name": "Ship"}, activities[0].Attributes())
}

// Schedule-to-start is recorded once per fetch, turn and activity, by
// name, and measures only the wait in the queue: an activity retried after
// a retry policy's wait and a turn fired by a timer do not count the wait.
// Each value is at most the run's time less its waits (every fetch's wait
// lies outside them), which a measure from the first enqueue would exceed.
func TestTelemetryScheduleToStartLeavesOutDelays(t *testing.T) {
	const wait = 500 * time.Millisecond
	meter := telemetrytest.NewRecorder()
	h := newMemoryHarness(t)
	h.chargeFailingOnce()
	h.orchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
		return chargeThenWait(ctx, input, wait, wait)
	})
	h.run(withMeter(meter))
	// The reference provider's clock, and the runtime's, is this process's.
	before := time.Now().Truncate(time.Millisecond)
	h.start("order-1", "Order", "book")
	assert.Equal(t, "charged", h.completed("order-1"))
	h.stop()
	bound := (time.Since(before) - 2*wait).Seconds()

	order := map[string]any{"durable.orchestration.name": "Order"}
	turns := meter.Points("durable.orchestration.turn.schedule_to_start", nil)
	assert.Equal(t, meter.Sum("durable.orchestration.turns", nil), float64(len(turns)), "one per fetched item")
	assert.GreaterOrEqual(t, len(turns), 4, "the start, the failure, the retry's wait, the charge, the timer")
	for _, p := range turns {
		assert.Equal(t, order, p.Attributes())
		assert.GreaterOrEqual(t, p.Value, 0.0)
		assert.LessOrEqual(t, p.Value, bound, "a turn's wait leaves out the retry's and the timer's")
	}
	activities := meter.Points("durable.activity.schedule_to_start", nil)
	require.Len(t, activities, 2, "one per fetched activity: the failed charge and its retry")
	for _, p := range activities {
		assert.Equal(t, map[string]any{"durable.activity.name": "Charge"}, p.Attributes())
		assert.GreaterOrEqual(t, p.Value, 0.0)
		assert.LessOrEqual(t, p.Value, bound, "the retry's wait is not the activity's")
	}
}

func TestMetricAttemptAndDeliveryBuckets(t *testing.T) {
	for n, want := range map[uint32]string{0: "1", 1: "1", 2: "2", 3: "3", 4: "4+", 11: "4+"} {
		assert.Equal(t, want, countBucket(n), "count %d", n)
	}
}

func TestMetricFailureTypes(t *testing.T) {
	message := "diverged"
	cases := map[string]cdb.ErrorDetails{
		"application":    cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: "out of stock"},
		"unregistered":   applicationFailure(cdb.AppActivityFailed{}, notRegistered("activity \"X\" is not registered"), nil),
		"nondeterminism": cdb.ConfigurationError{Kind: cdb.ConfigNondeterminism, Message: &message},
		"infrastructure": cdb.InfrastructureError{Operation: "AckOrchestrationItem", Message: "too large"},
		"poison":         cdb.PoisonError{AttemptCount: 11, MaxAttempts: 10},
	}
	for want, details := range cases {
		assert.Equal(t, want, failureType(details))
	}
}

func TestMetricStatusOfACancellationIsCanceledNotAFailure(t *testing.T) {
	status, failure, ok := executionEnd(cdb.Event{Kind: cdb.OrchestrationFailed{
		Details: cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "by the client"}}}})
	require.True(t, ok)
	assert.Equal(t, "canceled", status)
	assert.Nil(t, failure)
}

// with is match plus one attribute.
func with(match map[string]any, key, value string) map[string]any {
	out := map[string]any{key: value}
	for k, v := range match {
		out[k] = v
	}
	return out
}

// A turn's Cosmos DB requests carry the orchestration's name, so the
// client's request charge can be summed per orchestration.
func TestTelemetryAttributesATurnsRequestChargeToItsOrchestration(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	h := newHarness(t, newReportingCosmosProvider(t, cdb.Telemetry{Meter: rec}))
	h.activity("Reserve", func(_ ActivityContext, in string) (string, error) { return in, nil })
	h.orchestration("Order", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Reserve", in).Await()
	})
	h.run()
	h.start("order-ru", "Order", "book")
	assert.Equal(t, "book", h.completed("order-ru"))
	h.stop()

	const charge = "azure.cosmosdb.client.operation.request_charge"
	acks := rec.Points(charge, map[string]any{"durable.orchestration.name": "Order", "db.operation.name": "ExecuteTransactionalBatch"})
	assert.NotEmpty(t, acks, "the turn's ack batch is labelled with the orchestration")
	assert.Greater(t, rec.Sum(charge, map[string]any{"durable.orchestration.name": "Order"}), 0.0)
}
