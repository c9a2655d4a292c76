package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Fetches the tests make without waiting: each fails the test on an error,
// and says whether it must find work, must find none, or may find either.
// Worker fetches use the default (untagged) filter and no session.

// lockLong is a lock the tests never wait out.
const lockLong = 30 * time.Second

// noPoll is the poll timeout of a fetch that must not wait.
const noPoll = time.Duration(0)

// fetchOrchestration fetches an orchestration item that must be there.
func fetchOrchestration(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (*cdb.OrchestrationItem, string) {
	t.Helper()
	item, token, _ := fetchOrchestrationAttempt(ctx, t, p, lock, msgAndArgs...)
	return item, token
}

// fetchOrchestrationAttempt is fetchOrchestration with the item's attempt
// count.
func fetchOrchestrationAttempt(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (*cdb.OrchestrationItem, string, uint32) {
	t.Helper()
	item, token, attempt, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err, msgAndArgs...)
	require.NotNil(t, item, msgAndArgs...)
	return item, token, attempt
}

// fetchNoOrchestration is a fetch that must find no orchestration item.
func fetchNoOrchestration(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(ctx, lock, noPoll, nil)
	require.NoError(t, err, msgAndArgs...)
	require.Nil(t, item, msgAndArgs...)
}

// enqueueAndFetchOrchestration enqueues item for the orchestrator and
// fetches the next orchestration item with lockLong, which must be there.
func enqueueAndFetchOrchestration(ctx context.Context, t *testing.T, p cdb.Provider, item cdb.WorkItem) (*cdb.OrchestrationItem, string) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, item, 0))
	return fetchOrchestration(ctx, t, p, lockLong, "the orchestration item just enqueued must be fetchable")
}

// fetchWork fetches a worker item that must be there.
func fetchWork(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (cdb.WorkItem, string) {
	t.Helper()
	item, token, _ := fetchWorkAttempt(ctx, t, p, lock, msgAndArgs...)
	return item, token
}

// fetchWorkAttempt is fetchWork with the item's attempt count.
func fetchWorkAttempt(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) (cdb.WorkItem, string, uint32) {
	t.Helper()
	item, token, attempt, err := p.FetchWorkItem(ctx, lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err, msgAndArgs...)
	require.NotNil(t, item, msgAndArgs...)
	return item, token, attempt
}

// fetchNoWork is a fetch that must find no worker item.
func fetchNoWork(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration, msgAndArgs ...any) {
	t.Helper()
	item, _, _, err := p.FetchWorkItem(ctx, lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err, msgAndArgs...)
	require.Nil(t, item, msgAndArgs...)
}

// fetchWorkIfAny fetches a worker item if there is one; a nil item means
// none was visible.
func fetchWorkIfAny(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration) (cdb.WorkItem, string) {
	t.Helper()
	item, token, _, err := p.FetchWorkItem(ctx, lock, noPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	return item, token
}
