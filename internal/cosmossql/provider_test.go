package cosmossql

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The queries a work-queue provider sends, run against a small queue.
const queueDocs = `[
	{"id":"m1","pk":"p1","type":"orch_queue","visibleAt":100,"seq":2,"slot":"s0","status":"queued","instanceId":"i1"},
	{"id":"m2","pk":"p1","type":"orch_queue","visibleAt":100,"seq":1,"slot":"s1","status":"queued","instanceId":"i2","lockedUntil":50},
	{"id":"m3","pk":"p1","type":"orch_queue","visibleAt":90,"seq":3,"slot":"s0","status":"leased","instanceId":"i3","lockedUntil":500},
	{"id":"m4","pk":"p1","type":"orch_queue","visibleAt":300,"seq":4,"slot":"s2","status":"queued","instanceId":"i4"},
	{"id":"m5","pk":"p2","type":"orch_queue","visibleAt":10,"seq":5,"slot":"s1","status":"queued","instanceId":"i5"},
	{"id":"h1","pk":"p1","type":"history","instanceId":"i1","parent":"i0"},
	{"id":"h2","pk":"p1","type":"history","instanceId":"i2","parent":null},
	{"id":"h3","pk":"p1","type":"history","instanceId":"i3","parent":"i0"},
	{"id":"h4","pk":"p1","type":"history","instanceId":"i4"}
]`

