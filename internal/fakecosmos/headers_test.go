package fakecosmos

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	uuidPattern         = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	sessionTokenPattern = regexp.MustCompile(`^[0-9]+:-1#[0-9]+$`)
)

// headerCase is one request of the table and what its answer must carry
// besides the headers every answer carries.
type headerCase struct {
	name      string
	send      func(c *testClient) testResponse
	status    int
	itemCount bool // a feed or query page: x-ms-item-count
	usage     bool // a container read: x-ms-resource-usage and -quota
}

func headerCases() []headerCase {
	queryHeaders := hdr{"x-ms-documentdb-isquery": "True", "Content-Type": "application/query+json"}
	return []headerCase{
		{name: "account read", status: 200, send: func(c *testClient) testResponse { return c.do("GET", "/", nil, nil) }},
		{name: "database list", status: 200, itemCount: true, send: func(c *testClient) testResponse { return c.do("GET", "/dbs", nil, nil) }},
		{name: "database read", status: 200, send: func(c *testClient) testResponse { return c.do("GET", "/dbs/db", nil, nil) }},
		{name: "database create conflict", status: 409, send: func(c *testClient) testResponse {
			return c.do("POST", "/dbs", map[string]any{"id": "db"}, nil)
		}},
		{name: "container list", status: 200, itemCount: true, send: func(c *testClient) testResponse { return c.do("GET", "/dbs/db/colls", nil, nil) }},
		{name: "container read", status: 200, usage: true, send: func(c *testClient) testResponse { return c.do("GET", collPath, nil, nil) }},
		{name: "container read missing", status: 404, send: func(c *testClient) testResponse { return c.do("GET", "/dbs/db/colls/nope", nil, nil) }},
		{name: "partition key ranges", status: 200, itemCount: true, send: func(c *testClient) testResponse { return c.do("GET", collPath+"/pkranges", nil, nil) }},
		{name: "item create", status: 201, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"id": "new", "pk": "p"}, pkHeader("p"))
		}},
		{name: "item create conflict", status: 409, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p"))
		}},
		{name: "item upsert", status: 200, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"id": "a", "pk": "p"}, pkHeader("p").with("x-ms-documentdb-is-upsert", "True"))
		}},
		{name: "item read", status: 200, send: func(c *testClient) testResponse { return c.do("GET", docPath("a"), nil, pkHeader("p")) }},
		{name: "item read missing", status: 404, send: func(c *testClient) testResponse { return c.do("GET", docPath("zz"), nil, pkHeader("p")) }},
		{name: "item replace", status: 200, send: func(c *testClient) testResponse {
			return c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p", "v": 2}, pkHeader("p"))
		}},
		{name: "item replace stale etag", status: 412, send: func(c *testClient) testResponse {
			return c.do("PUT", docPath("a"), map[string]any{"id": "a", "pk": "p"}, pkHeader("p").with("If-Match", `"stale"`))
		}},
		{name: "item patch", status: 200, send: func(c *testClient) testResponse {
			return c.do("PATCH", docPath("a"), ops(op("set", "/x", 1)), pkHeader("p"))
		}},
		{name: "item delete", status: 204, send: func(c *testClient) testResponse { return c.do("DELETE", docPath("a"), nil, pkHeader("p")) }},
		{name: "item without partition key", status: 400, send: func(c *testClient) testResponse { return c.do("GET", docPath("a"), nil, nil) }},
		{name: "batch", status: 200, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, []any{createOp("b1"), map[string]any{"operationType": "Read", "id": "a"}}, batchHeaders("p"))
		}},
		{name: "batch rolled back", status: 207, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, []any{createOp("b2"), createOp("a")}, batchHeaders("p"))
		}},
		{name: "query in a partition", status: 200, itemCount: true, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c"}, queryHeaders.with("x-ms-documentdb-partitionkey", `["p"]`))
		}},
		{name: "query across partitions", status: 200, itemCount: true, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c"}, queryHeaders.with("x-ms-documentdb-query-enablecrosspartition", "True"))
		}},
		{name: "query refused across partitions", status: 400, send: func(c *testClient) testResponse {
			return c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c ORDER BY c.id"}, queryHeaders.with("x-ms-documentdb-query-enablecrosspartition", "True"))
		}},
		{name: "read feed", status: 200, itemCount: true, send: func(c *testClient) testResponse { return c.do("GET", docsPath, nil, nil) }},
		{name: "read feed of a partition", status: 200, itemCount: true, send: func(c *testClient) testResponse { return c.do("GET", docsPath, nil, pkHeader("p")) }},
	}
}

// isDocumentAnswer is an answer about documents that reached a partition
// key range: it carries that range's session token.
func isDocumentAnswer(c headerCase) bool {
	switch c.name {
	case "account read", "database list", "database read", "database create conflict", "container list",
		"container read", "container read missing", "partition key ranges", "item without partition key",
		"query refused across partitions":
		return false
	}
	return true
}

