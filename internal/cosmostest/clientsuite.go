package cosmostest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// RunClientSuite runs every client conformance test against tg, one subtest
// each. The same tests run on every target; what a target cannot do is
// skipped with the reason its Quirks give.
func RunClientSuite(t *testing.T, tg *Target) {
	tests := []struct {
		name string
		run  func(t *testing.T, tg *Target)
	}{
		{"ReadAccount", testReadAccount},
		{"DatabaseLifecycle", testDatabaseLifecycle},
		{"EnsureContainerIsIdempotent", testEnsureContainerIsIdempotent},
		{"EnsureContainerRefusesAnotherPartitionKeyPath", testEnsureContainerRefusesAnotherPartitionKeyPath},
		{"CreateReadReplaceDelete", testCreateReadReplaceDelete},
		{"ETagsChangeOnEveryWriteAndGuardWrites", testETagsGuardWrites},
		{"UpsertCreatesThenReplaces", testUpsertCreatesThenReplaces},
		{"IDsWithSpecialCharactersRoundTrip", testIDsWithSpecialCharactersRoundTrip},
		{"SameIDInTwoPartitions", testSameIDInTwoPartitions},
		{"PatchOperations", testPatchOperations},
		{"PatchConditionFalseIsPreconditionFailed", testPatchConditionFalse},
		{"BatchCommitsAllOperations", testBatchCommitsAllOperations},
		{"BatchWithPatch", testBatchWithPatch},
		{"BatchConflictRollsBackWith424s", testBatchConflictRollsBack},
		{"BatchStaleIfMatchFails", testBatchStaleIfMatchFails},
		{"QuerySinglePartitionWithOrderByPages", testQuerySinglePartitionPages},
		{"QueryCrossPartitionFilterFollowsEveryContinuation", testQueryCrossPartitionFilter},
		{"QueryCrossPartitionOrderByIsRefused", testQueryCrossPartitionOrderByRefused},
		{"QueryPerRangeAllowsOrderByAndCoversEveryDocument", testQueryPerRange},
		{"QueryValueCount", testQueryValueCount},
		{"MalformedQueryIsBadRequest", testMalformedQuery},
		{"ErrorsCarryDiagnostics", testErrorsCarryDiagnostics},
		{"StatsCountRequestsAndCharge", testStatsCountRequestsAndCharge},
		{"WrongKeyIsUnauthorized", testWrongKeyIsUnauthorized},
		{"ThrottlingIsRetriedHonouringRetryAfter", testThrottlingRetried},
		{"DroppedReadIsRetried", testDroppedReadIsRetried},
		{"LostCreateResponseIsOutcomeUnknownAndRepeatConflicts", testLostCreateResponse},
		{"SplitRangesAreRefreshed", testSplitRangesAreRefreshed},
		{"CancelledContextStopsRequest", testCancelledContextStopsRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, tg)
		})
	}
}

// item is the document shape the suite stores.
type item struct {
	ID  string `json:"id"`
	PK  string `json:"pk"`
	N   int    `json:"n"`
	Cat string `json:"cat,omitempty"`
	Tag string `json:"tag,omitempty"`
}

func (it item) bytes(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(it)
	require.NoError(t, err)
	return b
}

func decodeItem(t *testing.T, raw []byte) item {
	t.Helper()
	var it item
	require.NoError(t, json.Unmarshal(raw, &it), "decode %s", raw)
	return it
}

func suiteContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// itemsContainer is the container most tests use: partition key /pk, and a
// composite index for ORDER BY n, id.
func itemsContainer(id string) cdb.ContainerProperties {
	policy := cdb.DefaultIndexingPolicy()
	policy.CompositeIndexes = [][]cdb.CompositeIndex{{
		{Path: "/cat", Order: "ascending"},
		{Path: "/n", Order: "ascending"},
	}}
	return cdb.ContainerProperties{
		ID:             id,
		PartitionKey:   cdb.PartitionKeyDefinition{Paths: []string{"/pk"}, Kind: "Hash", Version: 2},
		IndexingPolicy: &policy,
	}
}

// newContainer gives the test a fresh container in a fresh database.
func newContainer(t *testing.T, env *Env) *cdb.ContainerClient {
	t.Helper()
	db := env.NewDatabase(t)
	cc, err := env.Client.NewContainer(db, "items")
	require.NoError(t, err)
	_, err = cc.Ensure(suiteContext(t), itemsContainer("items"))
	require.NoError(t, err)
	return cc
}

