package cosmossql

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFormatNumber(t *testing.T) {
	tests := []struct {
		name string
		in   float64
		want string
	}{
		{"integral values have no .0", 3, "3"},
		{"negative zero prints as 0", math.Copysign(0, -1), "0"},
		{"fractions keep their shortest round-trip form", 1.0 / 3, "0.3333333333333333"},
		{"large integers stay plain below 1e21", 1e20, "100000000000000000000"},
		{"1e21 and above use an exponent, as JavaScript does", 1e21, "1e+21"},
		{"tiny values use a one-digit exponent", 1e-7, "1e-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, formatNumber(tt.in))
		})
	}
}

func TestParameterNormalization(t *testing.T) {
	q, err := Parse(`SELECT VALUE @p FROM c`)
	require.NoError(t, err)
	run := func(p any) any {
		got, err := q.Run([]map[string]any{{}}, map[string]any{"@p": p})
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0]
	}
	assert.Equal(t, json.Number("5"), run(int32(5)), "Go integers become json.Number")
	assert.Equal(t, json.Number("5"), run(uint64(5)), "unsigned integers too")
	assert.Equal(t, json.Number("2.5"), run(float32(2.5)), "and floats")
	assert.Equal(t, []any{json.Number("1"), "a"}, run([]any{1, "a"}), "inside slices")
	assert.Equal(t, map[string]any{"k": json.Number("1")}, run(map[string]any{"k": 1.0}), "inside maps")
	assert.Equal(t, map[string]any{"A": json.Number("1")}, run(struct{ A int }{1}), "other types go through their JSON form")

	_, err = q.Run([]map[string]any{{}}, map[string]any{"@p": math.Inf(1)})
	var ee *EvalError
	require.ErrorAs(t, err, &ee, "a number JSON cannot hold is refused")
	assert.Equal(t, "@p", ee.Param)
}

func TestLexerDetails(t *testing.T) {
	assert.JSONEq(t, `["😀"]`, runJSON(t, `SELECT VALUE "\ud83d\ude00" FROM c`, `[{}]`, nil), "surrogate pairs join into one character")
	assert.JSONEq(t, `["\/\b\f\r\t"]`, runJSON(t, `SELECT VALUE "\/\b\f\r\t" FROM c`, `[{}]`, nil), "all JSON escapes decode")

	_, err := Parse(`SELECT VALUE "\u12" FROM c`)
	var se *SyntaxError
	require.ErrorAs(t, err, &se, "short \\u escapes are refused")
	assert.Contains(t, se.Msg, "four hex digits")

	q, err := Parse(`SELECT * FROM root r`)
	require.NoError(t, err)
	assert.Equal(t, "r", q.Alias(), "the last FROM identifier is the alias")
}

// The integer fast path reads every number as strconv.ParseFloat does,
// and leaves the rest to it.
func TestSmallIntegersReadAsParseFloatReadsThem(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "007", "1234567890", "-999999999999999", "999999999999999",
		"9999999999999999", "12345678901234567890", "1.5", "1e3", "-", "", "1-2", "+5", "0x10", "1e400"} {
		want, err := strconv.ParseFloat(s, 64)
		wantOK := err == nil && !math.IsInf(want, 0)
		got, ok := numberOf(json.Number(s))
		require.Equal(t, wantOK, ok, "%q", s)
		if ok {
			assert.Equal(t, math.Float64bits(want), math.Float64bits(got), "%q", s)
		}
	}
}
