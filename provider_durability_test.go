package cdb_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Durability regressions of the orchestrator queue (issue 8): each test
// reproduces what a user saw lose, repeat or stall work.

// startedWithInput is the OrchestrationStarted event of a TestOrch instance
// with this input, so two lives of one id can be told apart.
func startedWithInput(instance, input string) cdb.Event {
	e := providertest.StartedEvent(instance, cdb.InitialExecutionID)
	started := e.Kind.(cdb.OrchestrationStarted)
	started.Input = input
	e.Kind = started
	return e
}

// Process A holds instance x's history from its own ack; process B deletes
// x, starts it again and commits its first turn. A's next fetch must hand
// the runtime the live instance's history, not the deleted one's.
func TestHistoryCacheIsNotFooledByIDReuse(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	a := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	b := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	const x = "reused"

	require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem(x), 0))
	item, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, []cdb.Event{startedWithInput(x, `"first life"`)}, nil, nil, providertest.TestOrchMetadata(), nil))

	_, err = b.DeleteInstance(ctx, x, true)
	require.NoError(t, err)
	require.NoError(t, b.EnqueueForOrchestrator(ctx, providertest.StartItem(x), 0))
	item, token, _, err = b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Empty(t, item.History, "a restarted id starts with an empty history")
	require.NoError(t, b.AckOrchestrationItem(ctx, token, 1, []cdb.Event{startedWithInput(x, `"second life"`)}, nil, nil, providertest.TestOrchMetadata(), nil))

	require.NoError(t, b.EnqueueForOrchestrator(ctx, pokeItem(x), 0))
	item, _, _, err = a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Len(t, item.History, 1)
	require.Equal(t, `"second life"`, item.History[0].Kind.(cdb.OrchestrationStarted).Input,
		"process A served the deleted instance's history from its cache")
}
