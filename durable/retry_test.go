package durable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Retry policies, turn by turn on a simulated clock: retrySim plays the
// activities' (and children's) outcomes and fires due timers, so the
// history is what a runtime would write, and every backoff is read off the
// timers' due times.

// retrySim drives an orchestration turn by turn. A turn runs at the
// simulated now, which moves only to a timer's due time when it fires.
type retrySim struct {
	t       *testing.T
	fn      OrchestrationFunc
	now     time.Time
	history []cdb.Event
	// outcome answers the n-th run (1-based) of the activity or child
	// name: a result, or a failure's message.
	outcome func(name string, n int) (string, error)
	runs    map[string]int
	result  turnResult
}

func newRetrySim(t *testing.T, fn OrchestrationFunc, outcome func(name string, n int) (string, error)) *retrySim {
	return &retrySim{t: t, fn: fn, now: testClock, outcome: outcome, runs: map[string]int{}}
}

// failing fails every run of every activity and child with message.
func failing(message string) func(string, int) (string, error) {
	return func(string, int) (string, error) { return "", errors.New(message) }
}

// failingUntil fails the first failures runs, then succeeds with value.
func failingUntil(failures int, value string) func(string, int) (string, error) {
	return func(name string, n int) (string, error) {
		if n <= failures {
			return "", fmt.Errorf("%s run %d failed", name, n)
		}
		return value, nil
	}
}

// run plays the orchestration to its end (at most 100 turns).
func (s *retrySim) run() *retrySim {
	s.turn(startMessage("in"))
	for i := 0; i < 100 && s.result.kind == turnContinue; i++ {
		msg, ok := s.next()
		require.True(s.t, ok, "the orchestration waits for nothing: %v", kinds(s.history))
		s.turn(msg)
	}
	require.NotEqual(s.t, turnContinue, s.result.kind, "the orchestration did not end")
	return s
}

func (s *retrySim) turn(msg cdb.WorkItem) {
	env := testEnv()
	env.now = func() time.Time { return s.now }
	b := readBatch(testInstance, []cdb.WorkItem{msg}, readHistory(s.history), env.log)
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: 1, name: "Orch", version: "1.0.0",
		fn: s.fn, persisted: s.history, batch: b,
	}, env)
	require.NoError(s.t, err)
	s.history = append(s.history, out.delta...)
	s.result = out.result
}

// next is the next completion: the first pending activity or child runs
// at once; with none pending, the earliest due timer fires.
func (s *retrySim) next() (cdb.WorkItem, bool) {
	pending := s.pending()
	for _, ev := range s.history {
		if !pending[ev.EventID] {
			continue
		}
		switch k := ev.Kind.(type) {
		case cdb.ActivityScheduled:
			return s.runOnce(k.Name, ev.EventID, false), true
		case cdb.SubOrchestrationScheduled:
			return s.runOnce(k.Name, ev.EventID, true), true
		}
	}
	var timer *cdb.Event
	for i, ev := range s.history {
		if tc, ok := ev.Kind.(cdb.TimerCreated); ok && pending[ev.EventID] &&
			(timer == nil || tc.FireAtMs < timer.Kind.(cdb.TimerCreated).FireAtMs) {
			timer = &s.history[i]
		}
	}
	if timer == nil {
		return nil, false
	}
	fireAt := timer.Kind.(cdb.TimerCreated).FireAtMs
	s.now = time.UnixMilli(int64(fireAt))
	return cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: timer.EventID, FireAtMs: fireAt}, true
}

// pending are the schedules without a completion or a cancellation.
func (s *retrySim) pending() map[uint64]bool {
	open := map[uint64]bool{}
	for _, ev := range s.history {
		switch ev.Kind.(type) {
		case cdb.ActivityScheduled, cdb.SubOrchestrationScheduled, cdb.TimerCreated:
			open[ev.EventID] = true
		default:
			if ev.SourceEventID != nil {
				delete(open, *ev.SourceEventID)
			}
		}
	}
	return open
}

func (s *retrySim) runOnce(name string, id uint64, child bool) cdb.WorkItem {
	s.runs[name]++
	value, err := s.outcome(name, s.runs[name])
	switch {
	case child && err != nil:
		return cdb.SubOrchestrationFailedMessage{ParentInstance: testInstance, ParentExecutionID: 1, ParentID: id,
			Details: cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: err.Error()}}
	case child:
		return cdb.SubOrchestrationCompletedMessage{ParentInstance: testInstance, ParentExecutionID: 1, ParentID: id, Result: value}
	case err != nil:
		return cdb.ActivityFailedMessage{Instance: testInstance, ExecutionID: 1, ID: id,
			Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: err.Error()}}
	}
	return cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: id, Result: value}
}

// backoffs are the waits the history's timers were created with, in order,
// each its due time less the time of the turn that created it.
func (s *retrySim) backoffs() []time.Duration {
	var out []time.Duration
	for _, ev := range s.history {
		if tc, ok := ev.Kind.(cdb.TimerCreated); ok {
			out = append(out, time.Duration(tc.FireAtMs-ev.TimestampMs)*time.Millisecond)
		}
	}
	return out
}

func (s *retrySim) count(kind string) int {
	n := 0
	for _, ev := range s.history {
		if ev.Kind.Type() == kind {
			n++
		}
	}
	return n
}

