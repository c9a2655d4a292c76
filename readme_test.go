package cdb_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// directRequirements returns the module paths go.mod requires directly.
func directRequirements(t *testing.T) []string {
	t.Helper()
	gomod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	var paths []string
	inBlock := false
	for _, line := range strings.Split(string(gomod), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if fields := strings.Fields(line); len(fields) >= 2 && !strings.Contains(line, "// indirect") {
			paths = append(paths, fields[0])
		}
	}
	return paths
}

// The README names every dependency go.mod has, and claims no fewer.
func TestREADMENamesTheDependencies(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	deps := directRequirements(t)
	require.NotEmpty(t, deps)
	for _, dep := range deps {
		assert.Contains(t, string(readme), dep, "README's install section names the dependency")
	}
	assert.NotContains(t, string(readme), "depends only on the standard library")
}

// The README's Admin() matches the method: two results.
func TestREADMEAdminSignature(t *testing.T) {
	var admin func() (cdb.ProviderAdmin, bool) = (&cdb.CosmosProvider{}).Admin
	_ = admin
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "admin, ok := provider.Admin()")
	assert.NotContains(t, string(readme), "provider.Admin() returns its")
}

// The README's emulator section says truthfully what `cdb emulator` serves
// and what it refuses (bulk and TTL expiry are served now).
func TestREADMEEmulatorClaims(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := string(readme)
	assert.NotContains(t, text, "Any Cosmos DB\nclient works against it")
	assert.NotContains(t, text, "Any Cosmos DB client works against it")
	for _, gap := range []string{"stored procedures", "hierarchical partition keys"} {
		assert.Contains(t, text, gap, "the emulator section says what it does not do")
	}
	for _, feature := range []string{"query plans", "change feed", "Bulk (non-atomic) batches", "`defaultTtl`"} {
		assert.Contains(t, text, feature, "the emulator section says what it does")
	}
}
