package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	return s.fireTimer()
}

// fireTimer fires the earliest pending timer, moving the clock to it.
func (s *retrySim) fireTimer() (cdb.WorkItem, bool) {
	pending := s.pending()
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
	return retryActivityKeeping("Flaky", policy, new(error))
}

// retryActivityKeeping calls the activity name by policy, returns its
// result or its error, and keeps the error in got.
func retryActivityKeeping(name string, policy RetryPolicy, got *error) OrchestrationFunc {
	return func(ctx *OrchestrationContext, input string) (string, error) {
		var value string
		value, *got = ctx.ScheduleActivity(name, input, WithRetry(policy)).Await()
		return value, *got
	}
}

func TestRetryTriesMaxAttemptsThenFailsWithTheLastError(t *testing.T) {
	var got error
	fn := retryActivityKeeping("Flaky", RetryPolicy{MaxAttempts: 4, FirstInterval: time.Second}, &got)
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
	fn := retryActivityKeeping("Charge", policy, &got)
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

func TestRetryTimeoutStopsRetryingDuringAWait(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 10, FirstInterval: 10 * time.Second, Timeout: 25 * time.Second}
	var got error
	fn := retryActivityKeeping("Flaky", policy, &got)
	s := newRetrySim(t, fn, failing("down")).run()

	// Attempt 1 fails at 0 s, attempt 2 at 10 s; its wait would end at
	// 30 s, but the timeout fires at 25 s.
	assert.Equal(t, 2, s.count("ActivityScheduled"), "no attempt after the timeout")
	assert.Equal(t, []time.Duration{25 * time.Second, 10 * time.Second, 20 * time.Second}, s.backoffs(),
		"the timeout's timer first, then the waits")
	require.ErrorIs(t, got, ErrRetryTimeout)
	var failed *TaskFailedError
	require.ErrorAs(t, got, &failed, "the last failure is wrapped")
	assert.EqualError(t, got, `durable: retry policy timed out: activity "Flaky" after 25s and 2 failed attempts: down`)
}

func TestRetryTimeoutCancelsTheAttemptInFlight(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 3, Timeout: time.Minute}
	var got error
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		_, got = ctx.ScheduleActivity("Slow", "", WithRetry(policy)).Await()
		return "gave up", nil
	}
	s := newRetrySim(t, fn, nil)
	s.turn(startMessage("in"))
	timer, ok := s.fireTimer() // the activity is still running
	require.True(t, ok)
	s.turn(timer)

	require.Equal(t, turnCompleted, s.result.kind)
	assert.EqualError(t, got, `durable: retry policy timed out: activity "Slow" after 1m0s, its first attempt unfinished`)
	assert.Equal(t, []string{
		"OrchestrationStarted", "TimerCreated", "ActivityScheduled", "TimerFired", "ActivityCancelRequested", "OrchestrationCompleted",
	}, kinds(s.history), "the running attempt is cancelled as a Select loser is")
}

func TestRetrySubOrchestrationStartsANewChildPerAttempt(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 3, FirstInterval: time.Second}
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleSubOrchestration("Payment", input, WithRetry(policy)).Await()
	}
	s := newRetrySim(t, fn, failingUntil(2, "receipt")).run()

	require.Equal(t, turnCompleted, s.result.kind)
	assert.Equal(t, "receipt", s.result.output)
	children := eventsOf[cdb.SubOrchestrationScheduled](s.history)
	require.Len(t, children, 3)
	assert.Equal(t, []string{"sub::2", "sub::6", "sub::10"}, []string{children[0].Instance, children[1].Instance, children[2].Instance},
		"each attempt is a child of its own")
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second}, s.backoffs())
}

func TestRetrySubOrchestrationWithAnExplicitIDNumbersLaterAttempts(t *testing.T) {
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		return ctx.ScheduleSubOrchestration("Payment", input, WithInstanceID("pay-1"), WithRetry(RetryPolicy{})).Await()
	}
	s := newRetrySim(t, fn, failing("declined")).run()

	var ids []string
	for _, c := range eventsOf[cdb.SubOrchestrationScheduled](s.history) {
		ids = append(ids, c.Instance)
	}
	assert.Equal(t, []string{"pay-1", "pay-1::attempt-2", "pay-1::attempt-3"}, ids, "an instance id is never used twice")
	assert.Equal(t, "declined", s.result.details.DisplayMessage())
}

