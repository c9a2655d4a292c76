package cdb_test

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// skewedProcesses are providers on one account whose clocks are off the
// shared clock by the given offsets.
func skewedProcesses(t *testing.T, acct *cdb.FakeAccount, clock *testClock, offsets ...time.Duration) []*cdb.CosmosProvider {
	out := make([]*cdb.CosmosProvider, len(offsets))
	for i, off := range offsets {
		out[i] = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: func() time.Time { return clock.Now().Add(off) }})
	}
	return out
}

// Events enqueued one after another, each through another process, are
// delivered in the order they were enqueued, though the processes' clocks
// are ±45 ms apart and the events 1 ms (found by the simulation: an Inbox
// got event 13 before 10).
func TestEventsEnqueuedThroughSkewedProcessesArriveInOrder(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, 45*time.Millisecond, 0, -45*time.Millisecond)
	providertest.CreateInstance(ctx, t, procs[1], "fifo")

	var want []string
	for i := range 12 {
		name := strconv.Itoa(i)
		want = append(want, name)
		require.NoError(t, procs[i%3].EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: name}, 0))
		clock.Advance(time.Millisecond)
	}
	clock.Advance(time.Second) // all visible to every process
	assert.Equal(t, want, consume(ctx, t, procs[2], "fifo"), "the process whose clock is behind fetches")
}

// A process whose clock is behind pays for catching up once: its first
// enqueue after a process ahead meets the higher seq, reads it and sends
// again; its next enqueue is one request.
func TestAProcessBehindCatchesUpWithTheSequencerOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, 45*time.Millisecond, -45*time.Millisecond)
	ahead, behind := procs[0], procs[1]
	providertest.CreateInstance(ctx, t, ahead, "catch-up")
	require.NoError(t, ahead.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "catch-up", Name: "e", Data: "0"}, 0))

	log := logRequests(acct)
	require.NoError(t, behind.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "catch-up", Name: "e", Data: "1"}, 0))
	assert.Equal(t, []string{"Batch", "Batch", "Batch"}, log.ops(), "the refused send, the sequencer's read, the send")
	clock.Advance(time.Millisecond)
	require.NoError(t, behind.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "catch-up", Name: "e", Data: "2"}, 0))
	assert.Equal(t, []string{"Batch"}, log.ops(), "caught up: one send")

	clock.Advance(time.Second)
	assert.Equal(t, []string{"0", "1", "2"}, consume(ctx, t, behind, "catch-up"))
}

// A sequenced enqueue whose response is lost, resent, meets its own seq on
// the sequencer: it finds its message (or, once consumed, its marker) and
// reports success, and the message is queued once.
func TestASequencedEnqueueWithALostResponseQueuesOnce(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	providertest.CreateInstance(ctx, t, p, "lossy-seq")

	for i, lose := range []string{"created the sequencer", "patched the sequencer"} {
		loseFirstResponse(acct, "Batch", "ExternalRaised")
		require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "lossy-seq", Name: "e", Data: strconv.Itoa(i)}, 0), lose)
		assert.Equal(t, i+1, countDocs(t, p, "lossy-seq", "msg"), lose)
	}
	assert.Equal(t, []string{"0", "1"}, consume(ctx, t, p, "lossy-seq"))
}

// turnsOnSkewedProcesses commits two turns of instance "sender", the first
// on a process 45 ms ahead, the second at once on one 45 ms behind; turn i
// queues what queue(i) returns. It returns the processes and the clock.
func turnsOnSkewedProcesses(t *testing.T, queue func(turn int) (work, orch []cdb.WorkItem)) (ahead, behind *cdb.CosmosProvider, clock *testClock) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock = newTestClock()
	ahead = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, MaxMessagesPerTurn: 1,
		Now: func() time.Time { return clock.Now().Add(45 * time.Millisecond) }})
	behind = newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: func() time.Time { return clock.Now().Add(-45 * time.Millisecond) }})
	providertest.CreateInstance(ctx, t, ahead, "receiver")
	providertest.CreateInstance(ctx, t, ahead, "sender")
	require.NoError(t, ahead.EnqueueForOrchestrator(ctx, pokeItem("sender"), 0))
	require.NoError(t, ahead.EnqueueForOrchestrator(ctx, pokeItem("sender"), 0))
	for turn, p := range []*cdb.CosmosProvider{ahead, behind} {
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "turn %d", turn)
		require.Equal(t, "sender", item.Instance)
		if turn == 0 {
			// One poke per turn on this process; 100 ms on, the other is
			// visible to the process behind, which takes it at once.
			clock.Advance(100 * time.Millisecond)
		}
		work, orch := queue(turn)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, work, orch, cdb.ExecutionMetadata{}, nil))
	}
	return ahead, behind, clock
}