func TestProviderQueries(t *testing.T) {
	tests := []struct {
		name   string
		query  string
		params map[string]any
		want   string
	}{
		{
			name: "dequeue: visible, unlocked or lock expired, ordered by visibleAt then seq",
			query: `SELECT * FROM c WHERE c.pk = @pk AND c.type = 'orch_queue' AND c.visibleAt <= @now ` +
				`AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil <= @now) ORDER BY c.visibleAt ASC, c.seq ASC`,
			params: map[string]any{"@pk": "p1", "@now": 200},
			want: `[
				{"id":"m2","pk":"p1","type":"orch_queue","visibleAt":100,"seq":1,"slot":"s1","status":"queued","instanceId":"i2","lockedUntil":50},
				{"id":"m1","pk":"p1","type":"orch_queue","visibleAt":100,"seq":2,"slot":"s0","status":"queued","instanceId":"i1"}
			]`,
		},
		{
			name:   "TOP with a projection and IN over parameters",
			query:  `SELECT TOP 10 c.id, c.instanceId FROM c WHERE c.slot IN (@s0, @s1) AND c.status = "queued"`,
			params: map[string]any{"@s0": "s0", "@s1": "s1"},
			want:   `[{"id":"m1","instanceId":"i1"},{"id":"m2","instanceId":"i2"},{"id":"m5","instanceId":"i5"}]`,
		},
		{
			name:   "TOP smaller than the result truncates it",
			query:  `SELECT TOP 1 c.id FROM c WHERE c.slot IN (@s0, @s1) AND c.status = "queued"`,
			params: map[string]any{"@s0": "s0", "@s1": "s1"},
			want:   `[{"id":"m1"}]`,
		},
		{
			name:   "SELECT VALUE COUNT(1) counts matching documents",
			query:  `SELECT VALUE COUNT(1) FROM c WHERE c.type = @t`,
			params: map[string]any{"@t": "history"},
			want:   `[4]`,
		},
		{
			name:   "SELECT VALUE COUNT(1) over nothing is [0]",
			query:  `SELECT VALUE COUNT(1) FROM c WHERE c.type = @t`,
			params: map[string]any{"@t": "nope"},
			want:   `[0]`,
		},
		{
			name:   "ARRAY_CONTAINS with an array parameter",
			query:  `SELECT VALUE c.instanceId FROM c WHERE ARRAY_CONTAINS(@ids, c.instanceId) AND c.type = 'orch_queue'`,
			params: map[string]any{"@ids": []string{"i2", "i4", "zz"}},
			want:   `["i2","i4"]`,
		},
		{
			name:   "STARTSWITH with OFFSET and LIMIT",
			query:  `SELECT * FROM c WHERE STARTSWITH(c.id, @prefix) OFFSET 2 LIMIT 3`,
			params: map[string]any{"@prefix": "m"},
			want: `[
				{"id":"m3","pk":"p1","type":"orch_queue","visibleAt":90,"seq":3,"slot":"s0","status":"leased","instanceId":"i3","lockedUntil":500},
				{"id":"m4","pk":"p1","type":"orch_queue","visibleAt":300,"seq":4,"slot":"s2","status":"queued","instanceId":"i4"},
				{"id":"m5","pk":"p2","type":"orch_queue","visibleAt":10,"seq":5,"slot":"s1","status":"queued","instanceId":"i5"}
			]`,
		},
		{
			name:  "DISTINCT VALUE of defined, non-null parents",
			query: `SELECT DISTINCT VALUE c.parent FROM c WHERE IS_DEFINED(c.parent) AND NOT IS_NULL(c.parent)`,
			want:  `["i0"]`,
		},
		{
			name:  "aliases and object literals in the projection",
			query: `SELECT c.id AS x, {"n": c.seq} AS o FROM c WHERE c.type = 'orch_queue' AND c.seq <= 2`,
			want:  `[{"x":"m1","o":{"n":2}},{"x":"m2","o":{"n":1}}]`,
		},
		{
			name:   "NOT (x IN (...)) excludes the listed values",
			query:  `SELECT VALUE c.id FROM c WHERE c.type = 'orch_queue' AND NOT (c.status IN (@a, @b))`,
			params: map[string]any{"@a": "leased", "@b": "done"},
			want:   `["m1","m2","m4","m5"]`,
		},
		{
			name:  "x NOT IN (...) equals NOT (x IN (...))",
			query: `SELECT VALUE c.id FROM c WHERE c.type = 'orch_queue' AND c.status NOT IN ('queued')`,
			want:  `["m3"]`,
		},
		{
			name:   "TOP as a parameter",
			query:  `SELECT TOP @n VALUE c.id FROM c WHERE c.type = 'history'`,
			params: map[string]any{"@n": json.Number("2")},
			want:   `["h1","h2"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.JSONEq(t, tt.want, runJSON(t, tt.query, queueDocs, tt.params))
		})
	}
}

func TestPatchConditionFromClause(t *testing.T) {
	doc := decodeJSON(t, `{"id":"a","status":"queued"}`).(map[string]any)
	leased := decodeJSON(t, `{"id":"b","status":"leased"}`).(map[string]any)

	t.Run("the condition runs as SELECT * plus the condition", func(t *testing.T) {
		q, err := Parse("SELECT * " + "from c where c.status = 'queued'")
		require.NoError(t, err)
		ok, err := q.Matches(doc, nil)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = q.Matches(leased, nil)
		require.NoError(t, err)
		assert.False(t, ok)
	})
	t.Run("ParseCondition accepts the bare from-clause", func(t *testing.T) {
		q, err := ParseCondition("from c where c.status = 'queued'")
		require.NoError(t, err)
		ok, err := q.Matches(doc, nil)
		require.NoError(t, err)
		assert.True(t, ok)
	})
	t.Run("ParseCondition without WHERE matches everything", func(t *testing.T) {
		q, err := ParseCondition("FROM c")
		require.NoError(t, err)
		ok, err := q.Matches(leased, nil)
		require.NoError(t, err)
		assert.True(t, ok)
	})
	t.Run("ParseCondition reports positions in the condition text", func(t *testing.T) {
		_, err := ParseCondition("from c where c.status = ")
		var se *SyntaxError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 24, se.Pos)
	})
	t.Run("ParseCondition refuses a full query", func(t *testing.T) {
		_, err := ParseCondition("SELECT * FROM c WHERE c.x = 1")
		var se *SyntaxError
		require.ErrorAs(t, err, &se)
		assert.Contains(t, se.Msg, "must start with FROM")
	})
	t.Run("ParseCondition refuses clauses beyond WHERE", func(t *testing.T) {
		_, err := ParseCondition("from c where c.x = 1 order by c.x")
		var se *SyntaxError
		require.ErrorAs(t, err, &se)
		assert.Contains(t, se.Msg, "only hold FROM and WHERE")
	})
}
