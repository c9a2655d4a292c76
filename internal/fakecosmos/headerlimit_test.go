package fakecosmos

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// compoundToken is a session token of n ranges, as a client that sends
// every range's token does.
func compoundToken(n int) string {
	segs := make([]string, n)
	for i := range segs {
		segs[i] = fmt.Sprintf("%d:-1#%d", i, 1000000+i)
	}
	return strings.Join(segs, ",")
}

func TestOversizedRequestHeadersAreRefusedAsTheGatewayDoes(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	require.Equal(t, http.StatusCreated, c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p")).status)
	before := srv.Documents(testDB, testColl)

	token := compoundToken(1200) // about 17 KB
	require.Greater(t, len(token), DefaultMaxRequestHeaderBytes)
	r := c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrSessionToken, token))
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, string(r.body), "The size of the request headers is too long")
	assert.Equal(t, "text/html; charset=us-ascii", r.header.Get("Content-Type"))
	assert.Empty(t, r.subStatus(), "the front end answers, not the service")
	assert.Empty(t, r.header.Get("x-ms-activity-id"))

	r = c.do("POST", docsPath, map[string]any{"id": "b", "pk": "p"}, pkHeader("p").with(hdrSessionToken, token))
	assert.Equal(t, http.StatusBadRequest, r.status, "writes too")
	assert.Equal(t, before, srv.Documents(testDB, testColl), "nothing is executed")

	r = c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrSessionToken, compoundToken(600)))
	assert.Equal(t, http.StatusOK, r.status, "under the limit: %s", r.body)
}

func TestTheHeaderLimitIsAnOption(t *testing.T) {
	_, c := newTestServer(t, Options{MaxRequestHeaderBytes: 2048})
	c.standardContainer()
	r := c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrSessionToken, compoundToken(200)))
	assert.Equal(t, http.StatusBadRequest, r.status)

	_, c = newTestServer(t, Options{MaxRequestHeaderBytes: -1})
	c.standardContainer()
	r = c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrSessionToken, compoundToken(5000)))
	assert.Equal(t, http.StatusNotFound, r.status, "no cap: the read runs")
}
