package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// greeter is a workflow of one activity; greeting names it.
func greeter(greeting string) durable.OrchestrationFunc {
	return func(ctx *durable.OrchestrationContext, name string) (string, error) {
		return ctx.ScheduleActivity(greeting, name).Await()
	}
}

func greeterRegistry(t *testing.T, greeting string) *durable.Registry {
	r := durable.NewRegistry()
	require.NoError(t, r.RegisterOrchestration("Greeter", greeter(greeting)))
	require.NoError(t, r.RegisterActivity(greeting, func(_ durable.ActivityContext, name string) (string, error) {
		return greeting + " " + name, nil
	}))
	return r
}

// What `cdb show -o json` writes is what durable.Replayer.ReplayFile
// reads: the same code replays it clean, changed code diverges at the
// recorded schedule.
func TestShowJSONReplaysWithTheReplayer(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	rt, err := durable.Start(ctx, p, greeterRegistry(t, "Hello"), durable.Options{MinPollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, rt.Client().StartOrchestration(ctx, "greet", "Greeter", "Ada"))
	st, err := rt.Client().WaitForCompletion(ctx, "greet", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "Hello Ada", st.Output)
	require.NoError(t, rt.Shutdown(ctx))

	shown, err := readInstance(ctx, p, "greet")
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, writeJSON(&out, shown))
	path := filepath.Join(t.TempDir(), "greet.json")
	require.NoError(t, os.WriteFile(path, out.Bytes(), 0o600))

	require.NoError(t, durable.NewReplayer(greeterRegistry(t, "Hello")).ReplayFile(ctx, path))
	err = durable.NewReplayer(greeterRegistry(t, "Bonjour")).ReplayFile(ctx, path)
	var d *durable.DivergenceError
	require.ErrorAs(t, err, &d)
	assert.Equal(t, 1, d.EventIndex)
	assert.Equal(t, `activity "Hello"`, d.Expected)
	assert.Equal(t, `activity "Bonjour"`, d.Actual)
}
