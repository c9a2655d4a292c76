package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
)

// Client starts, signals and inspects orchestrations through a provider.
// It needs no running Runtime and is safe for concurrent use.
type Client struct {
	provider cdb.Provider
	// parked looks up an instance parked for nondeterminism by the runtime
	// whose client this is (Runtime.Client); nil for NewClient's.
	parked func(instance string) (ParkedInstance, bool)
	// tracer receives the span of each start (nil: none).
	tracer cdb.Tracer
	// pollBackoff spaces a wait's reads (zero: the default, from
	// defaultPollFirst to defaultPollLongest); tests set it.
	pollBackoff pollBackoff
	// statusReads shares the status reads of the waits on one instance,
	// and statusBatch those of the waits on different instances.
	statusReads statusReads
	statusBatch statusBatch
}

// NewClient returns a client on provider.
func NewClient(provider cdb.Provider, opts ...ClientOption) *Client {
	c := &Client{provider: provider}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// ClientOption configures a Client made by NewClient.
type ClientOption func(*Client)

// WithTracer makes StartOrchestration start a span on tracer
// ("start_orchestration <name>", a producer, a child of the caller's span)
// whose trace context the start carries, so the orchestration's turns
// continue the caller's trace. A runtime's Client (Runtime.Client) has
// Options.Telemetry's Tracer already.
func WithTracer(tracer cdb.Tracer) ClientOption {
	return func(c *Client) { c.tracer = tracer }
}

// StartOrchestration enqueues the start of a new instance of the
// orchestration name, at the registry policy's version unless WithVersion
// says otherwise. The instance comes into being on its first turn. An
// instance id that starts with "sub::" or contains "::sub::" is refused
// with ErrInvalidInput: that marker belongs to generated child ids. An id
// already taken (see IfExists) is refused with an *InstanceExistsError,
// which matches ErrInstanceExists, unless WithIfExists says otherwise.
// With a tracer (WithTracer), the start is a span whose trace the
// orchestration continues.
func (c *Client) StartOrchestration(ctx context.Context, instance, name, input string, opts ...StartOption) error {
	var o startOptions
	for _, opt := range opts {
		opt.applyStart(&o)
	}
	if instance == "" || name == "" {
		return fmt.Errorf("durable: start orchestration: %w: instance and name are required", ErrInvalidInput)
	}
	if err := checkRootInstanceID(instance); err != nil {
		return fmt.Errorf("durable: start orchestration: %w", err)
	}
	if o.version != nil {
		if _, err := cdb.ParseSemanticVersion(*o.version); err != nil {
			return fmt.Errorf("durable: start orchestration %q: %w", instance, err)
		}
	}
	item := cdb.StartOrchestrationMessage{Instance: instance, Orchestration: name, Input: input,
		Version: o.version, ExecutionID: cdb.InitialExecutionID}
	ctx, span := startOrchestrationSpan(ctx, c.tracer, item)
	item.Trace = span.TraceContext()
	err := c.enqueueStart(ctx, item, o)
	endWithError(span, err)
	return err
}

// enqueueStart enqueues a validated start, as o's IfExists policy says.
func (c *Client) enqueueStart(ctx context.Context, item cdb.StartOrchestrationMessage, o startOptions) error {
	if starter, ok := c.provider.(cdb.ExclusiveStarter); ok && o.ifExists != IfExistsEnqueue {
		return c.startIfAbsent(ctx, starter, item, o.ifExists)
	}
	if done, err := c.checkInstanceFree(ctx, item.Instance, o.ifExists); err != nil || done {
		return err
	}
	return c.enqueue(ctx, "start orchestration", item)
}

// RaiseEvent sends an external event to the instance, for its WaitForEvent
// of that name. The event waits for its reader: raised before the
// orchestration waits for it (while it runs a timer or an activity, say),
// it goes to the next WaitForEvent of that name; each event is received
// once, in the order events arrived, and one nobody read is carried over a
// continue-as-new. A WaitForEventUnbuffered subscription (duroxide's
// semantics), and WaitForEvent in an execution started before this
// runtime buffered events, receive only an event raised while they wait:
// an earlier one is kept in the history but delivered to no one.
func (c *Client) RaiseEvent(ctx context.Context, instance, name, data string) error {
	return c.enqueue(ctx, "raise event", cdb.ExternalRaisedMessage{Instance: instance, Name: name, Data: data})
}

// EnqueueEvent puts a message on an instance's persistent queue
// (DequeueEvent). Queue names that start with "__cdb_event:" are reserved
// (they mark raised events a continue-as-new carries) and refused with
// ErrInvalidInput.
func (c *Client) EnqueueEvent(ctx context.Context, instance, queue, data string) error {
	if err := checkQueueName(queue); err != nil {
		return fmt.Errorf("durable: enqueue event %q: %w", instance, err)
	}
	return c.enqueue(ctx, "enqueue event", cdb.QueueEventMessage{Instance: instance, Name: queue, Data: data})
}

// CancelInstance requests an instance's cancellation: it fails with
// "canceled: {reason}", and its outstanding children are cancelled too.
// An instance whose code called HandleCancellation first runs its
// compensation, for at most its grace, and then fails the same way; any
// other ends in the turn that receives the request. A request for an
// instance already cancelling, or ended, changes nothing.
func (c *Client) CancelInstance(ctx context.Context, instance, reason string) error {
	return c.enqueue(ctx, "cancel instance", cdb.CancelInstanceMessage{Instance: instance, Reason: reason})
}

func (c *Client) enqueue(ctx context.Context, op string, item cdb.WorkItem) error {
	if err := c.provider.EnqueueForOrchestrator(ctx, item, 0); err != nil {
		return fmt.Errorf("durable: %s %q: %w", op, item.InstanceID(), err)
	}
	return nil
}

// State is an instance's lifecycle state as GetStatus reports it.
type State string

const (
	StateNotFound       State = "NotFound"       // no execution has started (yet)
	StateQueued         State = "Queued"         // its start is accepted and has not run yet (cdb.StatusQueued)
	StateRunning        State = "Running"        // started and not finished
	StateCompleted      State = "Completed"      // returned an output
	StateFailed         State = "Failed"         // returned an error, was cancelled, or failed for the runtime
	StateContinuedAsNew State = "ContinuedAsNew" // between two executions of a continue-as-new
)

// Status is an instance's state, as of its latest execution.
type Status struct {
	State  State            // where the instance is in its lifecycle
	Output string           // Completed: the output; ContinuedAsNew: the next input
	Error  cdb.ErrorDetails // Failed: why
	// CustomStatus is the status the orchestration last set (nil: none).
	CustomStatus *string
	// CustomStatusVersion counts the changes of CustomStatus.
	CustomStatusVersion uint64
	// Parked is set on a running instance whose turns a runtime keeps
	// retrying because its code no longer matches its history
	// (ParkOnNondeterminism): why, since when, how often. On a provider
	// that records parks (cdb.ParkRecorder, as the Cosmos provider does)
	// every client reads it from the store, until a turn of the instance
	// commits; ExecutionID, Orchestration and Version are filled in only
	// by the client of the runtime that parked it. On another provider only
	// that client (Runtime.Client) knows; NewClient's is nil.
	Parked *ParkedInstance
}

// IsTerminal reports whether the instance has finished for good.
func (s Status) IsTerminal() bool { return s.State == StateCompleted || s.State == StateFailed }

// GetStatus reads an instance's status from its latest execution's history
// and its custom status.
func (c *Client) GetStatus(ctx context.Context, instance string) (Status, error) {
	if reader, ok := c.provider.(cdb.StatusReader); ok {
		st, done, err := readStatus(ctx, reader, instance)
		if err != nil {
			return Status{}, fmt.Errorf("durable: get status of %q: %w", instance, err)
		}
		if done {
			return c.withParked(ctx, instance, st)
		}
	}
	history, err := c.provider.Read(ctx, instance)
	if err != nil {
		return Status{}, fmt.Errorf("durable: get status of %q: %w", instance, err)
	}
	st := statusOf(history)
	if st.State == StateNotFound {
		return st, nil
	}
	custom, version, changed, err := c.provider.GetCustomStatus(ctx, instance, 0)
	if err != nil {
		return Status{}, fmt.Errorf("durable: get status of %q: %w", instance, err)
	}
	if changed {
		st.CustomStatus, st.CustomStatusVersion = custom, version
	}
	return c.withParked(ctx, instance, st)
}

// withParked adds the park of a running instance: the store's record when
// the provider records parks (st.Parked already holds it when the status
// read brought it), what the client's runtime remembers otherwise.
func (c *Client) withParked(ctx context.Context, instance string, st Status) (Status, error) {
	if st.State != StateRunning {
		st.Parked = nil
		return st, nil
	}
	remembered, known := c.rememberedPark(instance)
	if _, records := c.provider.(cdb.ParkRecorder); !records {
		if known {
			st.Parked = &remembered
		}
		return st, nil
	}
	if st.Parked == nil && !c.statusReadsParks() {
		stored, err := c.storedPark(ctx, instance)
		if err != nil {
			return Status{}, fmt.Errorf("durable: get status of %q: %w", instance, err)
		}
		st.Parked = stored
	}
	if st.Parked != nil && known {
		st.Parked.ExecutionID, st.Parked.Orchestration, st.Parked.Version =
			remembered.ExecutionID, remembered.Orchestration, remembered.Version
	}
	return st, nil
}

// rememberedPark is what the client's runtime remembers of the instance.
func (c *Client) rememberedPark(instance string) (ParkedInstance, bool) {
	if c.parked == nil {
		return ParkedInstance{}, false
	}
	return c.parked(instance)
}

// statusReadsParks says the provider's status read carries the park.
func (c *Client) statusReadsParks() bool {
	_, ok := c.provider.(cdb.StatusReader)
	return ok
}

// storedPark reads the park from the instance's info, for a provider that
// records parks without a status read.
func (c *Client) storedPark(ctx context.Context, instance string) (*ParkedInstance, error) {
	admin, ok := c.provider.Admin()
	if !ok {
		return nil, nil
	}
	info, err := admin.GetInstanceInfo(ctx, instance)
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parkedFromStore(instance, info.Parked), nil
}

// parkedFromStore is a provider's park record as Status.Parked.
func parkedFromStore(instance string, p *cdb.ParkedInfo) *ParkedInstance {
	if p == nil {
		return nil
	}
	return &ParkedInstance{Instance: instance, Error: p.Reason, Parks: p.Count, Since: p.Since, RetryAt: p.RetryAt}
}

// readStatus reads an instance's status in one request from a provider
// that can; done is false for a failed instance, whose structured error
// only its history holds.
func readStatus(ctx context.Context, reader cdb.StatusReader, instance string) (st Status, done bool, err error) {
	snap, err := reader.ReadOrchestrationStatus(ctx, instance)
	if err != nil {
		return Status{State: StateNotFound}, false, err
	}
	st, done = statusOfRead(instance, snap)
	return st, done, nil
}

// pollStatus is a wait's status read: GetStatus, or on a provider that
// reads many instances at once (cdb.StatusesReader) the client's batch of
// its waits' reads, with a read of the history after it only for a
// failure (whose details it holds), as GetStatus does.
func (c *Client) pollStatus(ctx context.Context, instance string) (Status, error) {
	reader, ok := c.provider.(cdb.StatusesReader)
	if !ok {
		return c.GetStatus(ctx, instance)
	}
	snap, err := c.statusBatch.status(ctx, instance, reader)
	if err != nil {
		return Status{}, fmt.Errorf("durable: get status of %q: %w", instance, err)
	}
	if st, done := statusOfRead(instance, snap); done {
		return c.withParked(ctx, instance, st)
	}
	return c.GetStatus(ctx, instance)
}

// statusOfRead is the Status a provider's status read describes; done is
// false for a failure, whose details are read from the history.
func statusOfRead(instance string, snap cdb.OrchestrationStatus) (st Status, done bool) {
	if !snap.Found {
		return Status{State: StateNotFound}, true
	}
	return statusOfSnapshot(instance, snap)
}

// statusOfSnapshot is the Status a provider's status snapshot describes;
// done is false for a failure, whose details are read from the history.
func statusOfSnapshot(instance string, snap cdb.OrchestrationStatus) (st Status, done bool) {
	switch snap.Status {
	case cdb.StatusFailed:
		return Status{}, false
	case cdb.StatusCompleted:
		st = Status{State: StateCompleted, Output: deref(snap.Output)}
	case cdb.StatusContinuedAsNew:
		st = Status{State: StateContinuedAsNew, Output: deref(snap.Output)}
	case cdb.StatusQueued:
		st = Status{State: StateQueued}
	default:
		st = Status{State: StateRunning}
	}
	if snap.CustomStatusVersion > 0 {
		st.CustomStatus, st.CustomStatusVersion = snap.CustomStatus, snap.CustomStatusVersion
	}
	st.Parked = parkedFromStore(instance, snap.Parked)
	return st, true
}

// statusOf reads the state of an execution from its history.
func statusOf(history []cdb.Event) Status {
	for i := len(history) - 1; i >= 0; i-- {
		switch k := history[i].Kind.(type) {
		case cdb.OrchestrationCompleted:
			return Status{State: StateCompleted, Output: k.Output}
		case cdb.OrchestrationFailed:
			return Status{State: StateFailed, Error: k.Details}
		case cdb.OrchestrationContinuedAsNew:
			return Status{State: StateContinuedAsNew, Output: k.Input}
		}
	}
	for _, ev := range history {
		if _, ok := ev.Kind.(cdb.OrchestrationStarted); ok {
			return Status{State: StateRunning}
		}
	}
	return Status{State: StateNotFound}
}

// WaitForCompletion waits until the instance completes or fails, and
// returns its final status: a failed instance is a Status with StateFailed,
// not an error. An instance that does not exist yet is waited for (its
// start may still be queued). After timeout the error matches ErrTimeout.
// It polls the status, and on a provider that tells ends in process
// (cdb.OrchestrationEndWatcher, as the Cosmos provider does) an end this
// process commits wakes it at once, with the status that commit wrote when
// the provider reports it (cdb.OrchestrationEndReporter); an end committed
// elsewhere is found by the polls: 5 ms apart at first, doubling to ten a
// second, and once the wait has lasted a while up to a fifth of the time
// waited so far, at most a second, so such an end is seen within a fifth
// of the time it took, and a long wait reads a few times a second at most.
// The waits of one Client on one instance share their reads: one read of it
// at a time, however many callers wait. While the provider holds the
// instance's lock (cdb.OrchestrationHolder) no poll reads: no other process
// can end it. A status read that fails for now (cdb.IsRetryable) is read
// again at the next poll; a timeout after such a read says so.
func (c *Client) WaitForCompletion(ctx context.Context, instance string, timeout time.Duration) (Status, error) {
	ended, stop := c.watchEnd(instance)
	defer stop()
	defer c.statusReads.join(instance)()
	looked := time.Now() // a read another wait began since is as good as this wait's own
	var st Status
	read := false
	var failedRead error // the last status read, when it failed for now
	err := c.poll(ctx, timeout, ended, func() (bool, error) {
		if told, ok := c.toldEnd(instance, ended); ok {
			st = told
			return true, nil
		}
		if c.holdsWatched(instance, ended) {
			return false, nil
		}
		if isClosed(ended) {
			looked = time.Now() // woken by a commit here: only a read from now on shows it
		}
		now, err := c.statusReads.read(ctx, instance, looked, c.pollStatus)
		looked = time.Now()
		if err != nil && cdb.IsRetryable(err) && ctx.Err() == nil {
			failedRead = err
			return false, nil // a read that failed for now: the next poll reads again
		}
		st, read, failedRead = now, true, nil
		return err == nil && st.IsTerminal(), err
	})
	if errors.Is(err, ErrTimeout) && !read {
		// Held here the whole time: a timed-out wait still returns the
		// status as it stands, as one that polled does.
		if now, rerr := c.GetStatus(ctx, instance); rerr == nil {
			st = now
		}
	}
	if err != nil && failedRead != nil {
		return st, fmt.Errorf("durable: wait for %q: %w (its last status read failed: %w)", instance, err, failedRead)
	}
	if err != nil {
		return st, fmt.Errorf("durable: wait for %q: %w", instance, err)
	}
	return st, nil
}

// toldEnd is the status the provider reports for a watch whose end it
// committed (OrchestrationEndReporter), when that status is whole: a failure
// is read from the history, for its details.
func (c *Client) toldEnd(instance string, ended <-chan struct{}) (Status, bool) {
	reporter, ok := c.provider.(cdb.OrchestrationEndReporter)
	if !ok || ended == nil {
		return Status{}, false
	}
	snap, ok := reporter.EndedStatus(ended)
	if !ok {
		return Status{}, false
	}
	return statusOfSnapshot(instance, snap)
}

// isClosed says ch, an end watch (nil: none), has fired.
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holdsWatched says the provider holds the watched instance's lock now
// (cdb.OrchestrationHolder): its end can only come from a commit of this
// provider, which wakes the watch, so a status read would find nothing new.
func (c *Client) holdsWatched(instance string, ended <-chan struct{}) bool {
	holder, ok := c.provider.(cdb.OrchestrationHolder)
	return ok && ended != nil && holder.HoldsOrchestration(instance)
}

// WaitForStatusChange polls until the instance's custom status changes
// past lastSeenVersion, or the instance finishes, and returns its status;
// ErrTimeout after timeout. An end this process commits wakes it as it
// does WaitForCompletion.
func (c *Client) WaitForStatusChange(ctx context.Context, instance string, lastSeenVersion uint64, timeout time.Duration) (Status, error) {
	ended, stop := c.watchEnd(instance)
	defer stop()
	var st Status
	err := c.poll(ctx, timeout, ended, func() (bool, error) {
		_, _, changed, err := c.provider.GetCustomStatus(ctx, instance, lastSeenVersion)
		if err != nil {
			return false, err
		}
		st, err = c.GetStatus(ctx, instance)
		return err == nil && (changed || st.IsTerminal()), err
	})
	if err != nil {
		return st, fmt.Errorf("durable: wait for a status change of %q: %w", instance, err)
	}
	return st, nil
}

// watchEnd watches the instance's end on a provider that tells it. It is
// called before the first status read, so an end committed between that
// read and the wait still wakes the wait. Without a watcher, ended is nil
// (never ready).
func (c *Client) watchEnd(instance string) (ended <-chan struct{}, stop func()) {
	watcher, ok := c.provider.(cdb.OrchestrationEndWatcher)
	if !ok {
		return nil, func() {}
	}
	return watcher.WatchOrchestrationEnd(instance)
}

// ReadHistory returns the latest execution's history.
func (c *Client) ReadHistory(ctx context.Context, instance string) ([]cdb.Event, error) {
	h, err := c.provider.Read(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("durable: read history of %q: %w", instance, err)
	}
	return h, nil
}

// ReadExecutionHistory returns one execution's history.
func (c *Client) ReadExecutionHistory(ctx context.Context, instance string, executionID uint64) ([]cdb.Event, error) {
	h, err := c.provider.ReadWithExecution(ctx, instance, executionID)
	if err != nil {
		return nil, fmt.Errorf("durable: read execution %d of %q: %w", executionID, instance, err)
	}
	return h, nil
}

// GetKVValue reads one key of an instance's key-value store.
func (c *Client) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	v, ok, err := c.provider.GetKVValue(ctx, instance, key)
	if err != nil {
		return "", false, fmt.Errorf("durable: get KV %q of %q: %w", key, instance, err)
	}
	return v, ok, nil
}

