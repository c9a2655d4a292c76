package memprovider

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/google/uuid"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// Options configures a Provider.
type Options struct {
	// LongPolling makes fetches that find no work wait up to their poll
	// timeout, woken early by enqueues and other changes. Without it they
	// return at once.
	LongPolling bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Provider is the in-memory store. It implements cdb.Provider and
// cdb.ProviderAdmin; the zero value is not usable, call New.
type Provider struct {
	longPolling bool
	now         func() time.Time
	tokenPrefix string // random per provider, so tokens never collide across stores

	mu     sync.Mutex
	closed bool
	wake   chan struct{} // closed (and replaced) whenever the store changes

	seq uint64 // ids of queue rows, instance creation order, lock tokens

	instances  map[string]*instanceRow
	executions map[string]map[uint64]*executionRow
	history    map[string]map[uint64]map[uint64][]byte // instance → execution → event id → JSON
	orchQueue  []*orchRow                              // in id (enqueue) order
	workQueue  []*workRow                              // in id (enqueue) order
	locks      map[string]*instanceLock                // instance → lock
	sessions   map[string]*sessionRow
	kvStore    map[string]map[string]kvStoreEntry // state as of the last completed execution
	kvDelta    map[string]map[string]kvDeltaEntry // the current execution's mutations

	endWatches handoff.EndWatches[cdb.OrchestrationStatus] // callers waiting for instances to end (handover_ends.go)
}

// instanceRow is a row of duroxide's instances table.
type instanceRow struct {
	seq                 uint64 // creation order
	name                string
	version             *string
	currentExecution    uint64
	customStatus        *string
	customStatusVersion uint64
	createdAt           int64
	updatedAt           int64
	parent              *string
	parked              *cdb.ParkedInfo  // ParkOrchestrationItem's record, until a turn commits
	trace               cdb.TraceContext // its start's (cdb.TraceCarrier), from the turn that created the row
}

// executionRow is a row of the executions table.
type executionRow struct {
	status      cdb.InstanceStatus
	output      *string
	pinned      *cdb.SemanticVersion
	startedAt   int64
	completedAt *int64
}

// orchRow is a row of the orchestrator queue. Its lock is the instance lock;
// lockToken only marks the batch the message was fetched in.
type orchRow struct {
	id        uint64
	instance  string
	item      []byte // cdb.MarshalWorkItem
	kind      string // the WorkItem variant, to classify without decoding
	visibleAt int64
	lockToken string
	attempts  uint32
	trace     cdb.TraceContext // a start's, kept beside its JSON (cdb.TraceCarrier)
}

// workRow is a row of the worker queue, with the identity columns duroxide
// keeps for cancellation, sessions and tags.
type workRow struct {
	id          uint64
	item        []byte
	visibleAt   int64
	lockToken   string
	lockedUntil int64
	attempts    uint32
	instance    string
	execution   uint64
	activityID  uint64
	sessionID   *string
	tag         *string
	trace       cdb.TraceContext // kept beside the JSON (cdb.TraceCarrier)
}

type instanceLock struct {
	token       string
	lockedUntil int64
	lockedAt    int64
}

type sessionRow struct {
	owner        string
	lockedUntil  int64
	lastActivity int64
}

type kvStoreEntry struct {
	value     string
	updatedAt uint64
}

// kvDeltaEntry is a current-execution mutation; a nil value is a tombstone.
type kvDeltaEntry struct {
	value     *string
	updatedAt uint64
}

var (
	_ cdb.Provider              = (*Provider)(nil)
	_ cdb.ProviderAdmin         = (*Provider)(nil)
	_ cdb.LockRemainingReporter = (*Provider)(nil)
)

// New returns an empty store.
func New(o Options) *Provider {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Provider{
		longPolling: o.LongPolling,
		now:         now,
		tokenPrefix: uuid.NewString(),
		wake:        make(chan struct{}),
		instances:   map[string]*instanceRow{},
		executions:  map[string]map[uint64]*executionRow{},
		history:     map[string]map[uint64]map[uint64][]byte{},
		locks:       map[string]*instanceLock{},
		sessions:    map[string]*sessionRow{},
		kvStore:     map[string]map[string]kvStoreEntry{},
		kvDelta:     map[string]map[string]kvDeltaEntry{},
	}
}

// Close releases waiting fetches; later calls fail. It is idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.notify()
	}
	return nil
}

