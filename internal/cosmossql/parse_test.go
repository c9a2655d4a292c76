package cosmossql

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		wantPos int
		wantMsg string
	}{
		{"empty query expects SELECT", ``, 0, "expected SELECT, found end of query"},
		{"missing FROM names what was found", `SELECT * WHERE c.x = 1`, 9, `expected FROM, found "WHERE"`},
		{"dangling operator expects an expression", `SELECT * FROM c WHERE c.x =`, 27, "expected an expression, found end of query"},
		{"unbalanced parenthesis", `SELECT * FROM c WHERE (c.x = 1`, 30, "expected ')'"},
		{"trailing garbage", `SELECT * FROM c WHERE c.x = 1 c.y`, 30, "expected end of query"},
		{"OFFSET without LIMIT", `SELECT * FROM c OFFSET 1`, 24, "expected LIMIT"},
		{"negative TOP", `SELECT TOP -1 * FROM c`, 11, "non-negative integer"},
		{"fractional TOP", `SELECT TOP 1.5 * FROM c`, 11, "non-negative integer"},
		{"unterminated string", `SELECT * FROM c WHERE c.x = 'abc`, 28, "unterminated string literal"},
		{"invalid escape", `SELECT * FROM c WHERE c.x = "a\qb"`, 30, "invalid escape sequence"},
		{"bad character", `SELECT * FROM c WHERE c.x = #`, 28, "unexpected character '#'"},
		{"bitwise operators are refused", `SELECT * FROM c WHERE c.x & 1 = 1`, 26, "bitwise operator"},
		{"@ without a name", `SELECT * FROM c WHERE c.x = @`, 28, "parameter name"},
		{"unknown function is named", `SELECT * FROM c WHERE FOO(c.x)`, 22, "unknown or unsupported function FOO"},
		{"wrong argument count is named", `SELECT * FROM c WHERE STARTSWITH(c.x)`, 22, "STARTSWITH takes 2 to 3 arguments, got 1"},
		{"unresolved identifier", `SELECT * FROM c WHERE d.x = 1`, 22, "identifier d could not be resolved"},
		{"the collection name is not an alias once aliased", `SELECT * FROM root r WHERE root.x = 1`, 27, "identifier root could not be resolved"},
		{"reserved word after a dot", `SELECT * FROM c WHERE c.value = 1`, 24, `write ["value"] instead`},
		{"reserved word as an alias", `SELECT c.x AS order FROM c`, 14, "reserved word order"},
		{"literals are lowercase only", `SELECT * FROM c WHERE c.x = TRUE`, 28, "identifier TRUE could not be resolved"},
		{"SELECT * with other items", `SELECT *, c.id FROM c`, 8, "expected FROM"},
		{"SELECT VALUE *", `SELECT VALUE * FROM c`, 13, "SELECT VALUE * is not valid"},
		{"duplicate output names", `SELECT c.a.x, c.b.x FROM c`, 14, `duplicate output property "x"`},
		{"aggregate mixed with a plain item", `SELECT COUNT(1) AS n, c.x FROM c`, 22, "cannot be mixed"},
		{"aggregate inside an expression", `SELECT VALUE COUNT(1) + 1 FROM c`, 13, "only as a whole SELECT item"},
		{"aggregate in WHERE", `SELECT * FROM c WHERE COUNT(1) > 1`, 22, "only as a whole SELECT item"},
		{"nested aggregates", `SELECT VALUE MAX(COUNT(1)) FROM c`, 17, "cannot be nested"},
		{"aggregate in a constructor beside a document value", `SELECT VALUE [COUNT(1), c.x] FROM c`, 24, "cannot be mixed"},
		{"aggregate in a constructor of a plain item", `SELECT [COUNT(1)] AS n FROM c`, 8, "only as a whole SELECT item"},
		{"ORDER BY a computed value", `SELECT * FROM c ORDER BY LOWER(c.x)`, 25, "only property paths"},
		{"ORDER BY the alias itself", `SELECT * FROM c ORDER BY c`, 25, "only property paths"},
		{"NOT must be followed by IN, BETWEEN or LIKE after an operand", `SELECT * FROM c WHERE c.x NOT = 1`, 30, `expected IN, BETWEEN or LIKE after NOT, found "="`},
		{"empty IN list", `SELECT * FROM c WHERE c.x IN ()`, 30, "expected an expression"},
		{"ESCAPE takes one character", `SELECT * FROM c WHERE c.x LIKE "a" ESCAPE "ab"`, 42, "one-character string"},
		{"duplicate key in an object literal", `SELECT VALUE {"a": 1, "a": 2} FROM c`, 22, `duplicate property "a"`},
		{"deep nesting is refused, not a stack overflow", `SELECT VALUE ` + repeat("(", 500) + "1" + repeat(")", 500) + ` FROM c`, 213, "nested too deeply"},
		{"number out of range", `SELECT VALUE 1e999 FROM c`, 13, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.query)
			var se *SyntaxError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.wantPos, se.Pos, "position; message: %s", se.Msg)
			assert.Contains(t, se.Msg, tt.wantMsg)
			assert.Contains(t, se.Error(), "position")
		})
	}
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}

