package cdb

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueryWireCrossPartition(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"_rid":"x","Documents":[{"id":"a"},{"id":"b"}],"_count":2}`,
		"x-ms-request-charge", "2.9", "x-ms-activity-id", "act", "x-ms-item-count", "2"))
	pager := cc.NewQueryItemsPager("SELECT * FROM c WHERE c.status IN (@a, @b) AND c.n < @n",
		[]QueryParameter{{"@a", "queued"}, {"@b", "leased"}, {"@n", 5}},
		&QueryOptions{MaxItemCount: 50, SessionToken: "0:1#9"})
	require.True(t, pager.More())
	page, err := pager.NextPage(testCtx(t))
	require.NoError(t, err)
	assert.False(t, pager.More())
	assert.Equal(t, []json.RawMessage{json.RawMessage(`{"id":"a"}`), json.RawMessage(`{"id":"b"}`)}, page.Items)
	assert.Equal(t, 2.9, page.RequestCharge)
	assert.Equal(t, "act", page.ActivityID)
	assert.Equal(t, "", page.ContinuationToken)
	assert.Equal(t, 1, page.Attempts)

	r := st.requests()[0]
	assert.Equal(t, "POST", r.Method)
	assert.Equal(t, "/dbs/db/colls/coll/docs", r.Path)
	assertSignedFor(t, r, "docs", "dbs/db/colls/coll")
	for k, v := range map[string]string{
		"x-ms-documentdb-isquery":                    "True",
		"x-ms-documentdb-query":                      "True",
		"Content-Type":                               "application/query+json",
		"x-ms-documentdb-query-enablecrosspartition": "True",
		"x-ms-documentdb-partitionkey":               "",
		"x-ms-documentdb-partitionkeyrangeid":        "",
		"x-ms-max-item-count":                        "50",
		"x-ms-continuation":                          "",
		"x-ms-session-token":                         "0:1#9",
	} {
		assert.Equal(t, v, r.Header.Get(k), k)
	}
	assert.Equal(t, `{"query":"SELECT * FROM c WHERE c.status IN (@a, @b) AND c.n < @n","parameters":[{"name":"@a","value":"queued"},{"name":"@b","value":"leased"},{"name":"@n","value":5}]}`, string(r.Body))
}

func TestQueryWireSinglePartition(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"Documents":[],"_count":0}`))
	pk := NewPartitionKeyString("inst-1")
	res, err := cc.QueryItems(testCtx(t), "SELECT * FROM c WHERE c.pk = @pk ORDER BY c.seq", []QueryParameter{{"@pk", "inst-1"}},
		&QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	assert.Empty(t, res.Items)
	assert.Equal(t, 1, res.Pages)
	r := st.requests()[0]
	assert.Equal(t, `["inst-1"]`, r.Header.Get("x-ms-documentdb-partitionkey"))
	assert.Empty(t, r.Header.Get("x-ms-documentdb-query-enablecrosspartition"))
	assert.Empty(t, r.Header.Get("x-ms-max-item-count"), "0 lets the service choose")
	assert.JSONEq(t, `{"query":"SELECT * FROM c WHERE c.pk = @pk ORDER BY c.seq","parameters":[{"name":"@pk","value":"inst-1"}]}`, string(r.Body))
}

