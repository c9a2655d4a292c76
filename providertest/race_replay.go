package providertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
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

// rrEvent is duroxide's Event::with_event_id: an event of the runtime's
// build (durable.DuroxideVersion), timestamped now.
func rrEvent(eventID uint64, instance string, executionID uint64, source *uint64, kind cdb.EventKind) cdb.Event {
	event := newEvent(eventID, instance, executionID, kind)
	event.SourceEventID = source
	event.DuroxideVersion = durable.DuroxideVersion
	return event
}

// rrStarted is an OrchestrationStarted of version 1.0.0 with no parent.
func rrStarted(name, input string) cdb.OrchestrationStarted {
	return orchestrationStarted(name, "1.0.0", input)
}

// rrSeed creates instance through the provider alone, as duroxide's tests
// do: a start is enqueued and fetched, and the ack writes history, sends
// orchestratorItems and stores md.
func rrSeed(ctx context.Context, t *testing.T, p cdb.Provider, instance string, history []cdb.Event, orchestratorItems []cdb.WorkItem, md cdb.ExecutionMetadata) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem(instance), 0), "seed start")
	item, token := fetchOrchestration(ctx, t, p, lockLong, "visible seed")
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
// (a zero field is the runtime's default: it replays executions stamped up
// to its own 0.1.32, each by the rules of its stamp, as the tests' seeded
// 0.1.30 and 0.1.31 executions need), and the runtime logs to the test. Shutdown stops it; a test
// that ends first stops it in its cleanup.
func rrStart(t *testing.T, p cdb.Provider, registry *durable.Registry, opts durable.Options) *rrRuntime {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := durable.Start(context.Background(), p, registry, opts)
	require.NoError(t, err, "start runtime")
	r := &rrRuntime{t: t, rt: rt}
	t.Cleanup(r.Shutdown)
	return r
}

// Shutdown stops the runtime and waits for it (at most 10s, scaled with the
// host's slowness, for work in flight); calling it again does nothing.
func (r *rrRuntime) Shutdown() {
	if r.rt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scaled(10*time.Second))
	defer cancel()
	if err := r.rt.Shutdown(ctx); err != nil {
		r.t.Logf("runtime shutdown: %v", err)
	}
	r.rt = nil
}

// testLogWriter sends a runtime's log lines to the test log.
// onMessage is a log handler that closes seen at the first record of
// message, and hands every record on.
type onMessage struct {
	slog.Handler
	message string
	seen    chan struct{}
	once    *sync.Once
}

func (h onMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.message {
		h.once.Do(func() { close(h.seen) })
	}
	return h.Handler.Handle(ctx, r)
}

func (h onMessage) WithAttrs(attrs []slog.Attr) slog.Handler {
	return onMessage{Handler: h.Handler.WithAttrs(attrs), message: h.message, seen: h.seen, once: h.once}
}

func (h onMessage) WithGroup(name string) slog.Handler {
	return onMessage{Handler: h.Handler.WithGroup(name), message: h.message, seen: h.seen, once: h.once}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// rrWait is duroxide's Client::wait_for_orchestration: the final status of
// instance, or an error after timeout. duroxide's client reads the status
// from the history (Provider::read), so this one does too: historyStatus
// hides a provider's StatusReader from durable's client.
// The timeout is scaled with the host's slowness.
func rrWait(ctx context.Context, p cdb.Provider, instance string, timeout time.Duration) (durable.Status, error) {
	return durable.NewClient(historyStatus{p}).WaitForCompletion(ctx, instance, scaled(timeout))
}

// historyStatus is a provider without its optional StatusReader.
type historyStatus struct{ cdb.Provider }

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
					cdb.StartOrchestrationMessage{Instance: instance, Orchestration: duplicateName, Input: "wrong-input",
						ExecutionID: cdb.InitialExecutionID},
					cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: 2, Result: "ok"},
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
	event := rrEvent(1, instance, 1, nil, orchestrationStarted("TestOrch", "1.0.0", "{}"))
	event.DuroxideVersion = "0.1.30"
	rrSeed(ctx, t, p, instance, []cdb.Event{event}, nil, TestOrchMetadata())
	history, err := p.ReadWithExecution(ctx, instance, 1)
	require.NoError(t, err)
	require.Equal(t, []cdb.Event{event}, history)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: instance, Name: "fetch-stamp", Data: "wake"}, 0),
		"enqueue fetch-path stamp probe")
	item, token := fetchOrchestration(ctx, t, p, lockLong, "old-stamped execution was not fetchable")
	require.Equal(t, "0.1.30", item.History[0].DuroxideVersion, "fetch path restamped history")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true), "release stamp probe lock")
}

// rrContinueAsNew is the successor start of a Transition-style instance:
// version 1.0.0, input "next", carrying "carried" on queue q.
func rrContinueAsNew(instance, orchestration string) cdb.ContinueAsNewMessage {
	return cdb.ContinueAsNewMessage{Instance: instance, Orchestration: orchestration, Input: "next", Version: ptr("1.0.0"),
		CarryForwardEvents: []cdb.CarryForwardEvent{{Name: "q", Data: "carried"}}}
}

