package fakecosmos

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var crossPartition = hdr{"x-ms-documentdb-query-enablecrosspartition": "True"}

// seed creates n documents spread over partitions p0..p(parts-1), with
// id dNN and a number n.
func seed(c *testClient, n, parts int) []string {
	var all []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("d%02d", i)
		c.createDoc(map[string]any{"id": id, "pk": fmt.Sprintf("p%d", i%parts), "n": i, "status": []string{"queued", "done"}[i%2]})
		all = append(all, id)
	}
	return all
}

func rangeIDs(t *testing.T, c *testClient) []string {
	t.Helper()
	r := c.do("GET", collPath+"/pkranges", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var out []string
	for _, pr := range r.object(t)["PartitionKeyRanges"].([]any) {
		out = append(out, pr.(map[string]any)["id"].(string))
	}
	return out
}

func TestQueryReturnsDocumentsWithTheGatewayShape(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	seed(c, 4, 2)
	r := c.query("SELECT * FROM c WHERE c.pk = @pk", map[string]any{"@pk": "p0"}, pkHeader("p0"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	body := r.object(t)
	assert.Contains(t, body, "_rid")
	assert.EqualValues(t, 2, body["_count"])
	assert.Len(t, body["Documents"], 2)
	assert.Equal(t, "2", r.header.Get("x-ms-item-count"))
	assert.Empty(t, r.header.Get("x-ms-continuation"))

	value := c.query("SELECT VALUE c.n FROM c", nil, pkHeader("p0"))
	assert.Equal(t, []any{float64(0), float64(2)}, value.object(t)["Documents"], "SELECT VALUE returns scalars")
}

func TestQueryAcceptsTheSDKQueryHeader(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	seed(c, 2, 1)
	r := c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c"}, pkHeader("p0").with("x-ms-documentdb-query", "True").with("Content-Type", "application/query+json"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.EqualValues(t, 2, r.object(t)["_count"])
}

func TestQueryRequestRefusals(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r := c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c"}, pkHeader("p").with("x-ms-documentdb-isquery", "True"))
	assert.Equal(t, http.StatusBadRequest, r.status, "Content-Type must be application/query+json")
	r = c.query("SELECT * FROM c WHERE c.n = @n", map[string]any{"n": 1}, pkHeader("p"))
	assert.Equal(t, http.StatusBadRequest, r.status, "parameter names start with @")
	r = c.query("SELEKT * FROM c", nil, pkHeader("p"))
	assert.Equal(t, http.StatusBadRequest, r.status, "syntax error")
	r = c.query("SELECT * FROM c WHERE c.n = @missing", nil, pkHeader("p"))
	assert.Equal(t, http.StatusBadRequest, r.status, "a missing parameter")
	r = c.query("SELECT * FROM c", nil, pkHeader("p").with("x-ms-continuation", "garbage"))
	assert.Equal(t, http.StatusBadRequest, r.status, "a bad continuation")
}

func TestCrossPartitionQueryNeedsTheEnableHeader(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r := c.query("SELECT * FROM c", nil, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, msgCrossPartitionDisabled, errorText(t, r))
}

func TestCrossPartitionOrderByAnswers400WithSubstatus1004(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	for _, text := range []string{
		"SELECT * FROM c ORDER BY c.n",
		"SELECT TOP 1 * FROM c",
		"SELECT * FROM c OFFSET 1 LIMIT 1",
		"SELECT DISTINCT c.status FROM c",
		"SELECT VALUE COUNT(1) FROM c",
	} {
		r := c.query(text, nil, crossPartition)
		require.Equal(t, http.StatusBadRequest, r.status, text)
		assert.Equal(t, "1004", r.subStatus(), text)
		assert.Equal(t, msgCrossPartitionNotServable, errorText(t, r), text)
	}
}

func TestOrderByTopAndCountWorkWithAPartitionKeyOrARange(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	seed(c, 10, 2)

	r := c.query("SELECT * FROM c ORDER BY c.n DESC", nil, pkHeader("p0").with("x-ms-documentdb-query-enablecrosspartition", "True"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	docs := r.object(t)["Documents"].([]any)
	var ns []float64
	for _, d := range docs {
		ns = append(ns, d.(map[string]any)["n"].(float64))
	}
	assert.Equal(t, []float64{8, 6, 4, 2, 0}, ns)

	r = c.query("SELECT TOP 2 VALUE c.n FROM c ORDER BY c.n", nil, pkHeader("p1"))
	assert.Equal(t, []any{float64(1), float64(3)}, r.object(t)["Documents"])
	r = c.query("SELECT VALUE COUNT(1) FROM c", nil, pkHeader("p1"))
	assert.Equal(t, []any{float64(5)}, r.object(t)["Documents"])

	total := 0.0
	for _, id := range rangeIDs(t, c) {
		r := c.query("SELECT VALUE COUNT(1) FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": id})
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		total += r.object(t)["Documents"].([]any)[0].(float64)
		r = c.query("SELECT * FROM c ORDER BY c.n", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": id})
		assert.Equal(t, http.StatusOK, r.status, "ORDER BY is served per range")
	}
	assert.EqualValues(t, 10, total)
}

func TestMultiFieldOrderByNeedsACompositeIndex(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	c.createContainer("db", map[string]any{
		"id": "coll", "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2},
		"indexingPolicy": map[string]any{"indexingMode": "consistent", "automatic": true, "compositeIndexes": []any{
			[]any{map[string]any{"path": "/status", "order": "ascending"}, map[string]any{"path": "/n", "order": "descending"}},
		}},
	})
	seed(c, 6, 1)
	h := pkHeader("p0")
	for text, want := range map[string]int{
		"SELECT * FROM c ORDER BY c.status ASC, c.n DESC":  http.StatusOK,
		"SELECT * FROM c ORDER BY c.status DESC, c.n ASC":  http.StatusOK, // all inverted
		"SELECT * FROM c ORDER BY c.status ASC, c.n ASC":   http.StatusBadRequest,
		"SELECT * FROM c ORDER BY c.n DESC, c.status ASC":  http.StatusBadRequest, // other order of paths
		"SELECT * FROM c ORDER BY c.status, c.n DESC, c.x": http.StatusBadRequest,
		"SELECT * FROM c ORDER BY c.n":                     http.StatusOK,
	} {
		r := c.query(text, nil, h)
		require.Equal(t, want, r.status, "%s: %s", text, r.body)
		if want == http.StatusBadRequest {
			assert.True(t, strings.HasPrefix(errorText(t, r), msgNoCompositeIndex), "%s: %s", text, errorText(t, r))
		}
	}
	r := c.query("SELECT VALUE c.id FROM c ORDER BY c.status ASC, c.n DESC", nil, h)
	assert.Equal(t, []any{"d05", "d03", "d01", "d04", "d02", "d00"}, r.object(t)["Documents"], "done < queued, then n descending")
}

func TestSinglePartitionPagingFollowsTheContinuation(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	seed(c, 7, 1)
	pages, docs := c.queryAll("SELECT * FROM c", pkHeader("p0").with("x-ms-max-item-count", "3"))
	assert.Len(t, pages, 3)
	assert.Equal(t, []string{"d00", "d01", "d02", "d03", "d04", "d05", "d06"}, ids(docs))

	pages, docs = c.queryAll("SELECT * FROM c ORDER BY c.n DESC", pkHeader("p0").with("x-ms-max-item-count", "2"))
	assert.Len(t, pages, 4)
	assert.Equal(t, []string{"d06", "d05", "d04", "d03", "d02", "d01", "d00"}, ids(docs))

	_, docs = c.queryAll("SELECT * FROM c", pkHeader("p0").with("x-ms-max-item-count", "-1"))
	assert.Len(t, docs, 7, "-1 lifts the count limit")
}

func TestContinuationIsEchoedVerbatimAndBoundToItsQuery(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	seed(c, 4, 1)
	first := c.query("SELECT * FROM c", nil, pkHeader("p0").with("x-ms-max-item-count", "1"))
	token := first.header.Get("x-ms-continuation")
	require.NotEmpty(t, token)
	r := c.query("SELECT * FROM c WHERE c.n > 0", nil, pkHeader("p0").with("x-ms-continuation", token))
	assert.Equal(t, http.StatusBadRequest, r.status, "a token from another query")
	r = c.query("SELECT * FROM c", nil, pkHeader("p0").with("x-ms-continuation", token).with("x-ms-max-item-count", "1"))
	assert.Equal(t, "d01", ids([]map[string]any{r.object(t)["Documents"].([]any)[0].(map[string]any)})[0])
}

func TestCrossPartitionPagingIncludesEmptyPagesAndReturnsEverything(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 4})
	c.standardContainer()
	all := seed(c, 20, 5)
	// A filter that only a few documents pass leaves some ranges empty.
	pages, docs := c.queryAll("SELECT * FROM c WHERE c.n < 3", crossPartition.with("x-ms-max-item-count", "2"))
	assert.ElementsMatch(t, []string{"d00", "d01", "d02"}, ids(docs))
	empty := 0
	for _, p := range pages[:len(pages)-1] {
		if p.object(t)["_count"].(float64) == 0 {
			empty++
			assert.NotEmpty(t, p.header.Get("x-ms-continuation"), "an empty page still continues")
		}
	}
	assert.Positive(t, empty, "some range had nothing to return")

	_, docs = c.queryAll("SELECT * FROM c", crossPartition.with("x-ms-max-item-count", "3"))
	assert.ElementsMatch(t, all, ids(docs))
}

func TestRangeTargetedQueriesPartitionTheDocumentsExactly(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 4})
	c.standardContainer()
	all := seed(c, 40, 13)
	seen := map[string]string{}
	nonEmpty := 0
	for _, id := range rangeIDs(t, c) {
		_, docs := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-partitionkeyrangeid": id, "x-ms-max-item-count": "7"})
		if len(docs) > 0 {
			nonEmpty++
		}
		for _, d := range docs {
			docID := d["id"].(string)
			_, dup := seen[docID]
			assert.False(t, dup, "%s is in ranges %s and %s", docID, seen[docID], id)
			seen[docID] = id
		}
	}
	var got []string
	for id := range seen {
		got = append(got, id)
	}
	sort.Strings(got)
	assert.Equal(t, all, got, "the union over ranges is every document")
	assert.Greater(t, nonEmpty, 1, "13 partition keys spread over more than one of 4 ranges")
}

func TestPartitionKeyRangesCoverTheSpace(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 3})
	c.standardContainer()
	r := c.do("GET", collPath+"/pkranges", nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	body := r.object(t)
	assert.Contains(t, body, "_rid")
	assert.EqualValues(t, 3, body["_count"])
	ranges := body["PartitionKeyRanges"].([]any)
	require.Len(t, ranges, 3)
	prevMax := ""
	for i, x := range ranges {
		pr := x.(map[string]any)
		assert.Equal(t, fmt.Sprint(i), pr["id"])
		assert.Equal(t, prevMax, pr["minInclusive"])
		assert.Equal(t, "online", pr["status"])
		assert.Equal(t, []any{}, pr["parents"])
		prevMax = pr["maxExclusive"].(string)
	}
	assert.Equal(t, "FF", prevMax)
}

