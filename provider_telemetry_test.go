package cdb_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// The provider's own metrics, reported through its client's Telemetry
// (ARCHITECTURE.md, Telemetry): gauges sampled every GaugeInterval,
// counters where the provider learns of the event.

const testGaugeInterval = 50 * time.Millisecond

// newTelemetryProvider is a provider on acct whose client reports to tel,
// closed when the test ends.
func newTelemetryProvider(t *testing.T, acct *cdb.FakeAccount, tel cdb.Telemetry, cfg cdb.Config) *cdb.CosmosProvider {
	t.Helper()
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Telemetry: tel})
	require.NoError(t, err)
	cfg.Client = client
	p, err := cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// lastValue is the value of the latest point of the gauge name with the
// attributes where, and whether there is one.
func lastValue(rec *telemetrytest.Recorder, name string, where map[string]any) (float64, bool) {
	points := rec.Points(name, where)
	if len(points) == 0 {
		return 0, false
	}
	return points[len(points)-1].Value, true
}

// eventuallyGauge waits for the gauge's latest point to satisfy ok.
func eventuallyGauge(t *testing.T, rec *telemetrytest.Recorder, name string, where map[string]any, ok func(float64) bool, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, found := lastValue(rec, name, where)
		return found && ok(v)
	}, 10*time.Second, 10*time.Millisecond, msg)
}

func equals(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// isGaugeQuery matches the queries a gauge sample sends: COUNT and MIN per
// partition key range.
func isGaugeQuery(r cdb.FakeRequest) bool {
	return r.Operation == "Query" && bytes.Contains(r.Body, []byte("COUNT(1) AS n, MIN("))
}

func countMatching(reqs []cdb.FakeRequest, match func(cdb.FakeRequest) bool) int {
	n := 0
	for _, r := range reqs {
		if match(r) {
			n++
		}
	}
	return n
}

func TestTelemetryInstrumentsOfTheProvider(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec}, cdb.Config{GaugeInterval: -1})
	want := map[string]struct {
		unit string
		kind telemetrytest.Kind
	}{
		"cdb.queue.depth":              {"{message}", telemetrytest.KindGauge},
		"cdb.queue.oldest_age":         {"s", telemetrytest.KindGauge},
		"cdb.outbox.backlog":           {"{outbox}", telemetrytest.KindGauge},
		"cdb.outbox.oldest_age":        {"s", telemetrytest.KindGauge},
		"cdb.messages.held":            {"{message}", telemetrytest.KindGauge},
		"cdb.messages.held.oldest_age": {"s", telemetrytest.KindGauge},
		"cdb.process_lease.slots":      {"{slot}", telemetrytest.KindGauge},
		"cdb.locks.lost":               {"{lock}", telemetrytest.KindCounter},
		"cdb.poison":                   {"{message}", telemetrytest.KindCounter},
		"cdb.outbox.delivered":         {"{outbox}", telemetrytest.KindCounter},
	}
	for name, w := range want {
		in, ok := rec.Instrument(name)
		if assert.True(t, ok, "%s is made", name) {
			assert.Equal(t, w.unit, in.Unit, name)
			assert.Equal(t, w.kind, in.Kind, name)
			assert.NotEmpty(t, in.Description, name)
		}
	}
}

// A queued start and a worker item show in their queue's depth, with the
// age of the oldest, and the depths go back to 0 once both are taken.
func TestTelemetryGaugesSampleQueueDepthAndOldestAge(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	clock := newTestClock()
	p := newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, Now: clock.Now, GaugeInterval: testGaugeInterval})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("gauged"), 0))
	require.NoError(t, p.EnqueueForWorker(ctx, activity("gauged", 2, "")))
	clock.Advance(5 * time.Second)

	orchestrator := map[string]any{"cdb.queue": "orchestrator"}
	worker := map[string]any{"cdb.queue": "worker"}
	waited5s := func(v float64) bool { return v >= 5 && v < 60 }
	eventuallyGauge(t, rec, "cdb.queue.depth", orchestrator, equals(1), "the start is in the orchestrator queue's depth")
	eventuallyGauge(t, rec, "cdb.queue.depth", worker, equals(1), "the activity is in the worker queue's depth")
	eventuallyGauge(t, rec, "cdb.queue.oldest_age", orchestrator, waited5s, "the start has waited 5 s")
	eventuallyGauge(t, rec, "cdb.queue.oldest_age", worker, waited5s, "the activity has waited 5 s")
	for _, point := range rec.Points("cdb.queue.depth", nil) {
		assert.Len(t, point.Attrs, 1, "a depth has its queue as its only attribute")
	}

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("gauged", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	act, workToken, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)
	require.NoError(t, p.AckWorkItem(ctx, workToken, nil))

	for _, queue := range []map[string]any{orchestrator, worker} {
		eventuallyGauge(t, rec, "cdb.queue.depth", queue, equals(0), "drained")
		eventuallyGauge(t, rec, "cdb.queue.oldest_age", queue, equals(0), "nothing waits")
	}
}

