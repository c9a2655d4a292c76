package cdb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
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
		"auth.go", "batch.go", "client.go", "client_telemetry.go", "connections.go", "containers.go", "errors.go", "failover.go", "fake.go",
		"items.go", "partitionkey.go", "patch.go", "query.go", "querywalk.go", "routing.go", "serviceclock.go",
		"sessiontokens.go", "throughput.go", "timeouts.go", "priority.go", "backgroundbudget.go",
	}
}

// wireFolders are the folders below the root that work at the wire on
// purpose: the in-memory account and its test servers, the simulation's
// fault transport, the CLI's diagnostics (doctor, the emulator), the
// SDK compatibility probes and the telemetry demo's web server.
func wireFolders() []string {
	return []string{
		"cmd/cdb", "internal/cosmoshooks", "internal/cosmossql", "internal/cosmostest", "internal/epk", "internal/fakecosmos",
		"internal/jscompat", "internal/sdkcompat", "internal/sim", "otelcdb/example/demo",
	}
}

// TestOnlyTheClientSpeaksHTTP keeps the layering ARCHITECTURE.md states:
// outside the client's files no file imports net/http, reads a status code
// or asks for one (HasStatus, StoreStatus, a *CosmosError): the provider
// reads a store's answer through the client's predicates. Every folder
// below (the runtime, the hand-over, the in-memory provider, the suites,
// the OpenTelemetry adapter) sees the provider's errors only; the runtime
// may put StoreStatus in its logs.
func TestOnlyTheClientSpeaksHTTP(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if !slices.Contains(clientFiles(), name) {
			checkSpeaksNoHTTP(t, fset, name, "StatusCode", "SubStatusCode", "HasStatus", "StoreStatus", "CosmosError")
		}
	}
	checked := 0
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (path != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || slices.Contains(wireFolders(), path)):
			return filepath.SkipDir
		case d.IsDir() || filepath.Dir(path) == "." || !strings.HasSuffix(path, ".go"):
			return nil
		}
		checked++
		allowed := "StoreStatus"
		if !strings.HasPrefix(path, "durable"+string(filepath.Separator)) {
			allowed = ""
		}
		checkSpeaksNoHTTP(t, fset, path, slices.DeleteFunc([]string{"StatusCode", "SubStatusCode", "HasStatus", "StoreStatus", "CosmosError"},
			func(s string) bool { return s == allowed })...)
		return nil
	}))
	assert.Greater(t, checked, 50, "the folders above the client were walked")
}

// TestTheWireFoldersExist keeps wireFolders true as folders move.
func TestTheWireFoldersExist(t *testing.T) {
	for _, dir := range wireFolders() {
		info, err := os.Stat(dir)
		require.NoError(t, err, dir)
		assert.True(t, info.IsDir(), dir)
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
		var used *ast.Ident
		switch n := n.(type) {
		case *ast.SelectorExpr:
			used = n.Sel
		case *ast.Ident:
			used = n // an unqualified use, in the root package
		}
		if used != nil && slices.Contains(selectors, used.Name) {
			t.Errorf("%s: uses %s at %s: read errors through the predicates of the layer below (IsNotFound, IsConflict, IsRetryable, ...)", name, used.Name, fset.Position(used.Pos()))
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

// TestOnlyTheBatchTouchesItsOperations keeps a commit decided before its
// batch is built: outside batch.go no file reads or rewrites a batch's
// operations (an operation's body, its If-Match); the provider adds each
// document once, as decided, through the builder's methods.
func TestOnlyTheBatchTouchesItsOperations(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if name == "batch.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		checked++
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "ops" {
				t.Errorf("%s: reads a batch's operations at %s: decide the document before it is added, through the batch's methods", name, fset.Position(sel.Pos()))
			}
			return true
		})
	}
	assert.Greater(t, checked, 50, "the root's files were read")
}
