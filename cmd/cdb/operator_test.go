package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// fixture is a fake account served over HTTP.
type fixture struct {
	endpoint string
	account  *cdb.FakeAccount
}

// instances lists the instances in a container of the fixture's account.
func (fx fixture) instances(t *testing.T, container string) []string {
	t.Helper()
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: fx.account.Client(), Container: container, SkipBootstrap: true, ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	ids, err := p.ListInstances(context.Background())
	require.NoError(t, err)
	return ids
}

// operatorFixture serves a fake account over HTTP, with two instances in the
// provider's default container: "done" (completed, with KV and a custom
// status) and "busy" (running).
func operatorFixture(t *testing.T) (fx fixture, key string) {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	srv := httptest.NewServer(acct.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	providertest.CreateInstance(ctx, t, p, "busy")
	providertest.CreateInstance(ctx, t, p, "done")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "done", Name: "go", Data: "{}"}, 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	status, output, custom := cdb.StatusCompleted, "all good", "shipped"
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{
		{EventID: 2, InstanceID: "done", ExecutionID: 1, Kind: cdb.KeyValueSet{Key: "color", Value: "blue"}},
		{EventID: 3, InstanceID: "done", ExecutionID: 1, Kind: cdb.CustomStatusUpdated{Status: &custom}},
		{EventID: 4, InstanceID: "done", ExecutionID: 1, Kind: cdb.OrchestrationCompleted{Output: output}},
	}, nil, nil, cdb.ExecutionMetadata{Status: &status, Output: &output}, nil))
	return fixture{endpoint: srv.URL, account: acct}, acct.Key()
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestInstancesListsAndFiltersByStatus(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint
	code, out, stderr := runCLI("instances", "-endpoint", endpoint, "-key", key)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "done")
	assert.Contains(t, out, "busy")
	assert.Contains(t, out, "TestOrch@1.0.0")

	code, out, _ = runCLI("instances", "-endpoint", endpoint, "-key", key, "-status", "Completed")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "done")
	assert.NotContains(t, out, "busy")
}

func TestShowPrintsInfoTimelineCustomStatusAndKV(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint
	code, out, stderr := runCLI("show", "-endpoint", endpoint, "-key", key, "done")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"status     Completed", "output all good", "custom     shipped", "OrchestrationStarted", "KeyValueSet", "color=blue", "OrchestrationCompleted", "color = blue", "#1 Completed"} {
		assert.Contains(t, out, want)
	}
}

func TestMetricsReportsCountsAndQueues(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint
	code, out, stderr := runCLI("metrics", "-endpoint", endpoint, "-key", key)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "instances   2 (running 1, completed 1, failed 0)")
}