// rrDequeueTwice is a successor that reads two queue messages and returns
// them joined, failing unless it runs as execution 2.
func rrDequeueTwice(ctx *durable.OrchestrationContext, _ string) (string, error) {
	if ctx.ExecutionID() != 2 {
		return "", fmt.Errorf("ran as execution %d, want 2", ctx.ExecutionID())
	}
	first, err := ctx.DequeueEvent("q").Await()
	if err != nil {
		return "", err
	}
	second, err := ctx.DequeueEvent("q").Await()
	if err != nil {
		return "", err
	}
	return first + "," + second, nil
}

// During rolling upgrades an unregistered successor can hide its CAN start
// through backoff. New inputs must survive until a compatible runtime
// resumes it.
func testContinueAsNewUnregisteredBackoff(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const instance = "provider-can-unregistered-backoff"
	rrSeed(ctx, t, p, instance,
		[]cdb.Event{
			rrEvent(1, instance, 1, nil, rrStarted("RollingSuccessor", "old")),
			rrEvent(2, instance, 1, nil, cdb.OrchestrationContinuedAsNew{Input: "next"}),
		},
		[]cdb.WorkItem{rrContinueAsNew(instance, "RollingSuccessor")},
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusContinuedAsNew)})
	// The backoff hides the start across the runtime's shutdown and the
	// inspecting fetch below: duroxide's 2 s, scaled with the host.
	backoff := scaled(2 * time.Second)
	backedOff := make(chan struct{})
	oldRuntime := rrStart(t, p, durable.NewRegistry(), durable.Options{
		OrchestrationConcurrency: 1, MinPollInterval: 10 * time.Millisecond,
		UnregisteredBackoffBase: backoff, UnregisteredBackoffMax: backoff,
		Logger: slog.New(onMessage{Handler: slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}),
			message: "orchestration not registered; abandoning with backoff", seen: backedOff, once: &sync.Once{}}),
	})
	// A loaded machine (the race detector, parallel tests) can let the
	// inspection below win the item many times before the runtime takes
	// it: the wait is long. It ends once the runtime backed the start off
	// and an inspection finds it hidden: one that finds nothing only
	// because the runtime holds it would see it again as soon as a
	// stopping runtime lets go of a fetch's lock.
	hidden := false
	select {
	case <-backedOff:
		hidden = rrWaitUntilHidden(ctx, t, p, 30*time.Second)
	case <-time.After(scaled(30 * time.Second)):
	}
	oldRuntime.Shutdown()
	require.True(t, hidden, "unregistered runtime must fetch and hide the start")
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err, "inspect after runtime stopped")
	require.Nil(t, item, "start must be delayed by unregistered-handler backoff, not merely locked")
	history, err := p.ReadWithExecution(ctx, instance, 1)
	require.NoError(t, err, "predecessor history")
	require.Len(t, history, 2)

	client := durable.NewClient(p)
	require.NoError(t, client.EnqueueEvent(ctx, instance, "q", "late"), "input during successor backoff")
	registry := rrRegistry(t, func(r *durable.Registry) error {
		return r.RegisterOrchestration("RollingSuccessor", rrDequeueTwice)
	})
	newRuntime := rrStart(t, p, registry, durable.Options{MinPollInterval: 10 * time.Millisecond})
	st, err := rrWait(ctx, p, instance, 10*time.Second)
	newRuntime.Shutdown()
	requireCompleted(t, st, err, "carried,late", "successor and window input must survive rolling-node backoff")
}

// rrWaitUntilHidden fetches every 20ms until a fetch finds nothing, for at
// most timeout (scaled with the host's slowness); a batch it takes meanwhile must hold the ContinueAsNew
// message and is released at once with its attempt undone.
func rrWaitUntilHidden(ctx context.Context, t *testing.T, p cdb.Provider, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	for time.Now().Before(deadline) {
		// Slower than the runtime's polls, so the runtime, not this
		// inspection, mostly takes the start.
		time.Sleep(100 * time.Millisecond)
		item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
		switch {
		case err != nil && cdb.IsRetryable(err):
			t.Logf("retrying backoff-test visibility inspection: %v", err)
		case err != nil:
			require.NoError(t, err, "backoff-test fetch failed")
		case item == nil:
			return true
		default:
			require.True(t, slices.ContainsFunc(item.Messages, isContinueAsNew), "inspection fetched %v", item.Messages)
			require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true), "release competing inspection fetch")
		}
	}
	return false
}

func isContinueAsNew(it cdb.WorkItem) bool {
	_, ok := it.(cdb.ContinueAsNewMessage)
	return ok
}

// A duplicate start must not replace the durable CAN successor, even when
// it precedes that successor in queue order. A colliding parent must be
// notified.
func testContinueAsNewDuplicateStart(t *testing.T, f Factory) {
	for _, c := range []struct {
		stamp     string
		collision bool
	}{{"0.1.30", false}, {"0.1.30", true}, {"0.1.31", false}, {"0.1.31", true}} {
		t.Run(fmt.Sprintf("%s/collision=%t", c.stamp, c.collision), func(t *testing.T) {
			testContinueAsNewDuplicateStartCase(t, f, c.stamp, c.collision)
		})
	}
}

