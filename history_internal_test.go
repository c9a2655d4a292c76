package cdb

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The service may page an aggregate: each page carries the maximum of what
// it read, or nothing. The latest execution is the largest of them, not
// the first page's.
func TestTheLatestExecutionIsTheMaximumOfEveryPage(t *testing.T) {
	pages := []json.RawMessage{json.RawMessage(`3`), json.RawMessage(`{}`), json.RawMessage(`null`), json.RawMessage(`7`), json.RawMessage(`5`)}
	got, err := maxOfPartialMax(pages)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), got)

	none, err := maxOfPartialMax(nil)
	require.NoError(t, err)
	assert.Zero(t, none)

	_, err = maxOfPartialMax([]json.RawMessage{json.RawMessage(`"x"`)})
	assert.ErrorContains(t, err, "decode latest execution")
}
