package main

// These tests run the built cdb binary, as a user does: exit codes, which
// stream gets what, signals and terminals are only real that way.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// cdbPath is the binary TestMain builds once for the package's tests.
var cdbPath string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cdb-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cdbPath = filepath.Join(dir, "cdb")
	build := exec.Command("go", "build", "-o", cdbPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cdb:", err)
		return 1
	}
	return m.Run()
}

// fakeKey is a recognisable master key that must never show up in output.
const fakeKey = "U0VDUkVULUtFWS1ORVZFUi1QUklOVC1NRQ=="

// binary is one run of the built cdb.
type binary struct {
	env  []string // added to a clean environment
	args []string
}

// cleanEnv is the test's environment without anything that changes cdb's
// behaviour: COSMOS_* settings and the terminal width.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COSMOS_") || strings.HasPrefix(kv, "COLUMNS=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func (b binary) command(t *testing.T) *exec.Cmd {
	cmd := exec.Command(cdbPath, b.args...)
	cmd.Env = cleanEnv(b.env...)
	cmd.Dir = t.TempDir() // no .env of the repository's
	return cmd
}

// run runs it to the end and returns its exit code and output.
func (b binary) run(t *testing.T) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := b.command(t)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("cdb %v: %v", b.args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

func cli(args ...string) binary { return binary{args: args} }

func (b binary) with(env ...string) binary { b.env = append(b.env, env...); return b }

// everyCommand is each command users can run, hidden ones included.
var everyCommand = []string{"demo", "emulator", "instances", "show", "start", "raise", "cancel", "metrics", "top", "delete", "prune", "bench", "doctor", "version", "sim-node", "bench-process"}

// closedEndpoint is an http endpoint nothing listens on.
func closedEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	return endpoint
}

func assertNoKey(t *testing.T, what, stdout, stderr string) {
	t.Helper()
	for _, s := range []string{stdout, stderr} {
		assert.NotContains(t, s, fakeKey[:16], "%s prints the key", what)
	}
}

func TestBinaryNeverPrintsTheKey(t *testing.T) {
	endpoint := closedEndpoint(t)
	env := []string{"COSMOS_KEY=" + fakeKey, "COSMOS_ENDPOINT=" + endpoint}
	for _, name := range everyCommand {
		for _, args := range [][]string{{name, "-h"}, {name, "-no-such-flag"}, {"help", name}, {name, "-limit", "many"}} {
			_, stdout, stderr := cli(args...).with(env...).run(t)
			assertNoKey(t, fmt.Sprintf("cdb %v", args), stdout, stderr)
		}
	}
	refusing, _ := operatorFixture(t) // its key is not fakeKey: a 401
	for _, b := range []binary{
		cli("instances").with(env...),
		cli("show", "x").with("COSMOS_KEY="+fakeKey, "COSMOS_ENDPOINT="+refusing.endpoint),
		cli("metrics", "-key", fakeKey, "-endpoint", refusing.endpoint),
		cli("metrics", "-key", fakeKey, "-endpoint", "ftp://nowhere"),
		cli("bench", "-duration", "1s").with("COSMOS_KEY="+fakeKey, "COSMOS_ENDPOINT="+refusing.endpoint),
		cli("doctor").with("COSMOS_KEY="+fakeKey, "COSMOS_ENDPOINT="+refusing.endpoint),
	} {
		code, stdout, stderr := b.run(t)
		assert.Equal(t, 1, code, "cdb %v fails: %s", b.args, stderr)
		assertNoKey(t, fmt.Sprintf("cdb %v", b.args), stdout, stderr)
	}
}

// An endpoint with user information is refused without being echoed, by
// the client's own check and by what the commands add to its error.
func TestBinaryNeverPrintsTheEndpointsUserInformation(t *testing.T) {
	env := []string{"COSMOS_KEY=" + fakeKey, "COSMOS_ENDPOINT=https://user:hunter2secret@acct.documents.azure.com/"}
	for _, args := range [][]string{{"instances"}, {"show", "x"}, {"metrics"}, {"doctor"}, {"bench", "-duration", "1s"}} {
		code, stdout, stderr := cli(args...).with(env...).run(t)
		assert.NotEqual(t, 0, code, "cdb %v fails: %s", args, stderr)
		assert.Contains(t, stderr, "user information is not allowed", "cdb %v is refused for the endpoint's user information", args)
		for _, s := range []string{stdout, stderr} {
			assert.NotContains(t, s, "hunter2secret", "cdb %v prints the endpoint's user information", args)
		}
	}
}

