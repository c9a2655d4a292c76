package durable

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's end-to-end samples (its tests/e2e_samples.rs), each on every
// test provider.

// hello_world: one activity, called twice.
func TestSampleHelloWorld(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Hello", func(_ ActivityContext, input string) (string, error) {
			return "Hello, " + input + "!", nil
		})
		h.orchestration("HelloWorld", func(ctx *OrchestrationContext, input string) (string, error) {
			if _, err := ctx.ScheduleActivity("Hello", "Rust").Await(); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Hello", input).Await()
		})
		h.run()
		h.start("inst-sample-hello-1", "HelloWorld", "World")
		assert.Equal(t, "Hello, World!", h.completed("inst-sample-hello-1"))
	})
}

// basic_control_flow: branch on an activity's result.
func TestSampleBasicControlFlow(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("GetFlag", func(ActivityContext, string) (string, error) { return "yes", nil })
		h.activity("SayYes", func(ActivityContext, string) (string, error) { return "picked_yes", nil })
		h.activity("SayNo", func(ActivityContext, string) (string, error) { return "picked_no", nil })
		h.orchestration("ControlFlow", func(ctx *OrchestrationContext, _ string) (string, error) {
			flag, err := ctx.ScheduleActivity("GetFlag", "").Await()
			if err != nil {
				return "", err
			}
			if flag == "yes" {
				return ctx.ScheduleActivity("SayYes", "").Await()
			}
			return ctx.ScheduleActivity("SayNo", "").Await()
		})
		h.run()
		h.start("inst-sample-cflow-1", "ControlFlow", "")
		assert.Equal(t, "picked_yes", h.completed("inst-sample-cflow-1"))
	})
}

// loop: an activity in a loop accumulates a value.
func TestSampleLoop(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Append", func(_ ActivityContext, input string) (string, error) { return input + "x", nil })
		h.orchestration("LoopOrchestration", func(ctx *OrchestrationContext, _ string) (string, error) {
			acc := "start"
			for range 3 {
				var err error
				if acc, err = ctx.ScheduleActivity("Append", acc).Await(); err != nil {
					return "", err
				}
			}
			return acc, nil
		})
		h.run()
		h.start("inst-sample-loop-1", "LoopOrchestration", "")
		assert.Equal(t, "startxxx", h.completed("inst-sample-loop-1"))
	})
}

// error_handling: a failed activity is caught and compensated.
func TestSampleErrorHandling(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Fragile", func(_ ActivityContext, input string) (string, error) {
			if input == "bad" {
				return "", errors.New("boom")
			}
			return "ok", nil
		})
		h.activity("Recover", func(ActivityContext, string) (string, error) { return "recovered", nil })
		var seen atomic.Value
		h.orchestration("ErrorHandling", func(ctx *OrchestrationContext, _ string) (string, error) {
			v, err := ctx.ScheduleActivity("Fragile", "bad").Await()
			if err == nil {
				return v, nil
			}
			seen.Store(err.Error())
			return ctx.ScheduleActivity("Recover", "").Await()
		})
		h.run()
		h.start("inst-sample-err-1", "ErrorHandling", "")
		assert.Equal(t, "recovered", h.completed("inst-sample-err-1"))
		assert.Equal(t, "boom", seen.Load(), "the orchestration sees the activity's error")

		history := h.waitForHistory("inst-sample-err-1", func([]cdb.Event) bool { return true })
		failures := eventsOf[cdb.ActivityFailed](history)
		require.Len(t, failures, 1)
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "boom"}, failures[0].Details)
	})
}

// timeout_with_timer_race: a long activity races a short timer; the timer
// wins and the loser is cancelled by lock stealing.
func TestSampleTimeoutWithTimerRace(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		cancelled := make(chan struct{})
		h.activity("LongOp", func(ctx ActivityContext, _ string) (string, error) {
			select {
			case <-ctx.Done():
				close(cancelled)
				return "", ctx.Err()
			case <-time.After(5 * time.Second):
				return "done", nil
			}
		})
		h.orchestration("TimeoutSample", func(ctx *OrchestrationContext, _ string) (string, error) {
			act := ctx.ScheduleActivity("LongOp", "")
			timer := ctx.ScheduleTimer(100 * time.Millisecond)
			if ctx.Select(act, timer) == 1 {
				return "", errors.New("timeout")
			}
			return act.Await()
		})
		h.run()
		h.start("inst-timeout-sample", "TimeoutSample", "")
		st := h.wait("inst-timeout-sample")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, "timeout", st.Error.DisplayMessage())

		history := h.waitForHistory("inst-timeout-sample", func([]cdb.Event) bool { return true })
		assert.Equal(t, []cdb.ActivityCancelRequested{{Reason: "dropped_future"}}, eventsOf[cdb.ActivityCancelRequested](history))
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the losing activity was not cancelled")
		}
	})
}

