package cosmostest

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// The tests in this file need the fake's fault injection.

func onOp(op fakecosmos.Op) func(fakecosmos.RequestInfo) bool {
	return func(ri fakecosmos.RequestInfo) bool { return ri.Op == op }
}

func testThrottlingRetried(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoFaultInjection)
	env := tg.Open(t)
	cc := newContainer(t, env)
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("p"), item{ID: "t", PK: "p"}.bytes(t), nil)
	require.NoError(t, err)

	env.Fake.InjectFault(fakecosmos.Fault{
		Match: onOp(fakecosmos.OpReadItem), Kind: fakecosmos.FaultStatus,
		Status: http.StatusTooManyRequests, RetryAfter: 30 * time.Millisecond, Times: 2,
	})
	before := env.Client.Stats()
	start := time.Now()
	read, err := cc.ReadItem(ctx, pk("p"), "t", nil)
	require.NoError(t, err, "two 429s are retried")
	assert.Equal(t, 3, read.Attempts)
	assert.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond, "x-ms-retry-after-ms is honoured")
	after := env.Client.Stats()
	assert.Equal(t, before.Throttles+2, after.Throttles)

	env.Fake.InjectFault(fakecosmos.Fault{Match: onOp(fakecosmos.OpReadItem), Kind: fakecosmos.FaultStatus, Status: http.StatusServiceUnavailable})
	_, err = cc.ReadItem(ctx, pk("p"), "t", nil)
	require.Error(t, err, "a service that stays unavailable exhausts the bounded retries")
	assert.True(t, cdb.IsRetryable(cdb.ToProviderError("read", err)), "503 maps to a retryable provider error")
}

func testDroppedReadIsRetried(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoFaultInjection)
	env := tg.Open(t)
	cc := newContainer(t, env)
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("p"), item{ID: "d", PK: "p"}.bytes(t), nil)
	require.NoError(t, err)
	env.Fake.InjectFault(fakecosmos.Fault{Match: onOp(fakecosmos.OpReadItem), Kind: fakecosmos.FaultDropConnection, Times: 1})
	read, err := cc.ReadItem(ctx, pk("p"), "d", nil)
	require.NoError(t, err, "a read is idempotent and retried after a dropped connection")
	assert.Equal(t, 2, read.Attempts)
}

func testLostCreateResponse(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoFaultInjection)
	env := tg.Open(t)
	cc := newContainer(t, env)
	ctx := suiteContext(t)
	env.Fake.InjectFault(fakecosmos.Fault{Match: onOp(fakecosmos.OpCreateItem), Kind: fakecosmos.FaultLoseResponse, Times: 1})
	_, err := cc.CreateItem(ctx, pk("p"), item{ID: "lost", PK: "p"}.bytes(t), nil)
	var ce *cdb.CosmosError
	require.True(t, errors.As(err, &ce), "got %T %v", err, err)
	assert.True(t, ce.OutcomeUnknown, "a write whose response was lost is not retried blindly")
	assert.True(t, cdb.IsRetryable(cdb.ToProviderError("create", err)))

	_, err = cc.CreateItem(ctx, pk("p"), item{ID: "lost", PK: "p"}.bytes(t), nil)
	assert.True(t, cdb.IsConflict(err), "the write had committed; repeating it answers 409: %v", err)
}

func testSplitRangesAreRefreshed(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoFaultInjection)
	tg.SkipUnless(t, tg.Quirks.SingleRange)
	env := tg.Open(t)
	cc := newContainer(t, env)
	ctx := suiteContext(t)
	all := seed(t, cc, 20, 10)
	before, err := cc.ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)

	db := cc.DatabaseID()
	require.NoError(t, env.Fake.SplitPartitionKeyRanges(db, cc.ID()))
	byRange, err := cc.QueryItemsPerRange(ctx, "SELECT VALUE c.id FROM c", nil, nil)
	require.NoError(t, err, "a 410 on a split range refreshes the ranges and re-runs on the children")
	total := 0
	for _, res := range byRange {
		total += len(res.Items)
	}
	assert.Equal(t, len(all), total)
	after, err := cc.ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)
	assert.Len(t, after, 2*len(before), "the cache now holds the children")
}

func testCancelledContextStopsRequest(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoFaultInjection)
	env := tg.Open(t)
	cc := newContainer(t, env)
	env.Fake.SetLatency(10 * time.Second)
	t.Cleanup(func() { env.Fake.SetLatency(0) }) // before the database cleanup, which runs later
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := cc.ReadItem(ctx, pk("p"), "x", nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
