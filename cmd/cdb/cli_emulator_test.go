package main

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cdb emulator -o env prints export lines a shell evals: started in the
// background inside a command substitution, it hands the shell the
// endpoint and the key (the metrics below get past the key to the missing
// database) and serves on.
func TestBinaryEmulatorPrintsExportLinesAShellEvals(t *testing.T) {
	script := `eval "$("$CDB" emulator -o env & echo "emulator=$!")"
trap 'kill "$emulator"' EXIT
echo "endpoint is $COSMOS_ENDPOINT"
"$CDB" metrics -database nothing-here`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = cleanEnv("CDB=" + cdbPath)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "metrics fails on the missing database: %s", out)
	assert.Regexp(t, `endpoint is http://127\.0\.0\.1:\d+\n`, string(out))
	assert.Regexp(t, `cdb metrics: database "nothing-here" not found at http://127\.0\.0\.1:\d+`, string(out))
}

// A value with a single quote survives the shell's eval whole.
func TestShellAssignmentQuotesForTheShell(t *testing.T) {
	value := `it's $HOME; "quoted" \ back`
	out, err := exec.Command("sh", "-c", "eval \"$1\"; printf %s \"$X\"", "sh", "export "+shellAssignment("X", value)).Output()
	require.NoError(t, err)
	assert.Equal(t, value, string(out))
}