// select2_activity_vs_external: an activity races an external event; the
// winner's index decides the branch. duroxide's activity sleeps 300 ms so
// that the event, raised as soon as the orchestration waits for it, wins;
// on a loaded machine the sleep could end first. Here the activity cannot
// finish before the orchestration has completed, so the event always wins,
// as the sample means it to.
func TestSampleSelect2ActivityVsExternal(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		orchestrationDone := make(chan struct{})
		h.activity("Sleep", func(ctx ActivityContext, _ string) (string, error) {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-orchestrationDone:
				return "slept", nil
			}
		})
		h.orchestration("Select2ActVsEvt", func(ctx *OrchestrationContext, _ string) (string, error) {
			act := ctx.ScheduleActivity("Sleep", "")
			evt := ctx.WaitForEvent("Go")
			if ctx.Select(act, evt) == 0 {
				out, err := act.Await()
				return "activity:" + out, err
			}
			payload, err := evt.Await()
			return "event:" + payload, err
		})
		h.run()
		h.start("inst-s2-mixed", "Select2ActVsEvt", "")
		// Raise only once the subscription is recorded, as duroxide's
		// sample does (it would not deliver an earlier event).
		h.waitForHistory("inst-s2-mixed", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "inst-s2-mixed", "Go", "ok"))
		assert.Equal(t, "event:ok", h.completed("inst-s2-mixed"))
		close(orchestrationDone)
	})
}

// dtf_legacy_gabbar_greetings: fan-out/fan-in with Join.
func TestSampleGabbarGreetings(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Greetings", func(_ ActivityContext, input string) (string, error) {
			return "Hello, " + input + "!", nil
		})
		h.orchestration("Greetings", func(ctx *OrchestrationContext, _ string) (string, error) {
			results := ctx.Join(ctx.ScheduleActivity("Greetings", "Gabbar"), ctx.ScheduleActivity("Greetings", "Samba"))
			vals := make([]string, len(results))
			for i, r := range results {
				if r.Err != nil {
					return "", r.Err
				}
				vals[i] = r.Value
			}
			return strings.Join(vals, ", "), nil
		})
		h.run()
		h.start("inst-dtf-greetings", "Greetings", "")
		assert.Equal(t, "Hello, Gabbar!, Hello, Samba!", h.completed("inst-dtf-greetings"))
	})
}

// system_activities: UtcNow and NewGUID are system activities recorded in
// history.
func TestSampleSystemActivities(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("SystemActivities", func(ctx *OrchestrationContext, _ string) (string, error) {
			now, err := ctx.UtcNow()
			if err != nil {
				return "", err
			}
			guid, err := ctx.NewGUID()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("n=%d,g=%s", now.UnixMilli(), guid), nil
		})
		h.run()
		before := time.Now().UnixMilli()
		h.start("inst-system-acts", "SystemActivities", "")
		out := h.completed("inst-system-acts")

		m := regexp.MustCompile(`^n=(\d+),g=([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$`).FindStringSubmatch(out)
		require.NotNil(t, m, "output %q", out)
		now, _ := strconv.ParseInt(m[1], 10, 64)
		assert.GreaterOrEqual(t, now, before)

		history := h.waitForHistory("inst-system-acts", func([]cdb.Event) bool { return true })
		var names []string
		for _, s := range eventsOf[cdb.ActivityScheduled](history) {
			names = append(names, s.Name)
		}
		assert.Equal(t, []string{sysUtcNowMs, sysNewGUID}, names)
	})
}