func TestRetryFutureThatLosesASelectCancelsItsAttemptAndStops(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		retried := ctx.ScheduleActivity("Flaky", "", WithRetry(RetryPolicy{MaxAttempts: 5, FirstInterval: time.Hour}))
		if ctx.Select(retried, ctx.ScheduleTimer(time.Minute)) == 1 {
			_, err := retried.Await()
			return "timer won", err
		}
		return "activity won", nil
	}
	s := newRetrySim(t, fn, nil)
	s.turn(startMessage("in"))
	fired, ok := s.fireTimer()
	require.True(t, ok)
	s.turn(fired)

	require.Equal(t, turnFailed, s.result.kind)
	assert.Equal(t, ErrFutureCancelled.Error(), s.result.details.DisplayMessage())
	assert.Equal(t, 1, s.count("ActivityScheduled"))
	assert.Equal(t, 1, s.count("ActivityCancelRequested"))
}

func TestRetryPolicyThatMakesNoSenseIsRefusedAndSchedulesNothing(t *testing.T) {
	for _, policy := range []RetryPolicy{{MaxAttempts: -1}, {FirstInterval: -time.Second}, {BackoffCoefficient: 0.5}, {Timeout: -1}} {
		var got error
		fn := retryActivityKeeping("A", policy, &got)
		s := newRetrySim(t, fn, nil).run()

		assert.ErrorIs(t, got, ErrInvalidInput, "%+v", policy)
		assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationFailed"}, kinds(s.history))
	}
}

// Replaying a recorded history of retries gives, turn by turn, the events
// the turn recorded: each prefix that ends before a completion, replayed
// with that completion, yields the same completion and the same schedules.
func TestRetryHistoryReplaysDeterministically(t *testing.T) {
	fn := func(ctx *OrchestrationContext, input string) (string, error) {
		paid, err := ctx.ScheduleActivity("Charge", input, WithRetry(RetryPolicy{MaxAttempts: 4, FirstInterval: time.Second, Timeout: time.Hour})).Await()
		if err != nil {
			return "", err
		}
		return ctx.ScheduleSubOrchestration("Ship", paid, WithRetry(RetryPolicy{MaxAttempts: 3, FirstInterval: time.Second})).Await()
	}
	s := newRetrySim(t, fn, failingUntil(2, "ok")).run()
	require.Equal(t, turnCompleted, s.result.kind)
	history := s.history

	completions := 0
	for i, ev := range history {
		if ev.SourceEventID == nil || isCancellation(ev.Kind) {
			continue
		}
		completions++
		res, err := Replay(context.Background(), testInstance, 1, history[:i], []cdb.WorkItem{messageFor(ev)}, fn)
		require.NoError(t, err)
		end := nextCompletion(history, i)
		assert.Equal(t, comparable(history[i:end]), comparable(res.Delta), "the turn of event %d", ev.EventID)
	}
	assert.Equal(t, 10, completions, "3 charges and 2 waits, 3 children and 2 waits")

	res, err := Replay(context.Background(), testInstance, 1, history[:len(history)-1], nil, fn)
	require.NoError(t, err)
	assert.Equal(t, StateCompleted, res.State)
	assert.Equal(t, "ok", res.Output)
	assert.Empty(t, res.Delta, "the whole history replays without a new event")
}

func isCancellation(k cdb.EventKind) bool {
	_, ok := k.(cdb.ActivityCancelRequested)
	return ok
}

// nextCompletion is the index of the first completion after i, or of the
// terminal event: where the turn of event i ends.
func nextCompletion(history []cdb.Event, i int) int {
	for j := i + 1; j < len(history); j++ {
		if (history[j].SourceEventID != nil && !isCancellation(history[j].Kind)) || history[j].IsTerminal() {
			return j
		}
	}
	return len(history)
}

// messageFor is the message a completion event was made from.
func messageFor(ev cdb.Event) cdb.WorkItem {
	id := *ev.SourceEventID
	switch k := ev.Kind.(type) {
	case cdb.ActivityCompleted:
		return cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: id, Result: k.Result}
	case cdb.ActivityFailed:
		return cdb.ActivityFailedMessage{Instance: testInstance, ExecutionID: 1, ID: id, Details: k.Details}
	case cdb.TimerFired:
		return cdb.TimerFiredMessage{Instance: testInstance, ExecutionID: 1, ID: id, FireAtMs: k.FireAtMs}
	case cdb.SubOrchestrationCompleted:
		return cdb.SubOrchestrationCompletedMessage{ParentInstance: testInstance, ParentExecutionID: 1, ParentID: id, Result: k.Result}
	case cdb.SubOrchestrationFailed:
		return cdb.SubOrchestrationFailedMessage{ParentInstance: testInstance, ParentExecutionID: 1, ParentID: id, Details: k.Details}
	}
	panic(fmt.Sprintf("no message for %s", ev.Kind.Type()))
}

