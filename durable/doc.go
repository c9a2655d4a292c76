// Package durable is a duroxide-style deterministic replay runtime (duroxide
// 0.1.29) that drives any cdb.Provider: the samples, the demo and the
// benchmarks run orchestrations through it.
//
// # Orchestrations are plain Go functions
//
// An orchestration is a func(*OrchestrationContext, string) (string, error).
// Its durable operations (ScheduleActivity, ScheduleTimer, WaitForEvent,
// DequeueEvent, ScheduleSubOrchestration, ...) return a *Future right away
// and record an action; Future.Await, Select and Join block until the
// history holds the result. Every turn runs the function again from the
// start against the instance's history, so orchestration code must be
// deterministic: no clocks, randomness, goroutines or I/O of its own (use
// UtcNow, NewGUID and activities instead).
//
// # Coroutine stepping
//
// The function runs in its own goroutine, but never at the same time as the
// replay engine: the two hand control back and forth over unbuffered
// channels (coroutine.go). The engine "polls" the orchestration by resuming
// the goroutine; the goroutine runs until it either returns or awaits a
// future whose result is not in the history yet, and then hands control
// back. This is exactly Rust's poll of duroxide's orchestration future: a
// poll either finishes the orchestration or leaves it pending. Because only
// one side runs at a time, the OrchestrationContext needs no locks, and the
// channel handoffs give the race detector its happens-before edges.
//
// When a turn ends with the function still blocked (it waits for work that
// has not completed yet), the engine aborts it: it resumes the goroutine
// with an abort flag set, the blocked Await panics with a private sentinel,
// and the goroutine's top-level recover turns that into a clean exit the
// engine waits for. No goroutine outlives its turn.
//
// # Replay
//
// A turn (replay.go) replays the execution's persisted history plus the
// completions of the fetched batch: each scheduling event must match, in
// order, the action the code emitted at that point (name and input for
// activities, position for timers, ...), or the turn fails with a
// cdb.ConfigurationError of kind Nondeterminism. Completions are delivered
// to the futures bound to their scheduling events, and the code is polled
// after each delivery, so a Select picks the winner the history recorded
// first. Actions the code emits beyond the history become new events (ids
// continue after the last event) and the work items of the turn (turn.go):
// activities for the worker queue, timers, child and detached starts,
// completions for a parent, cancellations, continue-as-new.
//
// # Where this runtime differs from duroxide 0.1.29
//
//   - Generated child ids of executions after the first are
//     "sub::{execution}.{event}" (execution 1 keeps "sub::{event}"), so a
//     continue-as-new loop never reuses a finished child's id; the id also
//     tells the child which parent execution to report to.
//   - A child that continues as new keeps its parent link.
//   - Detached starts are honoured on a continue-as-new turn too.
//   - Terminal cancellation breadcrumbs are written before the terminal
//     event, which always comes last; a runtime-limit violation replaces the
//     turn's result instead of adding a second terminal event.
//
// # Dispatchers
//
// Runtime (runtime.go) runs orchestration and worker dispatchers against the
// provider, with lock renewal, poison handling, backoff and graceful
// shutdown, as duroxide's runtime does (contract §5.2, §5.3). Client
// (client.go) starts, signals and inspects instances.
package durable
