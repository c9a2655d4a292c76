package cdb

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walkedContainer is a container of the given number of ranges holding
// items: keys partition keys with one item each, and three partition keys
// ("many-0".."many-2") with six each, so some ranges take several pages at
// two items a page. The client then holds a session token of every range,
// too many to send together, so queries across partitions walk the ranges.
func walkedContainer(t *testing.T, ranges, keys int) (*FakeAccount, *ContainerClient, *headerLog, []string) {
	t.Helper()
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: ranges, StaleReadsWithoutSessionToken: true})
	cc, log := newLoggedFakeContainer(t, acct)
	ctx := testCtx(t)
	var ids []string
	put := func(id, pk string) {
		_, err := cc.CreateItem(ctx, NewPartitionKeyString(pk), itemJSON(id, pk, 1), nil)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for i := range keys {
		put(fmt.Sprintf("one-%d", i), fmt.Sprintf("k%d", i))
	}
	for k := range 3 {
		for i := range 6 {
			put(fmt.Sprintf("many-%d-%d", k, i), fmt.Sprintf("many-%d", k))
		}
	}
	_, err := cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	require.False(t, cc.client.sessions.compoundFits(cc.sessionLink(), maxCompoundSessionToken), "the tokens of %d ranges do not fit in one request", ranges)
	log.take()
	return acct, cc, log, ids
}

// itemIDs is the ids of items, in order.
func itemIDs(t *testing.T, items []json.RawMessage) []string {
	t.Helper()
	out := make([]string, len(items))
	for i, raw := range items {
		var doc struct{ ID string }
		require.NoError(t, json.Unmarshal(raw, &doc), "%s", raw)
		out[i] = doc.ID
	}
	return out
}

// assertEachRequestSendsItsRangesTokenOnly: every request named a range,
// carried no token but that range's, and kept its headers small.
func assertEachRequestSendsItsRangesTokenOnly(t *testing.T, sent []sentQuery) {
	t.Helper()
	require.NotEmpty(t, sent)
	largest := 0
	for _, s := range sent {
		if s.plan {
			require.Empty(t, s.token, "the query plan reads no range: no session token")
			continue
		}
		require.NotEmpty(t, s.rangeID, "every page is one request to one range")
		if s.token != "" {
			require.Equal(t, []string{s.rangeID}, tokenRanges(s.token), "a request to range %q sends its range's token only", s.rangeID)
		}
		largest = max(largest, s.headerBytes)
	}
	assert.Less(t, largest, 4*1024, "every request's headers stay far under the gateway's 16 KB")
}

// pageUntilInsideARange pages p until a page ends inside a range (its
// token holds the service's continuation there), returning the ids read.
func pageUntilInsideARange(t *testing.T, p *QueryItemsPager) (ids []string, token string) {
	t.Helper()
	for p.More() {
		page, err := p.NextPage(testCtx(t))
		require.NoError(t, err)
		ids = append(ids, itemIDs(t, page.Items)...)
		if page.ContinuationToken == "" {
			break
		}
		w, err := decodeWalk(page.ContinuationToken, p.walk.Query)
		require.NoError(t, err)
		if len(ids) > 0 && w.Parts[0].Continuation != "" {
			return ids, page.ContinuationToken
		}
	}
	t.Fatal("the walk never stopped inside a range")
	return nil, ""
}

// pageToEnd reads every page left, returning the ids read.
func pageToEnd(t *testing.T, p *QueryItemsPager) []string {
	t.Helper()
	var ids []string
	for p.More() {
		page, err := p.NextPage(testCtx(t))
		require.NoError(t, err)
		ids = append(ids, itemIDs(t, page.Items)...)
		assert.Equal(t, p.More(), page.ContinuationToken != "", "a page has a token exactly when another follows")
	}
	return ids
}

