package fakecosmos

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPriorityLevelIsHighOrLowElse400(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	var seen []string
	srv.InjectFault(Fault{Match: func(ri RequestInfo) bool {
		seen = append(seen, ri.PriorityLevel)
		return false
	}})
	for _, level := range []string{"", "High", "Low", "low"} {
		r := c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrPriorityLevel, level))
		assert.Equal(t, http.StatusNotFound, r.status, "level %q is accepted: %s", level, r.body)
	}
	assert.Equal(t, []string{"High", "High", "Low", "Low"}, seen, "faults see the level, High when none is sent")

	before := srv.Documents(testDB, testColl)
	r := c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p").with(hdrPriorityLevel, "Medium"))
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, string(r.body), "x-ms-cosmos-priority-level")
	assert.Equal(t, before, srv.Documents(testDB, testColl), "nothing is executed")
}

func TestAFaultCanThrottleLowPriorityRequestsOnly(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.standardContainer()
	srv.InjectFault(Fault{Match: func(ri RequestInfo) bool { return ri.PriorityLevel == "Low" }, Status: http.StatusTooManyRequests})
	assert.Equal(t, http.StatusTooManyRequests, c.do("GET", docPath("a"), nil, pkHeader("p").with(hdrPriorityLevel, "Low")).status)
	assert.Equal(t, http.StatusNotFound, c.do("GET", docPath("a"), nil, pkHeader("p")).status)
}
