package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// -metrics serves, in Prometheus's text format, the client's request
// metrics and the runtime's, by orchestration name.
func TestPrometheusScrapeHasTheClientsAndTheRuntimesMetrics(t *testing.T) {
	ctx := testContext(t)
	ex, err := newExport(ctx, options{metrics: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(ex.shutdown)
	require.NoError(t, runWorkload(ctx, ex.telemetry, 3))

	resp, err := http.Get("http://" + ex.listener.Addr().String() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	scrape := string(body)

	assert.Contains(t, scrape, "# TYPE db_client_operation_duration_seconds histogram")
	assert.Contains(t, scrape, "# TYPE azure_cosmosdb_client_operation_request_charge histogram")
	assert.Regexp(t, `(?m)^azure_cosmosdb_client_operation_request_charge_sum\{[^}]*durable_orchestration_name="Order"`, scrape,
		"a turn's requests carry their orchestration's name")
	assert.Regexp(t, `(?m)^durable_orchestration_completions_total\{durable_orchestration_name="Order",durable_orchestration_status="completed",[^}]*\} 3$`, scrape)
	assert.Contains(t, scrape, "# TYPE durable_activity_duration_seconds histogram")
}

// collector records what an OTLP/HTTP exporter posts to it.
type collector struct {
	mu    sync.Mutex
	posts map[string]string // path: content type
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c.mu.Lock()
	c.posts[r.Method+" "+r.URL.Path] = r.Header.Get("Content-Type")
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// -otlp pushes the metrics and, with -request-spans, the requests' spans to
// a collector over OTLP/HTTP; the last export goes out at shutdown.
func TestOTLPExportPushesMetricsAndSpansToTheCollector(t *testing.T) {
	ctx := testContext(t)
	c := &collector{posts: map[string]string{}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	ex, err := newExport(ctx, options{otlp: strings.TrimPrefix(srv.URL, "http://"), requestSpans: true})
	require.NoError(t, err)
	require.Nil(t, ex.listener, "no Prometheus listener without -metrics")
	require.NoError(t, runWorkload(ctx, ex.telemetry, 2))
	ex.shutdown()

	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Equal(t, map[string]string{
		"POST /v1/metrics": "application/x-protobuf",
		"POST /v1/traces":  "application/x-protobuf",
	}, c.posts)
}

func TestFlagsNeedAnExport(t *testing.T) {
	_, err := parseOptions(nil, io.Discard)
	assert.EqualError(t, err, "give -metrics ADDRESS, -otlp HOST:PORT or both")
	o, err := parseOptions([]string{"-metrics", ":9464", "-orders", "5"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, options{metrics: ":9464", orders: 5}, o)
}