// Without a Meter the provider sends no sampling request, whatever its
// GaugeInterval; with a Meter, a negative GaugeInterval turns sampling off.
func TestTelemetryGaugesAreNotSampledWithoutAMeterOrWithANegativeInterval(t *testing.T) {
	for name, tel := range map[string]struct {
		telemetry cdb.Telemetry
		interval  time.Duration
	}{
		"no meter":          {cdb.Telemetry{}, testGaugeInterval},
		"negative interval": {cdb.Telemetry{Meter: telemetrytest.NewRecorder()}, -1},
	} {
		t.Run(name, func(t *testing.T) {
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			log := logRequests(acct)
			newTelemetryProvider(t, acct, tel.telemetry, cdb.Config{ShortPolling: true, GaugeInterval: tel.interval})
			awaitControlSamples(t, controlGaugeQueries)
			assert.Zero(t, countMatching(log.take(), isGaugeQuery), "no sampling request")
		})
	}
}

// controlGaugeQueries is how many gauge queries a sampling provider sends
// in the window a check of silence waits: three samples or more (a sample
// sends one query per queue and kind, about five).
const controlGaugeQueries = 15

// awaitControlSamples waits until a provider that does sample (a Meter,
// testGaugeInterval, an account of its own) has sent n gauge queries. A
// check that another provider stays silent waits this long: the window
// grows with the machine's load, where a fixed sleep would let a provider
// that should be silent pass only because it was not scheduled yet.
func awaitControlSamples(t *testing.T, n int) {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	log := logRequests(acct)
	control := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: telemetrytest.NewRecorder()},
		cdb.Config{ShortPolling: true, GaugeInterval: testGaugeInterval, ReconcileInterval: time.Hour})
	seen := 0
	require.Eventually(t, func() bool {
		seen += countMatching(log.take(), isGaugeQuery)
		return seen >= n
	}, 30*time.Second, testGaugeInterval/5, "a provider with a Meter samples")
	require.NoError(t, control.Close())
}

// Close stops the sampling: no request at all after it returns.
func TestTelemetryGaugeSamplingStopsAtClose(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	log := logRequests(acct)
	p := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: telemetrytest.NewRecorder()},
		cdb.Config{ShortPolling: true, GaugeInterval: testGaugeInterval, ReconcileInterval: time.Hour})
	require.Eventually(t, func() bool { return countMatching(log.take(), isGaugeQuery) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Close())
	log.take()
	awaitControlSamples(t, controlGaugeQueries)
	assert.Empty(t, log.take(), "no request after Close")
}

// syncBuffer is a bytes.Buffer a logger and a test may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A sample whose queries fail is logged at Debug and skipped until the next
// interval: each part sends its one failing query once per interval, and
// nothing is recorded for it.
func TestTelemetryAFailingGaugeSampleIsLoggedAndSkipped(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var logs syncBuffer
	rec := telemetrytest.NewRecorder()
	log := logRequests(acct)
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 400, Match: isGaugeQuery})
	start := time.Now()
	p := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: testGaugeInterval,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "a gauge sample failed") >= 6 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Close())
	intervals := int(time.Since(start) / testGaugeInterval)

	assert.Contains(t, logs.String(), "level=DEBUG msg=\"cdb: a gauge sample failed; skipped until the next interval\"")
	assert.LessOrEqual(t, countMatching(log.take(), isGaugeQuery), 3*intervals, "one failing query per part and interval, no retry loop")
	for _, name := range []string{"cdb.queue.depth", "cdb.outbox.backlog", "cdb.messages.held"} {
		assert.Empty(t, rec.Points(name, nil), "%s: nothing recorded from a failed sample", name)
	}
}