// comparable drops what a replay takes from the wall clock: timestamps and
// timers' due times.
func comparable(events []cdb.Event) []cdb.Event {
	out := make([]cdb.Event, len(events))
	for i, ev := range events {
		ev.TimestampMs = 0
		if _, ok := ev.Kind.(cdb.TimerCreated); ok {
			ev.Kind = cdb.TimerCreated{}
		}
		out[i] = ev
	}
	return out
}

// On the runtime, on each provider: the attempts run as activities and
// children do, the waits as timers do.

// flaky fails its first failures runs with "flaky run n", then returns
// "ok:" and its input.
func flaky(failures int64) ActivityFunc {
	var runs atomic.Int64
	return func(_ ActivityContext, input string) (string, error) {
		if n := runs.Add(1); n <= failures {
			return "", fmt.Errorf("flaky run %d", n)
		}
		return "ok:" + input, nil
	}
}

// startRetried starts instance of "Orch", which calls "Flaky" by policy;
// Flaky fails its first failures runs.
func startRetried(h *harness, instance string, failures int64, policy RetryPolicy) {
	h.activity("Flaky", flaky(failures))
	h.orchestration("Orch", retryActivity(policy))
	h.run()
	h.start(instance, "Orch", "x")
}

func TestRetryOnTheRuntimeSucceedsAfterFailures(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		startRetried(h, "retried", 2, RetryPolicy{MaxAttempts: 5, FirstInterval: 10 * time.Millisecond})

		assert.Equal(t, "ok:x", h.completed("retried"))
		history, err := h.client.ReadHistory(h.ctx, "retried")
		require.NoError(t, err)
		assert.Len(t, eventsOf[cdb.ActivityScheduled](history), 3)
		assert.Len(t, eventsOf[cdb.ActivityFailed](history), 2)
		assert.Len(t, eventsOf[cdb.TimerFired](history), 2, "a wait after each failure")
	})
}

// An activity's ApplicationError marked non-retryable crosses the store
// and stops the policy at once: one attempt, no wait.
func TestRetryOnTheRuntimeStopsAtANonRetryableApplicationError(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		h.activity("Charge", func(ActivityContext, string) (string, error) {
			runs.Add(1)
			return "", NewApplicationError("CardDeclined", "insufficient_funds", "card declined", true)
		})
		var got error
		h.orchestration("Orch", retryActivityKeeping("Charge", RetryPolicy{MaxAttempts: 5, FirstInterval: 10 * time.Millisecond}, &got))
		h.run()
		h.start("declined", "Orch", "x")

		st := h.wait("declined")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, int32(1), runs.Load(), "not tried again")
		var declined *ApplicationError
		require.ErrorAs(t, got, &declined)
		assert.Equal(t, "insufficient_funds", declined.Code)
		history, err := h.client.ReadHistory(h.ctx, "declined")
		require.NoError(t, err)
		assert.Empty(t, eventsOf[cdb.TimerCreated](history), "no wait scheduled")
	})
}

func TestRetryOnTheRuntimeFailsWithTheLastErrorWhenAttemptsRunOut(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		startRetried(h, "exhausted", 100, RetryPolicy{MaxAttempts: 3, FirstInterval: 10 * time.Millisecond})

		st := h.wait("exhausted")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, "flaky run 3", st.Error.DisplayMessage())
	})
}

