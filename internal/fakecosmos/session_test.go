package fakecosmos

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sessionLSN reads "<range>:-1#<lsn>".
func sessionLSN(t *testing.T, r testResponse) (rangeID string, lsn int64) {
	t.Helper()
	token := r.header.Get("x-ms-session-token")
	rangeID, vector, ok := strings.Cut(token, ":")
	require.True(t, ok, "session token %q", token)
	_, global, ok := strings.Cut(vector, "#")
	require.True(t, ok, "session token %q", token)
	lsn, err := strconv.ParseInt(global, 10, 64)
	require.NoError(t, err, "session token %q", token)
	return rangeID, lsn
}

func withSessionToken(h hdr, token string) hdr {
	if token == "" {
		return h
	}
	return h.with("x-ms-session-token", token)
}

func TestEveryWriteBumpsItsRangesLSNAndAnswersWithIt(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r1 := c.createDoc(map[string]any{"id": "a", "pk": "p"})
	id1, lsn1 := sessionLSN(t, r1)
	assert.Equal(t, "0", id1)
	assert.Equal(t, strconv.FormatInt(lsn1, 10), r1.header.Get("lsn"))

	r2 := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p"))
	require.Equal(t, http.StatusOK, r2.status)
	_, lsn2 := sessionLSN(t, r2)
	assert.Equal(t, lsn1+1, lsn2)

	read := c.do("GET", docPath("a"), nil, pkHeader("p"))
	_, lsn3 := sessionLSN(t, read)
	assert.Equal(t, lsn2, lsn3, "a read does not move the LSN")

	refused := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p"}, pkHeader("p").with("If-Match", `"stale"`))
	require.Equal(t, http.StatusPreconditionFailed, refused.status)
	_, lsn4 := sessionLSN(t, refused)
	assert.Equal(t, lsn2, lsn4, "a refusal names the range's position and writes nothing")

	batch := c.do("POST", docsPath, []any{map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "b", "pk": "p"}}},
		pkHeader("p").with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "True"))
	require.Equal(t, http.StatusOK, batch.status, "%s", batch.body)
	_, lsn5 := sessionLSN(t, batch)
	assert.Equal(t, lsn2+1, lsn5, "a batch is one write")
}

func TestRangesCountTheirWritesApart(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 4})
	c.standardContainer()
	byRange := map[string]int64{}
	for i := range 40 {
		pk := "p" + strconv.Itoa(i)
		id, lsn := sessionLSN(t, c.createDoc(map[string]any{"id": "a", "pk": pk}))
		assert.Equal(t, byRange[id]+1, lsn, "range %s counts only its own writes", id)
		byRange[id] = lsn
	}
	assert.Len(t, byRange, 4, "40 keys land in every range")

	// A range-targeted query answers with that range's position.
	for id, lsn := range byRange {
		r := c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": id})
		require.Equal(t, http.StatusOK, r.status)
		gotID, gotLSN := sessionLSN(t, r)
		assert.Equal(t, id, gotID)
		assert.Equal(t, lsn, gotLSN)
	}
}

func TestWithoutStaleModeTokensChangeNothing(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	r := c.do("GET", docPath("a"), nil, pkHeader("p"))
	assert.Equal(t, http.StatusOK, r.status, "read without a token sees the write")
	ahead := c.do("GET", docPath("a"), nil, pkHeader("p").with("x-ms-session-token", "0:-1#999"))
	assert.Equal(t, http.StatusOK, ahead.status, "no lagging replica, nothing to wait for")
}

func TestMalformedSessionTokensAreRefused(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	for _, bad := range []string{"garbage", "0:", ":-1#3", "0:-1#x", "0:a#3", "0:-1#3#r", "0:-1#3,1"} {
		r := c.do("GET", docPath("a"), nil, pkHeader("p").with("x-ms-session-token", bad))
		assert.Equal(t, http.StatusBadRequest, r.status, bad)
	}
	for _, good := range []string{"0:-1#1", "0:1", "0:2#1#1=1#2=0", "0:-1#1,1:-1#5", " 0:-1#1 "} {
		r := c.do("GET", docPath("a"), nil, pkHeader("p").with("x-ms-session-token", good))
		assert.Equal(t, http.StatusOK, r.status, good)
	}
}

// staleServer is a one-range container in the stale mode.
func staleServer(t *testing.T, ranges int) *testClient {
	_, c := newTestServer(t, Options{StaleReadsWithoutSessionToken: true, PartitionKeyRanges: ranges})
	c.standardContainer()
	return c
}

