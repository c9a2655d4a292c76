package cdb_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/duroxide-go/cdb/internal/cosmostest"
)

// npmServer is the @vercel/cosmosdb-server this test binary started, or nil
// when make test did not provide one.
var npmServer *cosmostest.NPMServer

// suiteParallelism is how many parallel tests run at once unless -parallel
// says otherwise. The validation suite's variants spend most of their time
// waiting (added latency, lock expiries, poll intervals): at GOMAXPROCS on
// a 2-core machine, two at a time, the CPU idled and the package took over
// ten minutes under -race; four keep it busy.
const suiteParallelism = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", suiteParallelism); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
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
