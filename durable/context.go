package durable

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/duroxide-go/cdb"
)

// OrchestrationFunc is an orchestration: it runs again from the start on
// every turn, so it must be deterministic (see the package doc). Returning
// an error fails the orchestration with that error's message.
type OrchestrationFunc func(ctx *OrchestrationContext, input string) (string, error)

// Names of duroxide's built-in system activities, registered in every
// Registry. Their results are recorded in history like any activity's, which
// makes them replay-safe.
const (
	sysActivityPrefix = "__duroxide_syscall:"
	sysNewGUID        = sysActivityPrefix + "new_guid"
	sysUtcNowMs       = sysActivityPrefix + "utc_now_ms"
	sysGetKVValue     = sysActivityPrefix + "get_kv_value"
)

// OrchestrationContext is what orchestration code schedules durable work
// with. It is valid only inside the orchestration's own call (not from
// other goroutines, not after it returns).
type OrchestrationContext struct {
	instance    string
	executionID uint64
	name        string
	version     string
	now         func() time.Time
	co          *coroutine
	replaying   bool

	nextToken      uint64
	emitted        []emittedAction
	results        map[uint64]completion // token → delivered result
	bindings       map[uint64]uint64     // token → scheduling event id
	tokens         map[uint64]uint64     // scheduling event id → token
	external       externalEvents
	queue          queueMessages
	childInstances map[uint64]string // token → child id as scheduled
	dropped        []droppedFuture   // Select losers, in drop order
	// futures are the futures made since the last cancellation request
	// (or the start), which a request cancels if still waiting;
	// cancellation is the execution's opt-in to see one (cancellation.go).
	futures      []*Future
	cancellation *cancellation
	// queueRaceRules: the execution follows duroxide 0.1.31's queue-race
	// rules (queue_race.go); cancelOnBind are dropped waits to take out of
	// matching once bound; queueRead are the queue subscriptions whose
	// value the code read.
	queueRaceRules bool
	// bufferedEvents: WaitForEvent is buffered in this execution
	// (events.go).
	bufferedEvents bool
	cancelOnBind   map[uint64]futureKind
	queueRead      map[uint64]bool
	customStatus   *string
	kv             map[string]string
}

// completion is a delivered result: err is a *TaskFailedError or nil.
type completion struct {
	value string
	err   error
}

// droppedFuture is a Select loser, or work a cancellation request ended,
// whose work must be cancelled; reason is its breadcrumbs'.
type droppedFuture struct {
	token  uint64
	kind   futureKind
	reason string
}

// orchestrationIdentity names the execution a context runs.
type orchestrationIdentity struct {
	instance    string
	executionID uint64
	name        string
	version     string
}

func newOrchestrationContext(id orchestrationIdentity, now func() time.Time, kv map[string]cdb.KVEntry) *OrchestrationContext {
	c := &OrchestrationContext{
		instance: id.instance, executionID: id.executionID, name: id.name, version: id.version,
		now: now, co: newCoroutine(), replaying: true,
		results: map[uint64]completion{}, bindings: map[uint64]uint64{}, tokens: map[uint64]uint64{},
		external: newExternalEvents(), queue: newQueueMessages(),
		childInstances: map[uint64]string{}, kv: map[string]string{},
		cancelOnBind: map[uint64]futureKind{}, queueRead: map[uint64]bool{},
	}
	for key, entry := range kv {
		c.kv[key] = entry.Value
	}
	return c
}

// InstanceID is the orchestration instance's id.
func (c *OrchestrationContext) InstanceID() string { return c.instance }

// ExecutionID is the current execution, 1 at first and one more after each
// continue-as-new.
func (c *OrchestrationContext) ExecutionID() uint64 { return c.executionID }

// OrchestrationName is the name the orchestration is registered under.
func (c *OrchestrationContext) OrchestrationName() string { return c.name }

// OrchestrationVersion is the registered version running this execution.
func (c *OrchestrationContext) OrchestrationVersion() string { return c.version }

