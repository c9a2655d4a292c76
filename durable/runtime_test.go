package durable

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Dispatcher behaviour on every provider: shutdown, poison, lock renewal.

// TestShutdownLeavesNoGoroutines runs work to completion, shuts down, and
// checks that every goroutine the runtime started has exited. The subtests
// are not parallel: the goroutine count is process-wide.
func TestShutdownLeavesNoGoroutines(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			h := newHarness(t, pc.new(t))
			h.activity("Echo", func(_ ActivityContext, in string) (string, error) { return in, nil })
			h.orchestration("Work", func(ctx *OrchestrationContext, in string) (string, error) {
				if _, err := ctx.ScheduleTimer(time.Millisecond).Await(); err != nil {
					return "", err
				}
				pending := ctx.WaitForEvent("never") // still suspended at every turn's end
				_ = pending
				return ctx.ScheduleActivity("Echo", in).Await()
			})
			baseline := goruntime.NumGoroutine()
			rt, err := Start(h.ctx, h.provider, h.registry, fastOptions(t))
			require.NoError(t, err)
			h.start("leak-1", "Work", "x")
			h.start("leak-2", "Work", "y")
			assert.Equal(t, "x", h.completed("leak-1"))
			assert.Equal(t, "y", h.completed("leak-2"))

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, rt.Shutdown(ctx))
			assert.True(t, goroutinesSettle(baseline), "goroutines before %d, after %d", baseline, goruntime.NumGoroutine())
			require.NoError(t, rt.Shutdown(ctx), "a second shutdown is a no-op")
		})
	}
}

// TestShutdownWaitsForActivityInFlight: a graceful shutdown lets a running
// activity finish and commit its result.
func TestShutdownWaitsForActivityInFlight(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		started := make(chan struct{})
		watch := &fetchStopWatch{Provider: h.provider, stopped: make(chan struct{})}
		h.activity("Slow", func(ctx ActivityContext, _ string) (string, error) {
			close(started)
			<-watch.stopped // the shutdown began while the activity runs
			return "finished", ctx.Err()
		})
		h.orchestration("Waits", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Slow", "").Await()
		})
		rt, err := Start(h.ctx, watch, h.registry, fastOptions(t))
		require.NoError(t, err)
		h.start("graceful", "Waits", "")
		awaitSignal(t, started, "the activity to start")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, rt.Shutdown(ctx))

		// The result was committed: a new runtime only has to finish the turn.
		h.registry = NewRegistry()
		h.orchestration("Waits", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Slow", "").Await()
		})
		h.run()
		assert.Equal(t, "finished", h.completed("graceful"))
	})
}

// fetchStopWatch tells when a runtime stops fetching, the first thing its
// shutdown does: the context of its worker fetches ends.
type fetchStopWatch struct {
	cdb.Provider
	once    sync.Once
	stopped chan struct{}
}

func (p *fetchStopWatch) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	p.once.Do(func() { context.AfterFunc(ctx, func() { close(p.stopped) }) })
	return p.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
}

// TestShutdownTimeoutAbandonsActivity: when shutdown runs out of time the
// activity's context is cancelled, its item abandoned, and another runtime
// runs it again.
func TestShutdownTimeoutAbandonsActivity(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		started := make(chan struct{})
		h.activity("Block", func(ctx ActivityContext, _ string) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		})
		h.orchestration("Blocked", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Block", "").Await()
		})
		rt, err := Start(h.ctx, h.provider, h.registry, fastOptions(t))
		require.NoError(t, err)
		h.start("hard-stop", "Blocked", "")
		awaitSignal(t, started, "the activity to start")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err = rt.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		h.registry = NewRegistry()
		h.activity("Block", func(ActivityContext, string) (string, error) { return "second try", nil })
		h.orchestration("Blocked", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Block", "").Await()
		})
		h.run()
		assert.Equal(t, "second try", h.completed("hard-stop"), "the abandoned activity ran again, not failed")
	})
}

// fastPoison keeps duroxide's handling of work without a handler (backoff
// until poison), with two attempts.
func fastPoison(o *Options) {
	o.Unregistered = UnregisteredBackoffUntilPoison
	o.MaxAttempts = 2
	o.UnregisteredBackoffBase = 5 * time.Millisecond
	o.UnregisteredBackoffMax = 20 * time.Millisecond
}