func testContinueAsNewDuplicateStartCase(t *testing.T, f Factory, stamp string, collision bool) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const parent = "provider-can-duplicate-parent"
	const instance = parent + "::can-child"
	started := func(instance, name string) cdb.Event {
		ev := rrEvent(1, instance, 1, nil, rrStarted(name, ""))
		ev.DuroxideVersion = stamp
		return ev
	}
	if collision {
		rrSeed(ctx, t, p, parent, []cdb.Event{
			started(parent, "CollisionParent"),
			rrEvent(2, parent, 1, nil, cdb.SubOrchestrationScheduled{Name: "Transition", Instance: "can-child", Input: "duplicate"}),
		}, nil, cdb.ExecutionMetadata{Status: ptr(cdb.StatusRunning)})
	}
	duplicate := cdb.StartOrchestrationMessage{Instance: instance, Orchestration: "WrongHandler", Input: "duplicate",
		ExecutionID: cdb.InitialExecutionID}
	if collision {
		duplicate.ParentInstance, duplicate.ParentID, duplicate.ParentExecutionID = ptr(parent), ptr(uint64(2)), ptr(uint64(1))
	}
	rrSeed(ctx, t, p, instance,
		[]cdb.Event{
			started(instance, "Transition"),
			rrEvent(2, instance, 1, nil, cdb.OrchestrationContinuedAsNew{Input: "next"}),
		},
		[]cdb.WorkItem{duplicate, rrContinueAsNew(instance, "Transition"), cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "late"}},
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusContinuedAsNew)})
	registry := rrRegistry(t, func(r *durable.Registry) error {
		return errors.Join(
			r.RegisterOrchestration("Transition", rrDequeueTwice),
			r.RegisterOrchestration("CollisionParent", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
				value, err := ctx.ScheduleSubOrchestration("Transition", "duplicate", durable.WithInstanceID("can-child")).Await()
				if err == nil {
					return "", fmt.Errorf("collision unexpectedly resolved: %s", value)
				}
				return err.Error(), nil
			}),
		)
	})
	rt := rrStart(t, p, registry, durable.Options{MinPollInterval: 10 * time.Millisecond})
	st, err := rrWait(ctx, p, instance, 10*time.Second)
	var parentSt durable.Status
	var parentErr error
	if collision {
		parentSt, parentErr = rrWait(ctx, p, parent, 10*time.Second)
	}
	rt.Shutdown()
	requireCompleted(t, st, err, "carried,late", "CAN successor must not livelock behind duplicate start")
	if collision {
		require.NoError(t, parentErr, "colliding parent must receive a notification")
		require.Equal(t, durable.StateCompleted, parentSt.State, "colliding parent must receive a notification: %+v", parentSt)
		require.True(t, strings.Contains(parentSt.Output, "already exists") && !strings.Contains(parentSt.Output, "is terminal"),
			"collision notification must describe an existing logical instance, not a dead successor: %q", parentSt.Output)
	}
	old, err := p.ReadWithExecution(ctx, instance, 1)
	require.NoError(t, err, "predecessor history")
	require.Len(t, old, 2, "duplicate start must not mutate old recorded history")
	next, err := p.ReadWithExecution(ctx, instance, 2)
	require.NoError(t, err, "successor history")
	require.NotEmpty(t, next, "successor history")
	start, ok := next[0].Kind.(cdb.OrchestrationStarted)
	require.True(t, ok && start.Name == "Transition" && start.Input == "next", "successor start: %+v", next[0].Kind)
}

// Persistent inputs must survive a CAN-terminal fetch without the
// successor's start item. The delayed start deterministically exposes the
// provider's visibility-cutoff window. duroxide runs it once per
// predecessor stamp.
func testContinueAsNewTransitionDelivery(t *testing.T, f Factory) {
	for _, stamp := range []string{"0.1.30", "0.1.31"} {
		t.Run(stamp, func(t *testing.T) {
			for _, shape := range []string{"queue", "race", "mixed-stale", "signal", "cancel", "future-completion", "stale-only"} {
				t.Run(shape, func(t *testing.T) {
					t.Parallel()
					testTransitionDeliveryShape(t, f, stamp, shape)
				})
			}
		})
	}
}

// transitionInputs are the messages the CAN-terminal turn of shape sends to
// its own instance.
func transitionInputs(instance, shape string) []cdb.WorkItem {
	late := cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "late"}
	switch shape {
	case "mixed-stale":
		return []cdb.WorkItem{late,
			cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: 99, Result: "stale"},
			cdb.TimerFiredMessage{Instance: instance, ExecutionID: 1, ID: 100, FireAtMs: 1},
			cdb.SubOrchestrationCompletedMessage{ParentInstance: instance, ParentExecutionID: 1, ParentID: 101, Result: "stale"},
		}
	case "future-completion":
		return []cdb.WorkItem{cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 2, ID: 99, Result: "unmatched"}}
	case "stale-only":
		return []cdb.WorkItem{cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: 99, Result: "unmatched"}}
	case "signal":
		return []cdb.WorkItem{late, cdb.ExternalRaisedMessage{Instance: instance, Name: "signal", Data: "answer"}}
	case "cancel":
		return []cdb.WorkItem{late, cdb.CancelInstanceMessage{Instance: instance, Reason: "requested-during-CAN"}}
	}
	return []cdb.WorkItem{late}
}

