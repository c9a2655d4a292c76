package cdb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide 0.1.30's optional parent fields reach the runtime as they were
// written: a child's start and its ContinueAsNew through the queue, the
// OrchestrationStarted through history, on fetch and on read.
func TestDuroxide030ParentFieldsAreStoredAsWritten(t *testing.T) {
	ctx := rulesContext(t)
	p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{ShortPolling: true})
	const child = "wire-parent::sub::2"
	start := cdb.StartOrchestrationMessage{
		Instance: child, Orchestration: "Child", Input: "child-input", Version: ptrTo("1.0.0"),
		ParentInstance: ptrTo("wire-parent"), ParentID: ptrTo[uint64](2), ParentExecutionID: ptrTo[uint64](3), ExecutionID: 1,
	}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assert.Equal(t, []cdb.WorkItem{start}, item.Messages)

	started := cdb.OrchestrationStarted{
		Name: "Child", Version: "1.0.0", Input: "child-input",
		ParentInstance: start.ParentInstance, ParentID: start.ParentID, ParentExecutionID: start.ParentExecutionID,
	}
	can := cdb.ContinueAsNewMessage{
		Instance: child, Orchestration: "Child", Input: "next-input", Version: ptrTo("1.0.0"),
		ParentInstance: start.ParentInstance, ParentID: start.ParentID, ParentExecutionID: start.ParentExecutionID,
		CarryForwardEvents: []cdb.CarryForwardEvent{{Name: "Evt", Data: "payload"}},
	}
	status := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			{EventID: 1, InstanceID: child, ExecutionID: 1, DuroxideVersion: "0.1.30", Kind: started},
			{EventID: 2, InstanceID: child, ExecutionID: 1, DuroxideVersion: "0.1.30", Kind: cdb.OrchestrationContinuedAsNew{Input: "next-input"}},
		},
		nil, []cdb.WorkItem{can},
		cdb.ExecutionMetadata{
			Status: &status, Output: ptrTo("next-input"), OrchestrationName: ptrTo("Child"),
			OrchestrationVersion: ptrTo("1.0.0"), ParentInstanceID: start.ParentInstance,
		}, nil))

	history, err := p.ReadWithExecution(ctx, child, 1)
	require.NoError(t, err)
	require.NotEmpty(t, history)
	assert.Equal(t, started, history[0].Kind)
	assert.Equal(t, "0.1.30", history[0].DuroxideVersion)

	next, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, next)
	assert.Equal(t, []cdb.WorkItem{can}, next.Messages)
}
