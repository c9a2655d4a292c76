package providertest

import (
	"context"
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
// did not wait for it; a long poll returns on its own, before a context
// ending fifty times its timeout later, and not before its timeout. The
// lower bounds stay: a wait can only be longer on a loaded machine.
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

// A fetch returns by itself once its poll timeout has passed, on both kinds
// of provider: an empty fetch with a 300 ms poll timeout and a 30 s lock,
// under a context that ends 15 s later, returns no work and no error while
// its context is still live. 15 s is fifty times the timeout, so a loaded
// machine's delays do not reach it; a fetch that ignores its timeout (waits
// for its context, for its lock duration, or for a default of its own) runs
// into the context's end and fails.
func testFetchRespectsTimeoutUpperBound(t *testing.T, f Factory) {
	for _, long := range []bool{false, true} {
		p := f.NewProvider(t, ProviderOptions{LongPolling: long})
		fetchReturnsBeforeDeadline(t, "FetchOrchestrationItem", long, func(ctx context.Context) (bool, error) {
			item, _, _, err := p.FetchOrchestrationItem(ctx, lockLong, boundedPollTimeout, nil)
			return item != nil, err
		})
		fetchReturnsBeforeDeadline(t, "FetchWorkItem", long, func(ctx context.Context) (bool, error) {
			item, _, _, err := p.FetchWorkItem(ctx, lockLong, boundedPollTimeout, nil, cdb.DefaultOnlyFilter())
			return item != nil, err
		})
	}
}

// boundedPollTimeout is the poll timeout TestFetchRespectsTimeoutUpperBound
// holds a fetch to; fetchDeadline is how long after it the fetch's context
// ends. lockLong outlasts both, so a fetch that waits for its lock
// duration instead of its poll timeout is caught too.
const (
	boundedPollTimeout = 300 * time.Millisecond
	fetchDeadline      = 50 * boundedPollTimeout
)

// fetchReturnsBeforeDeadline runs an empty fetch under a context ending
// fetchDeadline from now and requires it to return no work and no error
// while that context is still live.
func fetchReturnsBeforeDeadline(t *testing.T, op string, long bool, fetch func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testContext(t), fetchDeadline)
	defer cancel()
	found, err := fetch(ctx)
	require.NoError(t, err, "%s (long polling: %v) must return by its %v poll timeout, not run into its context's end %v later",
		op, long, boundedPollTimeout, fetchDeadline)
	require.NoError(t, ctx.Err(), "%s (long polling: %v) returned only when its context ended, %v after its poll timeout",
		op, long, fetchDeadline)
	require.False(t, found, "%s: the queue is empty", op)
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
