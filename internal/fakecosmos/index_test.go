package fakecosmos

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queueContainer creates db/coll on /pk with policy (nil: the service's
// default) and the composite index the queue tests order by.
func queueContainer(c *testClient, policy map[string]any) {
	c.t.Helper()
	if policy == nil {
		policy = map[string]any{"indexingMode": "consistent", "automatic": true,
			"includedPaths": []any{map[string]any{"path": "/*"}}}
	}
	policy["compositeIndexes"] = []any{[]any{
		map[string]any{"path": "/type"}, map[string]any{"path": "/visibleAt"}, map[string]any{"path": "/seq"},
	}}
	c.createDatabase(testDB)
	c.createContainer(testDB, map[string]any{"id": testColl,
		"partitionKey":   map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2},
		"indexingPolicy": policy})
}

// queueDocs creates n queue items of one type, each in its own partition,
// all of one size (the numbers have a fixed width).
func queueDocs(c *testClient, prefix, docType string, n int, visibleAt, lockedUntil int) {
	c.t.Helper()
	for i := 0; i < n; i++ {
		c.createDoc(map[string]any{"id": fmt.Sprintf("%s%05d", prefix, i), "pk": fmt.Sprintf("%s%05d", prefix, i),
			"type": docType, "visibleAt": visibleAt + i, "seq": 100000 + i, "lockedUntil": lockedUntil})
	}
}

const candidateQuery = "SELECT TOP 32 * FROM c WHERE c.type = @type AND c.visibleAt <= @now AND c.lockedUntil <= @now " +
	"ORDER BY c.type, c.visibleAt, c.seq"

func (c *testClient) charge(r testResponse) float64 {
	c.t.Helper()
	require.Equal(c.t, http.StatusOK, r.status, "%s", r.body)
	v, err := strconv.ParseFloat(r.header.Get("x-ms-request-charge"), 64)
	require.NoError(c.t, err)
	return v
}

func (c *testClient) candidates(now int) (charge float64, docs []any) {
	c.t.Helper()
	r := c.query(candidateQuery, map[string]any{"@type": "work", "@now": now}, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"})
	return c.charge(r), r.object(c.t)["Documents"].([]any)
}

func TestAnIndexServedQueryIsNotChargedForTheDocumentsTheIndexSkips(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, nil)
	queueDocs(c, "w", "work", 40, 1000, 0)
	queueDocs(c, "m", "msg", 10, 1000, 0)
	queueDocs(c, "later", "work", 10, 90000, 0)
	before, docs := c.candidates(5000)
	require.Len(t, docs, 32)

	queueDocs(c, "mm", "msg", 5000, 1000, 0)       // another queue's backlog
	queueDocs(c, "wlater", "work", 5000, 90000, 0) // this queue, visible later
	after, docs := c.candidates(5000)
	require.Len(t, docs, 32)
	assert.Equal(t, before, after, "the composite index seeks to type = work, visibleAt <= now and stops after 32")

	eq := func() float64 {
		return c.charge(c.query("SELECT * FROM c WHERE c.type = 'work' AND c.visibleAt < 1010", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}))
	}
	withBacklog := eq()
	queueDocs(c, "mmm", "msg", 100, 1000, 0)
	assert.Equal(t, withBacklog, eq(), "equality and range filters on indexed paths select from the index")
}

func TestResidualFiltersAreChargedForTheDocumentsTheyDrop(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, nil)
	queueDocs(c, "w", "work", 40, 1000, 0)
	free, _ := c.candidates(5000)

	_, c2 := newTestServer(t, Options{})
	queueContainer(c2, nil)
	queueDocs(c2, "l", "work", 20, 900, 9999) // locked, at the head of the queue
	queueDocs(c2, "w", "work", 40, 1000, 0)
	locked, docs := c2.candidates(5000)
	require.Len(t, docs, 32)
	assert.InDelta(t, free+20*chargeQueryPerDoc, locked, 1e-9, "lockedUntil is not in the index: the 20 locked items are read and dropped")
}

