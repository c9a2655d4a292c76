// Package durable runs durable orchestrations in Go: workflows written as
// plain functions whose progress is stored by a cdb.Provider, so they
// survive process restarts, run their steps (activities) at least once on
// any process sharing the provider, and wait for timers and external
// events for as long as needed. It is a runtime in the style of duroxide
// (version 0.1.32, DuroxideVersion; see the differences at the end), and
// it works with any cdb.Provider:
// cdb.CosmosProvider on Azure Cosmos DB, and the same provider on the
// in-memory Cosmos DB of cdb.NewFakeAccount for tests and local runs.
//
// # A minimal program
//
//	ctx := context.Background()
//	// The in-memory Cosmos DB; on a real account, pass the Config of
//	// cdb.ConfigFromEnv() instead.
//	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
//	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: account.Client()})
//	if err != nil { ... }
//	defer provider.Close()
//
//	registry := durable.NewRegistry()
//	registry.RegisterActivity("Greet", func(_ durable.ActivityContext, name string) (string, error) {
//		return "Hello, " + name + "!", nil
//	})
//	registry.RegisterOrchestration("Hello", func(ctx *durable.OrchestrationContext, name string) (string, error) {
//		return ctx.ScheduleActivity("Greet", name).Await()
//	})
//
//	rt, err := durable.Start(ctx, provider, registry, durable.Options{})
//	if err != nil { ... }
//	defer rt.Shutdown(ctx)
//
//	client := rt.Client()
//	err = client.StartOrchestration(ctx, "hello-1", "Hello", "Gopher")
//	status, err := client.WaitForCompletion(ctx, "hello-1", time.Minute)
//	fmt.Println(status.Output) // Hello, Gopher!
//
// Registry names orchestrations and activities, Start runs dispatchers
// that execute them on the provider until Shutdown, and Client starts and
// observes instances. Several processes may run a Runtime on the same
// provider: work is shared between them.
//
// # Orchestrations, activities and futures
//
// An OrchestrationFunc receives an *OrchestrationContext and its input.
// ScheduleActivity, ScheduleTimer, WaitForEvent, DequeueEvent and
// ScheduleSubOrchestration return a *Future at once; Future.Await blocks
// until the result is there. Schedule several futures and Join them for a
// fan-out/fan-in, or Select the first one done (the losers are
// cancelled). Returning an error fails the orchestration; an activity that
// failed makes Await return a *TaskFailedError. An activity's error of a
// type registered with RegisterError, or an *ApplicationError (a type, a
// code, a non-retryable marker), travels whole: errors.As finds it in the
// *TaskFailedError, and IsNonRetryable reads its marker.
//
// An ActivityFunc is ordinary code: it may do I/O, call services and take
// its time. Its ActivityContext is a context.Context that is cancelled
// when the activity should stop. An activity runs at least once: when its
// process dies before the result is stored, another one runs it again, so
// make activities idempotent.
//
// # Retries
//
// WithRetry runs an activity or sub-orchestration again after a failure,
// by a RetryPolicy: at most MaxAttempts attempts, FirstInterval before the
// second, each wait BackoffCoefficient times the one before and at most
// MaxInterval, all within Timeout; ShouldRetry and NonRetryableErrors (and
// an error's own NonRetryable method) stop it early. Await returns the
// first success or the last failure:
//
//	paid, err := ctx.ScheduleActivity("Charge", order, durable.WithRetry(durable.RetryPolicy{
//		MaxAttempts: 5, FirstInterval: time.Second, BackoffCoefficient: 2, MaxInterval: time.Minute,
//	})).Await()
//
// The attempts are scheduled and the waits are durable timers, by the
// orchestration itself: the history shows each of them, and replay takes
// the same path.
//
// # Determinism
//
// The runtime does not keep a running orchestration in memory between
// turns. When something it waits for happens, it runs the function again
// from the start against the instance's history: scheduling calls whose
// results are recorded return them at once, and the code goes on to its
// next decision. So an orchestration must make the same scheduling calls
// in the same order every time it runs with the same results:
//
//   - no time.Now: use ctx.UtcNow, or a timer;
//   - no random numbers or UUIDs of its own: use ctx.NewGUID;
//   - no I/O, no shared mutable state, no environment: do it in an activity
//     and use its result;
//   - no goroutines, channels or select: use Join and Select;
//   - no decisions on map iteration order;
//   - logging is fine, but ctx.IsReplaying tells a replay from the first run.
//
// Changing what a running orchestration schedules breaks its replay. The
// runtime then parks the instance (Options.NondeterminismPolicy): it
// retries the turn with backoff, never counting the attempt, until code
// that matches the history runs it, so rolling the deploy back heals it;
// Status.Parked, from the runtime's client, says why it waits. With
// FailOnNondeterminism it fails the instance with a nondeterminism error
// (cdb.ConfigurationError). To change an orchestration that has running
// instances, register a new version with RegisterOrchestrationVersion;
// running instances keep the version they started with. A Replayer checks,
// in a unit test, that new code still replays recorded histories (saved
// with `cdb show -o json`, or read from a store), and names the first
// event it does not reproduce.
//
// Tests skip time with package durabletest: one manual clock for the
// runtime (Options.Now) and the provider (cdb.Config.Now), which is the
// one that fires timers.
//
// # Events
//
// Client.RaiseEvent sends an event to an instance, and WaitForEvent
// receives it. Events wait for their reader: one raised while the
// orchestration is still busy elsewhere (in a timer, an activity, a retry)
// is received by the next WaitForEvent of its name, each event by exactly
// one wait, in the order they arrived. Bound a wait with WithEventTimeout;
// a timed-out wait returns an error that wraps ErrEventTimeout, and takes
// nothing, so an event that comes later is left for the next wait:
//
//	approval, err := ctx.WaitForEvent("approve", durable.WithEventTimeout(72*time.Hour)).Await()
//	if errors.Is(err, durable.ErrEventTimeout) {
//		return "rejected: no approval in time", nil
//	}
//
// A wait that loses a Select takes no event either, and events no wait
// read are carried over a continue-as-new. WaitForEventUnbuffered keeps
// duroxide's semantics (an event raised before the wait is dropped) for
// stores shared with duroxide runtimes. Executions started before this
// runtime buffered events (their start is stamped without "+cdb.1") keep
// duroxide's semantics for WaitForEvent too, so their histories replay as
// recorded. DequeueEvent with Client.EnqueueEvent is a separate mailbox
// per queue name, with the same FIFO delivery.
//
// # Cancellation
//
// Client.CancelInstance (and `cdb cancel`) requests an instance's
// cancellation. By default, as in duroxide, the request ends the instance
// in the turn that receives it: no more orchestration code runs, its
// outstanding activities are cancelled (their ActivityContext is
// cancelled), its children are cancelled in turn, and it fails with
// "canceled: {reason}" (cdb.AppCancelled). An orchestration that must undo
// what it did opts in with HandleCancellation at its start; then the
// request makes every Await still waiting return an error wrapping
// ErrCancelled (the work behind it is cancelled as above), the code runs
// on to compensate for at most the grace it named, and the instance ends
// as cancelled, with the same status, when the code returns or the grace
// ends:
//
//	ctx.HandleCancellation(10 * time.Minute)
//	receipt, err := ctx.ScheduleActivity("Charge", order).Await()
//	...
//	if _, err := ctx.WaitForEvent("approval").Await(); errors.Is(err, durable.ErrCancelled) {
//		_, refundErr := ctx.ScheduleActivity("Refund", receipt).Await()
//		return "", errors.Join(err, refundErr)
//	}
//
// A child that opts in compensates the same way when its parent is
// cancelled. The grace is a durable timer, so a crash during the
// compensation neither extends it nor loses it.
//
// # Typed inputs and outputs
//
// Inputs, outputs and event data are strings in history. The typed helpers
// carry Go values through them as JSON: RegisterTypedActivity and
// RegisterTypedOrchestration (or TypedActivity and TypedOrchestration);
// in an orchestration, ScheduleActivityJSON and
// ScheduleSubOrchestrationJSON (read their futures with AwaitAs),
// StartDetachedJSON, ContinueAsNewJSON and WaitForEventAs; on the client,
// StartOrchestrationTyped, RaiseEventTyped and WaitForCompletionAs. A
// value that does not encode is an error where the call's result comes (a
// future's at Await), and nothing is scheduled. Typed and string code mix
// freely.
//
// # The client
//
// A Client (Runtime.Client, or NewClient for a process that runs no
// runtime) starts instances (StartOrchestration), delivers external events
// (RaiseEvent, to WaitForEvent) and queued messages (EnqueueEvent, to
// DequeueEvent), waits for an instance to finish (WaitForCompletion),
// reads its status and history (GetStatus, ReadHistory), and cancels it
// (CancelInstance). Its management calls (listing, instance info, delete,
// prune) need a provider with the management capability (cdb.Provider's
// Admin); errors wrap the provider's, so errors.Is(err,
// cdb.ErrInstanceNotFound) tells an unknown instance.
//
// # Options
//
// Options{} works. Options sets how many turns and activities run at once
// (OrchestrationConcurrency, WorkerConcurrency, or WorkerOnly for a
// process that only runs activities), how often an idle runtime polls
// (MinPollInterval, LongPollTimeout), lock timeouts, poison handling
// (MaxAttempts), sessions, activity tags (WorkerTagFilter with WithTag),
// the logger and the clock.
//
// # Telemetry
//
// Options.Telemetry's Meter receives duroxide's metric set, named as
// OpenTelemetry names instruments: durable.orchestration.starts (by
// durable.orchestration.initiated_by: client, parent or continue_as_new),
// durable.orchestration.completions (by durable.orchestration.status),
// durable.orchestration.failures (by error.type),
// durable.orchestration.duration (an execution's start to its end, by its
// history's timestamps), durable.orchestration.turns and
// durable.orchestration.turn.duration (by
// durable.orchestration.turn.outcome: committed, abandoned or parked),
// durable.orchestration.history.size, durable.orchestration.parked,
// durable.activity.executions (by durable.activity.outcome,
// durable.activity.attempt, the retry policy's attempt, and
// durable.activity.delivery, the runs of one attempt: 1, 2, 3 or 4+),
// durable.activity.duration, durable.orchestration.turn.schedule_to_start
// and durable.activity.schedule_to_start (how long a fetched item waited
// in its queue once takeable: the fetch's Options.Now less the provider's
// VisibleAt, recorded when the provider reports one) and durable.poison
// (by durable.queue). Every
// instrument is labelled with the orchestration's or activity's name (and
// the orchestration's version where it ends or starts), never with an
// instance id. The module github.com/duroxide-go/cdb/otelcdb makes the
// Meter over OpenTelemetry.
//
// Options.Telemetry's Tracer receives a span per orchestration turn
// ("orchestration <name>"), per activity execution ("activity <name>") and
// per fired timer ("timer", from its creation to the turn that consumed
// its firing), and a Client made WithTracer (a runtime's Client has its
// tracer) one per start ("start_orchestration <name>", a child of the
// caller's span). The trace crosses the store (on a provider that is a
// cdb.TraceCarrier, as both of this module's are, outside duroxide's
// JSON): every turn of an instance continues the trace of its start, and
// an activity or a child orchestration the trace of the turn that
// scheduled it, in whichever process runs it. Replays make no span twice:
// spans come from work done now, never from history re-read. Spans carry
// the instance id (durable.instance.id); metrics never do.
//
// # Beyond the basics
//
// Sub-orchestrations (ScheduleSubOrchestration) and detached starts
// (StartDetached), continue-as-new for long-running loops
// (ContinueAsNew), a per-instance key-value store (SetKV, GetKV,
// Client.GetKVValue), custom status for progress
// (SetCustomStatus, Client.WaitForStatusChange), sessions that pin
// activities to one worker (WithSession), and versioned orchestrations
// (RegisterOrchestrationVersion, SetVersionPolicy, WithVersion).
//
// # Where this runtime differs from duroxide 0.1.32
//
//   - WaitForEvent buffers events (see Events); WaitForEventUnbuffered is
//     duroxide's wait. Executions this runtime starts are stamped
//     "0.1.32+cdb.1", duroxide 0.1.32 with revision 1 of this runtime's
//     rules as build metadata.
//   - Generated child ids of executions after the first carry the
//     execution, so a continue-as-new loop never reuses a finished child's
//     id: "sub::{execution}.{event}" in an execution this runtime started
//     as 0.1.29, duroxide 0.1.30's "sub::{execution}_{event}" in one
//     started by 0.1.30 or later (execution 1 keeps "sub::{event}").
//   - A child that continues as new keeps its parent link.
//   - Detached starts are honoured on a continue-as-new turn too.
//   - HandleCancellation lets code see a cancellation request and
//     compensate (see Cancellation); without it, cancellation is duroxide's.
//   - Terminal cancellation records are written before the terminal event,
//     which always comes last; a runtime-limit violation replaces the
//     turn's result instead of adding a second terminal event.
package durable