func TestBinaryHelpGoesToStdoutUsageErrorsToStderr(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, stdout, stderr := cli(args...).run(t)
		assert.Equal(t, 0, code, "cdb %v", args)
		assert.True(t, strings.HasPrefix(stdout, "usage: cdb <command> [flags] [arguments]\n"), "cdb %v: %q", args, stdout)
		assert.Empty(t, stderr)
	}
	for _, name := range everyCommand {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			code, stdout, stderr := cli(args...).run(t)
			assert.Equal(t, 0, code, "cdb %v", args)
			assert.Regexp(t, `^usage: cdb `+name+`( \[flags\])?( [A-Z]+)*( \[[A-Z]+\])?\n\n[a-z].*\n`, stdout, "cdb %v", args)
			assert.Empty(t, stderr, "cdb %v", args)
		}
		code, stdout, stderr := cli(name, "-no-such-flag").run(t)
		assert.Equal(t, 2, code, "cdb %s with a bad flag", name)
		assert.Empty(t, stdout, "cdb %s with a bad flag", name)
		assert.Contains(t, stderr, "cdb "+name+": flag provided but not defined: -no-such-flag\nusage: cdb "+name)
		assert.Contains(t, stderr, "Run 'cdb help "+name+"' for details.")
	}
	for _, b := range []binary{cli(), cli("nope"), cli("help", "nope")} {
		code, stdout, stderr := b.run(t)
		assert.Equal(t, 2, code, "cdb %v", b.args)
		assert.Empty(t, stdout, "cdb %v", b.args)
		assert.Contains(t, stderr, "usage: cdb <command>", "cdb %v", b.args)
	}
}

func TestBinaryVersionNamesTheReleaseTheModuleAndTheProvider(t *testing.T) {
	for _, spelling := range []string{"version", "--version", "-version"} {
		code, stdout, stderr := cli(spelling).run(t)
		require.Equal(t, 0, code, "cdb %s: %s", spelling, stderr)
		assert.Empty(t, stderr, "cdb %s", spelling)
		assert.True(t, strings.HasPrefix(stdout, "cdb "+cdb.Version+"\n"), "cdb %s printed %q", spelling, stdout)
		assert.Contains(t, stdout, "module   github.com/duroxide-go/cdb")
		assert.Contains(t, stdout, "provider "+cdb.ProviderName+" "+cdb.ProviderVersion)
	}
	code, _, stderr := cli("--version", "extra").run(t)
	assert.Equal(t, 2, code, "cdb --version takes no arguments")
	assert.Contains(t, stderr, "usage: cdb version")
}

func TestBinaryShowDeletePruneSayNotFoundOnlyForAnUnknownInstance(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	for _, name := range []string{"show", "delete", "prune"} {
		code, _, stderr := cli(append(append([]string{name}, conn...), "nobody")...).run(t)
		assert.Equal(t, 1, code, "cdb %s nobody", name)
		assert.Contains(t, stderr, `instance "nobody" not found`, "cdb %s nobody", name)
	}
	onDone := func(r cdb.FakeRequest) bool { return strings.Contains(r.PartitionKey, `"done"`) }
	remove := fx.account.InjectFault(cdb.FakeFault{Match: onDone, Status: http.StatusTooManyRequests, RetryAfter: time.Millisecond})
	for _, args := range [][]string{{"show"}, {"delete", "-force"}, {"prune"}} {
		name := args[0]
		code, _, stderr := cli(append(append(args, conn...), "done")...).run(t)
		assert.Equal(t, 1, code, "cdb %s done", name)
		assert.NotContains(t, stderr, "not found", "cdb %s done while throttled", name)
		assert.Contains(t, stderr, "throttled (429)", "cdb %s done", name)
	}
	remove()
	remove = fx.account.InjectFault(cdb.FakeFault{Match: onDone, Status: http.StatusForbidden})
	code, _, stderr := cli(append(append([]string{"show"}, conn...), "done")...).run(t)
	assert.Equal(t, 1, code)
	assert.NotContains(t, stderr, "not found")
	assert.Contains(t, stderr, "refused the request (403)")
	remove()
	fx.account.InjectFault(cdb.FakeFault{Match: onDone, Kind: cdb.FaultDropConnection})
	code, _, stderr = cli(append(append([]string{"show"}, conn...), "done")...).run(t)
	assert.Equal(t, 1, code)
	assert.NotContains(t, stderr, "not found")
	assert.Contains(t, stderr, "network")
}