func pk(s string) cdb.PartitionKey { return cdb.NewPartitionKeyString(s) }

func requireStatus(t *testing.T, err error, status int, what string) {
	t.Helper()
	require.Error(t, err, what)
	var ce *cdb.CosmosError
	require.True(t, errors.As(err, &ce), "%s: want a *CosmosError, got %T: %v", what, err, err)
	require.Equal(t, status, ce.StatusCode, "%s: %v", what, err)
}

func testReadAccount(t *testing.T, tg *Target) {
	env := tg.Open(t)
	acct, err := env.Client.ReadAccount(suiteContext(t))
	require.NoError(t, err)
	assert.NotEmpty(t, acct.WritableLocations, "the account advertises where to write")
}

func testDatabaseLifecycle(t *testing.T, tg *Target) {
	env := tg.Open(t)
	ctx := suiteContext(t)
	id := UniqueName("cdbtest")
	_, err := env.Client.CreateDatabase(ctx, id)
	require.NoError(t, err)
	_, err = env.Client.CreateDatabase(ctx, id)
	requireStatus(t, err, http.StatusConflict, "creating an existing database")
	require.NoError(t, env.Client.EnsureDatabase(ctx, id), "ensure treats an existing database as success")
	got, err := env.Client.ReadDatabase(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, id, got.ID)
	require.NoError(t, env.Client.DeleteDatabase(ctx, id))
	_, err = env.Client.ReadDatabase(ctx, id)
	requireStatus(t, err, http.StatusNotFound, "reading a deleted database")
}

func testEnsureContainerIsIdempotent(t *testing.T, tg *Target) {
	env := tg.Open(t)
	ctx := suiteContext(t)
	db := env.NewDatabase(t)
	cc, err := env.Client.NewContainer(db, "items")
	require.NoError(t, err)
	first, err := cc.Ensure(ctx, itemsContainer("items"))
	require.NoError(t, err)
	second, err := cc.Ensure(ctx, itemsContainer("items"))
	require.NoError(t, err, "ensuring an existing container with the same partition key")
	assert.Equal(t, first.PartitionKey.Paths, second.PartitionKey.Paths)
	read, err := cc.Read(ctx)
	require.NoError(t, err)
	require.NotNil(t, read.IndexingPolicy)
	assert.Len(t, read.IndexingPolicy.CompositeIndexes, 1, "the composite index is stored")
}

func testEnsureContainerRefusesAnotherPartitionKeyPath(t *testing.T, tg *Target) {
	env := tg.Open(t)
	ctx := suiteContext(t)
	db := env.NewDatabase(t)
	cc, err := env.Client.NewContainer(db, "items")
	require.NoError(t, err)
	_, err = cc.Ensure(ctx, itemsContainer("items"))
	require.NoError(t, err)
	other := itemsContainer("items")
	other.PartitionKey.Paths = []string{"/tenant"}
	_, err = cc.Ensure(ctx, other)
	require.ErrorIs(t, err, cdb.ErrPartitionKeyPathMismatch)
	assert.Contains(t, err.Error(), "/pk")
	assert.Contains(t, err.Error(), "/tenant")
}

