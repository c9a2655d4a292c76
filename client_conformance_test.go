package cdb_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/duroxide-go/cdb/internal/cosmostest"
)

// npmServer is the @vercel/cosmosdb-server this test binary started, or nil
// when make test did not provide one.
var npmServer *cosmostest.NPMServer

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

// TestClientConformance runs the client conformance suite on every available
// Cosmos DB: the fake always, the npm server under make test, and the
// account when COSMOS_ENDPOINT is set.
func TestClientConformance(t *testing.T) {
	for _, tg := range cosmostest.Targets(npmServer) {
		t.Run(tg.Name, func(t *testing.T) {
			cosmostest.RunClientSuite(t, tg)
		})
	}
}

// TestClientConformanceOnSeveralRanges runs the suite again on a fake whose
// containers have four partition key ranges, so range-targeted queries,
// empty cross-partition pages and splits are exercised.
func TestClientConformanceOnSeveralRanges(t *testing.T) {
	cosmostest.RunClientSuite(t, cosmostest.FakeTarget(cosmostest.FakeOptions{PartitionKeyRanges: 4}))
}

// TestClientConformanceUnderStaleReads runs the suite on a fake whose reads
// without the session token of a document's last write are served by a
// lagging replica: every test reads its writes only if the client carries
// the tokens.
func TestClientConformanceUnderStaleReads(t *testing.T) {
	cosmostest.RunClientSuite(t, cosmostest.FakeTarget(cosmostest.FakeOptions{PartitionKeyRanges: 3, StaleReads: true}))
}
