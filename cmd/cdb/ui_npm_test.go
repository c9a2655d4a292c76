package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/internal/cosmostest"
)

// On @vercel/cosmosdb-server (through the test suite's workarounds for its
// bugs, as the library's own npm tests) the UI's list, filters and counts,
// an instance's page, its raw history, the live samples and the actions
// work, with a runtime running what they start and raise: the provider's
// fallbacks for the queries that server lacks are the UI's too.
func TestUIOnTheNPMServer(t *testing.T) {
	if os.Getenv(cosmostest.ServerCLIEnv) == "" {
		t.Skip("no @vercel/cosmosdb-server: set " + cosmostest.ServerCLIEnv + " (make test does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	server, err := cosmostest.StartNPMServerFromEnv(ctx)
	require.NoError(t, err)
	defer server.Stop()
	env := cosmostest.NPMTarget(server.Endpoint).Open(t)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: env.Client, Database: env.NewDatabase(t), PollInterval: 20 * time.Millisecond, GaugeInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	reg := greeterRegistry(t, "Hello")
	require.NoError(t, reg.RegisterOrchestration("Waiter", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		return ctx.WaitForEvent("go").Await()
	}))
	rt, err := durable.Start(ctx, p, reg, durable.Options{MinPollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer func() { _ = rt.Shutdown(ctx) }()
	client := rt.Client()
	require.NoError(t, client.StartOrchestration(ctx, "greet", "Greeter", "Ada"))
	_, err = client.WaitForCompletion(ctx, "greet", time.Minute)
	require.NoError(t, err)
	for _, id := range []string{"waiter-a", "waiter-b"} {
		require.NoError(t, client.StartOrchestration(ctx, id, "Waiter", ""))
	}
	require.Eventually(t, func() bool {
		m, err := p.GetSystemMetrics(ctx)
		return err == nil && m.RunningInstances == 2
	}, time.Minute, 50*time.Millisecond, "both waiters running")

	s, err := newUIServer(p, server.Endpoint, uiOptions{addr: "127.0.0.1:8080"}, os.Stderr)
	require.NoError(t, err)
	h := s.routes()

	page := get(t, h, "/", http.StatusOK)
	assert.Contains(t, page, "total <b>3</b>")
	assert.Contains(t, page, "running <b>2</b>")
	assert.Contains(t, page, "completed <b>1</b>")
	assert.Equal(t, []string{"greet"}, listedIDs(get(t, h, "/?status=Completed", http.StatusOK)))
	assert.Equal(t, []string{"greet"}, listedIDs(get(t, h, "/?name=Greet*", http.StatusOK)))
	assert.ElementsMatch(t, []string{"waiter-a", "waiter-b"}, listedIDs(get(t, h, "/?id=waiter-", http.StatusOK)))
	first := get(t, h, "/?limit=2", http.StatusOK)
	assert.Len(t, listedIDs(first), 2)
	assert.Contains(t, first, `/?after=`, "a next page, by the store's continuation")

	page = get(t, h, "/instance?id=greet", http.StatusOK)
	assert.Contains(t, page, `<pre class="value output">Hello Ada</pre>`)
	assert.Contains(t, page, `<g class="row activity ok" data-event-id="2" data-kind="activity">`)
	var history []cdb.Event
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/instance/history.json?id=greet", http.StatusOK)), &history))
	assert.Len(t, history, 4)
	var live struct{ Samples []topSample }
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &live))
	require.Len(t, live.Samples, 1)
	assert.Equal(t, uint64(0), live.Samples[0].Orchestrator.Count)

	w := confirmAndPost(t, h, "raise", "waiter-a", url.Values{"event": {"go"}, "data": {`"hi"`}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	st, err := client.WaitForCompletion(ctx, "waiter-a", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, `"hi"`, st.Output)
	w = confirmAndPost(t, h, "cancel", "waiter-b", nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	_, err = client.WaitForCompletion(ctx, "waiter-b", time.Minute)
	require.NoError(t, err)
	assert.Contains(t, get(t, h, "/instance?id=waiter-b", http.StatusOK), "canceled: canceled with cdb ui")
	w = confirmAndPost(t, h, "start", "greet-2", url.Values{"name": {"Greeter"}, "input": {`Bo`}, "raw": {"on"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	st, err = client.WaitForCompletion(ctx, "greet-2", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "Hello Bo", st.Output)
	s.live.taken = time.Time{} // the next request samples at once
	var later struct{ Samples []uiSample }
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &later))
	require.Len(t, later.Samples, 2)
	assert.Equal(t, 3, later.Samples[1].Ended, "the instances that ended since the first sample, by QueryInstances' EndedAfter")
	require.NotNil(t, later.Samples[1].ActivityLatency)
	assert.Equal(t, 1, later.Samples[1].ActivityLatency.Count, "greet-2's activity")

	w = confirmAndPost(t, h, "delete", "greet", nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	get(t, h, "/instance?id=greet", http.StatusNotFound)
}

// listedIDs are the instance ids a list page links to, in its order.
func listedIDs(page string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<td><a href="/instance\?id=([^"]*)">`).FindAllStringSubmatch(page, -1) {
		id, _ := url.QueryUnescape(m[1])
		ids = append(ids, id)
	}
	return ids
}
