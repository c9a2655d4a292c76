package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A child's start names the parent execution that scheduled it (duroxide
// 0.1.30's parent_execution_id), the child's OrchestrationStarted keeps
// it, and the child's result goes to that execution. A start written by
// 0.1.29 names none: the execution is recovered as before (the child id,
// else the provider's latest execution).

func TestChildStartNamesTheSchedulingExecution(t *testing.T) {
	for _, execution := range []uint64{1, 3} {
		out := turnOnExecution(t, twoChildren, execution, DuroxideVersion, nil)
		var starts []cdb.StartOrchestrationMessage
		for _, item := range out.orchestratorItems {
			if s, ok := item.(cdb.StartOrchestrationMessage); ok {
				starts = append(starts, s)
			}
		}
		require.Len(t, starts, 1, "execution %d", execution)
		assert.Equal(t, ptr("inst"), starts[0].ParentInstance)
		assert.Equal(t, ptr(uint64(2)), starts[0].ParentID)
		assert.Equal(t, ptr(execution), starts[0].ParentExecutionID, "execution %d", execution)
	}
}

func TestChildReportsToTheExecutionItsStartNamed(t *testing.T) {
	echo := func(_ *OrchestrationContext, input string) (string, error) { return "out:" + input, nil }
	fail := func(*OrchestrationContext, string) (string, error) { return "", assert.AnError }
	for _, tc := range []struct {
		name            string
		parentExecution *uint64
		want            uint64 // testEnv recovers execution 1
	}{
		{"named", ptr(uint64(3)), 3},
		{"written by 0.1.29", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := childStart("parent", tc.parentExecution)
			done := turnOn(t, echo, nil, start)
			require.Equal(t, turnCompleted, done.result.kind)
			assert.Equal(t, tc.parentExecution, done.delta[0].Kind.(cdb.OrchestrationStarted).ParentExecutionID)
			assert.Equal(t, []cdb.WorkItem{cdb.SubOrchestrationCompletedMessage{ParentInstance: "parent", ParentExecutionID: tc.want, ParentID: 7, Result: "out:first"}},
				done.orchestratorItems)

			failed := turnOn(t, fail, nil, start)
			require.Len(t, failed.orchestratorItems, 1)
			assert.Equal(t, tc.want, failed.orchestratorItems[0].(cdb.SubOrchestrationFailedMessage).ParentExecutionID)
		})
	}
}

// A child that outlives the parent execution that scheduled it reports to
// that execution, which is over: the parent's next execution never sees
// the result. Before, an explicit child's result went to the parent's
// latest execution, where it completed a schedule that did not exist
// there, and failed the parent as nondeterministic.
func TestLateChildResultGoesToTheExecutionThatScheduledIt(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, pc.new(t))
			h.orchestration("Child", func(ctx *OrchestrationContext, _ string) (string, error) {
				return ctx.WaitForEvent("ChildGo").Await()
			})
			h.orchestration("Parent", func(ctx *OrchestrationContext, input string) (string, error) {
				if input == "first" {
					ctx.ScheduleSubOrchestration("Child", "x", WithInstanceID("late-child")) // never awaited
					if err := ctx.ScheduleTimer(10 * time.Millisecond).wait(); err != nil {
						return "", err
					}
					return ctx.ContinueAsNew("second")
				}
				return ctx.WaitForEvent("Release").Await()
			})
			h.run()
			h.start("late-parent", "Parent", "first")
			h.waitForHistory("late-parent", func(history []cdb.Event) bool {
				return len(history) > 0 && history[0].ExecutionID == 2 && hasEvent[cdb.ExternalSubscribed](history)
			})
			childHistory := h.waitForHistory("late-child", hasEvent[cdb.ExternalSubscribed])
			assert.Equal(t, ptr(uint64(1)), childHistory[0].Kind.(cdb.OrchestrationStarted).ParentExecutionID)

			require.NoError(t, h.client.RaiseEvent(context.Background(), "late-child", "ChildGo", "late"))
			assert.Equal(t, "late", h.completed("late-child"))
			require.NoError(t, h.client.RaiseEvent(context.Background(), "late-parent", "Release", "released"))
			assert.Equal(t, "released", h.completed("late-parent"))
		})
	}
}