func TestAQueryNoIndexServesScansItsWholeScope(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, map[string]any{"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/*"}},
		"excludedPaths": []any{map[string]any{"path": "/lockedUntil/?"}}})
	queueDocs(c, "w", "work", 10, 1000, 0)
	unindexed := func() float64 {
		return c.charge(c.query("SELECT * FROM c WHERE c.lockedUntil > 5", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}))
	}
	function := func() float64 {
		return c.charge(c.query("SELECT * FROM c WHERE CONTAINS(c.id, 'zz')", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}))
	}
	small, smallFn := unindexed(), function()
	queueDocs(c, "m", "msg", 90, 1000, 0)
	assert.InDelta(t, small+90*chargeQueryPerDoc, unindexed(), 1e-9, "an excluded path: every document of the range is scanned")
	assert.InDelta(t, smallFn+90*chargeQueryPerDoc, function(), 1e-9, "a filter no index answers: a scan")
}

// UnindexedFilters names each path a query filtered on, with a term an
// index answers, while the policy leaves it out; terms no index answers
// anyway (NOT, !=) are not its business.
func TestUnindexedFiltersNameThePathsAQueryFilteredOnWithoutAnIndex(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	queueContainer(c, map[string]any{"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/type/?"}, map[string]any{"path": "/visibleAt/?"}},
		"excludedPaths": []any{map[string]any{"path": "/*"}}})
	queueDocs(c, "w", "work", 3, 1000, 0)
	pk0 := hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}
	c.charge(c.query("SELECT * FROM c WHERE c.type = 'work' AND c.visibleAt <= 5000 AND NOT IS_DEFINED(c.heldFrom) AND c.id != 'x'", nil, pk0))
	assert.Empty(t, srv.UnindexedFilters(), "every answerable term is on an indexed path")

	lockedUntil := "SELECT * FROM c WHERE c.type = 'work' AND c.lockedUntil <= 5"
	c.charge(c.query(lockedUntil, nil, pk0))
	c.charge(c.query("SELECT * FROM c WHERE c.type = 'work' AND (c.lockedUntil <= 0 OR IS_DEFINED(c.slot))", nil, pk0))
	assert.Equal(t, map[string]string{"/lockedUntil": lockedUntil, "/slot": "SELECT * FROM c WHERE c.type = 'work' AND (c.lockedUntil <= 0 OR IS_DEFINED(c.slot))"},
		srv.UnindexedFilters(), "each path once, with the first query that filtered on it")
}

func TestWriteChargeGrowsWithTheIndexedProperties(t *testing.T) {
	doc := map[string]any{"id": "a", "pk": "p", "type": "work", "b": 1, "c": 2, "d": 3, "e": 4, "f": []any{1, 2}}
	create := func(policy map[string]any) string {
		_, c := newTestServer(t, Options{})
		c.createDatabase(testDB)
		body := map[string]any{"id": testColl, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}}
		if policy != nil {
			body["indexingPolicy"] = policy
		}
		c.createContainer(testDB, body)
		return c.createDoc(doc).header.Get("x-ms-request-charge")
	}
	// id, pk, _ts, type, b, c, d, e and the two elements of f: 10 terms
	assert.Equal(t, "6.95", create(nil), "default policy: 4.95 (under 1 KB) + 0.2 per indexed term * 10")
	optIn := map[string]any{"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/type/?"}},
		"excludedPaths": []any{map[string]any{"path": "/*"}}}
	assert.Equal(t, "5.55", create(optIn), "opt-in: 4.95 + 0.2 * 3 (type, and id and _ts, which are always indexed)")
	assert.Equal(t, "4.95", create(map[string]any{"indexingMode": "none", "automatic": false}), "no index: the size charge alone")
	withComposite := map[string]any{"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/type/?"}},
		"excludedPaths": []any{map[string]any{"path": "/*"}},
		"compositeIndexes": []any{
			[]any{map[string]any{"path": "/type"}, map[string]any{"path": "/b"}},
			[]any{map[string]any{"path": "/type"}, map[string]any{"path": "/missing"}},
		}}
	assert.Equal(t, "5.75", create(withComposite), "a composite index the document has every path of adds a term: 4.95 + 0.2 * 4")
}

func TestOrderByOnAnUnindexedPathIsRefused(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, map[string]any{"indexingMode": "consistent", "automatic": true,
		"includedPaths": []any{map[string]any{"path": "/*"}},
		"excludedPaths": []any{map[string]any{"path": "/lockedUntil/?"}}})
	queueDocs(c, "w", "work", 3, 1000, 0)
	h := hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}
	r := c.query("SELECT * FROM c ORDER BY c.lockedUntil", nil, h)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	assert.Equal(t, msgOrderByNotIndexed, errorText(t, r))
	assert.Equal(t, http.StatusOK, c.query("SELECT * FROM c ORDER BY c.visibleAt", nil, h).status)
}

