package cdb

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchWire(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `[{"statusCode":201},{"statusCode":200},{"statusCode":200},{"statusCode":204},{"statusCode":200}]`))
	etag := ETag(`"e1"`)
	var ops PatchOperations
	ops.AppendIncrement("/n", 1)
	ops.SetCondition("from c where c.n < 5")

	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a", "pk":"p"}`), nil)
	b.UpsertItem([]byte(`{"id":"b","pk":"p","s":"<&>"}`), &TransactionalBatchItemOptions{IfMatch: &etag})
	b.ReplaceItem("c", []byte(`{"id":"c","pk":"p"}`), &TransactionalBatchItemOptions{IfMatch: &etag})
	b.DeleteItem("d", &TransactionalBatchItemOptions{IfMatch: &etag})
	b.PatchItem("e", ops, &TransactionalBatchItemOptions{IfMatch: &etag})
	assert.Equal(t, 5, b.Len())

	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, &TransactionalBatchOptions{SessionToken: "0:1#2"})
	require.NoError(t, err)
	assert.True(t, resp.Success)

	r := st.requests()[0]
	assert.Equal(t, "POST", r.Method)
	assert.Equal(t, "/dbs/db/colls/coll/docs", r.Path)
	assertSignedFor(t, r, "docs", "dbs/db/colls/coll")
	for k, v := range map[string]string{
		"x-ms-documentdb-partitionkey":        `["p"]`,
		"x-ms-cosmos-is-batch-request":        "True",
		"x-ms-cosmos-batch-atomic":            "True",
		"x-ms-cosmos-batch-ordered":           "True",
		"Content-Type":                        "application/json",
		"Prefer":                              "return=minimal",
		"x-ms-session-token":                  "0:1#2",
		"x-ms-documentdb-isquery":             "",
		"x-ms-documentdb-is-upsert":           "",
		"x-ms-cosmos-batch-continue-on-error": "",
	} {
		assert.Equal(t, v, r.Header.Get(k), k)
	}
	assert.JSONEq(t, `[
		{"operationType":"Create","resourceBody":{"id":"a","pk":"p"}},
		{"operationType":"Upsert","resourceBody":{"id":"b","pk":"p","s":"<&>"},"ifMatch":"\"e1\""},
		{"operationType":"Replace","id":"c","resourceBody":{"id":"c","pk":"p"},"ifMatch":"\"e1\""},
		{"operationType":"Delete","id":"d","ifMatch":"\"e1\""},
		{"operationType":"Patch","id":"e","resourceBody":{"condition":"from c where c.n < 5","operations":[{"op":"incr","path":"/n","value":1}]},"ifMatch":"\"e1\""}
	]`, string(r.Body))
	assert.NotContains(t, string(r.Body), "partitionKey", "no per-operation partition key, as the Go SDK")
	assert.Contains(t, string(r.Body), `"s":"<&>"`, "documents keep their bytes")
}

func TestBatchWithAReadAsksForContent(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `[{"statusCode":200,"resourceBody":{"id":"a"},"eTag":"\"e\""}]`))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.ReadItem("a", nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.Empty(t, st.requests()[0].Header.Get("Prefer"))
	assert.JSONEq(t, `{"id":"a"}`, string(resp.OperationResults[0].ResourceBody))
	assert.Equal(t, ETag(`"e"`), resp.OperationResults[0].ETag)

	cc, st = newScriptedContainer(t, replyAlways(200, `[{"statusCode":201}]`))
	b = cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	_, err = cc.ExecuteTransactionalBatch(testCtx(t), b, &TransactionalBatchOptions{EnableContentResponseOnWrite: true})
	require.NoError(t, err)
	assert.Empty(t, st.requests()[0].Header.Get("Prefer"))
}

func TestBatchCommitted(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(200,
		`[{"statusCode":201,"requestCharge":6.2,"eTag":"\"e1\"","resourceBody":{"id":"a"}},{"statusCode":204,"requestCharge":1.1}]`,
		"x-ms-request-charge", "7.3", "x-ms-activity-id", "act", "x-ms-session-token", "0:2"))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	b.DeleteItem("b", nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.True(t, resp.Success)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 7.3, resp.RequestCharge)
	assert.Equal(t, "act", resp.ActivityID)
	assert.Equal(t, "0:2", resp.SessionToken)
	assert.Equal(t, 1, resp.Attempts)
	require.Len(t, resp.OperationResults, 2)
	assert.Equal(t, TransactionalBatchResult{StatusCode: 201, RequestCharge: 6.2, ETag: `"e1"`, ResourceBody: []byte(`{"id":"a"}`)}, resp.OperationResults[0])
	assert.Equal(t, TransactionalBatchResult{StatusCode: 204, RequestCharge: 1.1}, resp.OperationResults[1])
	i, err := resp.FailedOperation()
	assert.Equal(t, -1, i)
	assert.NoError(t, err)
	assert.Equal(t, int64(1), cc.client.Stats().ByOperation["ExecuteTransactionalBatch"].Operations)
}