// What an orchestration sends keeps its order across its turns though
// they are taken by processes whose clocks disagree: the process that
// locks the instance hands out seqs, and visibility times, above those of
// the last commit.
func TestMessagesAnOrchestrationSendsKeepTheirOrderAcrossSkewedProcesses(t *testing.T) {
	ctx := rulesContext(t)
	ahead, behind, clock := turnsOnSkewedProcesses(t, func(turn int) (work, orch []cdb.WorkItem) {
		return nil, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "receiver", Name: "e", Data: strconv.Itoa(turn)}}
	})
	require.Eventually(t, func() bool {
		clock.Advance(50 * time.Millisecond) // an outbox that waited for the one before it is retried
		return countDocs(t, ahead, "receiver", "msg") == 2
	}, 20*time.Second, 10*time.Millisecond, "the relays deliver both")
	clock.Advance(time.Second)
	assert.Equal(t, []string{"0", "1"}, consume(ctx, t, behind, "receiver"))
}

// The same for the activities of one session: its worker items are served
// in the order the turns scheduled them.
func TestASessionsActivitiesKeepTheirOrderAcrossSkewedProcesses(t *testing.T) {
	ctx := rulesContext(t)
	session := "s"
	_, behind, clock := turnsOnSkewedProcesses(t, func(turn int) (work, orch []cdb.WorkItem) {
		return []cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: "sender", ExecutionID: 1, ID: uint64(turn + 2), Name: "Work", Input: "{}", SessionID: &session}}, nil
	})
	clock.Advance(time.Second)
	owner := &cdb.SessionFetchConfig{OwnerID: "worker", LockTimeout: time.Minute}
	var ids []uint64
	for range 2 {
		item, token, _, err := behind.FetchWorkItem(ctx, time.Minute, 0, owner, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
		require.NotNil(t, item)
		act := item.(cdb.ActivityExecuteMessage)
		ids = append(ids, act.ID)
		require.NoError(t, behind.AckWorkItem(ctx, token, cdb.ActivityCompletedMessage{Instance: "sender", ExecutionID: 1, ID: act.ID, Result: "ok"}))
	}
	assert.Equal(t, []uint64{2, 3}, ids)
}

// A process whose clock stands still (a test's) still sees what it queues
// after handing out more seqs than one millisecond holds: seqs past the
// clock move what it serves along with them.
func TestAStoppedClockStillSeesItsOwnItemsPastAThousandSeqs(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "still")
	fanOut := make([]cdb.WorkItem, 1200)
	for i := range fanOut {
		fanOut[i] = cdb.ActivityExecuteMessage{Instance: "still", ExecutionID: 1, ID: uint64(i + 2), Name: "Work", Input: "{}"}
	}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("still"), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, fanOut, nil, cdb.ExecutionMetadata{}, nil))

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "still", Name: "e", Data: "after"}, 0))
	assert.Equal(t, []string{"after"}, consume(ctx, t, p, "still"), "the event queued after 1200 seqs in one millisecond")
	work, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.NotNil(t, work, "the fan-out's items")
}