func readDoc(c *testClient, pk, id, token string) testResponse {
	return c.do("GET", docPath(id), nil, withSessionToken(pkHeader(pk), token))
}

func TestStaleReadWithoutTokenSeesThePreviousVersion(t *testing.T) {
	c := staleServer(t, 1)
	created := c.createDoc(map[string]any{"id": "a", "pk": "p", "v": 1})
	createdToken := created.header.Get("x-ms-session-token")

	r := readDoc(c, "p", "a", "")
	assert.Equal(t, http.StatusNotFound, r.status, "just created: the lagging replica has nothing")
	assert.Empty(t, r.subStatus())
	r = readDoc(c, "p", "a", createdToken)
	require.Equal(t, http.StatusOK, r.status, "the write's token reads it")
	assert.EqualValues(t, 1, r.object(t)["v"])

	replaced := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p"))
	require.Equal(t, http.StatusOK, replaced.status)
	r = readDoc(c, "p", "a", "")
	require.Equal(t, http.StatusOK, r.status)
	assert.EqualValues(t, 1, r.object(t)["v"], "without a token: the version before the write")
	assert.Equal(t, created.header.Get("etag"), r.header.Get("etag"))
	r = readDoc(c, "p", "a", createdToken)
	assert.EqualValues(t, 1, r.object(t)["v"], "an older token: still the old version")
	r = readDoc(c, "p", "a", replaced.header.Get("x-ms-session-token"))
	assert.EqualValues(t, 2, r.object(t)["v"], "the write's token: the new version")
	assert.Equal(t, replaced.header.Get("etag"), r.header.Get("etag"))

	deleted := c.do("DELETE", docPath("a"), nil, pkHeader("p"))
	require.Equal(t, http.StatusNoContent, deleted.status)
	r = readDoc(c, "p", "a", "")
	require.Equal(t, http.StatusOK, r.status, "just deleted: the lagging replica still has it")
	assert.EqualValues(t, 2, r.object(t)["v"])
	r = readDoc(c, "p", "a", deleted.header.Get("x-ms-session-token"))
	assert.Equal(t, http.StatusNotFound, r.status)

	recreated := c.createDoc(map[string]any{"id": "a", "pk": "p", "v": 3})
	r = readDoc(c, "p", "a", deleted.header.Get("x-ms-session-token"))
	assert.Equal(t, http.StatusNotFound, r.status, "the recreate is not covered: the state before it, deleted")
	r = readDoc(c, "p", "a", recreated.header.Get("x-ms-session-token"))
	assert.EqualValues(t, 3, r.object(t)["v"])
}

func TestStaleModeLeavesWritesAndBatchesOnThePrimary(t *testing.T) {
	c := staleServer(t, 1)
	c.createDoc(map[string]any{"id": "a", "pk": "p", "v": 1})
	assert.Equal(t, http.StatusConflict, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")).status,
		"a write sees the current state")
	batch := c.do("POST", docsPath, []any{map[string]any{"operationType": "Read", "id": "a"}},
		pkHeader("p").with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "True"))
	require.Equal(t, http.StatusOK, batch.status, "%s", batch.body)
	assert.EqualValues(t, http.StatusOK, batch.array(t)[0]["statusCode"], "a batch's read is served by the primary")
}

func TestStaleQueriesSeeEachDocumentAsItsTokenCoversIt(t *testing.T) {
	c := staleServer(t, 1)
	first := c.createDoc(map[string]any{"id": "a", "pk": "p", "v": 1})
	firstToken := first.header.Get("x-ms-session-token")
	c.createDoc(map[string]any{"id": "b", "pk": "p", "v": 1})
	second := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p"))
	secondToken := second.header.Get("x-ms-session-token")

	query := func(token string, scope hdr) map[string]any {
		t.Helper()
		_, docs := c.queryAll("SELECT c.id, c.v FROM c", withSessionToken(scope, token))
		out := map[string]any{}
		for _, d := range docs {
			out[d["id"].(string)] = d["v"]
		}
		return out
	}
	for name, scope := range map[string]hdr{
		"partition": pkHeader("p"),
		"range":     {"x-ms-documentdb-partitionkeyrangeid": "0"},
		"cross":     {"x-ms-documentdb-query-enablecrosspartition": "True"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, map[string]any{"a": 1.0}, query("", scope), "no token: a before its replace, b not yet created")
			assert.Equal(t, map[string]any{"a": 1.0}, query(firstToken, scope), "a's create covered, b's not")
			assert.Equal(t, map[string]any{"a": 2.0, "b": 1.0}, query(secondToken, scope), "everything covered")
		})
	}

	// Ordered and aggregate queries see the same replica.
	count := c.query("SELECT VALUE COUNT(1) FROM c", nil, pkHeader("p"))
	require.Equal(t, http.StatusOK, count.status)
	assert.Equal(t, []any{1.0}, count.object(t)["Documents"])
	count = c.query("SELECT VALUE COUNT(1) FROM c", nil, pkHeader("p").with("x-ms-session-token", secondToken))
	assert.Equal(t, []any{2.0}, count.object(t)["Documents"])

	// A read feed too.
	feed := c.do("GET", docsPath, nil, pkHeader("p"))
	require.Equal(t, http.StatusOK, feed.status)
	assert.Equal(t, "1", feed.header.Get("x-ms-item-count"))
}

