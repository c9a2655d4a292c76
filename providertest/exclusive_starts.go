package providertest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// ExclusiveStarts checks the optional cdb.ExclusiveStarter, which duroxide
// has not: a start is enqueued only while its instance id is free, neither
// an instance's nor a queued start's, and a deleted instance's id is free
// again. Run it with RunModule; on a provider without the capability its
// tests skip.
func ExclusiveStarts() Module {
	return Module{Name: "exclusive_starts", Tests: []Test{
		{Name: "TestAStartOfAFreeIDIsEnqueued", Run: TestAStartOfAFreeIDIsEnqueued},
		{Name: "TestAStartOfAnIDWithAStartQueuedIsErrInstanceExists", Run: TestAStartOfAnIDWithAStartQueuedIsErrInstanceExists},
		{Name: "TestAStartOfAnExistingInstanceIsErrInstanceExists", Run: TestAStartOfAnExistingInstanceIsErrInstanceExists},
		{Name: "TestADeletedInstancesIDIsFreeToStart", Run: TestADeletedInstancesIDIsFreeToStart},
		{Name: "TestMessagesToAnIDNeverStartedLeaveItFree", Run: TestMessagesToAnIDNeverStartedLeaveItFree},
		{Name: "TestStartsRacingForOneIDEnqueueOne", Run: TestStartsRacingForOneIDEnqueueOne},
	}}
}

// exclusiveStarter is a new provider and its cdb.ExclusiveStarter; the
// test skips when the provider has none.
func exclusiveStarter(t *testing.T, f Factory) (cdb.Provider, cdb.ExclusiveStarter) {
	t.Helper()
	p := f.NewProvider(t, ProviderOptions{})
	starter, ok := p.(cdb.ExclusiveStarter)
	if !ok {
		t.Skipf("%T does not implement the optional cdb.ExclusiveStarter this module checks", p)
	}
	return p, starter
}

// startOf is StartItem as the start it is.
func startOf(instance string) cdb.StartOrchestrationMessage {
	return StartItem(instance).(cdb.StartOrchestrationMessage)
}

// fetchStartOf fetches instance's batch, which must hold its start once
// and want messages in all.
func fetchStartOf(ctx context.Context, t *testing.T, p cdb.Provider, instance string, want int) {
	t.Helper()
	item, _ := fetchOrchestration(ctx, t, p, lockLong, "the start of %q is queued", instance)
	require.Equal(t, instance, item.Instance)
	require.Len(t, item.Messages, want)
	starts := 0
	for _, m := range item.Messages {
		if _, ok := m.(cdb.StartOrchestrationMessage); ok {
			starts++
		}
	}
	assert.Equal(t, 1, starts, "one start of %q in its batch", instance)
}

// TestAStartOfAFreeIDIsEnqueued: the start is queued as
// EnqueueForOrchestrator queues it.
func TestAStartOfAFreeIDIsEnqueued(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	require.NoError(t, starter.EnqueueStartIfAbsent(ctx, startOf("free")))
	fetchStartOf(ctx, t, p, "free", 1)
}

// TestAStartOfAnIDWithAStartQueuedIsErrInstanceExists: a queued start
// takes the id, whichever way it was enqueued, and the refused start
// enqueues nothing.
func TestAStartOfAnIDWithAStartQueuedIsErrInstanceExists(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	require.NoError(t, starter.EnqueueStartIfAbsent(ctx, startOf("queued")))
	assertRefusal(t, starter.EnqueueStartIfAbsent(ctx, startOf("queued")), cdb.ErrInstanceExists, "EnqueueStartIfAbsent")
	fetchStartOf(ctx, t, p, "queued", 1)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, startOf("plain"), 0))
	assertRefusal(t, starter.EnqueueStartIfAbsent(ctx, startOf("plain")), cdb.ErrInstanceExists, "EnqueueStartIfAbsent")
	fetchStartOf(ctx, t, p, "plain", 1)
}

// TestAStartOfAnExistingInstanceIsErrInstanceExists: a running instance
// and a finished one both hold their id.
func TestAStartOfAnExistingInstanceIsErrInstanceExists(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	CreateInstance(ctx, t, p, "running")
	assertRefusal(t, starter.EnqueueStartIfAbsent(ctx, startOf("running")), cdb.ErrInstanceExists, "EnqueueStartIfAbsent")
	createCompletedInstance(ctx, t, p, "finished")
	assertRefusal(t, starter.EnqueueStartIfAbsent(ctx, startOf("finished")), cdb.ErrInstanceExists, "EnqueueStartIfAbsent")
	fetchNoOrchestration(ctx, t, p, lockLong, "the refused starts enqueued nothing")
}

// TestADeletedInstancesIDIsFreeToStart: once an instance is deleted, its
// id starts again.
func TestADeletedInstancesIDIsFreeToStart(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	admin := Admin(t, p)
	createCompletedInstance(ctx, t, p, "reborn")
	_, err := admin.DeleteInstance(ctx, "reborn", false)
	require.NoError(t, err)
	require.NoError(t, starter.EnqueueStartIfAbsent(ctx, startOf("reborn")))
	fetchStartOf(ctx, t, p, "reborn", 1)
}

// TestMessagesToAnIDNeverStartedLeaveItFree: an event that came before
// its instance's start, even once a fetch looked at it, does not take the
// id; the start then brings it into its batch.
func TestMessagesToAnIDNeverStartedLeaveItFree(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "early", Name: "approve", Data: "{}"}, 0))
	fetchNoOrchestration(ctx, t, p, lockLong, "the event waits for its start")
	require.NoError(t, starter.EnqueueStartIfAbsent(ctx, startOf("early")))
	assertRefusal(t, starter.EnqueueStartIfAbsent(ctx, startOf("early")), cdb.ErrInstanceExists, "EnqueueStartIfAbsent")
	fetchStartOf(ctx, t, p, "early", 2)
}

// TestStartsRacingForOneIDEnqueueOne: of starts of one id at the same
// moment exactly one is enqueued, and every other is refused.
func TestStartsRacingForOneIDEnqueueOne(t *testing.T, f Factory) {
	ctx := testContext(t)
	p, starter := exclusiveStarter(t, f)
	const racers = 8
	var (
		mu               sync.Mutex
		started, refused int
		unexpected       []error
		wg               sync.WaitGroup
	)
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := starter.EnqueueStartIfAbsent(ctx, startOf("contested"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				started++
			case errors.Is(err, cdb.ErrInstanceExists):
				refused++
			default:
				unexpected = append(unexpected, err)
			}
		}()
	}
	wg.Wait()
	require.Empty(t, unexpected)
	assert.Equal(t, 1, started, "one start enqueued")
	assert.Equal(t, racers-1, refused, "every other refused")
	fetchStartOf(ctx, t, p, "contested", 1)
}