// WaitForKVValue polls until an instance's key-value store has key, and
// returns its value; ErrTimeout after timeout.
func (c *Client) WaitForKVValue(ctx context.Context, instance, key string, timeout time.Duration) (string, error) {
	var value string
	err := poll(ctx, timeout, func() (bool, error) {
		v, found, err := c.provider.GetKVValue(ctx, instance, key)
		value = v
		return found, err
	})
	if err != nil {
		return "", fmt.Errorf("durable: wait for KV %q of %q: %w", key, instance, err)
	}
	return value, nil
}

// GetKVAllValues reads an instance's whole key-value store.
func (c *Client) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	m, err := c.provider.GetKVAllValues(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("durable: get KV of %q: %w", instance, err)
	}
	return m, nil
}

// GetOrchestrationStats reports an instance's history and KV sizes; nil
// for an unknown instance.
func (c *Client) GetOrchestrationStats(ctx context.Context, instance string) (*cdb.SystemStats, error) {
	s, err := c.provider.GetInstanceStats(ctx, instance)
	if err != nil {
		return nil, fmt.Errorf("durable: get stats of %q: %w", instance, err)
	}
	return s, nil
}

// ErrNoAdmin is returned by management calls on a provider without the
// management capability.
var ErrNoAdmin = errors.New("durable: the provider has no management capability")

