package cdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/providertest"
)

// fakeFactory gives every validation test a provider on a fresh in-memory
// account. Polling and reconciling run fast so the suite stays quick; the
// request-budget tests use the defaults.
type fakeFactory struct {
	providertest.ContainerHooks
	ranges  int
	latency time.Duration
	// staleReads serves reads without the session token of a document's
	// last write from a lagging replica.
	staleReads bool
	// configure adjusts the client before the provider uses it (the test
	// hook that stops session tokens).
	configure func(*cdb.Client)
	// processLeases gives the provider process leases (shared dispatch slots).
	processLeases bool
	// retention gives finished instances their TTLs as the suite runs
	// (Config.Retention), long enough that none leaves during a test.
	retention time.Duration
}

func (f fakeFactory) NewProvider(t *testing.T, o providertest.ProviderOptions) cdb.Provider {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: f.ranges, Latency: f.latency, StaleReadsWithoutSessionToken: f.staleReads})
	// Every query the provider sends is also served without the fake's
	// value index: the suite fails if the index changed any page, or if a
	// query filtered on a property the provider's container leaves out of
	// its index.
	mismatch := cdb.CheckQueryIndexForTest(acct)
	t.Cleanup(func() {
		if err := mismatch(); err != nil {
			t.Error(err)
		}
		for path, query := range cdb.UnindexedFiltersForTest(acct) {
			if path != "/item" { // a message's blob, looked into among one instance's messages only
				t.Errorf("%s is filtered on, and the provider's indexing policy leaves it out: %s", path, query)
			}
		}
	})
	client := acct.Client()
	if f.configure != nil {
		f.configure(client)
	}
	cfg := cdb.Config{
		Client:            client,
		ShortPolling:      !o.LongPolling,
		PollInterval:      20 * time.Millisecond,
		ReconcileInterval: 100 * time.Millisecond,
		OutboxMinAge:      50 * time.Millisecond,
		Retention:         f.retention,
	}
	if f.processLeases {
		cfg.ProcessLeases = &cdb.ProcessLeaseOptions{}
	}
	p, err := cdb.NewProvider(context.Background(), cfg)
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// LockTimeout is duroxide's 1 s on the host the suite was tuned on, longer
// in proportion on a slower one (internal/hostspeed): the windows measured
// from a lock's start (a second fetch must still find it locked) hold on a
// loaded machine.
func (fakeFactory) LockTimeout() time.Duration { return hostspeed.Scale(time.Second) }

// TestValidation runs duroxide's provider validation suite on the Cosmos DB
// provider over the strict in-memory Cosmos DB.
func TestValidation(t *testing.T) {
	t.Parallel()
	providertest.Run(t, fakeFactory{})
}

// TestValidationWithProcessLeases runs the suite on a provider with process
// leases: a lone member owns every slot and names itself the writer of
// what it takes itself, and the contract holds as without them.
func TestValidationWithProcessLeases(t *testing.T) {
	t.Parallel()
	providertest.Run(t, fakeFactory{processLeases: true})
}

// TestErrorConditions runs providertest's own module: every condition a
// caller branches on is a cdb sentinel, reached with errors.Is.
func TestErrorConditions(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.ErrorConditions())
}

// TestExclusiveStarts runs providertest's module for the optional
// cdb.ExclusiveStarter.
func TestExclusiveStarts(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.ExclusiveStarts())
}

// TestParkRecording runs providertest's module for the optional
// cdb.ParkRecorder.
func TestParkRecording(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.ParkRecording())
}

// TestTraceCarrying runs providertest's module for the optional
// cdb.TraceCarrier.
func TestTraceCarrying(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.TraceCarrying())
}

// TestVisibleAtReporting runs providertest's module for the Go-only times
// at which fetched work became takeable.
func TestVisibleAtReporting(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.VisibleAtReporting())
}