func TestTheMissingCompositeIndexIsNamed(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, nil)
	r := c.query("SELECT * FROM c ORDER BY c.visibleAt, c.seq DESC", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"})
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	assert.Equal(t, msgNoCompositeIndex+" Add the composite index (/visibleAt ascending, /seq descending) to the indexing policy.", errorText(t, r))
}

func TestIndexingPathsAreValidated(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	for i, path := range []string{"/type", "type/?", "/a/*/b/?", "/a//?", ""} {
		r := c.do("POST", "/dbs/db/colls", map[string]any{"id": fmt.Sprintf("c%d", i),
			"partitionKey":   map[string]any{"paths": []string{"/pk"}},
			"indexingPolicy": map[string]any{"includedPaths": []any{map[string]any{"path": path}}}}, nil)
		assert.Equal(t, http.StatusBadRequest, r.status, "included path %q", path)
	}
	for i, path := range []string{"/*", "/type/?", `/"_etag"/?`, "/tags/[]/?", "/a/b/*"} {
		r := c.do("POST", "/dbs/db/colls", map[string]any{"id": fmt.Sprintf("ok%d", i),
			"partitionKey":   map[string]any{"paths": []string{"/pk"}},
			"indexingPolicy": map[string]any{"includedPaths": []any{map[string]any{"path": "/*"}}, "excludedPaths": []any{map[string]any{"path": path}}}}, nil)
		assert.Equal(t, http.StatusCreated, r.status, "excluded path %q: %s", path, r.body)
	}
}

func TestAnOrderByIndexThatDoesNotLeadWithTheFilterStepsOverOtherDocuments(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	c.createContainer(testDB, map[string]any{"id": testColl,
		"partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2},
		"indexingPolicy": map[string]any{"compositeIndexes": []any{[]any{
			map[string]any{"path": "/visibleAt"}, map[string]any{"path": "/seq"}}}}})
	query := func() float64 {
		return c.charge(c.query("SELECT TOP 32 * FROM c WHERE c.type = 'work' AND c.visibleAt <= 5000 ORDER BY c.visibleAt, c.seq",
			nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"}))
	}
	queueDocs(c, "w", "work", 40, 2000, 0)
	before := query()
	queueDocs(c, "m", "msg", 100, 1000, 0) // visible earlier: walked first
	assert.InDelta(t, before+100*chargeQueryPerDoc, query(), 1e-9, "type is residual: the walk by (visibleAt, seq) reads the other queue's items")
}

func TestEachPageIsChargedForItsPartOfTheWalk(t *testing.T) {
	_, c := newTestServer(t, Options{})
	queueContainer(c, nil)
	queueDocs(c, "w", "work", 30, 1000, 0)
	queueDocs(c, "l", "work", 10, 1000, 9999) // interleaved with the free ones by visibleAt
	h := hdr{"x-ms-documentdb-partitionkeyrangeid": "0", "x-ms-max-item-count": "10"}
	text := "SELECT * FROM c WHERE c.type = 'work' AND c.visibleAt >= 0 AND c.lockedUntil = 0 ORDER BY c.type, c.visibleAt, c.seq"
	pages, docs := c.queryAll(text, h)
	require.Len(t, docs, 30)
	require.Len(t, pages, 3)
	total := 0.0
	for _, p := range pages {
		total += c.charge(p) - chargeQueryBase - chargeQueryPerKBOut*startedKB(len(p.body))
	}
	assert.InDelta(t, 40*chargeQueryPerDoc, total, 1e-9, "the 40 documents the walk hands over, each charged once over the pages")

	offset := c.query(text+" OFFSET 25 LIMIT 2", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"})
	assert.Len(t, offset.object(t)["Documents"], 2)
	assert.InDelta(t, 37*chargeQueryPerDoc, c.charge(offset)-chargeQueryBase-chargeQueryPerKBOut, 1e-9,
		"OFFSET skips what the walk reads: it stops at the 27th match, the 37th document (the locked ones alternate with the first 10)")
}
