package fakecosmos

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateReadAndSystemProperties(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	before := time.Now().Unix()
	r := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p", "n": 1, "_etag": "forged", "_ts": 1}, pkHeader("p"))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	doc := r.object(t)
	etag := doc["_etag"].(string)
	assert.Regexp(t, `^"[0-9a-f]{8}-[0-9a-f]{4}-0000-0000-[0-9a-f]{12}"$`, etag, "quoted and opaque")
	assert.NotEqual(t, "forged", etag, "client-supplied system properties are overwritten")
	assert.Equal(t, etag, r.header.Get("etag"))
	ts := int64(doc["_ts"].(float64))
	assert.GreaterOrEqual(t, ts, before, "_ts is epoch seconds")
	assert.LessOrEqual(t, ts, time.Now().Unix())
	for _, k := range []string{"_rid", "_self", "_attachments"} {
		assert.Contains(t, doc, k)
	}

	read := c.do("GET", docPath("a"), nil, pkHeader("p"))
	require.Equal(t, http.StatusOK, read.status)
	assert.Equal(t, doc, read.object(t))
	assert.Equal(t, etag, read.header.Get("etag"))
}

func TestEtagChangesOnEveryWrite(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	seen := map[string]bool{}
	note := func(r testResponse) {
		t.Helper()
		e := r.header.Get("etag")
		require.NotEmpty(t, e)
		assert.False(t, seen[e], "etag %s repeated", e)
		seen[e] = true
	}
	doc := map[string]any{"id": "a", "pk": "p", "n": 1}
	note(c.createDoc(doc))
	note(c.do("PUT", docPath("a"), doc, pkHeader("p"))) // the same content still gets a new etag
	note(c.do("POST", docsPath, doc, pkHeader("p").with("x-ms-documentdb-is-upsert", "True")))
	note(c.do("PATCH", docPath("a"), map[string]any{"operations": []any{map[string]any{"op": "incr", "path": "/n", "value": 1}}}, pkHeader("p")))
	assert.Len(t, seen, 4)
}

func TestIfMatchWithAStaleEtagAnswers412OnEveryVerb(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	stale := c.createDoc(map[string]any{"id": "a", "pk": "p"}).header.Get("etag")
	current := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p")).header.Get("etag")
	h := pkHeader("p").with("If-Match", stale)

	assert.Equal(t, http.StatusPreconditionFailed, c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p"}, h).status, "replace")
	assert.Equal(t, http.StatusPreconditionFailed, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, h.with("x-ms-documentdb-is-upsert", "true")).status, "upsert")
	assert.Equal(t, http.StatusPreconditionFailed, c.do("PATCH", docPath("a"), []any{map[string]any{"op": "set", "path": "/x", "value": 1}}, h).status, "patch")
	assert.Equal(t, http.StatusPreconditionFailed, c.do("DELETE", docPath("a"), nil, h).status, "delete")
	batch := []any{map[string]any{"operationType": "Replace", "id": "a", "resourceBody": map[string]any{"id": "a", "pk": "p"}, "ifMatch": stale}}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, r.status)
	assert.EqualValues(t, 412, r.array(t)[0]["statusCode"], "batch replace")

	read := c.do("GET", docPath("a"), nil, pkHeader("p"))
	assert.Equal(t, current, read.header.Get("etag"), "nothing changed")
}

func TestIfMatchWithTheCurrentEtagSucceeds(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	e := c.createDoc(map[string]any{"id": "a", "pk": "p"}).header.Get("etag")
	r := c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p").with("If-Match", e))
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, http.StatusNoContent, c.do("DELETE", docPath("a"), nil, pkHeader("p").with("If-Match", r.header.Get("etag"))).status)
}

