package durable

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Histories recorded by earlier versions of this runtime must replay
// identically on this one: an execution keeps the rules of the version that
// started it (its OrchestrationStarted stamp), whatever the runtime that
// replays it. testdata/recorded holds, per version, the histories of the
// workloads below as that version's runtime wrote them; the test replays
// each execution over its history and requires the outcome it recorded and
// not one event more. `go test -run TestRecordedHistoriesReplayIdentically
// -record` writes the corpus of the running version (DuroxideVersion).

var flagRecord = flag.Bool("record", false, "write testdata/recorded/<DuroxideVersion>/ from the recorded workloads instead of replaying")

// recordedWorkload is an orchestration the corpus records, and how a run
// of it is driven from outside (events raised once it waits for them).
type recordedWorkload struct {
	name  string
	fn    OrchestrationFunc
	input string
	drive func(t *testing.T, h *harness, instance string)
}

func noteActivity(_ ActivityContext, in string) (string, error) { return "noted:" + in, nil }

// recordedWorkloads cover what the versions' rules differ on: sequences
// and fan-outs of activities, timers, external events and queue messages
// racing timers (duroxide 0.1.31's queue-race rules), sub-orchestrations
// and the ids of children scheduled after a continue-as-new (0.1.30), a
// continue-as-new carrying unread messages, and an event raised before its
// wait (buffered from 0.1.32+cdb.1).
func recordedWorkloads() []recordedWorkload {
	return []recordedWorkload{
		{name: "RecChain", input: "a", fn: func(ctx *OrchestrationContext, in string) (string, error) {
			for range 3 {
				out, err := ctx.ScheduleActivity("Note", in).Await()
				if err != nil {
					return "", err
				}
				in = out
			}
			return in, nil
		}},
		{name: "RecFanOut", input: "b", fn: func(ctx *OrchestrationContext, in string) (string, error) {
			futures := make([]*Future, 4)
			for i := range futures {
				futures[i] = ctx.ScheduleActivity("Note", fmt.Sprintf("%s%d", in, i))
			}
			var outs []string
			for _, r := range ctx.Join(futures...) {
				outs = append(outs, r.Value)
			}
			return strings.Join(outs, ","), nil
		}},
		{name: "RecEventRace", fn: func(ctx *OrchestrationContext, _ string) (string, error) {
			wait := ctx.WaitForEvent("go")
			if ctx.Select(wait, ctx.ScheduleTimer(time.Hour)) == 0 {
				return wait.Await()
			}
			return "timeout", nil
		}, drive: func(t *testing.T, h *harness, instance string) {
			h.waitForHistory(instance, hasEvent[cdb.ExternalSubscribed])
			require.NoError(t, h.client.RaiseEvent(h.ctx, instance, "go", "went"))
		}},
		{name: "RecQueueRace", fn: func(ctx *OrchestrationContext, _ string) (string, error) {
			first, second := ctx.DequeueEvent("q"), ctx.DequeueEvent("q")
			t0, t1 := ctx.ScheduleTimer(50*time.Millisecond), ctx.ScheduleTimer(1500*time.Millisecond)
			ctx.Select(first, t0)
			if ctx.Select(second, t1) == 0 {
				return second.Await()
			}
			return "second-timeout", nil
		}, drive: func(t *testing.T, h *harness, instance string) {
			h.waitForHistory(instance, hasEvent[cdb.TimerFired])
			require.NoError(t, h.client.EnqueueEvent(h.ctx, instance, "q", "m"))
		}},
		{name: "RecEarlyEvent", fn: func(ctx *OrchestrationContext, _ string) (string, error) {
			if _, err := ctx.ScheduleTimer(time.Second).Await(); err != nil {
				return "", err
			}
			approval, err := ctx.WaitForEvent("approve", WithEventTimeout(time.Hour)).Await()
			return "approved:" + approval, err
		}, drive: func(t *testing.T, h *harness, instance string) {
			h.waitForHistory(instance, hasEvent[cdb.TimerCreated])
			require.NoError(t, h.client.RaiseEvent(h.ctx, instance, "approve", "alice"))
		}},
		{name: "RecParent", input: "x", fn: func(ctx *OrchestrationContext, in string) (string, error) {
			out, err := ctx.ScheduleSubOrchestration("RecChild", in).Await()
			if err != nil || len(in) >= 2 {
				return out, err
			}
			return ctx.ContinueAsNew(in + "x")
		}},
		{name: "RecChild", fn: func(_ *OrchestrationContext, in string) (string, error) { return "child:" + in, nil }},
		{name: "RecInbox", input: "0", fn: func(ctx *OrchestrationContext, in string) (string, error) {
			got, err := ctx.DequeueEvent("q").Await()
			if err != nil {
				return "", err
			}
			if in == "0" {
				return ctx.ContinueAsNew(got)
			}
			return in + "," + got, nil
		}, drive: func(t *testing.T, h *harness, instance string) {
			for _, m := range []string{"m1", "m2", "m3"} {
				require.NoError(t, h.client.EnqueueEvent(h.ctx, instance, "q", m))
			}
		}},
	}
}

