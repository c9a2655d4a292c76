package cosmossql

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One document per JSON kind under c.v, plus one without c.v.
const mixedDocs = `[
	{"id":"num","v":2},
	{"id":"str","v":"2"},
	{"id":"bool","v":true},
	{"id":"null","v":null},
	{"id":"arr","v":[2]},
	{"id":"obj","v":{"a":2}},
	{"id":"missing"}
]`

func TestWhereSemantics(t *testing.T) {
	tests := []struct {
		name   string
		where  string
		params map[string]any
		want   string // ids of the documents kept, in input order
	}{
		{"= matches only the same kind: 2 is not \"2\"", `c.v = 2`, nil, `["num"]`},
		{"string equality does not coerce", `c.v = "2"`, nil, `["str"]`},
		{"< across kinds is undefined, so nothing of another kind matches", `c.v < 3`, nil, `["num"]`},
		{"string comparison is ordinal", `c.v > "10"`, nil, `["str"]`},
		{"!= across kinds is undefined, not true", `c.v != 2`, nil, `[]`},
		{"<> is a spelling of !=", `c.v <> "x"`, nil, `["str"]`},
		{"booleans order false < true", `c.v > false`, nil, `["bool"]`},
		{"null equals null", `c.v = null`, nil, `["null"]`},
		{"= compares arrays deeply", `c.v = [2]`, nil, `["arr"]`},
		{"= compares objects deeply", `c.v = {"a": 2}`, nil, `["obj"]`},
		{"= on objects with other content is false", `NOT (c.v = {"a": 3})`, nil, `["obj"]`},
		{"!= on objects is undefined, as the comparison-operators page says", `c.v != {"a": 3}`, nil, `[]`},
		{"< on arrays is undefined", `c.v < [3]`, nil, `[]`},
		{"comparing a missing property is undefined, whatever the operator", `c.nope = c.nope`, nil, `[]`},
		{"NOT of undefined stays undefined", `NOT (c.v = 2)`, nil, `[]`},
		{"undefined OR true is true", `c.nope = 1 OR c.id = "missing"`, nil, `["missing"]`},
		{"undefined AND false is false, so NOT of it is true", `NOT (c.nope = 1 AND false)`, nil, `["num","str","bool","null","arr","obj","missing"]`},
		{"undefined AND true is undefined", `NOT (c.nope = 1 AND true)`, nil, `[]`},
		{"a non-boolean operand of AND counts as undefined, not as false", `NOT (c.v AND true)`, nil, `[]`},
		{"undefined OR true is true even for non-boolean operands", `c.v OR true`, nil, `["num","str","bool","null","arr","obj","missing"]`},
		{"WHERE needs exactly true, not a truthy value", `c.v`, nil, `["bool"]`},
		{"IS_DEFINED is false for a missing property", `NOT IS_DEFINED(c.v)`, nil, `["missing"]`},
		{"IS_NULL is true only for null", `IS_NULL(c.v)`, nil, `["null"]`},
		{"IS_PRIMITIVE covers null, boolean, number, string", `IS_PRIMITIVE(c.v)`, nil, `["num","str","bool","null"]`},
		{"IS_ARRAY and IS_OBJECT", `IS_ARRAY(c.v) OR IS_OBJECT(c.v)`, nil, `["arr","obj"]`},
		{"IS_NUMBER, IS_STRING, IS_BOOL", `IS_NUMBER(c.v) OR IS_STRING(c.v) OR IS_BOOL(c.v)`, nil, `["num","str","bool"]`},
		{"IN with a mismatched kind does not match", `c.v IN ("x", 2)`, nil, `["num"]`},
		{"NOT IN is undefined for other kinds, so they are dropped", `c.v NOT IN ("x")`, nil, `["str"]`},
		{"BETWEEN is inclusive", `c.v BETWEEN 1 AND 2`, nil, `["num"]`},
		{"NOT BETWEEN", `c.v NOT BETWEEN 3 AND 4`, nil, `["num"]`},
		{"BETWEEN binds tighter than AND", `c.v BETWEEN 1 AND 2 AND c.id = "num"`, nil, `["num"]`},
		{"numbers compare numerically across representations", `c.v = 2.0 AND c.v = 2e0`, nil, `["num"]`},
		{"parameters given as Go numbers compare numerically", `c.v = @two`, map[string]any{"@two": 2.0}, `["num"]`},
		{"parameters may be named without @", `c.v = @two`, map[string]any{"two": int64(2)}, `["num"]`},
		{"arithmetic on numbers", `c.v * 3 + 1 = 7 AND c.v % 2 = 0 AND c.v / 4 = 0.5 AND -c.v = -2`, nil, `["num"]`},
		{"arithmetic on a string is undefined", `c.v + 0 = 2`, nil, `["num"]`},
		{"|| concatenates strings", `(c.v || "x") = "2x"`, nil, `["str"]`},
		{"|| binds looser than =, as in the grammar", `IS_DEFINED(c.v || "x" = "2x")`, nil, `[]`},
		{"ternary picks the branch", `(c.v = 2 ? "yes" : "no") = "yes"`, nil, `["num"]`},
		{"ternary takes the false branch on undefined", `(c.v = 2 ? "yes" : "no") = "no"`, nil, `["str","bool","null","arr","obj","missing"]`},
		{"?? replaces undefined but keeps null", `(c.v ?? "dflt") = "dflt" OR IS_NULL(c.v ?? "dflt")`, nil, `["null","missing"]`},
		{"LIKE with % and _", `c.id LIKE "n_%"`, nil, `["num","null"]`},
		{"LIKE is case-sensitive", `c.id LIKE "NUM"`, nil, `[]`},
		{"NOT LIKE", `c.id NOT LIKE "%u%"`, nil, `["str","bool","arr","obj","missing"]`},
		{"LIKE with a character set", `c.id LIKE "[a-b]%"`, nil, `["bool","arr"]`},
		{"LIKE with ESCAPE matches a literal %", `"50%" LIKE "50!%" ESCAPE "!" AND NOT ("50x" LIKE "50!%" ESCAPE "!") AND c.id = "num"`, nil, `["num"]`},
		{"property access by bracket", `c["id"] = "obj" AND c.v["a"] = 2`, nil, `["obj"]`},
		{"array element access", `c.v[0] = 2`, nil, `["arr"]`},
		{"array index out of range is undefined", `IS_DEFINED(c.v[1])`, nil, `[]`},
		{"index by parameter", `c[@key] = 2`, map[string]any{"@key": "v"}, `["num"]`},
		{"undefined literal", `IS_DEFINED(undefined) OR c.v = undefined`, nil, `[]`},
		{"keywords are case-insensitive", `c.v = 2 and not is_defined(c.zz)`, nil, `["num"]`},
		{"NOT binds as tightly as unary minus, as in the grammar", `NOT c.v = false`, nil, `["bool"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runJSON(t, "SELECT VALUE c.id FROM c WHERE "+tt.where, mixedDocs, tt.params)
			assert.JSONEq(t, tt.want, got)
		})
	}
}

func TestFunctions(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want string // JSON of the value, or "undefined"
	}{
		{"ARRAY_CONTAINS finds an equal element", `ARRAY_CONTAINS([1, "a", {"x": 1}], {"x": 1})`, `true`},
		{"ARRAY_CONTAINS does not coerce", `ARRAY_CONTAINS([1, 2], "1")`, `false`},
		{"ARRAY_CONTAINS partial matches a subset of an object", `ARRAY_CONTAINS([{"x": 1, "y": 2}], {"x": 1}, true)`, `true`},
		{"ARRAY_CONTAINS without partial needs the whole object", `ARRAY_CONTAINS([{"x": 1, "y": 2}], {"x": 1})`, `false`},
		{"ARRAY_CONTAINS on a non-array is undefined", `ARRAY_CONTAINS("abc", "a")`, `undefined`},
		{"ARRAY_LENGTH", `ARRAY_LENGTH([1, 2, 3])`, `3`},
		{"ARRAY_LENGTH of a non-array is undefined", `ARRAY_LENGTH("abc")`, `undefined`},
		{"STARTSWITH", `STARTSWITH("abc", "ab")`, `true`},
		{"STARTSWITH is case-sensitive by default", `STARTSWITH("abc", "AB")`, `false`},
		{"STARTSWITH with ignoreCase", `STARTSWITH("abc", "AB", true)`, `true`},
		{"STARTSWITH on a number is undefined", `STARTSWITH(12, "1")`, `undefined`},
		{"ENDSWITH", `ENDSWITH("abc", "bc")`, `true`},
		{"CONTAINS", `CONTAINS("abc", "b")`, `true`},
		{"CONTAINS with ignoreCase", `CONTAINS("abc", "B", true)`, `true`},
		{"LENGTH counts UTF-16 units", `LENGTH("a😀")`, `3`},
		{"LOWER", `LOWER("AbC")`, `"abc"`},
		{"UPPER", `UPPER("AbC")`, `"ABC"`},
		{"CONCAT", `CONCAT("a", "b", "c")`, `"abc"`},
		{"CONCAT with a non-string is undefined", `CONCAT("a", 1)`, `undefined`},
		{"SUBSTRING is zero-based", `SUBSTRING("abcdef", 1, 3)`, `"bcd"`},
		{"SUBSTRING clamps to the string", `SUBSTRING("abc", 2, 10)`, `"c"`},
		{"SUBSTRING past the end is empty", `SUBSTRING("abc", 5, 1)`, `""`},
		{"INDEX_OF finds the first occurrence", `INDEX_OF("abcabc", "c")`, `2`},
		{"INDEX_OF with a start", `INDEX_OF("abcabc", "c", 3)`, `5`},
		{"INDEX_OF not found is -1", `INDEX_OF("abc", "z")`, `-1`},
		{"TOSTRING of a number has no trailing .0", `TOSTRING(3.0)`, `"3"`},
		{"TOSTRING of an object is JSON", `TOSTRING({"a": [1, true]})`, `"{\"a\":[1,true]}"`},
		{"TOSTRING of null", `TOSTRING(null)`, `"null"`},
		{"ABS", `ABS(-2.5)`, `2.5`},
		{"FLOOR", `FLOOR(-2.5)`, `-3`},
		{"CEILING", `CEILING(2.1)`, `3`},
		{"ABS of a string is undefined", `ABS("1")`, `undefined`},
		{"function names are case-insensitive", `is_defined(1) AND Is_Defined("x")`, `true`},
		{"integral arithmetic prints without .0", `1.5 * 2`, `3`},
		{"division by zero is undefined", `1 / 0`, `undefined`},
		{"% follows the sign of the dividend", `-7 % 3`, `-1`},
		{"number literals with exponents", `1.5e3`, `1500`},
		{"unary plus keeps a number", `+2`, `2`},
		{"escapes in string literals", `'it\'s \"\u00e9\"\n'`, `"it's \"é\"\n"`},
		{"array literal drops undefined items", `[1, undefined, 2]`, `[1,2]`},
		{"object literal with bare keys omits undefined values", `{a: 1, b: undefined}`, `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runJSON(t, "SELECT VALUE "+tt.expr+" FROM c", `[{"id":"x"}]`, nil)
			if tt.want == "undefined" {
				assert.Equal(t, `[]`, got, "SELECT VALUE of undefined yields no row")
				return
			}
			assert.JSONEq(t, "["+tt.want+"]", got)
		})
	}
}