func (c *Client) admin(op string) (cdb.ProviderAdmin, error) {
	a, ok := c.provider.Admin()
	if !ok {
		return nil, fmt.Errorf("durable: %s: %w", op, ErrNoAdmin)
	}
	return a, nil
}

// adminCall runs a management call and wraps its error with the operation.
func adminCall[T any](c *Client, op string, call func(cdb.ProviderAdmin) (T, error)) (T, error) {
	var zero T
	a, err := c.admin(op)
	if err != nil {
		return zero, err
	}
	v, err := call(a)
	if err != nil {
		return zero, fmt.Errorf("durable: %s: %w", op, err)
	}
	return v, nil
}

// ListInstances lists every instance id, a queued start's too.
func (c *Client) ListInstances(ctx context.Context) ([]string, error) {
	return adminCall(c, "list instances", func(a cdb.ProviderAdmin) ([]string, error) { return a.ListInstances(ctx) })
}

// ListInstancesByStatus lists the instances whose current execution has
// status; cdb.StatusQueued lists the starts not run yet.
func (c *Client) ListInstancesByStatus(ctx context.Context, status cdb.InstanceStatus) ([]string, error) {
	return adminCall(c, "list instances by status", func(a cdb.ProviderAdmin) ([]string, error) {
		return a.ListInstancesByStatus(ctx, status)
	})
}