// TestAPagerAcrossThousandsOfRangesSendsEachRangeItsTokenOnly: with a token
// of each of 5,000 ranges (far past the gateway's 16 KB together), a pager
// across partitions reads every item, each page one request to one range
// with that range's token only, and reads this process's own write.
func TestAPagerAcrossThousandsOfRangesSendsEachRangeItsTokenOnly(t *testing.T) {
	_, cc, log, want := walkedContainer(t, 5000, 40)
	require.Greater(t, len(cc.client.sessions.compound(cc.sessionLink())), 16*1024)
	ctx := testCtx(t)
	pk := NewPartitionKeyString("k7")
	_, err := cc.ReplaceItem(ctx, pk, "one-7", itemJSON("one-7", "k7", 2), nil)
	require.NoError(t, err)
	log.take()

	p := cc.NewQueryItemsPager("SELECT * FROM c WHERE c.v >= 1", nil, nil)
	var items []json.RawMessage
	for p.More() {
		page, err := p.NextPage(ctx)
		require.NoError(t, err)
		items = append(items, page.Items...)
	}
	assert.ElementsMatch(t, want, itemIDs(t, items), "every item, once")
	assert.Equal(t, 2, versionsByID(t, items)["one-7"], "the query reads the write before it")
	sent := log.take()
	assertEachRequestSendsItsRangesTokenOnly(t, sent)
	plans := 0
	for _, s := range sent {
		if s.plan {
			plans++
		}
	}
	assert.Equal(t, 1, plans, "the query plan is asked for once, before the first page")
}

// TestAPagersTokenResumesTheWalkInANewPager: a token handed out inside a
// range, given to a new pager, reads exactly the items the first pager had
// not: none twice, none lost. (A new client would too, but reads without
// this one's session tokens, so the stale replica this fake serves them
// from may not have the items yet.)
func TestAPagersTokenResumesTheWalkInANewPager(t *testing.T) {
	_, cc, log, want := walkedContainer(t, 1000, 20)
	const query = "SELECT * FROM c WHERE c.v >= @v"
	params := []QueryParameter{{"@v", 1}}
	first, token := pageUntilInsideARange(t, cc.NewQueryItemsPager(query, params, &QueryOptions{MaxItemCount: 2}))
	assertEachRequestSendsItsRangesTokenOnly(t, log.take())

	rest := pageToEnd(t, cc.NewQueryItemsPager(query, params, &QueryOptions{MaxItemCount: 2, ContinuationToken: token}))
	assert.ElementsMatch(t, want, append(first, rest...), "the first pager's items and the second's: every item once")
	assert.NotEmpty(t, first)
	assert.NotEmpty(t, rest)
	assertEachRequestSendsItsRangesTokenOnly(t, log.take())
}

// TestAPagerFollowsASplitOfTheRangeItIsReading: every range splits while a
// pager is inside one; the pager goes on in the children from where it was,
// and a token handed out before the split resumes in a new pager after it,
// both reading every item once.
func TestAPagerFollowsASplitOfTheRangeItIsReading(t *testing.T) {
	acct, cc, log, want := walkedContainer(t, 1000, 20)
	const query = "SELECT * FROM c"
	p := cc.NewQueryItemsPager(query, nil, &QueryOptions{MaxItemCount: 2})
	first, token := pageUntilInsideARange(t, p)
	require.NoError(t, acct.SplitPartitionKeyRanges("db", "coll"))

	rest := pageToEnd(t, p)
	assert.ElementsMatch(t, want, append(first, rest...), "the pager read every item once across the split")
	assertEachRequestSendsItsRangesTokenOnly(t, log.take())

	resumed := pageToEnd(t, cc.NewQueryItemsPager(query, nil, &QueryOptions{MaxItemCount: 2, ContinuationToken: token}))
	assert.ElementsMatch(t, want, append(first, resumed...), "a token from before the split resumes after it")
}

