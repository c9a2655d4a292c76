package fakecosmos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// indexedContainer is db/coll on /pk with a composite index (type, n), the
// path /excluded left out of the index, defaultTtl -1 (items' own ttl
// counts), two ranges, the stale mode, and a clock the test moves.
func indexedContainer(t *testing.T) (*Server, *testClient, *testClock) {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, c := newTestServer(t, Options{Now: clock.Now, PartitionKeyRanges: 2, StaleReadsWithoutSessionToken: true})
	c.dateOf = clock.Now
	c.createDatabase(testDB)
	c.createContainer(testDB, indexedContainerBody(-1))
	return srv, c, clock
}

func indexedContainerBody(defaultTTL int) map[string]any {
	return map[string]any{
		"id": testColl, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2},
		"defaultTtl": defaultTTL,
		"indexingPolicy": map[string]any{
			"indexingMode":  "consistent",
			"includedPaths": []any{map[string]any{"path": "/*"}},
			"excludedPaths": []any{map[string]any{"path": "/excluded/?"}},
			"compositeIndexes": []any{[]any{
				map[string]any{"path": "/type", "order": "ascending"},
				map[string]any{"path": "/n", "order": "ascending"},
			}},
		},
	}
}

// mixedDocuments spreads documents of four types over seven partitions,
// with the values equality must tell apart: 1 and 1.0 (equal), "a" and "A",
// null and a missing property, objects, arrays, an excluded path.
func mixedDocuments(c *testClient) {
	types := []string{"msg", "work", "hist", "inst"}
	for i := 0; i < 42; i++ {
		doc := map[string]any{
			"id": fmt.Sprintf("d%02d", i), "pk": fmt.Sprintf("p%d", i%7), "type": types[i%4],
			"n": []any{1, json.Number("1.0"), 2, "1", nil}[i%5], "s": []string{"a", "A", "b"}[i%3],
			"o": map[string]any{"a": i % 2}, "arr": []any{i % 3, "x"}, "excluded": i % 2,
			"a": map[string]any{"b": i % 3},
		}
		if i%6 == 0 {
			doc["z"] = nil
		}
		if i%9 == 0 {
			doc["ttl"] = 30
		}
		c.createDoc(doc)
	}
}

type indexQuery struct {
	text   string
	params map[string]any
}

// equivalenceQueries cover every shape the value index may narrow by, and
// shapes it must leave alone.
var equivalenceQueries = []indexQuery{
	{"SELECT * FROM c WHERE c.type = @t", map[string]any{"@t": "msg"}},
	{"SELECT * FROM c WHERE c.type = @t AND c.n > @n", map[string]any{"@t": "work", "@n": 0}},
	{"SELECT c.id, c.n FROM c WHERE c.n = 1", nil},
	{"SELECT c.id FROM c WHERE 1.0 = c.n AND c.type = @t", map[string]any{"@t": "hist"}},
	{`SELECT * FROM c WHERE c.s = "a"`, nil},
	{"SELECT c.id FROM c WHERE c.z = null", nil},
	{`SELECT c.id FROM c WHERE c.o = {"a": 1}`, nil},
	{"SELECT c.id FROM c WHERE c.a.b = @v", map[string]any{"@v": 2}},
	{"SELECT * FROM c WHERE c.type = @t AND c.pk = @pk", map[string]any{"@t": "msg", "@pk": "p3"}},
	{"SELECT c.id FROM c WHERE c.type = @t OR c.n = 1", map[string]any{"@t": "inst"}},
	{"SELECT * FROM c WHERE c.type = @t", map[string]any{"@t": "nothing"}},
	{"SELECT * FROM c WHERE c.type = @t", map[string]any{"@t": nil}},
	{"SELECT VALUE COUNT(1) FROM c WHERE c.type = @t", map[string]any{"@t": "msg"}},
	{"SELECT VALUE MAX(c.n) FROM c WHERE c.type = @t", map[string]any{"@t": "nothing"}},
	{"SELECT TOP 3 * FROM c WHERE c.type = @t ORDER BY c.type, c.n", map[string]any{"@t": "work"}},
	{"SELECT * FROM c WHERE c.type = @t ORDER BY c.n OFFSET 1 LIMIT 2", map[string]any{"@t": "work"}},
	{"SELECT c.id FROM c WHERE c.type = @t ORDER BY c.type, c.n OFFSET 2 LIMIT 3", map[string]any{"@t": "msg"}},
	{"SELECT DISTINCT VALUE c.s FROM c WHERE c.type = @t", map[string]any{"@t": "hist"}},
	{"SELECT c.id FROM c WHERE c.arr[0] = 1", nil},
	{"SELECT c.id FROM c WHERE c.type = @t AND c.id = @id", map[string]any{"@t": "msg", "@id": "d04"}},
	{"SELECT c.id FROM c WHERE c.s = c.type", nil},
	{"SELECT c.id FROM c WHERE c.excluded = 1 AND c.type = @t", map[string]any{"@t": "msg"}},
	{"SELECT c.id FROM c WHERE c.excluded = 1", nil},
	{"SELECT * FROM c WHERE c.type = @t AND ARRAY_CONTAINS(@ns, c.n)", map[string]any{"@t": "inst", "@ns": []any{1, 2}}},
}