func TestStaleModeHonoursEachRangesSegmentOfACompoundToken(t *testing.T) {
	c := staleServer(t, 2)
	tokens := map[string]string{} // range id → token of the last write there
	pkOf := map[string]string{}
	for i := 0; len(pkOf) < 2 && i < 100; i++ {
		pk := "p" + strconv.Itoa(i)
		r := c.createDoc(map[string]any{"id": "a", "pk": pk})
		id, _ := sessionLSN(t, r)
		if _, seen := pkOf[id]; !seen {
			pkOf[id] = pk
			tokens[id] = r.header.Get("x-ms-session-token")
		}
	}
	require.Len(t, pkOf, 2)
	compound := tokens["0"] + "," + tokens["1"]
	for id, pk := range pkOf {
		assert.Equal(t, http.StatusOK, readDoc(c, pk, "a", compound).status, "range %s: its segment covers the create", id)
		other := tokens[otherRange(id)]
		assert.Equal(t, http.StatusNotFound, readDoc(c, pk, "a", other).status, "range %s: another range's segment covers nothing here", id)
	}
}

func otherRange(id string) string {
	if id == "0" {
		return "1"
	}
	return "0"
}

func TestStaleModeTokenAheadOfTheReplicaAnswers1002(t *testing.T) {
	c := staleServer(t, 1)
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	for _, r := range []testResponse{
		readDoc(c, "p", "a", "0:-1#99"),
		c.query("SELECT * FROM c", nil, pkHeader("p").with("x-ms-session-token", "0:-1#99")),
		c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-query-enablecrosspartition": "True", "x-ms-session-token": "0:-1#99"}),
	} {
		assert.Equal(t, http.StatusNotFound, r.status)
		assert.Equal(t, "1002", r.subStatus())
		assert.Empty(t, r.header.Get("x-ms-session-token"), "no position to adopt from a replica that could not serve")
	}
}

func TestStaleModeTokensOutliveASplit(t *testing.T) {
	srv, c := newTestServer(t, Options{StaleReadsWithoutSessionToken: true})
	c.standardContainer()
	var token string
	for i := range 20 {
		token = c.createDoc(map[string]any{"id": "a", "pk": "p" + strconv.Itoa(i)}).header.Get("x-ms-session-token")
	}
	require.NoError(t, srv.SplitPartitionKeyRanges(testDB, testColl))
	for i := range 20 {
		r := readDoc(c, "p"+strconv.Itoa(i), "a", token)
		require.Equal(t, http.StatusOK, r.status, "the parent's token covers the children's documents")
		id, lsn := sessionLSN(t, r)
		assert.NotEqual(t, "0", id, "answers name the child range")
		assert.EqualValues(t, 20, lsn, "children start from their parent's LSN")
	}
}

func TestDocumentAnswersCarryNoMetadataToken(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer() // metadata LSN > 0; range 1 has no write yet
	for i := range 10 {
		pk := "p" + strconv.Itoa(i)
		r := c.do("GET", docPath("missing"), nil, pkHeader(pk))
		require.Equal(t, http.StatusNotFound, r.status)
		id, lsn := sessionLSN(t, r)
		assert.EqualValues(t, 0, lsn, "range %s has no write: a 404 names its position, not the metadata's", id)
	}
	bad := c.do("GET", "/dbs/db/colls/coll/docs/"+url.PathEscape("x"), nil, hdr{"x-ms-documentdb-partitionkey": "not json"})
	require.Equal(t, http.StatusBadRequest, bad.status)
	assert.Empty(t, bad.header.Get("x-ms-session-token"), "a request that reached no range has no position")
}
