package memprovider_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Behaviour the validation suite does not pin: the package's own design
// choices (package doc) and long polling.

func ptr[T any](v T) *T { return &v }

// clock is a manual clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.UnixMilli(1_700_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func start(instance string) cdb.StartOrchestrationMessage {
	return cdb.StartOrchestrationMessage{Instance: instance, Orchestration: "Orch", Input: "{}", Version: ptr("1.0.0"), ExecutionID: 1}
}

func started(instance string, execution uint64) cdb.Event {
	return cdb.Event{EventID: 1, InstanceID: instance, ExecutionID: execution, DuroxideVersion: "0.1.29",
		Kind: cdb.OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: "{}"}}
}

func orchMetadata() cdb.ExecutionMetadata {
	return cdb.ExecutionMetadata{OrchestrationName: ptr("Orch"), OrchestrationVersion: ptr("1.0.0")}
}

// createInstance starts instance and acks its first turn.
func createInstance(t *testing.T, p *memprovider.Provider, instance string, md cdb.ExecutionMetadata) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, instance, item.Instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{started(instance, 1)}, nil, nil, md, nil))
}

// Work other than QueueMessages for a never-started instance is skipped, not
// locked or counted, and does not starve later instances; it joins the batch
// when the start arrives.
func TestUnstartedInstanceIsSkippedNotStarving(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.CancelInstanceMessage{Instance: "early", Reason: "r"}, 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("other"), 0))

	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the cancel at the head of the queue must not starve other instances")
	require.Equal(t, "other", item.Instance)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, false))
	require.Equal(t, uint32(0), p.MaxAttemptCount("early"), "a skipped instance is not attempt-counted")

	// Only the skipped instance is left (other is fetchable again, take it).
	item, token, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "other", item.Instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	item, _, _, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "work racing ahead of its start stays queued, unfetched")

	depths, err := p.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, depths.OrchestratorQueue, "the cancel is still queued")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("early"), 0))
	item, _, attempt, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "early", item.Instance)
	require.Equal(t, uint32(1), attempt)
	require.Len(t, item.Messages, 2)
	require.IsType(t, cdb.CancelInstanceMessage{}, item.Messages[0])
	require.IsType(t, cdb.StartOrchestrationMessage{}, item.Messages[1])
	require.Equal(t, "Orch", item.OrchestrationName)
}

// Orphan QueueMessages are dropped and the fetch goes on to the next instance.
func TestOrphanQueueMessagesDroppedThenNextCandidate(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.QueueEventMessage{Instance: "ghost", Name: "n", Data: "d"}, 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("real"), 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "real", item.Instance)
	depths, err := p.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, depths.OrchestratorQueue, "the orphan was deleted; real's start is locked")
}

// History without an instance row (first ack without name and version)
// still gives the instance its name, from OrchestrationStarted.
func TestHistoryWithoutInstanceRow(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "anon", cdb.ExecutionMetadata{})
	_, err := p.GetInstanceInfo(ctx, "anon")
	require.ErrorIs(t, err, cdb.ErrInstanceNotFound, "no instance row without name and version")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "anon", Name: "e", Data: "x"}, 0))
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, "Orch", item.OrchestrationName)
	require.Equal(t, "1.0.0", item.Version)
	require.Equal(t, uint64(1), item.ExecutionID)
	require.Len(t, item.History, 1)
}

// Lock expiry follows Options.Now.
func TestClockDrivesLocks(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	p := memprovider.New(memprovider.Options{Now: c.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("i"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	c.Advance(999 * time.Millisecond)
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "still locked 1 ms before expiry")
	c.Advance(time.Millisecond)
	err = p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorContains(t, err, "Instance lock expired")
	item, token2, attempt, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "fetchable once locked_until <= now")
	require.NotEqual(t, token, token2)
	require.Equal(t, uint32(2), attempt)
	err = p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil)
	require.ErrorContains(t, err, "Invalid lock token")
	var pe *cdb.ProviderError
	require.ErrorAs(t, err, &pe)
	require.False(t, pe.Retryable)
}

