package cosmostest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// recorded is one request the recording server received.
type recorded struct {
	Method string
	Path   string // escaped
	Header http.Header
	Body   []byte
}

// reply is what the recording server answers to one request.
type reply struct {
	Status int
	Body   string
	Header map[string]string
}

// recordingServer records every request and answers from answer, which is
// keyed by "METHOD path" (a container read is answered with partition key
// path /pk unless answer says otherwise; anything else unknown is a 500).
type recordingServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recorded
}

func newRecordingServer(t *testing.T, answer map[string]reply) *recordingServer {
	t.Helper()
	rs := &recordingServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rs.mu.Lock()
		rs.requests = append(rs.requests, recorded{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: body})
		rs.mu.Unlock()
		key := r.Method + " " + r.URL.EscapedPath()
		rep, ok := answer[key]
		if !ok && r.Method == http.MethodGet && strings.Count(r.URL.EscapedPath(), "/") == 4 {
			rep, ok = reply{Status: 200, Body: `{"id":"c","partitionKey":{"paths":["/pk"],"kind":"Hash"}}`}, true
		}
		if !ok {
			rep = reply{Status: 500, Body: `{"message":"unexpected request ` + key + `"}`}
		}
		for k, v := range rep.Header {
			w.Header().Set(k, v)
		}
		w.Header().Set("x-ms-request-charge", "1")
		w.WriteHeader(rep.Status)
		_, _ = io.WriteString(w, rep.Body)
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *recordingServer) recorded() []recorded {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]recorded(nil), rs.requests...)
}

// container is a client for container c of database d on rs, through the
// workaround transport.
func (rs *recordingServer) container(t *testing.T) *cdb.ContainerClient {
	t.Helper()
	c, err := cdb.NewClient(rs.URL, cdb.ClientOptions{Key: EmulatorKey, Transport: vercelWorkarounds{next: http.DefaultTransport}})
	require.NoError(t, err)
	cc, err := c.NewContainer("d", "c")
	require.NoError(t, err)
	return cc
}

func methodsAndPaths(reqs []recorded) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Method + " " + r.Path
	}
	return out
}

func doc(id, etag string) string {
	return `{"id":"` + id + `","pk":"p1","_etag":"` + etag + `"}`
}

const feed = "/dbs/d/colls/c/docs"