func TestNumbersAreJSONNumbers(t *testing.T) {
	q, err := Parse(`SELECT c.n, c.n * 2 AS twice, @p AS p FROM c`)
	require.NoError(t, err)
	got, err := q.Run(decodeDocs(t, `[{"n":1.50}]`), map[string]any{"@p": 7})
	require.NoError(t, err)
	row := got[0].(map[string]any)
	assert.Equal(t, json.Number("1.50"), row["n"], "document numbers pass through unchanged")
	assert.Equal(t, json.Number("3"), row["twice"], "computed integral numbers print without .0")
	assert.Equal(t, json.Number("7"), row["p"], "Go numbers in parameters become json.Number")
}

func TestProjection(t *testing.T) {
	docs := `[{"id":"a","n":1,"o":{"x":"ox"},"arr":[10,20]},{"id":"b"}]`
	tests := []struct {
		name  string
		query string
		want  string
	}{
		{"AS aliases and object literals; undefined members of the literal are omitted", `SELECT c.a AS x, {"n": c.n} AS o FROM c`, `[{"o":{"n":1}},{"o":{}}]`},
		{"SELECT * returns whole documents", `SELECT * FROM c`, `[{"id":"a","n":1,"o":{"x":"ox"},"arr":[10,20]},{"id":"b"}]`},
		{"unaliased paths are named by their last segment", `SELECT c.id, c.o.x FROM c`, `[{"id":"a","x":"ox"},{"id":"b"}]`},
		{"bracket paths are named by their last segment", `SELECT c["id"] FROM c`, `[{"id":"a"},{"id":"b"}]`},
		{"undefined properties are omitted, leaving {}", `SELECT c.o FROM c WHERE c.id = "b"`, `[{}]`},
		{"computed items are named $1, $2", `SELECT c.n + 1, c.arr[1], c.id FROM c WHERE c.id = "a"`, `[{"$1":2,"$2":20,"id":"a"}]`},
		{"SELECT of the alias names it after the alias", `SELECT c FROM c WHERE c.id = "b"`, `[{"c":{"id":"b"}}]`},
		{"SELECT VALUE of undefined yields no row", `SELECT VALUE c.n FROM c`, `[1]`},
		{"SELECT VALUE of an object literal", `SELECT VALUE {"id": c.id, "n": c.n} FROM c`, `[{"id":"a","n":1},{"id":"b"}]`},
		{"array literals in projections", `SELECT VALUE [c.id, c.n] FROM c`, `[["a",1],["b"]]`},
		{"FROM with a collection name and alias", `SELECT VALUE r.id FROM root r`, `["a","b"]`},
		{"FROM with AS", `SELECT VALUE x.id FROM items AS x`, `["a","b"]`},
		{"FROM root alone binds root", `SELECT VALUE root.id FROM root`, `["a","b"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.JSONEq(t, tt.want, runJSON(t, tt.query, docs, nil))
		})
	}
}

func TestOrderBy(t *testing.T) {
	tests := []struct {
		name  string
		query string
		docs  string
		want  string
	}{
		{
			name:  "mixed types sort undefined < null < false < true < numbers < strings < arrays < objects",
			query: `SELECT VALUE c.id FROM c ORDER BY c.v`,
			docs:  `[{"id":"obj","v":{}},{"id":"str","v":"a"},{"id":"arr","v":[]},{"id":"n2","v":2},{"id":"t","v":true},{"id":"f","v":false},{"id":"null","v":null},{"id":"undef"},{"id":"n1","v":1}]`,
			want:  `["undef","null","f","t","n1","n2","str","arr","obj"]`,
		},
		{
			name:  "DESC reverses the cross-type order, undefined last",
			query: `SELECT VALUE c.id FROM c ORDER BY c.v DESC`,
			docs:  `[{"id":"undef"},{"id":"str","v":"a"},{"id":"n1","v":1},{"id":"null","v":null}]`,
			want:  `["str","n1","null","undef"]`,
		},
		{
			name:  "rows whose sort key is undefined are kept, as with the default indexing policy",
			query: `SELECT VALUE c.id FROM c ORDER BY c.v`,
			docs:  `[{"id":"a","v":1},{"id":"b"}]`,
			want:  `["b","a"]`,
		},
		{
			name:  "equal keys keep input order (stable)",
			query: `SELECT VALUE c.id FROM c ORDER BY c.v`,
			docs:  `[{"id":"a","v":1},{"id":"b","v":0},{"id":"c","v":1},{"id":"d","v":0}]`,
			want:  `["b","d","a","c"]`,
		},
		{
			name:  "second term breaks ties, each with its own direction",
			query: `SELECT VALUE c.id FROM c ORDER BY c.v ASC, c.w DESC`,
			docs:  `[{"id":"a","v":1,"w":1},{"id":"b","v":1,"w":2},{"id":"c","v":0,"w":0}]`,
			want:  `["c","b","a"]`,
		},
		{
			name:  "numbers sort numerically, not as text",
			query: `SELECT VALUE c.v FROM c ORDER BY c.v`,
			docs:  `[{"v":10},{"v":9},{"v":-1.5},{"v":100}]`,
			want:  `[-1.5,9,10,100]`,
		},
		{
			name:  "TOP applies after ORDER BY",
			query: `SELECT TOP 2 VALUE c.v FROM c ORDER BY c.v DESC`,
			docs:  `[{"v":1},{"v":3},{"v":2}]`,
			want:  `[3,2]`,
		},
		{
			name:  "OFFSET LIMIT applies after ORDER BY",
			query: `SELECT VALUE c.v FROM c ORDER BY c.v OFFSET 1 LIMIT 1`,
			docs:  `[{"v":1},{"v":3},{"v":2}]`,
			want:  `[2]`,
		},
		{
			name:  "OFFSET past the end is empty",
			query: `SELECT VALUE c.v FROM c OFFSET 5 LIMIT 1`,
			docs:  `[{"v":1}]`,
			want:  `[]`,
		},
		{
			name:  "ORDER BY a nested and bracketed path",
			query: `SELECT VALUE c.id FROM c ORDER BY c["a"].b`,
			docs:  `[{"id":"x","a":{"b":2}},{"id":"y","a":{"b":1}}]`,
			want:  `["y","x"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.JSONEq(t, tt.want, runJSON(t, tt.query, tt.docs, nil))
		})
	}
}

