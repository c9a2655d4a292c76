package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/cosmoshooks"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// duroxide's later samples: pruning, persistent events, tags, KV, stats,
// plus session affinity and history corruption.

// self_pruning_eternal_orchestration: an eternal continue-as-new loop
// prunes its own old executions through the activity's client.
func TestSampleSelfPruningEternalOrchestration(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		var prunes, pruned atomic.Int64
		h.activity("ProcessBatch", func(_ ActivityContext, batch string) (string, error) { return "Processed batch " + batch, nil })
		h.activity("PruneSelf", func(ctx ActivityContext, _ string) (string, error) {
			res, err := ctx.Client().PruneExecutions(ctx, ctx.InstanceID(), cdb.PruneOptions{KeepLast: ptr(uint32(1))})
			if err != nil {
				return "", err
			}
			prunes.Add(1)
			pruned.Add(int64(res.ExecutionsDeleted))
			return fmt.Sprintf("Pruned %d executions", res.ExecutionsDeleted), nil
		})
		h.orchestration("SelfPruningOrch", func(ctx *OrchestrationContext, input string) (string, error) {
			batch, _ := strconv.Atoi(input)
			if _, err := ctx.ScheduleActivity("ProcessBatch", strconv.Itoa(batch)).Await(); err != nil {
				return "", err
			}
			if _, err := ctx.ScheduleActivity("PruneSelf", "").Await(); err != nil {
				return "", err
			}
			if batch >= 4 {
				return "Completed 5 batches", nil
			}
			return ctx.ContinueAsNew(strconv.Itoa(batch + 1))
		})
		h.run()
		h.start("inst-self-prune", "SelfPruningOrch", "0")
		assert.Equal(t, "Completed 5 batches", h.completed("inst-self-prune"))
		assert.Equal(t, int64(5), prunes.Load())
		assert.GreaterOrEqual(t, pruned.Load(), int64(3))
		executions, err := h.client.ListExecutions(h.ctx, "inst-self-prune")
		require.NoError(t, err)
		assert.Equal(t, []uint64{5}, executions, "only the final execution remains")
	})
}

// config_hot_reload_persistent_events: queued updates are drained between
// work cycles with DequeueEvent raced against a timer; none is lost and
// they keep their order.
func TestSampleConfigHotReloadPersistentEvents(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ApplyConfig", func(_ ActivityContext, config string) (string, error) { return "applied:" + config, nil })
		drain := func(ctx *OrchestrationContext, log *[]string) error {
			for {
				update := ctx.DequeueEvent("ConfigUpdate")
				if ctx.Select(update, ctx.ScheduleTimer(100*time.Millisecond)) == 1 {
					return nil
				}
				config, err := update.Await()
				if err != nil {
					return err
				}
				applied, err := ctx.ScheduleActivity("ApplyConfig", config).Await()
				if err != nil {
					return err
				}
				*log = append(*log, applied)
			}
		}
		h.orchestration("ConfigHotReload", func(ctx *OrchestrationContext, _ string) (string, error) {
			var log []string
			for cycle := range 3 {
				if err := drain(ctx, &log); err != nil {
					return "", err
				}
				if _, err := ctx.ScheduleTimer(300 * time.Millisecond).Await(); err != nil {
					return "", err
				}
				if _, err := ctx.ScheduleActivity("ApplyConfig", fmt.Sprintf("cycle_%d", cycle)).Await(); err != nil {
					return "", err
				}
				log = append(log, fmt.Sprintf("cycle:%d", cycle))
			}
			if err := drain(ctx, &log); err != nil {
				return "", err
			}
			return strings.Join(log, ","), nil
		})
		h.run()
		const id = "inst-hot-reload"
		h.start(id, "ConfigHotReload", "")
		h.waitForHistory(id, hasEvent[cdb.OrchestrationStarted]) // messages for an unstarted instance are orphans
		require.NoError(t, h.client.EnqueueEvent(h.ctx, id, "ConfigUpdate", "v1"))
		require.NoError(t, h.client.EnqueueEvent(h.ctx, id, "ConfigUpdate", "v2"))
		h.waitForHistory(id, func(history []cdb.Event) bool {
			return slices.ContainsFunc(eventsOf[cdb.ActivityScheduled](history), func(a cdb.ActivityScheduled) bool { return a.Input == "cycle_0" })
		})
		require.NoError(t, h.client.EnqueueEvent(h.ctx, id, "ConfigUpdate", "v3"))

		entries := strings.Split(h.completed(id), ",")
		pos := func(entry string) int {
			i := slices.Index(entries, entry)
			require.GreaterOrEqual(t, i, 0, "%s missing from %v", entry, entries)
			return i
		}
		assert.Less(t, pos("applied:v1"), pos("applied:v2"), "FIFO")
		assert.Less(t, pos("applied:v2"), pos("applied:v3"), "FIFO")
		assert.Greater(t, pos("applied:v3"), pos("cycle:0"), "v3 arrived after cycle 0 started")
	})
}

