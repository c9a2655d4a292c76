package cdb

import (
	"context"
	"go/parser"
	"go/token"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// assertRandomUUID checks that id is prefix followed by a version 4 UUID in
// its canonical form, as github.com/google/uuid makes them.
func assertRandomUUID(t *testing.T, id, prefix string) {
	t.Helper()
	require.True(t, strings.HasPrefix(id, prefix), "%q starts with %q", id, prefix)
	rest := strings.TrimPrefix(id, prefix)
	u, err := uuid.Parse(rest)
	require.NoError(t, err, "%q", id)
	assert.Equal(t, u.String(), rest, "canonical form")
	assert.Equal(t, uuid.Version(4), u.Version())
	assert.Equal(t, uuid.RFC4122, u.Variant())
}

func TestRandomIdentifiersAreUUIDs(t *testing.T) {
	for _, prefix := range []string{"", "lock_", "work_"} {
		assertRandomUUID(t, newLockToken(prefix), prefix)
	}
	assert.NotEqual(t, newLockToken(""), newLockToken(""))
}

// A lock token a fetch returns is one of them.
func TestFetchedLockTokensAreUUIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
	defer cancel()
	acct := NewFakeAccount(FakeAccountOptions{})
	p, err := NewProvider(ctx, Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "i", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	assertRandomUUID(t, token, "lock_")
}

// Random identifiers come from github.com/google/uuid: the package reads no
// random bytes of its own (math/rand's jitter aside).
func TestNoHandWrittenRandomIdentifiers(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ImportsOnly)
	require.NoError(t, err)
	for _, pkg := range pkgs {
		for name, f := range pkg.Files {
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				assert.NotEqual(t, "crypto/rand", path, "%s reads random bytes itself; use github.com/google/uuid", name)
			}
		}
	}
}
