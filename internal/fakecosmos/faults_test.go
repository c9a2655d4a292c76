package fakecosmos

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFaultStatus429CarriesRetryAfterAndDoesNotExecute(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.InjectFault(Fault{
		Match: func(i RequestInfo) bool {
			return i.Op == OpCreateItem && i.ItemID == "" && strings.Contains(string(i.Body), `"a"`)
		},
		Status: http.StatusTooManyRequests, SubStatus: 3200, RetryAfter: 250 * time.Millisecond, Times: 1,
	})
	r := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p"))
	require.Equal(t, http.StatusTooManyRequests, r.status)
	assert.Equal(t, "250", r.header.Get("x-ms-retry-after-ms"))
	assert.Equal(t, "3200", r.subStatus())
	assert.Equal(t, "TooManyRequests", r.object(t)["code"])
	assert.Equal(t, 0, srv.Documents("db", "coll"), "a faulted request does not execute")

	assert.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")).status, "Times: 1 is spent")
}

func TestFaultStatusKinds(t *testing.T) {
	for _, tc := range []struct{ status, sub int }{{503, 0}, {408, 0}, {410, 1002}, {449, 0}} {
		srv, c := newTestServer(t, Options{})
		c.standardContainer()
		remove := srv.InjectFault(Fault{Status: tc.status, SubStatus: tc.sub})
		for i := 0; i < 2; i++ {
			r := c.do("GET", docPath("x"), nil, pkHeader("p"))
			assert.Equal(t, tc.status, r.status, "Times: 0 hits until removed")
			if tc.sub != 0 {
				assert.Equal(t, "1002", r.subStatus())
			}
		}
		remove()
		assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("x"), nil, pkHeader("p")).status, "removed")
	}
}

func TestClearFaultsRemovesEveryFault(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	srv.InjectFault(Fault{Status: 503})
	srv.InjectFault(Fault{Status: 429})
	assert.Equal(t, 503, c.do("GET", "/dbs", nil, nil).status, "the first matching fault applies")
	srv.ClearFaults()
	assert.Equal(t, http.StatusOK, c.do("GET", "/dbs", nil, nil).status)
}

func TestFaultMatchSeesTheRequest(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	var seen []RequestInfo
	srv.InjectFault(Fault{Match: func(i RequestInfo) bool { seen = append(seen, i); return false }})
	c.do("GET", docPath("my id"), nil, pkHeader("p"))
	c.query("SELECT * FROM c", nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "1"})
	require.Len(t, seen, 2)
	assert.Equal(t, RequestInfo{Op: OpReadItem, Method: "GET", Path: "/dbs/db/colls/coll/docs/my id", Database: "db", Container: "coll", ItemID: "my id", PartitionKey: `["p"]`, PriorityLevel: "High", Body: []byte{}}, seen[0])
	assert.Equal(t, OpQuery, seen[1].Op)
	assert.Equal(t, "1", seen[1].PartitionKeyRangeID)
	assert.Contains(t, string(seen[1].Body), "SELECT")
}

func TestDropConnectionFailsInProcessWithoutExecuting(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.InjectFault(Fault{Kind: FaultDropConnection, Match: func(i RequestInfo) bool { return i.Op == OpCreateItem }, Times: 1})
	_, err := c.http.Do(c.newRequest(context.Background(), "POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")))
	require.Error(t, err)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, 0, srv.Documents("db", "coll"))
}

func TestLoseResponseCommitsThenFailsInProcess(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.InjectFault(Fault{Kind: FaultLoseResponse, Match: func(i RequestInfo) bool { return i.Op == OpCreateItem }, Times: 1})
	_, err := c.http.Do(c.newRequest(context.Background(), "POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, 1, srv.Documents("db", "coll"), "the write committed")
	assert.Equal(t, http.StatusConflict, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")).status, "a retry sees 409")
}

func TestConnectionFaultsCloseARealSocket(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c.base = hs.URL
	c.http = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConns: -1}}
	c.standardContainer()

	srv.InjectFault(Fault{Kind: FaultDropConnection, Times: 1})
	_, err := c.http.Do(c.newRequest(context.Background(), "POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")))
	require.ErrorIs(t, err, io.EOF, "the connection closed before any answer")
	assert.Equal(t, 0, srv.Documents("db", "coll"))

	srv.InjectFault(Fault{Kind: FaultLoseResponse, Times: 1})
	_, err = c.http.Do(c.newRequest(context.Background(), "POST", docsPath, map[string]any{"id": "b", "pk": "p"}, pkHeader("p")))
	require.ErrorIs(t, err, io.EOF, "the connection closed in place of the answer")
	assert.Equal(t, 1, srv.Documents("db", "coll"), "committed before the connection was closed")
	assert.Equal(t, http.StatusOK, c.do("GET", docPath("b"), nil, pkHeader("p")).status)
}