func TestBinaryReportsAPlainWebServerAsNotACosmosEndpoint(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"404 html": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "<html><body>Not Found</body></html>")
		},
		"404 json": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":"NotFound","message":"no such route"}`)
		},
		"200 html": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html><body>Welcome</body></html>")
		},
	} {
		srv := httptest.NewServer(h)
		code, _, stderr := cli("instances", "-endpoint", srv.URL, "-key", fakeKey).run(t)
		srv.Close()
		assert.Equal(t, 1, code, name)
		assert.Contains(t, stderr, "not a Cosmos DB endpoint", name)
		assert.NotContains(t, stderr, "container", name)
	}
}

func TestBinaryWritesJSONForScripts(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"instances", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var list struct {
		Instances []struct {
			InstanceID           string  `json:"instance_id"`
			Status               string  `json:"status"`
			OrchestrationName    string  `json:"orchestration_name"`
			OrchestrationVersion string  `json:"orchestration_version"`
			ExecutionID          uint64  `json:"current_execution_id"`
			CreatedAt            *string `json:"created_at"`
		} `json:"instances"`
		Next *string `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
	assert.Nil(t, list.Next, "one page holds both")
	require.Len(t, list.Instances, 2)
	for _, i := range list.Instances {
		assert.Contains(t, []string{"done", "busy"}, i.InstanceID)
		assert.Equal(t, "TestOrch", i.OrchestrationName)
		assert.Equal(t, "1.0.0", i.OrchestrationVersion)
		assert.Equal(t, uint64(1), i.ExecutionID)
		require.NotNil(t, i.CreatedAt)
		_, err := time.Parse(time.RFC3339, *i.CreatedAt)
		assert.NoError(t, err)
	}

	code, stdout, stderr = cli(append(append([]string{"show", "-o", "json"}, conn...), "done")...).run(t)
	require.Equal(t, 0, code, stderr)
	var show struct {
		InstanceID   string            `json:"instance_id"`
		Status       string            `json:"status"`
		Output       *string           `json:"output"`
		CustomStatus *string           `json:"custom_status"`
		KV           map[string]string `json:"kv"`
		Executions   []struct {
			ExecutionID uint64 `json:"execution_id"`
			Status      string `json:"status"`
			EventCount  int    `json:"event_count"`
		} `json:"executions"`
		History []map[string]any `json:"history"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &show), stdout)
	assert.Equal(t, "done", show.InstanceID)
	assert.Equal(t, "Completed", show.Status)
	require.NotNil(t, show.Output)
	assert.Equal(t, "all good", *show.Output)
	require.NotNil(t, show.CustomStatus)
	assert.Equal(t, "shipped", *show.CustomStatus)
	assert.Equal(t, map[string]string{"color": "blue"}, show.KV)
	require.Len(t, show.Executions, 1)
	assert.Equal(t, "Completed", show.Executions[0].Status)
	require.NotEmpty(t, show.History)
	assert.Equal(t, float64(1), show.History[0]["event_id"], "history events are in duroxide's JSON form")
	assert.Equal(t, "OrchestrationStarted", show.History[0]["type"])

	code, stdout, stderr = cli(append([]string{"metrics", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var metrics map[string]int
	require.NoError(t, json.Unmarshal([]byte(stdout), &metrics), stdout)
	assert.Equal(t, map[string]int{
		"total_instances": 2, "running_instances": 1, "completed_instances": 1, "failed_instances": 0,
		"total_executions": 2, "total_events": metrics["total_events"], "orchestrator_queue": 0, "worker_queue": 0,
		"orchestrator_not_due": 0, "worker_not_due": 0, "outbox": 0, "parked_messages": 0, "poison_messages": 0,
	}, metrics)
	assert.Positive(t, metrics["total_events"])

	code, stdout, stderr = cli(append([]string{"metrics", "-o", "yaml"}, conn...)...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `-o: "yaml" is not one of text, json`)
}

func TestBinaryValidatesStatusCaseInsensitively(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	code, stdout, stderr := cli(append([]string{"instances", "-status", "completed"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "done")
	assert.NotContains(t, stdout, "busy")

	code, stdout, stderr = cli(append([]string{"instances", "-status", "Done"}, conn...)...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `-status: "Done" is not one of Running, Completed, Failed, ContinuedAsNew, Queued, Parked`)
}

func TestBinaryAcceptsFlagsAfterArguments(t *testing.T) {
	fx, key := operatorFixture(t)
	code, stdout, stderr := cli("show", "done", "-endpoint", fx.endpoint, "-key", key).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "status     Completed")

	code, _, stderr = cli("show", "done", "extra", "-endpoint", fx.endpoint, "-key", key).run(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "usage: cdb show [flags] INSTANCE")

	code, stdout, stderr = cli("show", "-endpoint", fx.endpoint, "-key", key, "--", "-done").run(t)
	assert.Equal(t, 1, code, "after -- an argument that looks like a flag is an instance id")
	assert.Contains(t, stderr, `instance "-done" not found`)
	assert.Empty(t, stdout)
}

// startReading starts cmd, killed when the test ends, and returns its
// stdout to read while it runs.
func startReading(t *testing.T, cmd *exec.Cmd) io.Reader {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return out
}

// startUntilLine starts cmd and waits until its stdout has a line containing
// want; the rest of stdout is drained in the background.
func startUntilLine(t *testing.T, cmd *exec.Cmd, want string) {
	t.Helper()
	out := startReading(t, cmd)
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), want) {
		n, err := out.Read(buf)
		seen.Write(buf[:n])
		require.NoError(t, err, "stdout so far: %s", seen.String())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
}

func TestBinaryExitsWith130OnInterrupt(t *testing.T) {
	for _, b := range []binary{
		cli("bench", "-duration", "10m", "-concurrency", "1:1", "-latency", "0"),
		cli("demo", "-orders", "10000"),
	} {
		cmd := b.command(t)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		startUntilLine(t, cmd, "\n")
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
		err := cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "cdb %v", b.args)
		assert.Equal(t, 130, exit.ExitCode(), "cdb %v: %s", b.args, stderr.String())
		assert.Contains(t, stderr.String(), "interrupted", "cdb %v", b.args)
	}
}

func TestBinaryEmulatorStopsCleanlyOnInterrupt(t *testing.T) {
	cmd := cli("emulator").command(t)
	startUntilLine(t, cmd, "endpoint=")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	assert.NoError(t, cmd.Wait(), "Ctrl-C is how a server is stopped: exit 0")
}

func TestBinaryBenchRefusesNonsense(t *testing.T) {
	for _, args := range [][]string{
		{"-duration", "0"},
		{"-duration", "-1s"},
		{"-inflight", "0"},
		{"-inflight", "-3"},
		{"-tasks", "0"},
		{"-latency", "5ms,abc"},
		{"-latency", ","},
		{"-latency", "-5ms"},
		{"-concurrency", "0:1"},
		{"-concurrency", ""},
		{"-processes", "-1"},
		{"-kill-after", "1s"},
		{"-kill-after", "1s", "-processes", "1"},
		{"-lease", "10ms"},
		{"-shape", "fan-out"},
		{"-shape", ""},
		{"-wait", "0"},
		{"-wait", "-1s"},
		{"-orchestration-timeout", "0"},
		{"-orchestration-timeout", "-1m"},
		{"-ranges", "4"},
		{"-ranges", "0", "-idle"},
		{"-ranges", "65", "-idle"},
		{"-waiting", "10"},
		{"-waiting", "-1", "-idle"},
	} {
		code, stdout, stderr := cli(append([]string{"bench"}, args...)...).run(t)
		assert.Equal(t, 2, code, "cdb bench %v", args)
		assert.Empty(t, stdout, "cdb bench %v runs nothing", args)
		assert.Regexp(t, `^cdb bench: .*`+args[0], stderr, "cdb bench %v names the flag", args)
		assert.Contains(t, stderr, "usage: cdb bench", "cdb bench %v", args)
	}
}

// TestBinaryBenchReportsIssue10Metrics: per run, the table has orch/s,
// p50/p99, the provider's requests per orchestration, turns per
// orchestration, RU per orchestration, 412s per work item and the harness's
// requests apart; -v adds the provider's requests by operation, and -o json
// prints the whole result.
func TestBinaryBenchReportsIssue10Metrics(t *testing.T) {
	quick := []string{"bench", "-duration", "300ms", "-inflight", "2", "-tasks", "2", "-concurrency", "1:1", "-latency", "0"}
	code, stdout, stderr := cli(append(quick, "-v")...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| added latency | orch:worker | orch/s | p50 | p99 | requests/orch | turns/orch | RU/orch | activities/s | requests/activity | RU/activity | activity p50 | 412/item | harness requests/orch | completed/failed |")
	assert.Regexp(t, `\| 0s \| 1:1 \| [0-9.]+ \| [0-9.]+m?s \| [0-9.]+m?s \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+m?s \| [0-9.]+ \| [0-9.]+ \| [0-9]+/0 \|`, stdout)
	assert.Contains(t, stdout, "| added latency | orch:worker | operation | requests/orch | RU/orch | 412/orch |")
	assert.Regexp(t, `\| 0s \| 1:1 \| ExecuteTransactionalBatch \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \|`, stdout)

	code, stdout, stderr = cli(append(quick, "-o", "json")...).run(t)
	require.Equal(t, 0, code, stderr)
	type usage struct {
		Requests    int64 `json:"requests"`
		ByOperation map[string]struct {
			Requests                 int64   `json:"requests"`
			RequestsPerOrchestration float64 `json:"requests_per_orchestration"`
		} `json:"by_operation"`
	}
	var out struct {
		Target string `json:"target"`
		Runs   []struct {
			AddedLatencyMs            *float64 `json:"added_latency_ms"`
			OrchestrationConcurrency  int      `json:"orchestration_concurrency"`
			Completed                 int      `json:"completed"`
			OrchestrationsPerSecond   float64  `json:"orchestrations_per_second"`
			P50Ms                     float64  `json:"p50_ms"`
			RequestsPerOrchestration  float64  `json:"requests_per_orchestration"`
			HarnessRequestsPerOrch    *float64 `json:"harness_requests_per_orchestration"`
			TurnsPerOrchestration     float64  `json:"turns_per_orchestration"`
			RUPerOrchestration        float64  `json:"ru_per_orchestration"`
			PreconditionFailedPerItem *float64 `json:"precondition_failed_per_item"`
			Provider                  usage    `json:"provider"`
			Harness                   *usage   `json:"harness"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	assert.Equal(t, "the in-memory Cosmos DB", out.Target)
	require.Len(t, out.Runs, 1)
	r := out.Runs[0]
	require.NotNil(t, r.AddedLatencyMs)
	assert.Equal(t, 0.0, *r.AddedLatencyMs)
	assert.Equal(t, 1, r.OrchestrationConcurrency)
	assert.Positive(t, r.Completed)
	assert.Positive(t, r.OrchestrationsPerSecond)
	assert.Positive(t, r.P50Ms)
	assert.Positive(t, r.RequestsPerOrchestration)
	// The harness's reads are counted apart, and may be none: it learns an
	// end the runtime's provider commits without a read, and skips its
	// polls while that provider holds the instance.
	require.NotNil(t, r.HarnessRequestsPerOrch)
	require.NotNil(t, r.Harness)
	assert.InDelta(t, float64(r.Harness.Requests)/float64(r.Completed), *r.HarnessRequestsPerOrch, 1e-9)
	assert.GreaterOrEqual(t, r.TurnsPerOrchestration, 2.0)
	assert.Positive(t, r.RUPerOrchestration)
	assert.NotNil(t, r.PreconditionFailedPerItem)
	assert.Positive(t, r.Provider.Requests)
	assert.Positive(t, r.Provider.ByOperation["ExecuteTransactionalBatch"].RequestsPerOrchestration)

	code, stdout, stderr = cli(append(quick, "-o", "yaml")...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "usage: cdb bench")
}

// TestBinaryBenchRunsEveryShape: -shape picks the orchestration kept in
// flight, and -o json reports it per step (what a step is, how many an
// orchestration takes, requests, RU and latency per step); a sequence run
// one at a time also reports what its early and late steps cost.
func TestBinaryBenchRunsEveryShape(t *testing.T) {
	steps := map[string][2]any{"fanout": {"activity", 2}, "sequence": {"activity", 2}, "timers": {"timer", 1}, "events": {"event", 1}, "children": {"child", 2}}
	for shape, want := range steps {
		code, stdout, stderr := cli("bench", "-shape", shape, "-wait", "50ms", "-duration", "200ms", "-inflight", "2", "-tasks", "2",
			"-concurrency", "2:2", "-latency", "0", "-o", "json").run(t)
		require.Equal(t, 0, code, "%s: %s", shape, stderr)
		var out struct {
			Shape  string  `json:"shape"`
			Step   string  `json:"step"`
			WaitMs float64 `json:"wait_ms"`
			Runs   []struct {
				Completed             int      `json:"completed"`
				Failed                int      `json:"failed"`
				StepsPerOrchestration int      `json:"steps_per_orchestration"`
				StepsPerSecond        float64  `json:"steps_per_second"`
				RequestsPerStep       float64  `json:"requests_per_step"`
				RUPerStep             float64  `json:"ru_per_step"`
				StepP50Ms             float64  `json:"step_p50_ms"`
				EarlySteps            *float64 `json:"early_steps"`
			} `json:"runs"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		assert.Equal(t, shape, out.Shape)
		assert.Equal(t, want[0], out.Step, shape)
		assert.Equal(t, 50.0, out.WaitMs)
		require.Len(t, out.Runs, 1)
		r := out.Runs[0]
		assert.Positive(t, r.Completed, shape)
		assert.Zero(t, r.Failed, shape)
		assert.Equal(t, want[1], r.StepsPerOrchestration, shape)
		assert.Positive(t, r.StepsPerSecond, shape)
		assert.Positive(t, r.RequestsPerStep, shape)
		assert.Positive(t, r.RUPerStep, shape)
		assert.Positive(t, r.StepP50Ms, shape)
		assert.Nil(t, r.EarlySteps, "%s: two in flight: a step's cost is not told apart", shape)
	}

	code, stdout, stderr := cli("bench", "-shape", "sequence", "-duration", "100ms", "-inflight", "1", "-tasks", "22",
		"-concurrency", "1:1", "-latency", "0").run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "shape sequence on the in-memory Cosmos DB: 1 in flight, each 22 activities of 10 ms one after another")
	assert.Contains(t, stdout, "| added latency | orch:worker | steps | requests/step | RU/step | steps | requests/step | RU/step | late/early RU |")
	assert.Regexp(t, `\| 0s \| 1:1 \| 2-11 \| [0-9.]+ \| [0-9.]+ \| 12-21 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|`, stdout)
}

// -processes runs the protocol in OS processes at once, sharing the slots
// through process leases, and reports their aggregate, the lease requests,
// and with -kill-after how long a killed process's share took to move.
func TestBinaryBenchRunsInSeveralProcesses(t *testing.T) {
	code, stdout, stderr := cli("bench", "-processes", "2", "-kill-after", "1s", "-lease", "1s", "-duration", "4s", "-inflight", "2", "-tasks", "2",
		"-concurrency", "1:1", "-latency", "0").run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| processes | added latency | orch:worker per process | orch/s | p50 | p99 | requests/orch | RU/orch | 412/item | lease requests/s | completed/failed | share moved after kill | host CPU |")
	assert.Regexp(t, `\| 2 \| 0s \| 1:1 \| [0-9.]+ \| [0-9.]+m?s \| [0-9.]+m?s \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [1-9][0-9]*/0 \| [0-9.]+m?s \(bench-1 killed\) \| ([0-9]+% / [0-9]+%|-) \|`, stdout)
}

func TestBinaryBenchRunsOnCOSMOS_ENDPOINTInAContainerOfItsOwn(t *testing.T) {
	fx, key := operatorFixture(t)
	env := []string{"COSMOS_ENDPOINT=" + fx.endpoint, "COSMOS_KEY=" + key, "COSMOS_CONTAINER=duroxide"}
	quick := []string{"bench", "-duration", "300ms", "-inflight", "2", "-tasks", "1", "-concurrency", "1:1"}

	code, stdout, stderr := cli(quick...).with(env...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `database "duroxide", container "cdb-bench" (created for this run, deleted afterwards)`)
	assert.Regexp(t, `\| network \| 1:1 \| [0-9.]+ \|`, stdout)
	ctx := context.Background()
	client := fx.account.Client()
	bench, err := client.NewContainer("duroxide", "cdb-bench")
	require.NoError(t, err)
	_, err = bench.Read(ctx)
	assert.True(t, cdb.IsNotFound(err), "the container bench created is gone: %v", err)
	assert.ElementsMatch(t, []string{"done", "busy"}, fx.instances(t, "duroxide"), "the user's container is untouched")

	p, err := cdb.NewProvider(ctx, cdb.Config{Client: client, Container: "mine", ShortPolling: true})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	code, stdout, stderr = cli(append(quick, "-container", "mine")...).with(env...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `container "mine" (existing, its bench instances deleted afterwards)`)
	assert.Empty(t, fx.instances(t, "mine"), "bench leaves no instances in a container it did not create")

	code, _, stderr = cli(append(quick, "-container", "duroxide")...).with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `container "duroxide" already holds instances: bench needs a container of its own`)
	assert.ElementsMatch(t, []string{"done", "busy"}, fx.instances(t, "duroxide"))

	code, _, stderr = cli(append(quick, "-latency", "5ms")...).with(env...).run(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "-latency applies to the in-memory Cosmos DB only")
}

// The CLI takes its account from .env when the environment has none, and
// says so when .env cannot be read, rather than falling back to something
// else.
func TestBinaryReadsItsAccountFromDotEnv(t *testing.T) {
	fx, key := operatorFixture(t)
	dir := t.TempDir()
	dotEnv := "COSMOS_ENDPOINT=" + fx.endpoint + "\nCOSMOS_KEY=" + key + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".env"), []byte(dotEnv), 0o600))
	cmd := cli("instances", "-o", "json").command(t)
	cmd.Dir = dir
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), `"done"`)

	broken := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(broken, ".env"), 0o700)) // a directory cannot be read as a file
	cmd = cli("metrics").command(t)
	cmd.Dir = broken
	combined, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode(), "a failure, not a usage error: %s", combined)
	assert.Contains(t, string(combined), ".env")
	assert.NotContains(t, string(combined), "no endpoint")
}