// transitionOrchestration is the Transition orchestration of shape: its
// first execution continues as new, the successor reads the window's
// inputs.
func transitionOrchestration(shape string) durable.OrchestrationFunc {
	return func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		if ctx.ExecutionID() == 1 {
			return ctx.ContinueAsNew("next")
		}
		switch shape {
		case "stale-only":
			return await(ctx.DequeueEvent("q"))
		case "signal":
			// duroxide's subscription: the window's answer counts only if it
			// arrives once the wait is bound.
			answer, err := ctx.WaitForEventUnbuffered("signal").Await()
			if err != nil {
				return "", err
			}
			first, err := ctx.DequeueEvent("q").Await()
			if err != nil {
				return "", err
			}
			second, err := ctx.DequeueEvent("q").Await()
			if err != nil {
				return "", err
			}
			return first + "," + second + "|" + answer, nil
		}
		var values []string
		for len(values) < 2 {
			if shape != "race" {
				value, err := ctx.DequeueEvent("q").Await()
				if err != nil {
					return "", err
				}
				values = append(values, value)
				continue
			}
			dequeue := ctx.DequeueEvent("q")
			if ctx.Select(dequeue, ctx.ScheduleTimer(10*time.Millisecond)) == 0 {
				value, err := dequeue.Await()
				if err != nil {
					return "", err
				}
				values = append(values, value)
			}
		}
		return strings.Join(values, ","), nil
	}
}

func testTransitionDeliveryShape(t *testing.T, f Factory, stamp, shape string) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	instance := fmt.Sprintf("provider-can-window-%s-%s", stamp, shape)
	start := rrEvent(1, instance, 1, nil, rrStarted("Transition", "old"))
	start.DuroxideVersion = stamp
	pinned, err := cdb.ParseSemanticVersion(stamp)
	require.NoError(t, err, "test stamp must parse")
	rrSeed(ctx, t, p, instance,
		[]cdb.Event{start, rrEvent(2, instance, 1, nil, cdb.OrchestrationContinuedAsNew{Input: "next"})},
		transitionInputs(instance, shape),
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusContinuedAsNew), Output: ptr("next"),
			OrchestrationName: ptr("Transition"), OrchestrationVersion: ptr("1.0.0"), PinnedDuroxideVersion: &pinned})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, rrContinueAsNew(instance, "Transition"), 2*time.Second),
		"must enqueue the delayed successor start")
	registry := rrRegistry(t, func(r *durable.Registry) error {
		return r.RegisterOrchestration("Transition", transitionOrchestration(shape))
	})
	rt := rrStart(t, p, registry, durable.Options{
		MinPollInterval: 10 * time.Millisecond,
		// Waiting inputs back off like an unregistered handler; the 2 s
		// hidden start must arrive well inside the default poison budget.
		UnregisteredBackoffBase: 250 * time.Millisecond, UnregisteredBackoffMax: time.Second,
	})
	if shape == "signal" {
		require.True(t, rrWaitForSignalBinding(ctx, t, p, instance, 10*time.Second),
			"successor must audit the preserved window signal and bind its wait")
		require.NoError(t, durable.NewClient(p).RaiseEvent(ctx, instance, "signal", "fresh"), "fresh answer after subscription")
	}
	st, waitErr := rrWait(ctx, p, instance, 10*time.Second)
	rt.Shutdown()
	successor, err := p.ReadWithExecution(ctx, instance, 2)
	require.NoError(t, err, "must read the successor history")
	old, err := p.ReadWithExecution(ctx, instance, 1)
	require.NoError(t, err, "predecessor history")
	require.Len(t, old, 2, "%s/%s: admission cannot mutate execution 1", stamp, shape)
	require.IsType(t, cdb.OrchestrationStarted{}, old[0].Kind)
	require.IsType(t, cdb.OrchestrationContinuedAsNew{}, old[1].Kind)
	require.NotEmpty(t, successor, "%s/%s: successor never started; this does not prove arrival loss", stamp, shape)
	require.Equal(t, durable.DuroxideVersion, successor[0].DuroxideVersion,
		"the predecessor stamp does not select the successor's policy")
	require.NoError(t, waitErr, "%s/%s: terminal CAN must preserve the queued input; history=%v", stamp, shape, successor)

	switch shape {
	case "future-completion":
		cfg, ok := st.Error.(cdb.ConfigurationError)
		require.True(t, st.State == durable.StateFailed && ok && cfg.Kind == cdb.ConfigNondeterminism,
			"%s/%s: a future-scoped malformed completion must be validated, not silently ACKed: %+v", stamp, shape, st)
		return
	case "stale-only":
		require.True(t, st.State == durable.StateCompleted && st.Output == "carried",
			"%s/%s: stale-only batch must not obstruct the successor: %+v", stamp, shape, st)
		return
	case "cancel":
		app, ok := st.Error.(cdb.ApplicationError)
		cancelled, isCancel := app.Kind.(cdb.AppCancelled)
		require.True(t, st.State == durable.StateFailed && ok && isCancel && cancelled.Reason == "requested-during-CAN",
			"%s/%s: logical instance cancellation must reach the successor: %+v", stamp, shape, st)
		return
	}
	expected := "carried,late"
	if shape == "signal" {
		binding := rrFirstEventID(t, successor, func(k cdb.EventKind) bool {
			s, ok := k.(cdb.ExternalSubscribed)
			return ok && s.Name == "signal"
		}, "successor must bind its signal wait")
		answer := rrFirstEventID(t, successor, isAnswer, "preserved window signal must reach the successor audit history")
		// Abandon visibility may split the CAN start and window inputs into
		// separate fetches. Bound admission is defined at event application,
		// not by the time the test enqueued the signal.
		expected = "carried,late|answer"
		if answer < binding {
			expected = "carried,late|fresh"
		}
	}
	require.True(t, st.State == durable.StateCompleted && st.Output == expected,
		"%s/%s: carried input must precede the preserved window arrival: %+v", stamp, shape, st)
	var delivered []string
	for _, ev := range successor {
		if k, ok := ev.Kind.(cdb.QueueEventDelivered); ok && k.Name == "q" {
			delivered = append(delivered, k.Data)
		}
	}
	require.Equal(t, []string{"carried", "late"}, delivered, "%s/%s: no loss or duplication", stamp, shape)
	if shape == "signal" {
		answers := 0
		for _, ev := range successor {
			if isAnswer(ev.Kind) {
				answers++
			}
		}
		require.Equal(t, 1, answers, "positional input must reach successor admission exactly once")
	}
	// Only mixed-stale injects stale completions (ids 99-101 of execution
	// 1). In the race shape the successor's own timers can legitimately
	// reach those ids while it waits.
	if shape == "mixed-stale" {
		for _, ev := range successor {
			switch ev.Kind.(type) {
			case cdb.ActivityCompleted, cdb.TimerFired, cdb.SubOrchestrationCompleted:
				require.False(t, ev.SourceEventID != nil && *ev.SourceEventID >= 99,
					"%s/%s: stale execution completions must not be applied to the successor: %+v", stamp, shape, ev)
			}
		}
	}
}

