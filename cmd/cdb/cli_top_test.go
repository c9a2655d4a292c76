package main

// cdb top through the built binary, on an in-memory account served over
// HTTP as `cdb emulator` serves it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// topFixture serves an account with three queued starts, one instance
// running, and one process holding a process lease; it returns the
// connection flags and a provider of the account (an application's).
func topFixture(t *testing.T) ([]string, *cdb.CosmosProvider) {
	t.Helper()
	conn, p, _ := topFixtureAccount(t)
	return conn, p
}

// topFixtureAccount is topFixture with its account, for faults.
func topFixtureAccount(t *testing.T) ([]string, *cdb.CosmosProvider, *cdb.FakeAccount) {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	srv := httptest.NewServer(acct.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true,
		ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: "app-1", LeaseDuration: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	providertest.CreateInstance(ctx, t, p, "running")
	for _, id := range []string{"queued-1", "queued-2", "queued-3"} {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(id), 0))
	}
	return []string{"-endpoint", srv.URL, "-key", acct.Key()}, p, acct
}

// topJSONLine is a line of `cdb top -o json` as a script reads it.
type topJSONLine struct {
	Sample       int       `json:"sample"`
	Time         time.Time `json:"time"`
	Endpoint     string    `json:"endpoint"`
	Database     string    `json:"database"`
	Container    string    `json:"container"`
	Orchestrator struct {
		Count            uint64  `json:"count"`
		OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	} `json:"orchestrator_queue"`
	Worker             map[string]float64 `json:"worker_queue"`
	Outbox             map[string]float64 `json:"outbox"`
	Parked             map[string]float64 `json:"parked"`
	Poison             map[string]float64 `json:"poison"`
	Completed          *uint64            `json:"completed"`
	CompletedPerSecond *float64           `json:"completed_per_second"`
	Seconds            *float64           `json:"seconds"`
	LiveProcesses      int                `json:"live_processes"`
	Processes          struct {
		Covered            int      `json:"covered"`
		Publishing         int      `json:"publishing"`
		RUPerSecond        *float64 `json:"ru_per_second"`
		ThrottlesPerSecond *float64 `json:"throttles_per_second"`
	} `json:"processes"`
	View struct {
		Requests      int64    `json:"requests"`
		RequestCharge float64  `json:"request_charge"`
		RUPerSecond   *float64 `json:"ru_per_second"`
		Throttles     *int64   `json:"throttles"`
	} `json:"view"`
}

// topJSONArgs are the arguments of `cdb top flags -o json` on conn.
func topJSONArgs(conn []string, flags ...string) []string {
	return slices.Concat([]string{"top"}, flags, []string{"-o", "json"}, conn)
}

// runTopJSON runs `cdb top -o json` to its end, which must be a success,
// and returns its samples.
func runTopJSON(t *testing.T, conn []string, flags ...string) []topJSONLine {
	t.Helper()
	code, stdout, stderr := cli(topJSONArgs(conn, flags...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var samples []topJSONLine
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var sample topJSONLine
		require.NoError(t, json.Unmarshal([]byte(line), &sample), line)
		samples = append(samples, sample)
	}
	return samples
}

// topJSON is a running `cdb top -o json` whose lines a test reads as they
// come, and whose stderr it reads while top runs.
type topJSON struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *lockedBuffer
	lines  *bufio.Scanner
}

func startTopJSON(t *testing.T, conn []string, flags ...string) *topJSON {
	t.Helper()
	top := &topJSON{t: t, cmd: cli(topJSONArgs(conn, flags...)...).command(t), stderr: &lockedBuffer{}}
	top.cmd.Stderr = top.stderr
	top.lines = bufio.NewScanner(startReading(t, top.cmd))
	return top
}

// next reads the next line, which must come, into v; what names the line.
func (top *topJSON) next(what string, v any) {
	top.t.Helper()
	require.True(top.t, top.lines.Scan(), "%s: %s", what, top.stderr.String())
	require.NoError(top.t, json.Unmarshal(top.lines.Bytes(), v), top.lines.Text())
}

// wait waits for top to exit, which must be a success.
func (top *topJSON) wait() {
	top.t.Helper()
	require.NoError(top.t, top.cmd.Wait(), top.stderr.String())
}