func TestQueryFollowsContinuationsThroughEmptyPages(t *testing.T) {
	// Continuations are opaque JSON strings, echoed verbatim.
	tok1 := `{"token":"+RID:~abc#RT:1#TRC:2","range":{"min":"","max":"FF"}}`
	tok2 := `[{"compositeToken":{"token":null,"range":{"min":"05C1","max":"FF"}}}]`
	cc, st := newScriptedContainer(t, func(n int, r wireRequest) (*http.Response, error) {
		switch r.Header.Get("x-ms-continuation") {
		case "":
			return reply(200, `{"Documents":[],"_count":0}`, "x-ms-continuation", tok1, "x-ms-request-charge", "1"), nil
		case tok1:
			return reply(200, `{"Documents":[1,2],"_count":2}`, "x-ms-continuation", tok2, "x-ms-request-charge", "2"), nil
		case tok2:
			return reply(200, `{"Documents":[3],"_count":1}`, "x-ms-request-charge", "3"), nil
		}
		return reply(400, `{"code":"BadRequest","message":"unknown continuation"}`), nil
	})
	res, err := cc.QueryItems(testCtx(t), "SELECT VALUE c.n FROM c", nil, &QueryOptions{MaxItemCount: 2})
	require.NoError(t, err)
	assert.Equal(t, []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`)}, res.Items)
	assert.Equal(t, 3, res.Pages)
	assert.Equal(t, 6.0, res.RequestCharge)
	reqs := st.requests()
	require.Len(t, reqs, 3)
	assert.Equal(t, tok1, reqs[1].Header.Get("x-ms-continuation"))
	assert.Equal(t, tok2, reqs[2].Header.Get("x-ms-continuation"))
	for _, r := range reqs {
		assert.Equal(t, reqs[0].Body, r.Body)
	}
	assert.Equal(t, int64(3), cc.client.Stats().ByOperation["QueryItems"].Requests)
}

func TestQueryPagerResumesFromAContinuationToken(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"Documents":[{"id":"z"}]}`))
	pager := cc.NewQueryItemsPager("SELECT * FROM c", nil, &QueryOptions{ContinuationToken: "tok-7"})
	page, err := pager.NextPage(testCtx(t))
	require.NoError(t, err)
	assert.Len(t, page.Items, 1)
	assert.Equal(t, "tok-7", st.requests()[0].Header.Get("x-ms-continuation"))
	assert.False(t, pager.More())
	_, err = pager.NextPage(testCtx(t))
	assert.ErrorContains(t, err, "no more pages")
}

func TestQueryPagerRetriesTheSamePageAfterAnError(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(
		replyAlways(200, `{"Documents":[1]}`, "x-ms-continuation", "c1"),
		replyAlways(400, `{"code":"BadRequest","message":"transient for this test"}`),
		replyAlways(200, `{"Documents":[2]}`),
	))
	pager := cc.NewQueryItemsPager("SELECT VALUE 1 FROM c", nil, nil)
	_, err := pager.NextPage(testCtx(t))
	require.NoError(t, err)
	_, err = pager.NextPage(testCtx(t))
	require.True(t, HasStatus(err, 400))
	require.True(t, pager.More())
	page, err := pager.NextPage(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, []json.RawMessage{json.RawMessage(`2`)}, page.Items)
	assert.Equal(t, "c1", st.requests()[2].Header.Get("x-ms-continuation"))
}

