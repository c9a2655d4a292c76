// Package memprovider is an in-memory reference implementation of
// cdb.Provider and cdb.ProviderAdmin with duroxide's semantics (0.1.29's,
// and 0.1.32's abandon rule).
//
// It plays the role memdocstore plays for gocloud.dev's drivertest: it shows
// that the providertest suite is right, and it is the behavioural oracle the
// Cosmos DB provider is compared against. It is therefore written to be
// obviously correct rather than fast: one mutex guards plain maps and slices
// that mirror the tables of duroxide's SQLite provider
// (src/providers/sqlite.rs): instances, executions, history, the two queues,
// instance locks, sessions, kv_store and kv_delta. Every method takes the
// mutex once, validates everything that can fail, and only then mutates, so
// each call is atomic the way a SQLite transaction is.
//
// Storage mirrors the database closely where tests can observe it:
//
//   - History events and queue messages are stored as their serde JSON bytes
//     (cdb.MarshalEvent, cdb.MarshalWorkItem) and decoded on the way out, so
//     CorruptInstanceHistory can make stored events undecodable: Read and
//     ReadWithExecution then fail, while FetchOrchestrationItem returns the
//     item with HistoryError set and an empty History, with the lock and the
//     attempt increment kept.
//   - Times are milliseconds since the Unix epoch from Options.Now, compared
//     the way the SQL does (a lock is valid while locked_until > now, a
//     message visible when visible_at <= now).
//
// # Design choices
//
// Non-QueueEventMessage work for a never-started instance. When an instance has
// no instance row, no history and no StartOrchestration or ContinueAsNew
// among its visible messages, the fetch distinguishes two cases:
//
//   - every visible message is a QueueEventMessage: the messages are deleted (they
//     are orphan persistent events, duroxide 0.1.21) and the fetch moves on
//     to the next candidate instance;
//   - otherwise (for example a CancelInstance or a completion racing ahead of
//     its StartOrchestration): the instance is skipped. Its messages are left
//     queued untouched, neither locked nor attempt-counted, and the fetch
//     moves on to the next candidate. They join the batch once a start
//     arrives (or go when the instance is deleted).
//
// This keeps SQLite's behaviour (the messages stay queued until the start
// arrives) without its flaw: SQLite rolls back and returns None, so such a
// message at the head of the queue starves every other instance. Duroxide-pg
// instead hands the batch to the runtime as orchestration "Unknown", which
// consumes it; we do not, because consuming a CancelInstance that merely
// arrived before its start would lose the cancellation.
//
// Other deliberate choices, each within what the contract allows:
//
//   - When history exists without an instance row (a first turn acked with
//     metadata lacking name and version), the item reports the latest
//     execution, the one whose history it carries; SQLite reports 1.
//   - AbandonOrchestrationItem's attempt undo and delay apply to the
//     messages of the abandoned batch only, as duroxide 0.1.32's SQLite
//     provider does: a message that arrived after the fetch stays visible.
//     The abandoned batch's messages lose their stale token.
//   - A batch of an instance never started whose StartOrchestration is
//     queued but hidden (an abandon's delay) is handed over named after
//     that start, with an empty history, for the runtime to hand back
//     until the start comes (duroxide 0.1.32's
//     orchestration_ignore_attempt_preserves_hidden_start).
//   - It implements cdb.ParkRecorder, which duroxide has not: a park is
//     AbandonOrchestrationItem(delay, true) that also records the park on
//     the instance row (reason, since, count, retry time), reported by
//     GetInstanceInfo until the next AckOrchestrationItem of the instance,
//     as the Cosmos DB provider does.
//   - It implements cdb.ExclusiveStarter, which duroxide has not: a start
//     is queued only while no instance has its id (a row, or history) and
//     no StartOrchestration of it is queued, checked and written under
//     the mutex, as the Cosmos DB provider decides it in the start's batch.
//   - It implements cdb.OrchestrationEndWatcher, which duroxide has not:
//     an AckOrchestrationItem that leaves the instance Completed or Failed
//     closes the channels of the watches of it, under the mutex, as the
//     Cosmos DB provider's commit does.
//   - It implements cdb.LockRemainingReporter, which duroxide has not:
//     how long a worker or instance lock token has left, by Options.Now
//     (its fetches hand out locks with their whole timeout left).
//   - AckOrchestrationItem stamps completed_at when it sets a status other
//     than "Running" and clears it for "Running" (SQLite stamps it for any
//     status).
//   - Queue depths count messages not held by a valid lock (SQLite counts
//     rows whose lock_token is NULL, which misses stale tokens).
//   - Work items of the wrong kind are refused with a permanent error: an
//     ActivityExecuteMessage for the orchestrator queue (as SQLite does on enqueue),
//     anything else for the worker queue, and a worker completion that is
//     not ActivityCompleted or ActivityFailed.
//
// Long polling (Options.LongPolling) makes fetches that find nothing wait up
// to their poll timeout, woken early by any change to the store; waits honour
// the context. Without it fetches return at once, as SQLite's do.
package memprovider