// recordedInstance is one instance's executions as the corpus keeps them.
type recordedInstance struct {
	Instance   string                 `json:"instance"`
	Executions map[uint64][]cdb.Event `json:"executions"`
}

func recordedDir(version string) string { return filepath.Join("testdata", "recorded", version) }

func TestRecordedHistoriesReplayIdentically(t *testing.T) {
	workloads := recordedWorkloads()
	if *flagRecord {
		recordCorpus(t, workloads)
		return
	}
	fns := map[string]OrchestrationFunc{"Competition": competition}
	for _, w := range workloads {
		fns[w.name] = w.fn
	}
	versions, err := os.ReadDir(filepath.Join("testdata", "recorded"))
	require.NoError(t, err)
	require.NotEmpty(t, versions, "no recorded corpus")
	for _, v := range versions {
		files, err := filepath.Glob(filepath.Join(recordedDir(v.Name()), "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "version %s has no recorded histories", v.Name())
		for _, file := range files {
			t.Run(v.Name()+"/"+filepath.Base(file), func(t *testing.T) {
				replayRecorded(t, file, fns)
			})
		}
	}
}

// replayRecorded replays every execution of a recorded instance over its
// history without its terminal event: the code must decide what it
// decided then and append nothing.
func replayRecorded(t *testing.T, file string, fns map[string]OrchestrationFunc) {
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var rec recordedInstance
	require.NoError(t, json.Unmarshal(raw, &rec))
	require.NotEmpty(t, rec.Executions)
	for exec, history := range rec.Executions {
		started, ok := history[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok, "execution %d begins with its start", exec)
		fn, ok := fns[started.Name]
		require.True(t, ok, "no workload named %s", started.Name)
		want, ended := outcomeOf(history[len(history)-1])
		require.True(t, ended, "execution %d of %s ended", exec, rec.Instance)
		got, err := Replay(context.Background(), rec.Instance, exec, history[:len(history)-1], nil, fn)
		require.NoError(t, err)
		assert.Empty(t, got.Delta, "execution %d of %s: replay appended history", exec, rec.Instance)
		assert.Equal(t, want, withoutDelta(got), "execution %d of %s decides as recorded", exec, rec.Instance)
	}
}

// recordCorpus runs every workload on the in-memory provider with this
// runtime and writes each instance's executions (children's too).
func recordCorpus(t *testing.T, workloads []recordedWorkload) {
	h := newHarness(t, memprovider.New(memprovider.Options{LongPolling: true}))
	h.activity("Note", noteActivity)
	for _, w := range workloads {
		h.orchestration(w.name, w.fn)
	}
	h.run()
	dir := recordedDir(DuroxideVersion)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, w := range workloads {
		if w.name == "RecChild" {
			continue // started by RecParent
		}
		instance := strings.ToLower(w.name)
		h.start(instance, w.name, w.input)
		if w.drive != nil {
			w.drive(t, h, instance)
		}
		h.completed(instance)
	}
	instances, err := h.client.ListInstances(h.ctx)
	require.NoError(t, err)
	sort.Strings(instances)
	for _, instance := range instances {
		rec := recordedInstance{Instance: instance, Executions: map[uint64][]cdb.Event{}}
		executions, err := h.client.ListExecutions(h.ctx, instance)
		require.NoError(t, err)
		for _, exec := range executions {
			history, err := h.client.ReadExecutionHistory(h.ctx, instance, exec)
			require.NoError(t, err)
			rec.Executions[exec] = history
		}
		out, err := json.MarshalIndent(rec, "", "  ")
		require.NoError(t, err)
		name := strings.NewReplacer(":", "_", "/", "_").Replace(instance) + ".json"
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), append(out, '\n'), 0o644))
	}
	recordCompetition(t, dir)
	t.Logf("recorded %d instances and the competition into %s", len(instances), dir)
}

// recordCompetition records the queue race the versions decide apart
// (queue_race_test.go's competition: the first timer, a message and the
// second timer in one batch), turn by turn through this runtime's engine,
// since a live run cannot make the three arrive together at will.
func recordCompetition(t *testing.T, dir string) {
	history, second := raceBetweenTimers(t, "competition", "Competition", DuroxideVersion, competition,
		cdb.QueueEventMessage{Instance: "competition", Name: "q", Data: "first"})
	require.Equal(t, StateCompleted, second.State)
	history = append(history, second.Delta...)
	end := newEvent("competition", 1, history[len(history)-1].EventID+1, nil, 0, cdb.OrchestrationCompleted{Output: second.Output})
	end.DuroxideVersion = DuroxideVersion
	out, err := json.MarshalIndent(recordedInstance{Instance: "competition", Executions: map[uint64][]cdb.Event{1: append(history, end)}}, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "competition.json"), append(out, '\n'), 0o644))
}
