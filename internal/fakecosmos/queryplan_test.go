package fakecosmos

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allQueryFeatures is what @azure/cosmos 4.x sends in
// x-ms-cosmos-supported-query-features.
const allQueryFeatures = "NonValueAggregate,Aggregate,Distinct,MultipleOrderBy,OffsetAndLimit,OrderBy,Top,CompositeAggregate,GroupBy,MultipleAggregates,NonStreamingOrderBy,ListAndSetAggregate,CountIf,HybridSearch,WeightedRankFusion,HybridSearchSkipOrderByRewrite"

// planRequest sends a query plan request as @azure/cosmos does: no isquery
// header, the plan flag, the query content type.
func (c *testClient) planRequest(text string, params map[string]any, features string) testResponse {
	c.t.Helper()
	body := map[string]any{"query": text}
	if params != nil {
		var list []map[string]any
		for k, v := range params {
			list = append(list, map[string]any{"name": k, "value": v})
		}
		body["parameters"] = list
	}
	h := hdr{"x-ms-cosmos-is-query-plan-request": "True", "Content-Type": "application/query+json", "x-ms-cosmos-query-version": "1.4"}
	if features != "" {
		h["x-ms-cosmos-supported-query-features"] = features
	}
	return c.do("POST", docsPath, body, h)
}

func TestQueryPlanRequestIsAnsweredWithThePlan(t *testing.T) {
	srv, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()

	r := c.planRequest("SELECT * FROM c WHERE c.n > 1 ORDER BY c.n DESC", nil, allQueryFeatures)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.JSONEq(t, `{
		"partitionedQueryExecutionInfoVersion": 2,
		"queryInfo": {
			"distinctType": "None", "top": null, "offset": null, "limit": null,
			"orderBy": ["Descending"], "orderByExpressions": ["c.n"],
			"groupByExpressions": [], "groupByAliases": [], "aggregates": [],
			"groupByAliasToAggregateType": {},
			"rewrittenQuery": "SELECT c._rid, [{\"item\": c.n}] AS orderByItems, c AS payload FROM c WHERE (c.n > 1) AND ({documentdb-formattableorderbyquery-filter}) ORDER BY c.n DESC",
			"hasSelectValue": false, "dCountInfo": null, "hasNonStreamingOrderBy": false
		},
		"queryRanges": [{"min": "", "max": "FF", "isMinInclusive": true, "isMaxInclusive": false}]
	}`, string(r.body))
	assert.Empty(t, r.header.Get("x-ms-session-token"), "a plan reads no range, so it carries no session token a client would file under one")
	assert.Equal(t, int64(1), srv.Counts().ByOp[OpQueryPlan])
	assert.Zero(t, srv.Counts().ByOp[OpCreateItem], "a plan request is not mistaken for a create")

	r = c.planRequest("SELECT TOP @k VALUE COUNT(1) FROM c", map[string]any{"@k": 1}, allQueryFeatures)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "aggregates with TOP")

	r = c.planRequest("SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk", map[string]any{"@pk": "x"}, allQueryFeatures)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	info := r.object(t)["queryInfo"].(map[string]any)
	assert.Equal(t, []any{"Count"}, info["aggregates"])
	assert.Equal(t, true, info["hasSelectValue"])
	assert.Equal(t, `SELECT VALUE [{"item": COUNT(1)}] FROM c WHERE c.pk = @pk`, info["rewrittenQuery"])

	r = c.planRequest("SELECT * FROM c OFFSET @o LIMIT 2", map[string]any{"@o": 3}, allQueryFeatures)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	info = r.object(t)["queryInfo"].(map[string]any)
	assert.EqualValues(t, 3, info["offset"])
	assert.EqualValues(t, 2, info["limit"])
}