func TestBatchWithPatchRunsOperationByOperation(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"POST " + feed:          {Status: 201, Body: doc("a", "ea"), Header: map[string]string{"etag": "ea"}},
		"GET " + feed + "/x":    {Status: 200, Body: doc("x", "ex"), Header: map[string]string{"etag": "ex"}},
		"PUT " + feed + "/x":    {Status: 200, Body: doc("x", "ex2"), Header: map[string]string{"etag": "ex2"}},
		"PATCH " + feed + "/x":  {Status: 200, Body: doc("x", "ex3")}, // no etag header: taken from the body
		"DELETE " + feed + "/y": {Status: 204},
	})
	cc := rs.container(t)
	pk := cdb.NewPartitionKeyString("p1")
	b := cc.NewTransactionalBatch(pk)
	b.CreateItem([]byte(`{"id":"a","pk":"p1"}`), nil)
	old := cdb.ETag("e1")
	b.UpsertItem([]byte(`{"id":"a","pk":"p1","n":2}`), &cdb.TransactionalBatchItemOptions{IfMatch: &old})
	b.ReadItem("x", nil)
	b.ReplaceItem("x", []byte(`{"id":"x","pk":"p1","n":3}`), &cdb.TransactionalBatchItemOptions{IfMatch: &old})
	var ops cdb.PatchOperations
	ops.SetCondition("from c where c.lockedUntil <= 5")
	ops.AppendSet("/lockToken", "T")
	b.PatchItem("x", ops, &cdb.TransactionalBatchItemOptions{IfMatch: &old})
	b.DeleteItem("y", &cdb.TransactionalBatchItemOptions{IfMatch: &old})

	resp, err := cc.ExecuteTransactionalBatch(context.Background(), b, &cdb.TransactionalBatchOptions{EnableContentResponseOnWrite: true})
	require.NoError(t, err)
	assert.True(t, resp.Success)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.OperationResults, 6)
	var codes []int
	for _, r := range resp.OperationResults {
		codes = append(codes, r.StatusCode)
	}
	assert.Equal(t, []int{201, 201, 200, 200, 200, 204}, codes)
	assert.Equal(t, cdb.ETag("ex"), resp.OperationResults[2].ETag)
	assert.Equal(t, cdb.ETag("ex3"), resp.OperationResults[4].ETag, "the etag comes from the body when the header lacks it")
	assert.JSONEq(t, doc("x", "ex"), string(resp.OperationResults[2].ResourceBody))
	assert.JSONEq(t, doc("x", "ex3"), string(resp.OperationResults[4].ResourceBody))
	assert.Nil(t, resp.OperationResults[5].ResourceBody)
	assert.Equal(t, 6.0, resp.RequestCharge, "the charges of the point requests add up")

	reqs := rs.recorded()
	assert.Equal(t, []string{
		"POST " + feed,
		"POST " + feed,
		"GET " + feed + "/x",
		"PUT " + feed + "/x",
		"GET /dbs/d/colls/c", // the partition key path, for the condition
		"PATCH " + feed + "/x",
		"DELETE " + feed + "/y",
	}, methodsAndPaths(reqs), "one point request per operation, in order, and no batch request")
	auth := reqs[0].Header.Get("Authorization")
	require.NotEmpty(t, auth)
	for _, r := range reqs {
		assert.Equal(t, auth, r.Header.Get("Authorization"), "%s %s reuses the batch's headers", r.Method, r.Path)
		assert.Empty(t, r.Header.Get("x-ms-cosmos-is-batch-request"), "%s %s", r.Method, r.Path)
		assert.Empty(t, r.Header.Get("x-ms-cosmos-batch-atomic"), "%s %s", r.Method, r.Path)
		if r.Path != "/dbs/d/colls/c" {
			assert.Equal(t, `["p1"]`, r.Header.Get("x-ms-documentdb-partitionkey"), "%s %s", r.Method, r.Path)
		}
	}
	ifMatch := []string{"", "e1", "", "e1", "", "e1", "e1"}
	for i, r := range reqs {
		assert.Equal(t, ifMatch[i], r.Header.Get("If-Match"), "If-Match of %s %s", r.Method, r.Path)
	}
	assert.Empty(t, reqs[0].Header.Get("x-ms-documentdb-is-upsert"), "a create is not an upsert")
	assert.Equal(t, "True", reqs[1].Header.Get("x-ms-documentdb-is-upsert"))
	assert.Equal(t, "True", reqs[2].Header.Get("x-ms-documentdb-query-enablecrosspartition"), "the point-read workaround applies")
	assert.JSONEq(t, `{"id":"a","pk":"p1"}`, string(reqs[0].Body))
	assert.JSONEq(t, `{"id":"x","pk":"p1","n":3}`, string(reqs[3].Body))
	assert.JSONEq(t, `{"condition":"SELECT * FROM c WHERE c.id = @id AND c[\"pk\"] = \"p1\" AND (c.lockedUntil <= 5)",
		"operations":[{"op":"set","path":"/lockToken","value":"T"}]}`, string(reqs[5].Body),
		"the patch keeps its operations and its condition, scoped to the document")
	assert.Empty(t, reqs[2].Body)
	assert.Empty(t, reqs[6].Body)
}