func testCreateReadReplaceDelete(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	want := item{ID: "a", PK: "p1", N: 1}

	created, err := cc.CreateItem(ctx, pk("p1"), want.bytes(t), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, created.StatusCode)
	assert.NotEmpty(t, created.ETag)

	_, err = cc.CreateItem(ctx, pk("p1"), want.bytes(t), nil)
	assert.True(t, cdb.IsConflict(err), "creating the same id twice: %v", err)

	read, err := cc.ReadItem(ctx, pk("p1"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, want, decodeItem(t, read.Value))
	assert.Equal(t, created.ETag, read.ETag)

	want.N = 2
	_, err = cc.ReplaceItem(ctx, pk("p1"), "a", want.bytes(t), nil)
	require.NoError(t, err)
	read, err = cc.ReadItem(ctx, pk("p1"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, decodeItem(t, read.Value).N)

	_, err = cc.ReplaceItem(ctx, pk("p1"), "missing", item{ID: "missing", PK: "p1"}.bytes(t), nil)
	assert.True(t, cdb.IsNotFound(err), "replacing a missing item: %v", err)

	_, err = cc.DeleteItem(ctx, pk("p1"), "a", nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk("p1"), "a", nil)
	assert.True(t, cdb.IsNotFound(err), "reading a deleted item: %v", err)
	_, err = cc.DeleteItem(ctx, pk("p1"), "a", nil)
	assert.True(t, cdb.IsNotFound(err), "deleting a deleted item: %v", err)
}

func testETagsGuardWrites(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	v1, err := cc.CreateItem(ctx, pk("p"), item{ID: "e", PK: "p", N: 1}.bytes(t), nil)
	require.NoError(t, err)
	v2, err := cc.ReplaceItem(ctx, pk("p"), "e", item{ID: "e", PK: "p", N: 2}.bytes(t), &cdb.ItemOptions{IfMatch: &v1.ETag})
	require.NoError(t, err)
	assert.NotEqual(t, v1.ETag, v2.ETag, "a write must change the etag")

	stale := &cdb.ItemOptions{IfMatch: &v1.ETag}
	_, err = cc.ReplaceItem(ctx, pk("p"), "e", item{ID: "e", PK: "p", N: 3}.bytes(t), stale)
	assert.True(t, cdb.IsPreconditionFailed(err), "replace with a stale etag: %v", err)
	_, err = cc.UpsertItem(ctx, pk("p"), item{ID: "e", PK: "p", N: 3}.bytes(t), stale)
	assert.True(t, cdb.IsPreconditionFailed(err), "upsert with a stale etag: %v", err)
	var ops cdb.PatchOperations
	ops.AppendSet("/n", 3)
	_, err = cc.PatchItem(ctx, pk("p"), "e", ops, stale)
	assert.True(t, cdb.IsPreconditionFailed(err), "patch with a stale etag: %v", err)
	_, err = cc.DeleteItem(ctx, pk("p"), "e", stale)
	assert.True(t, cdb.IsPreconditionFailed(err), "delete with a stale etag: %v", err)

	read, err := cc.ReadItem(ctx, pk("p"), "e", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, decodeItem(t, read.Value).N, "no guarded write may have landed")
	_, err = cc.DeleteItem(ctx, pk("p"), "e", &cdb.ItemOptions{IfMatch: &v2.ETag})
	require.NoError(t, err)
}

func testUpsertCreatesThenReplaces(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	first, err := cc.UpsertItem(ctx, pk("p"), item{ID: "u", PK: "p", N: 1}.bytes(t), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, first.StatusCode)
	second, err := cc.UpsertItem(ctx, pk("p"), item{ID: "u", PK: "p", N: 2}.bytes(t), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, second.StatusCode)
	read, err := cc.ReadItem(ctx, pk("p"), "u", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, decodeItem(t, read.Value).N)
}

func testIDsWithSpecialCharactersRoundTrip(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	for _, id := range []string{"with space", "percent%20sign", "plus+and=equals", "ünïcödé-日本語", "emoji-🚀", "quote'and\"double", "semi;colon,comma"} {
		partition := "pk " + id
		_, err := cc.CreateItem(ctx, pk(partition), item{ID: id, PK: partition}.bytes(t), nil)
		require.NoError(t, err, "create %q", id)
		read, err := cc.ReadItem(ctx, pk(partition), id, nil)
		require.NoError(t, err, "read %q", id)
		assert.Equal(t, id, decodeItem(t, read.Value).ID)
		_, err = cc.DeleteItem(ctx, pk(partition), id, nil)
		require.NoError(t, err, "delete %q", id)
	}
	for _, bad := range []string{"a/b", `a\b`, "a?b", "a#b", "", strings.Repeat("x", 256)} {
		_, err := cc.CreateItem(ctx, pk("p"), item{ID: bad, PK: "p"}.bytes(t), nil)
		var ve *cdb.ValidationError
		assert.True(t, errors.As(err, &ve), "id %q must be refused before sending, got %v", bad, err)
	}
}

func testSameIDInTwoPartitions(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("left"), item{ID: "same", PK: "left", N: 1}.bytes(t), nil)
	require.NoError(t, err)
	_, err = cc.CreateItem(ctx, pk("right"), item{ID: "same", PK: "right", N: 2}.bytes(t), nil)
	require.NoError(t, err, "ids are unique per logical partition only")
	read, err := cc.ReadItem(ctx, pk("right"), "same", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, decodeItem(t, read.Value).N)
}

func testPatchOperations(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	doc := []byte(`{"id":"p","pk":"p","n":1,"old":"x","list":[1,2],"nested":{"a":1}}`)
	_, err := cc.CreateItem(ctx, pk("p"), doc, nil)
	require.NoError(t, err)

	var ops cdb.PatchOperations
	ops.AppendSet("/status", "leased")
	ops.AppendIncrement("/n", 41)
	ops.AppendAdd("/list/-", 3)
	ops.AppendReplace("/nested/a", 2)
	ops.AppendRemove("/old")
	ops.AppendMove("/nested", "/moved")
	_, err = cc.PatchItem(ctx, pk("p"), "p", ops, nil)
	require.NoError(t, err)

	read, err := cc.ReadItem(ctx, pk("p"), "p", nil)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(read.Value, &got))
	assert.Equal(t, "leased", got["status"])
	assert.EqualValues(t, 42, got["n"])
	assert.Equal(t, []any{1.0, 2.0, 3.0}, got["list"])
	assert.NotContains(t, got, "old")
	assert.NotContains(t, got, "nested")
	assert.Equal(t, map[string]any{"a": 2.0}, got["moved"])

	var tooMany cdb.PatchOperations
	for i := 0; i < 11; i++ {
		tooMany.AppendSet(fmt.Sprintf("/f%d", i), i)
	}
	_, err = cc.PatchItem(ctx, pk("p"), "p", tooMany, nil)
	var ve *cdb.ValidationError
	assert.True(t, errors.As(err, &ve), "11 patch operations must be refused before sending, got %v", err)
}

