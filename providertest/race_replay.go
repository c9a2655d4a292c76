package providertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// raceReplayTests is duroxide 0.1.32's provider_validation/race_replay.rs:
// runtime-level checks that start a runtime on the provider (here the
// durable runtime), so they check the store and this project's runtime
// together: a duplicate start never replaces a running or continued
// execution, the continue-as-new admission window keeps every input, and
// event stamps come back exactly as written, since the first
// OrchestrationStarted's stamp selects an execution's replay rules.
func raceReplayTests() []Test {
	return []Test{
		{Name: "TestDuplicateStartPreservesPinnedHandler", Run: testDuplicateStartPreservesPinnedHandler},
		{Name: "TestContinueAsNewUnregisteredBackoff", Run: testContinueAsNewUnregisteredBackoff},
		{Name: "TestContinueAsNewDuplicateStart", Run: testContinueAsNewDuplicateStart},
		{Name: "TestContinueAsNewTransitionDelivery", Run: testContinueAsNewTransitionDelivery},
		{Name: "TestQueueRaceCancellationReplay", Run: testQueueRaceCancellationReplay},
		{Name: "TestContinueAsNewQueueRaceReplay", Run: testContinueAsNewQueueRaceReplay},
		{Name: "TestQueueReplayVersionStampRoundtrip", Run: testQueueReplayVersionStampRoundtrip},
		{Name: "TestPositionalWaitRaceReplay", Run: testPositionalWaitRaceReplay},
		{Name: "TestLegacyQueueRaceDecisionPreserved", Run: testLegacyQueueRaceDecisionPreserved},
	}
}

// waitsForQueueRaceRules is why a case that needs the 0.1.31 replay rules
// is skipped: the runtime stamps 0.1.29 and replays executions up to
// rrReplayMax with the legacy queue-race semantics only.
const waitsForQueueRaceRules = "waits for the durable runtime to implement duroxide 0.1.31's queue-race replay rules " +
	"(issue 23, D6: dropped dequeues leave FIFO matching at once, positional waits cancel at drop, " +
	"continue-as-new carries exact unread arrivals) and to replay executions stamped 0.1.31"

// rrReplayMax is the newest stamp the tests' runtimes replay. duroxide
// 0.1.30 changed no replay rule (the queue-race rules came with 0.1.31), so
// the durable runtime, which implements 0.1.29's, replays 0.1.30 histories
// identically; its default range stops at its own stamp, 0.1.29.
var rrReplayMax = cdb.NewSemanticVersion(0, 1, 30)

// rrEvent is duroxide's Event::with_event_id: an event of the runtime's
// build (durable.DuroxideVersion), timestamped now.
func rrEvent(eventID uint64, instance string, executionID uint64, source *uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{
		EventID: eventID, SourceEventID: source, InstanceID: instance, ExecutionID: executionID,
		TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: durable.DuroxideVersion, Kind: kind,
	}
}

// rrStarted is an OrchestrationStarted of version 1.0.0 with no parent.
func rrStarted(name, input string) cdb.OrchestrationStarted {
	return cdb.OrchestrationStarted{Name: name, Version: "1.0.0", Input: input}
}

// rrSeed creates instance through the provider alone, as duroxide's tests
// do: a start is enqueued and fetched, and the ack writes history, sends
// orchestratorItems and stores md.
func rrSeed(ctx context.Context, t *testing.T, p cdb.Provider, instance string, history []cdb.Event, orchestratorItems []cdb.WorkItem, md cdb.ExecutionMetadata) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0), "seed start")
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "seed fetch")
	require.NotNil(t, item, "visible seed")
	require.Equal(t, instance, item.Instance, "seed fetch")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, history, nil, orchestratorItems, md, nil),
		"seed acknowledgement")
}

// rrRegistry builds a registry from register, failing the test on a
// registration error.
func rrRegistry(t *testing.T, register func(r *durable.Registry) error) *durable.Registry {
	t.Helper()
	r := durable.NewRegistry()
	require.NoError(t, register(r), "register orchestrations")
	return r
}

// rrRuntime is a running durable runtime on the provider under test.
type rrRuntime struct {
	t  *testing.T
	rt *durable.Runtime
}

