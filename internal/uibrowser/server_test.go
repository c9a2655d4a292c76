package uibrowser

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// uiLine is cdb ui's first line, which names the address it bound.
var uiLine = regexp.MustCompile(`^cdb ui: .* on (http://127\.0\.0\.1:\d+)/$`)

// startUI builds cmd/cdb from the repository's root module, starts
// `cdb ui` on a free loopback port of the embedded in-memory account and
// returns the URL it serves. The process is killed when the test ends.
func startUI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cdb")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cdb")
	build.Dir = filepath.Join("..", "..")
	// The root module builds on its own go.mod, as make test builds it.
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cdb: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "ui", "-addr", "127.0.0.1:0")
	// No connection in the environment nor in a .env: the embedded account
	// with the demo's orders.
	cmd.Env = withoutCosmosEnv(os.Environ())
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cdb ui: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})

	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		m := uiLine.FindStringSubmatch(l)
		if !ok || m == nil {
			t.Fatalf("cdb ui printed %q, want cdb ui: ... on http://127.0.0.1:PORT/", l)
		}
		return m[1]
	case <-time.After(60 * time.Second):
		t.Fatal("cdb ui printed nothing within 60s")
	}
	return ""
}

// withoutCosmosEnv drops the variables that would point cdb at an account.
func withoutCosmosEnv(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "COSMOS_") && !strings.HasPrefix(kv, "CDB_") {
			kept = append(kept, kv)
		}
	}
	return kept
}