func testPatchConditionFalse(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("p"), []byte(`{"id":"c","pk":"p","status":"queued"}`), nil)
	require.NoError(t, err)

	var claim cdb.PatchOperations
	claim.SetCondition("from c where c.status = 'queued'")
	claim.AppendSet("/status", "leased")
	_, err = cc.PatchItem(ctx, pk("p"), "c", claim, nil)
	require.NoError(t, err, "the first claim's condition holds")
	_, err = cc.PatchItem(ctx, pk("p"), "c", claim, nil)
	assert.True(t, cdb.IsPreconditionFailed(err), "the second claim's condition is false: %v", err)
}

func testBatchCommitsAllOperations(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	existing, err := cc.CreateItem(ctx, pk("b"), item{ID: "old", PK: "b", N: 1}.bytes(t), nil)
	require.NoError(t, err)
	_, err = cc.CreateItem(ctx, pk("b"), item{ID: "gone", PK: "b"}.bytes(t), nil)
	require.NoError(t, err)

	batch := cc.NewTransactionalBatch(pk("b"))
	batch.CreateItem(item{ID: "new", PK: "b", N: 1}.bytes(t), nil)
	batch.UpsertItem(item{ID: "up", PK: "b", N: 2}.bytes(t), nil)
	batch.ReplaceItem("old", item{ID: "old", PK: "b", N: 3}.bytes(t), &cdb.TransactionalBatchItemOptions{IfMatch: &existing.ETag})
	batch.DeleteItem("gone", nil)
	batch.ReadItem("new", nil)
	resp, err := cc.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)
	require.Len(t, resp.OperationResults, 5)
	assert.Equal(t, http.StatusCreated, resp.OperationResults[0].StatusCode)
	assert.Equal(t, http.StatusOK, resp.OperationResults[2].StatusCode)
	assert.Equal(t, http.StatusNoContent, resp.OperationResults[3].StatusCode)
	assert.Equal(t, "new", decodeItem(t, resp.OperationResults[4].ResourceBody).ID)

	read, err := cc.ReadItem(ctx, pk("b"), "old", nil)
	require.NoError(t, err)
	assert.Equal(t, 3, decodeItem(t, read.Value).N)
	_, err = cc.ReadItem(ctx, pk("b"), "gone", nil)
	assert.True(t, cdb.IsNotFound(err))

	tooMany := cc.NewTransactionalBatch(pk("b"))
	for i := 0; i < 101; i++ {
		tooMany.CreateItem(item{ID: fmt.Sprintf("x%d", i), PK: "b"}.bytes(t), nil)
	}
	_, err = cc.ExecuteTransactionalBatch(ctx, tooMany, nil)
	assert.ErrorIs(t, err, cdb.ErrBatchTooManyOperations, "a 101-operation batch is refused before sending")

	big := cc.NewTransactionalBatch(pk("b"))
	for i := 0; i < 3; i++ {
		big.CreateItem([]byte(fmt.Sprintf(`{"id":"big%d","pk":"b","blob":%q}`, i, strings.Repeat("z", 800*1024))), nil)
	}
	_, err = cc.ExecuteTransactionalBatch(ctx, big, nil)
	assert.ErrorIs(t, err, cdb.ErrBatchTooLarge, "a 2.4 MB batch is refused before sending")
}