// A lock's remaining time (cdb.LockRemainingReporter) is read by the
// store's clock: its whole timeout at the fetch, less as the clock moves,
// the whole timeout again after a renewal, zero once expired, and unknown
// once the token is gone.
func TestLockRemainingFollowsTheClock(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	p := memprovider.New(memprovider.Options{Now: c.Now})
	remaining := func(left func(string) (time.Duration, bool), token string) time.Duration {
		t.Helper()
		d, ok := left(token)
		require.True(t, ok, "the store holds token %s", token)
		return d
	}

	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "i", ExecutionID: 1, ID: 1, Name: "A"}))
	_, work, _, err := p.FetchWorkItem(ctx, 30*time.Second, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, remaining(p.WorkItemLockRemaining, work))
	c.Advance(26 * time.Second)
	require.Equal(t, 4*time.Second, remaining(p.WorkItemLockRemaining, work))
	require.NoError(t, p.RenewWorkItemLock(ctx, work, 30*time.Second))
	require.Equal(t, 30*time.Second, remaining(p.WorkItemLockRemaining, work), "a renewal extends by the whole timeout")
	c.Advance(31 * time.Second)
	require.Zero(t, remaining(p.WorkItemLockRemaining, work), "expired, the token still on its item")
	require.NoError(t, p.AbandonWorkItem(ctx, work, 0, false))
	_, ok := p.WorkItemLockRemaining(work)
	require.False(t, ok, "released")
	_, ok = p.WorkItemLockRemaining("no-such-token")
	require.False(t, ok)

	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("i"), 0))
	_, orch, _, err := p.FetchOrchestrationItem(ctx, 5*time.Second, 0, nil)
	require.NoError(t, err)
	c.Advance(1500 * time.Millisecond)
	require.Equal(t, 3500*time.Millisecond, remaining(p.OrchestrationLockRemaining, orch))
	require.NoError(t, p.RenewOrchestrationItemLock(ctx, orch, 5*time.Second))
	require.Equal(t, 5*time.Second, remaining(p.OrchestrationLockRemaining, orch))
	require.NoError(t, p.AckOrchestrationItem(ctx, orch, 1, []cdb.Event{started("i", 1)}, nil, nil, orchMetadata(), nil))
	_, ok = p.OrchestrationLockRemaining(orch)
	require.False(t, ok, "acked")
}

// The long-poll tests below assert what a fetch does, not how fast: each
// gives a poll timeout (farPoll) longer than go test lets a test run, so a
// fetch that returns with work, an error or nothing shows which event ended
// its wait, and a fetch that missed the event fails the test instead of
// passing late. Only lower bounds are timed: a loaded machine only makes
// waits longer.
const farPoll = time.Hour

// A long-polling fetch that is waiting returns when work is enqueued.
func TestLongPollWokenByEnqueue(t *testing.T) {
	ctx := context.Background()
	watch := &lookWatch{}
	p := memprovider.New(memprovider.Options{LongPolling: true, Now: watch.Now})
	enqueued := whenWaiting(watch, func() error { return p.EnqueueForOrchestrator(ctx, start("late"), 0) })
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, farPoll, nil)
	require.NoError(t, err)
	require.NoError(t, <-enqueued)
	require.NotNil(t, item, "the enqueue ends the wait with the work")
	enqueued = whenWaiting(watch, func() error {
		return p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "late", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"})
	})
	w, _, _, err := p.FetchWorkItem(ctx, time.Minute, farPoll, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NoError(t, <-enqueued)
	require.NotNil(t, w, "the enqueue ends the wait with the work")
}

// A long poll wakes for a message whose delay runs out, without an enqueue,
// and not before.
func TestLongPollWokenByDelayedVisibility(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{LongPolling: true})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("delayed"), 150*time.Millisecond))
	begin := time.Now()
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, farPoll, nil)
	elapsed := time.Since(begin)
	require.NoError(t, err)
	require.NotNil(t, item, "the message becoming visible ends the wait")
	require.GreaterOrEqual(t, elapsed, 140*time.Millisecond) // 10 ms for the store's ms rounding
}

