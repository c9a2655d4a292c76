package durable

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Generated child ids after a continue-as-new: duroxide 0.1.30 writes
// "{parent}::sub::{execution}_{event}", this runtime's 0.1.29 wrote
// "{parent}::sub::{execution}.{event}". The execution's recorded start
// stamp chooses the form, so an execution keeps the one it began with.

// stampedStart is execution's OrchestrationStarted as a runtime of stamp
// wrote it.
func stampedStart(executionID uint64, stamp string) cdb.Event {
	e := newEvent(testInstance, executionID, cdb.InitialEventID, nil, 0,
		cdb.OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: "in"})
	e.DuroxideVersion = stamp
	return e
}

// turnOnExecution runs one turn of fn on execution executionID, whose
// persisted history begins with a start stamped by stamp.
func turnOnExecution(t *testing.T, fn OrchestrationFunc, executionID uint64, stamp string, rest []cdb.Event, messages ...cdb.WorkItem) turn {
	t.Helper()
	env := testEnv()
	persisted := append([]cdb.Event{stampedStart(executionID, stamp)}, rest...)
	for i := range rest {
		persisted[i+1].ExecutionID = executionID
	}
	b := readBatch(testInstance, messages, readHistory(persisted), env.log)
	out, err := runTurn(context.Background(), turnPlan{
		instance: testInstance, executionID: executionID, name: "Orch", version: "1.0.0",
		fn: fn, persisted: persisted, batch: b,
	}, env)
	require.NoError(t, err)
	return out
}

// twoChildren schedules a child, and a second one once the first is done.
func twoChildren(ctx *OrchestrationContext, _ string) (string, error) {
	first, err := ctx.ScheduleSubOrchestration("Child", "a").Await()
	if err != nil {
		return "", err
	}
	second, err := ctx.ScheduleSubOrchestration("Child", "b").Await()
	return first + second, err
}

// scheduledChildren are the child ids a turn scheduled, as recorded and as
// started.
func scheduledChildren(t *testing.T, out turn) (recorded, started []string) {
	t.Helper()
	for _, k := range eventsOf[cdb.SubOrchestrationScheduled](out.delta) {
		recorded = append(recorded, k.Instance)
	}
	for _, item := range out.orchestratorItems {
		if s, ok := item.(cdb.StartOrchestrationMessage); ok {
			started = append(started, s.Instance)
		}
	}
	return recorded, started
}

func TestGeneratedChildIDsFollowTheExecutionsStamp(t *testing.T) {
	for _, tc := range []struct {
		execution uint64
		stamp     string
		want      string
	}{
		{1, "0.1.29", "sub::2"},
		{1, "0.1.32", "sub::2"}, // execution 1 keeps the plain form in both
		{2, "0.1.29", "sub::2.2"},
		{2, "0.1.30", "sub::2_2"},
		{3, "0.1.32", "sub::3_2"},
		{2, "0.1.30-rc.1", "sub::2.2"}, // a pre-release of 0.1.30 precedes it
		{2, "not-a-version", "sub::2.2"},
	} {
		out := turnOnExecution(t, twoChildren, tc.execution, tc.stamp, nil)
		recorded, started := scheduledChildren(t, out)
		assert.Equal(t, []string{tc.want}, recorded, "execution %d stamped %s", tc.execution, tc.stamp)
		assert.Equal(t, []string{testInstance + "::" + tc.want}, started, "execution %d stamped %s", tc.execution, tc.stamp)
	}
}

// A history this runtime recorded with the old form replays as recorded:
// the child keeps its id and its completion is delivered, and the children
// the execution schedules later keep the execution's form.
func TestRecordedChildIDsReplayInTheirExecutionsForm(t *testing.T) {
	for _, tc := range []struct {
		stamp, recorded, next string
	}{
		{"0.1.29", "sub::2.2", "sub::2.4"},
		{"0.1.32", "sub::2_2", "sub::2_4"},
	} {
		rest := []cdb.Event{ev(2, cdb.SubOrchestrationScheduled{Name: "Child", Instance: tc.recorded, Input: "a"})}
		done := cdb.SubOrchestrationCompletedMessage{ParentInstance: testInstance, ParentExecutionID: 2, ParentID: 2, Result: "A"}
		out := turnOnExecution(t, twoChildren, 2, tc.stamp, rest, done)

		require.Equal(t, turnContinue, out.result.kind, "stamp %s: %#v", tc.stamp, out.result.details)
		assert.Equal(t, []string{"SubOrchestrationCompleted", "SubOrchestrationScheduled"}, kinds(out.delta))
		recorded, started := scheduledChildren(t, out)
		assert.Equal(t, []string{tc.next}, recorded, "stamp %s", tc.stamp)
		assert.Equal(t, []string{testInstance + "::" + tc.next}, started, "stamp %s", tc.stamp)

		// And the completion of the second child finishes it.
		rest = append(rest, out.delta...)
		done = cdb.SubOrchestrationCompletedMessage{ParentInstance: testInstance, ParentExecutionID: 2, ParentID: 4, Result: "B"}
		last := turnOnExecution(t, twoChildren, 2, tc.stamp, rest, done)
		require.Equal(t, turnCompleted, last.result.kind, "stamp %s: %#v", tc.stamp, last.result.details)
		assert.Equal(t, "AB", last.result.output)
	}
}

func TestChildIDNamesParentExecutionInEitherForm(t *testing.T) {
	for _, c := range []struct {
		child string
		exec  uint64
		ok    bool
	}{
		{"p::sub::2", 1, true},
		{"p::sub::2.3", 2, true},
		{"p::sub::2_3", 2, true},
		{"p::sub::12_30", 12, true},
		{"p::sub::2_x", 0, false},
		{"p::sub::_3", 0, false},
		{"p::sub::2.3_4", 0, false},
		{"q::sub::2_3", 0, false}, // another parent's child
	} {
		exec, ok := executionFromChildID("p", c.child)
		assert.Equal(t, c.ok, ok, c.child)
		assert.Equal(t, c.exec, exec, c.child)
	}
}
