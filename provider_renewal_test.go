package cdb_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// A lock renewal writes the instance document only: the locked messages
// keep the expiry their fetch gave them, and the instance lock alone keeps
// every other dispatcher out (a fetch takes messages only in the batch that
// takes the instance lock). Before, every renewal rewrote each locked
// message too, so an instance whose batch held a message near 1 MB (a start
// or continue-as-new input) paid a megabyte's write per renewal: on a loaded
// machine, or an account throttling those writes, a renewal then took
// longer than what was left of the lock, the fetch handed over a lock about
// to expire, and every try lost it before its ack until the instance was
// poisoned (the simulation's LargeContinueAsNew).
func TestALockRenewalWritesOnlyTheInstanceDocument(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	const pk = `["big"]`
	var mu sync.Mutex
	var renewals [][]byte
	p := newHookedProvider(t, acct, cdb.Config{Now: clock.Now}, func(r *http.Request) {
		if r.Header.Get("x-ms-cosmos-is-batch-request") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != pk || r.Body == nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		renewals = append(renewals, body)
		mu.Unlock()
	})
	input := strings.Repeat("n", 900*1024)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: "big", Orchestration: "Big", Input: input, Version: ptrTo("1.0.0"), ExecutionID: 1}, 0))
	const lockFor = 3 * time.Second
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockFor, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "big", item.Instance)

	mu.Lock()
	renewals = nil
	mu.Unlock()
	// Renewed twice, the lock outlives the expiry the fetch gave the
	// message.
	for range 2 {
		clock.Advance(2 * time.Second)
		require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, lockFor))
	}
	mu.Lock()
	require.Len(t, renewals, 2)
	for _, body := range renewals {
		require.Equal(t, 1, bytes.Count(body, []byte(`"operationType":"Patch"`)), "a renewal patches the instance document alone: %.300s", body)
	}
	mu.Unlock()

	// The message's own expiry has passed; the instance lock has not, and
	// keeps another dispatcher from the batch.
	other, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), Now: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	stolen, _, _, err := other.FetchOrchestrationItem(ctx, lockFor, 0, nil)
	require.NoError(t, err)
	require.Nil(t, stolen, "another dispatcher takes nothing while the renewed lock holds")

	can := cdb.StatusRunning
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 1, InstanceID: "big", ExecutionID: 1, Kind: cdb.OrchestrationStarted{Name: "Big", Version: "1.0.0", Input: "started"}}},
		nil, nil, cdb.ExecutionMetadata{Status: &can}, nil), "the holder's ack commits")
	next, _, _, err := other.FetchOrchestrationItem(ctx, lockFor, 0, nil)
	require.NoError(t, err)
	require.Nil(t, next, "the ack consumed the start")
}

// sizingTransport records the size of each batch answer on one partition.
type sizingTransport struct {
	next    http.RoundTripper
	pk      string
	mu      sync.Mutex
	answers []int
}

func (s *sizingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err != nil || r.Header.Get("x-ms-cosmos-is-batch-request") == "" || r.Header.Get("x-ms-documentdb-partitionkey") != s.pk {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	s.answers = append(s.answers, len(body))
	s.mu.Unlock()
	return resp, nil
}

// A fetch's lock batch does not ask the messages back: the candidate query
// returned them. Before, it did, and a message near 1 MB (a start or
// continue-as-new input) made the lock's answer a megabyte, which took
// longer to come and decode than the lock lasted on a loaded machine: the
// expiry is counted from before the request, so the fetch held an expired
// lock from the start, another dispatcher could take the instance, and
// each such fetch counted an attempt until the instance was poisoned.
func TestALockBatchAnswerDoesNotGrowWithItsMessages(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	sizing := &sizingTransport{next: acct.Transport(), pk: `["big"]`}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: sizing})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	input := strings.Repeat("n", 900*1024)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: "big", Orchestration: "Big", Input: input, Version: ptrTo("1.0.0"), ExecutionID: 1}, 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "big", Name: "e", Data: "small"}, 0))

	item, token, attempts, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, uint32(1), attempts)
	require.Len(t, item.Messages, 2)
	start, ok := item.Messages[0].(cdb.StartOrchestrationMessage)
	require.True(t, ok, "the start heads the batch: %#v", item.Messages[0])
	require.Equal(t, input, start.Input, "the start's input comes whole from the query")
	sizing.mu.Lock()
	require.NotEmpty(t, sizing.answers)
	for _, n := range sizing.answers {
		require.Less(t, n, 64*1024, "a batch answer on the instance's partition stays small: %v", sizing.answers)
	}
	sizing.mu.Unlock()

	// The lock holds as a lock: renewed, then abandoned with the attempt
	// counted, the next fetch sees the second attempt.
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute))
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, false))
	_, token, attempts, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, uint32(2), attempts)
	can := cdb.StatusRunning
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{{EventID: 1, InstanceID: "big", ExecutionID: 1, Kind: cdb.OrchestrationStarted{Name: "Big", Version: "1.0.0", Input: "started"}}},
		nil, nil, cdb.ExecutionMetadata{Status: &can}, nil), "a fetch whose lock asked nothing back acks")
}

// lostRenewal fetches instance's start and renews its lock on a context
// that a cut ends once the renewal reached the account (a runtime stopping
// cancels its renewals): the renewal applied, its answer was lost, and its
// read-back could not run, so the provider's view of the instance
// document's ETag is behind the store's while the lock is still its own.
func lostRenewal(t *testing.T, acct *cdb.FakeAccount, instance string) (*cdb.CosmosProvider, string) {
	t.Helper()
	ctx := rulesContext(t)
	p, renewCtx, cut := cutProvider(t, acct, `"/lockedUntil"`)
	cut.fired.Store(true) // not before the fetch: its lock batch writes the expiry too
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	cut.fired.Store(false)
	err = p.RenewOrchestrationItemLock(renewCtx, token, 2*time.Minute)
	require.True(t, cut.fired.Load(), "the renewal reached the account")
	require.Error(t, err, "its answer was lost")
	require.NotErrorIs(t, err, cdb.ErrInvalidLockToken, "nothing says the lock is gone")
	stored := instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), instance)
	require.Equal(t, token, stored["lockToken"])
	return p, token
}

// An abandon after a renewal whose answer was lost gives the lock back:
// it met the ETag the renewal moved as "another dispatcher took the
// instance", and left it locked for a lock's length (after a clean close,
// the simulation's close-gives-back, on a fetch's token).
func TestAnAbandonAfterARenewalWhoseAnswerWasLostGivesTheLockBack(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, token := lostRenewal(t, acct, "lost-renewal-abandon")
	require.NoError(t, p.AbandonOrchestrationItem(rulesContext(t), token, 0, false))
	assert.Empty(t, instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "lost-renewal-abandon")["lockToken"], "the lock is given back")
}

// An ack after a renewal whose answer was lost commits: the lock is still
// this process's, and the turn was refused as a lost lock, to be fetched
// again only once the lock expired.
func TestAnAckAfterARenewalWhoseAnswerWasLostCommits(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, token := lostRenewal(t, acct, "lost-renewal-ack")
	ctx := rulesContext(t)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("lost-renewal-ack", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	inst := instanceDocOf(t, newRulesProvider(t, acct, cdb.Config{}), "lost-renewal-ack")
	assert.Empty(t, inst["lockToken"], "the commit released the lock")
	hist, err := p.ReadHistory(ctx, "lost-renewal-ack")
	require.NoError(t, err)
	assert.Len(t, hist, 1, "the turn's history is stored")
}
