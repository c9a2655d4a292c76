package fakecosmos

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testClock is a controllable clock for the server and the signing client.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTTLServer has a container on /pk with defaultTtl (nil: none) and a
// clock that the server and client share.
func newTTLServer(t *testing.T, defaultTTL any) (*Server, *testClient, *testClock) {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	srv, c := newTestServer(t, Options{Now: clock.Now, PartitionKeyRanges: 2})
	c.dateOf = clock.Now
	c.createDatabase(testDB)
	body := map[string]any{"id": testColl, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}}
	if defaultTTL != nil {
		body["defaultTtl"] = defaultTTL
	}
	c.createContainer(testDB, body)
	return srv, c, clock
}

func visibleIDs(t *testing.T, c *testClient) (feed, query []string) {
	t.Helper()
	r := c.do("GET", docsPath, nil, hdr{"x-ms-max-item-count": "-1"})
	var all []string
	token := ""
	for {
		h := hdr{}
		if token != "" {
			h["x-ms-continuation"] = token
		}
		r = c.do("GET", docsPath, nil, h)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		for _, d := range r.object(t)["Documents"].([]any) {
			all = append(all, d.(map[string]any)["id"].(string))
		}
		if token = r.header.Get("x-ms-continuation"); token == "" {
			break
		}
	}
	_, docs := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-query-enablecrosspartition": "True"})
	return all, ids(docs)
}

func TestTimestampsComeFromTheServersClock(t *testing.T) {
	_, c, clock := newTTLServer(t, nil)
	r := c.createDoc(map[string]any{"id": "a", "pk": "p"})
	assert.EqualValues(t, clock.Now().Unix(), r.object(t)["_ts"])
}

func TestAnExpiredItemDisappearsFromEveryRead(t *testing.T) {
	srv, c, clock := newTTLServer(t, -1)
	c.createDoc(map[string]any{"id": "short", "pk": "p", "ttl": 10})
	c.createDoc(map[string]any{"id": "forever", "pk": "p"})
	clock.Advance(9 * time.Second)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("short"), nil, pkHeader("p")).status, "not yet")

	clock.Advance(time.Second)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("short"), nil, pkHeader("p")).status)
	feed, query := visibleIDs(t, c)
	assert.Equal(t, []string{"forever"}, feed)
	assert.Equal(t, []string{"forever"}, query)
	_, inPartition := c.queryAll("SELECT * FROM c", pkHeader("p"))
	assert.Equal(t, []string{"forever"}, ids(inPartition))
	count := c.query("SELECT VALUE COUNT(1) FROM c", nil, pkHeader("p"))
	assert.Equal(t, []any{1.0}, count.object(t)["Documents"])
	read := c.do("POST", docsPath, []any{map[string]any{"operationType": "Read", "id": "short"}}, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, read.status)
	assert.EqualValues(t, 404, read.array(t)[0]["statusCode"])
	assert.Equal(t, 1, srv.Documents("db", "coll"))
	changes := c.changes(pkHeader("p"), "")
	require.Equal(t, http.StatusOK, changes.status, "%s", changes.body)
	assert.Equal(t, []string{"forever"}, docIDs(t, changes), "the change feed leaves expired items out too")
}