// IsReplaying reports whether the code is re-executing history rather than
// making new decisions; use it to skip side effects such as logging.
func (c *OrchestrationContext) IsReplaying() bool { return c.replaying }

// ActivityOption configures ScheduleActivity: WithSession, WithTag,
// WithRetry.
type ActivityOption interface{ applyActivity(*action) }

// activityOption is an ActivityOption that sets fields of the action.
type activityOption func(*action)

func (o activityOption) applyActivity(a *action) { o(a) }

// WithSession pins the activity to the worker that owns the session.
func WithSession(sessionID string) ActivityOption {
	return activityOption(func(a *action) { a.sessionID = ptr(sessionID) })
}

// WithTag routes the activity to workers whose tag filter accepts tag.
func WithTag(tag string) ActivityOption {
	return activityOption(func(a *action) { a.tag = ptr(tag) })
}

// ScheduleActivity schedules an activity; Await gives its result. With
// WithRetry, the future runs the activity again by the policy until an
// attempt succeeds or the policy gives up.
func (c *OrchestrationContext) ScheduleActivity(name, input string, opts ...ActivityOption) *Future {
	a := action{kind: actCallActivity, name: name, input: input}
	for _, opt := range opts {
		opt.applyActivity(&a)
	}
	if a.retry != nil {
		return c.scheduleWithRetry(a)
	}
	return c.newFuture(futureActivity, a)
}

// ScheduleTimer schedules a durable timer; Await returns when it fires.
func (c *OrchestrationContext) ScheduleTimer(delay time.Duration) *Future {
	return c.scheduleTimerFor(delay, "")
}

// scheduleTimerFor schedules a timer the runtime's helpers set for the
// code (a retry's backoff, a wait's timeout), saying what for: messages
// that name the timer (a divergence) say it too.
func (c *OrchestrationContext) scheduleTimerFor(delay time.Duration, purpose string) *Future {
	fireAt := c.now().Add(delay).UnixMilli()
	return c.newFuture(futureTimer, action{kind: actCreateTimer, fireAtMs: uint64(max(fireAt, 0)), purpose: purpose})
}

// DequeueEvent takes the next message of a persistent queue
// (Client.EnqueueEvent); messages wait for a subscriber, in FIFO order, and
// survive continue-as-new.
func (c *OrchestrationContext) DequeueEvent(queue string) *Future {
	return c.newFuture(futureQueue, action{kind: actDequeueEvent, name: queue})
}

// SubOrchestrationOption configures ScheduleSubOrchestration.
type SubOrchestrationOption interface{ applySubOrchestration(*action) }

// StartOption configures Client.StartOrchestration, StartOrchestration and
// ContinueAsNew.
type StartOption interface{ applyStart(*startOptions) }

type startOptions struct {
	version  *string
	ifExists IfExists // Client.StartOrchestration only
}

// VersionOption selects an exact orchestration version instead of the
// registry's policy.
type VersionOption string

// WithVersion runs the orchestration at exactly this (semantic) version.
func WithVersion(version string) VersionOption { return VersionOption(version) }

func (v VersionOption) applySubOrchestration(a *action) { a.version = ptr(string(v)) }
func (v VersionOption) applyStart(o *startOptions)      { o.version = ptr(string(v)) }

// InstanceIDOption names a sub-orchestration's instance explicitly.
type InstanceIDOption string

// WithInstanceID gives the child this instance id instead of the generated
// "{parent}::sub::{n}". An id that starts with "sub::" (the mark of a
// generated id) is refused: the future returns ErrInvalidInput at once and
// nothing is scheduled.
func WithInstanceID(instance string) InstanceIDOption { return InstanceIDOption(instance) }

func (o InstanceIDOption) applySubOrchestration(a *action) { a.instance = string(o) }

