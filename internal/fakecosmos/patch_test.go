package fakecosmos

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func op(name, path string, value any) map[string]any {
	return map[string]any{"op": name, "path": path, "value": value}
}

// patchDoc creates {"id":"a","pk":"p", ...base} and patches it; it also
// returns the etag the document had before.
func patchDoc(t *testing.T, base map[string]any, body any) (testResponse, *testClient, string) {
	t.Helper()
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	doc := map[string]any{"id": "a", "pk": "p"}
	for k, v := range base {
		doc[k] = v
	}
	etag := c.createDoc(doc).header.Get("etag")
	return c.do("PATCH", docPath("a"), body, pkHeader("p")), c, etag
}

func ops(list ...map[string]any) map[string]any {
	items := make([]any, len(list))
	for i, o := range list {
		items[i] = o
	}
	return map[string]any{"operations": items}
}

func TestPatchOperationsApplyInOrder(t *testing.T) {
	base := map[string]any{
		"status": "queued", "n": 1, "f": 1.5, "gone": true, "old": "x",
		"arr": []any{"a", "b"}, "a/b": 0, "t~x": 0, "nested": map[string]any{"k": 1},
	}
	r, _, _ := patchDoc(t, base, ops(
		op("set", "/status", "leased"),
		op("add", "/arr/1", "inserted"),
		op("add", "/arr/-", "appended"),
		op("set", "/arr/0", "replaced"),
		op("replace", "/nested/k", 2),
		op("remove", "/gone", nil),
		op("incr", "/n", 41),
		op("incr", "/a~1b", 5),
		op("incr", "/t~0x", -1),
		map[string]any{"op": "move", "from": "/old", "path": "/new"},
	))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	got := r.object(t)
	assert.Equal(t, "leased", got["status"])
	assert.Equal(t, []any{"replaced", "inserted", "b", "appended"}, got["arr"])
	assert.Equal(t, map[string]any{"k": float64(2)}, got["nested"])
	assert.NotContains(t, got, "gone")
	assert.EqualValues(t, 42, got["n"])
	assert.EqualValues(t, 5, got["a/b"], "~1 is /")
	assert.EqualValues(t, -1, got["t~x"], "~0 is ~")
	assert.NotContains(t, got, "old")
	assert.Equal(t, "x", got["new"])
	assert.Equal(t, 1.5, got["f"])
}

func TestPatchArrayElementsByIndex(t *testing.T) {
	base := map[string]any{"arr": []any{1, 2, 3, map[string]any{"k": "v"}}, "num": []any{1.5}}
	r, _, _ := patchDoc(t, base, ops(
		op("replace", "/arr/0", 10),
		op("remove", "/arr/1", nil),
		op("incr", "/arr/1", 4),
		op("set", "/arr/2/k", "w"),
		op("incr", "/num/0", 1),
		map[string]any{"op": "move", "from": "/arr/0", "path": "/first"},
	))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	got := r.object(t)
	assert.Equal(t, []any{float64(7), map[string]any{"k": "w"}}, got["arr"])
	assert.EqualValues(t, 10, got["first"])
	assert.Equal(t, []any{2.5}, got["num"])
}

func TestPatchIncrCreatesAMissingFieldAndKeepsIntegersExact(t *testing.T) {
	r, _, _ := patchDoc(t, map[string]any{"big": 9007199254740993}, ops(op("incr", "/count", 3), op("incr", "/big", 1)))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), `"count":3`)
	assert.Contains(t, string(r.body), `"big":9007199254740994`)
}

func TestPatchRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		base map[string]any
		body any
	}{
		"replace a missing path":   {nil, ops(op("replace", "/missing", 1))},
		"remove a missing path":    {nil, ops(op("remove", "/missing", nil))},
		"incr a string":            {map[string]any{"s": "x"}, ops(op("incr", "/s", 1))},
		"incr by a string":         {map[string]any{"n": 1}, ops(op("incr", "/n", "1"))},
		"set through a missing":    {nil, ops(op("set", "/a/b", 1))},
		"array index past the end": {map[string]any{"arr": []any{1}}, ops(op("add", "/arr/5", 1))},
		"change the id":            {nil, ops(op("set", "/id", "b"))},
		"change the pk":            {nil, ops(op("set", "/pk", "q"))},
		"remove the pk":            {nil, ops(op("remove", "/pk", nil))},
		"move onto the pk":         {map[string]any{"x": 1}, ops(map[string]any{"op": "move", "from": "/x", "path": "/pk"})},
		"set _etag":                {nil, ops(op("set", "/_etag", "x"))},
		"set _ts":                  {nil, ops(op("set", "/_ts", 1))},
		"unknown op":               {nil, ops(op("copy", "/x", 1))},
		"empty path":               {nil, ops(op("set", "", 1))},
		"no operations":            {nil, ops()},
	} {
		t.Run(name, func(t *testing.T) {
			r, c, etag := patchDoc(t, tc.base, tc.body)
			assert.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			assert.Equal(t, etag, c.do("GET", docPath("a"), nil, pkHeader("p")).header.Get("etag"), "nothing was written")
		})
	}
}