func TestPointOperationStatusCodes(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p"})

	assert.Equal(t, http.StatusConflict, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")).status, "create twice")
	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "q"}, pkHeader("q")).status, "ids are unique per logical partition")
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("b"), nil, pkHeader("p")).status, "read missing")
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, pkHeader("other")).status, "read in another partition")
	assert.Equal(t, http.StatusNotFound, c.do("PUT", docPath("b"), map[string]any{"id": "b", "pk": "p"}, pkHeader("p")).status, "replace missing")
	assert.Equal(t, http.StatusBadRequest, c.do("PUT", docPath("a"), map[string]any{"id": "b", "pk": "p"}, pkHeader("p")).status, "replace with another id in the body")
	assert.Equal(t, http.StatusNotFound, c.do("DELETE", docPath("b"), nil, pkHeader("p")).status, "delete missing")
	assert.Equal(t, http.StatusNotFound, c.do("PATCH", docPath("b"), []any{map[string]any{"op": "set", "path": "/x", "value": 1}}, pkHeader("p")).status, "patch missing")
	assert.Equal(t, http.StatusNoContent, c.do("DELETE", docPath("a"), nil, pkHeader("p")).status)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, pkHeader("p")).status, "read deleted")
	assert.Equal(t, http.StatusNotFound, c.do("GET", "/dbs/db/colls/nope/docs/a", nil, pkHeader("p")).status, "missing container")
}

func TestUpsertAnswers201ThenReplaces200(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	h := pkHeader("p").with("x-ms-documentdb-is-upsert", "True")
	first := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p", "v": 1}, h)
	assert.Equal(t, http.StatusCreated, first.status)
	second := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p", "v": 2}, h)
	assert.Equal(t, http.StatusOK, second.status)
	assert.Equal(t, first.object(t)["_rid"], second.object(t)["_rid"], "a replace keeps the _rid")
	assert.EqualValues(t, 2, c.do("GET", docPath("a"), nil, pkHeader("p")).object(t)["v"])

	r := c.do("POST", docsPath, map[string]any{"id": "new", "pk": "p"}, h.with("If-Match", second.header.Get("etag")))
	assert.Equal(t, http.StatusPreconditionFailed, r.status, "If-Match on a missing document")
	r = c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p", "v": 3}, h.with("If-Match", second.header.Get("etag")))
	assert.Equal(t, http.StatusOK, r.status)
}

func TestPreferMinimalOmitsTheBodyButKeepsTheEtag(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p").with("Prefer", "return=minimal"))
	require.Equal(t, http.StatusCreated, r.status)
	assert.Empty(t, r.body)
	assert.NotEmpty(t, r.header.Get("etag"))
	read := c.do("GET", docPath("a"), nil, pkHeader("p").with("Prefer", "return=minimal"))
	assert.NotEmpty(t, read.body, "reads always return the document")
}

func TestIfNoneMatchWithTheCurrentEtagAnswers304(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	e := c.createDoc(map[string]any{"id": "a", "pk": "p"}).header.Get("etag")
	r := c.do("GET", docPath("a"), nil, pkHeader("p").with("If-None-Match", e))
	assert.Equal(t, http.StatusNotModified, r.status)
	assert.Empty(t, r.body)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("p").with("If-None-Match", `"other"`)).status)
}

func TestPartitionKeyHeaderRules(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, nil)
	assert.Equal(t, http.StatusBadRequest, r.status, "missing header")
	r = c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("q"))
	assert.Equal(t, http.StatusBadRequest, r.status, "header does not match the body")
	assert.Equal(t, "1001", r.subStatus())
	r = c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, hdr{"x-ms-documentdb-partitionkey": `["p","q"]`})
	assert.Equal(t, http.StatusBadRequest, r.status, "two components")
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, hdr{"x-ms-documentdb-partitionkey": `["p"]`}).status)
	assert.Equal(t, http.StatusBadRequest, c.do("GET", docPath("a"), nil, nil).status, "reads need the header too")
}

func TestPartitionKeyValuesOfEveryTypeAndNone(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	for name, tc := range map[string]struct {
		doc    map[string]any
		header string
	}{
		"number": {map[string]any{"id": "n", "pk": 42}, `[42.0]`},
		"bool":   {map[string]any{"id": "b", "pk": true}, `[true]`},
		"null":   {map[string]any{"id": "z", "pk": nil}, `[null]`},
		"none":   {map[string]any{"id": "u"}, `[{}]`},
		"escape": {map[string]any{"id": "e", "pk": "é"}, `["\u00e9"]`},
	} {
		h := hdr{"x-ms-documentdb-partitionkey": tc.header}
		require.Equal(t, http.StatusCreated, c.do("POST", docsPath, tc.doc, h).status, name)
		assert.Equal(t, http.StatusOK, c.do("GET", docPath(tc.doc["id"].(string)), nil, h).status, name)
	}
	r := c.do("POST", docsPath, map[string]any{"id": "x"}, hdr{"x-ms-documentdb-partitionkey": `[null]`})
	assert.Equal(t, http.StatusBadRequest, r.status, "a missing property is none, not null")
}