// TestAPagerRefusesATokenItDidNotHandOutForThisQuery: a walk token that is
// malformed, of another version, of another query, or given with a
// partition key is refused before anything is sent; a walk token of this
// query resumes the walk on any container, however few its ranges.
func TestAPagerRefusesATokenItDidNotHandOutForThisQuery(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 4})
	cc, log := newLoggedFakeContainer(t, acct)
	ctx := testCtx(t)
	for i := range 10 {
		_, err := cc.CreateItem(ctx, NewPartitionKeyString(fmt.Sprint(i)), itemJSON(fmt.Sprint(i), fmt.Sprint(i), 1), nil)
		require.NoError(t, err)
	}
	tokenOf := func(query string) string {
		r, err := newQueryRequest(cc, query, nil, QueryOptions{})
		require.NoError(t, err)
		return startWalk(queryFingerprint(cc.sessionLink(), r.body)).encode()
	}
	const query = "SELECT * FROM c"
	pk := NewPartitionKeyString("1")
	cases := []struct {
		name, token string
		opts        QueryOptions
		problem     string
	}{
		{"not base64", walkTokenPrefix + "%%%", QueryOptions{}, "ContinuationToken is malformed"},
		{"not a walk", walkTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"q":"x"}`)), QueryOptions{}, "ContinuationToken is malformed"},
		{"another version", "cdbwalk9.e30", QueryOptions{}, "another version"},
		{"another query", tokenOf("SELECT * FROM c WHERE c.v = 1"), QueryOptions{}, "belongs to another query"},
		{"with a partition key", tokenOf(query), QueryOptions{PartitionKey: &pk}, "resumes no query of a partition key"},
	}
	log.take()
	for _, tc := range cases {
		tc.opts.ContinuationToken = tc.token
		p := cc.NewQueryItemsPager(query, nil, &tc.opts)
		_, err := p.NextPage(ctx)
		require.ErrorIs(t, err, ErrInvalidQueryOptions, tc.name)
		assert.ErrorContains(t, err, tc.problem, tc.name)
		assert.False(t, p.More(), tc.name)
	}
	assert.Empty(t, log.take(), "nothing is sent for a token refused")

	res, err := cc.QueryItems(ctx, query, nil, &QueryOptions{ContinuationToken: tokenOf(query), MaxItemCount: 3})
	require.NoError(t, err)
	assert.Len(t, res.Items, 10)
	sent := log.take()
	assert.GreaterOrEqual(t, len(sent), 4, "a page per range at least")
	assertEachRequestSendsItsRangesTokenOnly(t, sent)
}

// TestAPagerThatWouldWalkRefusesWhatOnlyAMergeCanAnswer: ORDER BY, TOP,
// DISTINCT and aggregates across partitions are refused as the gateway
// refuses them (400/1004), not answered range by range (each range would
// give its own order, top or count), by the pager and by QueryItems; only
// the query plan is asked for.
func TestAPagerThatWouldWalkRefusesWhatOnlyAMergeCanAnswer(t *testing.T) {
	_, cc, log, _ := walkedContainer(t, 1000, 5)
	ctx := testCtx(t)
	for _, query := range []string{
		"SELECT * FROM c ORDER BY c.id",
		"SELECT TOP 3 * FROM c",
		"SELECT VALUE COUNT(1) FROM c",
		"SELECT DISTINCT c.pk FROM c",
	} {
		p := cc.NewQueryItemsPager(query, nil, nil)
		_, err := p.NextPage(ctx)
		var ce *CosmosError
		require.ErrorAs(t, err, &ce, query)
		assert.Equal(t, 400, ce.StatusCode, query)
		assert.Equal(t, SubStatusCrossPartitionQueryNotServable, ce.SubStatusCode, query)
		sent := log.take()
		require.Len(t, sent, 1, query)
		assert.True(t, sent[0].plan, "%s: only the plan is asked for", query)

		_, err = cc.QueryItems(ctx, query, nil, nil)
		require.ErrorAs(t, err, &ce, "QueryItems, range by range too: %s", query)
		assert.Equal(t, SubStatusCrossPartitionQueryNotServable, ce.SubStatusCode, query)
		assert.Len(t, log.take(), 1, query)
	}
}
