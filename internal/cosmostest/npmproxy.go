package cosmostest

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// NPMProxy serves, on a loopback endpoint of its own, the npm server at
// endpoint through the same workarounds as NPMTarget's client
// (vercelWorkarounds): for a test whose client it does not build, such as
// the cdb binary's. It stops when the test ends.
func NPMProxy(t *testing.T, endpoint string) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("npm proxy: %v", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = vercelWorkarounds{next: http.DefaultTransport}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}