func TestNestedPartitionKeyPath(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	c.createContainer("db", map[string]any{"id": "coll", "partitionKey": map[string]any{"paths": []string{"/tenant/id"}, "kind": "Hash", "version": 2}})
	doc := map[string]any{"id": "a", "tenant": map[string]any{"id": "t1"}}
	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, doc, pkHeader("t1")).status)
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("t1")).status)
	assert.Equal(t, http.StatusBadRequest, c.do("POST", docsPath, map[string]any{"id": "b", "tenant": map[string]any{"id": "t1"}}, pkHeader("t2")).status)
}

func TestDocumentIdRules(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	for name, id := range map[string]any{
		"missing": nil, "number": 7, "empty": "", "slash": "a/b", "backslash": `a\b`,
		"question": "a?b", "hash": "a#b", "too long": strings.Repeat("x", 256),
	} {
		doc := map[string]any{"pk": "p"}
		if id != nil {
			doc["id"] = id
		}
		assert.Equal(t, http.StatusBadRequest, c.do("POST", docsPath, doc, pkHeader("p")).status, name)
	}
	for _, id := range []string{strings.Repeat("x", 255), "with space", "ünï cødé", "percent%20"} {
		require.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": id, "pk": "p"}, pkHeader("p")).status, id)
		assert.Equal(t, http.StatusOK, c.do("GET", docPath(id), nil, pkHeader("p")).status, id)
	}
}

func TestADocumentOver2MBAnswers413(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	big := strings.Repeat("x", 2_100_000) // 2.1 MB
	r := c.do("POST", docsPath, map[string]any{"id": "big", "pk": "p", "data": big}, pkHeader("p"))
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("big"), nil, pkHeader("p")).status)

	c.createDoc(map[string]any{"id": "grow", "pk": "p"})
	r = c.do("PUT", docPath("grow"), map[string]any{"id": "grow", "pk": "p", "data": big}, pkHeader("p"))
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.status, "replace")
	ok := strings.Repeat("x", 2*1024*1024-1024)
	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "fits", "pk": "p", "data": ok}, pkHeader("p")).status, "just under 2 MB fits")
}

func TestRequestBodyMustBeAJSONObject(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	assert.Equal(t, http.StatusBadRequest, c.do("POST", docsPath, []byte("{not json"), pkHeader("p")).status)
	assert.Equal(t, http.StatusBadRequest, c.do("POST", docsPath, []any{1, 2}, pkHeader("p")).status)
}

func TestReadFeedListsDocumentsWithPaging(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 3})
	c.standardContainer()
	for i := 0; i < 12; i++ {
		c.createDoc(map[string]any{"id": string(rune('a' + i)), "pk": []string{"p", "q", "r"}[i%3]})
	}
	scoped := c.do("GET", docsPath, nil, pkHeader("p").with("x-ms-max-item-count", "3"))
	require.Equal(t, http.StatusOK, scoped.status)
	assert.EqualValues(t, 3, scoped.object(t)["_count"])
	next := scoped.header.Get("x-ms-continuation")
	require.NotEmpty(t, next)
	rest := c.do("GET", docsPath, nil, pkHeader("p").with("x-ms-max-item-count", "3").with("x-ms-continuation", next))
	assert.EqualValues(t, 1, rest.object(t)["_count"])
	assert.Empty(t, rest.header.Get("x-ms-continuation"))

	var all []string
	token := ""
	for i := 0; i < 50; i++ {
		h := hdr{"x-ms-max-item-count": "5"}
		if token != "" {
			h["x-ms-continuation"] = token
		}
		r := c.do("GET", docsPath, nil, h)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		for _, d := range r.object(t)["Documents"].([]any) {
			all = append(all, d.(map[string]any)["id"].(string))
		}
		if token = r.header.Get("x-ms-continuation"); token == "" {
			break
		}
	}
	assert.ElementsMatch(t, []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}, all)
}

func TestDocumentsCountsForTests(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	c.createDoc(map[string]any{"id": "b", "pk": "q"})
	assert.Equal(t, 2, srv.Documents("db", "coll"))
	assert.Equal(t, 0, srv.Documents("db", "missing"))
}