func TestRetryOnTheRuntimeStartsAChildPerAttempt(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.activity("Flaky", flaky(1))
		h.orchestration("Payment", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleActivity("Flaky", input).Await()
		})
		h.orchestration("Orch", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleSubOrchestration("Payment", input,
				WithRetry(RetryPolicy{MaxAttempts: 2, FirstInterval: 10 * time.Millisecond})).Await()
		})
		h.run()
		h.start("parent", "Orch", "x")

		assert.Equal(t, "ok:x", h.completed("parent"))
		history, err := h.client.ReadHistory(h.ctx, "parent")
		require.NoError(t, err)
		children := eventsOf[cdb.SubOrchestrationScheduled](history)
		require.Len(t, children, 2)
		first := h.wait(cdb.BuildChildInstanceID("parent", children[0].Instance))
		assert.Equal(t, StateFailed, first.State, "the first child failed")
		assert.Equal(t, "flaky run 1", first.Error.DisplayMessage())
		assert.Equal(t, "ok:x", h.completed(cdb.BuildChildInstanceID("parent", children[1].Instance)))
	})
}

// The timeout is far longer than one failed attempt takes on any store
// (the npm server under -race outlasted 50 ms), and far shorter than the
// hour's wait it must cut short.
func TestRetryOnTheRuntimeStopsAtTheTimeout(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		startRetried(h, "timed-out", 100, RetryPolicy{MaxAttempts: 5, FirstInterval: time.Hour, Timeout: 2 * time.Second})

		st := h.wait("timed-out")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, `durable: retry policy timed out: activity "Flaky" after 2s and 1 failed attempt: flaky run 1`, st.Error.DisplayMessage(),
			"the hour's wait is cut short")
	})
}

// A divergence that meets a timer the runtime set for the code says what
// the timer is for: code that added a retry policy's Timeout to an
// activity already scheduled without one.
func TestADivergenceNamesWhatARuntimeTimerIsFor(t *testing.T) {
	plain := func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Charge", "").Await()
	}
	bounded := func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Charge", "", WithRetry(RetryPolicy{Timeout: time.Minute})).Await()
	}
	first := turnOn(t, plain, nil, startMessage(""))

	out := turnOn(t, bounded, first.delta, cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 2, Result: "ok"})

	require.Equal(t, turnFailed, out.result.kind)
	assert.Equal(t, `schedule mismatch at event 2: history has activity "Charge", the code scheduled timer (the retry policy's Timeout of activity "Charge")`,
		*out.result.details.(cdb.ConfigurationError).Message)
}

// An activity knows which of its retry policy's attempts it runs, and the
// worker item carries it (1 for an activity without a policy).
func TestAnActivityKnowsItsRetryAttempt(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var attempts, deliveries []int
		h.activity("Flaky", func(ctx ActivityContext, _ string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			attempts, deliveries = append(attempts, ctx.Attempt()), append(deliveries, ctx.Delivery())
			if len(attempts) < 3 {
				return "", errors.New("not yet")
			}
			return "done", nil
		})
		h.activity("Plain", func(ctx ActivityContext, _ string) (string, error) {
			return fmt.Sprintf("attempt %d", ctx.Attempt()), nil
		})
		h.orchestration("Retrying", func(ctx *OrchestrationContext, _ string) (string, error) {
			if _, err := ctx.ScheduleActivity("Flaky", "", WithRetry(RetryPolicy{MaxAttempts: 3})).Await(); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Plain", "").Await()
		})
		h.run()
		h.start("retrying", "Retrying", "")
		assert.Equal(t, "attempt 1", h.completed("retrying"))
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []int{1, 2, 3}, attempts)
		assert.Equal(t, []int{1, 1, 1}, deliveries)
	})
}

// The history says what a retry policy's timers are for, so that an
// operator reading it (cdb show) tells them from the code's own.
func TestARetryPolicysTimersSayWhatTheyAreFor(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Charge", "", WithRetry(RetryPolicy{MaxAttempts: 2, FirstInterval: time.Second, Timeout: time.Minute})).Await()
	}
	first := turnOn(t, fn, nil, startMessage(""))
	require.Equal(t, []string{"OrchestrationStarted", "TimerCreated", "ActivityScheduled"}, kinds(first.delta))
	assert.Equal(t, ptr(`the retry policy's Timeout of activity "Charge"`), first.delta[1].Kind.(cdb.TimerCreated).Purpose)

	failed := turnOn(t, fn, first.delta, cdb.ActivityFailedMessage{Instance: testInstance, ExecutionID: 1, ID: 3,
		Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "declined"}})
	require.Equal(t, []string{"ActivityFailed", "TimerCreated"}, kinds(failed.delta))
	assert.Equal(t, ptr(`the retry backoff before attempt 2 of activity "Charge"`), failed.delta[1].Kind.(cdb.TimerCreated).Purpose)
}