// status_polling: the client polls the status until the instance completes.
func TestSampleStatusPolling(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("StatusSample", func(ctx *OrchestrationContext, _ string) (string, error) {
			if _, err := ctx.ScheduleTimer(20 * time.Millisecond).Await(); err != nil {
				return "", err
			}
			return "done", nil
		})
		h.run()
		st, err := h.client.GetStatus(h.ctx, "inst-status-sample")
		require.NoError(t, err)
		assert.Equal(t, StateNotFound, st.State)

		h.start("inst-status-sample", "StatusSample", "")
		var seen []State
		require.NoError(t, poll(h.ctx, 15*time.Second, func() (bool, error) {
			st, err := h.client.GetStatus(h.ctx, "inst-status-sample")
			if len(seen) == 0 || seen[len(seen)-1] != st.State {
				seen = append(seen, st.State)
			}
			return st.IsTerminal(), err
		}))
		assert.Equal(t, StateCompleted, seen[len(seen)-1])
		for _, s := range seen {
			assert.Contains(t, []State{StateNotFound, StateQueued, StateRunning, StateCompleted}, s)
		}
		assert.Equal(t, "done", h.completed("inst-status-sample"))
	})
}

// sub_orchestration_basic: a parent awaits a child that runs an activity.
func TestSampleSubOrchestrationBasic(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Upper", func(_ ActivityContext, input string) (string, error) { return strings.ToUpper(input), nil })
		h.orchestration("ChildUpper", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleActivity("Upper", input).Await()
		})
		h.orchestration("Parent", func(ctx *OrchestrationContext, input string) (string, error) {
			r, err := ctx.ScheduleSubOrchestration("ChildUpper", input).Await()
			return "parent:" + r, err
		})
		h.run()
		h.start("inst-sub-basic", "Parent", "hi")
		assert.Equal(t, "parent:HI", h.completed("inst-sub-basic"))

		child := "inst-sub-basic::sub::2"
		assert.Equal(t, "HI", h.completed(child))
		parent, err := h.client.GetInstanceInfo(h.ctx, child)
		require.NoError(t, err)
		assert.Equal(t, "inst-sub-basic", *parent.ParentInstanceID)
	})
}

// sub_orchestration_continue_as_new (added after 0.1.29, with 0.1.30's fix
// of a child losing its parent link when it continues as new): the parent
// awaits a child across the child's four executions.
func TestSampleSubOrchestrationContinueAsNew(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("LoopChild", func(ctx *OrchestrationContext, input string) (string, error) {
			n, _ := strconv.Atoi(input)
			if n < 3 {
				return ctx.ContinueAsNew(strconv.Itoa(n + 1))
			}
			return fmt.Sprintf("child-final:%d", n), nil
		})
		h.orchestration("ParentCan", func(ctx *OrchestrationContext, input string) (string, error) {
			r, err := ctx.ScheduleSubOrchestration("LoopChild", input).Await()
			return "parent:" + r, err
		})
		h.run()
		h.start("inst-sub-can", "ParentCan", "0")
		assert.Equal(t, "parent:child-final:3", h.completed("inst-sub-can"))

		// The completion reached the parent only because the last execution
		// still knew it; the child's own record says so too.
		child := "inst-sub-can::sub::2"
		assert.Equal(t, "child-final:3", h.completed(child))
		executions, err := h.client.ListExecutions(h.ctx, child)
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2, 3, 4}, executions)
		info, err := h.client.GetInstanceInfo(h.ctx, child)
		require.NoError(t, err)
		require.NotNil(t, info.ParentInstanceID)
		assert.Equal(t, "inst-sub-can", *info.ParentInstanceID)
	})
}

// sub_orchestration_fanout: two children in parallel, joined.
func TestSampleSubOrchestrationFanout(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Add", func(_ ActivityContext, input string) (string, error) {
			a, b, _ := strings.Cut(input, ",")
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			return strconv.Itoa(x + y), nil
		})
		h.orchestration("ChildSum", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleActivity("Add", input).Await()
		})
		h.orchestration("ParentFan", func(ctx *OrchestrationContext, _ string) (string, error) {
			total := 0
			for _, r := range ctx.Join(ctx.ScheduleSubOrchestration("ChildSum", "1,2"), ctx.ScheduleSubOrchestration("ChildSum", "3,4")) {
				if r.Err != nil {
					return "", r.Err
				}
				n, _ := strconv.Atoi(r.Value)
				total += n
			}
			return fmt.Sprintf("total=%d", total), nil
		})
		h.run()
		h.start("inst-sub-fan", "ParentFan", "")
		assert.Equal(t, "total=10", h.completed("inst-sub-fan"))
		children, err := h.client.GetInstanceTree(h.ctx, "inst-sub-fan")
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"inst-sub-fan", "inst-sub-fan::sub::2", "inst-sub-fan::sub::3"}, children.AllIDs)
	})
}