func TestDistinct(t *testing.T) {
	docs := `[{"o":{"a":1,"b":[1,2]}},{"o":{"b":[1,2],"a":1.0}},{"o":{"a":1,"b":[2,1]}},{"o":"x"},{"o":"x"},{}]`
	tests := []struct {
		name  string
		query string
		want  string
	}{
		{"DISTINCT VALUE compares objects deeply, ignoring key order and number spelling", `SELECT DISTINCT VALUE c.o FROM c`, `[{"a":1,"b":[1,2]},{"a":1,"b":[2,1]},"x"]`},
		{"DISTINCT on projected rows keeps the first of each", `SELECT DISTINCT c.o FROM c`, `[{"o":{"a":1,"b":[1,2]}},{"o":{"a":1,"b":[2,1]}},{"o":"x"},{}]`},
		{"DISTINCT with TOP counts distinct rows", `SELECT DISTINCT TOP 2 VALUE c.o FROM c`, `[{"a":1,"b":[1,2]},{"a":1,"b":[2,1]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.JSONEq(t, tt.want, runJSON(t, tt.query, docs, nil))
		})
	}
}

func TestAggregates(t *testing.T) {
	docs := `[{"n":1,"s":"b"},{"n":2,"s":"a"},{"n":4,"s":null},{"s":true}]`
	tests := []struct {
		name  string
		query string
		docs  string
		want  string
	}{
		{"COUNT(1) counts rows", `SELECT VALUE COUNT(1) FROM c`, docs, `[4]`},
		{"COUNT(expr) counts defined values", `SELECT VALUE COUNT(c.n) FROM c`, docs, `[3]`},
		{"SUM skips undefined", `SELECT VALUE SUM(c.n) FROM c`, docs, `[7]`},
		{"SUM of a non-number is undefined", `SELECT VALUE SUM(c.s) FROM c`, docs, `[]`},
		{"AVG", `SELECT VALUE AVG(c.n) FROM c`, docs, `[2.3333333333333335]`},
		{"MIN over numbers", `SELECT VALUE MIN(c.n) FROM c`, docs, `[1]`},
		{"MAX over mixed kinds: string > number > boolean > null", `SELECT VALUE MAX(c.s) FROM c`, docs, `["b"]`},
		{"MIN over mixed kinds: null lowest", `SELECT VALUE MIN(c.s) FROM c`, docs, `[null]`},
		{"aggregates with aliases form one row", `SELECT COUNT(1) AS n, MAX(c.n) AS biggest FROM c`, docs, `[{"n":4,"biggest":4}]`},
		{"unaliased aggregates are named $1", `SELECT COUNT(1) FROM c`, docs, `[{"$1":4}]`},
		{"aggregates respect WHERE", `SELECT VALUE COUNT(1) FROM c WHERE c.n > 1`, docs, `[2]`},
		{"COUNT over empty input is 0", `SELECT VALUE COUNT(1) FROM c`, ``, `[0]`},
		{"SUM over empty input is 0", `SELECT VALUE SUM(c.n) FROM c`, ``, `[0]`},
		{"MAX over empty input yields no row", `SELECT VALUE MAX(c.n) FROM c`, ``, `[]`},
		{"MIN over empty input yields no row", `SELECT VALUE MIN(c.n) FROM c`, ``, `[]`},
		{"AVG over empty input yields no row", `SELECT VALUE AVG(c.n) FROM c`, ``, `[]`},
		{"an undefined aggregate is omitted from the row", `SELECT COUNT(1) AS n, MAX(c.n) AS m FROM c`, ``, `[{"n":0}]`},
		{"keywords and aggregates are case-insensitive", `select value count(1) from c`, docs, `[4]`},
		// The form a query plan rewrites aggregates into for range-by-range execution.
		{"aggregates inside VALUE constructors", `SELECT VALUE [{"item": COUNT(1)}] FROM c`, docs, `[[{"item":4}]]`},
		{"several aggregates inside one constructor", `SELECT VALUE [{"item": {"sum": SUM(c.n), "count": COUNT(c.n)}}] FROM c`, docs, `[[{"item":{"sum":7,"count":3}}]]`},
		{"an undefined aggregate inside a constructor is omitted", `SELECT VALUE [{"item": {"min": MIN(c.n), "count": COUNT(c.n)}}] FROM c`, ``, `[[{"item":{"count":0}}]]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.JSONEq(t, tt.want, runJSON(t, tt.query, tt.docs, nil))
		})
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name      string
		query     string
		params    map[string]any
		wantParam string
		wantMsg   string
	}{
		{"a missing parameter is named", `SELECT * FROM c WHERE c.pk = @pk`, nil, "@pk", "@pk"},
		{"a missing parameter is an error even when it would not be evaluated", `SELECT * FROM c WHERE false AND c.x = @x`, map[string]any{"@y": 1}, "@x", "@x"},
		{"a missing TOP parameter is named", `SELECT TOP @n * FROM c`, nil, "@n", "@n"},
		{"TOP needs a non-negative integer", `SELECT TOP @n * FROM c`, map[string]any{"@n": 1.5}, "@n", "non-negative integer"},
		{"LIMIT needs a number, not a string", `SELECT * FROM c OFFSET 0 LIMIT @n`, map[string]any{"@n": "3"}, "@n", "non-negative integer"},
		{"a parameter JSON cannot hold is refused", `SELECT * FROM c WHERE c.x = @x`, map[string]any{"@x": make(chan int)}, "@x", "@x"},
		{"GROUP BY parses but does not run", `SELECT c.k, COUNT(1) AS n FROM c GROUP BY c.k`, nil, "", "GROUP BY is not supported by this fake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Parse(tt.query)
			require.NoError(t, err)
			_, err = q.Run(decodeDocs(t, `[{"x":1}]`), tt.params)
			var ee *EvalError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tt.wantParam, ee.Param)
			assert.Contains(t, ee.Error(), tt.wantMsg)
		})
	}
	t.Run("Matches also reports a missing parameter", func(t *testing.T) {
		q, err := Parse(`SELECT * FROM c WHERE c.x = @x`)
		require.NoError(t, err)
		_, err = q.Matches(map[string]any{"x": 1}, nil)
		var ee *EvalError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, "@x", ee.Param)
	})
}

