package sim

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every record, debug included, is kept under each scenario it mentions
// (in its message, its attributes or its logger's), the last flightKeep
// of each in order; the report prints the violating scenarios' records.
func TestTheFlightRecorderKeepsEachScenariosLastRecords(t *testing.T) {
	rec := newFlightRecorder()
	rec.keep = 3
	var warned bytes.Buffer
	logger := slog.New(&flightHandler{rec: rec, next: slog.NewTextHandler(&warned, &slog.HandlerOptions{Level: slog.LevelWarn})})
	node := logger.With("node", "n1")
	for i := range 5 {
		node.Debug("turn", "instance", "s7-inbox", "i", i)
	}
	node.Debug("released", "instance", "s12-chain::child-1")
	node.Warn("moved s7-inbox and s12-chain apart")
	node.Debug("nothing of a scenario")

	got := rec.of("s7-inbox")
	require.Len(t, got, 3)
	assert.Contains(t, got[0], "turn node=n1 instance=s7-inbox i=3")
	assert.Contains(t, got[1], "i=4")
	assert.Contains(t, got[2], "moved s7-inbox and s12-chain apart")
	assert.Len(t, rec.of("s12-chain::child-1"), 2, "a child's records are its scenario's")
	assert.Equal(t, 1, strings.Count(warned.String(), "\n"), "the run's own logger still gets what it asks for, the warning only")

	flight := rec.forViolations([]Violation{{Invariant: "x", Instance: "s12-chain::child-1"}, {Invariant: "y", Instance: "s99-none"}})
	require.Len(t, flight, 1)
	var out bytes.Buffer
	printFlight(&out, flight)
	assert.Contains(t, out.String(), "flight log of s12-chain: 2 records")
	assert.Contains(t, out.String(), "| ")
}

// A request try naming a scenario in its partition key is kept as one
// line: the start of what it sends, the fault drawn and the answer.
func TestTheFlightRecorderKeepsEachRequestOfAScenario(t *testing.T) {
	rec := newFlightRecorder()
	req := httptest.NewRequest(http.MethodPost, "/dbs/d/colls/c/docs", nil)
	req.Header.Set("x-ms-documentdb-partitionkey", `["s3-chain"]`)
	body := `[{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":"lock_chain.ab"},{"op":"set","path":"/lockedUntil","value":42}]}},` +
		`{"operationType":"Create","resourceBody":{"id":"w|1|2","lockToken":"work_x"}}]`
	rec.request("n2", "Batch", req, []byte(body), "lost-response", 200, nil)
	req.Header.Set("x-ms-documentdb-partitionkey", `["other"]`)
	rec.request("n2", "Batch", req, []byte(body), "", 200, nil)

	got := rec.of("s3-chain")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], `WIRE node=n2 op=Batch pk=s3-chain body=[{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":"lock_chain.ab"}`)
	assert.Contains(t, got[0], `fault="lost-response" status=200`)
}