// sub_orchestration_chained: root → mid → leaf.
func TestSampleSubOrchestrationChained(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("AppendX", func(_ ActivityContext, input string) (string, error) { return input + "x", nil })
		h.orchestration("Leaf", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleActivity("AppendX", input).Await()
		})
		h.orchestration("Mid", func(ctx *OrchestrationContext, input string) (string, error) {
			r, err := ctx.ScheduleSubOrchestration("Leaf", input).Await()
			return r + "-mid", err
		})
		h.orchestration("Root", func(ctx *OrchestrationContext, input string) (string, error) {
			r, err := ctx.ScheduleSubOrchestration("Mid", input).Await()
			return "root:" + r, err
		})
		h.run()
		h.start("inst-sub-chain", "Root", "a")
		assert.Equal(t, "root:ax-mid", h.completed("inst-sub-chain"))
	})
}

// detached_orchestration_scheduling: fire-and-forget starts of independent
// roots with explicit ids.
func TestSampleDetachedOrchestrationScheduling(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Echo", func(_ ActivityContext, input string) (string, error) { return input, nil })
		h.orchestration("Chained", func(ctx *OrchestrationContext, input string) (string, error) {
			if _, err := ctx.ScheduleTimer(5 * time.Millisecond).Await(); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Echo", input).Await()
		})
		h.orchestration("Coordinator", func(ctx *OrchestrationContext, _ string) (string, error) {
			ctx.StartOrchestration("Chained", "W1", "A")
			ctx.StartOrchestration("Chained", "W2", "B")
			return "scheduled", nil
		})
		h.run()
		h.start("CoordinatorRoot", "Coordinator", "")
		assert.Equal(t, "scheduled", h.completed("CoordinatorRoot"))
		assert.Equal(t, "A", h.completed("W1"))
		assert.Equal(t, "B", h.completed("W2"))
		for _, id := range []string{"W1", "W2"} {
			parent, err := h.client.GetInstanceInfo(h.ctx, id)
			require.NoError(t, err)
			assert.Nil(t, parent.ParentInstanceID, "%s is an independent root", id)
		}
	})
}

// continue_as_new: roll the input over executions until a condition holds.
func TestSampleContinueAsNew(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("CanSample", func(ctx *OrchestrationContext, input string) (string, error) {
			n, _ := strconv.Atoi(input)
			if n < 3 {
				return ctx.ContinueAsNew(strconv.Itoa(n + 1))
			}
			return fmt.Sprintf("final:%d", n), nil
		})
		h.run()
		h.start("inst-sample-can", "CanSample", "0")
		assert.Equal(t, "final:3", h.completed("inst-sample-can"))
		executions, err := h.client.ListExecutions(h.ctx, "inst-sample-can")
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2, 3, 4}, executions)
		first, err := h.client.ReadExecutionHistory(h.ctx, "inst-sample-can", 1)
		require.NoError(t, err)
		assert.Equal(t, []cdb.OrchestrationContinuedAsNew{{Input: "1"}}, eventsOf[cdb.OrchestrationContinuedAsNew](first))
	})
}