func TestBatchWithPatchMinimalOmitsWrittenBodies(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"POST " + feed:         {Status: 201, Body: doc("a", "ea"), Header: map[string]string{"etag": "ea"}},
		"PATCH " + feed + "/x": {Status: 200, Body: doc("x", "ex"), Header: map[string]string{"etag": "ex"}},
	})
	cc := rs.container(t)
	b := cc.NewTransactionalBatch(cdb.NewPartitionKeyString("p1"))
	b.CreateItem([]byte(`{"id":"a","pk":"p1"}`), nil)
	var ops cdb.PatchOperations
	ops.AppendIncrement("/n", 1)
	b.PatchItem("x", ops, nil)
	resp, err := cc.ExecuteTransactionalBatch(context.Background(), b, nil)
	require.NoError(t, err)
	assert.True(t, resp.Success)
	for i, r := range resp.OperationResults {
		assert.Nil(t, r.ResourceBody, "operation %d: Prefer: return=minimal", i)
	}
	assert.Equal(t, cdb.ETag("ex"), resp.OperationResults[1].ETag, "the etag is kept")
	reqs := rs.recorded()
	assert.Equal(t, []string{"POST " + feed, "PATCH " + feed + "/x"}, methodsAndPaths(reqs), "no condition, no container read")
	assert.JSONEq(t, `{"operations":[{"op":"incr","path":"/n","value":1}]}`, string(reqs[1].Body))
	assert.Empty(t, reqs[1].Header.Get("Prefer"))
}

func TestBatchWithPatchStopsAtFirstFailure(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"POST " + feed: {Status: 201, Body: doc("a", "ea"), Header: map[string]string{"etag": "ea"}},
		"PATCH " + feed + "/x": {Status: 412, Header: map[string]string{"x-ms-substatus": "0"},
			Body: `{"code":"PreconditionFailed","message":"Condition specified in the patch request is not satisfied."}`},
	})
	cc := rs.container(t)
	b := cc.NewTransactionalBatch(cdb.NewPartitionKeyString("p1"))
	b.CreateItem([]byte(`{"id":"a","pk":"p1"}`), nil)
	var ops cdb.PatchOperations
	ops.SetCondition("FROM c WHERE c.status = 'queued'")
	ops.AppendSet("/status", "leased")
	b.PatchItem("x", ops, nil)
	b.CreateItem([]byte(`{"id":"c","pk":"p1"}`), nil)
	b.DeleteItem("y", nil)

	resp, err := cc.ExecuteTransactionalBatch(context.Background(), b, nil)
	require.NoError(t, err, "a failed batch is a response")
	assert.False(t, resp.Success)
	assert.Equal(t, http.StatusMultiStatus, resp.StatusCode, "as the real service answers a failed batch")
	var codes []int
	for _, r := range resp.OperationResults {
		codes = append(codes, r.StatusCode)
	}
	assert.Equal(t, []int{424, 412, 424, 424}, codes, "the failing operation's status, 424 for the others (the create before it stays applied)")
	idx, opErr := resp.FailedOperation()
	assert.Equal(t, 1, idx)
	assert.True(t, cdb.IsPreconditionFailed(opErr), "a 412: %v", opErr)
	assert.Contains(t, opErr.Error(), "Condition specified in the patch request is not satisfied", "the server's message is kept")

	reqs := rs.recorded()
	assert.Equal(t, []string{"POST " + feed, "GET /dbs/d/colls/c", "PATCH " + feed + "/x"}, methodsAndPaths(reqs),
		"nothing is sent after the failing operation")
	assert.JSONEq(t, `{"condition":"SELECT * FROM c WHERE c.id = @id AND c[\"pk\"] = \"p1\" AND (c.status = 'queued')",
		"operations":[{"op":"set","path":"/status","value":"leased"}]}`, string(reqs[2].Body))
}

func TestBatchWithPatchUnknownOperationFailsThere(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"PATCH " + feed + "/x": {Status: 200, Body: doc("x", "ex")},
	})
	body := `[{"operationType":"Patch","id":"x","resourceBody":{"operations":[]}},{"operationType":"Bogus","id":"z"}]`
	req, err := http.NewRequest(http.MethodPost, rs.URL+feed, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("x-ms-cosmos-is-batch-request", "True")
	req.Header.Set("x-ms-documentdb-partitionkey", `["p1"]`)
	resp, err := vercelWorkarounds{next: http.DefaultTransport}.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusMultiStatus, resp.StatusCode)
	var results []batchResult
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&results))
	require.Len(t, results, 2)
	assert.Equal(t, 424, results[0].StatusCode)
	assert.Equal(t, 400, results[1].StatusCode)
	assert.Contains(t, string(results[1].ResourceBody), "Bogus")
}