// ScheduleSubOrchestration starts a child orchestration; Await gives its
// output, or a *TaskFailedError if it failed. With WithRetry, a failed
// child is followed by a new one, by the policy.
func (c *OrchestrationContext) ScheduleSubOrchestration(name, input string, opts ...SubOrchestrationOption) *Future {
	a := action{kind: actStartSubOrchestration, name: name, input: input}
	for _, opt := range opts {
		opt.applySubOrchestration(&a)
	}
	if err := checkExplicitChildID(a.instance); err != nil {
		// Nothing is scheduled or recorded (duroxide 0.1.30).
		return c.refusedFuture(futureSubOrchestration, fmt.Errorf("durable: schedule sub-orchestration: %w", err))
	}
	if a.retry != nil {
		return c.scheduleWithRetry(a)
	}
	return c.scheduleChild(a)
}

// scheduleChild records a child's start and the id it was given.
func (c *OrchestrationContext) scheduleChild(a action) *Future {
	f := c.newFuture(futureSubOrchestration, a)
	if a.instance != "" {
		c.childInstances[f.token] = a.instance
	}
	return f
}

// StartDetached starts an independent orchestration (fire and forget), its
// arguments in Client.StartOrchestration's order: the new instance has no
// parent and its result is not reported here. Its instance id follows
// Client.StartOrchestration's rule; an id with the reserved "sub::" marker
// is refused with an error that wraps ErrInvalidInput, and nothing is
// started or recorded.
func (c *OrchestrationContext) StartDetached(instance, name, input string, opts ...StartOption) error {
	if err := checkRootInstanceID(instance); err != nil {
		return fmt.Errorf("durable: detached start of %q: %w", name, err)
	}
	var o startOptions
	for _, opt := range opts {
		opt.applyStart(&o)
	}
	c.emit(action{kind: actStartDetached, name: name, instance: instance, input: input, version: o.version})
	return nil
}

// StartOrchestration starts an independent orchestration, as StartDetached
// does, but an id with the reserved "sub::" marker panics, which fails the
// orchestration (duroxide panics too).
//
// Deprecated: Use StartDetached. StartOrchestration takes the name before
// the instance id, the reverse of Client.StartOrchestration, and two
// strings swapped compile: the orchestration would be started under its
// name as the id.
func (c *OrchestrationContext) StartOrchestration(name, instance, input string, opts ...StartOption) {
	if err := c.StartDetached(instance, name, input, opts...); err != nil {
		// There is no result to carry the refusal: the orchestration fails,
		// and nothing is started.
		panic(err)
	}
}

// ContinueAsNew ends this execution and starts the next one with input
// (and, with WithVersion, at that version). It never returns: it records
// the continue-as-new and parks the orchestration until the turn ends;
// the runtime then unwinds the orchestration's goroutine with a panic of
// its own, which it recovers. Code after the call never runs; deferred
// calls do, but nothing they do through the context is recorded. Replay
// and a Replayer run turns the same way. It has results only so that an
// orchestration can end with `return ctx.ContinueAsNew(next)`; none is
// ever produced. Code that recovers the runtime's panic cannot undo the
// call: what the function then returns is ignored. An instance cancelled
// in the same turn ends cancelled instead.
func (c *OrchestrationContext) ContinueAsNew(input string, opts ...StartOption) (string, error) {
	var o startOptions
	for _, opt := range opts {
		opt.applyStart(&o)
	}
	c.emit(action{kind: actContinueAsNew, input: input, version: o.version})
	for {
		c.co.suspend() // the engine may resume us within the turn; at its end it aborts us
	}
}

// SetCustomStatus publishes a progress status for clients (nil clears it).
func (c *OrchestrationContext) SetCustomStatus(status *string) {
	if status != nil {
		status = ptr(*status)
	}
	c.customStatus = status
	c.emit(action{kind: actUpdateCustomStatus, status: status})
}

// CustomStatus is the status as of this point of the code, including one
// carried over by continue-as-new.
func (c *OrchestrationContext) CustomStatus() *string {
	if c.customStatus == nil {
		return nil
	}
	return ptr(*c.customStatus)
}