// cancellation_parent_cascades_to_children: cancelling the parent fails it
// with "canceled: {reason}" and cancels its child too.
func TestSampleCancellationParentCascadesToChildren(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("ChildSample", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, err := ctx.WaitForEvent("Go").Await()
			return "done", err
		})
		h.orchestration("ParentSample", func(ctx *OrchestrationContext, _ string) (string, error) {
			if _, err := ctx.ScheduleSubOrchestration("ChildSample", "seed").Await(); err != nil {
				return "", err
			}
			return "parent_done", nil
		})
		h.run()
		const parent, child = "inst-sample-cancel", "inst-sample-cancel::sub::2"
		h.start(parent, "ParentSample", "")
		h.waitForHistory(child, hasEvent[cdb.ExternalSubscribed])

		require.NoError(t, h.client.CancelInstance(h.ctx, parent, "user_request"))
		st := h.wait(parent)
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "user_request"}}, st.Error)
		assert.Equal(t, "canceled: user_request", st.Error.DisplayMessage())
		// duroxide's later form of the sample: the terminal event carries the
		// ids telemetry correlates the cancellation by.
		parentHistory, err := h.client.ReadExecutionHistory(h.ctx, parent, 1)
		require.NoError(t, err)
		failed := parentHistory[len(parentHistory)-1]
		require.IsType(t, cdb.OrchestrationFailed{}, failed.Kind)
		assert.Equal(t, parent, failed.InstanceID)
		assert.Equal(t, uint64(1), failed.ExecutionID)

		instances, err := h.client.ListInstances(h.ctx)
		require.NoError(t, err)
		assert.Contains(t, instances, child)
		childStatus := h.wait(child)
		require.Equal(t, StateFailed, childStatus.State)
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppCancelled{Reason: "parent canceled"}}, childStatus.Error)
		history := h.waitForHistory(child, hasEvent[cdb.OrchestrationCancelRequested])
		last := history[len(history)-1]
		assert.True(t, last.IsTerminal(), "the terminal event is the child's last")
	})
}

// versioning_start_latest_vs_exact: new starts run the latest version
// unless the policy or the start pins one.
func TestSampleVersioningStartLatestVsExact(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("Versioned", func(*OrchestrationContext, string) (string, error) { return "v1", nil })
		require.NoError(t, h.registry.RegisterOrchestrationVersion("Versioned", "2.0.0",
			func(*OrchestrationContext, string) (string, error) { return "v2", nil }))
		h.run()
		h.start("inst-vers-latest", "Versioned", "")
		assert.Equal(t, "v2", h.completed("inst-vers-latest"))

		h.start("inst-vers-start-pinned", "Versioned", "", WithVersion("1.0.0"))
		assert.Equal(t, "v1", h.completed("inst-vers-start-pinned"))

		pin, err := ExactVersion("1.0.0")
		require.NoError(t, err)
		h.registry.SetVersionPolicy("Versioned", pin)
		h.start("inst-vers-exact", "Versioned", "")
		assert.Equal(t, "v1", h.completed("inst-vers-exact"))
		info, err := h.client.GetInstanceInfo(h.ctx, "inst-vers-exact")
		require.NoError(t, err)
		assert.Equal(t, "1.0.0", info.OrchestrationVersion)
	})
}

// versioning_sub_orchestration_explicit_vs_policy: a child started with an
// explicit version runs it; without one the policy (latest) decides.
func TestSampleVersioningSubOrchestrationExplicitVsPolicy(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("Child", func(*OrchestrationContext, string) (string, error) { return "c1", nil })
		require.NoError(t, h.registry.RegisterOrchestrationVersion("Child", "2.0.0",
			func(*OrchestrationContext, string) (string, error) { return "c2", nil }))
		h.orchestration("ParentVers", func(ctx *OrchestrationContext, _ string) (string, error) {
			a, err := ctx.ScheduleSubOrchestration("Child", "exp", WithVersion("1.0.0")).Await()
			if err != nil {
				return "", err
			}
			b, err := ctx.ScheduleSubOrchestration("Child", "pol").Await()
			return a + "-" + b, err
		})
		h.run()
		h.start("inst-sub-vers", "ParentVers", "")
		assert.Equal(t, "c1-c2", h.completed("inst-sub-vers"))
	})
}