// retryActivity is an orchestration that calls "Flaky" by policy and
// returns its result or its error.
func retryActivity(policy RetryPolicy) OrchestrationFunc {
	return func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleActivity("Flaky", input, WithRetry(policy)).Await()
	}
}

func TestRetryTriesMaxAttemptsThenFailsWithTheLastError(t *testing.T) {
	var got error
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		_, got = ctx.ScheduleActivity("Flaky", input, WithRetry(RetryPolicy{MaxAttempts: 4, FirstInterval: time.Second})).Await()
		return "", got
	}
	s := newRetrySim(t, fn, failingUntil(10, "never")).run()

	require.Equal(t, turnFailed, s.result.kind)
	assert.Equal(t, "Flaky run 4 failed", s.result.details.DisplayMessage(), "the orchestration fails with the last attempt's error")
	var failed *TaskFailedError
	require.ErrorAs(t, got, &failed, "the last failure comes back as it was")
	assert.Equal(t, "Flaky run 4 failed", failed.Error())
	assert.Equal(t, 4, s.count("ActivityScheduled"), "four attempts, each in the history")
	assert.Equal(t, 4, s.count("ActivityFailed"))
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, s.backoffs(),
		"a wait between attempts, none after the last")
}

func TestRetryBackoffFollowsFirstIntervalCoefficientAndMaximum(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 6, FirstInterval: 500 * time.Millisecond, BackoffCoefficient: 3, MaxInterval: 10 * time.Second}
	s := newRetrySim(t, retryActivity(policy), failing("down")).run()

	assert.Equal(t, []time.Duration{
		500 * time.Millisecond, 1500 * time.Millisecond, 4500 * time.Millisecond, 10 * time.Second, 10 * time.Second,
	}, s.backoffs(), "0.5 s·3^n, capped at 10 s")
}

func TestRetryDefaultsAreThreeAttemptsAndADoublingWait(t *testing.T) {
	s := newRetrySim(t, retryActivity(RetryPolicy{FirstInterval: time.Second}), failing("down")).run()

	assert.Equal(t, 3, s.count("ActivityScheduled"))
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, s.backoffs())
}

func TestRetryWithoutFirstIntervalTriesAgainWithoutATimer(t *testing.T) {
	s := newRetrySim(t, retryActivity(RetryPolicy{MaxAttempts: 3}), failing("down")).run()

	assert.Equal(t, 3, s.count("ActivityScheduled"))
	assert.Zero(t, s.count("TimerCreated"))
}

func TestRetryThatSucceedsReturnsTheValue(t *testing.T) {
	s := newRetrySim(t, retryActivity(RetryPolicy{MaxAttempts: 5, FirstInterval: time.Second}), failingUntil(2, "paid")).run()

	require.Equal(t, turnCompleted, s.result.kind)
	assert.Equal(t, "paid", s.result.output)
	assert.Equal(t, []string{
		"OrchestrationStarted",
		"ActivityScheduled", "ActivityFailed", "TimerCreated", "TimerFired",
		"ActivityScheduled", "ActivityFailed", "TimerCreated", "TimerFired",
		"ActivityScheduled", "ActivityCompleted",
		"OrchestrationCompleted",
	}, kinds(s.history), "each attempt and each wait is in the history")
}

func TestRetryStopsAtOnceOnAFailureThePredicateRefuses(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 5, FirstInterval: time.Second, ShouldRetry: func(err error) bool {
		var failed *TaskFailedError
		return !errors.As(err, &failed) || failed.Details.DisplayMessage() != "card declined"
	}}
	var got error
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		_, got = ctx.ScheduleActivity("Charge", "", WithRetry(policy)).Await()
		return "", got
	}
	s := newRetrySim(t, fn, failing("card declined")).run()

	assert.Equal(t, 1, s.count("ActivityScheduled"), "no second attempt")
	assert.Zero(t, s.count("TimerCreated"), "no wait")
	assert.EqualError(t, got, "card declined")
}

// declined is a failure that marks itself as not worth retrying, as a typed
// error carried to the orchestration can.
type declined struct{ error }

func (declined) NonRetryable() bool { return true }

func (d declined) Unwrap() error { return d.error }

var errCardDeclined = errors.New("card declined")

func TestRetryPolicyRefusesMarkedAndListedErrors(t *testing.T) {
	wrapped := fmt.Errorf("charge: %w", declined{errCardDeclined})
	assert.False(t, RetryPolicy{}.retries(wrapped), "an error marked NonRetryable, anywhere in the chain")
	assert.False(t, RetryPolicy{NonRetryableErrors: []error{errCardDeclined}}.retries(fmt.Errorf("charge: %w", errCardDeclined)),
		"a listed error, by errors.Is")
	assert.False(t, RetryPolicy{}.retries(fmt.Errorf("schedule: %w", ErrInvalidInput)), "a refused schedule")
	assert.False(t, RetryPolicy{ShouldRetry: func(error) bool { return false }}.retries(errors.New("x")), "the predicate's no")
	assert.True(t, RetryPolicy{NonRetryableErrors: []error{errCardDeclined}}.retries(errors.New("timeout")), "anything else")
}