func TestQueryPlanRefusesWhatItOrTheClientDoesNotSupport(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()

	r := c.planRequest("SELECT * FROM c ORDER BY c.n", nil, "Aggregate,Distinct,Top")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "OrderBy, which the calling client does not support")

	r = c.planRequest("SELECT * FROM c ORDER BY c.n, c.id", nil, "OrderBy")
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "MultipleOrderBy")

	r = c.planRequest("SELECT c.status, COUNT(1) AS n FROM c GROUP BY c.status", nil, allQueryFeatures)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "GROUP BY is not supported")

	r = c.planRequest("SELECT COUNT(1) AS n FROM c", nil, allQueryFeatures)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorText(t, r), "aggregates without SELECT VALUE")

	r = c.do("POST", docsPath, map[string]any{"query": "SELECT * FROM c"}, hdr{"x-ms-cosmos-is-query-plan-request": "True"})
	assert.Equal(t, http.StatusBadRequest, r.status, "a plan request needs the query content type")

	r = c.do("POST", "/dbs/db/colls/missing/docs", map[string]any{"query": "SELECT * FROM c"}, hdr{"x-ms-cosmos-is-query-plan-request": "True", "Content-Type": "application/query+json"})
	assert.Equal(t, http.StatusNotFound, r.status)
}

func TestCrossPartition1004CarriesThePlanInAdditionalErrorInfo(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	r := c.query("SELECT * FROM c ORDER BY c.n", nil, crossPartition)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "1004", r.subStatus())
	info, ok := r.object(t)["additionalErrorInfo"].(string)
	require.True(t, ok, "the SDKs fall back to a query plan only when additionalErrorInfo is there: %s", r.body)
	var plan map[string]any
	require.NoError(t, json.Unmarshal([]byte(info), &plan))
	assert.EqualValues(t, 2, plan["partitionedQueryExecutionInfoVersion"])
	assert.Equal(t, []any{"c.n"}, plan["queryInfo"].(map[string]any)["orderByExpressions"])

	r = c.query("SELECT c.status, COUNT(1) AS n FROM c GROUP BY c.status", nil, crossPartition)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Empty(t, r.subStatus(), "what no plan can serve is refused by name, not as a first-chance 1004")
	assert.Contains(t, errorText(t, r), "GROUP BY")
}

// TestExecutingThePlanPerRangeGivesTheWholeResult does what the SDKs do
// with a plan: run the rewritten query on every range and merge.
func TestExecutingThePlanPerRangeGivesTheWholeResult(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 3})
	c.standardContainer()
	seed(c, 12, 6)

	r := c.planRequest("SELECT VALUE c.n FROM c WHERE c.n >= 2 ORDER BY c.n DESC", nil, allQueryFeatures)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	rewritten := r.object(t)["queryInfo"].(map[string]any)["rewrittenQuery"].(string)
	rewritten = strings.Replace(rewritten, "{documentdb-formattableorderbyquery-filter}", "true", 1)
	var merged []float64
	for _, id := range rangeIDs(t, c) {
		_, rows := c.queryAll(rewritten, hdr{"x-ms-documentdb-partitionkeyrangeid": id, "x-ms-max-item-count": "2"})
		for _, row := range rows {
			assert.Contains(t, row, "_rid")
			items := row["orderByItems"].([]any)
			require.Len(t, items, 1)
			assert.Equal(t, row["payload"], items[0].(map[string]any)["item"])
			merged = append(merged, row["payload"].(float64))
		}
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(merged)))
	assert.Equal(t, []float64{11, 10, 9, 8, 7, 6, 5, 4, 3, 2}, merged)

	r = c.planRequest("SELECT VALUE COUNT(1) FROM c WHERE c.n >= 2", nil, allQueryFeatures)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	rewritten = r.object(t)["queryInfo"].(map[string]any)["rewrittenQuery"].(string)
	total := 0.0
	for _, id := range rangeIDs(t, c) {
		res := c.query(rewritten, nil, hdr{"x-ms-documentdb-partitionkeyrangeid": id})
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		docs := res.object(t)["Documents"].([]any)
		require.Len(t, docs, 1)
		total += docs[0].([]any)[0].(map[string]any)["item"].(float64)
	}
	assert.Equal(t, 10.0, total)
}