// An outbox whose delivery fails (an event a turn raised on another
// instance, whose partition refuses writes for a while) shows in the
// backlog with its age; its delivery, once the partition takes writes
// again, is counted, and the backlog empties.
func TestTelemetryOutboxBacklogAndDeliveries(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, Now: clock.Now, GaugeInterval: testGaugeInterval, ReconcileInterval: time.Hour})
	providertest.CreateInstance(ctx, t, p, "sender")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("sender"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	refuse := acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 403, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && r.PartitionKey == `["receiver"]`
	}})
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, []cdb.WorkItem{pokeItem("receiver")}, cdb.ExecutionMetadata{}, nil))
	clock.Advance(7 * time.Second)

	eventuallyGauge(t, rec, "cdb.outbox.backlog", nil, equals(1), "the event waits in the turn's outbox")
	eventuallyGauge(t, rec, "cdb.outbox.oldest_age", nil, func(v float64) bool { return v >= 7 && v < 60 }, "since its commit")
	assert.Zero(t, rec.Sum("cdb.outbox.delivered", nil), "nothing delivered yet")

	refuse()
	require.NoError(t, p.ReconcileOutbox(ctx))
	assert.Equal(t, 1.0, rec.Sum("cdb.outbox.delivered", nil), "one outbox delivered")
	eventuallyGauge(t, rec, "cdb.outbox.backlog", nil, equals(0), "delivered and deleted")
	eventuallyGauge(t, rec, "cdb.outbox.oldest_age", nil, equals(0), "nothing waits")
}

// queuePoisonCandidate writes an orchestrator message no version decodes,
// one look away from being set aside as poison.
func queuePoisonCandidate(t *testing.T, p *cdb.CosmosProvider, instance, id string) {
	t.Helper()
	now := time.Now()
	doc := map[string]any{"id": id, "pk": instance, "type": "msg", "instance": instance, "slot": 0,
		"visibleAt": now.UnixMilli(), "seq": now.UnixMicro(), "lockedUntil": 0, "attempts": 9,
		"item": `{"FromTheFuture":{"instance":"` + instance + `"}}`}
	_, err := p.Container().CreateItem(rulesContext(t), cdb.NewPartitionKeyString(instance), mustJSON(t, doc), nil)
	require.NoError(t, err)
}

// A message set aside as poison is counted once, and shows among the held
// messages beside a parked one.
func TestTelemetryPoisonIsCountedOnceAndHeldMessagesAreSampled(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	clock := newTestClock()
	p := newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, Now: clock.Now, GaugeInterval: testGaugeInterval})
	providertest.CreateInstance(ctx, t, p, "upgraded")
	queuePoisonCandidate(t, p, "upgraded", "m|future")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("never-started"), 0))
	for i := 0; i < 3; i++ {
		item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, item, "the poison message is never handed over, the poke waits for its start")
		clock.Advance(5 * time.Second) // within the poke's 30 s wait for a start
	}
	assert.Equal(t, 1.0, rec.Sum("cdb.poison", nil), "set aside once, counted once")
	assert.Len(t, rec.Points("cdb.poison", map[string]any{"cdb.queue": "orchestrator"}), 1)

	eventuallyGauge(t, rec, "cdb.messages.held", map[string]any{"cdb.held.kind": "poison"}, equals(1), "the poison message is held")
	eventuallyGauge(t, rec, "cdb.messages.held", map[string]any{"cdb.held.kind": "parked"}, equals(1), "the poke is parked")
	eventuallyGauge(t, rec, "cdb.messages.held.oldest_age", map[string]any{"cdb.held.kind": "parked"},
		func(v float64) bool { return v >= 15 && v < 30 }, "parked since its enqueue, 15 s ago")
}

