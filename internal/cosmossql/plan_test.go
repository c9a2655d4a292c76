package cosmossql

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func intPtr(n int) *int { return &n }

func TestPartitionedPlan(t *testing.T) {
	tests := []struct {
		name   string
		query  string
		params map[string]any
		want   PartitionedPlan
	}{
		{
			name:  "a filter needs no rewrite",
			query: `SELECT * FROM c WHERE c.pk = @pk`,
			want:  PartitionedPlan{DistinctType: "None"},
		},
		{
			name:  "ORDER BY projects orderByItems and the payload, with the SDK's filter placeholder",
			query: `SELECT * FROM c WHERE c.n > 1 ORDER BY c.n DESC`,
			want: PartitionedPlan{
				DistinctType:       "None",
				OrderBy:            []string{"Descending"},
				OrderByExpressions: []string{"c.n"},
				RewrittenQuery:     `SELECT c._rid, [{"item": c.n}] AS orderByItems, c AS payload FROM c WHERE (c.n > 1) AND ({documentdb-formattableorderbyquery-filter}) ORDER BY c.n DESC`,
			},
		},
		{
			name:   "ORDER BY over a projection builds the payload object; TOP is resolved and kept",
			query:  `SELECT TOP @k r.id, r.n AS num FROM root r ORDER BY r.n, r.id DESC`,
			params: map[string]any{"@k": 3},
			want: PartitionedPlan{
				DistinctType:       "None",
				Top:                intPtr(3),
				OrderBy:            []string{"Ascending", "Descending"},
				OrderByExpressions: []string{"r.n", "r.id"},
				RewrittenQuery:     `SELECT TOP 3 r._rid, [{"item": r.n}, {"item": r.id}] AS orderByItems, {"id": r.id, "num": r.n} AS payload FROM root r WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY r.n, r.id DESC`,
			},
		},
		{
			name:  "ORDER BY with SELECT VALUE has the value as payload",
			query: `SELECT VALUE c.id FROM c ORDER BY c.id`,
			want: PartitionedPlan{
				DistinctType:       "None",
				HasSelectValue:     true,
				OrderBy:            []string{"Ascending"},
				OrderByExpressions: []string{"c.id"},
				RewrittenQuery:     `SELECT c._rid, [{"item": c.id}] AS orderByItems, c.id AS payload FROM c WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY c.id`,
			},
		},
		{
			name:   "OFFSET LIMIT reads offset+limit from every range and leaves the window to the client",
			query:  `SELECT * FROM c ORDER BY c.n OFFSET 2 LIMIT @l`,
			params: map[string]any{"@l": 5},
			want: PartitionedPlan{
				DistinctType:       "None",
				Offset:             intPtr(2),
				Limit:              intPtr(5),
				OrderBy:            []string{"Ascending"},
				OrderByExpressions: []string{"c.n"},
				RewrittenQuery:     `SELECT c._rid, [{"item": c.n}] AS orderByItems, c AS payload FROM c WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY c.n OFFSET 0 LIMIT 7`,
			},
		},
		{
			name:  "OFFSET LIMIT without ORDER BY",
			query: `SELECT c.id FROM c WHERE c.n > 0 OFFSET 1 LIMIT 2`,
			want: PartitionedPlan{
				DistinctType:   "None",
				Offset:         intPtr(1),
				Limit:          intPtr(2),
				RewrittenQuery: `SELECT c.id FROM c WHERE c.n > 0 OFFSET 0 LIMIT 3`,
			},
		},
		{
			name:  "DISTINCT without ORDER BY is unordered and runs as sent",
			query: `SELECT DISTINCT VALUE c.k FROM c`,
			want:  PartitionedPlan{DistinctType: "Unordered", HasSelectValue: true},
		},
		{
			name:  "DISTINCT with ORDER BY is ordered and drops _rid so that duplicates collapse",
			query: `SELECT DISTINCT VALUE c.k FROM c ORDER BY c.k`,
			want: PartitionedPlan{
				DistinctType:       "Ordered",
				HasSelectValue:     true,
				OrderBy:            []string{"Ascending"},
				OrderByExpressions: []string{"c.k"},
				RewrittenQuery:     `SELECT DISTINCT [{"item": c.k}] AS orderByItems, c.k AS payload FROM c WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY c.k`,
			},
		},
		{
			name:  "COUNT is rewritten to the VALUE item form",
			query: `SELECT VALUE COUNT(1) FROM c WHERE c.n > @min`,
			want: PartitionedPlan{
				DistinctType:   "None",
				HasSelectValue: true,
				Aggregates:     []string{"Count"},
				RewrittenQuery: `SELECT VALUE [{"item": COUNT(1)}] FROM c WHERE c.n > @min`,
			},
		},
		{
			name:  "AVG sends sum and count",
			query: `SELECT VALUE AVG(c.n) FROM c`,
			want: PartitionedPlan{
				DistinctType:   "None",
				HasSelectValue: true,
				Aggregates:     []string{"Average"},
				RewrittenQuery: `SELECT VALUE [{"item": {"sum": SUM(c.n), "count": COUNT(c.n)}}] FROM c`,
			},
		},
		{
			name:  "MAX sends max and count",
			query: `SELECT VALUE MAX(c.n) FROM c`,
			want: PartitionedPlan{
				DistinctType:   "None",
				HasSelectValue: true,
				Aggregates:     []string{"Max"},
				RewrittenQuery: `SELECT VALUE [{"item": {"max": MAX(c.n), "count": COUNT(c.n)}}] FROM c`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Parse(tt.query)
			require.NoError(t, err)
			got, err := q.PartitionedPlan(tt.params)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			if got.RewrittenQuery != "" { // the engine must run what it rewrote
				text := replaceFilterPlaceholder(got.RewrittenQuery)
				_, err := Parse(text)
				require.NoError(t, err, "the rewritten query must parse: %s", text)
			}
		})
	}
}

