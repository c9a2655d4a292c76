package fakecosmos

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func batchHeaders(pk any) hdr {
	return pkHeader(pk).with("x-ms-cosmos-is-batch-request", "True").with("x-ms-cosmos-batch-atomic", "True").with("x-ms-cosmos-batch-ordered", "True")
}

func createOp(id string) map[string]any {
	return map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": id, "pk": "p"}}
}

func TestBatchCommitsAllOperationsAndAnswers200(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	existing := c.createDoc(map[string]any{"id": "x", "pk": "p", "n": 1}).header.Get("etag")
	c.createDoc(map[string]any{"id": "gone", "pk": "p"})
	batch := []any{
		createOp("a"),
		map[string]any{"operationType": "Upsert", "resourceBody": map[string]any{"id": "b", "pk": "p"}},
		map[string]any{"operationType": "Replace", "id": "x", "resourceBody": map[string]any{"id": "x", "pk": "p", "n": 2}, "ifMatch": existing},
		map[string]any{"operationType": "Patch", "id": "x", "resourceBody": map[string]any{"operations": []any{op("incr", "/n", 1)}}},
		map[string]any{"operationType": "Read", "id": "a"},
		map[string]any{"operationType": "Delete", "id": "gone"},
	}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	results := r.array(t)
	require.Len(t, results, 6)
	for i, want := range []int{201, 201, 200, 200, 200, 204} {
		assert.EqualValues(t, want, results[i]["statusCode"], "operation %d", i)
		assert.Contains(t, results[i], "requestCharge")
	}
	assert.NotEmpty(t, results[0]["eTag"])
	assert.Equal(t, "a", results[4]["resourceBody"].(map[string]any)["id"])
	assert.EqualValues(t, 3, results[3]["resourceBody"].(map[string]any)["n"])
	assert.Equal(t, 3, srv.Documents("db", "coll"), "x, a and b")
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("gone"), nil, pkHeader("p")).status)
}

func TestBatchWhoseThirdOperationConflictsLeavesNothingOfTheFirstTwoAndAnswers207With424s(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "taken", "pk": "p"})
	batch := []any{createOp("a"), createOp("b"), createOp("taken"), createOp("d")}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, r.status, "%s", r.body)
	results := r.array(t)
	require.Len(t, results, 4)
	assert.EqualValues(t, 424, results[0]["statusCode"])
	assert.EqualValues(t, 424, results[1]["statusCode"])
	assert.EqualValues(t, 409, results[2]["statusCode"])
	assert.EqualValues(t, 424, results[3]["statusCode"])
	assert.Equal(t, 1, srv.Documents("db", "coll"))
	for _, id := range []string{"a", "b", "d"} {
		assert.Equal(t, http.StatusNotFound, c.do("GET", docPath(id), nil, pkHeader("p")).status, id)
	}
}

func TestBatchFailingOperationCarriesItsSubstatus(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	batch := []any{createOp("a"), map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "b", "pk": "other"}}}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, r.status)
	results := r.array(t)
	assert.EqualValues(t, 400, results[1]["statusCode"])
	assert.EqualValues(t, 1001, results[1]["subStatusCode"])
}

func TestBatchRollsBackPatchesAndDeletesToo(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	before := c.createDoc(map[string]any{"id": "x", "pk": "p", "n": 1}).header.Get("etag")
	batch := []any{
		map[string]any{"operationType": "Patch", "id": "x", "resourceBody": map[string]any{"operations": []any{op("incr", "/n", 1)}}},
		map[string]any{"operationType": "Delete", "id": "x"},
		map[string]any{"operationType": "Read", "id": "x"}, // 404: deleted above, in the same batch
	}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, r.status)
	assert.EqualValues(t, 404, r.array(t)[2]["statusCode"])
	read := c.do("GET", docPath("x"), nil, pkHeader("p"))
	assert.Equal(t, before, read.header.Get("etag"))
	assert.EqualValues(t, 1, read.object(t)["n"])
}

func TestBatchPatchWithElevenOperationsFailsTheBatch(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "x", "pk": "p", "n": 1})
	eleven := make([]any, 11)
	for i := range eleven {
		eleven[i] = op("incr", "/n", 1)
	}
	batch := []any{createOp("a"), map[string]any{"operationType": "Patch", "id": "x", "resourceBody": map[string]any{"operations": eleven}}}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusMultiStatus, r.status)
	assert.EqualValues(t, 400, r.array(t)[1]["statusCode"])
}

func TestBatchOf101OperationsAnswers400WithoutAnArray(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	batch := make([]any, 101)
	for i := range batch {
		batch[i] = createOp("d" + strconv.Itoa(i))
	}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.object(t), "code", "an error body, not an operation array")
	assert.Equal(t, 0, srv.Documents("db", "coll"))

	r = c.do("POST", docsPath, batch[:100], batchHeaders("p"))
	assert.Equal(t, http.StatusOK, r.status, "100 operations are allowed")
}

func TestBatchOver2MBAnswers413(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	chunk := strings.Repeat("x", 800_000)
	var batch []any
	for i := 0; i < 3; i++ {
		batch = append(batch, map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": strconv.Itoa(i), "pk": "p", "data": chunk}})
	}
	r := c.do("POST", docsPath, batch, batchHeaders("p"))
	assert.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	assert.Equal(t, 0, srv.Documents("db", "coll"))
}

// Only x-ms-cosmos-batch-atomic: True makes a batch transactional; without
// it the batch is a bulk request (bulk_test.go): no rollback.
func TestBatchWithoutTheAtomicHeaderIsBulk(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	h := pkHeader("p").with("x-ms-cosmos-is-batch-request", "True")
	r := c.do("POST", docsPath, []any{createOp("a"), createOp("a")}, h)
	require.Equal(t, http.StatusMultiStatus, r.status)
	assert.Equal(t, []int{201, 409}, statuses(t, r))
	assert.Equal(t, 1, srv.Documents("db", "coll"))
}

func TestBatchPerOperationPartitionKeyMustMatchTheHeader(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	same := createOp("a")
	same["partitionKey"] = `["p"]`
	assert.Equal(t, http.StatusOK, c.do("POST", docsPath, []any{same}, batchHeaders("p")).status)
	other := createOp("b")
	other["partitionKey"] = `["q"]`
	assert.Equal(t, http.StatusBadRequest, c.do("POST", docsPath, []any{other}, batchHeaders("p")).status)
}

func TestBatchMinimalOmitsWriteBodiesButNotReads(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	batch := []any{createOp("a"), map[string]any{"operationType": "Read", "id": "a"}}
	r := c.do("POST", docsPath, batch, batchHeaders("p").with("Prefer", "return=minimal"))
	require.Equal(t, http.StatusOK, r.status)
	results := r.array(t)
	assert.NotContains(t, results[0], "resourceBody")
	assert.NotEmpty(t, results[0]["eTag"])
	assert.Contains(t, results[1], "resourceBody")
}

func TestBatchIsAtomicAgainstConcurrentWriters(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	// Each batch creates "shared" and one document of its own; exactly one
	// batch can win, and the losers must leave no document behind.
	const n = 16
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			batch := []any{createOp("own" + strconv.Itoa(i)), createOp("shared")}
			statuses[i] = c.do("POST", docsPath, batch, batchHeaders("p")).status
		}(i)
	}
	wg.Wait()
	wins := 0
	for _, s := range statuses {
		if s == http.StatusOK {
			wins++
		} else {
			assert.Equal(t, http.StatusMultiStatus, s)
		}
	}
	assert.Equal(t, 1, wins)
	assert.Equal(t, 2, srv.Documents("db", "coll"))
}