// An empty long poll waits out its poll timeout, then returns no work and
// no error by itself (a fetch that overran it would meet the test's
// deadline instead). How soon after the timeout is speed, for benchmarks.
func TestLongPollReturnsAfterItsTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := memprovider.New(memprovider.Options{LongPolling: true})
	for _, fetch := range []func() (bool, error){
		func() (bool, error) {
			item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 300*time.Millisecond, nil)
			return item != nil, err
		},
		func() (bool, error) {
			item, _, _, err := p.FetchWorkItem(ctx, time.Minute, 300*time.Millisecond, nil, cdb.AnyFilter())
			return item != nil, err
		},
	} {
		begin := time.Now()
		found, err := fetch()
		require.NoError(t, err, "the poll timeout, not the test's deadline, ends the fetch")
		require.False(t, found)
		require.GreaterOrEqual(t, time.Since(begin), 300*time.Millisecond)
	}
}

// A long poll honours its context: the context's end, not the poll
// timeout, ends the wait.
func TestLongPollHonoursContext(t *testing.T) {
	p := memprovider.New(memprovider.Options{LongPolling: true})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, farPoll, nil)
	require.Nil(t, item)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Close releases a waiting fetch with the closed provider's error.
func TestCloseReleasesLongPoll(t *testing.T) {
	watch := &lookWatch{}
	p := memprovider.New(memprovider.Options{LongPolling: true, Now: watch.Now})
	closed := whenWaiting(watch, p.Close)
	_, _, _, err := p.FetchWorkItem(context.Background(), time.Minute, farPoll, nil, cdb.AnyFilter())
	require.NoError(t, <-closed)
	require.Equal(t, cdb.Permanent("FetchWorkItem", "provider is closed"), err)
}

// lookWatch is a store clock (the wall clock's time) that tells when the
// store next reads it. A fetch reads the clock with the store's mutex held,
// in the pass that finds nothing before it waits; whatever the test does
// once told (an enqueue, a Close: each takes the mutex) therefore happens
// while the fetch waits, never before it started.
type lookWatch struct {
	mu     sync.Mutex
	looked chan struct{}
}

func (w *lookWatch) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.looked != nil {
		close(w.looked)
		w.looked = nil
	}
	return time.Now()
}

// whenWaiting runs do once the store next reads its clock, and sends do's
// error on the returned channel.
func whenWaiting(w *lookWatch, do func() error) <-chan error {
	looked := make(chan struct{})
	w.mu.Lock()
	w.looked = looked
	w.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		<-looked
		done <- do()
	}()
	return done
}

// Ack is all or nothing: a duplicate event id leaves queues, KV, status and
// the lock untouched.
func TestAckAllOrNothing(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "i", orchMetadata())
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "i", Name: "e", Data: "x"}, 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	err = p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			{EventID: 2, InstanceID: "i", ExecutionID: 1, Kind: cdb.KeyValueSet{Key: "k", Value: "v"}},
			{EventID: 1, InstanceID: "i", ExecutionID: 1, Kind: cdb.CustomStatusUpdated{Status: ptr("s")}},
		},
		[]cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: "i", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}},
		[]cdb.WorkItem{start("child")},
		cdb.ExecutionMetadata{Status: ptr(cdb.StatusCompleted), Output: ptr("out")}, nil)
	require.ErrorIs(t, err, cdb.ErrDuplicateEvent, "event 1 is the instance's OrchestrationStarted")
	_, found, err := p.GetKVValue(ctx, "i", "k")
	require.NoError(t, err)
	require.False(t, found)
	_, _, changed, err := p.GetCustomStatus(ctx, "i", 0)
	require.NoError(t, err)
	require.False(t, changed)
	info, err := p.GetInstanceInfo(ctx, "i")
	require.NoError(t, err)
	require.Equal(t, cdb.StatusRunning, info.Status)
	depths, err := p.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Equal(t, cdb.QueueDepths{}, depths, "nothing enqueued; the poke is still locked")
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item, "the lock is still held")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// Stats count carry-forward events, merged KV and the current execution's
// history.
func TestInstanceStats(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, start("s"), 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	ev := started("s", 1)
	ev.Kind = cdb.OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: "{}",
		CarryForwardEvents: []cdb.CarryForwardEvent{{Name: "a", Data: "1"}, {Name: "b", Data: "2"}}}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{ev,
		{EventID: 2, InstanceID: "s", ExecutionID: 1, Kind: cdb.KeyValueSet{Key: "k", Value: "abc"}},
		{EventID: 3, InstanceID: "s", ExecutionID: 1, Kind: cdb.KeyValueSet{Key: "gone", Value: "zz"}},
		{EventID: 4, InstanceID: "s", ExecutionID: 1, Kind: cdb.KeyValueCleared{Key: "gone"}},
	}, nil, nil, orchMetadata(), nil))
	stats, err := p.GetInstanceStats(ctx, "s")
	require.NoError(t, err)
	require.NotNil(t, stats)
	require.Equal(t, uint64(4), stats.HistoryEventCount)
	require.Positive(t, stats.HistorySizeBytes)
	require.Equal(t, uint64(2), stats.QueuePendingCount)
	require.Equal(t, uint64(1), stats.KVUserKeyCount)
	require.Equal(t, uint64(3), stats.KVTotalValueBytes)
}