func TestSplitAnswers410OnTheOldRangeAndChildrenListTheirParents(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	all := seed(c, 30, 11)
	old := rangeIDs(t, c)
	require.NoError(t, srv.SplitPartitionKeyRanges("db", "coll"))

	r := c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": old[0]})
	require.Equal(t, http.StatusGone, r.status)
	assert.Equal(t, "1002", r.subStatus())

	body := c.do("GET", collPath+"/pkranges", nil, nil).object(t)
	ranges := body["PartitionKeyRanges"].([]any)
	require.Len(t, ranges, 4)
	var got []string
	for _, x := range ranges {
		pr := x.(map[string]any)
		assert.NotContains(t, old, pr["id"], "children get new ids")
		assert.Len(t, pr["parents"], 1)
		_, docs := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-partitionkeyrangeid": pr["id"].(string)})
		got = append(got, ids(docs)...)
	}
	sort.Strings(got)
	assert.Equal(t, all, got)
	assert.ErrorContains(t, srv.SplitPartitionKeyRanges("db", "missing"), "split db/missing: 404")
}

func TestCrossPartitionPagingSurvivesASplitBetweenPages(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	all := seed(c, 30, 11)
	h := crossPartition.with("x-ms-max-item-count", "4")
	first := c.query("SELECT * FROM c", nil, h)
	require.Equal(t, http.StatusOK, first.status)
	got := ids(toMaps(first.object(t)["Documents"].([]any)))
	require.NoError(t, srv.SplitPartitionKeyRanges("db", "coll"))
	token := first.header.Get("x-ms-continuation")
	for token != "" {
		r := c.query("SELECT * FROM c", nil, h.with("x-ms-continuation", token))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		got = append(got, ids(toMaps(r.object(t)["Documents"].([]any)))...)
		token = r.header.Get("x-ms-continuation")
	}
	sort.Strings(got)
	assert.Equal(t, all, got, "no document skipped or repeated")
}

