package cdb_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// What duroxide-pg learned about locks since 0.1.33 (issue 23), pinned on
// this provider: a fetch never hands out a lock that has already expired
// (0.1.36); a renewal never revives an expired lock nor shortens a live one,
// and an ack after another dispatcher took over is refused (0.1.38).

// lessonProviders are two processes on one account and one clock.
func lessonProviders(t *testing.T) (a, b *cdb.CosmosProvider, clock *testClock) {
	a, b, clock, _ = lessonAccount(t)
	return a, b, clock
}

// lessonAccount is lessonProviders with their account, for faults.
func lessonAccount(t *testing.T) (a, b *cdb.CosmosProvider, clock *testClock, acct *cdb.FakeAccount) {
	acct = cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock = newTestClock()
	a = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	b = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	return a, b, clock, acct
}

func TestARenewalNeverShortensALiveOrchestrationLock(t *testing.T) {
	ctx := rulesContext(t)
	a, b, clock := lessonProviders(t)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem("long-lock"), 0))
	item, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	require.NoError(t, a.RenewOrchestrationItemLock(ctx, token, time.Second), "a renewal asking for less than is left")
	clock.Advance(10 * time.Second)
	other, _, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, other, "the lock still runs to the minute it was given")
	require.NoError(t, a.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("long-lock", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
}

func TestARenewalNeverShortensALiveWorkItemLock(t *testing.T) {
	ctx := rulesContext(t)
	a, b, clock := lessonProviders(t)
	require.NoError(t, a.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "long-work", ExecutionID: 1, ID: 1, Name: "Work", Input: "{}"}))
	item, token, _, err := a.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)

	require.NoError(t, a.RenewWorkItemLock(ctx, token, time.Second), "a renewal asking for less than is left")
	clock.Advance(10 * time.Second)
	other, _, _, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.Nil(t, other, "the lock still runs to the minute it was given")
	require.NoError(t, a.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "long-work", ExecutionID: 1, ID: 1, Result: "ok"}))
}

// A lock that expired is not brought back by a renewal, even when no other
// dispatcher has taken it yet; and once another has, the first holder's
// ack is refused and commits nothing.
func TestAnExpiredOrchestrationLockIsNeitherRevivedNorAcked(t *testing.T) {
	ctx := rulesContext(t)
	a, b, clock := lessonProviders(t)
	require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem("expired"), 0))
	_, token, _, err := a.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	require.ErrorIs(t, a.RenewOrchestrationItemLock(ctx, token, time.Minute), cdb.ErrInvalidLockToken, "no renewal revives an expired lock")

	taken, takenToken, attempts, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, taken, "another dispatcher takes the instance")
	assert.Equal(t, uint32(2), attempts)
	err = a.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("expired", 1)}, nil, nil, providertest.TestOrchMetadata(), nil)
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "an ack after another took over is refused")
	history, err := a.Read(ctx, "expired")
	require.NoError(t, err)
	assert.Empty(t, history, "the refused ack committed nothing")
	require.NoError(t, b.AckOrchestrationItem(ctx, takenToken, 1, []cdb.Event{providertest.StartedEvent("expired", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
}

func TestAnExpiredWorkItemLockIsNeitherRevivedNorAcked(t *testing.T) {
	ctx := rulesContext(t)
	a, b, clock := lessonProviders(t)
	require.NoError(t, a.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "expired-work", ExecutionID: 1, ID: 1, Name: "Work", Input: "{}"}))
	_, token, _, err := a.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	require.ErrorIs(t, a.RenewWorkItemLock(ctx, token, time.Minute), cdb.ErrInvalidLockToken, "no renewal revives an expired lock")

	taken, takenToken, attempts, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, taken, "another worker takes the item")
	assert.Equal(t, uint32(2), attempts)
	err = a.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "expired-work", ExecutionID: 1, ID: 1, Result: "first"})
	require.ErrorIs(t, err, cdb.ErrInvalidLockToken, "an ack after another took over is refused")
	assert.Equal(t, 0, countDocs(t, a, "expired-work", "msg"), "the refused ack enqueued no completion")
	require.NoError(t, b.AckWorkItem(ctx, takenToken, cdb.ActivityCompletedMessage{Instance: "expired-work", ExecutionID: 1, ID: 1, Result: "second"}))
	assert.Equal(t, 1, countDocs(t, a, "expired-work", "msg"))
}

