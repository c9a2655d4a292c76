package cdb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Starting an id only while it is free (cdb.ExclusiveStarter) on the
// Cosmos provider, beside providertest's ExclusiveStarts module: what it
// costs, a lost answer, a deletion under way, a fetch's lock document, and
// starts racing from two processes.

var _ cdb.ExclusiveStarter = (*cdb.CosmosProvider)(nil)

// requireInstanceExists asserts the provider's refusal of a taken id.
func requireInstanceExists(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, cdb.ErrInstanceExists)
	assert.False(t, cdb.IsRetryable(err), "%v", err)
	assert.ErrorIs(t, err, cdb.ErrRefused)
	var pe *cdb.ProviderError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "EnqueueStartIfAbsent", pe.Op)
}

// fetchStart fetches the next batch, which must be instance's with its
// start and wantMessages messages in all.
func fetchStart(t *testing.T, p *cdb.CosmosProvider, instance string, wantMessages int) string {
	t.Helper()
	item, token, _, err := p.FetchOrchestrationItem(rulesContext(t), time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the start of %q is fetched", instance)
	require.Equal(t, instance, item.Instance)
	require.Len(t, item.Messages, wantMessages)
	starts := 0
	for _, m := range item.Messages {
		if _, ok := m.(cdb.StartOrchestrationMessage); ok {
			starts++
		}
	}
	assert.Equal(t, 1, starts, "one start in the batch")
	return token
}

func TestAStartOfAFreeIDIsOneRequestAndRuns(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	log := logRequests(acct)
	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("free")))
	assert.Equal(t, []string{"Batch"}, log.ops(), "the start, its lock document and the sequencer in one batch, nothing read")
	fetchStart(t, p, "free", 1)
}

func TestAStartOfAnExistingInstanceIsErrInstanceExists(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

	providertest.CreateInstance(ctx, t, p, "running")
	requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("running")))
	assert.Equal(t, 0, countDocs(t, p, "running", "msg"), "nothing was enqueued")

	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("finished")))
	token := fetchStart(t, p, "finished", 1)
	completed := cdb.StatusCompleted
	md := providertest.TestOrchMetadata()
	md.Status, md.Output = &completed, ptrTo("done")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("finished", 1)}, nil, nil, md, nil))
	requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("finished")))

	_, err := p.DeleteInstance(ctx, "finished", false)
	require.NoError(t, err)
	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("finished")), "a deleted instance's id is free")
	fetchStart(t, p, "finished", 1)
}

func TestAStartOfAnIDWhoseStartIsQueuedIsErrInstanceExists(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("queued")))
	requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("queued")))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, startOf("plain"), 0))
	requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("plain")))

	assert.Equal(t, 1, countDocs(t, p, "queued", "msg"), "one start queued")
	fetchStart(t, p, "queued", 1)
	fetchStart(t, p, "plain", 1)
}

func TestAStartWhoseAnswerWasLostSucceedsWithOneMessage(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "consistent reads", true: "stale reads without a session token"}[stale], func(t *testing.T) {
			ctx := rulesContext(t)
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{StaleReadsWithoutSessionToken: stale})
			p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})

			loseFirstResponse(acct, "Batch", "StartOrchestration")
			require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("lossy")), "the resend meets the start's own lock document")
			assert.Equal(t, 1, countDocs(t, p, "lossy", "msg"), "exactly one start message")
			requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("lossy")))
			fetchStart(t, p, "lossy", 1)
		})
	}
}

func TestAStartDuringADeletionIsRetryableAndFreeOnceItIsDone(t *testing.T) {
	ctx := rulesContext(t)
	p, finishDeletion := deletionStalledAfterItsMark(ctx, t, "phoenix")

	err := p.EnqueueStartIfAbsent(ctx, startOf("phoenix"))
	require.Error(t, err, "the start must not be accepted into a partition being deleted")
	assert.True(t, cdb.IsRetryable(err), "%v", err)
	assert.NotErrorIs(t, err, cdb.ErrInstanceExists, "the id is about to be free")
	assert.Equal(t, 0, countDocs(t, p, "phoenix", "msg"), "nothing was enqueued")

	finishDeletion()
	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("phoenix")), "the deleted instance's id is free")
	fetchNewLife(ctx, t, p, "phoenix", "the new life's start")
}

// A fetch creates a lock document for messages to an id never started: it
// records no start, so the id is free, and the first start claims it.
func TestAStartClaimsTheLockDocumentOfAnIDNeverStarted(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("early"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the poke waits for its start")
	require.Equal(t, 1, countDocs(t, p, "early", "inst"), "the fetch created the lock document")

	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("early")))
	requireInstanceExists(t, p.EnqueueStartIfAbsent(ctx, startOf("early")))
	fetchStart(t, p, "early", 2)
}

// Starts of one id racing from two processes: exactly one is enqueued, and
// every other is told the id is taken.
func TestStartsRacingForOneIDEnqueueOne(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	processes := []*cdb.CosmosProvider{
		newRulesProvider(t, acct, cdb.Config{ShortPolling: true}),
		newRulesProvider(t, acct, cdb.Config{ShortPolling: true}),
	}
	// One fetch created the lock document, so the race is also for the claim.
	require.NoError(t, processes[0].EnqueueForOrchestrator(ctx, pokeItem("contested-claim"), 0))
	item, _, _, err := processes[0].FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item)

	for _, instance := range []string{"contested", "contested-claim"} {
		var (
			mu      sync.Mutex
			started int
			refused int
			wg      sync.WaitGroup
		)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(p *cdb.CosmosProvider) {
				defer wg.Done()
				err := p.EnqueueStartIfAbsent(ctx, startOf(instance))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					started++
				case errors.Is(err, cdb.ErrInstanceExists):
					refused++
				default:
					t.Errorf("%s: %v", instance, err)
				}
			}(processes[i%2])
		}
		wg.Wait()
		assert.Equal(t, 1, started, "%s: one start enqueued", instance)
		assert.Equal(t, 7, refused, "%s: the others refused", instance)
		assert.Equal(t, 1, countDocs(t, processes[0], instance, "msg")-map[string]int{"contested": 0, "contested-claim": 1}[instance], "%s: one start message", instance)
	}
}

// A cancelled context stops the start as any request does.
func TestAStartWithACancelledContextEnqueuesNothing(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.EnqueueStartIfAbsent(ctx, startOf("cancelled"))
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, cdb.ErrInstanceExists)
	assert.Equal(t, 0, countDocs(t, p, "cancelled", "msg"))
}

// A start that finds a fetch holding the lock document of an id never
// started waits a moment for it, then claims the document anyway: the
// holder can no longer commit, and its messages come with the start once
// its lock expires.
func TestAStartClaimsALockDocumentAFetchHolds(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("held"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the poke waits for its start")
	clock.Advance(time.Minute) // past the wait for a start
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the poke goes to the runtime, the lock document held")
	require.Equal(t, "Unknown", item.OrchestrationName)

	require.NoError(t, p.EnqueueStartIfAbsent(ctx, startOf("held")))
	err = p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "the claim changed the document under the lock")

	clock.Advance(time.Minute + time.Second) // the lock expires
	fetchStart(t, p, "held", 2)
}