// TestARangesContinuationResumesInItsChildrenAfterASplit: a range query's
// continuation, sent to each child of the range after it split, reads in
// each the documents the parent had not reached, every one once; another
// range refuses it.
func TestARangesContinuationResumesInItsChildrenAfterASplit(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	seed(c, 60, 11)
	parents := rangeIDs(t, c)
	_, whole := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-partitionkeyrangeid": parents[0]})
	require.Greater(t, len(whole), 8)
	first := c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": parents[0], "x-ms-max-item-count": "5"})
	require.Equal(t, http.StatusOK, first.status)
	token := first.header.Get("x-ms-continuation")
	require.NotEmpty(t, token)
	r := c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": parents[1], "x-ms-continuation": token})
	assert.Equal(t, http.StatusBadRequest, r.status, "another range refuses the token: %s", r.body)

	require.NoError(t, srv.SplitPartitionKeyRanges("db", "coll"))
	got := ids(toMaps(first.object(t)["Documents"].([]any)))
	for _, x := range c.do("GET", collPath+"/pkranges", nil, nil).object(t)["PartitionKeyRanges"].([]any) {
		pr := x.(map[string]any)
		if pr["parents"].([]any)[0] != parents[0] {
			continue
		}
		_, docs := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-partitionkeyrangeid": pr["id"].(string), "x-ms-continuation": token})
		got = append(got, ids(docs)...)
	}
	want := ids(whole)
	sort.Strings(want)
	sort.Strings(got)
	assert.Equal(t, want, got, "the parent's first page and the children's rest: every document once")
}