// isAnswer is the window's signal as the successor records it.
func isAnswer(k cdb.EventKind) bool {
	e, ok := k.(cdb.ExternalEvent)
	return ok && e.Name == "signal" && e.Data == "answer"
}

// rrFirstEventID is the id of the first event of history that is, failing
// the test with msg when there is none.
func rrFirstEventID(t *testing.T, history []cdb.Event, is func(cdb.EventKind) bool, msg string) uint64 {
	t.Helper()
	for _, ev := range history {
		if is(ev.Kind) {
			return ev.EventID
		}
	}
	require.FailNow(t, msg)
	return 0
}

// rrWaitForSignalBinding polls the successor's history until it holds both
// its "signal" subscription and the window's answer, for at most timeout
// (scaled with the host's slowness).
func rrWaitForSignalBinding(ctx context.Context, t *testing.T, p cdb.Provider, instance string, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		history, err := p.ReadWithExecution(ctx, instance, 2)
		require.NoError(t, err, "observe successor signal binding")
		subscribed := slices.ContainsFunc(history, func(ev cdb.Event) bool {
			s, ok := ev.Kind.(cdb.ExternalSubscribed)
			return ok && s.Name == "signal"
		})
		if subscribed && slices.ContainsFunc(history, func(ev cdb.Event) bool { return isAnswer(ev.Kind) }) {
			return true
		}
	}
	return false
}

// rrWaitForHistory polls instance's history until done holds, for at most
// timeout (scaled with the host's slowness).
func rrWaitForHistory(ctx context.Context, t *testing.T, p cdb.Provider, instance string, timeout time.Duration, done func([]cdb.Event) bool) bool {
	t.Helper()
	deadline := time.Now().Add(scaled(timeout))
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		history, err := p.Read(ctx, instance)
		require.NoError(t, err, "read %s history", instance)
		if done(history) {
			return true
		}
	}
	return false
}

// signalSubscriptions counts the ExternalSubscribed events of name.
func signalSubscriptions(history []cdb.Event, name string) int {
	n := 0
	for _, ev := range history {
		if s, ok := ev.Kind.(cdb.ExternalSubscribed); ok && s.Name == name {
			n++
		}
	}
	return n
}

