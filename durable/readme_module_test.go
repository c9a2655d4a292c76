package durable_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeOutput is what the README says its program prints.
const readmeOutput = "shipped book, pen, lamp to alice, paid with card"

// TestReadmeProgramRunsInANewModule follows the README as a new user would:
// the program and its test, taken from the README's text, go into a new
// module outside this repository that requires this one (through a replace
// directive standing in for the published version), and go mod tidy,
// go vet, go test and go run succeed there, on the in-memory Cosmos DB.
func TestReadmeProgramRunsInANewModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH (%v): cannot build a module", err)
	}
	repoRoot, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	for _, name := range []string{"main.go", "main_test.go", "deploy_test.go"} {
		src, err := readmeFile(string(readme), name)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name), src)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), fmt.Sprintf(
		"module example.com/shop\n\ngo 1.23\n\nrequire github.com/duroxide-go/cdb v0.0.0\n\nreplace github.com/duroxide-go/cdb => %s\n",
		repoRoot))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := moduleEnv(ctx, t, goTool)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s in the new module: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
		}
		return stdout.String()
	}
	goCmd("mod", "tidy")
	goCmd("vet", "./...")
	goCmd("test", "-count=1", "./...")
	if out := strings.TrimSpace(goCmd("run", ".")); out != readmeOutput {
		t.Errorf("go run . printed %q, the README says %q", out, readmeOutput)
	}
	if !strings.Contains(string(readme), "go run .   # "+readmeOutput) {
		t.Errorf("the README does not show the output %q after go run", readmeOutput)
	}
}

// readmeFile is the Go block that follows the marker
// "<!-- example-module: NAME -->" in the README.
func readmeFile(readme, name string) (string, error) {
	block := regexp.MustCompile("(?s)<!-- example-module: " + regexp.QuoteMeta(name) + " -->\\s*```go\\n(.*?)```")
	m := block.FindStringSubmatch(readme)
	if m == nil {
		return "", fmt.Errorf("README.md has no go block marked <!-- example-module: %s -->", name)
	}
	return m[1], nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// moduleEnv is the environment the new module is built in: this process's
// module cache, proxy and flags (so a warm cache needs no network), module
// mode for the new go.mod, no workspace, and no COSMOS_* variables, so the
// program runs on the in-memory Cosmos DB as the README promises.
func moduleEnv(ctx context.Context, t *testing.T, goTool string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, goTool, "env", "-json", "GOMODCACHE", "GOPROXY", "GOFLAGS", "GONOSUMDB", "GOSUMDB").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var goEnv map[string]string
	if err := json.Unmarshal(out, &goEnv); err != nil {
		t.Fatalf("go env: %v", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COSMOS_") {
			env = append(env, kv)
		}
	}
	goEnv["GOFLAGS"] = strings.TrimSpace(goEnv["GOFLAGS"] + " -mod=mod")
	goEnv["GOWORK"] = "off"
	for k, v := range goEnv {
		env = append(env, k+"="+v)
	}
	return env
}