func TestBinaryTopShowsTheQueuesInBlocksThatFit80Columns(t *testing.T) {
	conn, _ := topFixture(t)
	code, stdout, stderr := cli(append([]string{"top", "-n", "2", "-interval", "200ms"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.NotContains(t, stdout, "\x1b", "no terminal: no escape sequences")

	blocks := strings.Split(strings.TrimSuffix(stdout, "\n\n"), "\n\n")
	require.Len(t, blocks, 2, "a block per sample: %s", stdout)
	for i, block := range blocks {
		assert.Regexp(t, `(?m)^ +COUNT +OLDEST +sample `+string(rune('1'+i))+` +\d\d:\d\d:\d\dZ +every 200ms$`, block)
		assert.Regexp(t, `^cdb top  duroxide/duroxide at http://127\.0\.0\.1:\d+\n`, block, "which container")
		assert.Regexp(t, `(?m)^orchestrator +3 +\d+\.\ds +turns a fetch could take now$`, block, "the queued starts, and how long the oldest waited")
		assert.Regexp(t, `(?m)^worker +0 +- `, block, "an empty queue has no oldest")
		assert.Regexp(t, `(?m)^processes +1 `, block, "the application's process holds a live lease")
		assert.Regexp(t, `(?m)^RU/s +- +0 of 1 processes: rates need 2 renewals$`, block, "its lease renews every 20s")
		assert.Regexp(t, `(?m)^429/s +- +0 of 1 processes: rates need 2 renewals$`, block)
		assert.Contains(t, block, "\napp: from the processes' lease renewals; view: top's own cost")
		for _, line := range strings.Split(block, "\n") {
			assert.LessOrEqual(t, utf8.RuneCountInString(line), 80, "fits 80 columns: %q", line)
		}
	}
	assert.Regexp(t, `(?m)^completed/s +- +Completed\+Failed per second, from sample 2$`, blocks[0], "no rate before a previous sample")
	assert.Regexp(t, `(?m)^view RU/s +- +own: 6 requests`, blocks[0], "5 queries, the completions' left out, and the membership read")
	assert.Regexp(t, `(?m)^completed/s +0\.00 +0 ended \(Completed, Failed\) in 0\.\ds`, blocks[1])
	assert.Regexp(t, `(?m)^view RU/s +\d+\.\d\d +own: 7 requests`, blocks[1], "and the completions' count from the second sample on")
}

func TestBinaryTopWritesAJSONObjectPerSampleAndCountsCompletions(t *testing.T) {
	conn, p := topFixture(t)
	top := startTopJSON(t, conn, "-n", "2", "-interval", "500ms")
	var first topJSONLine
	top.next("the first sample", &first)
	ctx := context.Background()
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	completed := cdb.StatusCompleted
	md := providertest.TestOrchMetadata()
	md.Status = &completed
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID,
		[]cdb.Event{providertest.StartedEvent(item.Instance, cdb.InitialExecutionID)}, nil, nil, md, nil))

	var second topJSONLine
	top.next("the second sample", &second)
	assert.False(t, top.lines.Scan(), "-n 2: two samples")
	top.wait()

	assert.Equal(t, 1, first.Sample)
	assert.Equal(t, 2, second.Sample)
	assert.Equal(t, "duroxide", first.Database)
	assert.Equal(t, "duroxide", first.Container)
	assert.Equal(t, conn[1], first.Endpoint)
	assert.EqualValues(t, 3, first.Orchestrator.Count)
	assert.Greater(t, first.Orchestrator.OldestAgeSeconds, 0.0)
	assert.EqualValues(t, 2, second.Orchestrator.Count, "one start was taken")
	for name, b := range map[string]map[string]float64{"worker_queue": first.Worker, "outbox": first.Outbox, "parked": first.Parked, "poison": first.Poison} {
		assert.Equal(t, map[string]float64{"count": 0, "oldest_age_seconds": 0}, b, name)
	}
	assert.Nil(t, first.Completed, "no previous sample")
	assert.Nil(t, first.CompletedPerSecond)
	assert.Nil(t, first.Seconds)
	assert.Nil(t, first.View.RUPerSecond)
	require.NotNil(t, second.Completed)
	assert.EqualValues(t, 1, *second.Completed, "the instance that completed between the samples")
	require.NotNil(t, second.Seconds)
	require.NotNil(t, second.CompletedPerSecond)
	assert.InDelta(t, 1 / *second.Seconds, *second.CompletedPerSecond, 1e-9)
	assert.InDelta(t, second.Time.Sub(first.Time).Seconds(), *second.Seconds, 1e-9, "over the time between the samples")
	assert.Equal(t, 1, first.LiveProcesses)
	assert.Equal(t, 1, first.Processes.Publishing, "the application's process publishes totals")
	assert.Zero(t, first.Processes.Covered, "one reading: no rate")
	assert.Nil(t, first.Processes.RUPerSecond)
	assert.Nil(t, first.Processes.ThrottlesPerSecond)
	assert.EqualValues(t, 6, first.View.Requests)
	assert.EqualValues(t, 7, second.View.Requests)
	assert.Greater(t, second.View.RequestCharge, 0.0)
	require.NotNil(t, second.View.RUPerSecond)
	require.NotNil(t, second.View.Throttles, "throttles is always there")
	assert.Zero(t, *second.View.Throttles)
}

// The application's RU/s and 429/s are summed over the processes whose
// lease renewals top has seen twice: app-2 renews every third of a second,
// app-1 (the fixture's) every 20 s.
func TestBinaryTopShowsTheProcessesRatesFromTheirLeaseRenewals(t *testing.T) {
	conn, _, acct := topFixtureAccount(t)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), ShortPolling: true,
		ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: "app-2", LeaseDuration: time.Second}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	samples := runTopJSON(t, conn, "-n", "3", "-interval", "800ms")
	require.Len(t, samples, 3)
	last := samples[2]
	assert.Equal(t, 2, last.LiveProcesses)
	assert.Equal(t, 2, last.Processes.Publishing)
	assert.Equal(t, 1, last.Processes.Covered, "app-2 renewed between the samples, app-1 not yet twice")
	require.NotNil(t, last.Processes.RUPerSecond)
	assert.Greater(t, *last.Processes.RUPerSecond, 0.0, "app-2's renewals cost RU")
	require.NotNil(t, last.Processes.ThrottlesPerSecond)
	assert.Zero(t, *last.Processes.ThrottlesPerSecond)
}