// slowLockBatch makes the test clock pass the lock's whole timeout while
// the first lock batch is on its way, as a slow
// request on a loaded host does, and, if refuseRefresh, refuses the
// renewal that follows once with a permanent status.
func slowLockBatch(acct *cdb.FakeAccount, clock *testClock, by time.Duration, refuseRefresh bool) {
	var once sync.Once
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "Batch" && strings.Contains(string(r.Body), "/attempts") {
			once.Do(func() { clock.Advance(by) })
		}
		return false
	}})
	if refuseRefresh {
		acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
			return r.Operation == "Batch" && !strings.Contains(string(r.Body), "/lockToken") && strings.Contains(string(r.Body), "/lockedUntil")
		}, Status: 400, Times: 1})
	}
}

// A fetch whose lock batch took longer than the lock lasts renews the lock
// before it hands it out; when that renewal does not land, it hands out
// nothing, and another dispatcher takes the instance.
func TestAFetchNeverHandsOutALockThatHasExpired(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("refresh-refused=%t", refused), func(t *testing.T) {
			ctx := rulesContext(t)
			a, b, clock, acct := lessonAccount(t)
			require.NoError(t, a.EnqueueForOrchestrator(ctx, providertest.StartItem("slow-lock"), 0))
			slowLockBatch(acct, clock, 2*time.Second, refused)

			item, token, _, err := a.FetchOrchestrationItem(ctx, time.Second, 0, nil)
			require.NoError(t, err)
			if refused {
				assert.Nil(t, item, "a lock that expired on its way is not handed out")
				taken, _, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
				require.NoError(t, err)
				assert.NotNil(t, taken, "another dispatcher takes the instance")
				return
			}
			require.NotNil(t, item)
			other, _, _, err := b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			require.NoError(t, err)
			assert.Nil(t, other, "the lock handed out is live")
			require.NoError(t, a.RenewOrchestrationItemLock(ctx, token, time.Second))
		})
	}
}

// A refresh of a slow claim whose response is lost may have applied; the
// client's resend then meets the new ETag. The fetch cannot tell, and hands
// out nothing: the item is taken by another worker once that lock ends,
// never by two at once.
func TestAWorkerClaimRefreshWithALostResponseIsPassedOver(t *testing.T) {
	ctx := rulesContext(t)
	a, b, clock, acct := lessonAccount(t)
	require.NoError(t, a.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "lost-refresh", ExecutionID: 1, ID: 1, Name: "Work", Input: "{}"}))
	var once sync.Once
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation == "PatchItem" && strings.Contains(string(r.Body), "/attempts") {
			once.Do(func() { clock.Advance(2 * time.Second) })
		}
		return false
	}})
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "PatchItem" && !strings.Contains(string(r.Body), "/attempts")
	}, Kind: cdb.FaultLoseResponse, Times: 1})

	item, _, _, err := a.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.Nil(t, item, "an expired claim whose refresh is unknown is not handed out")
	other, _, _, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.Nil(t, other, "the refresh applied: its lock keeps the item until it ends")
	clock.Advance(2 * time.Second)
	other, token, attempts, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, other, "another worker takes it once that lock ends")
	assert.Equal(t, uint32(2), attempts)
	require.NoError(t, b.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "lost-refresh", ExecutionID: 1, ID: 1, Result: "ok"}))
}

// The same for a worker item: a claim that took longer than its lock lasts
// is renewed before the item is handed out, or, when the renewal does not
// land, the item is passed over for another worker.
func TestAWorkerFetchNeverHandsOutALockThatHasExpired(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("refresh-refused=%t", refused), func(t *testing.T) {
			ctx := rulesContext(t)
			a, b, clock, acct := lessonAccount(t)
			require.NoError(t, a.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "slow-claim", ExecutionID: 1, ID: 1, Name: "Work", Input: "{}"}))
			var once sync.Once
			acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
				if r.Operation == "PatchItem" && strings.Contains(string(r.Body), "/attempts") {
					once.Do(func() { clock.Advance(2 * time.Second) })
				}
				return false
			}})
			if refused {
				acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
					return r.Operation == "PatchItem" && !strings.Contains(string(r.Body), "/attempts")
				}, Status: 400, Times: 1})
			}

			item, token, _, err := a.FetchWorkItem(ctx, time.Second, 0, nil, cdb.DefaultOnlyFilter())
			require.NoError(t, err)
			if refused {
				assert.Nil(t, item, "a lock that expired on its way is not handed out")
				taken, _, _, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
				require.NoError(t, err)
				assert.NotNil(t, taken, "another worker takes the item")
				return
			}
			require.NotNil(t, item)
			other, _, _, err := b.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
			require.NoError(t, err)
			assert.Nil(t, other, "the lock handed out is live")
			require.NoError(t, a.RenewWorkItemLock(ctx, token, time.Second))
		})
	}
}
