package durable

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/cosmostest"
)

// npmServer is the @vercel/cosmosdb-server this test binary started, or nil
// when CDB_COSMOSDB_SERVER_CLI is unset (make test sets it).
var npmServer *cosmostest.NPMServer

// TestMain starts the npm server once for the whole binary: starting node is
// slow, and every test gets a database of its own on it anyway.
func TestMain(m *testing.M) {
	srv, err := cosmostest.StartNPMServerFromEnv(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	npmServer = srv
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

// externalProviders are the Cosmos DB provider on the real-protocol targets
// this run has: @vercel/cosmosdb-server when it was started, and the account
// or emulator named by COSMOS_ENDPOINT when that is set.
func externalProviders() []providerCase {
	var cases []providerCase
	if npmServer != nil {
		cases = append(cases, cosmosTargetCase(cosmostest.NPMTarget(npmServer.Endpoint)))
	}
	if endpoint := os.Getenv(cdb.EnvEndpoint); endpoint != "" {
		cases = append(cases, cosmosTargetCase(cosmostest.AccountTarget(endpoint, os.Getenv(cdb.EnvKey))))
	}
	return cases
}

// cosmosTargetCase gives each test a CosmosProvider on target, in a fresh
// database deleted when the test ends, with the in-memory Cosmos case's
// timings.
func cosmosTargetCase(target *cosmostest.Target) providerCase {
	return providerCase{name: target.Name, new: func(t *testing.T) cdb.Provider {
		env := target.Open(t)
		db := cosmostest.UniqueName("cdbrt")
		t.Cleanup(func() { deleteDatabase(env.Client, db) }) // registered first, so it runs after Close
		p, err := cdb.NewProvider(context.Background(), cdb.Config{
			Client:            env.Client,
			Database:          db,
			PollInterval:      20 * time.Millisecond,
			ReconcileInterval: 100 * time.Millisecond,
			OutboxMinAge:      50 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("new provider on %s: %v", target.Name, err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}}
}

func deleteDatabase(c *cdb.Client, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.DeleteDatabase(ctx, db) // best effort: a leftover database has a unique name
}