// TestUnregisteredActivityIsPoisoned: an activity nobody registered is
// retried with backoff, then failed as poison, which fails its
// orchestration.
func TestUnregisteredActivityIsPoisoned(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("CallsMissing", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Missing", "in").Await()
		})
		h.run(fastPoison)
		h.start("poison-activity", "CallsMissing", "")
		st := h.wait("poison-activity")
		require.Equal(t, StateFailed, st.State)
		poison, ok := st.Error.(cdb.PoisonError)
		require.True(t, ok, "got %#v", st.Error)
		assert.Equal(t, uint32(3), poison.AttemptCount)
		assert.Equal(t, uint32(2), poison.MaxAttempts)
		assert.Equal(t, cdb.PoisonActivity{Instance: "poison-activity", ExecutionID: 1, ActivityName: "Missing", ActivityID: 2}, poison.MessageType)
	})
}

// TestUnregisteredOrchestrationIsPoisoned: a start for an unknown
// orchestration is retried with backoff, then the instance fails as poison.
func TestUnregisteredOrchestrationIsPoisoned(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.run(fastPoison)
		h.start("poison-orch", "Nobody", "in")
		st := h.wait("poison-orch")
		require.Equal(t, StateFailed, st.State)
		poison, ok := st.Error.(cdb.PoisonError)
		require.True(t, ok, "got %#v", st.Error)
		assert.Equal(t, cdb.PoisonOrchestration{Instance: "poison-orch", ExecutionID: 1}, poison.MessageType)
		assert.Contains(t, poison.Message, "StartOrchestration")
	})
}

// TestActivityLockIsRenewed: an activity running for several lock
// timeouts keeps its lock and completes uncancelled.
func TestActivityLockIsRenewed(t *testing.T) {
	// A lock of 2 s is renewed every second: a renewal may be up to 1 s
	// late on a loaded machine before the lock lapses (a 300 ms lock
	// renewed every 150 ms left 150 ms). The activity outlasts two such
	// locks, so it completes unshared only if the renewals work.
	const lock = 2 * time.Second
	eachProvider(t, func(t *testing.T, h *harness) {
		var runs, cancelled atomic.Int32
		h.activity("Long", func(ctx ActivityContext, _ string) (string, error) {
			runs.Add(1)
			select {
			case <-ctx.Done():
				cancelled.Add(1)
				return "", ctx.Err()
			case <-time.After(2*lock + lock/4):
				return "kept", nil
			}
		})
		h.orchestration("Renews", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.ScheduleActivity("Long", "").Await()
		})
		h.run(func(o *Options) { o.WorkerLockTimeout = lock })
		h.start("renewed", "Renews", "")
		assert.Equal(t, "kept", h.completed("renewed"))
		assert.Equal(t, int32(1), runs.Load(), "no other worker took the activity over")
		assert.Zero(t, cancelled.Load())
	})
}

// TestNondeterministicCodeFailsInstance: with FailOnNondeterminism, code
// changed under a running instance fails it with a nondeterminism
// configuration error (the default parks it:
// TestAChangedOrchestrationParksAndRollingBackHealsIt).
func TestNondeterministicCodeFailsInstance(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		var changed atomic.Bool
		h.activity("A", func(ActivityContext, string) (string, error) { return "a", nil })
		h.activity("B", func(ActivityContext, string) (string, error) { return "b", nil })
		h.orchestration("Drifts", func(ctx *OrchestrationContext, _ string) (string, error) {
			name := "A"
			if changed.Load() {
				name = "B"
			}
			if _, err := ctx.ScheduleActivity(name, "").Await(); err != nil {
				return "", err
			}
			return ctx.WaitForEvent("go").Await()
		})
		h.run(func(o *Options) { o.NondeterminismPolicy = FailOnNondeterminism })
		h.start("drift", "Drifts", "")
		h.waitForHistory("drift", hasEvent[cdb.ExternalSubscribed])
		changed.Store(true)
		require.NoError(t, h.client.RaiseEvent(h.ctx, "drift", "go", ""))
		st := h.wait("drift")
		require.Equal(t, StateFailed, st.State)
		cfg, ok := st.Error.(cdb.ConfigurationError)
		require.True(t, ok, "got %#v", st.Error)
		assert.Equal(t, cdb.ConfigNondeterminism, cfg.Kind)
	})
}

