package fakecosmos

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bulkHeaders are what the JavaScript SDK's bulk sends: a batch request,
// not atomic, addressed to a partition key range, each operation naming
// its own partition key.
func bulkHeaders(rangeID string, continueOnError bool) hdr {
	h := hdr{
		"x-ms-cosmos-is-batch-request":        "True",
		"x-ms-cosmos-batch-atomic":            "False",
		"x-ms-documentdb-partitionkeyrangeid": rangeID,
	}
	if continueOnError {
		h["x-ms-cosmos-batch-continue-on-error"] = "True"
	}
	return h
}

func withPK(op map[string]any, pk string) map[string]any {
	b, _ := json.Marshal([]any{pk})
	op["partitionKey"] = string(b)
	return op
}

func bulkCreate(id, pk string) map[string]any {
	return withPK(map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": id, "pk": pk}}, pk)
}

func statuses(t *testing.T, r testResponse) []int {
	t.Helper()
	var out []int
	for _, res := range r.array(t) {
		n, _ := res["statusCode"].(float64)
		out = append(out, int(n))
	}
	return out
}

func TestBulkRunsEveryOperationAcrossPartitionsWithoutRollback(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "x", "pk": "q", "n": 1})
	bulk := []any{
		bulkCreate("a", "p"),
		bulkCreate("x", "q"), // exists: 409
		bulkCreate("b", "r"),
		withPK(map[string]any{"operationType": "Replace", "id": "missing", "resourceBody": map[string]any{"id": "missing", "pk": "q"}}, "q"), // 404
		withPK(map[string]any{"operationType": "Patch", "id": "x", "resourceBody": map[string]any{"operations": []any{op("incr", "/n", 1)}}}, "q"),
		withPK(map[string]any{"operationType": "Read", "id": "a"}, "p"),
	}
	r := c.do("POST", docsPath, bulk, bulkHeaders("0", true))
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	assert.Equal(t, []int{201, 409, 201, 404, 200, 200}, statuses(t, r))
	results := r.array(t)
	assert.Equal(t, "a", results[5]["resourceBody"].(map[string]any)["id"], "a read sees the earlier create")
	assert.EqualValues(t, 2, results[4]["resourceBody"].(map[string]any)["n"])
	assert.Equal(t, 3, srv.Documents("db", "coll"), "x, a and b: failures undo nothing")
	assert.Regexp(t, sessionTokenPattern, r.header.Get("x-ms-session-token"))
}

func TestBulkThatSucceedsEverywhereAnswers200(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	r := c.do("POST", docsPath, []any{bulkCreate("a", "p"), bulkCreate("b", "q")}, bulkHeaders("0", true))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, []int{201, 201}, statuses(t, r))
}

func TestBulkWithoutContinueOnErrorStopsAtTheFirstFailureAndKeepsWhatRan(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "x", "pk": "q"})
	bulk := []any{bulkCreate("a", "p"), bulkCreate("x", "q"), bulkCreate("b", "r")}
	r := c.do("POST", docsPath, bulk, bulkHeaders("0", false))
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	assert.Equal(t, []int{201, 409, 424}, statuses(t, r))
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("a"), nil, pkHeader("p")).status, "kept: no rollback")
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("b"), nil, pkHeader("r")).status, "never ran")
	assert.Equal(t, 2, srv.Documents("db", "coll"))
}

func TestBulkAddressedByPartitionKeyHeader(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	h := pkHeader("p").with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "False")
	r := c.do("POST", docsPath, []any{createOp("a"), createOp("a")}, h)
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	assert.Equal(t, []int{201, 409}, statuses(t, r))
}

func TestBulkOperationOutsideTheAddressedRangeAnswers410ForThatOperation(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 4})
	c.standardContainer()
	pks := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"}
	var in, out string
	for _, pk := range pks { // find one key inside range 0 and one outside
		c.createDoc(map[string]any{"id": "probe", "pk": pk})
		r := c.do("GET", docsPath, nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "0"})
		found := false
		for _, d := range r.object(t)["Documents"].([]any) {
			found = found || d.(map[string]any)["pk"] == pk
		}
		if found && in == "" {
			in = pk
		} else if !found && out == "" {
			out = pk
		}
	}
	require.NotEmpty(t, in)
	require.NotEmpty(t, out)
	r := c.do("POST", docsPath, []any{bulkCreate("a", in), bulkCreate("a", out)}, bulkHeaders("0", true))
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	results := r.array(t)
	assert.EqualValues(t, 201, results[0]["statusCode"])
	assert.EqualValues(t, 410, results[1]["statusCode"])
	assert.EqualValues(t, subStatusRangeGone, results[1]["subStatusCode"])
}

func TestBulkNeedsAPartitionKeyOrARange(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	h := hdr{"x-ms-cosmos-is-batch-request": "True", "x-ms-cosmos-batch-atomic": "False"}
	r := c.do("POST", docsPath, []any{bulkCreate("a", "p")}, h)
	assert.Equal(t, http.StatusBadRequest, r.status)

	r = c.do("POST", docsPath, []any{bulkCreate("a", "p")}, bulkHeaders("9", true))
	assert.Equal(t, http.StatusGone, r.status, "an unknown range")
	assert.Equal(t, "1002", r.subStatus())

	noPK := map[string]any{"operationType": "Read", "id": "a"}
	r = c.do("POST", docsPath, []any{noPK}, bulkHeaders("0", true))
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	assert.Equal(t, []int{400}, statuses(t, r), "a non-create without partitionKey cannot be routed")
}

func TestBulkLimitsAreTheBatchLimits(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	bulk := make([]any, 101)
	for i := range bulk {
		bulk[i] = bulkCreate("d"+string(rune('A'+i%26))+string(rune('a'+i/26)), "p")
	}
	r := c.do("POST", docsPath, bulk, bulkHeaders("0", true))
	assert.Equal(t, http.StatusBadRequest, r.status)
}