func TestUnsupportedFeatures(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		wantMsg string
	}{
		{"JOIN", `SELECT * FROM c JOIN t IN c.tags`, "JOIN is not supported"},
		{"FROM x IN y", `SELECT * FROM t IN c.tags`, "iteration is not supported"},
		{"FROM with a path", `SELECT * FROM c.children`, "FROM with a path"},
		{"FROM a subquery", `SELECT * FROM (SELECT * FROM c)`, "subqueries are not supported"},
		{"scalar subquery", `SELECT VALUE (SELECT VALUE 1) FROM c`, "subqueries are not supported"},
		{"IN subquery", `SELECT * FROM c WHERE c.x IN (SELECT VALUE 1)`, "subqueries are not supported"},
		{"EXISTS", `SELECT * FROM c WHERE EXISTS(SELECT VALUE t FROM t IN c.tags)`, "EXISTS subqueries are not supported"},
		{"ARRAY subquery", `SELECT ARRAY(SELECT VALUE 1) AS a FROM c`, "ARRAY subqueries are not supported"},
		{"UDF", `SELECT * FROM c WHERE udf.f(c.x)`, "user-defined functions are not supported"},
		{"ORDER BY RANK", `SELECT * FROM c ORDER BY RANK FullTextScore(c.x, "a")`, "ORDER BY RANK is not supported"},
		{"LEFT is a reserved function this package lacks", `SELECT VALUE LEFT(c.x, 1) FROM c`, "unknown or unsupported function LEFT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.query)
			var se *SyntaxError
			require.ErrorAs(t, err, &se)
			assert.Contains(t, se.Msg, tt.wantMsg)
		})
	}
}

func TestFeatures(t *testing.T) {
	tests := []struct {
		name  string
		query string
		want  Features
	}{
		{"plain filter uses nothing", `SELECT * FROM c WHERE c.x = 1`, Features{}},
		{"TOP", `SELECT TOP 5 * FROM c`, Features{Top: true}},
		{"ORDER BY", `SELECT * FROM c ORDER BY c.x`, Features{OrderBy: true}},
		{"OFFSET LIMIT", `SELECT * FROM c OFFSET 0 LIMIT 5`, Features{Offset: true}},
		{"DISTINCT VALUE", `SELECT DISTINCT VALUE c.x FROM c`, Features{Distinct: true, Value: true}},
		{"VALUE aggregate", `SELECT VALUE COUNT(1) FROM c`, Features{Aggregate: true, Value: true}},
		{"aliased aggregate", `SELECT COUNT(1) AS n FROM c`, Features{Aggregate: true}},
		{"GROUP BY", `SELECT c.k, COUNT(1) AS n FROM c GROUP BY c.k`, Features{Aggregate: true, GroupBy: true}},
		{"VALUE without aggregate", `SELECT VALUE c.id FROM c`, Features{Value: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Parse(tt.query)
			require.NoError(t, err)
			assert.Equal(t, tt.want, q.Features())
		})
	}
}

func TestOrderByItems(t *testing.T) {
	q, err := Parse(`SELECT * FROM c ORDER BY c.status, c["a"].b DESC, c.arr[0] ASC`)
	require.NoError(t, err)
	assert.Equal(t, []OrderItem{
		{Path: []string{"status"}},
		{Path: []string{"a", "b"}, Descending: true},
		{Path: []string{"arr", "0"}},
	}, q.OrderBy())

	q, err = Parse(`SELECT * FROM c`)
	require.NoError(t, err)
	assert.Empty(t, q.OrderBy(), "no ORDER BY, no items")
}

func TestReferencedParameters(t *testing.T) {
	q, err := Parse(`SELECT TOP @n c.id, @p AS p FROM c WHERE c.a = @b AND c.x IN (@b, @a) ORDER BY c.id OFFSET @o LIMIT @l`)
	require.NoError(t, err)
	assert.Equal(t, []string{"@a", "@b", "@l", "@n", "@o", "@p"}, q.ReferencedParameters(), "sorted, deduplicated, with @")

	q, err = Parse(`SELECT * FROM c`)
	require.NoError(t, err)
	assert.Empty(t, q.ReferencedParameters())
}

func TestAcceptedSyntax(t *testing.T) {
	tests := []struct {
		name  string
		query string
	}{
		{"keywords in any case", `select distinct top 3 value c.x from c where c.x between 1 and 2 order by c.x desc offset 0 limit 1`},
		{"whitespace of all kinds", "SELECT\t*\r\nFROM  c\n WHERE c.x=1"},
		{"bracket access with a string key", `SELECT * FROM c WHERE c["a b"]["c"] = 1`},
		{"ALL, FIRST and LAST are identifiers", `SELECT c.all, c.first, c.last FROM c`},
		{"ternary nests to the right", `SELECT VALUE c.a ? 1 : c.b ? 2 : 3 FROM c`},
		{"coalesce chains", `SELECT VALUE c.a ?? c.b ?? 0 FROM c`},
		{"empty array and object literals", `SELECT VALUE [[], {}] FROM c`},
		{"negative and exponent numbers", `SELECT * FROM c WHERE c.x > -1.5e-3 AND c.y < 2E+2`},
		{"the provider's dequeue query", `SELECT * FROM c WHERE c.pk = @pk AND c.type = 'orch_queue' AND c.visibleAt <= @now AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil <= @now) ORDER BY c.visibleAt ASC, c.seq ASC`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.query)
			assert.NoError(t, err)
		})
	}
}
