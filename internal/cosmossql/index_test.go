package cosmossql

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTermsSayWhatARangeIndexCanAnswer(t *testing.T) {
	q, err := Parse(`SELECT * FROM c WHERE c.type = @t AND c.visibleAt <= @now AND 5 > c.n AND c.a.b BETWEEN 1 AND 2
		AND (c.lockedUntil <= @now OR c.lockToken = @tok) AND ARRAY_CONTAINS(@slots, c.slot) AND c.s IN ('x', 'y')
		AND IS_DEFINED(c.name) AND STARTSWITH(c.id, 'a') AND NOT ARRAY_CONTAINS(@skip, c.pk) AND CONTAINS(c.id, 'z')
		AND c.x != 1 AND c.x = c.y AND c["k"] = @k AND c[@key] = 1`)
	require.NoError(t, err)
	var got []string
	for _, term := range q.Terms() {
		got = append(got, map[TermKind]string{TermResidual: "residual", TermEquality: "equality", TermRange: "range", TermLookup: "lookup"}[term.Kind])
	}
	assert.Equal(t, []string{"equality", "range", "range", "range", "lookup", "lookup", "lookup", "lookup", "lookup",
		"residual", "residual", "residual", "residual", "equality", "residual"}, got)
	terms := q.Terms()
	assert.Equal(t, []string{"a", "b"}, terms[3].Path)
	assert.Equal(t, [][]string{{"lockedUntil"}, {"lockToken"}}, terms[4].Paths)
	assert.Equal(t, [][]string{{"x"}, {"y"}}, terms[12].Paths)
	assert.Nil(t, terms[14].Paths, "c[@key] reads no path an index could name")
	none, err := Parse("SELECT * FROM c")
	require.NoError(t, err)
	assert.Empty(t, none.Terms())
}

func TestBoundEvaluatesTermsOrderAndWindow(t *testing.T) {
	q, err := Parse("SELECT TOP @n * FROM c WHERE c.type = @t AND c.locked = false ORDER BY c.a DESC, c.b")
	require.NoError(t, err)
	b, err := q.Bind(map[string]any{"@n": 3, "@t": "w"})
	require.NoError(t, err)
	docs := decodeDocs(t, `[{"type":"w","locked":true,"a":1,"b":2},{"type":"w","locked":false,"a":1,"b":1},{"type":"m","a":2}]`)
	terms := q.Terms()
	assert.True(t, b.Holds(docs[0], terms[:1]))
	assert.False(t, b.Holds(docs[0], terms))
	assert.False(t, b.Matches(docs[0]))
	assert.True(t, b.Matches(docs[1]))
	assert.Positive(t, b.CompareOrder(docs[0], docs[1]), "b ascending breaks the tie")
	assert.Negative(t, b.CompareOrder(docs[2], docs[0]), "a descending")
	offset, limit, perDoc, err := b.Window()
	require.NoError(t, err)
	assert.Equal(t, []any{0, 3, true}, []any{offset, limit, perDoc})

	agg, err := Parse("SELECT VALUE COUNT(1) FROM c")
	require.NoError(t, err)
	ab, err := agg.Bind(nil)
	require.NoError(t, err)
	_, limit, perDoc, err = ab.Window()
	require.NoError(t, err)
	assert.Equal(t, []any{-1, false}, []any{limit, perDoc})
	_, err = q.Bind(nil)
	assert.ErrorContains(t, err, "parameter @n is used by the query but was not supplied", "parameters are checked")
}

// A document satisfies an equality term only if its value at the term's
// path has the term's key: numbers by value, strings exactly, null apart
// from undefined, objects by content.
func TestEqualityKeysAgreeWithEquality(t *testing.T) {
	q, err := Parse(`SELECT * FROM c WHERE c.v = @v AND 1.0 = c.n AND c.s = "a" AND c.o = {"a": 1, "b": [1, 2]} AND c.z = @z AND c.v > 1`)
	require.NoError(t, err)
	b, err := q.Bind(map[string]any{"@v": 1, "@z": nil})
	require.NoError(t, err)
	terms := q.Terms()
	key := func(i int) string {
		k, ok := b.EqualityKey(terms[i])
		require.True(t, ok, "term %d", i)
		return k
	}
	docs := decodeDocs(t, `[{"v": 1.0, "n": 1, "s": "a", "o": {"b": [1.0, 2], "a": 1}, "z": null},
		{"v": "1", "n": -0, "s": "A", "o": {"a": 1}, "z": false}]`)
	for i, path := range []string{"v", "n", "s", "o", "z"} {
		for _, doc := range docs {
			vk, ok := ValueKey(doc[path])
			require.True(t, ok)
			assert.Equal(t, b.Holds(doc, terms[i:i+1]), vk == key(i), "term %d on %v", i, doc[path])
		}
	}
	_, ok := b.EqualityKey(terms[5])
	assert.False(t, ok, "a range term has no equality key")
	_, ok = ValueKey(undefinedValue{})
	assert.False(t, ok, "undefined equals nothing")
	zero, _ := ValueKey(docs[1]["n"])
	plain, _ := ValueKey(decodeDocs(t, `[{"n": 0}]`)[0]["n"])
	assert.Equal(t, plain, zero, "-0 = 0")
}