func TestLatencyWaitAbortsWhenTheContextIsCancelled(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := c.http.Do(c.newRequest(ctx, "POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")))
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	srv.SetLatency(0)
	assert.Equal(t, 0, srv.Documents("db", "coll"), "the request never executed")
}

func TestLatencyOptionDelaysButServes(t *testing.T) {
	_, c := newTestServer(t, Options{Latency: time.Millisecond})
	assert.Equal(t, http.StatusOK, c.do("GET", "/dbs", nil, nil).status)
}

func TestCountersCountEveryRequestIncludingRefusedAndFaultedOnes(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.ResetCounts()
	c.createDoc(map[string]any{"id": "a", "pk": "p"})
	c.do("GET", docPath("a"), nil, pkHeader("p"))
	c.do("GET", docPath("missing"), nil, pkHeader("p"))
	srv.InjectFault(Fault{Status: 503, Times: 1})
	c.do("DELETE", docPath("a"), nil, pkHeader("p"))
	c.do("GET", "/no/such/route", nil, nil)

	counts := srv.Counts()
	assert.EqualValues(t, 5, counts.Requests)
	assert.Equal(t, map[Op]int64{OpCreateItem: 1, OpReadItem: 2, OpDeleteItem: 1, OpUnknown: 1}, counts.ByOp)
	// create 4.95 (under 1 KB) + 0.2*3 (id, pk, _ts) = 5.55, + read 1 + refusal 1 + fault 0 + refusal 1
	assert.InDelta(t, 8.55, counts.RequestCharge, 1e-9)

	srv.ResetCounts()
	assert.Equal(t, Counts{ByOp: map[Op]int64{}}, srv.Counts())
}

func TestRequestChargeFollowsTheDocumentedModel(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	small := map[string]any{"id": "a", "pk": "p"}
	assert.Equal(t, "5.55", c.createDoc(small).header.Get("x-ms-request-charge"),
		"create: 4.95 (the table's write charge at 1 KB, the least) + 0.2 per indexed term * 3 (id, pk, _ts)")
	assert.Equal(t, "1", c.do("GET", docPath("a"), nil, pkHeader("p")).header.Get("x-ms-request-charge"), "read: 1 at 1 KB")

	big := c.createDoc(map[string]any{"id": "b", "pk": "p", "data": strings.Repeat("x", 3000)})
	kb := float64(len(big.body)) / 1024
	require.True(t, kb > 2 && kb < 4, "stored size %.2f KB, between the table's 2 and 4 KB rows", kb)
	// between the rows 2 KB (read 1.04, write 6.29) and 4 KB (read 1.14, write 6.67), linear in the size
	write := 6.29 + (6.67-6.29)*(kb-2)/(4-2) + 0.2*4 // id, pk, _ts, data
	read := 1.04 + (1.14-1.04)*(kb-2)/(4-2)
	assert.Equal(t, formatCharge(write), big.header.Get("x-ms-request-charge"), "create of %.2f KB", kb)
	assert.Equal(t, formatCharge(read), c.do("GET", docPath("b"), nil, pkHeader("p")).header.Get("x-ms-request-charge"))
	assert.Equal(t, formatCharge(write), c.do("DELETE", docPath("b"), nil, pkHeader("p")).header.Get("x-ms-request-charge"),
		"delete: the same size charge, and the same 4 index entries, taken out")

	q := c.query("SELECT * FROM c", nil, pkHeader("p"))
	assert.Equal(t, "2.45", q.header.Get("x-ms-request-charge"), "query: 2.3 + 0.05 * 1 evaluated + 0.1 * 1 started KB returned")
	assert.Equal(t, "1", c.do("GET", docPath("zzz"), nil, pkHeader("p")).header.Get("x-ms-request-charge"), "a refusal: 1")
	assert.Equal(t, "1", c.do("GET", collPath, nil, nil).header.Get("x-ms-request-charge"), "metadata: 1")
}