// Sequential positional round trips with a long timer loser, then
// identical replay. The binding barrier deliberately serializes signals;
// this is not competitive signal-race coverage. Engine tests cover
// same-batch signal/timer races.
func testPositionalWaitRaceReplay(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const instance = "provider-live-signal"
	handler := func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		wait, timer := ctx.WaitForEvent("s"), ctx.ScheduleTimer(30*time.Second)
		first := "timeout"
		if ctx.Select(wait, timer) == 0 {
			value, err := wait.Await()
			if err != nil {
				return "", err
			}
			first = value
		}
		second, err := ctx.WaitForEvent("s").Await()
		if err != nil {
			return "", err
		}
		// duroxide formats the first value with Rust's {:?}: quoted.
		return fmt.Sprintf("%q:%s", first, second), nil
	}
	registry := rrRegistry(t, func(r *durable.Registry) error { return r.RegisterOrchestration("LiveSignalRace", handler) })
	rt := rrStart(t, p, registry, durable.Options{})
	client := durable.NewClient(p)
	require.NoError(t, client.StartOrchestration(ctx, instance, "LiveSignalRace", ""), "start live signal race")
	require.True(t, rrWaitForHistory(ctx, t, p, instance, 10*time.Second, func(h []cdb.Event) bool {
		return signalSubscriptions(h, "s") >= 1
	}), "signal subscription never appeared")
	require.NoError(t, client.RaiseEvent(ctx, instance, "s", "one"), "raise first signal")
	require.True(t, rrWaitForHistory(ctx, t, p, instance, 10*time.Second, func(h []cdb.Event) bool {
		return signalSubscriptions(h, "s") >= 2
	}), "replacement signal subscription never appeared")
	require.NoError(t, client.RaiseEvent(ctx, instance, "s", "two"), "raise second signal")
	st, err := rrWait(ctx, p, instance, 10*time.Second)
	rt.Shutdown()
	require.NoError(t, err, "live signal race did not finish after both subscriptions were bound")
	require.Equal(t, durable.StateCompleted, st.State, "live signal race failed: %+v", st)
	output := st.Output

	recorded, err := p.Read(ctx, instance)
	require.NoError(t, err, "read recorded live signal turns")
	// Terminal histories short-circuit to Continue. Replay the recorded
	// body without its terminal marker, as the runtime would before
	// completion.
	history := slices.DeleteFunc(recorded, func(ev cdb.Event) bool {
		_, done := ev.Kind.(cdb.OrchestrationCompleted)
		return done
	})
	for range 2 {
		res, err := durable.Replay(ctx, instance, 1, slices.Clone(history), nil, handler)
		require.NoError(t, err)
		require.True(t, res.State == durable.StateCompleted && res.Output == output,
			"provider live/replay differs: %+v, live=%s, history=%v", res, output, history)
		require.Empty(t, res.Delta, "replay appended history")
	}
}

// A fetched 0.1.30 execution must take a legacy decision that differs from
// the new policy.
func testLegacyQueueRaceDecisionPreserved(t *testing.T, f Factory) {
	for _, stamp := range []string{"0.1.30", "0.1.31"} {
		t.Run(stamp, func(t *testing.T) {
			testLegacyQueueRaceDecision(t, f, stamp)
		})
	}
}

// legacyCompetition races two dequeues against two timers: the new rules
// give the message to the second dequeue once the first is dropped, the
// legacy ones let the dropped one keep its place.
func legacyCompetition(ctx *durable.OrchestrationContext, _ string) (string, error) {
	first, second := ctx.DequeueEvent("q"), ctx.DequeueEvent("q")
	t0, t1 := ctx.ScheduleTimer(30*time.Second), ctx.ScheduleTimer(60*time.Second)
	ctx.Select(first, t0)
	value := "second-timeout"
	if ctx.Select(second, t1) == 0 {
		v, err := second.Await()
		if err != nil {
			return "", err
		}
		value = v
	}
	if _, err := ctx.ScheduleActivity("checkpoint", value).Await(); err != nil {
		return "", err
	}
	return value, nil
}

func testLegacyQueueRaceDecision(t *testing.T, f Factory, stamp string) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	instance := "provider-legacy-decision-" + stamp
	start := rrEvent(1, instance, 1, nil, rrStarted("LegacyCompetition", ""))
	start.DuroxideVersion = stamp
	first, err := durable.Replay(ctx, instance, 1, []cdb.Event{start}, nil, legacyCompetition)
	require.NoError(t, err)
	require.Equal(t, durable.StateRunning, first.State, "first turn: %+v", first)
	history := append([]cdb.Event{start}, first.Delta...)
	// Timer completions must already be visible in the provider's queue.
	// Matching checks the schedule identity, not its wall-clock deadline.
	var timers []cdb.WorkItem
	for i, ev := range history {
		if _, ok := ev.Kind.(cdb.TimerCreated); ok {
			history[i].Kind = cdb.TimerCreated{FireAtMs: 1}
			timers = append(timers, cdb.TimerFiredMessage{Instance: instance, ExecutionID: 1, ID: ev.EventID, FireAtMs: 1})
		}
	}
	require.Len(t, timers, 2)
	sent := []cdb.WorkItem{timers[0], cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "first"}, timers[1]}
	rrSeed(ctx, t, p, instance, history, sent,
		cdb.ExecutionMetadata{OrchestrationName: ptr("LegacyCompetition"), OrchestrationVersion: ptr("1.0.0")})
	fetched, token := fetchOrchestration(ctx, t, p, lockLong, "missing competition turn")
	require.Equal(t, stamp, fetched.History[0].DuroxideVersion, "fetch path changed the execution policy")
	if stamp != "0.1.30" {
		// The new decision needs the message between the two timer
		// completions: a batch is handed over in the order its messages
		// were sent (duroxide: FIFO by enqueue order); the legacy decision
		// is the same either way.
		require.Equal(t, sent, fetched.Messages, "the batch comes in the order the ack sent it")
	}
	turn, err := durable.Replay(ctx, instance, 1, fetched.History, fetched.Messages, legacyCompetition)
	require.NoError(t, err)
	require.Equal(t, durable.StateRunning, turn.State, "competition evaluation failed: %+v", turn)
	var checkpoint uint64
	for _, ev := range turn.Delta {
		if a, ok := ev.Kind.(cdb.ActivityScheduled); ok && a.Name == "checkpoint" {
			checkpoint = ev.EventID
			break
		}
	}
	require.NotZero(t, checkpoint, "competition did not schedule checkpoint")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, turn.Delta, nil,
		[]cdb.WorkItem{cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: checkpoint, Result: "ok"}},
		cdb.ExecutionMetadata{}, nil), "persist fetched competition decisions")
	registry := rrRegistry(t, func(r *durable.Registry) error {
		return errors.Join(
			r.RegisterOrchestration("LegacyCompetition", legacyCompetition),
			r.RegisterActivity("checkpoint", func(_ durable.ActivityContext, input string) (string, error) { return input, nil }),
		)
	})
	rt := rrStart(t, p, registry, durable.Options{})
	st, err := rrWait(ctx, p, instance, 10*time.Second)
	recorded, _ := p.Read(ctx, instance)
	rt.Shutdown()
	require.NoError(t, err, "%s: competition did not finish: history=%v", stamp, recorded)
	expected := "first"
	if stamp == "0.1.30" {
		expected = "second-timeout"
	}
	require.True(t, st.State == durable.StateCompleted && st.Output == expected,
		"%s: legacy-discriminating competition returned %+v", stamp, st)
}

