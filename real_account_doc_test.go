package cdb_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The guide's container definition is the one the provider checks: its
// indexing policy file is ProviderContainerProperties' policy, and the
// create command sets the partition key and time to live.
func TestRealAccountGuideShowsTheProvidersContainer(t *testing.T) {
	guide, err := os.ReadFile("docs/real-account.md")
	require.NoError(t, err)
	text := string(guide)

	const open = "Save the indexing policy as `duroxide-index.json`:\n\n```json\n"
	start := strings.Index(text, open)
	require.GreaterOrEqual(t, start, 0, "the guide shows the indexing policy file")
	block := text[start+len(open):]
	block = block[:strings.Index(block, "```")]
	var shown cdb.IndexingPolicy
	require.NoError(t, json.Unmarshal([]byte(block), &shown))
	assert.Equal(t, *cdb.ProviderContainerProperties("duroxide").IndexingPolicy, shown)

	props := cdb.ProviderContainerProperties("duroxide")
	assert.Contains(t, text, "--partition-key-path "+props.PartitionKey.Paths[0]+" --partition-key-version 2")
	assert.Contains(t, text, "--ttl -1")
	assert.Equal(t, -1, *props.DefaultTimeToLive)
	assert.Contains(t, text, "partitionKey: { paths: [ '/pk' ], kind: 'Hash', version: 2 }")
	assert.Contains(t, text, "defaultTtl: -1")
}
