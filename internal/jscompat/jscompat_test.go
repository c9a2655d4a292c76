package jscompat

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// modulesEnv names the node_modules folder holding @azure/cosmos; make test
// sets it. Without it the test looks in the repository's .tools, where
// `make tools` installs the SDK.
const modulesEnv = "CDB_AZURE_COSMOS_MODULES"

var emulatorLine = regexp.MustCompile(`^endpoint=(http://127\.0\.0\.1:\d+) key=(\S+)$`)

// summary is the last line conformance.cjs prints.
type summary struct {
	Passed        []string `json:"passed"`
	Failed        []string `json:"failed"`
	PendingFailed []string `json:"pendingFailed"`
}

func TestAzureCosmosJSConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the JavaScript SDK conformance run builds and starts cdb emulator")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the @azure/cosmos conformance check needs it")
	}
	root := repositoryRoot(t)
	modules := os.Getenv(modulesEnv)
	if modules == "" {
		modules = filepath.Join(root, ".tools", "azure-cosmos", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(modules, "@azure", "cosmos", "package.json")); err != nil {
		t.Skipf("@azure/cosmos is not installed in %s: run `make tools` (make test does), or set %s", modules, modulesEnv)
	}

	endpoint, key := startEmulator(t, root, "-ranges", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "tools", "azure-cosmos", "conformance.cjs"))
	cmd.Env = append(os.Environ(), "COSMOS_ENDPOINT="+endpoint, "COSMOS_KEY="+key, "NODE_PATH="+modules)
	out, runErr := cmd.CombinedOutput()
	t.Logf("conformance.cjs:\n%s", out)

	s := lastSummary(t, string(out))
	if len(s.PendingFailed) > 0 {
		t.Logf("pending checks that fail (their support lands separately): %s", strings.Join(s.PendingFailed, ", "))
	}
	require.Empty(t, s.Failed, "checks that failed")
	require.NoError(t, runErr, "conformance.cjs exit status")
	require.NotEmpty(t, s.Passed)
}

func lastSummary(t *testing.T, out string) summary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s summary
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s), "the last line is the summary")
	return s
}

func repositoryRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the test runs from internal/jscompat")
	return root
}

// startEmulator builds cmd/cdb, starts `cdb emulator` with flags and reads
// its one stdout line; the process is stopped when the test ends.
func startEmulator(t *testing.T, root string, flags ...string) (endpoint, key string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cdb")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cdb")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build cdb: %s", out)

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"emulator"}, flags...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start cdb emulator")
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})

	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan(), "cdb emulator printed nothing: %v", sc.Err())
	m := emulatorLine.FindStringSubmatch(sc.Text())
	require.NotNil(t, m, "cdb emulator printed %q, want endpoint=http://127.0.0.1:PORT key=KEY", sc.Text())
	return m[1], m[2]
}