func TestQueryInputIsValidatedBeforeSending(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"Documents":[]}`))
	pk := NewPartitionKeyString("p")
	cases := []struct {
		name     string
		query    string
		params   []QueryParameter
		opts     *QueryOptions
		sentinel error
	}{
		{"no @", "SELECT * FROM c WHERE c.a = @a", []QueryParameter{{"a", 1}}, nil, ErrInvalidQueryParameter},
		{"bare @", "SELECT * FROM c", []QueryParameter{{"@", 1}}, nil, ErrInvalidQueryParameter},
		{"space", "SELECT * FROM c", []QueryParameter{{"@a b", 1}}, nil, ErrInvalidQueryParameter},
		{"twice", "SELECT * FROM c", []QueryParameter{{"@a", 1}, {"@a", 2}}, nil, ErrInvalidQueryParameter},
		{"unencodable", "SELECT * FROM c", []QueryParameter{{"@a", make(chan int)}}, nil, ErrInvalidQueryParameter},
		{"empty query", "  ", nil, nil, ErrInvalidQueryOptions},
		{"pk and range", "SELECT * FROM c", nil, &QueryOptions{PartitionKey: &pk, PartitionKeyRangeID: "0"}, ErrInvalidQueryOptions},
		{"max item count", "SELECT * FROM c", nil, &QueryOptions{MaxItemCount: -2}, ErrInvalidQueryOptions},
	}
	for _, tc := range cases {
		_, err := cc.QueryItems(testCtx(t), tc.query, tc.params, tc.opts)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, tc.name)
		assert.ErrorIs(t, err, tc.sentinel, tc.name)
		assert.False(t, IsRetryable(ToProviderError("q", err)), tc.name)

		pager := cc.NewQueryItemsPager(tc.query, tc.params, tc.opts)
		require.True(t, pager.More())
		_, err = pager.NextPage(testCtx(t))
		assert.ErrorIs(t, err, tc.sentinel, tc.name)
		assert.False(t, pager.More())
	}
	assert.Equal(t, 0, st.count())
}

func TestCrossPartitionQueryRefusedByGateway(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(400, `{"code":"BadRequest","message":"The provided cross partition query can not be directly served by the gateway."}`,
		"x-ms-substatus", "1004"))
	_, err := cc.QueryItems(testCtx(t), "SELECT * FROM c ORDER BY c.id", nil, nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 400, ce.StatusCode)
	assert.Equal(t, SubStatusCrossPartitionQueryNotServable, ce.SubStatusCode)
	assert.Equal(t, 1, st.count())
	assert.False(t, IsRetryable(ToProviderError("fetch", err)))
}

// ---------------------------------------------------------------------------
// Partition key ranges.

func TestReadPartitionKeyRangesPagesAndCaches(t *testing.T) {
	cc, st := newScriptedContainer(t, func(n int, r wireRequest) (*http.Response, error) {
		if r.Header.Get("x-ms-continuation") == "" {
			return reply(200, `{"_rid":"x","PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80","parents":[],"status":"online"}],"_count":1}`,
				"x-ms-continuation", "next"), nil
		}
		return reply(200, `{"PartitionKeyRanges":[{"id":"1","minInclusive":"80","maxExclusive":"FF","parents":["x"]}],"_count":1}`), nil
	})
	ranges, err := cc.ReadPartitionKeyRanges(testCtx(t), false)
	require.NoError(t, err)
	assert.Equal(t, []PartitionKeyRange{
		{ID: "0", MinInclusive: "", MaxExclusive: "80", Parents: []string{}},
		{ID: "1", MinInclusive: "80", MaxExclusive: "FF", Parents: []string{"x"}},
	}, ranges)
	reqs := st.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "GET", reqs[0].Method)
	assert.Equal(t, "/dbs/db/colls/coll/pkranges", reqs[0].Path)
	assertSignedFor(t, reqs[0], "pkranges", "dbs/db/colls/coll")
	assert.Equal(t, "next", reqs[1].Header.Get("x-ms-continuation"))

	// Cached, also for another ContainerClient of the same container.
	ranges[0].ID = "mutated by the caller"
	again, err := cc.ReadPartitionKeyRanges(testCtx(t), false)
	require.NoError(t, err)
	assert.Equal(t, "0", again[0].ID)
	other, err := cc.client.NewContainer("db", "coll")
	require.NoError(t, err)
	_, err = other.ReadPartitionKeyRanges(testCtx(t), false)
	require.NoError(t, err)
	assert.Equal(t, 2, st.count())

	_, err = cc.ReadPartitionKeyRanges(testCtx(t), true)
	require.NoError(t, err)
	assert.Equal(t, 4, st.count(), "forceRefresh reads again")
}

// rangeTestServer plays a container whose ranges can split: it answers pkranges
// with the current list and range-targeted queries with the range id as the
// only document, or 410/1002 for a range that is gone.
type rangeTestServer struct {
	mu      sync.Mutex
	ranges  string          // pkranges body
	gone    map[string]bool // range ids that reply 410
	queried map[string]int
}

func (s *rangeTestServer) respond(n int, r wireRequest) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.HasSuffix(r.Path, "/pkranges") {
		return reply(200, s.ranges), nil
	}
	id := r.Header.Get("x-ms-documentdb-partitionkeyrangeid")
	s.queried[id]++
	if s.gone[id] {
		return reply(410, `{"code":"Gone","message":"PartitionKeyRangeGone"}`, "x-ms-substatus", "1002"), nil
	}
	return reply(200, `{"Documents":["`+id+`"]}`, "x-ms-request-charge", "1"), nil
}

func TestQueryItemsPerRange(t *testing.T) {
	srv := &rangeTestServer{
		ranges:  `{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80"},{"id":"1","minInclusive":"80","maxExclusive":"FF"}]}`,
		queried: map[string]int{},
	}
	cc, st := newScriptedContainer(t, srv.respond)
	res, err := cc.QueryItemsPerRange(testCtx(t), "SELECT TOP 5 * FROM c ORDER BY c.visibleAt", nil, &QueryOptions{MaxItemCount: 5})
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "1"}, rangeIDs(res))
	assert.Equal(t, []json.RawMessage{json.RawMessage(`"1"`)}, res["1"].Items)
	for _, r := range st.requests() {
		if strings.HasSuffix(r.Path, "/docs") {
			assert.Equal(t, "True", r.Header.Get("x-ms-documentdb-query-enablecrosspartition"))
			assert.Empty(t, r.Header.Get("x-ms-documentdb-partitionkey"))
			assert.Equal(t, "5", r.Header.Get("x-ms-max-item-count"))
		}
	}
}