// heterogeneous_workers_with_tags: tagged activities run on workers whose
// filter accepts their tag; tags are kept in history.
func TestSampleHeterogeneousWorkersWithTags(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Render", func(_ ActivityContext, in string) (string, error) { return "rendered:" + in, nil })
		h.activity("Encode", func(_ ActivityContext, in string) (string, error) { return "encoded:" + in, nil })
		h.activity("Upload", func(_ ActivityContext, in string) (string, error) { return "uploaded:" + in, nil })
		h.orchestration("VideoPipeline", func(ctx *OrchestrationContext, _ string) (string, error) {
			rendered, err := ctx.ScheduleActivity("Render", "frame42", WithTag("gpu")).Await()
			if err != nil {
				return "", err
			}
			encoded, err := ctx.ScheduleActivity("Encode", rendered, WithTag("cpu")).Await()
			if err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Upload", encoded).Await()
		})
		filter, err := cdb.DefaultAndFilter("gpu", "cpu")
		require.NoError(t, err)
		h.run(func(o *Options) { o.WorkerTagFilter = filter })
		h.start("video-1", "VideoPipeline", "")
		assert.Equal(t, "uploaded:encoded:rendered:frame42", h.completed("video-1"))

		history := h.waitForHistory("video-1", func([]cdb.Event) bool { return true })
		var tags []*string
		for _, a := range eventsOf[cdb.ActivityScheduled](history) {
			tags = append(tags, a.Tag)
		}
		assert.Equal(t, []*string{ptr("gpu"), ptr("cpu"), nil}, tags)
	})
}

// starvation_safe_tagged_activity: a tagged activity no worker serves is
// raced against a timer, so the orchestration falls back instead of hanging.
func TestSampleStarvationSafeTaggedActivity(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("GpuInference", func(_ ActivityContext, in string) (string, error) { return "inference:" + in, nil })
		h.activity("CpuFallback", func(_ ActivityContext, in string) (string, error) { return "cpu_fallback:" + in, nil })
		h.orchestration("InferenceWithFallback", func(ctx *OrchestrationContext, input string) (string, error) {
			gpu := ctx.ScheduleActivity("GpuInference", input, WithTag("gpu"))
			if ctx.Select(gpu, ctx.ScheduleTimer(200*time.Millisecond)) == 0 {
				return gpu.Await()
			}
			return ctx.ScheduleActivity("CpuFallback", input).Await()
		})
		h.run() // untagged activities only: no GPU worker
		h.start("infer-1", "InferenceWithFallback", "model-v3")
		assert.Equal(t, "cpu_fallback:model-v3", h.completed("infer-1"))

		depths, err := h.client.GetQueueDepths(h.ctx)
		require.NoError(t, err)
		assert.Zero(t, depths.WorkerQueue, "the unserved GPU activity was cancelled with its orchestration")
	})
}

// dual_runtime_tag_cooperation: an orchestrator runtime and a GPU-only
// worker runtime on one store finish an orchestration together.
func TestSampleDualRuntimeTagCooperation(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		var gpuRuns atomic.Int32
		h.activity("PreProcess", func(_ ActivityContext, in string) (string, error) { return "preprocessed:" + in, nil })
		h.activity("GpuTrain", func(_ ActivityContext, in string) (string, error) {
			gpuRuns.Add(1)
			return "trained:" + in, nil
		})
		h.activity("SaveModel", func(_ ActivityContext, in string) (string, error) { return "saved:" + in, nil })
		h.orchestration("MLPipeline", func(ctx *OrchestrationContext, input string) (string, error) {
			pre, err := ctx.ScheduleActivity("PreProcess", input).Await()
			if err != nil {
				return "", err
			}
			model, err := ctx.ScheduleActivity("GpuTrain", pre, WithTag("gpu")).Await()
			if err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("SaveModel", model).Await()
		})
		h.run() // runtime A: orchestrations and untagged activities
		gpuOnly, err := cdb.TagsFilter("gpu")
		require.NoError(t, err)
		h.run(func(o *Options) { o.WorkerOnly, o.WorkerTagFilter = true, gpuOnly }) // runtime B
		h.start("ml-1", "MLPipeline", "dataset-v5")
		assert.Equal(t, "saved:trained:preprocessed:dataset-v5", h.completed("ml-1"))
		assert.Equal(t, int32(1), gpuRuns.Load())
	})
}