func TestPatchAllowsTenOperationsButNotEleven(t *testing.T) {
	ten := make([]map[string]any, 10)
	for i := range ten {
		ten[i] = op("incr", "/n", 1)
	}
	r, c, _ := patchDoc(t, map[string]any{"n": 0}, ops(ten...))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.EqualValues(t, 10, r.object(t)["n"])

	eleven := ops(append(ten, op("incr", "/n", 1))...)
	r = c.do("PATCH", docPath("a"), eleven, pkHeader("p"))
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "can't exceed 10")
}

func TestPatchConditionFalseAnswers412AndChangesNothing(t *testing.T) {
	body := ops(op("set", "/status", "leased"))
	body["condition"] = "from c where c.status = 'queued'"
	r, c, _ := patchDoc(t, map[string]any{"status": "done"}, body)
	assert.Equal(t, http.StatusPreconditionFailed, r.status)
	assert.Equal(t, "done", c.do("GET", docPath("a"), nil, pkHeader("p")).object(t)["status"])
}

func TestPatchConditionTrueApplies(t *testing.T) {
	body := ops(op("set", "/status", "leased"))
	body["condition"] = "FROM c WHERE c.status = 'queued' AND NOT IS_DEFINED(c.owner)"
	r, _, _ := patchDoc(t, map[string]any{"status": "queued"}, body)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, "leased", r.object(t)["status"])
}

func TestPatchWithAnInvalidConditionAnswers400(t *testing.T) {
	body := ops(op("set", "/status", "leased"))
	body["condition"] = "where c.status = 'queued'"
	r, _, _ := patchDoc(t, nil, body)
	assert.Equal(t, http.StatusBadRequest, r.status)
}

func TestPatchAcceptsABareArrayAndBothContentTypes(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "n": 0})
	bare := []any{op("incr", "/n", 1)}
	assert.Equal(t, http.StatusOK, c.do("PATCH", docPath("a"), bare, pkHeader("p")).status)
	assert.Equal(t, http.StatusOK, c.do("PATCH", docPath("a"), bare, pkHeader("p").with("Content-Type", "application/json_patch+json")).status)
	assert.Equal(t, http.StatusBadRequest, c.do("PATCH", docPath("a"), bare, pkHeader("p").with("Content-Type", "text/plain")).status)
	assert.EqualValues(t, 2, c.do("GET", docPath("a"), nil, pkHeader("p")).object(t)["n"])
}

// The JavaScript SDK sends PATCH without a Content-Type, and real accounts
// accept it, conditional or not.
func TestPatchWithoutAContentTypeIsAccepted(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "n": 0})
	noType := pkHeader("p").with("Content-Type", "")
	r := c.do("PATCH", docPath("a"), ops(op("incr", "/n", 1)), noType)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	conditional := ops(op("incr", "/n", 1))
	conditional["condition"] = "from c where c.n = 1"
	assert.Equal(t, http.StatusOK, c.do("PATCH", docPath("a"), conditional, noType).status)
	assert.Equal(t, http.StatusPreconditionFailed, c.do("PATCH", docPath("a"), conditional, noType).status, "n is 2 now")
	assert.EqualValues(t, 2, c.do("GET", docPath("a"), nil, pkHeader("p")).object(t)["n"])
}

func TestPatchedDocumentOver2MBAnswers413(t *testing.T) {
	half := strings.Repeat("x", 1_100_000)
	r, c, _ := patchDoc(t, map[string]any{"a": half}, ops(op("set", "/b", half)))
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	assert.NotContains(t, c.do("GET", docPath("a"), nil, pkHeader("p")).object(t), "b")
}

func TestPatchMinimalResponseHasEtagOnly(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	created := c.createDoc(map[string]any{"id": "a", "pk": "p"})
	r := c.do("PATCH", docPath("a"), ops(op("set", "/x", 1)), pkHeader("p").with("Prefer", "return=minimal"))
	require.Equal(t, http.StatusOK, r.status)
	assert.Empty(t, r.body)
	assert.NotEqual(t, created.header.Get("etag"), r.header.Get("etag"))
}