func TestBatchWithoutPatchIsForwardedWithPerOperationPartitionKey(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"POST " + feed: {Status: 200, Body: `[{"statusCode":201,"requestCharge":1,"eTag":"ea","resourceBody":` + doc("a", "ea") + `},` +
			`{"statusCode":204,"requestCharge":1}]`},
	})
	cc := rs.container(t)
	b := cc.NewTransactionalBatch(cdb.NewPartitionKeyString("p1"))
	b.CreateItem([]byte(`{"id":"a","pk":"p1"}`), nil)
	b.DeleteItem("y", nil)
	resp, err := cc.ExecuteTransactionalBatch(context.Background(), b, nil)
	require.NoError(t, err)
	assert.True(t, resp.Success)
	reqs := rs.recorded()
	require.Equal(t, []string{"POST " + feed}, methodsAndPaths(reqs), "one batch request")
	assert.Equal(t, "True", reqs[0].Header.Get("x-ms-cosmos-is-batch-request"))
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &ops))
	require.Len(t, ops, 2)
	for _, op := range ops {
		assert.Equal(t, `["p1"]`, op["partitionKey"])
	}
}

func TestPointPatchConditionIsScoped(t *testing.T) {
	rs := newRecordingServer(t, map[string]reply{
		"PATCH " + feed + "/x": {Status: 200, Body: doc("x", "ex"), Header: map[string]string{"etag": "ex"}},
	})
	cc := rs.container(t)
	pk := cdb.NewPartitionKeyString(`p"1`)
	send := func(cond string) []byte {
		var ops cdb.PatchOperations
		if cond != "" {
			ops.SetCondition(cond)
		}
		ops.AppendSet("/lockToken", "T")
		_, err := cc.PatchItem(context.Background(), pk, "x", ops, nil)
		require.NoError(t, err)
		reqs := rs.recorded()
		return reqs[len(reqs)-1].Body
	}
	var got struct {
		Condition *string `json:"condition"`
	}
	require.NoError(t, json.Unmarshal(send("from c where c.lockedUntil <= 5"), &got))
	require.NotNil(t, got.Condition)
	assert.Equal(t, `SELECT * FROM c WHERE c.id = @id AND c["pk"] = "p\"1" AND (c.lockedUntil <= 5)`, *got.Condition)

	got.Condition = nil
	require.NoError(t, json.Unmarshal(send(""), &got))
	assert.Nil(t, got.Condition, "no condition, nothing added")

	full := `SELECT * FROM c WHERE c.id = @id AND c.n = 1`
	require.NoError(t, json.Unmarshal(send(full), &got))
	assert.Equal(t, full, *got.Condition, "a condition not in the short form is left alone")

	containerReads := 0
	for _, r := range rs.recorded() {
		if r.Method == http.MethodGet {
			containerReads++
		}
	}
	assert.Equal(t, 1, containerReads, "the partition key path is read once per container")
}

func TestScopeCondition(t *testing.T) {
	for _, tc := range []struct {
		cond   string
		paths  []string
		values string
		want   string
		ok     bool
	}{
		{"from c where c.a = 1", []string{"/pk"}, `["x"]`, `SELECT * FROM c WHERE c.id = @id AND c["pk"] = "x" AND (c.a = 1)`, true},
		{"  FROM root WHERE root.a = 'B'  ", []string{"/pk"}, `[42]`, `SELECT * FROM root WHERE root.id = @id AND root["pk"] = 42 AND (root.a = 'B')`, true},
		{"from c", []string{"/pk"}, `["x"]`, `SELECT * FROM c WHERE c.id = @id AND c["pk"] = "x"`, true},
		{"from c where c.a = 1", []string{"/t/x~1y~0z", "/u"}, `["x",true]`,
			`SELECT * FROM c WHERE c.id = @id AND c["t"]["x/y~z"] = "x" AND c["u"] = true AND (c.a = 1)`, true},
		{"from c where c.a = 1", []string{"/pk"}, `[{}]`, `SELECT * FROM c WHERE c.id = @id AND (c.a = 1)`, true},
		{"select * from c", []string{"/pk"}, `["x"]`, "select * from c", false},
	} {
		var values []json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(tc.values), &values))
		got, ok := scopeCondition(tc.cond, tc.paths, values)
		assert.Equal(t, tc.ok, ok, tc.cond)
		assert.Equal(t, tc.want, got, tc.cond)
	}
}