// TestCustomStatusVisibleToClient: custom status set by the orchestration
// reaches GetStatus and WaitForStatusChange.
func TestCustomStatusVisibleToClient(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Reports", func(ctx *OrchestrationContext, _ string) (string, error) {
			status := "step 1"
			ctx.SetCustomStatus(&status)
			if _, err := ctx.WaitForEvent("next").Await(); err != nil {
				return "", err
			}
			ctx.SetCustomStatus(nil)
			return "done", nil
		})
		h.run()
		h.start("reports", "Reports", "")
		st, err := h.client.WaitForStatusChange(h.ctx, "reports", 0, time.Minute)
		require.NoError(t, err)
		require.NotNil(t, st.CustomStatus)
		assert.Equal(t, "step 1", *st.CustomStatus)
		assert.Equal(t, uint64(1), st.CustomStatusVersion)
		assert.Equal(t, StateRunning, st.State)

		h.waitForHistory("reports", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "reports", "next", ""))
		assert.Equal(t, "done", h.completed("reports"))
		st, err = h.client.GetStatus(h.ctx, "reports")
		require.NoError(t, err)
		assert.Nil(t, st.CustomStatus)
		assert.Equal(t, uint64(2), st.CustomStatusVersion)
	})
}

func TestClientWaitTimesOut(t *testing.T) {
	c := NewClient(testProviders[0].new(t))
	_, err := c.WaitForCompletion(context.Background(), "nobody", 30*time.Millisecond)
	assert.ErrorIs(t, err, ErrTimeout)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.WaitForCompletion(ctx, "nobody", time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestStartRejectsBadInput(t *testing.T) {
	p := testProviders[0].new(t)
	_, err := Start(context.Background(), nil, NewRegistry(), Options{})
	assert.ErrorIs(t, err, ErrInvalidInput)
	_, err = Start(context.Background(), p, NewRegistry(), Options{SessionIdleTimeout: time.Second})
	assert.ErrorContains(t, err, "SessionIdleTimeout")

	c := NewClient(p)
	assert.ErrorIs(t, c.StartOrchestration(context.Background(), "", "X", ""), ErrInvalidInput)
	assert.ErrorIs(t, c.StartOrchestration(context.Background(), "i", "X", "", WithVersion("not-semver")), cdb.ErrInvalidSemanticVersion)
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	assert.Equal(t, 2, o.OrchestrationConcurrency)
	assert.Equal(t, 2, o.WorkerConcurrency)
	assert.Equal(t, 100*time.Millisecond, o.MinPollInterval)
	assert.Equal(t, 30*time.Second, o.LongPollTimeout)
	assert.Equal(t, 5*time.Second, o.OrchestratorLockTimeout)
	assert.Equal(t, 30*time.Second, o.WorkerLockTimeout)
	assert.Equal(t, uint32(10), o.MaxAttempts)
	assert.Equal(t, 10*time.Second, o.ActivityCancellationGrace)
	assert.Equal(t, 30*time.Second, o.SessionLockTimeout)
	assert.Equal(t, 5*time.Minute, o.SessionIdleTimeout)
	assert.Equal(t, 5*time.Minute, o.SessionCleanupInterval)
	assert.Equal(t, 10, o.MaxSessionsPerRuntime)
	assert.Equal(t, cdb.TagFilterDefaultOnly, o.WorkerTagFilter.Mode())
	assert.Equal(t, cdb.SemverRange{Max: cdb.NewSemanticVersion(0, 1, 32)}, o.replayRange())
	require.NoError(t, o.validate())
}

func TestRenewalInterval(t *testing.T) {
	assert.Equal(t, 25*time.Second, renewalInterval(30*time.Second, 5*time.Second), "long locks: timeout - buffer")
	assert.Equal(t, 13*time.Second, renewalInterval(15*time.Second, 2*time.Second))
	assert.Equal(t, 3*time.Second, renewalInterval(5*time.Second, 2*time.Second), "short locks: ceil(timeout/2) seconds")
	assert.Equal(t, 500*time.Millisecond, renewalInterval(time.Second, 2*time.Second), "test locks: half, exactly")
	assert.Equal(t, 2*time.Second, renewalInterval(3*time.Second, time.Second), "from three seconds: whole seconds")
	assert.Equal(t, 1050*time.Millisecond, renewalInterval(2100*time.Millisecond, time.Second),
		"under three seconds: half, exactly (rounded up, 2 s would leave 0.1 s)")
	assert.Equal(t, 10*time.Millisecond, renewalInterval(0, time.Second), "a lock with nothing left: at once, nearly")
}

func TestUnregisteredBackoff(t *testing.T) {
	o := Options{}.withDefaults()
	assert.Equal(t, time.Second, o.unregisteredBackoff(1))
	assert.Equal(t, 4*time.Second, o.unregisteredBackoff(3))
	assert.Equal(t, 60*time.Second, o.unregisteredBackoff(7), "2^6 s capped at 60 s")
	assert.Equal(t, 60*time.Second, o.unregisteredBackoff(100))
}

func TestFetchBackoff(t *testing.T) {
	var n uint32
	assert.Equal(t, 200*time.Millisecond, fetchBackoff(cdb.Retryable("fetch", "busy"), &n))
	assert.Equal(t, 400*time.Millisecond, fetchBackoff(cdb.Retryable("fetch", "busy"), &n))
	for range 10 {
		fetchBackoff(errors.New("unknown errors are retryable"), &n)
	}
	assert.Equal(t, 3*time.Second, fetchBackoff(cdb.Retryable("fetch", "busy"), &n))
	assert.Equal(t, 100*time.Millisecond, fetchBackoff(cdb.Permanent("fetch", "bad"), &n))
	assert.Zero(t, n, "a permanent error resets the count")

	// A permanent status the store answered may pass (a 401 while a token
	// refreshes): it backs off like a retryable error, not every 100 ms.
	unauthorized := cdb.ToProviderError("FetchWorkItem", &cdb.CosmosError{Operation: "Query", StatusCode: 401})
	assert.Equal(t, 200*time.Millisecond, fetchBackoff(unauthorized, &n))
	assert.Equal(t, 400*time.Millisecond, fetchBackoff(unauthorized, &n))
}

// TestChildContinueAsNewStillReportsToParent: a child that continues as
// new keeps its parent link, on every provider and target (the message
// carries it; continue_as_new_parent_test.go checks the message itself and
// the messages of 0.1.29, which carry none).
func TestChildContinueAsNewStillReportsToParent(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		assert.Equal(t, "counted +++", runCountingChild(t, h))
		executions, err := h.client.ListExecutions(h.ctx, "counter-child")
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2, 3, 4}, executions)
	})
}

// TestAutoChildIDsAreUniqueAcrossExecutions: each execution of a
// continue-as-new loop gets its own generated child ids (event ids restart
// at 1, so execution 1's "sub::2" would otherwise name a finished child).
func TestAutoChildIDsAreUniqueAcrossExecutions(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Child", func(_ *OrchestrationContext, input string) (string, error) { return "child:" + input, nil })
		h.orchestration("Loop", func(ctx *OrchestrationContext, input string) (string, error) {
			out, err := ctx.ScheduleSubOrchestration("Child", input).Await()
			if err != nil || len(input) >= 3 {
				return out, err
			}
			return ctx.ContinueAsNew(input + "x")
		})
		h.run()
		h.start("loop", "Loop", "x")
		assert.Equal(t, "child:xxx", h.completed("loop"))
		tree, err := h.client.GetInstanceTree(h.ctx, "loop")
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"loop", "loop::sub::2", "loop::sub::2_2", "loop::sub::3_2"}, tree.AllIDs)
	})
}

// awaitSignal waits for ch, failing the test instead of hanging when what
// it waits for never happens.
func awaitSignal[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out after 30s waiting for %s", what)
	}
}