func replaceFilterPlaceholder(query string) string {
	const placeholder = "{documentdb-formattableorderbyquery-filter}"
	out := ""
	for i := 0; i < len(query); {
		if len(query)-i >= len(placeholder) && query[i:i+len(placeholder)] == placeholder {
			out += "true"
			i += len(placeholder)
			continue
		}
		out += query[i : i+1]
		i++
	}
	return out
}

// TestRewrittenQueriesMergeToTheOriginalResult runs a rewritten ORDER BY and
// COUNT per "range" and merges them as the SDKs do.
func TestRewrittenQueriesMergeToTheOriginalResult(t *testing.T) {
	rangeA := `[{"id":"a","_rid":"1","n":3},{"id":"b","_rid":"2","n":1}]`
	rangeB := `[{"id":"c","_rid":"3","n":2},{"id":"d","_rid":"4"}]`

	q, err := Parse(`SELECT VALUE COUNT(1) FROM c`)
	require.NoError(t, err)
	plan, err := q.PartitionedPlan(nil)
	require.NoError(t, err)
	assert.JSONEq(t, `[[{"item":2}]]`, runJSON(t, plan.RewrittenQuery, rangeA, nil))
	assert.JSONEq(t, `[[{"item":2}]]`, runJSON(t, plan.RewrittenQuery, rangeB, nil))

	q, err = Parse(`SELECT c.id FROM c ORDER BY c.n`)
	require.NoError(t, err)
	plan, err = q.PartitionedPlan(nil)
	require.NoError(t, err)
	perRange := runJSON(t, replaceFilterPlaceholder(plan.RewrittenQuery), rangeB, nil)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(perRange), &rows))
	// An item without the ORDER BY property sorts first, with an empty
	// orderByItem, as the SDK's comparator expects.
	assert.JSONEq(t, `[{"_rid":"4","orderByItems":[{}],"payload":{"id":"d"}},{"_rid":"3","orderByItems":[{"item":2}],"payload":{"id":"c"}}]`, perRange)
}

func TestPartitionedPlanRefusals(t *testing.T) {
	tests := []struct {
		name, query string
		params      map[string]any
		feature     string
	}{
		{"GROUP BY", `SELECT c.k, COUNT(1) AS n FROM c GROUP BY c.k`, nil, "GROUP BY"},
		{"aggregates without VALUE", `SELECT COUNT(1) AS n FROM c`, nil, "aggregates without SELECT VALUE"},
		{"an aggregate with TOP", `SELECT TOP 1 VALUE COUNT(1) FROM c`, nil, "aggregates with TOP"},
		{"an aggregate inside an expression of its own", `SELECT VALUE [COUNT(1)] FROM c`, nil, "aggregates inside SELECT VALUE expressions"},
		{"a missing TOP parameter", `SELECT TOP @n * FROM c`, nil, "@n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Parse(tt.query)
			require.NoError(t, err)
			_, err = q.PartitionedPlan(tt.params)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.feature)
		})
	}
}