func TestBatchRolledBack207(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(207,
		`[{"statusCode":424,"requestCharge":0},{"statusCode":412,"subStatusCode":0,"requestCharge":1.0},{"statusCode":424}]`,
		"x-ms-activity-id", "act-7"))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	etag := ETag(`"stale"`)
	b.ReplaceItem("b", []byte(`{"id":"b"}`), &TransactionalBatchItemOptions{IfMatch: &etag})
	b.DeleteItem("c", nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err, "a batch answered per operation is not an error")
	assert.False(t, resp.Success)
	assert.Equal(t, 207, resp.StatusCode)
	assert.Equal(t, []int{424, 412, 424}, batchStatuses(resp))

	i, opErr := resp.FailedOperation()
	assert.Equal(t, 1, i)
	assert.True(t, IsPreconditionFailed(opErr))
	var ce *CosmosError
	require.ErrorAs(t, opErr, &ce)
	assert.Equal(t, "act-7", ce.ActivityID)
	assert.Contains(t, ce.Error(), "operation 1 (Replace)")
	assert.Equal(t, 1, st.count(), "a 412 inside a batch is not retried")
}

func TestBatchFailureReportedWith200(t *testing.T) {
	// Servers without atomic batches reply 200 and fail per operation.
	cc, st := newScriptedContainer(t, replyAlways(200,
		`[{"statusCode":201},{"statusCode":409,"resourceBody":{"code":"Conflict","message":"Resource with specified id already exists."}},{"statusCode":424}]`))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	b.CreateItem([]byte(`{"id":"b"}`), nil)
	b.CreateItem([]byte(`{"id":"c"}`), nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.False(t, resp.Success)
	i, opErr := resp.FailedOperation()
	assert.Equal(t, 1, i)
	assert.True(t, IsConflict(opErr))
	assert.Contains(t, opErr.Error(), "already exists")
	assert.Equal(t, 1, st.count())
}

func TestBatchWholeRequestError(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(413, `{"code":"RequestEntityTooLarge","message":"Request size is too large"}`))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	_, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 413, ce.StatusCode)
	assert.Equal(t, "ExecuteTransactionalBatch", ce.Operation)
	assert.False(t, IsRetryable(ToProviderError("ack", err)))
}

func TestBatchThrottledInsideIsRetriedWhenRolledBack(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(
		replyAlways(207, `[{"statusCode":429,"subStatusCode":3200,"retryAfterMilliseconds":30},{"statusCode":424}]`),
		replyAlways(200, `[{"statusCode":201},{"statusCode":201}]`),
	))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	b.CreateItem([]byte(`{"id":"b"}`), nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.True(t, resp.Success)
	assert.Equal(t, 2, resp.Attempts)
	reqs := st.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, reqs[0].Body, reqs[1].Body)
	assert.GreaterOrEqual(t, reqs[1].Arrived.Sub(reqs[0].Arrived), 30*time.Millisecond)
}

func TestBatchThrottledInsideGivesUpWithTheFailure(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(207, `[{"statusCode":429,"retryAfterMilliseconds":1}]`),
		func(o *ClientOptions) { o.Retry.MaxAttempts = 2 })
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.False(t, resp.Success)
	_, opErr := resp.FailedOperation()
	var ce *CosmosError
	require.ErrorAs(t, opErr, &ce)
	assert.Equal(t, 429, ce.StatusCode)
	assert.Equal(t, time.Millisecond, ce.RetryAfter)
	assert.True(t, IsRetryable(ToProviderError("ack", ce)))
	assert.Equal(t, 2, st.count())
}

func TestBatchUnreadableSuccessIsOutcomeUnknown(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(200, `[{"statusCode":201}]`))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.CreateItem([]byte(`{"id":"a"}`), nil)
	b.CreateItem([]byte(`{"id":"b"}`), nil)
	_, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	assert.True(t, IsOutcomeUnknown(err))
	assert.Contains(t, err.Error(), "1 results for 2 operations")
}