// queueRaceHistory is the recorded 0.1.31 history of shape (q1, q2, q6)
// up to the checkpoint activity it schedules, and the output expected.
func queueRaceHistory(instance, shape string) ([]cdb.Event, string) {
	event := func(id uint64, source *uint64, kind cdb.EventKind) cdb.Event {
		return rrEvent(id, instance, 1, source, kind)
	}
	subscribed := cdb.QueueSubscribed{Name: "q"}
	delivered := func(data string) cdb.QueueEventDelivered { return cdb.QueueEventDelivered{Name: "q", Data: data} }
	dropped := cdb.QueueSubscriptionCancelled{Reason: "dropped_future"}
	start := event(1, nil, rrStarted("QueueRace", shape))
	start.DuroxideVersion = "0.1.31"
	history := []cdb.Event{start}
	switch shape {
	case "q1":
		history = append(history,
			event(2, nil, subscribed), event(3, nil, subscribed),
			event(4, nil, cdb.TimerCreated{FireAtMs: 1000}), event(5, ptr(uint64(4)), cdb.TimerFired{FireAtMs: 1000}),
			event(6, nil, delivered("first")), event(7, nil, delivered("second")),
			event(8, nil, subscribed), event(9, nil, subscribed),
			event(10, ptr(uint64(2)), dropped), event(11, ptr(uint64(3)), dropped))
	case "q2":
		history = append(history,
			event(2, nil, subscribed), event(3, nil, subscribed),
			event(4, nil, cdb.TimerCreated{FireAtMs: 1000}),
			event(5, nil, delivered("first")), event(6, nil, delivered("second")),
			event(7, nil, subscribed), event(8, ptr(uint64(3)), dropped))
	case "q6":
		history = append(history,
			event(2, nil, subscribed),
			event(3, nil, cdb.TimerCreated{FireAtMs: 1000}), event(4, nil, cdb.TimerCreated{FireAtMs: 1100}),
			event(5, ptr(uint64(4)), cdb.TimerFired{FireAtMs: 1100}),
			event(6, nil, delivered("first")), event(7, nil, subscribed),
			event(8, ptr(uint64(2)), dropped))
	}
	expected := "first,second"
	if shape == "q6" {
		expected = "first"
	}
	checkpoint := history[len(history)-1].EventID + 1
	history = append(history, event(checkpoint, nil, cdb.ActivityScheduled{Name: "checkpoint", Input: expected}))
	return history, expected
}

// queueRace is the QueueRace orchestration the recorded histories replay:
// q6 races a dequeue and a timer inside a race with a longer timer, q1 and
// q2 race two dequeues and a timer.
func queueRace(ctx *durable.OrchestrationContext, input string) (string, error) {
	var values []string
	if input == "q6" {
		// duroxide's select2(select2(dequeue, 10ms), 100ms): Select is flat
		// here, and Select(dequeue, 10ms, 100ms) has the same losers and the
		// same order of preference.
		ctx.Select(ctx.DequeueEvent("q"), ctx.ScheduleTimer(10*time.Millisecond), ctx.ScheduleTimer(100*time.Millisecond))
		value, err := ctx.DequeueEvent("q").Await()
		if err != nil {
			return "", err
		}
		values = append(values, value)
	} else {
		dequeues := []*durable.Future{ctx.DequeueEvent("q"), ctx.DequeueEvent("q")}
		if won := ctx.Select(dequeues[0], dequeues[1], ctx.ScheduleTimer(10*time.Millisecond)); won < len(dequeues) {
			value, err := dequeues[won].Await()
			if err != nil {
				return "", err
			}
			values = append(values, value)
		}
		for len(values) < 2 {
			value, err := ctx.DequeueEvent("q").Await()
			if err != nil {
				return "", err
			}
			values = append(values, value)
		}
	}
	output := strings.Join(values, ",")
	if _, err := ctx.ScheduleActivity("checkpoint", output).Await(); err != nil {
		return "", err
	}
	return output, nil
}