func testBatchWithPatch(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoPatchInBatch)
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("b"), []byte(`{"id":"q","pk":"b","status":"queued","attempts":0}`), nil)
	require.NoError(t, err)
	var ops cdb.PatchOperations
	ops.SetCondition("from c where c.status = 'queued'")
	ops.AppendSet("/status", "leased")
	ops.AppendIncrement("/attempts", 1)
	batch := cc.NewTransactionalBatch(pk("b"))
	batch.PatchItem("q", ops, nil)
	batch.CreateItem(item{ID: "lock", PK: "b"}.bytes(t), nil)
	resp, err := cc.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)

	again := cc.NewTransactionalBatch(pk("b"))
	again.PatchItem("q", ops, nil)
	resp, err = cc.ExecuteTransactionalBatch(ctx, again, nil)
	require.NoError(t, err)
	assert.False(t, resp.Success, "the condition no longer holds")
	assert.Equal(t, http.StatusPreconditionFailed, resp.OperationResults[0].StatusCode)
}

func testBatchConflictRollsBack(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	_, err := cc.CreateItem(ctx, pk("r"), item{ID: "taken", PK: "r"}.bytes(t), nil)
	require.NoError(t, err)

	batch := cc.NewTransactionalBatch(pk("r"))
	batch.CreateItem(item{ID: "one", PK: "r"}.bytes(t), nil)
	batch.CreateItem(item{ID: "two", PK: "r"}.bytes(t), nil)
	batch.CreateItem(item{ID: "taken", PK: "r"}.bytes(t), nil)
	batch.CreateItem(item{ID: "four", PK: "r"}.bytes(t), nil)
	resp, err := cc.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err, "a failed batch is a response, not an error")
	assert.False(t, resp.Success)
	require.Len(t, resp.OperationResults, 4)
	index, failure := resp.FailedOperation()
	assert.Equal(t, 2, index)
	assert.True(t, cdb.IsConflict(failure), "a 409: %v", failure)
	assert.Equal(t, http.StatusFailedDependency, resp.OperationResults[3].StatusCode)

	tg.SkipUnless(t, tg.Quirks.NonAtomicBatch)
	assert.Equal(t, http.StatusMultiStatus, resp.StatusCode)
	assert.Equal(t, http.StatusFailedDependency, resp.OperationResults[0].StatusCode)
	assert.Equal(t, http.StatusFailedDependency, resp.OperationResults[1].StatusCode)
	for _, id := range []string{"one", "two"} {
		_, err := cc.ReadItem(ctx, pk("r"), id, nil)
		assert.True(t, cdb.IsNotFound(err), "%s must have been rolled back: %v", id, err)
	}
}

func testBatchStaleIfMatchFails(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	v1, err := cc.CreateItem(ctx, pk("s"), item{ID: "lock", PK: "s", N: 1}.bytes(t), nil)
	require.NoError(t, err)
	_, err = cc.ReplaceItem(ctx, pk("s"), "lock", item{ID: "lock", PK: "s", N: 2}.bytes(t), nil)
	require.NoError(t, err)

	batch := cc.NewTransactionalBatch(pk("s"))
	batch.ReplaceItem("lock", item{ID: "lock", PK: "s", N: 3}.bytes(t), &cdb.TransactionalBatchItemOptions{IfMatch: &v1.ETag})
	resp, err := cc.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err)
	assert.False(t, resp.Success)
	assert.Equal(t, http.StatusPreconditionFailed, resp.OperationResults[0].StatusCode)
}

