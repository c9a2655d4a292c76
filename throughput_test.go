package cdb_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// newThroughputDatabase makes database "db" on acct, with shared throughput
// when shared is not nil.
func newThroughputDatabase(t *testing.T, c *cdb.Client, shared *cdb.ThroughputProperties) {
	t.Helper()
	ctx := context.Background()
	if shared == nil {
		require.NoError(t, c.EnsureDatabase(ctx, "db"))
		return
	}
	_, err := c.CreateDatabaseWithThroughput(ctx, "db", *shared)
	require.NoError(t, err)
}

// ReadThroughput reads a container's own offer (manual, autoscale, or the
// 400 RU/s a provisioned account gives a container created without one),
// its database's shared offer when it has none of its own, and serverless
// where the account answers that offers are not supported.
func TestReadThroughput(t *testing.T) {
	ctx := context.Background()
	autoscale := cdb.NewAutoscaleThroughputProperties(4000)
	shared := cdb.NewAutoscaleThroughputProperties(1000)
	for name, tc := range map[string]struct {
		serverless bool
		database   *cdb.ThroughputProperties // shared throughput
		container  *cdb.ThroughputProperties // its own
		want       cdb.ThroughputProperties
	}{
		"manual":                       {container: ptr(cdb.NewManualThroughputProperties(1000)), want: cdb.ThroughputProperties{Mode: cdb.ThroughputManual, RUPerSecond: 1000}},
		"autoscale":                    {container: &autoscale, want: cdb.ThroughputProperties{Mode: cdb.ThroughputAutoscale, RUPerSecond: 4000}},
		"default":                      {want: cdb.ThroughputProperties{Mode: cdb.ThroughputManual, RUPerSecond: 400}},
		"shared":                       {database: &shared, want: cdb.ThroughputProperties{Mode: cdb.ThroughputAutoscale, RUPerSecond: 1000, Shared: true}},
		"own beside a shared database": {database: &shared, container: &autoscale, want: cdb.ThroughputProperties{Mode: cdb.ThroughputAutoscale, RUPerSecond: 4000}},
		"serverless":                   {serverless: true, want: cdb.ThroughputProperties{Mode: cdb.ThroughputServerless, RUPerSecond: cdb.ServerlessContainerRUPerSecond}},
	} {
		t.Run(name, func(t *testing.T) {
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Serverless: tc.serverless})
			c := acct.Client()
			newThroughputDatabase(t, c, tc.database)
			cc, err := c.NewContainer("db", "orders")
			require.NoError(t, err)
			props := cdb.ProviderContainerProperties("orders")
			if tc.container != nil {
				_, err = cc.CreateWithThroughput(ctx, props, *tc.container)
			} else {
				_, err = cc.Create(ctx, props)
			}
			require.NoError(t, err)
			got, err := cc.ReadThroughput(ctx)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A serverless account refuses throughput on a create, with the service's
// reason; a missing container is a not-found, as a read is.
func TestThroughputRefusals(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Serverless: true})
	c := acct.Client()
	_, err := c.CreateDatabaseWithThroughput(ctx, "db", cdb.NewManualThroughputProperties(400))
	assert.True(t, cdb.HasStatus(err, http.StatusBadRequest), "%v", err)
	assert.Contains(t, err.Error(), "Shared throughput database creation is not supported for serverless accounts")
	require.NoError(t, c.EnsureDatabase(ctx, "db"))
	cc, err := c.NewContainer("db", "orders")
	require.NoError(t, err)
	_, err = cc.CreateWithThroughput(ctx, cdb.ProviderContainerProperties("orders"), cdb.NewAutoscaleThroughputProperties(1000))
	assert.True(t, cdb.HasStatus(err, http.StatusBadRequest), "%v", err)
	assert.Contains(t, err.Error(), "Setting offer throughput or autopilot on container is not supported for serverless accounts")

	_, err = cc.ReadThroughput(ctx)
	assert.True(t, cdb.IsNotFound(err), "%v", err)

	_, err = cc.CreateWithThroughput(ctx, cdb.ProviderContainerProperties("orders"), cdb.ThroughputProperties{Mode: cdb.ThroughputServerless, RUPerSecond: 5000})
	var ve *cdb.ValidationError
	require.True(t, errors.As(err, &ve), "%v", err)
	assert.True(t, strings.Contains(err.Error(), `mode "serverless": want manual or autoscale`), err.Error())
}

// ReadThroughput is the container read, one offers query, and, for a
// container without an offer of its own, the database read and its query.
func TestReadThroughputRequests(t *testing.T) {
	ctx := context.Background()
	for name, shared := range map[string]bool{"own": false, "shared": true} {
		t.Run(name, func(t *testing.T) {
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
			c := acct.Client()
			if shared {
				newThroughputDatabase(t, c, ptr(cdb.NewManualThroughputProperties(400)))
			} else {
				newThroughputDatabase(t, c, nil)
			}
			cc, err := c.NewContainer("db", "orders")
			require.NoError(t, err)
			_, err = cc.Create(ctx, cdb.ProviderContainerProperties("orders"))
			require.NoError(t, err)
			before := c.Stats()
			_, err = cc.ReadThroughput(ctx)
			require.NoError(t, err)
			after := c.Stats()
			want := map[string]int64{"ReadContainer": 1, "QueryOffers": 1}
			if shared {
				want = map[string]int64{"ReadContainer": 1, "QueryOffers": 2, "ReadDatabase": 1}
			}
			for op, n := range want {
				assert.Equal(t, n, after.ByOperation[op].Requests-before.ByOperation[op].Requests, op)
			}
		})
	}
}