func TestQueryItemsPerRangeFollowsASplit(t *testing.T) {
	srv := &rangeTestServer{
		ranges:  `{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80"},{"id":"1","minInclusive":"80","maxExclusive":"FF"}]}`,
		gone:    map[string]bool{"1": true},
		queried: map[string]int{},
	}
	cc, _ := newScriptedContainer(t, srv.respond)
	_, err := cc.ReadPartitionKeyRanges(testCtx(t), false) // cache the old layout
	require.NoError(t, err)
	srv.mu.Lock()
	srv.ranges = `{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80"},` +
		`{"id":"2","minInclusive":"80","maxExclusive":"C0","parents":["1"]},{"id":"3","minInclusive":"C0","maxExclusive":"FF","parents":["1"]}]}`
	srv.mu.Unlock()

	res, err := cc.QueryItemsPerRange(testCtx(t), "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "2", "3"}, rangeIDs(res))
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1, "3": 1}, srv.queried,
		"the gone range is asked once (410 on a range-targeted query is not retried blindly), the others once each")
	ranges, _ := cc.ReadPartitionKeyRanges(testCtx(t), false)
	assert.Len(t, ranges, 3, "the cache holds the new layout")
}

func TestQueryItemsPerRangeFindsChildrenByOverlap(t *testing.T) {
	gone := []PartitionKeyRange{{ID: "1", MinInclusive: "80", MaxExclusive: "FF"}}
	fresh := []PartitionKeyRange{
		{ID: "0", MinInclusive: "", MaxExclusive: "80"},
		{ID: "4", MinInclusive: "80", MaxExclusive: "A0"},
		{ID: "5", MinInclusive: "A0", MaxExclusive: "FF"},
	}
	got := replacements(gone, fresh)
	require.Len(t, got, 2)
	assert.Equal(t, "4", got[0].ID)
	assert.Equal(t, "5", got[1].ID)
}

func TestQueryItemsPerRangeStopsOnOtherErrors(t *testing.T) {
	cc, _ := newScriptedContainer(t, func(n int, r wireRequest) (*http.Response, error) {
		if strings.HasSuffix(r.Path, "/pkranges") {
			return reply(200, `{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80"},{"id":"1","minInclusive":"80","maxExclusive":"FF"}]}`), nil
		}
		if r.Header.Get("x-ms-documentdb-partitionkeyrangeid") == "1" {
			return reply(400, `{"code":"BadRequest","message":"syntax error"}`), nil
		}
		return reply(200, `{"Documents":[]}`), nil
	})
	_, err := cc.QueryItemsPerRange(testCtx(t), "SELEC * FROM c", nil, nil)
	assert.True(t, HasStatus(err, 400))
	assert.Contains(t, err.Error(), "range 1")
}

func TestQueryItemsPerRangeRefusesScopedOptions(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{}`))
	pk := NewPartitionKeyString("p")
	for _, o := range []*QueryOptions{{PartitionKey: &pk}, {PartitionKeyRangeID: "0"}, {ContinuationToken: "c"}} {
		_, err := cc.QueryItemsPerRange(testCtx(t), "SELECT * FROM c", nil, o)
		assert.ErrorIs(t, err, ErrInvalidQueryOptions)
	}
	_, err := cc.QueryItemsPerRange(testCtx(t), "SELECT * FROM c", []QueryParameter{{"x", 1}}, nil)
	assert.ErrorIs(t, err, ErrInvalidQueryParameter)
	assert.Equal(t, 0, st.count())
}

func TestQueryItemsPerRangeHonoursCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cc, st := newScriptedContainer(t, replyAlways(200, `{"PartitionKeyRanges":[{"id":"0"}]}`))
	_, err := cc.QueryItemsPerRange(ctx, "SELECT * FROM c", nil, nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, st.count(), "a cancelled context sends nothing")
}

func rangeIDs(m map[string]QueryResult) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
