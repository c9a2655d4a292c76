package cdb

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The batch body written by hand is byte for byte what encoding/json makes
// of the operations when their bodies are compact: every kind of operation,
// and ids and ETags that need escaping (quotes, backslashes, control
// characters, non-ASCII, invalid UTF-8, the line separators encoding/json
// escapes).
func TestTheBatchBodyIsWhatEncodingJSONWrites(t *testing.T) {
	ids := []string{"plain", `quote"d`, `back\slash`, "tab\there", "grüße", "bad\xffutf8", "line\u2028sep", "<html>&"}
	var ops []batchOperation
	for i, id := range ids {
		ops = append(ops,
			batchOperation{OperationType: "Create", ResourceBody: json.RawMessage(`{"id":"d","n":1,"s":"<&>"}`)},
			batchOperation{OperationType: "Replace", ID: id, ResourceBody: json.RawMessage(`{"id":"d","a":[1,{"b":null}]}`), IfMatch: ETag(`"0000-` + id + `"`)},
			batchOperation{OperationType: "Patch", ID: id, ResourceBody: json.RawMessage(`{"operations":[{"op":"set","path":"/x","value":2}]}`)},
			batchOperation{OperationType: "Read", ID: id},
			batchOperation{OperationType: "Delete", ID: id, IfMatch: ETag(`"e` + string(rune('a'+i)) + `"`)},
		)
	}
	for _, n := range []int{0, 1, len(ops)} {
		want, err := marshalCompact(ops[:n])
		require.NoError(t, err)
		got, err := encodeBatchOperations(ops[:n])
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%d operations", n)
	}
}
