package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// staleReadsFactory gives every validation test a provider on a fresh
// in-memory account whose reads, without the session token of a document's
// last write, are served by a lagging replica (R13).
type staleReadsFactory struct {
	containerHooks
	ranges int
	// configure adjusts the client before the provider uses it (the test
	// hook that stops session tokens).
	configure func(*cdb.Client)
}

func (f staleReadsFactory) NewProvider(t *testing.T, o providertest.ProviderOptions) cdb.Provider {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: f.ranges, StaleReadsWithoutSessionToken: true})
	client := acct.Client()
	if f.configure != nil {
		f.configure(client)
	}
	p, err := cdb.NewProvider(context.Background(), cdb.Config{
		Client:            client,
		ShortPolling:      !o.LongPolling,
		PollInterval:      20 * time.Millisecond,
		ReconcileInterval: 100 * time.Millisecond,
		OutboxMinAge:      50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (staleReadsFactory) LockTimeout() time.Duration        { return time.Second }
func (staleReadsFactory) ShortPollThreshold() time.Duration { return 100 * time.Millisecond }

// TestValidationUnderStaleReads runs the validation suite on accounts that
// serve reads without the writer's session token from a lagging replica:
// the provider reads its own writes because its client carries the tokens
// (R13).
func TestValidationUnderStaleReads(t *testing.T) {
	providertest.Run(t, staleReadsFactory{ranges: 2})
}

// TestStaleReadsAreObservedWithoutSessionTokens shows that the fake's
// lagging replica is real, so the suite above passes because of the tokens:
// with its client's session tokens switched off, the same provider does not
// see its own enqueue.
func TestStaleReadsAreObservedWithoutSessionTokens(t *testing.T) {
	const instance = "stale-1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("with session tokens", func(t *testing.T) {
		p := staleReadsFactory{ranges: 1}.NewProvider(t, providertest.ProviderOptions{})
		providertest.CreateInstance(ctx, t, p, instance) // enqueue, fetch, ack
		events, err := p.Read(ctx, instance)
		require.NoError(t, err)
		require.Len(t, events, 1, "the acked turn's history reads back")
		_, err = p.(*cdb.CosmosProvider).Container().ReadItem(ctx, cdb.NewPartitionKeyString(instance), "inst", nil)
		require.NoError(t, err, "the instance document reads back")
	})

	t.Run("without session tokens", func(t *testing.T) {
		p := staleReadsFactory{ranges: 1, configure: cdb.DisableSessionTokensForTest}.NewProvider(t, providertest.ProviderOptions{})
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
		item, _, _, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		require.NoError(t, err)
		assert.Nil(t, item, "the lagging replica has not got the start message the provider just wrote")
		_, err = p.(*cdb.CosmosProvider).Container().ReadItem(ctx, cdb.NewPartitionKeyString(instance), "inst", nil)
		assert.True(t, cdb.IsNotFound(err), "nor the instance document: %v", err)
	})
}