// kv_request_response: a server orchestration answers requests raised as
// events by writing responses to its KV store, which clients poll.
func TestSampleKVRequestResponse(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ProcessCommand", func(_ ActivityContext, in string) (string, error) {
			r := []rune(in)
			slices.Reverse(r)
			return string(r), nil
		})
		h.orchestration("RequestServer", func(ctx *OrchestrationContext, _ string) (string, error) {
			ctx.SetKV("status", "ready")
			for range 3 {
				raw, err := ctx.WaitForEvent("request").Await()
				if err != nil {
					return "", err
				}
				var req struct{ OpID, Command string }
				if err := json.Unmarshal([]byte(raw), &req); err != nil {
					return "", err
				}
				ctx.SetKV("status", "processing")
				result, err := ctx.ScheduleActivity("ProcessCommand", req.Command).Await()
				if err != nil {
					result = "error: " + err.Error()
				}
				ctx.SetKV("response:"+req.OpID, result)
				ctx.SetKV("status", "ready")
			}
			ctx.SetKV("status", "shutdown")
			return "served 3 requests", nil
		})
		h.run()
		const id = "req-resp-server"
		h.start(id, "RequestServer", "")
		status, err := h.client.WaitForKVValue(h.ctx, id, "status", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "ready", status)
		for _, req := range []struct{ op, cmd, want string }{{"op-1", "hello", "olleh"}, {"op-2", "world", "dlrow"}, {"op-3", "rust", "tsur"}} {
			// Each request is raised once the server waits for it, as in
			// duroxide's sample, where an event raised with no
			// subscription waiting is not delivered.
			h.waitForHistory(id, func(history []cdb.Event) bool {
				return len(eventsOf[cdb.ExternalSubscribed](history)) > len(eventsOf[cdb.ExternalEvent](history))
			})
			data, _ := json.Marshal(map[string]string{"OpID": req.op, "Command": req.cmd})
			require.NoError(t, h.client.RaiseEvent(h.ctx, id, "request", string(data)))
			got, err := h.client.WaitForKVValue(h.ctx, id, "response:"+req.op, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, req.want, got)
		}
		assert.Equal(t, "served 3 requests", h.completed(id))
		all, err := h.client.GetKVAllValues(h.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"status": "shutdown", "response:op-1": "olleh", "response:op-2": "dlrow", "response:op-3": "tsur"}, all)
	})
}

// kv_cross_orchestration_read: one orchestration reads another's KV store
// through the get_kv_value system activity.
func TestSampleKVCrossOrchestrationRead(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ComputeResult", func(_ ActivityContext, in string) (string, error) {
			n, err := strconv.Atoi(in)
			return strconv.Itoa(n * n), err
		})
		h.orchestration("Producer", func(ctx *OrchestrationContext, input string) (string, error) {
			ctx.SetKV("status", "computing")
			squared, err := ctx.ScheduleActivity("ComputeResult", input).Await()
			if err != nil {
				return "", err
			}
			ctx.SetKV("result", squared)
			ctx.SetKV("status", "done")
			if _, err := ctx.WaitForEvent("ack").Await(); err != nil {
				return "", err
			}
			return "produced:" + squared, nil
		})
		h.orchestration("Consumer", func(ctx *OrchestrationContext, producer string) (string, error) {
			for attempt := 0; ; attempt++ {
				status, _, err := ctx.GetKVFromInstance(producer, "status")
				if err != nil {
					return "", err
				}
				if status == "done" {
					break
				}
				if attempt > 20 {
					return "", fmt.Errorf("producer never finished")
				}
				if _, err := ctx.ScheduleTimer(100 * time.Millisecond).Await(); err != nil {
					return "", err
				}
			}
			result, found, err := ctx.GetKVFromInstance(producer, "result")
			if err != nil || !found {
				return "", fmt.Errorf("result key missing: %v", err)
			}
			return "consumed:" + result, nil
		})
		h.run()
		h.start("producer-1", "Producer", "7")
		result, err := h.client.WaitForKVValue(h.ctx, "producer-1", "result", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "49", result)
		h.start("consumer-1", "Consumer", "producer-1")
		assert.Equal(t, "consumed:49", h.completed("consumer-1"))

		h.waitForHistory("producer-1", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "producer-1", "ack", ""))
		assert.Equal(t, "produced:49", h.completed("producer-1"))
		v, found, err := h.client.GetKVValue(h.ctx, "producer-1", "status")
		require.NoError(t, err)
		assert.True(t, found)
		assert.Equal(t, "done", v)
	})
}

