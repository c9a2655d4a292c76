package fakecosmos

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var incremental = hdr{"a-im": "Incremental feed"}

// changes reads one change feed page of range id (or of the partition in
// h) from etag ("" = from the beginning).
func (c *testClient) changes(h hdr, etag string) testResponse {
	c.t.Helper()
	all := incremental
	for k, v := range h {
		all = all.with(k, v)
	}
	if etag != "" {
		all = all.with("If-None-Match", etag)
	}
	return c.do("GET", docsPath, nil, all)
}

func docIDs(t *testing.T, r testResponse) []string {
	t.Helper()
	var out []string
	for _, d := range r.object(t)["Documents"].([]any) {
		out = append(out, d.(map[string]any)["id"].(string))
	}
	return out
}

func TestChangeFeedFromTheBeginningGivesTheLatestVersionInWriteOrder(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "v": 1})
	c.createDoc(map[string]any{"id": "b", "pk": "p", "v": 1})
	c.createDoc(map[string]any{"id": "gone", "pk": "q"})
	r := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = c.do("DELETE", docPath("gone"), nil, pkHeader("q"))
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)

	range0 := hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}
	r = c.changes(range0, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"b", "a"}, docIDs(t, r), "a appears once, at its last write; deleted items do not appear")
	docs := r.object(t)["Documents"].([]any)
	assert.EqualValues(t, 2, docs[1].(map[string]any)["v"])
	assert.Equal(t, "2", r.header.Get("x-ms-item-count"))
	etag := r.header.Get("etag")
	require.NotEmpty(t, etag, "the etag is the continuation")
	assert.Equal(t, `"5"`, etag, "the range's LSN after five writes")
	assert.Equal(t, "0:-1#5", r.header.Get("x-ms-session-token"))

	r = c.changes(range0, etag)
	assert.Equal(t, http.StatusNotModified, r.status, "nothing new: %s", r.body)
	assert.Equal(t, etag, r.header.Get("etag"))

	c.createDoc(map[string]any{"id": "c", "pk": "q"})
	r = c.changes(range0, etag)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"c"}, docIDs(t, r))
	assert.Equal(t, `"6"`, r.header.Get("etag"))
}

func TestChangeFeedFromNowAndPerPartitionKey(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	seed(c, 6, 3)

	r := c.changes(pkHeader("p1"), "*")
	assert.Equal(t, http.StatusNotModified, r.status, "from now: nothing yet")
	now := r.header.Get("etag")
	require.NotEmpty(t, now)

	c.createDoc(map[string]any{"id": "new-p1", "pk": "p1"})
	c.createDoc(map[string]any{"id": "new-p2", "pk": "p2"})
	r = c.changes(pkHeader("p1"), now)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"new-p1"}, docIDs(t, r), "a partition key's feed holds only its own items")

	r = c.changes(pkHeader("p1"), "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"d01", "d04", "new-p1"}, docIDs(t, r))
}

func TestChangeFeedPagesWithMaxItemCountAndKeepsABatchTogether(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	for _, id := range []string{"a", "b", "c"} {
		c.createDoc(map[string]any{"id": id, "pk": "p"})
	}
	r := c.do("POST", docsPath, []map[string]any{
		{"operationType": "Create", "resourceBody": map[string]any{"id": "x", "pk": "p"}},
		{"operationType": "Create", "resourceBody": map[string]any{"id": "y", "pk": "p"}},
	}, pkHeader("p").with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "True"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	range0 := hdr{"x-ms-documentdb-partitionkeyrangeid": "0", "x-ms-max-item-count": "2"}
	var pages [][]string
	etag := ""
	for i := 0; i < 10; i++ {
		r := c.changes(range0, etag)
		if r.status == http.StatusNotModified {
			break
		}
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		pages = append(pages, docIDs(t, r))
		etag = r.header.Get("etag")
	}
	assert.Equal(t, [][]string{{"a", "b"}, {"c", "x", "y"}}, pages, "a page ends after a whole LSN, even past the count: a batch's items are never split")
	r = c.changes(range0.with("x-ms-max-item-count", "1"), `"3"`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"x", "y"}, docIDs(t, r))
	assert.Equal(t, `"4"`, r.header.Get("etag"))
}

func TestChangeFeedRefusals(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()

	r := c.changes(nil, "")
	assert.Equal(t, http.StatusBadRequest, r.status, "a range or a partition key is needed")
	r = c.do("GET", docsPath, nil, hdr{"a-im": "Full-Fidelity Feed", "x-ms-documentdb-partitionkeyrangeid": "0"})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "Full-Fidelity Feed")
	r = c.changes(hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}, "not-an-lsn")
	assert.Equal(t, http.StatusBadRequest, r.status)
	r = c.changes(hdr{"x-ms-documentdb-partitionkeyrangeid": "0", "x-ms-start-epk": "", "x-ms-end-epk": "20"}, "")
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "x-ms-start-epk")

	require.NoError(t, srv.SplitPartitionKeyRanges(testDB, testColl))
	r = c.changes(hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}, "")
	assert.Equal(t, http.StatusGone, r.status)
	assert.Equal(t, "1002", r.subStatus())
}

func TestChangeFeedFromAPointInTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	_, c := newTestServer(t, Options{Now: func() time.Time { return now }})
	c.dateOf = func() time.Time { return now }
	c.standardContainer()
	c.createDoc(map[string]any{"id": "old", "pk": "p"})
	now = now.Add(time.Minute)
	c.createDoc(map[string]any{"id": "new", "pk": "p"})

	r := c.changes(hdr{"x-ms-documentdb-partitionkeyrangeid": "0", "If-Modified-Since": now.Format(http.TimeFormat)}, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []string{"new"}, docIDs(t, r))
}