// seed writes n items spread over partitions p0..p(parts-1), group "g".
func seed(t *testing.T, cc *cdb.ContainerClient, n, parts int) []item {
	t.Helper()
	ctx := suiteContext(t)
	var items []item
	for i := 0; i < n; i++ {
		it := item{ID: fmt.Sprintf("i%03d", i), PK: fmt.Sprintf("p%d", i%parts), N: i, Cat: "g"}
		_, err := cc.CreateItem(ctx, pk(it.PK), it.bytes(t), nil)
		require.NoError(t, err)
		items = append(items, it)
	}
	return items
}

func testQuerySinglePartitionPages(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	seed(t, cc, 30, 3)
	p0 := pk("p0")
	res, err := cc.QueryItems(ctx,
		"SELECT * FROM c WHERE c.pk = @pk AND c.n >= @min ORDER BY c.n DESC",
		[]cdb.QueryParameter{{Name: "@pk", Value: "p0"}, {Name: "@min", Value: 6}},
		&cdb.QueryOptions{PartitionKey: &p0, MaxItemCount: 2})
	require.NoError(t, err)
	var ns []int
	for _, raw := range res.Items {
		ns = append(ns, decodeItem(t, raw).N)
	}
	assert.Equal(t, []int{27, 24, 21, 18, 15, 12, 9, 6}, ns)
	assert.GreaterOrEqual(t, res.Pages, 4, "8 items at 2 a page take at least 4 pages")
}

func testQueryCrossPartitionFilter(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	all := seed(t, cc, 40, 8)
	res, err := cc.QueryItems(ctx, "SELECT VALUE c.id FROM c WHERE c.n < @n",
		[]cdb.QueryParameter{{Name: "@n", Value: 1000}}, &cdb.QueryOptions{MaxItemCount: 3})
	require.NoError(t, err)
	var got []string
	for _, raw := range res.Items {
		var id string
		require.NoError(t, json.Unmarshal(raw, &id))
		got = append(got, id)
	}
	sort.Strings(got)
	var want []string
	for _, it := range all {
		want = append(want, it.ID)
	}
	assert.Equal(t, want, got, "every continuation is followed, empty pages included")
}

func testQueryCrossPartitionOrderByRefused(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.ServesCrossPartition)
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	seed(t, cc, 4, 2)
	for _, q := range []string{
		"SELECT * FROM c ORDER BY c.n",
		"SELECT TOP 1 * FROM c",
		"SELECT VALUE COUNT(1) FROM c",
		"SELECT DISTINCT VALUE c.pk FROM c",
	} {
		_, err := cc.QueryItems(ctx, q, nil, nil)
		requireStatus(t, err, http.StatusBadRequest, q)
		var ce *cdb.CosmosError
		require.True(t, errors.As(err, &ce))
		assert.Equal(t, 1004, ce.SubStatusCode, "%s: the gateway cannot serve it cross-partition", q)
	}
}

func testQueryPerRange(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	all := seed(t, cc, 40, 10)
	ranges, err := cc.ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)
	require.NotEmpty(t, ranges)

	byRange, err := cc.QueryItemsPerRange(ctx,
		"SELECT TOP 100 * FROM c WHERE c.cat = @g ORDER BY c.cat ASC, c.n ASC",
		[]cdb.QueryParameter{{Name: "@g", Value: "g"}}, nil)
	require.NoError(t, err)
	seen := map[string]bool{}
	for rangeID, res := range byRange {
		last := -1
		for _, raw := range res.Items {
			it := decodeItem(t, raw)
			assert.False(t, seen[it.ID], "%s returned by two ranges", it.ID)
			seen[it.ID] = true
			assert.Greater(t, it.N, last, "range %s is ordered", rangeID)
			last = it.N
		}
	}
	assert.Len(t, seen, len(all), "the ranges together hold every document")
}