// A lost lock is counted once, however many calls of its holder learn of
// it: here another process took the instance and the activity after their
// locks expired by its clock; the holder's renewal finds each lost, and
// its ack and abandon after that are refused without counting again.
func TestTelemetryALockLostIsCountedOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	rec := telemetrytest.NewRecorder()
	holder := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	later := newTestClock()
	later.Advance(2 * time.Minute)
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: later.Now})

	require.NoError(t, holder.EnqueueForOrchestrator(ctx, providertest.StartItem("taken"), 0))
	require.NoError(t, holder.EnqueueForWorker(ctx, activity("taken", 2, "")))
	item, token, _, err := holder.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	act, workToken, _ := fetchWork(ctx, t, holder, nil)
	require.NotNil(t, act)

	taken, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, taken, "the other process's clock says the lock expired")
	takenWork, _, _ := fetchWork(ctx, t, other, nil)
	require.NotNil(t, takenWork)

	require.ErrorIs(t, holder.RenewOrchestrationItemLock(ctx, token, time.Minute), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, holder.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("taken", 1)}, nil, nil, providertest.TestOrchMetadata(), nil), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, holder.AbandonOrchestrationItem(ctx, token, 0, false), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, holder.RenewWorkItemLock(ctx, workToken, time.Minute), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, holder.AckWorkItem(ctx, workToken, nil), cdb.ErrInvalidLockToken)

	assert.Equal(t, 1.0, rec.Sum("cdb.locks.lost", map[string]any{"cdb.lock.kind": "orchestration"}))
	assert.Equal(t, 1.0, rec.Sum("cdb.locks.lost", map[string]any{"cdb.lock.kind": "work_item"}))
	assert.Len(t, rec.Points("cdb.locks.lost", nil), 2, "one point per lost lock")
}

// A cancelled activity is no lost lock: the renewal that reads its
// tombstone back tells the runtime, and counts nothing.
func TestTelemetryACancelledActivityIsNoLostLock(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	p := newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, GaugeInterval: -1})
	providertest.CreateInstance(ctx, t, p, "cancelling")
	require.NoError(t, p.EnqueueForWorker(ctx, activity("cancelling", 2, "")))
	act, workToken, _ := fetchWork(ctx, t, p, nil)
	require.NotNil(t, act)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("cancelling"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{},
		[]cdb.ScheduledActivityIdentifier{{Instance: "cancelling", ExecutionID: 1, ActivityID: 2}}))

	require.ErrorIs(t, p.RenewWorkItemLock(ctx, workToken, time.Minute), cdb.ErrInvalidLockToken, "the runtime learns of the cancellation")
	assert.Empty(t, rec.Points("cdb.locks.lost", nil))
}

// A lock that expires while its holder works is lost too: counted once, by
// the first call that finds it expired.
func TestTelemetryAnExpiredLockIsCountedOnce(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	clock := newTestClock()
	p := newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, Now: clock.Now, GaugeInterval: -1})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("slow"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	require.ErrorIs(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("slow", 1)}, nil, nil, providertest.TestOrchMetadata(), nil), cdb.ErrInvalidLockToken)
	assert.Equal(t, 1.0, rec.Sum("cdb.locks.lost", map[string]any{"cdb.lock.kind": "orchestration"}))
}

// A session another owner took while this process held it is counted as a
// lost session lock by the renewal that finds it gone.
func TestTelemetryALostSessionIsCounted(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	rec := telemetrytest.NewRecorder()
	holder := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	require.NoError(t, holder.EnqueueForWorker(ctx, activity("sessioned", 2, "s1")))
	act, _, _ := fetchWork(ctx, t, holder, sessionOf("A"))
	require.NotNil(t, act)

	// The session document changes under the renewal's feet: another owner
	// takes it between the renewal's query and its write.
	acct.InjectFault(cdb.FakeFault{Times: 1, Kind: cdb.FaultStatus, Status: 412, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "PatchItem" && bytes.Contains(r.Body, []byte("lockedUntil"))
	}})
	renewed, err := holder.RenewSessionLock(ctx, []string{"A"}, time.Minute, time.Hour)
	require.NoError(t, err)
	assert.Zero(t, renewed)
	assert.Equal(t, 1.0, rec.Sum("cdb.locks.lost", map[string]any{"cdb.lock.kind": "session"}))
}

