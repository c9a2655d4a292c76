package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

var endpointLine = regexp.MustCompile(`^endpoint=(http://127\.0\.0\.1:\d+) key=(\S+)$`)

// startEmulator runs `cdb emulator args...` in-process and returns the
// endpoint and key from its stdout line, the rest of stdout, and a stop
// function that interrupts it and returns its exit code.
func startEmulator(t *testing.T, args ...string) (endpoint, key string, rest *bytes.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"emulator"}, args...), pw, io.Discard)
		_ = pw.Close()
	}()
	reader := bufio.NewReader(pr)
	line, err := reader.ReadString('\n')
	require.NoError(t, err)
	m := endpointLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
	require.NotNil(t, m, "stdout line %q", line)
	rest = &bytes.Buffer{}
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(rest, reader); close(drained) }()
	stop = func() int {
		cancel()
		code := <-exit
		<-drained
		return code
	}
	return m[1], m[2], rest, stop
}

func TestEmulatorPrintsExactlyOneLineAndServesUntilInterrupted(t *testing.T) {
	endpoint, key, rest, stop := startEmulator(t)
	c, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key})
	require.NoError(t, err)
	ctx := context.Background()
	acct, err := c.ReadAccount(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, acct.WritableLocations)
	assert.Equal(t, endpoint+"/", acct.WritableLocations[0].Endpoint, "the account advertises the loopback endpoint")
	_, err = c.CreateDatabase(ctx, "db")
	require.NoError(t, err)

	assert.Equal(t, 0, stop(), "an interrupt is a clean exit")
	assert.Empty(t, rest.String(), "nothing but the endpoint line goes to stdout")
}

func TestEmulatorDefaultsToTheEmulatorKey(t *testing.T) {
	_, key, _, stop := startEmulator(t)
	defer stop()
	assert.Equal(t, "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==", key)
}

func TestEmulatorRangesFlagSetsPartitionKeyRanges(t *testing.T) {
	endpoint, key, _, stop := startEmulator(t, "-ranges", "3")
	defer stop()
	ctx := context.Background()
	c, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key})
	require.NoError(t, err)
	require.NoError(t, c.EnsureDatabase(ctx, "db"))
	cc, err := c.NewContainer("db", "items")
	require.NoError(t, err)
	_, err = cc.Ensure(ctx, cdb.ContainerProperties{ID: "items", PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/pk"}, Kind: "Hash", Version: 2}})
	require.NoError(t, err)
	ranges, err := cc.ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)
	assert.Len(t, ranges, 3)
}

func TestEmulatorLatencyFlagDelaysRequests(t *testing.T) {
	endpoint, key, _, stop := startEmulator(t, "-latency", "40ms")
	defer stop()
	c, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = c.ReadAccount(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a 40ms latency outlasts a 10ms deadline")
}

func TestEmulatorStaleReadsFlagServesReadsWithAnOldTokenFromALaggingReplica(t *testing.T) {
	for _, stale := range []bool{false, true} {
		var args []string
		if stale {
			args = []string{"-stale-reads"}
		}
		endpoint, key, _, stop := startEmulator(t, args...)
		ctx := context.Background()
		c, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key})
		require.NoError(t, err)
		require.NoError(t, c.EnsureDatabase(ctx, "db"))
		cc, err := c.NewContainer("db", "items")
		require.NoError(t, err)
		_, err = cc.Ensure(ctx, cdb.ContainerProperties{ID: "items", PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/pk"}}})
		require.NoError(t, err)
		pk := cdb.NewPartitionKeyString("p")
		_, err = cc.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p"}`), nil)
		require.NoError(t, err)
		_, err = cc.ReadItem(ctx, pk, "a", &cdb.ItemOptions{SessionToken: "0:-1#0"}) // a token from before the create
		if stale {
			assert.True(t, cdb.IsNotFound(err), "the lagging replica has not got the create: %v", err)
		} else {
			assert.NoError(t, err, "without -stale-reads every read sees every write")
		}
		_, err = cc.ReadItem(ctx, pk, "a", nil)
		assert.NoError(t, err, "the client's own session token reads its write")
		stop()
	}
}

func TestEmulatorRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-ranges", "0"},
		{"-latency", "-1s"},
		{"-key", "not base64!"},
		{"-addr"},
		{"stray"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), append([]string{"emulator"}, args...), io.Discard, &stderr)
		assert.Equal(t, 2, code, "cdb emulator %v", args)
		assert.NotEmpty(t, stderr.String(), "cdb emulator %v explains itself", args)
	}
}

func TestEmulatorReportsAnAddressInUse(t *testing.T) {
	endpoint, _, _, stop := startEmulator(t)
	defer stop()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"emulator", "-addr", strings.TrimPrefix(endpoint, "http://")}, io.Discard, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "listen")
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"nope"}, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), `unknown command "nope"`)
	assert.Contains(t, stderr.String(), "emulator")
	assert.Equal(t, 2, run(context.Background(), nil, io.Discard, io.Discard), "no command at all")
}

// The demo runs on the embedded fake, and its output off a terminal fits
// 80 columns.
func TestDemoRunsOnTheEmbeddedFakeInEightyColumns(t *testing.T) {
	t.Setenv("COSMOS_ENDPOINT", "")
	t.Setenv("COLUMNS", "")
	var stdout bytes.Buffer
	code := run(context.Background(), []string{"demo", "-orders", "12", "-concurrency", "2"}, &stdout, io.Discard)
	require.Equal(t, 0, code, stdout.String())
	out := stdout.String()
	assert.Contains(t, out, "embedded in-memory Cosmos DB")
	assert.Regexp(t, `12/12 orders  `, out, "progress reaches every order")
	assert.Regexp(t, `orders +\d+ shipped, \d+ failed`, out)
	assert.Regexp(t, `ledger \(continued as new 1 times\)`, out, "12 orders are two ledger executions")
	assert.Regexp(t, `Cosmos DB +\d+ requests, \d+ RU\n +[0-9.]+ requests and \d+ RU per orchestration execution`, out)
	assertFits(t, out, 80)
	assert.Contains(t, out, "OrchestrationStarted", "one order's history is printed")
	assert.Contains(t, out, "OrchestrationCompleted")
}

// The overview and every command's help fit 80 columns when stdout is no
// terminal, a flag's usage going on at its indentation.
func TestHelpFitsEightyColumns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"help"}, &out, io.Discard))
	assertFits(t, out.String(), 80)
	assert.Contains(t, out.String(), "\n  bench      run duroxide's stress protocol (in memory, or on COSMOS_ENDPOINT in\n             a container of its own) and print a table\n",
		"a summary goes on under the summaries")
	for _, name := range everyCommand {
		out.Reset()
		require.Equal(t, 0, run(context.Background(), []string{"help", name}, &out, io.Discard), name)
		assertFits(t, out.String(), 80)
		assert.NotContains(t, out.String(), "\t", "cdb help %s: tabs are spaces, so a wrapped usage lines up", name)
	}
}

// unwrapped is text with each run of white space one space: what a test of
// wrapped text compares its words with.
func unwrapped(text string) string {
	return strings.Join(strings.Fields(text), " ")
}