func TestBinaryTopExitsWith130OnInterrupt(t *testing.T) {
	conn, _ := topFixture(t)
	cmd := cli(append([]string{"top", "-interval", "100ms"}, conn...)...).command(t)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	startUntilLine(t, cmd, "view RU/s")
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "top runs until interrupted: %v", err)
	assert.Equal(t, 130, exit.ExitCode(), stderr.String())
	assert.Equal(t, "cdb top: interrupted (interrupt)\n", stderr.String())
}

func TestBinaryTopRefusesANonPositiveIntervalAndANegativeCount(t *testing.T) {
	endpoint := closedEndpoint(t) // refused before any connection
	for args, want := range map[[2]string]string{
		{"-interval", "0s"}:  `invalid value "0s" for flag -interval: must be positive, got 0s`,
		{"-interval", "-1s"}: `invalid value "-1s" for flag -interval: must be positive, got -1s`,
		{"-interval", "5"}:   `invalid value "5" for flag -interval: not a duration (e.g. 500ms, 5s, 1m)`,
		{"-n", "-1"}:         `invalid value "-1" for flag -n: must be 0 or more, got -1`,
	} {
		code, stdout, stderr := cli("top", args[0], args[1], "-endpoint", endpoint, "-key", fakeKey).run(t)
		assert.Equal(t, 2, code, "cdb top %v", args)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "cdb top: "+want+"\nusage: cdb top [flags]\n", "cdb top %v", args)
	}
}

// top only looks: it runs no outbox reconciler (which any provider runs
// every 5 s by default), so an interval longer than that costs a sample's
// requests and no more.
func TestBinaryTopSendsOnlyItsSamplesRequests(t *testing.T) {
	conn, _ := topFixture(t)
	samples := runTopJSON(t, conn, "-n", "2", "-interval", "5500ms")
	require.Len(t, samples, 2)
	second := samples[1]
	assert.EqualValues(t, 7, second.View.Requests, "6 queries and the membership read, no reconciliation")
}

// A sample that fails after the first is reported in its place and top
// goes on; the next sample's rates run from the last one that worked.
func TestBinaryTopReportsAFailedSampleAndGoesOn(t *testing.T) {
	conn, _, acct := topFixtureAccount(t)
	top := startTopJSON(t, conn, "-n", "3", "-interval", "300ms")
	var first topJSONLine
	top.next("the first sample", &first)
	acct.InjectFault(cdb.FakeFault{Times: 1, Kind: cdb.FaultStatus, Status: 400 /* not retried */, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "Query" && bytes.Contains(r.Body, []byte("COUNT(1) AS n, MIN(")) // a sample's, not the application's
	}})

	var failed struct {
		Sample int    `json:"sample"`
		Error  string `json:"error"`
	}
	top.next("the failed sample", &failed)
	assert.Equal(t, 2, failed.Sample)
	assert.Contains(t, failed.Error, "400")

	var third topJSONLine
	top.next("the third sample", &third)
	top.wait()
	assert.Equal(t, 3, third.Sample)
	assert.EqualValues(t, 3, third.Orchestrator.Count)
	require.NotNil(t, third.Seconds)
	assert.InDelta(t, third.Time.Sub(first.Time).Seconds(), *third.Seconds, 1e-9, "the rates run from the first sample")
}

// lockedBuffer is a child's stderr that a test may read while the child
// still writes it (a failure message built before the child has exited).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
