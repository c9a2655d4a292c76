package cdb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientFiles are the files of the client layer: the wire protocol and
// what its answers mean. Only they may speak HTTP; the provider above them
// reads a store's answer through the client's predicates (IsNotFound,
// IsPreconditionFailed, IsConflict, ...), never through a status code.
func clientFiles() []string {
	return []string{
		"auth.go", "batch.go", "client.go", "client_telemetry.go", "containers.go", "errors.go", "failover.go", "fake.go",
		"items.go", "partitionkey.go", "patch.go", "query.go", "routing.go", "serviceclock.go",
		"sessiontokens.go", "timeouts.go",
	}
}

// TestOnlyTheClientSpeaksHTTP keeps the layering ARCHITECTURE.md states:
// outside the client's files no file imports net/http or reads a status
// code. Above the provider (the runtime, the OpenTelemetry adapter) a
// status is not even asked for with HasStatus: they see the provider's
// errors only.
func TestOnlyTheClientSpeaksHTTP(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if !slices.Contains(clientFiles(), name) {
			checkSpeaksNoHTTP(t, fset, name, "StatusCode", "SubStatusCode")
		}
	}
	for _, pkg := range []string{"durable", "otelcdb"} {
		files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, pkg)
		for _, name := range files {
			checkSpeaksNoHTTP(t, fset, name, "StatusCode", "SubStatusCode", "HasStatus")
		}
	}
}

// checkSpeaksNoHTTP fails if name, unless a test, imports net/http or uses
// one of the selectors named.
func checkSpeaksNoHTTP(t *testing.T, fset *token.FileSet, name string, selectors ...string) {
	t.Helper()
	if strings.HasSuffix(name, "_test.go") {
		return
	}
	src, err := os.ReadFile(name)
	require.NoError(t, err)
	f, err := parser.ParseFile(fset, name, src, 0)
	require.NoError(t, err)
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		assert.NotEqual(t, "net/http", path, "%s imports net/http: it belongs to the client's files, or uses their predicates", name)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && slices.Contains(selectors, sel.Sel.Name) {
			t.Errorf("%s: uses %s at %s: read errors through the predicates of the layer below (IsNotFound, IsConflict, IsRetryable, ...)", name, sel.Sel.Name, fset.Position(sel.Pos()))
		}
		return true
	})
}

// TestTheClientFilesExist keeps clientFiles true as files are renamed.
func TestTheClientFilesExist(t *testing.T) {
	for _, name := range clientFiles() {
		_, err := os.Stat(name)
		assert.NoError(t, err, "clientFiles names %s", name)
	}
}
