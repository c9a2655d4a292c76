package cosmostest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/fakecosmos"
	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// Quirks lists what a target's Cosmos DB cannot do. Each non-empty field is
// the reason, printed when a test that needs the capability is skipped.
type Quirks struct {
	NonAtomicBatch        string // batches are not rolled back on failure
	NoPatchInBatch        string // Patch operations inside a batch are refused
	NoAuth                string // signatures are not checked
	ServesCrossPartition  string // cross-partition ORDER BY/TOP/aggregates are served instead of refused
	SingleRange           string // only one partition key range, and no splits
	NoFaultInjection      string // faults and request counters are not available
	NoEmptyPageContinuing string // cross-partition queries never return empty pages with a continuation
}

// Target is one Cosmos DB a suite runs against.
type Target struct {
	Name   string
	Quirks Quirks
	open   func(t *testing.T) *Env
}

// Env is what one test gets: a client on the target, and the fake when the
// target is the fake.
type Env struct {
	Client *cdb.Client
	Fake   *fakecosmos.Server // nil unless the target is the in-memory fake
	Target *Target
	// TLS is what the target's client trusts (the account's CA file or
	// skip-verify), for a test that builds a client of its own.
	TLS cdb.TLSOptions
}

// Open connects a test to the target.
func (tg *Target) Open(t *testing.T) *Env {
	t.Helper()
	env := tg.open(t)
	env.Target = tg
	return env
}

// SkipUnless skips t when reason is non-empty, naming the target.
func (tg *Target) SkipUnless(t *testing.T, reason string) {
	t.Helper()
	if reason != "" {
		t.Skipf("%s: %s", tg.Name, reason)
	}
}

// FakeOptions tunes the in-memory fake target.
type FakeOptions struct {
	PartitionKeyRanges int
	// StaleReads serves reads without the session token of a document's
	// last write from a lagging replica; the client's session tokens must
	// make every test read its writes.
	StaleReads bool
}

// FakeTarget is the strict in-memory fake, a fresh account per test.
func FakeTarget(o FakeOptions) *Target {
	return &Target{
		Name: "fake",
		open: func(t *testing.T) *Env {
			srv := fakecosmos.New(fakecosmos.Options{PartitionKeyRanges: o.PartitionKeyRanges, StaleReadsWithoutSessionToken: o.StaleReads})
			c, err := cdb.NewClient("https://localhost:8081/", cdb.ClientOptions{Key: srv.Key(), Transport: srv.Transport()})
			if err != nil {
				t.Fatalf("client for the fake: %v", err)
			}
			return &Env{Client: c, Fake: srv}
		},
	}
}

// EmulatorKey is the Cosmos DB emulator's well-known key (not a secret).
const EmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// NPMTarget is @vercel/cosmosdb-server at endpoint, reached through the
// workaround transport.
func NPMTarget(endpoint string) *Target {
	const why = "@vercel/cosmosdb-server 1.0.1 "
	return &Target{
		Name: "npm",
		Quirks: Quirks{
			NonAtomicBatch:        why + "runs batch operations one by one without rollback and never answers 207",
			NoAuth:                why + "accepts any signature",
			ServesCrossPartition:  why + "serves cross-partition ORDER BY/TOP/aggregates that the service refuses with 400/1004",
			SingleRange:           why + "has one partition key range and never splits",
			NoFaultInjection:      "fault injection and request counters exist only in the in-memory fake",
			NoEmptyPageContinuing: why + "has one range, so it never returns an empty page with a continuation",
		},
		open: func(t *testing.T) *Env {
			c, err := cdb.NewClient(endpoint, cdb.ClientOptions{
				Key:       EmulatorKey,
				Transport: vercelWorkarounds{next: http.DefaultTransport},
				// The server is one node process on the test's machine: on a
				// loaded host a batch it runs operation by operation took
				// longer than the default 15 s attempt deadline, and a
				// fetch whose lock batch ran out passed its item over. The
				// deadlines grow with the host's slowness (15 s and 60 s
				// on the host the tests were tuned on).
				Timeouts: cdb.TimeoutOptions{
					Attempt:      hostspeed.Scale(15 * time.Second),
					QueryAttempt: hostspeed.Scale(time.Minute),
				},
			})
			if err != nil {
				t.Fatalf("client for the npm server: %v", err)
			}
			return &Env{Client: c}
		},
	}
}

// AccountTarget is the account or emulator named by COSMOS_ENDPOINT and
// COSMOS_KEY.
func AccountTarget(endpoint, key string) *Target {
	return &Target{
		Name: "account",
		Quirks: Quirks{
			NoFaultInjection: "fault injection and request counters exist only in the in-memory fake",
		},
		open: func(t *testing.T) *Env {
			opts := cdb.ClientOptions{Key: key}
			opts.TLS.InsecureSkipVerify = os.Getenv(cdb.EnvSkipTLS) == "true"
			opts.TLS.CAFile = os.Getenv(cdb.EnvCAFile) // e.g. the Microsoft emulator's certificate
			c, err := cdb.NewClient(endpoint, opts)
			if err != nil {
				t.Fatalf("client for COSMOS_ENDPOINT: %v", err)
			}
			return &Env{Client: c, TLS: opts.TLS}
		},
	}
}

// Targets lists every target available to this test run: always the fake,
// the npm server when npm is non-nil, the account when COSMOS_ENDPOINT is set.
func Targets(npm *NPMServer) []*Target {
	targets := []*Target{FakeTarget(FakeOptions{})}
	if npm != nil {
		targets = append(targets, NPMTarget(npm.Endpoint))
	}
	if endpoint := os.Getenv("COSMOS_ENDPOINT"); endpoint != "" {
		targets = append(targets, AccountTarget(endpoint, os.Getenv("COSMOS_KEY")))
	}
	return targets
}

// NewDatabase creates a database with a unique name for this test and deletes
// it when the test ends.
func (e *Env) NewDatabase(t *testing.T) string {
	t.Helper()
	id := UniqueName("cdbtest")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Client.CreateDatabase(ctx, id); err != nil {
		t.Fatalf("create database %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = e.Client.DeleteDatabase(ctx, id)
	})
	return id
}

// UniqueName returns prefix followed by random hex, unique across runs.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// StartNPMServerFromEnv starts the npm server when ServerCLIEnv is set and
// returns nil, with no error, when it is not.
func StartNPMServerFromEnv(ctx context.Context) (*NPMServer, error) {
	cli := os.Getenv(ServerCLIEnv)
	if cli == "" {
		return nil, nil
	}
	return StartNPMServer(ctx, cli)
}
