package cdb

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// splitAccount is a fake container over four ranges holding n documents,
// each in its own partition, with the client's range cache filled.
func splitAccount(t *testing.T, n int) (*FakeAccount, *ContainerClient) {
	t.Helper()
	return splitAccountWith(t, n, nil)
}

// splitAccountWith is splitAccount with the client's options edited.
func splitAccountWith(t *testing.T, n int, edit func(*ClientOptions)) (*FakeAccount, *ContainerClient) {
	t.Helper()
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 4})
	cc := newFakeContainer(t, acct, edit)
	for i := range n {
		pk := fmt.Sprintf("p%d", i)
		_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString(pk), itemJSON(pk, pk, i), nil)
		require.NoError(t, err)
	}
	_, err := cc.ReadPartitionKeyRanges(testCtx(t), false)
	require.NoError(t, err)
	return acct, cc
}

// countPerRange sums what a per-range COUNT answered.
func countPerRange(t *testing.T, res map[string]QueryResult) int {
	t.Helper()
	total := 0
	for _, r := range res {
		for _, raw := range r.Items {
			var n int
			require.NoError(t, json.Unmarshal(raw, &n))
			total += n
		}
	}
	return total
}

// After a split the service may list the split ranges beside their children
// for a while. A range another names as its parent is left out, so a
// per-range query reads every document once, at the first re-plan, however
// long the parents stay listed.
func TestAPerRangeQueryAfterASplitThatStillListsTheParentsReadsEachDocumentOnce(t *testing.T) {
	acct, cc := splitAccount(t, 40)
	require.NoError(t, acct.SplitPartitionKeyRangesWith("db", "coll", FakeSplitOptions{ListParentsFor: 1000}))
	acct.ResetCounts()
	res, err := cc.QueryItemsPerRange(testCtx(t), "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 40, countPerRange(t, res))
	assert.Len(t, res, 8, "the children, not their parents")
	counts := acct.Counts().ByOperation
	assert.Equal(t, int64(1), counts["ReadPartitionKeyRanges"], "one re-plan")
	assert.Equal(t, int64(4+8), counts["Query"], "the four split ranges (gone), then their children")
	ranges, err := cc.ReadPartitionKeyRanges(testCtx(t), true)
	require.NoError(t, err)
	assert.Len(t, ranges, 8, "the list is read without the parents")
}

// While a split completes, a range answers 410/1007: the same range is
// asked again after a backoff, not re-planned as if it were gone. The ranges
// are asked at once; on a loaded host one may be asked several times before
// the others start, so each may take every 1007 and still get an answer.
func TestARangeCompletingItsSplitIsAskedAgain(t *testing.T) {
	acct, cc := splitAccountWith(t, 40, func(o *ClientOptions) { o.Retry.MaxAttempts = 12 + 1 })
	_, err := cc.ReadPartitionKeyRanges(testCtx(t), true) // nothing split yet
	require.NoError(t, err)
	require.NoError(t, acct.SplitPartitionKeyRangesWith("db", "coll", FakeSplitOptions{CompletingFor: 12}))
	_, err = cc.ReadPartitionKeyRanges(testCtx(t), true) // the children, completing
	require.NoError(t, err)
	acct.ResetCounts()
	res, err := cc.QueryItemsPerRange(testCtx(t), "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 40, countPerRange(t, res))
	assert.Len(t, res, 8)
	counts := acct.Counts().ByOperation
	assert.Zero(t, counts["ReadPartitionKeyRanges"], "nothing is re-planned: the ranges are there")
	assert.Equal(t, int64(8+12), counts["Query"], "each child once, and again for each 1007")
}

// A range list that does not tile the key space (read while it changes)
// is refused as retryable rather than planned on.
func TestARangeListWithAGapIsRefusedAsRetryable(t *testing.T) {
	_, err := liveRanges([]PartitionKeyRange{
		{ID: "0", MinInclusive: "", MaxExclusive: "80"},
		{ID: "2", MinInclusive: "C0", MaxExclusive: "FF", Parents: []string{"1"}},
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `gap or overlap at "80"`)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.ErrorContains(t, ce.Unwrap(), `gap or overlap at "80"`, "the coverage check's error stays reachable")
	assert.True(t, IsRetryable(ToProviderError("Fetch", err)))

	live, err := liveRanges([]PartitionKeyRange{
		{ID: "0", MinInclusive: "", MaxExclusive: "80"},
		{ID: "1", MinInclusive: "80", MaxExclusive: "FF"},
		{ID: "2", MinInclusive: "80", MaxExclusive: "C0", Parents: []string{"1"}},
		{ID: "3", MinInclusive: "C0", MaxExclusive: "FF", Parents: []string{"1"}},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "2", "3"}, []string{live[0].ID, live[1].ID, live[2].ID})
}

// A query for a few partition keys goes to the ranges that hold them; after
// a split it goes to their children, and each document still comes once.
func TestAQueryForPartitionKeysFollowsASplitAndReadsEachDocumentOnce(t *testing.T) {
	acct, cc := splitAccount(t, 40)
	keys := []PartitionKey{NewPartitionKeyString("p1"), NewPartitionKeyString("p7"), NewPartitionKeyString("p19"), NewPartitionKeyString("p33")}
	const query = `SELECT VALUE c.id FROM c WHERE c.pk IN ("p1", "p7", "p19", "p33")`
	ids := func(res QueryResult) []string {
		var out []string
		for _, raw := range res.Items {
			var id string
			require.NoError(t, json.Unmarshal(raw, &id))
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	acct.ResetCounts()
	res, err := cc.QueryItemsForPartitionKeys(testCtx(t), query, nil, keys, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"p1", "p19", "p33", "p7"}, ids(res))
	counts := acct.Counts()
	assert.LessOrEqual(t, counts.ByOperation["Query"], int64(len(keys)), "a query to each range holding a key, at most")
	assert.Zero(t, counts.CrossPartitionQueries)

	require.NoError(t, acct.SplitPartitionKeyRanges("db", "coll"))
	acct.ResetCounts()
	res, err = cc.QueryItemsForPartitionKeys(testCtx(t), query, nil, keys, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"p1", "p19", "p33", "p7"}, ids(res), "each once, from the children")
	assert.Equal(t, int64(1), acct.Counts().ByOperation["ReadPartitionKeyRanges"], "the client's ranges were the parents: one re-plan")
}

// Options that scope a query to one partition or range, or resume one, do
// not apply to a query of several partition keys.
func TestAQueryForPartitionKeysRefusesScopedOptions(t *testing.T) {
	_, cc := splitAccount(t, 0)
	keys := []PartitionKey{NewPartitionKeyString("a"), NewPartitionKeyString("b")}
	for name, o := range map[string]*QueryOptions{
		"partition key": {PartitionKey: &keys[0]},
		"range":         {PartitionKeyRangeID: "0"},
		"continuation":  {ContinuationToken: "x"},
	} {
		_, err := cc.QueryItemsForPartitionKeys(testCtx(t), "SELECT * FROM c", nil, keys, o)
		require.ErrorIs(t, err, ErrInvalidQueryOptions, name)
	}
}