// Every answer carries what the SDKs read: an activity id, a request
// charge, a session token (the range's for document answers), the item
// count on feeds, quota usage on container reads, and refusals in the
// gateway's {"code","message"} shape with the activity id.
func TestEveryAnswerCarriesTheHeadersTheSDKsRead(t *testing.T) {
	for _, tc := range headerCases() {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
			c.standardContainer()
			c.createDoc(map[string]any{"id": "a", "pk": "p"})
			r := tc.send(c)
			require.Equal(t, tc.status, r.status, "%s", r.body)

			activity := r.header.Get("x-ms-activity-id")
			assert.Regexp(t, uuidPattern, activity)
			charge, err := strconv.ParseFloat(r.header.Get("x-ms-request-charge"), 64)
			require.NoError(t, err, "x-ms-request-charge %q", r.header.Get("x-ms-request-charge"))
			assert.Greater(t, charge, 0.0)
			if isDocumentAnswer(tc) || tc.status < 400 {
				assert.Regexp(t, sessionTokenPattern, r.header.Get("x-ms-session-token"))
			}
			if tc.itemCount {
				n, err := strconv.Atoi(r.header.Get("x-ms-item-count"))
				require.NoError(t, err, "x-ms-item-count %q", r.header.Get("x-ms-item-count"))
				assert.GreaterOrEqual(t, n, 0)
			}
			if tc.usage {
				assert.Contains(t, r.header.Get("x-ms-resource-usage"), "documentsCount=1")
				assert.NotEmpty(t, r.header.Get("x-ms-resource-quota"))
			}
			if tc.status >= 400 {
				body := r.object(t)
				assert.Equal(t, errorCode(tc.status), body["code"])
				assert.Contains(t, body["message"], "ActivityId: "+activity)
			}
		})
	}
}

func TestResourceUsageCountsAContainersDocumentsAndTheirSize(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	for _, id := range []string{"a", "b", "c"} {
		c.createDoc(map[string]any{"id": id, "pk": id})
	}
	usage := parseUsage(c.do("GET", collPath, nil, nil).header.Get("x-ms-resource-usage"))
	assert.Equal(t, "3", usage["documentsCount"])
	assert.Equal(t, "1", usage["documentsSize"], "three small documents start one KB")
	c.do("DELETE", docPath("a"), nil, pkHeader("a"))
	assert.Equal(t, "2", parseUsage(c.do("GET", collPath, nil, nil).header.Get("x-ms-resource-usage"))["documentsCount"])
}

func parseUsage(header string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`([A-Za-z]+)=(-?[0-9]+)`).FindAllStringSubmatch(header, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestErrorBodyCarriesAdditionalErrorInfoOnlyWhenSet(t *testing.T) {
	plain := newSubError(400, subStatusCrossPartitionServing, msgCrossPartitionNotServable)
	var body map[string]any
	require.NoError(t, json.Unmarshal(errorBody(plain, "id"), &body))
	assert.NotContains(t, body, "additionalErrorInfo")

	info := `{"partitionedQueryExecutionInfoVersion":2}`
	require.NoError(t, json.Unmarshal(errorBody(plain.withAdditionalErrorInfo(info), "id"), &body))
	assert.Equal(t, info, body["additionalErrorInfo"], "a JSON string, as the gateway sends it")
	assert.Equal(t, "BadRequest", body["code"])
}

// The limits' refusals answer as the gateway does: a whole-request error in
// the {"code","message"} shape, with no substatus and no operation array.
func TestLimitRefusalsHaveTheGatewaysShape(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	big := strings.Repeat("x", 2_100_000)
	many := make([]any, 101)
	for i := range many {
		many[i] = createOp("d" + strconv.Itoa(i))
	}
	bulkMany := make([]any, 101)
	for i := range bulkMany {
		bulkMany[i] = bulkCreate("d"+strconv.Itoa(i), "p")
	}
	cases := []struct {
		name   string
		r      testResponse
		status int
		text   string
	}{
		{"document over 2 MB", c.do("POST", docsPath, map[string]any{"id": "big", "pk": "p", "data": big}, pkHeader("p")), 413, msgEntityTooLarge},
		{"batch over 2 MB", c.do("POST", docsPath, []any{map[string]any{"operationType": "Create", "resourceBody": map[string]any{"id": "big", "pk": "p", "data": big}}}, batchHeaders("p")), 413, msgEntityTooLarge},
		{"batch of 101 operations", c.do("POST", docsPath, many, batchHeaders("p")), 400, "Batch request has more operations than what is supported."},
		{"bulk of 101 operations", c.do("POST", docsPath, bulkMany, bulkHeaders("0", true)), 400, "Batch request has more operations than what is supported."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.status, tc.r.status)
			assert.Empty(t, tc.r.subStatus())
			assert.Equal(t, errorCode(tc.status), tc.r.object(t)["code"])
			assert.Equal(t, tc.text, errorText(t, tc.r))
		})
	}
}
