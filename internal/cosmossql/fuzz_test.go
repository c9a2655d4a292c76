package cosmossql

import (
	"encoding/json"
	"errors"
	"testing"
)

var fuzzSeeds = []string{
	`SELECT * FROM c WHERE c.pk = @pk AND c.type = 'orch_queue' AND c.visibleAt <= @now AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil <= @now) ORDER BY c.visibleAt ASC, c.seq ASC`,
	`SELECT TOP 10 c.id, c.instanceId FROM c WHERE c.slot IN (@s0, @s1) AND c.status = "queued"`,
	`SELECT VALUE COUNT(1) FROM c WHERE c.type = @t`,
	`SELECT VALUE c.instanceId FROM c WHERE ARRAY_CONTAINS(@ids, c.instanceId)`,
	`SELECT * FROM c WHERE STARTSWITH(c.id, @prefix) OFFSET 2 LIMIT 3`,
	`SELECT DISTINCT VALUE c.parent FROM c WHERE IS_DEFINED(c.parent) AND NOT IS_NULL(c.parent)`,
	`SELECT c.a AS x, {"n": c.n} AS o FROM c`,
	`SELECT * FROM c WHERE c.status = 'queued'`,
	`SELECT VALUE c.v FROM c WHERE c.v NOT IN ("x", 2) OR c.v BETWEEN 1 AND 2 ORDER BY c.v DESC`,
	`SELECT VALUE [c.a ?? 1, c.b ? "y" : "n", c.s || "x", -c.n * 2 % 3, c.arr[0], c["k"]] FROM root r`,
	`SELECT VALUE c.id FROM c WHERE c.id LIKE "a[b-c]%_" ESCAPE "!"`,
	`SELECT COUNT(1) AS n, SUM(c.n) AS s, MIN(c.v) AS lo, MAX(c.v) AS hi, AVG(c.n) AS m FROM c`,
	`SELECT TOP @n VALUE SUBSTRING(LOWER(c.s), 1, 2) FROM c WHERE INDEX_OF(c.s, 'a') >= 0`,
	`SELECT c.k, COUNT(1) AS n FROM c GROUP BY c.k`,
	`select value tostring({a: [1, true, null]}) from c where contains(c.s, 'A', true)`,
}

// FuzzParse checks that no input panics: Parse either succeeds or returns a
// *SyntaxError inside the text, and a parsed query runs without leaking
// undefined into results.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	docs := decodeDocs(f, `[
		{"id":"a","v":2,"n":1.5,"s":"Abc","arr":[1,"x"],"k":"g","parent":"p","lockedUntil":5},
		{"id":"b","v":"2","s":null,"arr":{},"o":{"a":[{}]}},
		{"id":"c","v":[2],"n":-0.0,"b":true},
		{"id":"d"}
	]`)
	f.Fuzz(func(t *testing.T, text string) {
		q, err := Parse(text)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Pos < 0 || se.Pos > len(text) {
				t.Fatalf("Parse(%q) returned %v, want a *SyntaxError inside the text", text, err)
			}
			return
		}
		params := map[string]any{}
		for _, name := range q.ReferencedParameters() {
			params[name] = json.Number("1")
		}
		results, err := q.Run(docs, params)
		var ee *EvalError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("Run(%q) returned %v, want nil or *EvalError", text, err)
		}
		for _, r := range results {
			if containsUndefined(r) {
				t.Fatalf("Run(%q) leaked undefined into %v", text, results)
			}
		}
		for _, doc := range docs {
			if _, err := q.Matches(doc, params); err != nil && !errors.As(err, &ee) {
				t.Fatalf("Matches(%q) returned %v", text, err)
			}
		}
	})
}

func containsUndefined(v any) bool {
	switch v := v.(type) {
	case undefinedValue:
		return true
	case []any:
		for _, e := range v {
			if containsUndefined(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if containsUndefined(e) {
				return true
			}
		}
	}
	return false
}
