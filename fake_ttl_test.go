package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/providertest"
)

// The provider's expiring documents expire on the fake account's clock: a
// start enqueued from outside a commit leaves a consumed marker with a ttl
// when its turn consumes it, and the marker is gone once the clock passes
// its _ts + ttl.
func TestFakeAccountExpiresTheProvidersConsumedMarkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
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

// With ExpiredPurgeLag, an item that expired by its ttl reads as gone at
// once, but a create of its id conflicts until the lag has passed, as an
// account whose background purge has not reached it yet may answer.
func TestFakeAccountKeepsAnExpiredIDTakenUntilItsPurge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
	defer cancel()
	clock := newTestClock()
	client := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now, ExpiredPurgeLag: time.Minute}).Client()
	require.NoError(t, client.EnsureDatabase(ctx, "db"))
	c, err := client.NewContainer("db", "items")
	require.NoError(t, err)
	ttl := -1
	_, err = c.Ensure(ctx, cdb.ContainerProperties{ID: "items", DefaultTimeToLive: &ttl,
		PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/pk"}, Kind: "Hash", Version: 2}})
	require.NoError(t, err)
	pk := cdb.NewPartitionKeyString("p")
	item := []byte(`{"id":"x","pk":"p","ttl":10}`)
	_, err = c.CreateItem(ctx, pk, item, nil)
	require.NoError(t, err)

	clock.Advance(11 * time.Second)
	_, err = c.ReadItem(ctx, pk, "x", nil)
	require.True(t, cdb.IsNotFound(err), "expired: no read sees it, got %v", err)
	_, err = c.CreateItem(ctx, pk, item, nil)
	require.True(t, cdb.IsConflict(err), "not purged yet: its id conflicts, got %v", err)

	clock.Advance(time.Minute)
	_, err = c.CreateItem(ctx, pk, item, nil)
	require.NoError(t, err, "purged: the id is free")
}