func toMaps(list []any) []map[string]any {
	out := make([]map[string]any, len(list))
	for i, x := range list {
		out[i] = x.(map[string]any)
	}
	return out
}

func TestQueryCountersCountScannedReturnedAndCrossPartition(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	seed(c, 6, 2)
	srv.ResetCounts()
	c.query("SELECT * FROM c WHERE c.n >= 4", nil, pkHeader("p0"))
	counts := srv.Counts()
	assert.EqualValues(t, 1, counts.DocumentsScanned, "of p0's 3 documents the range index on /n hands over 1")
	assert.EqualValues(t, 1, counts.DocumentsReturned)
	assert.EqualValues(t, 0, counts.CrossPartitionQueries)

	c.query("SELECT * FROM c", nil, crossPartition)
	counts = srv.Counts()
	assert.EqualValues(t, 7, counts.DocumentsScanned, "no filter: a scan of all 6")
	assert.EqualValues(t, 7, counts.DocumentsReturned)
	assert.EqualValues(t, 1, counts.CrossPartitionQueries)
	assert.EqualValues(t, 2, counts.ByOp[OpQuery])
}

func TestDatabaseAndContainerQueries(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDatabase("other")
	h := hdr{"x-ms-documentdb-isquery": "True", "Content-Type": "application/query+json"}
	r := c.do("POST", "/dbs", map[string]any{"query": "SELECT * FROM root r WHERE r.id = @id", "parameters": []any{map[string]any{"name": "@id", "value": "other"}}}, h)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Len(t, r.object(t)["Databases"], 1)
	r = c.do("POST", "/dbs/db/colls", map[string]any{"query": "SELECT * FROM root r"}, h)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Len(t, r.object(t)["DocumentCollections"], 1)
}
