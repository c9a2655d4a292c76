package cdb_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A request that keeps a lock gets an attempt deadline from the time left
// on the lock (ARCHITECTURE.md, "Every attempt has a deadline"): the
// runtime renews a worker lock 5 s before it expires and an orchestration
// lock 2 s before, so an attempt held by a silent connection for the whole
// 15 s attempt deadline would let the lock lapse, and another worker would
// run the activity again. These run on the real clock, with locks of 2 s.

const shortLock = 2 * time.Second

// newDeadlineProvider is a provider on acct with the default timeouts and
// the real clock.
func newDeadlineProvider(t *testing.T, acct *cdb.FakeAccount) *cdb.CosmosProvider {
	t.Helper()
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// rival is another process's worker fetching from the same account until
// stopped; taken says whether it ever got an item, which it can only once
// the lock that holds it has lapsed.
type rival struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	taken []string
}

func startRival(ctx context.Context, t *testing.T, acct *cdb.FakeAccount) *rival {
	r := &rival{stop: make(chan struct{}), done: make(chan struct{})}
	other := newDeadlineProvider(t, acct)
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			item, _, _, err := other.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
			if err == nil && item != nil {
				r.mu.Lock()
				r.taken = append(r.taken, item.InstanceID())
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// stopped stops the rival and returns the instances of the items it took.
func (r *rival) stopped() []string {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.taken
}

// answeredNever holds the first request that match selects, once, as a
// connection that accepted it and went silent.
func answeredNever(acct *cdb.FakeAccount, match func(cdb.FakeRequest) bool) {
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultNoAnswer, Times: 1, Match: match})
}

// A worker lock renewal sent with 2 s left whose first attempt meets a
// silent connection is tried again in time: the lock never lapses, and no
// other worker takes the item.
func TestAWorkerLockRenewalOnASilentConnectionRenewsBeforeTheLockLapses(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newDeadlineProvider(t, acct)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("silent-renewal", 1, "")))
	item, token, _, err := p.FetchWorkItem(ctx, shortLock, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	other := startRival(ctx, t, acct)

	answeredNever(acct, isLockRenewal("w|1|1"))
	require.NoError(t, p.RenewWorkItemLock(ctx, token, time.Minute), "renewed on a second attempt")
	left, ok := p.WorkItemLockRemaining(token)
	require.True(t, ok)
	assert.Greater(t, left, shortLock, "the renewal extended the lock")
	assert.Empty(t, other.stopped(), "no other worker took the item")
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(&cdb.ActivityExecuteMessage{Instance: "silent-renewal", ExecutionID: 1, ID: 1}, "done")))
}

// A worker ack sent with 2 s left whose first attempt meets a silent
// connection commits on a second attempt before the lock lapses: the
// activity is not handed to another worker.
func TestAWorkerAckOnASilentConnectionCommitsBeforeTheLockLapses(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newDeadlineProvider(t, acct)
	require.NoError(t, p.EnqueueForWorker(ctx, activity("silent-ack", 1, "")))
	item, token, _, err := p.FetchWorkItem(ctx, shortLock, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	other := startRival(ctx, t, acct)

	answeredNever(acct, func(r cdb.FakeRequest) bool {
		return r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"w|1|1"`)) && !bytes.Contains(r.Body, []byte(`"Read"`))
	})
	act := item.(cdb.ActivityExecuteMessage)
	require.NoError(t, p.AckWorkItem(ctx, token, completionOf(&act, "done")))
	assert.Empty(t, other.stopped(), "no other worker took the item")
	assert.Zero(t, countDocs(t, p, "silent-ack", "work"), "the item was consumed")
}

// An orchestration lock renewal sent with 2 s left whose first attempt
// meets a silent connection is tried again in time: no other dispatcher
// takes the instance.
func TestAnOrchestrationLockRenewalOnASilentConnectionRenewsBeforeTheLockLapses(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newDeadlineProvider(t, acct)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: "silent-turn", Orchestration: "O", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, shortLock, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	answeredNever(acct, isLockRenewal("inst"))
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, token, time.Minute), "renewed on a second attempt")
	left, ok := p.OrchestrationLockRemaining(token)
	require.True(t, ok)
	assert.Greater(t, left, shortLock, "the renewal extended the lock")
	other := newDeadlineProvider(t, acct)
	taken, _, _, err := other.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, taken, "no other dispatcher takes the instance while the renewed lock holds")
}