func TestBatchLimitsAreCheckedBeforeSending(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `[]`))
	pk := NewPartitionKeyString("p")

	_, err := cc.ExecuteTransactionalBatch(testCtx(t), cc.NewTransactionalBatch(pk), nil)
	assert.ErrorIs(t, err, ErrBatchEmpty)

	b := cc.NewTransactionalBatch(pk)
	for i := range 101 {
		b.DeleteItem(fmt.Sprintf("id-%d", i), nil)
	}
	_, err = cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.ErrorIs(t, err, ErrBatchTooManyOperations)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, "ExecuteTransactionalBatch", ve.Operation)
	assert.Contains(t, err.Error(), "101 operations, 100 allowed (1 over)")

	b = cc.NewTransactionalBatch(pk)
	half := strings.Repeat("x", MaxDocumentBytes/2)
	b.CreateItem([]byte(`{"id":"a","x":"`+half+`"}`), nil)
	b.CreateItem([]byte(`{"id":"b","x":"`+half+`"}`), nil)
	_, err = cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.ErrorIs(t, err, ErrBatchTooLarge)
	assert.Contains(t, err.Error(), "2097152 allowed")
	assert.Contains(t, err.Error(), "over)")
	assert.False(t, IsRetryable(ToProviderError("ack", err)))

	// Exactly 100 operations is fine.
	b = cc.NewTransactionalBatch(pk)
	for i := range 100 {
		b.DeleteItem(fmt.Sprintf("id-%d", i), nil)
	}
	req, err := newBatchRequest(cc, b, nil)
	require.NoError(t, err)
	assert.False(t, req.idempotent, "a batch with writes is not resent blindly")

	assert.Equal(t, 0, st.count())
}

func TestBatchBuilderErrorsAreReportedByExecute(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `[]`))
	pk := NewPartitionKeyString("p")
	var tooMany PatchOperations
	for range 11 {
		tooMany.AppendSet("/a", 1)
	}
	cases := map[string]func(b *TransactionalBatch){
		"bad id":         func(b *TransactionalBatch) { b.ReadItem("a#b", nil) },
		"empty id":       func(b *TransactionalBatch) { b.DeleteItem("", nil) },
		"create no id":   func(b *TransactionalBatch) { b.CreateItem([]byte(`{"x":1}`), nil) },
		"replace id":     func(b *TransactionalBatch) { b.ReplaceItem("a", []byte(`{"id":"b"}`), nil) },
		"patch too many": func(b *TransactionalBatch) { b.PatchItem("a", tooMany, nil) },
		"upsert too big": func(b *TransactionalBatch) {
			b.UpsertItem([]byte(`{"id":"a","x":"`+strings.Repeat("x", MaxDocumentBytes)+`"}`), nil)
		},
		"invalid json": func(b *TransactionalBatch) { b.CreateItem([]byte(`{"id":"a",`), nil) },
	}
	for name, add := range cases {
		b := cc.NewTransactionalBatch(pk)
		b.CreateItem([]byte(`{"id":"ok"}`), nil)
		add(b)
		b.DeleteItem("fine", nil)
		_, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, name)
		assert.Contains(t, ve.Field, "operation 1 (", name)
	}
	assert.Equal(t, 0, st.count())
}

func TestReadOnlyBatchIsIdempotent(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(
		func(int, wireRequest) (*http.Response, error) { return nil, errConnReset },
		replyAlways(200, `[{"statusCode":200,"resourceBody":{"id":"a"}}]`),
	))
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.ReadItem("a", nil)
	resp, err := cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	require.NoError(t, err)
	assert.True(t, resp.Success)
	assert.Equal(t, 2, st.count())

	cc, st = newScriptedContainer(t, func(int, wireRequest) (*http.Response, error) { return nil, errConnReset })
	b = cc.NewTransactionalBatch(NewPartitionKeyString("p"))
	b.ReadItem("a", nil)
	b.DeleteItem("b", nil)
	_, err = cc.ExecuteTransactionalBatch(testCtx(t), b, nil)
	assert.True(t, IsOutcomeUnknown(err))
	assert.Equal(t, 1, st.count())
}

func batchStatuses(r TransactionalBatchResponse) []int {
	out := make([]int, len(r.OperationResults))
	for i, o := range r.OperationResults {
		out[i] = o.StatusCode
	}
	return out
}

var errConnReset = errors.New("connection reset by peer")
