// Package cdb stores durable orchestrations in Azure Cosmos DB for NoSQL,
// behind duroxide's storage contract (duroxide 0.1.32): the Provider and
// ProviderAdmin interfaces.
//
// # The provider
//
// NewProvider returns a *CosmosProvider for a Config: an account's
// endpoint and key (or a Microsoft Entra ID TokenCredential in
// ClientOptions), a database and a container, which it creates unless
// SkipBootstrap is set. ConfigFromEnv reads COSMOS_ENDPOINT, COSMOS_KEY,
// COSMOS_DATABASE and COSMOS_CONTAINER. The package durable runs
// orchestrations on any Provider; the package providertest validates an
// implementation of the contract.
//
// NewFakeAccount is an in-memory Cosmos DB, strict about what the service
// refuses: no network and no emulator, for unit tests and demos. Its
// Client, or its Endpoint, Key and Transport, plug into Config and
// NewClient.
//
// The contract's types keep duroxide's JSON: WorkItem, Event (whose Kind is
// an EventKind) and ErrorDetails are tagged unions that MarshalWorkItem,
// MarshalEvent and MarshalErrorDetails encode, and UnmarshalWorkItem,
// UnmarshalEvent and UnmarshalErrorDetails decode, byte for byte as
// duroxide's serde does. InstanceStatus is an execution's status.
// Timestamps are milliseconds since the Unix epoch.
//
// Beside the contract a Provider may have optional capabilities, which
// the runtime uses when it has them and does without otherwise:
// StatusReader (an instance's status in one read), ExclusiveStarter (one
// start per instance id), ParkRecorder (a park recorded in the store),
// TraceCarrier (trace contexts carried through the store) and
// OrchestrationEndWatcher (a caller in the same process told when an
// instance ends, so that it need not poll its status). CosmosProvider has
// them all.
//
// # Names
//
// The contract's messages and events follow one rule each:
//
//   - A message, what one dispatcher sends another through a queue (a
//     WorkItem), is named as duroxide's WorkItem variant names it, spelled
//     out, with the suffix Message: StartOrchestrationMessage,
//     ActivityExecuteMessage, ActivityCompletedMessage,
//     SubOrchestrationCompletedMessage, ContinueAsNewMessage; the one
//     duroxide calls a queue message is QueueEventMessage, as it carries a
//     queue event.
//   - An event, what an execution's history records (an EventKind), is named
//     for the fact, as duroxide's EventKind variant names it, spelled out and
//     without a suffix: OrchestrationStarted, ActivityScheduled,
//     ActivityCompleted, TimerFired, SubOrchestrationCompleted. The events of
//     persistent queues are named for what they record: QueueSubscribed,
//     QueueEventDelivered, QueueSubscriptionCancelled.
//
// So a worker sends an ActivityCompletedMessage, and the next turn of the
// orchestration records an ActivityCompleted. The wire tags (Kind and Type)
// stay duroxide's.
//
// # The Cosmos DB client
//
// The provider is built on a small Cosmos DB REST client, exported for
// use on its own: NewClient, Client.NewContainer, and on a ContainerClient
// the item operations (CreateItem, ReadItem, ReplaceItem and DeleteItem with
// an optional ETag condition in ItemOptions, UpsertItem, PatchItem with
// PatchOperations), parameterised queries (QueryItems, NewQueryItemsPager
// for paging with continuation tokens, QueryItemsPerRange), and
// transactional batches (NewTransactionalBatch, ExecuteTransactionalBatch:
// all operations commit or none does). Requests are signed, retried on
// throttling and transient failures, and carry session tokens so a client
// reads its own writes.
//
// # Errors
//
// Provider and ProviderAdmin methods fail with a *ProviderError: Op names
// the method (for example "AckOrchestrationItem") and IsRetryable tells
// whether the same call may succeed later. A condition a caller branches on
// is reported by wrapping a sentinel, found with errors.Is however the error
// was wrapped since:
//
//   - ErrInstanceNotFound: GetInstanceInfo, GetParentID, DeleteInstance and
//     PruneExecutions of an unknown instance (the methods that read, list or
//     count answer empty for one instead, as duroxide's contract says);
//   - ErrExecutionNotFound: GetExecutionInfo of a missing execution;
//   - ErrInvalidLockToken: an ack, abandon or renewal whose lock token is
//     unknown, already used, expired or taken over (for a work item: its
//     activity was cancelled);
//   - ErrInstanceExists: EnqueueStartIfAbsent (the optional ExclusiveStarter)
//     of an instance id that is taken: an instance has it, or a start of it
//     is queued;
//   - ErrInstanceRunning: a deletion without force that meets a Running
//     instance;
//   - ErrOrphanedChild: DeleteInstancesAtomic that would leave a child
//     instance behind;
//   - ErrSubOrchestration: DeleteInstance of a sub-orchestration;
//   - ErrDuplicateEvent: an event id already stored for the execution;
//   - ErrInvalidInput: an argument refused before anything is written (an
//     instance id that cannot be stored, a work item on the wrong queue,
//     event id 0, a completion of the wrong kind) or read (an InstanceQuery
//     QueryInstances cannot take);
//   - ErrNotParked, ErrInstanceLocked: ResumeParked of an instance no
//     runtime has parked, or whose lock a runtime holds;
//   - ErrDocumentTooLarge, ErrBatchTooLarge, ErrBatchTooManyOperations: data
//     that Cosmos DB cannot hold, refused before anything is written.
//
// The client fails with a *CosmosError (the service's status, substatus
// and message; IsNotFound, IsConflict, IsPreconditionFailed and
// IsOutcomeUnknown classify it) or, for input it refuses before sending,
// a *ValidationError wrapping one of the client sentinels (ErrInvalidID,
// ErrDocumentTooLarge, ...). ToProviderError converts either into a
// *ProviderError.
package cdb