// SetKV sets a key of the instance's key-value store.
func (c *OrchestrationContext) SetKV(key, value string) {
	c.kv[key] = value
	c.emit(action{kind: actSetKV, key: key, value: value, updatedAtMs: uint64(max(c.now().UnixMilli(), 0))})
}

// ClearKV removes a key of the instance's key-value store.
func (c *OrchestrationContext) ClearKV(key string) {
	delete(c.kv, key)
	c.emit(action{kind: actClearKV, key: key})
}

// ClearAllKV empties the instance's key-value store.
func (c *OrchestrationContext) ClearAllKV() {
	clear(c.kv)
	c.emit(action{kind: actClearAllKV})
}

// GetKV reads the instance's key-value store as of this point of the code.
func (c *OrchestrationContext) GetKV(key string) (string, bool) {
	v, ok := c.kv[key]
	return v, ok
}

// NewGUID returns a random UUID recorded in history (a system activity), so
// replays see the same value.
func (c *OrchestrationContext) NewGUID() (string, error) {
	return c.ScheduleActivity(sysNewGUID, "").Await()
}

// UtcNow returns the current time recorded in history (a system activity),
// so replays see the same value.
func (c *OrchestrationContext) UtcNow() (time.Time, error) {
	s, err := c.ScheduleActivity(sysUtcNowMs, "").Await()
	if err != nil {
		return time.Time{}, err
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("durable: utc_now: bad result %q: %w", s, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

// GetKVFromInstance reads a key of another instance's key-value store,
// through a system activity: the value read is recorded in history, so
// replays see the same one.
func (c *OrchestrationContext) GetKVFromInstance(instance, key string) (string, bool, error) {
	input, err := json.Marshal(struct {
		InstanceID string `json:"instance_id"`
		Key        string `json:"key"`
	}{instance, key})
	if err != nil {
		return "", false, fmt.Errorf("durable: get KV from %q: %w", instance, err)
	}
	out, err := c.ScheduleActivity(sysGetKVValue, string(input)).Await()
	if err != nil {
		return "", false, err
	}
	var value *string
	if err := json.Unmarshal([]byte(out), &value); err != nil {
		return "", false, fmt.Errorf("durable: get KV from %q: bad result %q: %w", instance, out, err)
	}
	if value == nil {
		return "", false, nil
	}
	return *value, true, nil
}

// emit records an action for the engine and returns its token.
func (c *OrchestrationContext) emit(a action) uint64 {
	c.nextToken++
	c.emitted = append(c.emitted, emittedAction{token: c.nextToken, action: a})
	return c.nextToken
}

// drainEmitted hands the recorded actions to the engine.
func (c *OrchestrationContext) drainEmitted() []emittedAction {
	out := c.emitted
	c.emitted = nil
	return out
}

// bind ties a future's token to the event its action became.
func (c *OrchestrationContext) bind(token, scheduleID uint64) {
	c.bindings[token] = scheduleID
	c.tokens[scheduleID] = token
	if kind, dropped := c.cancelOnBind[token]; dropped {
		delete(c.cancelOnBind, token)
		c.cancelWait(kind, scheduleID)
	}
}

// deliver stores the result for the future bound to scheduleID.
func (c *OrchestrationContext) deliver(scheduleID uint64, result completion) {
	if token, ok := c.tokens[scheduleID]; ok {
		c.results[token] = result
	}
}

// track remembers a future for a cancellation request to come.
func (c *OrchestrationContext) track(f *Future) *Future {
	c.futures = append(c.futures, f)
	return f
}

// takeFutures returns the futures tracked so far and forgets them.
func (c *OrchestrationContext) takeFutures() []*Future {
	out := c.futures
	c.futures = nil
	return out
}

// takeDropped returns the Select losers recorded since the last call.
func (c *OrchestrationContext) takeDropped() []droppedFuture {
	out := c.dropped
	c.dropped = nil
	return out
}