// Messages parked for a start that has not come are reported with the
// oldest's enqueue time, in text and in JSON.
func TestMetricsReportsParkedMessages(t *testing.T) {
	fx, key := operatorFixture(t)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: fx.account.Client(), SkipBootstrap: true, ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()
	raised := time.Now()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "mistyped", Name: "go", Data: "{}"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "parked until a start comes")

	code, out, stderr := runCLI("metrics", "-endpoint", fx.endpoint, "-key", key)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `held        parked 1 \(oldest \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\), poison 0 `, out)

	code, out, stderr = runCLI("metrics", "-endpoint", fx.endpoint, "-key", key, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var m struct {
		Parked       uint64 `json:"parked_messages"`
		OldestParked string `json:"oldest_parked"`
		Poison       uint64 `json:"poison_messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	assert.EqualValues(t, 1, m.Parked)
	assert.Zero(t, m.Poison)
	oldest, err := time.Parse(time.RFC3339, m.OldestParked)
	require.NoError(t, err)
	assert.WithinDuration(t, raised, oldest, time.Second, "the oldest is when the event was raised")
}

func TestDeleteRefusesARunningInstanceWithoutForce(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint
	code, _, stderr := runCLI("delete", "-endpoint", endpoint, "-key", key, "busy")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "force")
	code, out, stderr := runCLI("delete", "-endpoint", endpoint, "-key", key, "-force", "busy")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "deleted 1 instance(s)")
	code, _, stderr = runCLI("show", "-endpoint", endpoint, "-key", key, "busy")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `instance "busy" not found`)
}

func TestPruneKeepsTheCurrentExecution(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint
	code, out, stderr := runCLI("prune", "-endpoint", endpoint, "-key", key, "done")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "pruned 0 execution(s)")
}

func TestOperatorCommandsExplainConnectionMistakes(t *testing.T) {
	fx, key := operatorFixture(t)
	endpoint := fx.endpoint

	code, _, stderr := runCLI("instances", "-endpoint", endpoint, "-key", "dGhpcyBpcyBub3QgdGhlIGtleSB0aGUgZW11bGF0b3IgdXNlcw==")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "refused the request's signature (401 Unauthorized): the key or this machine's clock is wrong")
	assert.NotContains(t, stderr, "dGhpcyBpcyBub3Qg", "the key never appears in errors")

	code, _, stderr = runCLI("instances", "-endpoint", endpoint, "-key", key, "-container", "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `container "nope" not found in database "duroxide"`)

	code, _, stderr = runCLI("instances", "-endpoint", endpoint, "-key", key, "-database", "nodb")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `database "nodb" not found`, "a missing database is named as such")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	code, _, stderr = runCLI("metrics", "-endpoint", closed, "-key", key)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot reach "+closed)

	code, _, stderr = runCLI("show", "-endpoint", endpoint, "-key", key, "nobody")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `instance "nobody" not found`)

	t.Setenv("COSMOS_ENDPOINT", "")
	code, _, stderr = runCLI("metrics")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "no endpoint")
}

// A failed instance keeps its error where a completed one keeps its
// output: show names it an error, not an output.
func TestShowNamesAFailedInstancesOutputItsError(t *testing.T) {
	declined := "card declined"
	var out bytes.Buffer
	printInstance(&out, showJSON{instanceJSON: instanceJSON{InstanceID: "order-1", Status: "Failed", Output: &declined}})
	assert.Contains(t, out.String(), "status     Failed  error card declined\n")
	assert.NotContains(t, out.String(), "output")

	out.Reset()
	shipped := "shipped"
	printInstance(&out, showJSON{instanceJSON: instanceJSON{InstanceID: "order-2", Status: "Completed", Output: &shipped}})
	assert.Contains(t, out.String(), "status     Completed  output shipped\n")
}

// metrics counts as its queues what top does, the work a fetch could take
// now; a message not due for an hour is counted apart, as not due.
func TestMetricsAndTopCountTheSameQueues(t *testing.T) {
	fx, key := operatorFixture(t)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: fx.account.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.EnqueueForOrchestrator(context.Background(), cdb.ExternalRaisedMessage{Instance: "busy", Name: "later", Data: "{}"}, time.Hour))

	code, out, stderr := runCLI("metrics", "-endpoint", fx.endpoint, "-key", key, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var metrics metricsJSON
	require.NoError(t, json.Unmarshal([]byte(out), &metrics), out)
	code, out, stderr = runCLI("top", "-endpoint", fx.endpoint, "-key", key, "-o", "json", "-n", "1")
	require.Equal(t, 0, code, stderr)
	var top topSample
	require.NoError(t, json.Unmarshal([]byte(out), &top), out)

	assert.Equal(t, top.Orchestrator.Count, uint64(metrics.OrchestratorQueue), "the orchestrator queue")
	assert.Equal(t, top.Worker.Count, uint64(metrics.WorkerQueue), "the worker queue")
	assert.Equal(t, 1, metrics.OrchestratorNotDue, "the message due in an hour")

	code, out, stderr = runCLI("metrics", "-endpoint", fx.endpoint, "-key", key)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, fmt.Sprintf("queues      orchestrator %d, worker %d (due: what a fetch could take now)\n", metrics.OrchestratorQueue, metrics.WorkerQueue))
	assert.Contains(t, out, "not due     orchestrator 1, worker 0 (timers, retries, parked: later)\n")
}
