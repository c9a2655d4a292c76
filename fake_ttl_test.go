package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// The provider's expiring documents expire on the fake account's clock: a
// start enqueued from outside a commit leaves a consumed marker with a ttl
// when its turn consumes it, and the marker is gone once the clock passes
// its _ts + ttl.
func TestFakeAccountExpiresTheProvidersConsumedMarkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()

	providertest.CreateInstance(ctx, t, p, "i")
	require.Equal(t, 1, countDocs(t, p, "i", "consumed"), "the consumed start's marker")

	clock.Advance(9 * time.Minute)
	require.Equal(t, 1, countDocs(t, p, "i", "consumed"), "still within its ttl")
	clock.Advance(time.Minute)
	require.Equal(t, 0, countDocs(t, p, "i", "consumed"), "expired")
	require.Equal(t, 1, countDocs(t, p, "i", "inst"), "what has no ttl stays")
}