// One process whose clock is an hour ahead writes its seq into a
// partition's sequencer. A healthy process that enqueues into that
// partition afterwards must not take the hour over: its timer due in ten
// minutes is served when it is due, not now (another process's wrong clock
// changes nothing for a healthy one), and its own event is visible at once.
func TestAFastClockDoesNotMakeAHealthyProcessFireTimersEarly(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, time.Hour, 0)
	fast, healthy := procs[0], procs[1]
	providertest.CreateInstance(ctx, t, healthy, "sleeper")
	providertest.CreateInstance(ctx, t, healthy, "shared")

	require.NoError(t, healthy.EnqueueForOrchestrator(ctx, pokeItem("sleeper"), 0))
	item, token, _, err := healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	due := clock.Now().Add(10 * time.Minute)
	timer := cdb.TimerFiredMessage{Instance: "sleeper", ExecutionID: 1, ID: 2, FireAtMs: uint64(due.UnixMilli())}
	require.NoError(t, healthy.AckOrchestrationItem(ctx, token, 1, nil, nil, []cdb.WorkItem{timer}, cdb.ExecutionMetadata{}, nil))

	require.NoError(t, fast.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "shared", Name: "e", Data: "fast"}, 0))
	require.NoError(t, healthy.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "shared", Name: "e", Data: "healthy"}, 0))

	assert.Equal(t, []string{"healthy"}, consume(ctx, t, healthy, "shared"),
		"the healthy event is visible now; the fast one at the fast clock's time")
	item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "the timer is not due for ten minutes")

	clock.Advance(10*time.Minute - time.Millisecond)
	item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "a millisecond before its due time")
	clock.Advance(time.Second) // past the idle window that look closed
	item, _, _, err = healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "due")
	assert.Equal(t, "sleeper", item.Instance)
	assert.Equal(t, []string{"TimerFired"}, messageKinds(item))
}

// timerTurn commits a turn of instance on p that queues a timer due at due.
func timerTurn(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string, due time.Time) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, instance, item.Instance)
	timer := cdb.TimerFiredMessage{Instance: instance, ExecutionID: 1, ID: 2, FireAtMs: uint64(due.UnixMilli())}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, []cdb.WorkItem{timer}, cdb.ExecutionMetadata{}, nil))
}

// A process a little ahead (within the lead a process takes over) moves
// the seqs of a process that enqueues after it, and with them how far that
// process serves immediate items; never its timers, which fire by its clock.
func TestASeqTakenOverFromAProcessAheadDoesNotFireTimersEarly(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, 500*time.Millisecond, 0)
	ahead, p := procs[0], procs[1]
	providertest.CreateInstance(ctx, t, p, "sleeper")
	providertest.CreateInstance(ctx, t, p, "shared")
	timerTurn(ctx, t, p, "sleeper", clock.Now().Add(300*time.Millisecond))

	require.NoError(t, ahead.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "shared", Name: "e", Data: "ahead"}, 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "shared", Name: "e", Data: "mine"}, 0))
	assert.Equal(t, []string{"ahead", "mine"}, consume(ctx, t, p, "shared"), "in order, the later one visible to its writer at once")
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "the timer is due in 300 ms by this process's clock")
}

// After a process an hour ahead wrote into a partition, the healthy
// processes' events (their clocks ±45 ms apart) keep their order, the
// first costs one request, and the fast one's event comes after them, at
// its time.
func TestHealthyProcessesKeepTheirOrderAfterAFastClockWroteThePartition(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, time.Hour, 45*time.Millisecond, -45*time.Millisecond)
	fast, healthy := procs[0], procs[1:]
	providertest.CreateInstance(ctx, t, healthy[0], "fifo")
	require.NoError(t, fast.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: "fast"}, 0))

	log := logRequests(acct)
	require.NoError(t, healthy[1].EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: "0"}, 0))
	assert.Equal(t, []string{"Batch"}, log.ops(), "one send: it overwrites the fast clock's sequencer rather than following it")
	want := []string{"0"}
	for i := 1; i < 7; i++ {
		clock.Advance(time.Millisecond)
		name := strconv.Itoa(i)
		want = append(want, name)
		require.NoError(t, healthy[i%2].EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: name}, 0))
	}
	clock.Advance(time.Second)
	assert.Equal(t, want, consume(ctx, t, healthy[1], "fifo"), "the process behind fetches them in order, without the fast one's")
	clock.Advance(time.Hour)
	assert.Equal(t, []string{"fast"}, consume(ctx, t, healthy[1], "fifo"), "the fast clock's event, at its time")
}