// The recorded queue-race histories (shapes q1, q2 and q6, queueRaceHistory)
// replay to their FIFO output on every provider.
func testQueueRaceCancellationReplay(t *testing.T, f Factory) {
	for _, shape := range []string{"q1", "q2", "q6"} {
		t.Run(shape, func(t *testing.T) {
			ctx := testContext(t)
			p := f.NewProvider(t, ProviderOptions{})
			instance := "provider-queue-race-" + shape
			history, expected := queueRaceHistory(instance, shape)
			checkpoint := history[len(history)-1].EventID
			rrSeed(ctx, t, p, instance, history,
				[]cdb.WorkItem{cdb.ActivityCompletedMessage{Instance: instance, ExecutionID: 1, ID: checkpoint, Result: "ok"}},
				cdb.ExecutionMetadata{OrchestrationName: ptr("QueueRace"), OrchestrationVersion: ptr("1.0.0")})
			stored, err := p.ReadWithExecution(ctx, instance, 1)
			require.NoError(t, err)
			require.Equal(t, history, stored, "provider must preserve full event metadata and pinned semantic version")
			registry := rrRegistry(t, func(r *durable.Registry) error { return r.RegisterOrchestration("QueueRace", queueRace) })
			rt := rrStart(t, p, registry, durable.Options{MinPollInterval: 5 * time.Millisecond})
			st, err := rrWait(ctx, p, instance, 30*time.Second)
			rt.Shutdown()
			require.NoError(t, err, "%s: queue replay did not complete", shape)
			require.True(t, st.State == durable.StateCompleted && st.Output == expected, "%s: %+v", shape, st)
		})
	}
}

// combinedRace is the CombinedRace orchestration: its first execution
// races a dequeue against a timer, drains one more message or not, and
// continues as new; the successor reads one message.
func combinedRace(ctx *durable.OrchestrationContext, input string) (string, error) {
	if ctx.ExecutionID() != 1 {
		return ctx.DequeueEvent("q").Await()
	}
	if strings.HasPrefix(input, "can-held") {
		// duroxide's select2(&mut held, timer) keeps the losing dequeue
		// alive; Select drops its losers, so the held dequeue is left
		// pending beside the awaited timer, which fires first in these
		// histories, as it wins the race there.
		held := ctx.DequeueEvent("q")
		if _, err := ctx.ScheduleTimer(10 * time.Millisecond).Await(); err != nil {
			return "", err
		}
		_ = held
	} else {
		ctx.Select(ctx.DequeueEvent("q"), ctx.ScheduleTimer(10*time.Millisecond))
	}
	if input == "can-drain" || input == "can-held-nonprefix" {
		if _, err := ctx.DequeueEvent("q").Await(); err != nil {
			return "", err
		}
	}
	return ctx.ContinueAsNew(input)
}

// Continue-as-new must carry unread arrivals, including held and
// non-prefix cases.
func testContinueAsNewQueueRaceReplay(t *testing.T, f Factory) {
	for _, shape := range []string{"can", "can-drain", "can-held", "can-held-nonprefix"} {
		t.Run(shape, func(t *testing.T) {
			ctx := testContext(t)
			p := f.NewProvider(t, ProviderOptions{})
			instance := "provider-combined-race-" + shape
			start := rrEvent(1, instance, 1, nil, rrStarted("CombinedRace", shape))
			start.DuroxideVersion = "0.1.31"
			history := []cdb.Event{start,
				rrEvent(2, instance, 1, nil, cdb.QueueSubscribed{Name: "q"}),
				rrEvent(3, instance, 1, nil, cdb.TimerCreated{FireAtMs: 1000}),
			}
			incoming := []cdb.WorkItem{
				cdb.TimerFiredMessage{Instance: instance, ExecutionID: 1, ID: 3, FireAtMs: 1000},
				cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "m1"},
			}
			if shape == "can-drain" || shape == "can-held-nonprefix" {
				incoming = append(incoming, cdb.QueueEventMessage{Instance: instance, Name: "q", Data: "m2"})
			}
			rrSeed(ctx, t, p, instance, history, incoming,
				cdb.ExecutionMetadata{OrchestrationName: ptr("CombinedRace"), OrchestrationVersion: ptr("1.0.0")})
			registry := rrRegistry(t, func(r *durable.Registry) error { return r.RegisterOrchestration("CombinedRace", combinedRace) })
			rt := rrStart(t, p, registry, durable.Options{MinPollInterval: 5 * time.Millisecond})
			st, err := rrWait(ctx, p, instance, 30*time.Second)
			rt.Shutdown()
			require.NoError(t, err, "%s: unread CAN arrivals did not complete", shape)
			expected := "m1"
			if shape == "can-drain" {
				expected = "m2"
			}
			require.True(t, st.State == durable.StateCompleted && st.Output == expected, "%s: %+v", shape, st)
		})
	}
}