func TestOddDocumentValuesDoNotPanic(t *testing.T) {
	// Documents built in Go rather than decoded: Go numbers work, unknown
	// types count as undefined.
	q, err := Parse(`SELECT VALUE c.id FROM c WHERE c.n > 1 OR IS_DEFINED(c.weird) ORDER BY c.n`)
	require.NoError(t, err)
	got, err := q.Run([]map[string]any{
		{"id": "int", "n": 2},
		{"id": "float", "n": 3.5},
		{"id": "weird", "weird": struct{}{}, "n": json.Number("not a number")},
		nil,
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []any{"int", "float"}, got)
}

func TestConcurrentRuns(t *testing.T) {
	q, err := Parse(`SELECT VALUE c.v FROM c WHERE c.v > @min ORDER BY c.v DESC`)
	require.NoError(t, err)
	docs := decodeDocs(t, `[{"v":1},{"v":2},{"v":3}]`)
	done := make(chan []any)
	for i := 0; i < 8; i++ {
		go func() {
			got, _ := q.Run(docs, map[string]any{"@min": 1})
			done <- got
		}()
	}
	for i := 0; i < 8; i++ {
		assert.Equal(t, []any{json.Number("3"), json.Number("2")}, <-done, "a Query is safe for concurrent use")
	}
}