// `cdb bench -idle` measures what processes with no work spend: a row per
// latency with the account's requests and RU per second, the documents a
// query evaluated, the pickup of a start no process was told of, and the
// requests by operation; -o json prints the results.
func TestBinaryBenchIdleMeasuresWhatDoingNothingCosts(t *testing.T) {
	// An idle process reads the queue bell about once per poll interval
	// (1s), so a run lasts several: one read late on a busy host must not
	// empty the window.
	code, stdout, stderr := cli("bench", "-idle", "-duration", "3s", "-ranges", "2", "-processes", "2").run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "idle cost on the in-memory Cosmos DB: 2 processes, 2 partition key ranges, 0 instances waiting for an event, 3s per run")
	assert.Regexp(t, `\| 0s \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+m?s / [0-9.]+m?s \| [A-Za-z]+ [0-9.]+`, stdout)

	code, stdout, stderr = cli("bench", "-idle", "-duration", "3s", "-waiting", "3", "-o", "json").run(t)
	require.Equal(t, 0, code, stderr)
	var results []struct {
		Config            struct{ Processes, Ranges, Waiting int }
		RequestsPerSecond float64
		ByOperation       map[string]float64
		Pickup, PickupMax time.Duration
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &results), stdout)
	require.Len(t, results, 1)
	assert.Equal(t, 3, results[0].Config.Waiting)
	assert.Positive(t, results[0].ByOperation["ReadItem"], "an idle process reads the queue bell")
	assert.Positive(t, results[0].Pickup)
	assert.GreaterOrEqual(t, results[0].PickupMax, results[0].Pickup, "the slowest of the samples, and the median")
}

// A script or a test that serves the UI on a free port learns the port
// from the first line (internal/uibrowser reads it).
func TestBinaryUIFirstLineNamesTheAddressItBound(t *testing.T) {
	cmd := cli("ui", "-addr", "127.0.0.1:0").command(t)
	lines := bufio.NewScanner(startReading(t, cmd))
	first := make(chan string, 1)
	go func() {
		lines.Scan()
		first <- lines.Text()
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("cdb ui printed no line within 30s")
	}
	m := regexp.MustCompile(`^cdb ui: the embedded in-memory Cosmos DB .* on (http://127\.0\.0\.1:(\d+))/$`).FindStringSubmatch(line)
	require.NotNil(t, m, "first line: %q", line)
	assert.NotEqual(t, "0", m[2], "the port it bound, not the one asked for")
	resp, err := http.Get(m[1] + "/live")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "it serves on the address it names")
}
