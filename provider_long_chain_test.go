package cdb_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/providertest"
)

// Long sequences (rule R18): a sequential orchestration runs turn after
// chained turn, each token derived from the last; every token and every
// document id derived from one stays bounded however long it runs.

// maxDerivedTokenLength bounds every lock token this provider writes, a
// chain's of any depth included.
const maxDerivedTokenLength = 64

// A thousand chained turns, driven through the provider's calls: every
// turn's token, and every id its documents take from it, keeps its length.
func TestAThousandChainedTurnsKeepTheirTokensBounded(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	const instance = "long"
	work, _ := waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
	token := lockedStart(ctx, t, p, instance)
	require.NoError(t, ackScheduling(ctx, t, p, token, instance, activity(instance, 2, "")))
	longest := len(token)
	for step := uint64(2); step < 1002; step++ {
		got := work()
		require.NoError(t, got.err, "step %d", step)
		require.NotNil(t, got.item, "step %d", step)
		longest = max(longest, len(got.token))
		turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
		work, _ = waitingWorker(ctx, t, p, time.Minute, cdb.DefaultOnlyFilter())
		ackActivity(ctx, t, p, got)
		next := turn()
		require.NoError(t, next.err, "step %d", step)
		require.NotNil(t, next.item, "step %d", step)
		require.True(t, strings.HasPrefix(next.token, "lock_chain."), "step %d: the turn is chained: %s", step, next.token)
		longest = max(longest, len(next.token))
		events := []cdb.Event{chainEvent(instance, 10_000+step, cdb.ActivityCompleted{Result: "ok"}),
			chainEvent(instance, step+1, cdb.ActivityScheduled{Name: "A"})}
		require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, events,
			[]cdb.WorkItem{activity(instance, step+1, "")}, nil, providertest.TestOrchMetadata(), nil), "step %d", step)
	}
	assert.LessOrEqual(t, longest, maxDerivedTokenLength, "the longest lock token handed out")
	for _, doc := range storedDocs(t, p, instance, "") {
		id, _ := doc["id"].(string)
		assert.LessOrEqual(t, len(id), 100, "a document id derived from a token: %s", id)
		if lock, _ := doc["lockToken"].(string); lock != "" {
			assert.LessOrEqual(t, len(lock), maxDerivedTokenLength, "a stored lock token: %s", lock)
		}
	}
}

// chainEvent is event id of instance's first execution.
func chainEvent(instance string, id uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{EventID: id, InstanceID: instance, ExecutionID: 1, TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.32", Kind: kind}
}

// A sequential orchestration of a thousand activities, a timer every
// fiftieth (a timer ends a chain: 50 chained turns between), KV set along
// the way and an output stored apart at the end, runs each step once and
// completes: before the chain's token was bounded, its derived ids passed
// Cosmos DB's limit at about the 35th chained turn and the instance
// stalled, or failed, or ran a step twice.
func TestASequenceOfAThousandActivitiesRunsEachOnceAndCompletes(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{})
	const steps = 1000
	var mu sync.Mutex
	runs := map[string]int{}
	reg := durable.NewRegistry()
	require.NoError(t, reg.RegisterActivity("Step", func(_ durable.ActivityContext, in string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		runs[in]++
		return in, nil
	}))
	require.NoError(t, reg.RegisterOrchestration("Sequence", func(c *durable.OrchestrationContext, _ string) (string, error) {
		last := ""
		for i := range steps {
			out, err := c.ScheduleActivity("Step", strconv.Itoa(i)).Await()
			if err != nil {
				return "", err
			}
			last = out
			if i%50 == 49 {
				if _, err := c.ScheduleTimer(time.Millisecond).Await(); err != nil {
					return "", err
				}
			}
			if i%100 == 99 {
				c.SetKV("reached", last)
			}
		}
		return strings.Repeat("x", 100*1024) + last, nil
	}))
	rt, err := durable.Start(ctx, p, reg, durable.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Shutdown(context.Background())) }()
	require.NoError(t, rt.Client().StartOrchestration(ctx, "sequence", "Sequence", ""))
	st, err := rt.Client().WaitForCompletion(ctx, "sequence", 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, durable.StateCompleted, st.State, "failure: %v", st.Error)
	assert.Equal(t, strings.Repeat("x", 100*1024)+strconv.Itoa(steps-1), st.Output)
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, runs, steps)
	for step, n := range runs {
		if n != 1 {
			t.Errorf("step %s ran %d times", step, n)
		}
	}
	kv, found, err := rt.Client().GetKVValue(ctx, "sequence", "reached")
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, fmt.Sprint(steps-1), kv)
}