// The requests of an orchestration's turn, once its instance document is
// in hand, carry its name, so the RU can be summed by orchestration; the
// candidate query, made before any instance is known, carries none.
func TestTelemetryRequestChargeIsAttributedToTheOrchestrationName(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	providertest.CreateInstance(ctx, t, p, "named")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("named"), 0))
	rec.Reset()

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute))
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))

	const charge = "azure.cosmosdb.client.operation.request_charge"
	batch := map[string]any{"db.operation.name": "ExecuteTransactionalBatch"}
	namedBatch := map[string]any{"db.operation.name": "ExecuteTransactionalBatch", "durable.orchestration.name": "TestOrch"}
	named := rec.Points(charge, namedBatch)
	require.Len(t, named, 2, "the renewal's and the ack's batches carry the name")
	for _, point := range named {
		assert.Positive(t, point.Value, "an RU charge")
	}
	assert.Len(t, rec.Points(charge, batch), 3, "the lock batch, sent before the instance document is known, carries none")
	assert.Empty(t, rec.Points(charge, map[string]any{"db.operation.name": "QueryItems", "durable.orchestration.name": "TestOrch"}),
		"nor does the candidate query (the turn's state was cached: no load)")

	// A process without the instance's state cached loads it after the
	// lock: that read is the orchestration's too.
	fresh := telemetrytest.NewRecorder()
	other := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: fresh}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	require.NoError(t, other.EnqueueForOrchestrator(ctx, pokeItem("named"), 0))
	item, token, _, err = other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, other.AbandonOrchestrationItem(ctx, token, 0, false))
	queries := fresh.Points(charge, map[string]any{"db.operation.name": "QueryItems"})
	loads := fresh.Points(charge, map[string]any{"db.operation.name": "QueryItems", "durable.orchestration.name": "TestOrch"})
	require.Len(t, loads, 1, "the load of the turn's state")
	assert.Len(t, queries, 2, "and the candidate query, without")
	assert.Len(t, fresh.Points(charge, namedBatch), 1, "the abandon's batch")
}

// Before an instance document is in hand, its queue items name the
// orchestration: a start's lock batch, an activity's claim, renewal and
// ack, and the lock batch on the activity's completion are all counted to
// it, on a process that never saw the instance before, so an
// orchestration's RU do not hide among the unnamed requests.
func TestTelemetryQueueItemsNameTheirOrchestrationForTheirLockAndWorker(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	starter := newTelemetryProvider(t, acct, cdb.Telemetry{}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	require.NoError(t, starter.EnqueueForOrchestrator(ctx, providertest.StartItem("shop"), 0))

	rec := telemetrytest.NewRecorder()
	p := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	work := cdb.ActivityExecuteMessage{Instance: "shop", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("shop", 1)},
		[]cdb.WorkItem{work}, nil, providertest.TestOrchMetadata(), nil))

	other := newTelemetryProvider(t, acct, cdb.Telemetry{Meter: rec}, cdb.Config{ShortPolling: true, GaugeInterval: -1})
	item, wtoken, _, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, other.RenewWorkItemLock(ctx, wtoken, time.Minute))
	require.NoError(t, other.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: "shop", ExecutionID: 1, ID: 2, Result: "ok"}))
	_, token, _, err = other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, other.AbandonOrchestrationItem(ctx, token, 0, false))

	const charge = "azure.cosmosdb.client.operation.request_charge"
	for _, op := range []string{"ExecuteTransactionalBatch", "PatchItem"} {
		all := rec.Points(charge, map[string]any{"db.operation.name": op})
		named := rec.Points(charge, map[string]any{"db.operation.name": op, "durable.orchestration.name": "TestOrch"})
		require.NotEmpty(t, all, op)
		assert.Len(t, named, len(all), "every %s names the orchestration", op)
	}
	// Lock batches: the start's and the completion's; the ack, the
	// worker's ack and the abandon; the claim and the renewal patches.
	assert.Len(t, rec.Points(charge, map[string]any{"db.operation.name": "ExecuteTransactionalBatch"}), 5)
	assert.Len(t, rec.Points(charge, map[string]any{"db.operation.name": "PatchItem"}), 2)
}

// With process leases, the slots the process owns per lease key are
// sampled from its last renewal: alone on the container, every slot.
func TestTelemetryProcessLeaseSlotsAreSampled(t *testing.T) {
	ctx := rulesContext(t)
	rec := telemetrytest.NewRecorder()
	p := newTelemetryProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Telemetry{Meter: rec},
		cdb.Config{ShortPolling: true, GaugeInterval: testGaugeInterval, ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: "alone"}})
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item)
	eventuallyGauge(t, rec, "cdb.process_lease.slots", map[string]any{"cdb.lease.key": "orchestrator/*"}, equals(256), "a lone process owns every slot")
}