// A healthy process that takes a turn after a process an hour ahead
// committed the instance's last one does not take its seqs over: the
// activities it schedules are visible to the other healthy processes at
// once, not an hour later.
func TestATurnAfterAFastClocksTurnQueuesItsWorkForNow(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, time.Hour, 0, 0)
	fast, healthy, worker := procs[0], procs[1], procs[2]
	providertest.CreateInstance(ctx, t, fast, "relay") // its first turn, committed an hour ahead

	require.NoError(t, healthy.EnqueueForOrchestrator(ctx, pokeItem("relay"), 0))
	item, token, _, err := healthy.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	act := cdb.ActivityExecuteMessage{Instance: "relay", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}
	require.NoError(t, healthy.AckOrchestrationItem(ctx, token, 1, nil, []cdb.WorkItem{act}, nil, cdb.ExecutionMetadata{}, nil))

	work, _, _, err := worker.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, work, "the activity is visible now")
	assert.Equal(t, uint64(2), work.(cdb.ActivityExecuteMessage).ID)
}

// An item abandoned with a delay has a due time: a process whose seqs run
// ahead of its clock (taken over from a process ahead) does not serve it
// before the delay is over by its own clock.
func TestAnItemAbandonedWithADelayIsNotServedEarlyByAProcessWithSeqsAhead(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	procs := skewedProcesses(t, acct, clock, 500*time.Millisecond, 0)
	ahead, p := procs[0], procs[1]
	providertest.CreateInstance(ctx, t, p, "shared")
	require.NoError(t, ahead.EnqueueForOrchestrator(ctx, pokeItem("shared"), 0))
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem("shared"), 0)) // p's seqs now run 500 ms ahead

	require.NoError(t, p.EnqueueForWorker(ctx, cdb.ActivityExecuteMessage{Instance: "shared", ExecutionID: 1, ID: 2, Name: "Work", Input: "{}"}))
	item, token, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AbandonWorkItem(ctx, token, 300*time.Millisecond, false))
	item, _, _, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.Nil(t, item, "due in 300 ms by this process's clock")
	clock.Advance(time.Second) // due, and past the idle window that look closed
	item, _, _, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	assert.NotNil(t, item, "due")
}

// An event's place in its queue is its seq's: time that passes between
// taking the seq and writing the message (a goroutine preempted on a
// loaded machine) must not put the event after one sequenced later through
// a process whose clock is a little behind (found by the simulation: an
// Inbox got event 10 when it waited for 9).
func TestAnEventSlowBetweenItsSeqAndItsWriteKeepsItsPlace(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	var ticks atomic.Int64 // every reading of the slow process's clock is a millisecond later
	slow := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: func() time.Time {
		return clock.Now().Add(time.Duration(ticks.Add(1)) * time.Millisecond)
	}})
	behind := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: func() time.Time { return clock.Now().Add(-20 * time.Millisecond) }})
	providertest.CreateInstance(ctx, t, behind, "fifo")

	require.NoError(t, slow.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: "0"}, 0))
	require.NoError(t, behind.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "fifo", Name: "e", Data: "1"}, 0))
	clock.Advance(time.Second)
	assert.Equal(t, []string{"0", "1"}, consume(ctx, t, behind, "fifo"))
}

// A partition quiet for longer than its sequencer lives has an expired
// sequencer that the account may not have purged yet: its id still
// conflicts on create while no read sees it. An enqueue waits for the purge
// rather than fail at once or loop, and the events keep their order. The
// purge comes when the enqueue creates the sequencer a second time: its
// first create met the unpurged one, and it waited (50 ms, the first of its
// waits) before the second.
func TestAnEnqueueWaitsOutAnExpiredSequencerNotYetPurged(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now, ExpiredPurgeLag: time.Minute})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	providertest.CreateInstance(ctx, t, p, "quiet")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "quiet", Name: "e", Data: "0"}, 0))

	clock.Advance(24*time.Hour + time.Second) // the sequencer expired; its purge lags a minute
	var mu sync.Mutex
	var creates []time.Time // of the sequencer, from now on
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		if r.Operation != "Batch" || r.PartitionKey != `["quiet"]` || !bytes.Contains(r.Body, []byte(`"type":"seq"`)) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if creates = append(creates, time.Now()); len(creates) == 2 {
			clock.Advance(time.Minute)
		}
		return false
	}})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "quiet", Name: "e", Data: "1"}, 0))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, creates, 2, "the enqueue created the sequencer again after the purge")
	assert.GreaterOrEqual(t, creates[1].Sub(creates[0]), 50*time.Millisecond, "the enqueue waited before it created the sequencer again")
	clock.Advance(time.Second)
	assert.Equal(t, []string{"0", "1"}, consume(ctx, t, p, "quiet"))
}
