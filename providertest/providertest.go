// Package providertest is duroxide's provider validation suite in Go, as of
// 0.1.32: every test of its provider_validation modules, under the same
// names (Go-cased), each asserting what the duroxide test asserts. The
// race_replay module's tests start this module's durable runtime on the
// provider under test, so they check the store and the runtime together.
//
// A provider package runs the whole suite with one call:
//
//	func TestValidation(t *testing.T) { providertest.Run(t, myFactory{}) }
//
// Every test creates its own provider through the Factory, so the suite needs
// an isolated store per provider. Independent tests run in parallel.
//
// Beside duroxide's modules, ErrorConditions checks what duroxide leaves
// open: that each condition a caller branches on is reported with the cdb
// sentinel error for it (cdb.ErrInstanceNotFound, cdb.ErrInvalidLockToken,
// ...), as RunModule(t, f, ErrorConditions()).
package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// ProviderOptions selects how a provider under test is configured.
type ProviderOptions struct {
	// LongPolling asks for a provider whose fetches wait up to their
	// poll timeout for work. False asks for short polling: a fetch that
	// finds nothing returns at once.
	LongPolling bool
}

// Factory creates isolated providers for the suite and reaches into their
// store for the two fault-injection hooks.
type Factory interface {
	// NewProvider returns a fresh provider on an isolated, empty store. The
	// factory releases it when t ends (t.Cleanup).
	NewProvider(t *testing.T, o ProviderOptions) cdb.Provider
	// LockTimeout is the lock duration the lock-expiry tests use and wait
	// out; short values keep the suite fast (duroxide's default is 5s).
	LockTimeout() time.Duration
	// CorruptInstanceHistory makes every stored history event of instance
	// undecodable, in the store behind p.
	CorruptInstanceHistory(ctx context.Context, p cdb.Provider, instance string) error
	// MaxAttemptCount is the highest attempt count over the orchestrator
	// queue messages of instance, in the store behind p.
	MaxAttemptCount(ctx context.Context, p cdb.Provider, instance string) (uint32, error)
}

// Test is one validation test.
type Test struct {
	Name string
	Run  func(t *testing.T, f Factory)
	// Serial marks a test that must not run in parallel with others (none
	// of duroxide's need it; kept for timing-sensitive ports).
	Serial bool
}

// Module is one duroxide provider_validation module.
type Module struct {
	Name  string
	Tests []Test
}

// Modules lists every module of the suite, in duroxide's order.
func Modules() []Module {
	return []Module{
		{Name: "atomicity", Tests: atomicityTests()},
		{Name: "error_handling", Tests: errorHandlingTests()},
		{Name: "instance_creation", Tests: instanceCreationTests()},
		{Name: "instance_locking", Tests: instanceLockingTests()},
		{Name: "lock_expiration", Tests: lockExpirationTests()},
		{Name: "multi_execution", Tests: multiExecutionTests()},
		{Name: "queue_semantics", Tests: queueSemanticsTests()},
		{Name: "poison_message", Tests: poisonMessageTests()},
		{Name: "long_polling", Tests: longPollingTests()},
		{Name: "cancellation", Tests: cancellationTests()},
		{Name: "capability_filtering", Tests: capabilityFilteringTests()},
		{Name: "custom_status", Tests: customStatusTests()},
		{Name: "sessions", Tests: sessionsTests()},
		{Name: "tag_filtering", Tests: tagFilteringTests()},
		{Name: "kv_store", Tests: kvStoreTests()},
		{Name: "management", Tests: managementTests()},
		{Name: "deletion", Tests: deletionTests()},
		{Name: "prune", Tests: pruneTests()},
		{Name: "bulk_deletion", Tests: bulkDeletionTests()},
		{Name: "race_replay", Tests: raceReplayTests()},
	}
}

// Run runs every test of every module as subtests grouped by module.
func Run(t *testing.T, f Factory) {
	for _, m := range Modules() {
		RunModule(t, f, m)
	}
}

// RunModule runs one module's tests as subtests named after the module.
func RunModule(t *testing.T, f Factory, m Module) {
	t.Run(m.Name, func(t *testing.T) {
		for _, tc := range m.Tests {
			t.Run(tc.Name, func(t *testing.T) {
				if !tc.Serial {
					t.Parallel()
				}
				tc.Run(t, f)
			})
		}
	})
}

// Count is the number of tests in the suite.
func Count() int {
	n := 0
	for _, m := range Modules() {
		n += len(m.Tests)
	}
	return n
}

// testContext is a context bounded well beyond any single test's waits.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaled(2*time.Minute))
	t.Cleanup(cancel)
	return ctx
}

// scaled is a window or a bound of the suite's own: d on the host the port
// was tuned on (an idle 2-core machine, under the race detector when the
// binary has it), longer in proportion on a slower one
// (internal/hostspeed). A window is a span in which a test expects
// something not to have happened yet (an abandon's delay still hiding an
// item across a call and a fetch); on a loaded machine a fixed one ran out
// before its check did, and the test failed with nothing wrong. What the
// test asserts stays duroxide's; only how long it gives the store does not.
func scaled(d time.Duration) time.Duration { return hostspeed.Scale(d) }