// answer is what a client sees of a query page.
type answer struct {
	status                                int
	body, continuation, charge, count, ss string
}

// activityID differs from answer to answer.
var activityID = regexp.MustCompile(`ActivityId: [0-9a-f-]+`)

func answerOf(r testResponse) answer {
	return answer{r.status, activityID.ReplaceAllString(string(r.body), "ActivityId: ?"), r.header.Get("x-ms-continuation"), r.header.Get("x-ms-request-charge"),
		r.header.Get("x-ms-item-count"), r.header.Get("x-ms-session-token")}
}

// pagesOf runs q to its end in one scope and returns every answer.
func pagesOf(c *testClient, q indexQuery, h hdr) []answer {
	c.t.Helper()
	var out []answer
	token := ""
	for i := 0; i < 200; i++ {
		hh := h
		if token != "" {
			hh = h.with("x-ms-continuation", token)
		}
		a := answerOf(c.query(q.text, q.params, hh))
		out = append(out, a)
		if token = a.continuation; token == "" || a.status != http.StatusOK {
			return out
		}
	}
	c.t.Fatalf("paging %q did not end", q.text)
	return nil
}

// scopes are the ways a client addresses a query: across partitions, by
// each current range, by some partition keys; each by pages of 2 and
// whole, with and without a session token covering every range.
func scopes(t *testing.T, srv *Server, c *testClient) []hdr {
	var out []hdr
	base := []hdr{crossPartition, pkHeader("p0"), pkHeader("p3"), pkHeader("p9")}
	for _, id := range rangeIDs(t, c) {
		base = append(base, hdr{"x-ms-documentdb-partitionkeyrangeid": id})
	}
	token := sessionCoveringAll(t, srv)
	for _, h := range base {
		for _, size := range []string{"2", "-1"} {
			out = append(out, h.with("x-ms-max-item-count", size), h.with("x-ms-max-item-count", size).with("x-ms-session-token", token))
		}
	}
	return out
}

