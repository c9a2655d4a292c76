package providertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// longPollingTests is duroxide's provider_validation/long_polling.rs. Its
// functions take a provider rather than a factory; here each test creates
// the kind it applies to: the short-poll tests a ProviderOptions{LongPolling:
// false} provider, the long-poll tests a ProviderOptions{LongPolling: true}
// provider, and the upper bound both.
//
// duroxide checks speed with wall-clock upper bounds (a short poll within
// 100 ms, a 300 ms poll within 500 ms), which a loaded machine breaks while
// the provider is fine. Here the behaviour is checked instead: a short poll
// given a poll timeout far beyond the test's own deadline returns, so it
// did not wait for it; a long poll returns on its own (not by the test's
// context ending) and not before its timeout. The lower bounds stay: a
// wait can only be longer on a loaded machine.
func longPollingTests() []Test {
	return []Test{
		{Name: "TestShortPollReturnsImmediately", Run: testShortPollReturnsImmediately},
		{Name: "TestLongPollWaitsForTimeout", Run: testLongPollWaitsForTimeout},
		{Name: "TestFetchRespectsTimeoutUpperBound", Run: testFetchRespectsTimeoutUpperBound},
		{Name: "TestShortPollWorkItemReturnsImmediately", Run: testShortPollWorkItemReturnsImmediately},
		{Name: "TestLongPollWorkItemWaitsForTimeout", Run: testLongPollWorkItemWaitsForTimeout},
	}
}

// farPollTimeout is a poll timeout no fetch of these tests may wait out:
// longer than testContext's deadline, so a fetch that waited for it would
// end with the context's error instead of returning no work.
const farPollTimeout = 10 * time.Minute

// A short-polling provider ignores the poll timeout: an empty orchestrator
// fetch returns no work without waiting for it.
func testShortPollReturnsImmediately(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: false})

	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, farPollTimeout, nil)
	require.NoError(t, err, "Short polling provider should return without waiting for the poll timeout")
	require.Nil(t, item, "Queue should be empty")
}

// A long-polling provider blocks for the poll timeout when there is no work.
func testLongPollWaitsForTimeout(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: true})
	pollTimeout := 500 * time.Millisecond

	start := time.Now()
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, pollTimeout, nil)
	elapsed := time.Since(start)
	require.NoError(t, err, "Fetch failed")
	require.Nil(t, item, "Queue should be empty")
	require.GreaterOrEqual(t, elapsed, pollTimeout,
		"Long polling provider should wait for timeout (elapsed: %v, expected: %v)", elapsed, pollTimeout)
}

// No provider blocks beyond the poll timeout: an empty fetch with a 300 ms
// poll returns by itself, with no work and no error, before the test's
// context (2 minutes) would end it; on both kinds of provider. How soon
// after the timeout it returns is speed, measured by benchmarks; the Cosmos
// DB provider's tests check by its clock that it returns once the timeout
// has passed.
func testFetchRespectsTimeoutUpperBound(t *testing.T, f Factory) {
	for _, long := range []bool{false, true} {
		ctx := testContext(t)
		p := f.NewProvider(t, ProviderOptions{LongPolling: long})
		item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, 300*time.Millisecond, nil)
		require.NoError(t, err, "Fetch failed or outlived its poll timeout (long polling: %v)", long)
		require.Nil(t, item, "Queue should be empty")
		item2, _, _, err := p.FetchWorkItem(ctx, lockLong, 300*time.Millisecond, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err, "Fetch failed or outlived its poll timeout (long polling: %v)", long)
		require.Nil(t, item2, "Worker queue should be empty")
	}
}

// The worker-queue counterpart of TestShortPollReturnsImmediately.
func testShortPollWorkItemReturnsImmediately(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: false})

	item, _, _, err := p.FetchWorkItem(ctx, lockLong, farPollTimeout, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err, "Short polling provider should return without waiting for the poll timeout")
	require.Nil(t, item, "Worker queue should be empty")
}

// The worker-queue counterpart of TestLongPollWaitsForTimeout.
func testLongPollWorkItemWaitsForTimeout(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: true})
	pollTimeout := 500 * time.Millisecond

	start := time.Now()
	item, _, _, err := p.FetchWorkItem(ctx, lockLong, pollTimeout, nil, cdb.DefaultOnlyFilter())
	elapsed := time.Since(start)
	require.NoError(t, err, "Fetch failed")
	require.Nil(t, item, "Worker queue should be empty")
	require.GreaterOrEqual(t, elapsed, pollTimeout,
		"Long polling provider should wait for timeout (elapsed: %v, expected: %v)", elapsed, pollTimeout)
}