// ListExecutions lists an instance's execution ids, ascending.
func (c *Client) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	return adminCall(c, "list executions", func(a cdb.ProviderAdmin) ([]uint64, error) { return a.ListExecutions(ctx, instance) })
}

// GetInstanceInfo describes an instance; for an unknown one the error
// matches cdb.ErrInstanceNotFound.
func (c *Client) GetInstanceInfo(ctx context.Context, instance string) (cdb.InstanceInfo, error) {
	return adminCall(c, "get instance info", func(a cdb.ProviderAdmin) (cdb.InstanceInfo, error) {
		return a.GetInstanceInfo(ctx, instance)
	})
}

// GetExecutionInfo describes one execution of an instance.
func (c *Client) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (cdb.ExecutionInfo, error) {
	return adminCall(c, "get execution info", func(a cdb.ProviderAdmin) (cdb.ExecutionInfo, error) {
		return a.GetExecutionInfo(ctx, instance, executionID)
	})
}

// GetSystemMetrics counts instances, executions and events.
func (c *Client) GetSystemMetrics(ctx context.Context) (cdb.SystemMetrics, error) {
	return adminCall(c, "get system metrics", func(a cdb.ProviderAdmin) (cdb.SystemMetrics, error) { return a.GetSystemMetrics(ctx) })
}

