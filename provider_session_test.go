package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/providertest"
)

// TestValidationUnderStaleReads runs the validation suite on accounts that
// serve reads without the writer's session token from a lagging replica:
// the provider reads its own writes because its client carries the tokens.
func TestValidationUnderStaleReads(t *testing.T) {
	t.Parallel()
	providertest.Run(t, fakeFactory{ranges: 2, staleReads: true})
}

// TestStaleReadsAreObservedWithoutSessionTokens shows that the fake's
// lagging replica is real, so the suite above passes because of the tokens:
// with its client's session tokens switched off, the same provider does not
// see its own enqueue.
func TestStaleReadsAreObservedWithoutSessionTokens(t *testing.T) {
	const instance = "stale-1"
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
	defer cancel()

	t.Run("with session tokens", func(t *testing.T) {
		p := fakeFactory{ranges: 1, staleReads: true}.NewProvider(t, providertest.ProviderOptions{})
		providertest.CreateInstance(ctx, t, p, instance) // enqueue, fetch, ack
		events, err := p.Read(ctx, instance)
		require.NoError(t, err)
		require.Len(t, events, 1, "the acked turn's history reads back")
		_, err = p.(*cdb.CosmosProvider).Container().ReadItem(ctx, cdb.NewPartitionKeyString(instance), "inst", nil)
		require.NoError(t, err, "the instance document reads back")
	})

	t.Run("without session tokens", func(t *testing.T) {
		p := fakeFactory{ranges: 1, staleReads: true, configure: cdb.DisableSessionTokensForTest}.NewProvider(t, providertest.ProviderOptions{})
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
		item, _, _, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		require.NoError(t, err)
		assert.Nil(t, item, "the lagging replica has not got the start message the provider just wrote")
		_, err = p.(*cdb.CosmosProvider).Container().ReadItem(ctx, cdb.NewPartitionKeyString(instance), "inst", nil)
		assert.True(t, cdb.IsNotFound(err), "nor the instance document: %v", err)
	})
}