// Name identifies the provider in diagnostics.
func (p *Provider) Name() string { return "memory" }

// Version is the provider's own version.
func (p *Provider) Version() string { return "0.1.0" }

// Admin returns the provider itself: it implements cdb.ProviderAdmin.
func (p *Provider) Admin() (cdb.ProviderAdmin, bool) { return p, true }

// CorruptInstanceHistory makes every stored history event of instance, in
// every execution, undecodable (the factory hook of the validation suite).
func (p *Provider) CorruptInstanceHistory(instance string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, events := range p.history[instance] {
		for id := range events {
			events[id] = []byte("NOT_VALID_JSON{{{")
		}
	}
}

// SessionLockedUntil is when the session's lock ends, on the provider's
// clock, and whether the session exists (a test hook: runtime tests check
// the effect of session renewal and cleanup with it).
func (p *Provider) SessionLockedUntil(sessionID string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sessions[sessionID]
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(s.lockedUntil), true
}

// MaxAttemptCount is the highest attempt count over the orchestrator-queue
// messages of instance, 0 when it has none (the factory hook of the
// validation suite).
func (p *Provider) MaxAttemptCount(instance string) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var max uint32
	for _, r := range p.orchQueue {
		if r.instance == instance && r.attempts > max {
			max = r.attempts
		}
	}
	return max
}

// begin checks the context and takes the mutex; on success the caller must
// unlock. Every public method starts here.
func (p *Provider) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return &cdb.ProviderError{Op: op, Message: err.Error(), Retryable: true, Err: err}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return cdb.Permanent(op, "provider is closed")
	}
	return nil
}

// refuse is the permanent error for a condition a caller branches on,
// keeping cause (a cdb sentinel, or an error wrapping one) reachable.
func refuse(op, message string, cause error) error {
	return &cdb.ProviderError{Op: op, Message: message, Err: cause, Refusal: true}
}

// notify wakes every waiting long-poll fetch. Called with the mutex held
// after any change that could make work fetchable.
func (p *Provider) notify() {
	close(p.wake)
	p.wake = make(chan struct{})
}

func (p *Provider) nowMs() int64 { return p.now().UnixMilli() }

// remaining is how long a lock valid until lockedUntil has left, zero once
// it has expired. Called with the mutex held.
func (p *Provider) remaining(lockedUntil int64) time.Duration {
	return time.Duration(max(lockedUntil-p.nowMs(), 0)) * time.Millisecond
}

func (p *Provider) nextSeq() uint64 {
	p.seq++
	return p.seq
}

func (p *Provider) newToken(kind string) string {
	return fmt.Sprintf("%s_%s_%d", kind, p.tokenPrefix, p.nextSeq())
}

// after returns now + d in milliseconds, saturating.
func after(now int64, d time.Duration) int64 {
	ms := d.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	if now > (1<<63-1)-ms {
		return 1<<63 - 1
	}
	return now + ms
}