// GetQueueDepths counts the unlocked messages of each queue.
func (c *Client) GetQueueDepths(ctx context.Context) (cdb.QueueDepths, error) {
	return adminCall(c, "get queue depths", func(a cdb.ProviderAdmin) (cdb.QueueDepths, error) { return a.GetQueueDepths(ctx) })
}

// GetInstanceTree returns an instance and all its descendants.
func (c *Client) GetInstanceTree(ctx context.Context, instance string) (cdb.InstanceTree, error) {
	return adminCall(c, "get instance tree", func(a cdb.ProviderAdmin) (cdb.InstanceTree, error) {
		return a.GetInstanceTree(ctx, instance)
	})
}

// DeleteInstance deletes a root instance with its tree; force deletes a
// running one.
func (c *Client) DeleteInstance(ctx context.Context, instance string, force bool) (cdb.DeleteInstanceResult, error) {
	return adminCall(c, "delete instance", func(a cdb.ProviderAdmin) (cdb.DeleteInstanceResult, error) {
		return a.DeleteInstance(ctx, instance, force)
	})
}

// DeleteInstanceBulk deletes the finished root instances matching filter.
func (c *Client) DeleteInstanceBulk(ctx context.Context, filter cdb.InstanceFilter) (cdb.DeleteInstanceResult, error) {
	return adminCall(c, "delete instances", func(a cdb.ProviderAdmin) (cdb.DeleteInstanceResult, error) {
		return a.DeleteInstanceBulk(ctx, filter)
	})
}

// PruneExecutions deletes an instance's old executions.
func (c *Client) PruneExecutions(ctx context.Context, instance string, options cdb.PruneOptions) (cdb.PruneResult, error) {
	return adminCall(c, "prune executions", func(a cdb.ProviderAdmin) (cdb.PruneResult, error) {
		return a.PruneExecutions(ctx, instance, options)
	})
}

// PruneExecutionsBulk prunes every instance matching filter.
func (c *Client) PruneExecutionsBulk(ctx context.Context, filter cdb.InstanceFilter, options cdb.PruneOptions) (cdb.PruneResult, error) {
	return adminCall(c, "prune executions", func(a cdb.ProviderAdmin) (cdb.PruneResult, error) {
		return a.PruneExecutionsBulk(ctx, filter, options)
	})
}