// The synthesized response is valid JSON of the documented shape.
func TestBatchResultWireNames(t *testing.T) {
	out, err := json.Marshal(batchResult{StatusCode: 200, RequestCharge: 1, ETag: "e", ResourceBody: json.RawMessage(`{"id":"x"}`)})
	require.NoError(t, err)
	assert.True(t, bytes.Equal(out, []byte(`{"statusCode":200,"requestCharge":1,"eTag":"e","resourceBody":{"id":"x"}}`)), string(out))
}

// TestWorkaroundsOnNPMServer checks the translation against the server
// itself, when make test provides one: a batch holding a Patch runs, a
// condition keeps its case and its partition, and a failed batch leaves the
// operations before the failure applied (the server's own behaviour).
func TestWorkaroundsOnNPMServer(t *testing.T) {
	srv, err := StartNPMServerFromEnv(context.Background())
	require.NoError(t, err)
	if srv == nil {
		t.Skip("no @vercel/cosmosdb-server: set " + ServerCLIEnv + " (make test does)")
	}
	t.Cleanup(srv.Stop)
	tg := NPMTarget(srv.Endpoint)
	tg.Quirks.NoPatchInBatch = "" // the workaround transport runs such batches itself

	t.Run("BatchWithPatch", func(t *testing.T) { testBatchWithPatch(t, tg) })

	t.Run("ConditionKeepsCaseAndPartition", func(t *testing.T) {
		cc := newContainer(t, tg.Open(t))
		ctx := suiteContext(t)
		_, err := cc.CreateItem(ctx, pk("a"), []byte(`{"id":"inst","pk":"a","lockedUntil":0}`), nil)
		require.NoError(t, err)
		_, err = cc.CreateItem(ctx, pk("b"), []byte(`{"id":"inst","pk":"b","lockedUntil":999}`), nil)
		require.NoError(t, err)
		lock := func() cdb.PatchOperations {
			var ops cdb.PatchOperations
			ops.SetCondition("from c where c.lockedUntil <= 5")
			ops.AppendSet("/lockedUntil", 999)
			return ops
		}
		_, err = cc.PatchItem(ctx, pk("b"), "inst", lock(), nil)
		assert.True(t, cdb.IsPreconditionFailed(err), "b's own document is locked, whatever a's says: %v", err)
		_, err = cc.PatchItem(ctx, pk("a"), "inst", lock(), nil)
		assert.NoError(t, err, "a camel-case condition that holds")

		b := cc.NewTransactionalBatch(pk("b"))
		b.CreateItem([]byte(`{"id":"z","pk":"b"}`), nil)
		b.PatchItem("inst", lock(), nil)
		resp, err := cc.ExecuteTransactionalBatch(ctx, b, nil)
		require.NoError(t, err)
		assert.False(t, resp.Success)
		assert.Equal(t, http.StatusMultiStatus, resp.StatusCode)
		require.Len(t, resp.OperationResults, 2)
		assert.Equal(t, http.StatusFailedDependency, resp.OperationResults[0].StatusCode)
		assert.Equal(t, http.StatusPreconditionFailed, resp.OperationResults[1].StatusCode)
		_, err = cc.ReadItem(ctx, pk("b"), "z", nil)
		assert.NoError(t, err, "no rollback on this server: the create before the failure stays")
	})
}