func sessionCoveringAll(t *testing.T, srv *Server) string {
	c, err := srv.lookupContainer(route{database: testDB, container: testColl})
	require.NoError(t, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	var segs []string
	for _, r := range c.ranges {
		segs = append(segs, sessionToken(r.id, r.lsn))
	}
	return strings.Join(segs, ",")
}

// assertIndexChangesNothing runs every query in every scope with the value
// index off and on, and compares what the client sees byte for byte
// (results, order, continuations, charges, session tokens); the checked
// mode must find no difference either.
func assertIndexChangesNothing(t *testing.T, srv *Server, c *testClient, stage string) {
	t.Helper()
	for _, h := range scopes(t, srv, c) {
		for _, q := range equivalenceQueries {
			srv.SetQueryIndexMode(QueryIndexOff)
			want := pagesOf(c, q, h)
			srv.SetQueryIndexMode(QueryIndexOn)
			got := pagesOf(c, q, h)
			require.Equal(t, want, got, "%s: %q %v in %v", stage, q.text, q.params, h)
		}
	}
	srv.SetQueryIndexMode(QueryIndexChecked)
	for _, h := range scopes(t, srv, c) {
		for _, q := range equivalenceQueries {
			pagesOf(c, q, h)
		}
	}
	require.NoError(t, srv.QueryIndexMismatch(), stage)
	srv.SetQueryIndexMode(QueryIndexOn)
	assertIndexIsExact(t, srv, stage)
}

// assertIndexIsExact compares every path's lists with lists built afresh
// from the documents: nothing missing, nothing left over.
func assertIndexIsExact(t *testing.T, srv *Server, stage string) {
	t.Helper()
	c, err := srv.lookupContainer(route{database: testDB, container: testColl})
	require.NoError(t, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.values.paths, "the queries built indexes")
	kept := c.values
	for name, ix := range kept.paths {
		c.values = valueIndex{}
		require.Equal(t, c.postingsFor(ix.path), ix, "%s: the index of %q", stage, name)
	}
	c.values = kept
}

// The value index only narrows what the fake evaluates: through replaces,
// upserts, patches, deletes, expiry, a batch that commits and one that
// rolls back, bulk, purging and a split, every query answers exactly as a
// walk of the whole scope does, stale reads included.
func TestTheValueIndexChangesNoAnswer(t *testing.T) {
	srv, c, clock := indexedContainer(t)
	mixedDocuments(c)
	assertIndexChangesNothing(t, srv, c, "created")

	replace := func(id, pk, typ string, n any) {
		body := map[string]any{"id": id, "pk": pk, "type": typ, "n": n, "s": "a"}
		require.Equal(t, http.StatusOK, c.do("PUT", docPath(id), body, pkHeader(pk)).status)
	}
	replace("d00", "p0", "work", 1.0) // msg → work
	replace("d08", "p1", "nothing", 2)
	require.Equal(t, http.StatusOK, c.do("POST", docsPath, map[string]any{"id": "d01", "pk": "p1", "type": "msg", "n": 1}, pkHeader("p1").with("x-ms-documentdb-is-upsert", "True")).status)
	require.Equal(t, http.StatusNoContent, c.do("DELETE", docPath("d04"), nil, pkHeader("p4")).status)
	require.Equal(t, http.StatusNoContent, c.do("DELETE", docPath("d14"), nil, pkHeader("p0")).status)
	c.createDoc(map[string]any{"id": "d04", "pk": "p4", "type": "inst", "n": 1}) // over its tombstone
	assertIndexChangesNothing(t, srv, c, "replaced, upserted, deleted")

	patch := ops(op("set", "/type", "msg"), op("remove", "/s", nil), op("set", "/z", nil))
	require.Equal(t, http.StatusOK, c.do("PATCH", docPath("d02"), patch, pkHeader("p2")).status)
	require.Equal(t, http.StatusOK, c.do("PATCH", docPath("d03"), ops(op("set", "/o", map[string]any{"a": 1})), pkHeader("p3")).status)
	assertIndexChangesNothing(t, srv, c, "patched")

	committed := []any{
		map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "b1", "pk": "p5", "type": "msg", "n": 1}},
		map[string]any{"operationType": "Replace", "id": "d05", "resourceBody": map[string]any{"id": "d05", "pk": "p5", "type": "hist", "n": 1}},
		map[string]any{"operationType": "Delete", "id": "d12"},
	}
	require.Equal(t, http.StatusOK, c.do("POST", docsPath, committed, batchHeaders("p5")).status)
	rolledBack := []any{
		map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "b2", "pk": "p6", "type": "msg", "n": 1}},
		map[string]any{"operationType": "Replace", "id": "d06", "resourceBody": map[string]any{"id": "d06", "pk": "p6", "type": "msg"}},
		map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "d13", "pk": "p6"}}, // taken: rolls back
	}
	require.Equal(t, http.StatusMultiStatus, c.do("POST", docsPath, rolledBack, batchHeaders("p6")).status)
	bulk := []any{
		map[string]any{"operationType": "Upsert", "partitionKey": `["p2"]`, "resourceBody": map[string]any{"id": "k1", "pk": "p2", "type": "work", "n": 1}},
		map[string]any{"operationType": "Delete", "partitionKey": `["p2"]`, "id": "d09"},
	}
	require.Equal(t, http.StatusOK, c.do("POST", docsPath, bulk, pkHeader("p2").with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "False")).status)
	assertIndexChangesNothing(t, srv, c, "batches and bulk")

	clock.Advance(time.Minute) // every ttl 30 has expired, still stored
	assertIndexChangesNothing(t, srv, c, "expired")
	require.Equal(t, http.StatusOK, c.do("PUT", collPath, indexedContainerBody(3600), nil).status) // a new defaultTtl purges them
	assertIndexChangesNothing(t, srv, c, "purged")

	require.NoError(t, srv.SplitPartitionKeyRanges(testDB, testColl))
	assertIndexChangesNothing(t, srv, c, "split")
	replace("d10", "p3", "msg", 1)
	assertIndexChangesNothing(t, srv, c, "written after the split")
}

// The value index narrows the walk to the documents holding the term's
// value: a query for one type of four evaluates a quarter of the
// documents, and is answered and charged as before.
func TestTheValueIndexNarrowsWhatAQueryEvaluates(t *testing.T) {
	srv, c, _ := indexedContainer(t)
	mixedDocuments(c)
	walked := func(mode QueryIndexMode, q indexQuery) (int64, []answer) {
		srv.SetQueryIndexMode(mode)
		srv.ResetCounts()
		pages := pagesOf(c, q, crossPartition.with("x-ms-max-item-count", "-1").with("x-ms-session-token", sessionCoveringAll(t, srv)))
		return srv.Counts().DocumentsWalked, pages
	}
	byType := indexQuery{"SELECT * FROM c WHERE c.type = @t AND c.n = 1", map[string]any{"@t": "msg"}}
	whole, wholePages := walked(QueryIndexOff, byType)
	narrowed, narrowedPages := walked(QueryIndexOn, byType)
	assert.EqualValues(t, 42, whole, "without the index every document is evaluated")
	assert.EqualValues(t, 11, narrowed, "with it, only the 11 of type msg: the rarer value of the two terms (18 have c.n = 1 or 1.0)")
	assert.Equal(t, wholePages, narrowedPages, "the same answers and charges")

	residual := indexQuery{"SELECT * FROM c WHERE c.s = c.type", nil}
	all, _ := walked(QueryIndexOn, residual)
	assert.EqualValues(t, 42, all, "no equality term to seek: the whole scope")
}
