package providertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// longPollingTests is duroxide's provider_validation/long_polling.rs. Its
// functions take a provider rather than a factory; here each test creates
// the kind it applies to: the short-poll tests (and the upper bound, which
// duroxide runs on short-poll providers) a ProviderOptions{LongPolling:
// false} provider checked against f.ShortPollThreshold(), the long-poll
// tests a ProviderOptions{LongPolling: true} provider.
func longPollingTests() []Test {
	return []Test{
		{Name: "TestShortPollReturnsImmediately", Run: testShortPollReturnsImmediately},
		{Name: "TestLongPollWaitsForTimeout", Run: testLongPollWaitsForTimeout},
		{Name: "TestFetchRespectsTimeoutUpperBound", Run: testFetchRespectsTimeoutUpperBound},
		{Name: "TestShortPollWorkItemReturnsImmediately", Run: testShortPollWorkItemReturnsImmediately},
		{Name: "TestLongPollWorkItemWaitsForTimeout", Run: testLongPollWorkItemWaitsForTimeout},
	}
}

// A short-polling provider ignores the poll timeout: an empty orchestrator
// fetch returns None within the threshold.
func testShortPollReturnsImmediately(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: false})
	threshold := f.ShortPollThreshold()
	pollTimeout := 500 * time.Millisecond // the provider should ignore it

	start := time.Now()
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, pollTimeout, nil)
	elapsed := time.Since(start)
	require.NoError(t, err, "Fetch failed")
	require.Nil(t, item, "Queue should be empty")
	require.Less(t, elapsed, threshold,
		"Short polling provider should return immediately (elapsed: %v, threshold: %v)", elapsed, threshold)
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

// No provider blocks well beyond the poll timeout: an empty fetch with a
// 300 ms poll returns within 300 + 200 ms.
func testFetchRespectsTimeoutUpperBound(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: false})
	pollTimeout := 300 * time.Millisecond
	tolerance := 200 * time.Millisecond

	start := time.Now()
	item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, pollTimeout, nil)
	elapsed := time.Since(start)
	require.NoError(t, err, "Fetch failed")
	require.Nil(t, item, "Queue should be empty")
	require.Less(t, elapsed, pollTimeout+tolerance,
		"Provider blocked too long (elapsed: %v, max expected: %v)", elapsed, pollTimeout+tolerance)
}

// The worker-queue counterpart of TestShortPollReturnsImmediately.
func testShortPollWorkItemReturnsImmediately(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{LongPolling: false})
	threshold := f.ShortPollThreshold()
	pollTimeout := 500 * time.Millisecond

	start := time.Now()
	item, _, _, err := p.FetchWorkItem(ctx, lockLong, pollTimeout, nil, cdb.DefaultOnlyFilter())
	elapsed := time.Since(start)
	require.NoError(t, err, "Fetch failed")
	require.Nil(t, item, "Worker queue should be empty")
	require.Less(t, elapsed, threshold,
		"Short polling provider should return immediately (elapsed: %v, threshold: %v)", elapsed, threshold)
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
