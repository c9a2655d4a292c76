package cdb_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// accountClock is a FakeAccount clock a test moves forward.
type accountClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *accountClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *accountClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func countDocsOfType(t *testing.T, p *cdb.CosmosProvider, instance, docType string) int {
	t.Helper()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := p.Container().QueryItems(context.Background(), "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk AND c.type = @type",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}, {Name: "@type", Value: docType}}, &cdb.QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	var n int
	require.NoError(t, json.Unmarshal(res.Items[0], &n))
	return n
}

// The provider's expiring documents expire on the fake account's clock: a
// start enqueued from outside a commit leaves a consumed marker with a ttl
// when its turn consumes it, and the marker is gone once the clock passes
// its _ts + ttl.
func TestFakeAccountExpiresTheProvidersConsumedMarkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := &accountClock{now: time.Now()}
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()

	providertest.CreateInstance(ctx, t, p, "i")
	require.Equal(t, 1, countDocsOfType(t, p, "i", "consumed"), "the consumed start's marker")

	clock.Advance(9 * time.Minute)
	require.Equal(t, 1, countDocsOfType(t, p, "i", "consumed"), "still within its ttl")
	clock.Advance(time.Minute)
	require.Equal(t, 0, countDocsOfType(t, p, "i", "consumed"), "expired")
	require.Equal(t, 1, countDocsOfType(t, p, "i", "inst"), "what has no ttl stays")
}
