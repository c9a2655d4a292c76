package cosmossql

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeJSON decodes like the fake does: with UseNumber.
func decodeJSON(t testing.TB, text string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v), "test fixture is not JSON: %s", text)
	return v
}

// decodeDocs decodes a JSON array of documents.
func decodeDocs(t testing.TB, text string) []map[string]any {
	t.Helper()
	if text == "" {
		return nil
	}
	var docs []map[string]any
	for _, d := range decodeJSON(t, text).([]any) {
		docs = append(docs, d.(map[string]any))
	}
	return docs
}

// runJSON parses and runs a query and returns its result as JSON text.
func runJSON(t testing.TB, query, docs string, params map[string]any) string {
	t.Helper()
	q, err := Parse(query)
	require.NoError(t, err, "parse %q", query)
	results, err := q.Run(decodeDocs(t, docs), params)
	require.NoError(t, err, "run %q", query)
	raw, err := json.Marshal(results)
	require.NoError(t, err)
	return string(raw)
}
