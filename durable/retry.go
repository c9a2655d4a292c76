package durable

import (
	"errors"
	"fmt"
	"time"
)

// RetryPolicy says how often, and how far apart, an activity or a
// sub-orchestration scheduled WithRetry is tried (duroxide's
// schedule_activity_with_retry). The zero value of each field means its
// default, so RetryPolicy{} tries three times without waiting.
//
// The attempts and the waits between them are ordinary durable work, made
// by the orchestration's own future: each attempt is an ActivityScheduled
// (or SubOrchestrationScheduled) event, each wait a TimerCreated, each
// outcome its completion, so the history shows every attempt and replay
// takes the same path. The policy is part of the code: changing it while
// instances run changes what they schedule, as any code change does.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts in all, the first included
	// (default 3).
	MaxAttempts int
	// FirstInterval is the wait before the second attempt; zero tries
	// again at once, without a timer.
	FirstInterval time.Duration
	// BackoffCoefficient multiplies each wait to give the next one
	// (default 2; 1 waits FirstInterval every time). It may not be less
	// than 1.
	BackoffCoefficient float64
	// MaxInterval caps every wait (default: no cap).
	MaxInterval time.Duration
	// Timeout bounds all attempts and waits together (default: none). It
	// is a durable timer scheduled just before the first attempt: when it
	// fires, a wait ends early and an attempt still running is cancelled
	// (as a Select loser is), and Await returns an error that wraps
	// ErrRetryTimeout and the last attempt's failure, if there was one.
	// An instance that ends before it fires leaves the timer unused.
	Timeout time.Duration
	// ShouldRetry decides whether a failure is worth another attempt
	// (default: every failure is). Use errors.As in it to branch on an
	// error's type. It runs in the orchestration, on every replay, so it
	// must be deterministic.
	ShouldRetry func(err error) bool
	// NonRetryableErrors are failures never tried again, compared with
	// errors.Is (an &ApplicationError{Type: ...} matches that type). Nor
	// are, whatever the policy, an error that says so itself
	// (IsNonRetryable: an ApplicationError marked NonRetryable, or one in
	// the chain whose NonRetryable() bool method returns true) and a
	// schedule refused for its arguments (ErrInvalidInput).
	NonRetryableErrors []error
}

// ErrRetryTimeout is wrapped by the error of a future scheduled WithRetry
// whose RetryPolicy.Timeout fired before an attempt succeeded.
var ErrRetryTimeout = errors.New("durable: retry policy timed out")

// Defaults of a RetryPolicy's zero fields.
const (
	defaultRetryAttempts    = 3
	defaultRetryCoefficient = 2.0
)

// RetryOption is the option WithRetry returns; it configures both
// ScheduleActivity and ScheduleSubOrchestration.
type RetryOption struct{ policy RetryPolicy }

// WithRetry tries the activity or sub-orchestration again after a failure,
// by policy: the future's Await returns the first attempt's success, or
// the last failure once the policy gives up (at once for a failure it does
// not retry). A policy with a negative field, or a coefficient below 1, is
// refused: Await returns an error that wraps ErrInvalidInput, and nothing
// is scheduled.
//
// Each attempt is scheduled afresh: a child gets a new generated instance
// id per attempt, or with WithInstanceID, the id as given for the first
// attempt and "{id}::attempt-{n}" for attempt n. Retries are decided when
// the code looks at the future (Await, Select, Join); a future that loses a
// Select cancels its attempt in flight and schedules no more.
func WithRetry(policy RetryPolicy) RetryOption { return RetryOption{policy: policy} }

func (o RetryOption) applyActivity(a *action)         { a.retry = ptr(o.policy) }
func (o RetryOption) applySubOrchestration(a *action) { a.retry = ptr(o.policy) }

// withDefaults fills the zero fields.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = defaultRetryAttempts
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = defaultRetryCoefficient
	}
	return p
}

// validate refuses what has no sensible reading.
func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("MaxAttempts %d is negative: %w", p.MaxAttempts, ErrInvalidInput)
	case p.FirstInterval < 0, p.MaxInterval < 0, p.Timeout < 0:
		return fmt.Errorf("FirstInterval, MaxInterval and Timeout may not be negative: %w", ErrInvalidInput)
	case p.BackoffCoefficient < 1 && p.BackoffCoefficient != 0:
		return fmt.Errorf("BackoffCoefficient %v is below 1: %w", p.BackoffCoefficient, ErrInvalidInput)
	}
	return nil
}

// interval is the wait after the given failed attempt (1-based):
// FirstInterval·coefficient^(attempt-1), at most MaxInterval. It multiplies
// step by step rather than calling math.Pow, so that it is exact and the
// same on every platform.
func (p RetryPolicy) interval(attempt int) time.Duration {
	wait := float64(p.FirstInterval)
	for range attempt - 1 {
		wait *= p.BackoffCoefficient
		if p.MaxInterval > 0 && wait >= float64(p.MaxInterval) {
			return p.MaxInterval
		}
		if wait >= float64(maxDuration) {
			return maxDuration
		}
	}
	if p.MaxInterval > 0 && wait > float64(p.MaxInterval) {
		return p.MaxInterval
	}
	return time.Duration(wait)
}