func testQueryValueCount(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	ctx := suiteContext(t)
	seed(t, cc, 9, 3)
	p1 := pk("p1")
	res, err := cc.QueryItems(ctx, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk",
		[]cdb.QueryParameter{{Name: "@pk", Value: "p1"}}, &cdb.QueryOptions{PartitionKey: &p1})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.JSONEq(t, "3", string(res.Items[0]))

	empty := pk("nobody")
	res, err = cc.QueryItems(ctx, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk",
		[]cdb.QueryParameter{{Name: "@pk", Value: "nobody"}}, &cdb.QueryOptions{PartitionKey: &empty})
	require.NoError(t, err)
	require.Len(t, res.Items, 1, "COUNT over nothing is [0]")
	assert.JSONEq(t, "0", string(res.Items[0]))
}

func testMalformedQuery(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	p := pk("p")
	_, err := cc.QueryItems(suiteContext(t), "SELECT * FORM c WHERE", nil, &cdb.QueryOptions{PartitionKey: &p})
	requireStatus(t, err, http.StatusBadRequest, "a malformed query")
	_, err = cc.QueryItems(suiteContext(t), "SELECT * FROM c WHERE c.pk = p", []cdb.QueryParameter{{Name: "p", Value: 1}}, &cdb.QueryOptions{PartitionKey: &p})
	var ve *cdb.ValidationError
	assert.True(t, errors.As(err, &ve), "a parameter name without @ is refused before sending, got %v", err)
}

func testErrorsCarryDiagnostics(t *testing.T, tg *Target) {
	cc := newContainer(t, tg.Open(t))
	_, err := cc.ReadItem(suiteContext(t), pk("p"), "nothing-here", nil)
	var ce *cdb.CosmosError
	require.True(t, errors.As(err, &ce), "got %T %v", err, err)
	assert.Equal(t, http.StatusNotFound, ce.StatusCode)
	assert.Equal(t, "ReadItem", ce.Operation)
	assert.NotEmpty(t, ce.Message)
	pe := cdb.ToProviderError("read", err)
	assert.False(t, cdb.IsRetryable(pe), "404 is permanent")
}

func testStatsCountRequestsAndCharge(t *testing.T, tg *Target) {
	env := tg.Open(t)
	cc := newContainer(t, env)
	ctx := suiteContext(t)
	// The first read of a partition resolves its range (the container's
	// definition and ranges, requests of their own): counted, but not here.
	_, err := cc.CreateItem(ctx, pk("p"), item{ID: "warm", PK: "p"}.bytes(t), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk("p"), "warm", nil)
	require.NoError(t, err)
	before := env.Client.Stats()
	created, err := cc.CreateItem(ctx, pk("p"), item{ID: "s", PK: "p"}.bytes(t), nil)
	require.NoError(t, err)
	read, err := cc.ReadItem(ctx, pk("p"), "s", nil)
	require.NoError(t, err)
	after := env.Client.Stats()
	assert.Equal(t, before.Requests+2, after.Requests)
	assert.Greater(t, created.RequestCharge, 0.0)
	assert.InDelta(t, created.RequestCharge+read.RequestCharge, after.RequestCharge-before.RequestCharge, 1e-9)
	assert.Equal(t, before.ByOperation["ReadItem"].Requests+1, after.ByOperation["ReadItem"].Requests)
	if env.Fake != nil {
		assert.EqualValues(t, after.Requests, env.Fake.Counts().Requests, "client and server agree on the request count")
	}
}

func testWrongKeyIsUnauthorized(t *testing.T, tg *Target) {
	tg.SkipUnless(t, tg.Quirks.NoAuth)
	env := tg.Open(t)
	opts := cdb.ClientOptions{
		Key:       "dGhpcyBpcyBub3QgdGhlIGtleSB0aGUgZW11bGF0b3IgdXNlcw==",
		Transport: clientTransport(env),
	}
	if opts.Transport == nil {
		opts.TLS = env.TLS // trust what the target's client trusts
	}
	wrong, err := cdb.NewClient(env.Client.Endpoint(), opts)
	require.NoError(t, err)
	_, err = wrong.CreateDatabase(suiteContext(t), UniqueName("cdbtest"))
	requireStatus(t, err, http.StatusUnauthorized, "a request signed with the wrong key")
	assert.NotContains(t, err.Error(), "dGhpcyBpcyBub3Qg", "the key never appears in errors")
}

// clientTransport is the transport the env's client uses (the fake's
// in-process one), or nil for the default.
func clientTransport(env *Env) http.RoundTripper {
	if env.Fake != nil {
		return env.Fake.Transport()
	}
	return nil
}