// kv_read_modify_write_counter: a counter read and written across turns
// replays deterministically (the snapshot excludes the current execution).
func TestSampleKVReadModifyWriteCounter(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("ProcessBatch", func(_ ActivityContext, batch string) (string, error) { return "processed:" + batch, nil })
		h.orchestration("BatchProcessor", func(ctx *OrchestrationContext, _ string) (string, error) {
			for _, batch := range []string{"alpha", "beta", "gamma"} {
				processed, ok := ctx.GetKV("batches_processed")
				if !ok {
					processed = "0"
				}
				count, _ := strconv.Atoi(processed)
				result, err := ctx.ScheduleActivity("ProcessBatch", batch).Await()
				if err != nil {
					return "", err
				}
				ctx.SetKV("batches_processed", strconv.Itoa(count+1))
				ctx.SetKV("last_result", result)
			}
			v, _ := ctx.GetKV("batches_processed")
			return v, nil
		})
		h.run()
		h.start("batch-proc", "BatchProcessor", "")
		assert.Equal(t, "3", h.completed("batch-proc"))
		for key, want := range map[string]string{"batches_processed": "3", "last_result": "processed:gamma"} {
			v, found, err := h.client.GetKVValue(h.ctx, "batch-proc", key)
			require.NoError(t, err)
			assert.True(t, found, key)
			assert.Equal(t, want, v, key)
		}
	})
}

// orchestration_stats: the client reports an instance's history and KV
// sizes; nil for an unknown instance.
func TestSampleOrchestrationStats(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Work", func(_ ActivityContext, in string) (string, error) { return in, nil })
		h.orchestration("Stats", func(ctx *OrchestrationContext, _ string) (string, error) {
			ctx.SetKV("a", "12345")
			ctx.SetKV("b", "678")
			return ctx.ScheduleActivity("Work", "x").Await()
		})
		h.run()
		stats, err := h.client.GetOrchestrationStats(h.ctx, "nobody")
		require.NoError(t, err)
		assert.Nil(t, stats)

		h.start("stats-1", "Stats", "")
		h.completed("stats-1")
		stats, err = h.client.GetOrchestrationStats(h.ctx, "stats-1")
		require.NoError(t, err)
		require.NotNil(t, stats)
		history := h.waitForHistory("stats-1", func([]cdb.Event) bool { return true })
		assert.Equal(t, uint64(len(history)), stats.HistoryEventCount)
		assert.Positive(t, stats.HistorySizeBytes)
		assert.Equal(t, uint64(2), stats.KVUserKeyCount)
		assert.Equal(t, uint64(8), stats.KVTotalValueBytes)
	})
}

// Sessions: activities on one session run on the worker that owns it. The
// first activity of each session holds its slot until the third slot, free,
// has polled the queue (which then holds both sessions' other activities)
// and come back empty: a worker free to take another's session had the
// chance, however slowly the machine schedules it.
func TestSessionActivitiesStayOnOneWorker(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		watch := &emptyFetchWatch{Provider: h.provider, seen: make(chan struct{})}
		h.provider = watch
		var mu sync.Mutex
		workers := map[string]map[string]bool{} // session → workers that ran it
		h.activity("Pinned", func(ctx ActivityContext, _ string) (string, error) {
			mu.Lock()
			first := workers[ctx.SessionID()] == nil
			if first {
				workers[ctx.SessionID()] = map[string]bool{}
			}
			workers[ctx.SessionID()][ctx.WorkerID()] = true
			if first && len(workers) == 2 {
				watch.arm() // both sessions hold a slot
			}
			mu.Unlock()
			if first {
				select {
				case <-watch.seen:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return ctx.SessionID(), nil
		})
		h.orchestration("Sessions", func(ctx *OrchestrationContext, _ string) (string, error) {
			var futures []*Future
			for i := range 8 {
				session := []string{"s1", "s2"}[i%2]
				futures = append(futures, ctx.ScheduleActivity("Pinned", strconv.Itoa(i), WithSession(session)))
			}
			for _, r := range ctx.Join(futures...) {
				if r.Err != nil {
					return "", r.Err
				}
			}
			return "ok", nil
		})
		h.run(func(o *Options) { o.WorkerConcurrency = 3 })
		h.start("sessions-1", "Sessions", "")
		assert.Equal(t, "ok", h.completed("sessions-1"))
		mu.Lock()
		defer mu.Unlock()
		for _, s := range []string{"s1", "s2"} {
			assert.Len(t, workers[s], 1, "session %s ran on %v", s, workers[s])
		}
	})
}