// Deletion removes worker rows by instance, so a stale worker's ack fails,
// and the instance lock, so an in-flight turn cannot recreate the instance.
func TestForceDeleteFencesStaleWork(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "d", orchMetadata())
	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "d", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
	_, wtoken, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "d", Name: "e", Data: "x"}, 0))
	_, otoken, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)

	res, err := p.DeleteInstance(ctx, "d", true)
	require.NoError(t, err)
	require.Equal(t, cdb.DeleteInstanceResult{InstancesDeleted: 1, ExecutionsDeleted: 1, EventsDeleted: 1, QueueMessagesDeleted: 2}, res)

	require.ErrorIs(t, p.AckWorkItem(ctx, wtoken, cdb.ActivityCompletedMessage{Instance: "d", ExecutionID: 1, ID: 2, Result: "r"}), cdb.ErrInvalidLockToken)
	require.ErrorIs(t, p.AckOrchestrationItem(ctx, otoken, 1, []cdb.Event{started("d", 1)}, nil, nil, orchMetadata(), nil), cdb.ErrInvalidLockToken)
	_, err = p.GetInstanceInfo(ctx, "d")
	require.ErrorIs(t, err, cdb.ErrInstanceNotFound)
	ids, err := p.ListInstances(ctx)
	require.NoError(t, err)
	require.Empty(t, ids)
}

// Pruning keeps the current execution, running executions and the newest
// keep_last, and never touches KV.
func TestPruneKeepLast(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "p", orchMetadata())
	for exec := uint64(1); exec <= 4; exec++ {
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "p", Name: "e", Data: "x"}, 0))
		_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		var delta []cdb.Event
		if exec > 1 {
			delta = []cdb.Event{started("p", exec)}
		}
		delta = append(delta, cdb.Event{EventID: 2, InstanceID: "p", ExecutionID: exec,
			Kind: cdb.KeyValueSet{Key: "k", Value: "v"}})
		md := cdb.ExecutionMetadata{}
		if exec < 4 {
			md.Status, md.Output = ptr(cdb.StatusContinuedAsNew), ptr("in")
		}
		require.NoError(t, p.AckOrchestrationItem(ctx, token, exec, delta, nil, nil, md, nil))
	}
	res, err := p.PruneExecutions(ctx, "p", cdb.PruneOptions{KeepLast: ptr(uint32(2))})
	require.NoError(t, err)
	require.Equal(t, cdb.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 2, EventsDeleted: 4}, res)
	execs, err := p.ListExecutions(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4}, execs)
	v, found, err := p.GetKVValue(ctx, "p", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "v", v)
	_, err = p.PruneExecutions(ctx, "nope", cdb.PruneOptions{})
	require.ErrorIs(t, err, cdb.ErrInstanceNotFound)
}

// A history that does not decode is refused with the decoder's error kept
// as the cause, so a caller's errors.As reaches it.
func TestUndecodableHistoryKeepsTheDecodersError(t *testing.T) {
	ctx := context.Background()
	p := memprovider.New(memprovider.Options{})
	createInstance(t, p, "i", orchMetadata())
	p.CorruptInstanceHistory("i")
	_, err := p.Read(ctx, "i")
	require.ErrorIs(t, err, cdb.ErrRefused)
	var syntax *json.SyntaxError
	require.ErrorAs(t, err, &syntax)
}