// waitFor runs try until it reports done, or, with long polling, until
// pollTimeout has passed, waking whenever the store changes or something
// time-based may have changed (next returns the earliest such store time,
// in ms, or 0 for none). try and next run with the mutex held.
func (p *Provider) waitFor(ctx context.Context, op string, pollTimeout time.Duration,
	try func(now int64) (done bool, err error), next func(now int64) int64) error {
	deadline := time.Now().Add(pollTimeout)
	for {
		if err := p.begin(ctx, op); err != nil {
			return err
		}
		now := p.nowMs()
		done, err := try(now)
		wake := p.wake
		var sleep time.Duration = -1
		if t := next(now); t > now {
			sleep = time.Duration(t-now) * time.Millisecond
		}
		p.mu.Unlock()
		if done || err != nil || !p.longPolling {
			return err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil
		}
		if sleep < 0 || sleep > remaining {
			sleep = remaining
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return &cdb.ProviderError{Op: op, Message: ctx.Err().Error(), Retryable: true, Err: ctx.Err()}
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}

// ---------------------------------------------------------------------------
// Table helpers; all run with the mutex held.
// ---------------------------------------------------------------------------

// latestExecution is COALESCE(MAX(execution_id), 1) over the executions of
// instance.
func (p *Provider) latestExecution(instance string) uint64 {
	var max uint64
	for id := range p.executions[instance] {
		if id > max {
			max = id
		}
	}
	if max == 0 {
		return cdb.InitialExecutionID
	}
	return max
}

// currentExecutionRow is the execution row of the instance's current
// execution, nil when the instance or that row is missing.
func (p *Provider) currentExecutionRow(instance string) *executionRow {
	inst := p.instances[instance]
	if inst == nil {
		return nil
	}
	return p.executions[instance][inst.currentExecution]
}

// sortedEventIDs returns the event ids of one execution in ascending order.
func sortedEventIDs(events map[uint64][]byte) []uint64 {
	ids := make([]uint64, 0, len(events))
	for id := range events {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// decodeHistory decodes one execution's events in event id order; any
// undecodable event is an error, never dropped.
func (p *Provider) decodeHistory(instance string, execution uint64) ([]cdb.Event, error) {
	events := p.history[instance][execution]
	out := make([]cdb.Event, 0, len(events))
	for i, id := range sortedEventIDs(events) {
		ev, err := cdb.UnmarshalEvent(events[id])
		if err != nil {
			return nil, fmt.Errorf("event at position %d (event_id %d) of instance %q execution %d: %w",
				i, id, instance, execution, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// readExecution is the shared body of the history reads.
func (p *Provider) readExecution(op, instance string, execution uint64) ([]cdb.Event, error) {
	events, err := p.decodeHistory(instance, execution)
	if err != nil {
		return nil, refuse(op, "Failed to deserialize event: "+err.Error(), err)
	}
	return events, nil
}

// encodedEvent is an event validated and encoded for appending.
type encodedEvent struct {
	id   uint64
	data []byte
	ev   cdb.Event // decoded back from data, so kinds are canonical values
}

// encodeEvents validates events for appending to (instance, execution):
// ids set by the runtime (non-zero) and unique, both among themselves and
// against stored history, which must never be overwritten.
func (p *Provider) encodeEvents(instance string, execution uint64, events []cdb.Event) ([]encodedEvent, error) {
	existing := p.history[instance][execution]
	seen := map[uint64]bool{}
	out := make([]encodedEvent, 0, len(events))
	for _, ev := range events {
		if ev.EventID == 0 {
			return nil, fmt.Errorf("event_id must be set by runtime: %w", cdb.ErrInvalidInput)
		}
		if _, dup := existing[ev.EventID]; dup || seen[ev.EventID] {
			return nil, fmt.Errorf("duplicate event_id %d for instance %q execution %d: %w", ev.EventID, instance, execution, cdb.ErrDuplicateEvent)
		}
		seen[ev.EventID] = true
		data, err := cdb.MarshalEvent(ev)
		if err != nil {
			return nil, fmt.Errorf("serialize event %d: %w", ev.EventID, err)
		}
		canonical, err := cdb.UnmarshalEvent(data)
		if err != nil {
			return nil, fmt.Errorf("event %d does not round-trip: %w", ev.EventID, err)
		}
		out = append(out, encodedEvent{id: ev.EventID, data: data, ev: canonical})
	}
	return out, nil
}

func (p *Provider) appendEncoded(instance string, execution uint64, events []encodedEvent) {
	if len(events) == 0 {
		return
	}
	byExec := p.history[instance]
	if byExec == nil {
		byExec = map[uint64]map[uint64][]byte{}
		p.history[instance] = byExec
	}
	rows := byExec[execution]
	if rows == nil {
		rows = map[uint64][]byte{}
		byExec[execution] = rows
	}
	for _, e := range events {
		rows[e.id] = e.data
	}
}

// encodedOrchItem is an orchestrator-queue message ready to insert.
type encodedOrchItem struct {
	instance string
	kind     string
	data     []byte
	fireAtMs *int64 // TimerFired enqueued through an ack: visible at fire_at_ms
	trace    cdb.TraceContext
}

// encodeOrchItem validates and encodes a message for the orchestrator queue,
// routed by WorkItem.InstanceID (the parent for sub-orchestration results).
func encodeOrchItem(item cdb.WorkItem) (encodedOrchItem, error) {
	if item == nil {
		return encodedOrchItem{}, fmt.Errorf("nil work item: %w", cdb.ErrInvalidInput)
	}
	data, err := cdb.MarshalWorkItem(item)
	if err != nil {
		return encodedOrchItem{}, fmt.Errorf("Serialization error: %w", err)
	}
	canonical, err := cdb.UnmarshalWorkItem(data)
	if err != nil {
		return encodedOrchItem{}, fmt.Errorf("work item does not round-trip: %w", err)
	}
	if _, ok := canonical.(cdb.ActivityExecuteMessage); ok {
		return encodedOrchItem{}, fmt.Errorf("Invalid work item type: ActivityExecute belongs to the worker queue: %w", cdb.ErrInvalidInput)
	}
	out := encodedOrchItem{instance: canonical.InstanceID(), kind: canonical.Kind(), data: data, trace: cdb.TraceContextOf(item)}
	if t, ok := canonical.(cdb.TimerFiredMessage); ok {
		fire := int64(t.FireAtMs)
		if t.FireAtMs > 1<<63-1 {
			fire = 1<<63 - 1
		}
		out.fireAtMs = &fire
	}
	return out, nil
}

func (p *Provider) insertOrch(e encodedOrchItem, visibleAt int64) {
	p.orchQueue = append(p.orchQueue, &orchRow{
		id:        p.nextSeq(),
		instance:  e.instance,
		item:      e.data,
		kind:      e.kind,
		visibleAt: visibleAt,
		trace:     e.trace,
	})
}

// encodedWorkItem is a worker-queue message ready to insert.
type encodedWorkItem struct {
	data       []byte
	instance   string
	execution  uint64
	activityID uint64
	sessionID  *string
	tag        *string
	trace      cdb.TraceContext
}

// encodeWorkItem validates and encodes an ActivityExecuteMessage for the worker queue.
func encodeWorkItem(item cdb.WorkItem) (encodedWorkItem, error) {
	if item == nil {
		return encodedWorkItem{}, fmt.Errorf("nil work item: %w", cdb.ErrInvalidInput)
	}
	data, err := cdb.MarshalWorkItem(item)
	if err != nil {
		return encodedWorkItem{}, fmt.Errorf("Serialization error: %w", err)
	}
	canonical, err := cdb.UnmarshalWorkItem(data)
	if err != nil {
		return encodedWorkItem{}, fmt.Errorf("work item does not round-trip: %w", err)
	}
	act, ok := canonical.(cdb.ActivityExecuteMessage)
	if !ok {
		return encodedWorkItem{}, fmt.Errorf("Invalid work item type: %s does not belong to the worker queue: %w", canonical.Kind(), cdb.ErrInvalidInput)
	}
	return encodedWorkItem{
		data:       data,
		instance:   act.Instance,
		execution:  act.ExecutionID,
		activityID: act.ID,
		sessionID:  act.SessionID,
		tag:        act.Tag,
		trace:      cdb.TraceContextOf(item),
	}, nil
}

func (p *Provider) insertWork(e encodedWorkItem, visibleAt int64) {
	p.workQueue = append(p.workQueue, &workRow{
		id:         p.nextSeq(),
		item:       e.data,
		visibleAt:  visibleAt,
		instance:   e.instance,
		execution:  e.execution,
		activityID: e.activityID,
		sessionID:  e.sessionID,
		tag:        e.tag,
		trace:      e.trace,
	})
}

func cloneString(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}