// emptyFetchWatch closes seen when a worker fetch that began after arm
// returns no work.
type emptyFetchWatch struct {
	cdb.Provider
	armed atomic.Bool
	once  sync.Once
	seen  chan struct{}
}

func (p *emptyFetchWatch) arm() { p.armed.Store(true) }

func (p *emptyFetchWatch) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	armed := p.armed.Load()
	item, token, attempt, err := p.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
	if armed && item == nil && err == nil {
		p.once.Do(func() { close(p.seen) })
	}
	return item, token, attempt, err
}

// Corrupted history: an instance whose history cannot be decoded is
// abandoned until its attempts run out, then failed as poison with
// duroxide's sentinel event; on every provider, each corrupted by its own
// test hook. Not run as a sample (eachSample): a history that cannot be
// read is not replayed.
func TestCorruptedHistoryIsPoisoned(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Waits", func(ctx *OrchestrationContext, _ string) (string, error) {
			return ctx.WaitForEvent("go").Await()
		})
		h.run(func(o *Options) { o.MaxAttempts = 1 })
		h.start("corrupt", "Waits", "")
		h.waitForHistory("corrupt", hasEvent[cdb.ExternalSubscribed])
		corruptHistory(h.ctx, t, h.provider, "corrupt")
		require.NoError(t, h.client.RaiseEvent(h.ctx, "corrupt", "go", ""))

		var info cdb.InstanceInfo
		require.NoError(t, poll(h.ctx, time.Minute, func() (bool, error) {
			var err error
			info, err = h.client.GetInstanceInfo(h.ctx, "corrupt")
			return err == nil && info.Status == statusFailed, err
		}))
		require.NotNil(t, info.Output)
		assert.Contains(t, *info.Output, "history deserialization failed")
	})
}

// corruptHistory makes the stored history of instance undecodable through
// p's test hook: the in-memory provider's own, or cosmoshooks for a
// Cosmos DB provider.
func corruptHistory(ctx context.Context, t *testing.T, p cdb.Provider, instance string) {
	t.Helper()
	if mem, ok := p.(*memprovider.Provider); ok {
		mem.CorruptInstanceHistory(instance)
		return
	}
	require.NoError(t, cosmoshooks.CorruptInstanceHistory(ctx, p, instance))
}

// A shop's order, every shape at once, as the replay check after each
// sample meets it (eachSample): a card charge that fails twice under a
// retry policy (its backoff timers), an approval event raised while the
// order waits on a timer, shipping as a child, a nightly loop continued as
// new, and a custom status set in the turn that ends each execution.
func TestSampleOrderEveryShape(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		var charges atomic.Int32
		h.activity("Charge", func(_ ActivityContext, order string) (string, error) {
			if charges.Add(1) <= 2 {
				return "", errors.New("card declined")
			}
			return "charged " + order, nil
		})
		h.activity("Ship", func(_ ActivityContext, order string) (string, error) { return "shipped " + order, nil })
		h.orchestration("Shipping", func(ctx *OrchestrationContext, order string) (string, error) {
			return ctx.ScheduleActivity("Ship", order).Await()
		})
		h.orchestration("Order", func(ctx *OrchestrationContext, input string) (string, error) {
			night, order, _ := strings.Cut(input, ":")
			if night == "0" {
				policy := RetryPolicy{MaxAttempts: 5, FirstInterval: 10 * time.Millisecond, BackoffCoefficient: 2, MaxInterval: time.Second}
				if _, err := ctx.ScheduleActivity("Charge", order, WithRetry(policy)).Await(); err != nil {
					return "", err
				}
				approval := ctx.WaitForEvent("approve")
				if ctx.Select(approval, ctx.ScheduleTimer(time.Hour)) != 0 {
					return "", errors.New("not approved")
				}
				status := "approved"
				ctx.SetCustomStatus(&status)
				return ctx.ContinueAsNew("1:" + order)
			}
			shipped, err := ctx.ScheduleSubOrchestration("Shipping", order).Await()
			if err != nil {
				return "", err
			}
			status := "done"
			ctx.SetCustomStatus(&status)
			return shipped, nil
		})
		h.run()
		h.start("inst-sample-order", "Order", "0:42")
		h.waitForHistory("inst-sample-order", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "inst-sample-order", "approve", "yes"))
		assert.Equal(t, "shipped 42", h.completed("inst-sample-order"))
		assert.EqualValues(t, 3, charges.Load())
	})
}