// versioning_continue_as_new_upgrade: an execution pinned to 1.0.0
// continues as new and the next execution runs the latest version.
func TestSampleVersioningContinueAsNewUpgrade(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("LongRunner", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ContinueAsNew("v1:" + input)
		})
		require.NoError(t, h.registry.RegisterOrchestrationVersion("LongRunner", "2.0.0",
			func(_ *OrchestrationContext, input string) (string, error) { return "upgraded:" + input, nil }))
		h.run()
		h.start("inst-can-upgrade", "LongRunner", "state", WithVersion("1.0.0"))
		assert.Equal(t, "upgraded:v1:state", h.completed("inst-can-upgrade"))

		executions, err := h.client.ListExecutions(h.ctx, "inst-can-upgrade")
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2}, executions)
		e1, err := h.client.ReadExecutionHistory(h.ctx, "inst-can-upgrade", 1)
		require.NoError(t, err)
		assert.True(t, hasEvent[cdb.OrchestrationContinuedAsNew](e1))
		e2, err := h.client.ReadExecutionHistory(h.ctx, "inst-can-upgrade", 2)
		require.NoError(t, err)
		start := eventsOf[cdb.OrchestrationStarted](e2)
		require.Len(t, start, 1)
		assert.Equal(t, "v1:state", start[0].Input)
		assert.Equal(t, "2.0.0", start[0].Version)
	})
}

// basic_error_handling: an activity failure propagates to the orchestration.
func TestSampleBasicErrorHandling(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ValidateInput", func(_ ActivityContext, input string) (string, error) {
			if input == "" {
				return "", errors.New("Input cannot be empty")
			}
			return "Valid: " + input, nil
		})
		h.orchestration("BasicErrorHandling", func(ctx *OrchestrationContext, input string) (string, error) {
			return ctx.ScheduleActivity("ValidateInput", input).Await()
		})
		h.run()
		h.start("inst-basic-error-1", "BasicErrorHandling", "test")
		h.start("inst-basic-error-2", "BasicErrorHandling", "")
		assert.Equal(t, "Valid: test", h.completed("inst-basic-error-1"))
		st := h.wait("inst-basic-error-2")
		require.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error.DisplayMessage(), "Input cannot be empty")
	})
}

// nested_function_error_handling: a helper returns the first error.
func TestSampleNestedFunctionErrorHandling(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ProcessData", func(_ ActivityContext, input string) (string, error) {
			if strings.Contains(input, "error") {
				return "", errors.New("Processing failed")
			}
			return "Processed: " + input, nil
		})
		h.activity("FormatOutput", func(_ ActivityContext, input string) (string, error) { return "Final: " + input, nil })
		processAndFormat := func(ctx *OrchestrationContext, data string) (string, error) {
			processed, err := ctx.ScheduleActivity("ProcessData", data).Await()
			if err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("FormatOutput", processed).Await()
		}
		h.orchestration("NestedErrorHandling", processAndFormat)
		h.run()
		h.start("inst-nested-error-1", "NestedErrorHandling", "test")
		h.start("inst-nested-error-2", "NestedErrorHandling", "error")
		assert.Equal(t, "Final: Processed: test", h.completed("inst-nested-error-1"))
		st := h.wait("inst-nested-error-2")
		require.Equal(t, StateFailed, st.State)
		assert.Contains(t, st.Error.DisplayMessage(), "Processing failed")
	})
}

// error_recovery: a failure is logged by an activity, then reported.
func TestSampleErrorRecovery(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ProcessData", func(_ ActivityContext, input string) (string, error) {
			if strings.Contains(input, "error") {
				return "", errors.New("Processing failed")
			}
			return "Processed: " + input, nil
		})
		h.activity("LogError", func(_ ActivityContext, e string) (string, error) { return "Logged: " + e, nil })
		h.orchestration("ErrorRecovery", func(ctx *OrchestrationContext, input string) (string, error) {
			result, err := ctx.ScheduleActivity("ProcessData", input).Await()
			if err == nil {
				return result, nil
			}
			if _, logErr := ctx.ScheduleActivity("LogError", err.Error()).Await(); logErr != nil {
				return "", logErr
			}
			return "", fmt.Errorf("Failed to process '%s': %w", input, err)
		})
		h.run()
		h.start("inst-recovery-1", "ErrorRecovery", "test")
		h.start("inst-recovery-2", "ErrorRecovery", "error")
		assert.Equal(t, "Processed: test", h.completed("inst-recovery-1"))
		st := h.wait("inst-recovery-2")
		require.Equal(t, StateFailed, st.State)
		assert.Equal(t, "Failed to process 'error': Processing failed", st.Error.DisplayMessage())
	})
}
