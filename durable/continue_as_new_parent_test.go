package durable

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// continueAsNewRecorder records the ContinueAsNew messages the runtime
// commits and, when legacy is set, commits them as duroxide 0.1.29 wrote
// them: without the parent link.
type continueAsNewRecorder struct {
	cdb.Provider
	legacy bool

	mu      sync.Mutex
	written []cdb.ContinueAsNewMessage
}

func (p *continueAsNewRecorder) AckOrchestrationItem(ctx context.Context, token string, executionID uint64, delta []cdb.Event,
	workerItems, orchItems []cdb.WorkItem, md cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	committed := make([]cdb.WorkItem, 0, len(orchItems))
	for _, item := range orchItems {
		if can, ok := item.(cdb.ContinueAsNewMessage); ok {
			p.record(can)
			if p.legacy {
				can.ParentInstance, can.ParentID, can.ParentExecutionID = nil, nil, nil
			}
			item = can
		}
		committed = append(committed, item)
	}
	return p.Provider.AckOrchestrationItem(ctx, token, executionID, delta, workerItems, committed, md, cancelled)
}

func (p *continueAsNewRecorder) record(can cdb.ContinueAsNewMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written = append(p.written, can)
}

func (p *continueAsNewRecorder) messages() []cdb.ContinueAsNewMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]cdb.ContinueAsNewMessage(nil), p.written...)
}

// runCountingChild runs a parent whose child "counter-child" continues as
// new three times, and returns the parent's output.
func runCountingChild(t *testing.T, h *harness) string {
	t.Helper()
	h.orchestration("Counter", func(ctx *OrchestrationContext, input string) (string, error) {
		if len(input) < 3 {
			return ctx.ContinueAsNew(input + "+")
		}
		return "counted " + input, nil
	})
	h.orchestration("Parent", func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleSubOrchestration("Counter", "", WithInstanceID("counter-child")).Await()
	})
	h.run()
	h.start("can-parent", "Parent", "")
	return h.completed("can-parent")
}

// childStarts returns the OrchestrationStarted of each of the child's
// executions.
func childStarts(t *testing.T, h *harness) []cdb.OrchestrationStarted {
	t.Helper()
	executions, err := h.client.ListExecutions(h.ctx, "counter-child")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4}, executions)
	var starts []cdb.OrchestrationStarted
	for _, id := range executions {
		history, err := h.client.ReadExecutionHistory(h.ctx, "counter-child", id)
		require.NoError(t, err)
		require.NotEmpty(t, history)
		started, ok := history[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok, "execution %d begins with its start", id)
		starts = append(starts, started)
	}
	return starts
}

// A child that continues as new writes its parent into the ContinueAsNew
// message (duroxide 0.1.30), with the parent execution its start named,
// its next executions start with that parent, and the last one reports to
// it.
func TestChildContinueAsNewWritesItsParentIntoTheMessage(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			p := &continueAsNewRecorder{Provider: pc.new(t)}
			h := newHarness(t, p)
			assert.Equal(t, "counted +++", runCountingChild(t, h))

			starts := childStarts(t, h)
			first := starts[0]
			require.Equal(t, ptr("can-parent"), first.ParentInstance)
			require.NotNil(t, first.ParentID)
			require.Equal(t, ptr(uint64(1)), first.ParentExecutionID)
			written := p.messages()
			require.Len(t, written, 3)
			for i, can := range written {
				assert.Equal(t, "counter-child", can.Instance)
				assert.Equal(t, first.ParentInstance, can.ParentInstance, "message %d", i)
				assert.Equal(t, first.ParentID, can.ParentID, "message %d", i)
				assert.Equal(t, ptr(uint64(1)), can.ParentExecutionID, "message %d", i)
			}
			for i, started := range starts[1:] {
				assert.Equal(t, first.ParentInstance, started.ParentInstance, "execution %d", i+2)
				assert.Equal(t, first.ParentID, started.ParentID, "execution %d", i+2)
				assert.Equal(t, first.ParentExecutionID, started.ParentExecutionID, "execution %d", i+2)
			}
		})
	}
}

// A ContinueAsNew written by duroxide 0.1.29 names no parent: the next
// execution takes it from the previous execution's start, so the child
// still reports to its parent.
func TestChildContinueAsNewWithoutParentFieldsStillReportsToParent(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			p := &continueAsNewRecorder{Provider: pc.new(t), legacy: true}
			h := newHarness(t, p)
			assert.Equal(t, "counted +++", runCountingChild(t, h))

			starts := childStarts(t, h)
			require.Equal(t, ptr("can-parent"), starts[0].ParentInstance)
			for i, started := range starts[1:] {
				assert.Equal(t, starts[0].ParentInstance, started.ParentInstance, "execution %d", i+2)
				assert.Equal(t, starts[0].ParentID, started.ParentID, "execution %d", i+2)
			}
		})
	}
}