func TestWritesTreatAnExpiredItemAsAbsent(t *testing.T) {
	_, c, clock := newTTLServer(t, -1)
	for _, id := range []string{"create", "replace", "upsert", "patch", "delete", "ifmatch"} {
		c.createDoc(map[string]any{"id": id, "pk": "p", "ttl": 5})
	}
	clock.Advance(5 * time.Second)
	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "create", "pk": "p"}, pkHeader("p")).status, "no conflict")
	assert.Equal(t, http.StatusNotFound, c.do("PUT", docPath("replace"), map[string]any{"id": "replace", "pk": "p"}, pkHeader("p")).status)
	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "upsert", "pk": "p"}, pkHeader("p").with("x-ms-documentdb-is-upsert", "True")).status)
	assert.Equal(t, http.StatusNotFound, c.do("PATCH", docPath("patch"), ops(op("set", "/x", 1)), pkHeader("p")).status)
	assert.Equal(t, http.StatusNotFound, c.do("DELETE", docPath("delete"), nil, pkHeader("p")).status)
	assert.Equal(t, http.StatusPreconditionFailed, c.do("POST", docsPath, map[string]any{"id": "ifmatch", "pk": "p"}, pkHeader("p").with("x-ms-documentdb-is-upsert", "True").with("If-Match", "*")).status)

	recreated := c.do("GET", docPath("create"), nil, pkHeader("p"))
	require.Equal(t, http.StatusOK, recreated.status)
	assert.NotContains(t, recreated.object(t), "ttl", "the new item, not the expired one")
}

func TestItemTTLOverridesTheContainerDefault(t *testing.T) {
	_, c, clock := newTTLServer(t, 60)
	c.createDoc(map[string]any{"id": "default", "pk": "p"})
	c.createDoc(map[string]any{"id": "never", "pk": "p", "ttl": -1})
	c.createDoc(map[string]any{"id": "longer", "pk": "p", "ttl": 120})
	c.createDoc(map[string]any{"id": "shorter", "pk": "q", "ttl": 30})

	clock.Advance(30 * time.Second)
	feed, _ := visibleIDs(t, c)
	assert.ElementsMatch(t, []string{"default", "never", "longer"}, feed)
	clock.Advance(30 * time.Second)
	feed, _ = visibleIDs(t, c)
	assert.ElementsMatch(t, []string{"never", "longer"}, feed)
	clock.Advance(time.Hour)
	feed, _ = visibleIDs(t, c)
	assert.ElementsMatch(t, []string{"never"}, feed)
}

func TestAWriteRestartsTheItemsTTL(t *testing.T) {
	_, c, clock := newTTLServer(t, 10)
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	clock.Advance(8 * time.Second)
	require.Equal(t, http.StatusOK, c.do("PATCH", docPath("a"), ops(op("set", "/x", 1)), pkHeader("p")).status)
	clock.Advance(8 * time.Second)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("p")).status, "_ts moved with the patch")
	require.Equal(t, http.StatusOK, c.do("PATCH", docPath("a"), ops(op("set", "/ttl", -1)), pkHeader("p")).status)
	clock.Advance(time.Hour)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("p")).status, "made permanent, as the provider does with staged parts")
}

func TestWithoutADefaultTTLItemTTLsAreIgnored(t *testing.T) {
	_, c, clock := newTTLServer(t, nil)
	c.createDoc(map[string]any{"id": "a", "pk": "p", "ttl": 1})
	clock.Advance(time.Hour)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("p")).status)
}

func TestTurningTTLOnExpiresOldItemsAndTurningItOffDoesNotBringThemBack(t *testing.T) {
	srv, c, clock := newTTLServer(t, nil)
	c.createDoc(map[string]any{"id": "a", "pk": "p", "ttl": 5})
	clock.Advance(10 * time.Second)
	replace := func(defaultTTL any) {
		body := map[string]any{"id": testColl, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}}
		if defaultTTL != nil {
			body["defaultTtl"] = defaultTTL
		}
		require.Equal(t, http.StatusOK, c.do("PUT", collPath, body, nil).status)
	}
	replace(-1)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, pkHeader("p")).status)
	replace(nil)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, pkHeader("p")).status, "expired items are deleted, not hidden")
	assert.Equal(t, 0, srv.Documents("db", "coll"))
}

func TestExpiredItemsAreNotCountedInResourceUsage(t *testing.T) {
	_, c, clock := newTTLServer(t, 10)
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	clock.Advance(time.Minute)
	assert.Equal(t, "0", parseUsage(c.do("GET", collPath, nil, nil).header.Get("x-ms-resource-usage"))["documentsCount"])
}