// rrStart starts a durable runtime on p. The tests' options are duroxide's
// (a zero field is the runtime's default); the replay range reaches
// rrReplayMax, and the runtime logs to the test. Shutdown stops it; a test
// that ends first stops it in its cleanup.
func rrStart(t *testing.T, p cdb.Provider, registry *durable.Registry, opts durable.Options) *rrRuntime {
	t.Helper()
	if opts.SupportedReplayVersions == nil {
		opts.SupportedReplayVersions = &cdb.SemverRange{Max: rrReplayMax}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := durable.Start(context.Background(), p, registry, opts)
	require.NoError(t, err, "start runtime")
	r := &rrRuntime{t: t, rt: rt}
	t.Cleanup(r.Shutdown)
	return r
}

// Shutdown stops the runtime and waits for it (at most 10s for work in
// flight); calling it again does nothing.
func (r *rrRuntime) Shutdown() {
	if r.rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.rt.Shutdown(ctx); err != nil {
		r.t.Logf("runtime shutdown: %v", err)
	}
	r.rt = nil
}

// testLogWriter sends a runtime's log lines to the test log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// rrWait is duroxide's Client::wait_for_orchestration: the final status of
// instance, or an error after timeout.
func rrWait(ctx context.Context, p cdb.Provider, instance string, timeout time.Duration) (durable.Status, error) {
	return durable.NewClient(p).WaitForCompletion(ctx, instance, timeout)
}

// requireCompleted asserts a completed status with output want.
func requireCompleted(t *testing.T, st durable.Status, err error, want string, msgAndArgs ...any) {
	t.Helper()
	require.NoError(t, err, msgAndArgs...)
	require.Equal(t, durable.StateCompleted, st.State, "status %+v: %s", st, fmt.Sprint(msgAndArgs...))
	require.Equal(t, want, st.Output, msgAndArgs...)
}

// await is Future.Await for handlers that only pass its error on.
func await(f *durable.Future) (string, error) { return f.Await() }

// Duplicate client starts cannot switch a running execution to the latest
// handler, another handler name, or a replacement input.
func testDuplicateStartPreservesPinnedHandler(t *testing.T, f Factory) {
	for _, duplicateName := range []string{"Original", "WrongHandler"} {
		t.Run(duplicateName, func(t *testing.T) {
			ctx := testContext(t)
			p := f.NewProvider(t, ProviderOptions{})
			instance := "provider-pinned-handler-" + duplicateName
			rrSeed(ctx, t, p, instance,
				[]cdb.Event{
					rrEvent(1, instance, 1, nil, rrStarted("Original", "original-input")),
					rrEvent(2, instance, 1, nil, cdb.ActivityScheduled{Name: "tick", Input: "v1"}),
				},
				[]cdb.WorkItem{
					cdb.StartOrchestration{Instance: instance, Orchestration: duplicateName, Input: "wrong-input",
						ExecutionID: cdb.InitialExecutionID},
					cdb.ActivityCompleted{Instance: instance, ExecutionID: 1, ID: 2, Result: "ok"},
				},
				cdb.ExecutionMetadata{Status: ptr(cdb.StatusRunning), OrchestrationName: ptr("Original"),
					OrchestrationVersion: ptr("1.0.0")})
			registry := rrRegistry(t, func(r *durable.Registry) error {
				return errors.Join(
					r.RegisterOrchestrationVersion("Original", "1.0.0", func(ctx *durable.OrchestrationContext, input string) (string, error) {
						if _, err := ctx.ScheduleActivity("tick", "v1").Await(); err != nil {
							return "", err
						}
						return "v1:" + input, nil
					}),
					r.RegisterOrchestrationVersion("Original", "2.0.0", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
						if _, err := ctx.ScheduleActivity("tick", "v2").Await(); err != nil {
							return "", err
						}
						return "v2", nil
					}),
					r.RegisterOrchestration("WrongHandler", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
						if _, err := ctx.ScheduleActivity("tick", "wrong").Await(); err != nil {
							return "", err
						}
						return "wrong", nil
					}),
				)
			})
			rt := rrStart(t, p, registry, durable.Options{MinPollInterval: 10 * time.Millisecond})
			st, err := rrWait(ctx, p, instance, 10*time.Second)
			rt.Shutdown()
			requireCompleted(t, st, err, "v1:original-input", "duplicate client start must be inert")
		})
	}
}

// An old semantic version must round-trip without being restamped by a
// newer reader: on read_with_execution and on the fetch path.
func testQueueReplayVersionStampRoundtrip(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const instance = "queue-version-roundtrip"
	event := rrEvent(1, instance, 1, nil, cdb.OrchestrationStarted{Name: "TestOrch", Version: "1.0.0", Input: "{}"})
	event.DuroxideVersion = "0.1.30"
	rrSeed(ctx, t, p, instance, []cdb.Event{event}, nil, TestOrchMetadata())
	history, err := p.ReadWithExecution(ctx, instance, 1)
	require.NoError(t, err)
	require.Equal(t, []cdb.Event{event}, history)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaised{Instance: instance, Name: "fetch-stamp", Data: "wake"}, 0),
		"enqueue fetch-path stamp probe")
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "fetch old-stamped execution")
	require.NotNil(t, item, "old-stamped execution was not fetchable")
	require.Equal(t, "0.1.30", item.History[0].DuroxideVersion, "fetch path restamped history")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true), "release stamp probe lock")
}

func testContinueAsNewUnregisteredBackoff(t *testing.T, f Factory) { t.Skip("todo") }
func testContinueAsNewDuplicateStart(t *testing.T, f Factory)      { t.Skip("todo") }
func testContinueAsNewTransitionDelivery(t *testing.T, f Factory)  { t.Skip("todo") }
func testQueueRaceCancellationReplay(t *testing.T, f Factory)      { t.Skip("todo") }
func testContinueAsNewQueueRaceReplay(t *testing.T, f Factory)     { t.Skip("todo") }
func testPositionalWaitRaceReplay(t *testing.T, f Factory)         { t.Skip("todo") }
func testLegacyQueueRaceDecisionPreserved(t *testing.T, f Factory) { t.Skip("todo") }