// maxDuration is the longest time.Duration.
const maxDuration = time.Duration(1<<63 - 1)

// retries reports whether the policy tries again after err.
func (p RetryPolicy) retries(err error) bool {
	if errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrFutureCancelled) {
		return false // refused before anything ran: it would be refused again
	}
	if IsNonRetryable(err) {
		return false
	}
	for _, target := range p.NonRetryableErrors {
		if errors.Is(err, target) {
			return false
		}
	}
	return p.ShouldRetry == nil || p.ShouldRetry(err)
}

// retrier is the state of a future scheduled WithRetry: the attempt or
// wait in flight, and the optional deadline. It moves on only inside
// resolve, that is in the orchestration's own code, so each step is taken
// at the same point of every replay.
type retrier struct {
	octx     *OrchestrationContext
	policy   RetryPolicy
	schedule func(attempt int) *Future // schedules attempt n (1-based)
	what     string                    // e.g. `activity "Charge"`, for errors

	attempt  int     // attempts scheduled so far
	current  *Future // the attempt in flight, or the wait before the next
	waiting  bool    // current is a wait
	deadline *Future // the Timeout's timer, nil without one
	lastErr  error   // the last attempt's failure
	failures int     // attempts that failed

	value string
	err   error
}

// scheduleWithRetry schedules the first attempt of an activity or child
// (and the Timeout's timer) and returns the future that retries it.
func (c *OrchestrationContext) scheduleWithRetry(a action) *Future {
	policy := *a.retry
	a.retry = nil
	r := &retrier{octx: c, policy: policy.withDefaults(), schedule: c.attemptScheduler(a), what: a.describe()}
	if err := policy.validate(); err != nil {
		return &Future{octx: c, kind: futureRetried, done: true,
			err: fmt.Errorf("durable: retry policy of %s: %w", r.what, err)}
	}
	if r.policy.Timeout > 0 {
		r.deadline = c.scheduleTimerFor(r.policy.Timeout, "the retry policy's Timeout of "+r.what)
	}
	r.start(1)
	return c.track(&Future{octx: c, kind: futureRetried, retry: r})
}

// attemptScheduler schedules attempts of a: an activity as it is, a child
// under its generated id, or under an explicit id made unique per attempt
// (an instance id is never used twice).
func (c *OrchestrationContext) attemptScheduler(a action) func(int) *Future {
	if a.kind == actCallActivity {
		return func(attempt int) *Future {
			a.attempt = uint32(attempt)
			return c.newFuture(futureActivity, a)
		}
	}
	explicit := a.instance
	return func(attempt int) *Future {
		child := a
		if explicit != "" && attempt > 1 {
			child.instance = fmt.Sprintf("%s::attempt-%d", explicit, attempt)
		}
		return c.scheduleChild(child)
	}
}

func (r *retrier) start(attempt int) {
	r.attempt, r.current, r.waiting = attempt, r.schedule(attempt), false
}

// advance takes every step the results delivered so far allow, and reports
// whether the future has its outcome (in value and err). An attempt's
// outcome is taken before the deadline's: a success that came in time
// stands.
func (r *retrier) advance() bool {
	for {
		done := r.current.resolve()
		if done && !r.waiting {
			if r.current.err == nil {
				r.value = r.current.value
				return true
			}
			r.lastErr, r.failures = r.current.err, r.failures+1
			if r.attempt >= r.policy.MaxAttempts || !r.policy.retries(r.lastErr) {
				r.err = r.lastErr
				return true
			}
		}
		if r.deadline != nil && r.deadline.resolve() {
			r.giveUpAtDeadline(done)
			return true
		}
		if !done {
			return false
		}
		if !r.waiting {
			if wait := r.policy.interval(r.attempt); wait > 0 {
				purpose := fmt.Sprintf("the retry backoff before attempt %d of %s", r.attempt+1, r.what)
				r.current, r.waiting = r.octx.scheduleTimerFor(wait, purpose), true
				continue
			}
		}
		r.start(r.attempt + 1)
	}
}

// giveUpAtDeadline ends the retries when the Timeout fires: an attempt in
// flight is cancelled, and the error names the last failure.
func (r *retrier) giveUpAtDeadline(currentDone bool) {
	if !r.waiting && !currentDone {
		r.current.drop()
	}
	if r.lastErr == nil {
		r.err = fmt.Errorf("%w: %s after %v, its first attempt unfinished", ErrRetryTimeout, r.what, r.policy.Timeout)
		return
	}
	r.err = fmt.Errorf("%w: %s after %v and %s: %w", ErrRetryTimeout, r.what, r.policy.Timeout, failedAttempts(r.failures), r.lastErr)
}

func failedAttempts(n int) string {
	if n == 1 {
		return "1 failed attempt"
	}
	return fmt.Sprintf("%d failed attempts", n)
}

// cancelAttempt cancels the attempt in flight of a future that lost a
// Select or met a cancellation request.
func (r *retrier) cancelAttempt(reason string, err error) {
	if !r.waiting && !r.current.done {
		r.current.cancel(reason, err)
	}
}
