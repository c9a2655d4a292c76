package handoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anyTag is a filter that takes every item.
type anyTag struct{}

func (anyTag) String() string       { return "any" }
func (anyTag) Matches(*string) bool { return true }

// lock is a test item: its expiry.
type lock struct{ until int64 }

func newTestReady(now *int64, ahead bool) *Ready[*lock] {
	return NewReady(false, ahead, time.Second, func() int64 { return *now }, func(l *lock) int64 { return l.until }, func(*lock) *string { return nil })
}

// afterFetchCalls makes n fetch calls of 30 s locks in a poll interval of
// e (a second), which then ends: the rate the next window counts by.
func afterFetchCalls(e *Ready[*lock], now *int64, n int) {
	for range n {
		e.Fetching(anyTag{}, 30*time.Second)()
	}
	*now += time.Second.Milliseconds()
}

// reservable counts what one reservation of e is granted, then releases it.
func reservable(e *Ready[*lock]) int {
	r := e.Reserve()
	defer r.Release()
	for {
		if _, ok := r.Take(nil); !ok {
			return r.Taken()
		}
	}
}

// How many items are locked ahead for a filter's fetches: what they took
// in half of the last poll interval (their locks too short to wait longer), at least one per dispatcher seen
// fetching at once, and nothing once they stopped.
func TestDepthFollowsWhatTheFetchesTake(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	var done []func()
	for range 4 {
		done = append(done, e.Fetching(anyTag{}, time.Second)) // four dispatchers at once
	}
	assert.Equal(t, 4, reservable(e), "one per dispatcher before any history")
	for _, d := range done {
		d()
	}
	for range 56 { // with the four above, a poll interval of 60 fetch calls
		e.Fetching(anyTag{}, time.Second)()
	}
	now += time.Second.Milliseconds()
	assert.Equal(t, 30, reservable(e), "what they take in half a poll interval")

	now += 2 * time.Second.Milliseconds()
	assert.Equal(t, 0, reservable(e), "no fetch for a whole poll interval: nothing is locked ahead")

	defer e.Returning(anyTag{}, time.Second, 0)()
	assert.Equal(t, 1, reservable(e), "a dispatcher acking what it fetched counts: it fetches next")
}

// Dispatchers that waited through the last poll interval made few fetch
// calls, yet take a wide fan-out written now at their pace: what they take
// at their turnaround within the items' horizon is locked for them (a
// poll interval each until one came back), not one item each, which left
// a fan-out of 50 for 16 waiting dispatchers mostly to the queue, a query
// and a claim per item.
func TestIdleDispatchersAreLockedForAtTheirTurnaround(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	const lockTimeout = 30 * time.Second // patience 15 s: a horizon of 14 s
	var done []func()
	for range 4 {
		done = append(done, e.Fetching(anyTag{}, lockTimeout))
	}
	assert.Equal(t, 56, reservable(e), "four dispatchers, a poll interval each, in 14 s")

	serve := func(ms int64) { // a dispatcher takes an item, runs it, acks it and fetches again
		done[0]()
		taken := now
		now += ms
		e.Returning(anyTag{}, lockTimeout, taken)()
		done[0] = e.Fetching(anyTag{}, lockTimeout)
	}
	serve(100)
	assert.Equal(t, 560, reservable(e), "four dispatchers back every 100 ms, in 14 s")

	for range 8 {
		serve(500)
	}
	slower := reservable(e)
	assert.Less(t, slower, 560, "the average follows slower handlers")
	assert.Greater(t, slower, 4*14000/500, "an average, not the last turnaround")

	for _, d := range done {
		d()
	}
	now += 3 * time.Second.Milliseconds()
	assert.Equal(t, 0, reservable(e), "no fetch for a whole poll interval: nothing is locked ahead, whatever their pace")
}

// Without ahead, a start is reserved only for the fetches running now.
func TestWithoutAheadOnlyRunningFetchesAreReservedFor(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, false)
	done := e.Fetching(anyTag{}, time.Minute)
	assert.Equal(t, 1, reservable(e))
	done()
	assert.Equal(t, 0, reservable(e), "the fetch ended")
}

// A reservation settled makes its items ready and frees its places; one
// released frees them with nothing ready; a release after a settle does
// nothing more.
func TestAReservationIsSettledOrReleasedOnce(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, false)
	defer e.Fetching(anyTag{}, time.Minute)()
	defer e.Fetching(anyTag{}, time.Minute)()

	r := e.Reserve()
	timeout, ok := r.Take(nil)
	require.True(t, ok)
	assert.Equal(t, time.Minute, timeout, "the fetches' lock timeout")
	assert.Equal(t, 1, reservable(e), "one of the two places is promised")
	item := &lock{until: now + 60_000}
	r.Settle([]*lock{item})
	r.Release()
	assert.Equal(t, 1, reservable(e), "one place is taken by the ready item, none by the settled reservation")
	got, ok := e.Take(anyTag{}, now)
	require.True(t, ok)
	assert.Same(t, item, got)

	released := e.Reserve()
	_, ok = released.Take(nil)
	require.True(t, ok)
	released.Release()
	assert.Equal(t, 2, reservable(e), "a released reservation frees its place")
	assert.True(t, e.Empty())
}

// An item whose lock expired while it waited is dropped, not handed out;
// a stale one is returned for a give-back; a dropped one is gone.
func TestReadyItemsExpireGoStaleAndAreDropped(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, false)
	defer e.Fetching(anyTag{}, time.Minute)()
	expired, stale, dropped := &lock{until: now + 10}, &lock{until: now + 60_000}, &lock{until: now + 60_000}
	e.Offer(expired, stale, dropped)
	assert.Equal(t, []*lock{dropped}, e.Drop(func(l *lock) bool { return l == dropped }))
	now += 999
	assert.Empty(t, e.Stale(now, false), "an item offered waits a poll interval")
	now++
	assert.Equal(t, []*lock{stale}, e.Stale(now, false), "waited a poll interval, lock still held")
	_, ok := e.Take(anyTag{}, now)
	assert.False(t, ok, "the expired item is dropped, the others are gone")
	assert.True(t, e.Empty())
}

// A nil list (eager dispatch off) keeps nothing and reserves nothing.
func TestANilReadyListDoesNothing(t *testing.T) {
	var e *Ready[*lock]
	defer e.Fetching(anyTag{}, time.Minute)()
	r := e.Reserve()
	_, ok := r.Take(nil)
	assert.False(t, ok)
	r.Settle([]*lock{{}})
	e.Offer(&lock{})
	assert.True(t, e.Empty())
	assert.Nil(t, e.Drop(func(*lock) bool { return true }))
}

// Ahead, an item may wait ready for half the lock timeout of the fetches
// it is locked for (when that is longer than a poll interval), is locked
// for that on top of their lock timeout, so that it goes out with a whole
// lock, and the fetches are reserved for what they take in that less a
// poll interval.
func TestAheadAnItemWaitsHalfALockAndIsLockedForItOnTop(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	afterFetchCalls(e, &now, 60)
	assert.Equal(t, 840, reservable(e), "what they take in 15 s less a poll interval")
	defer e.Fetching(anyTag{}, 30*time.Second)() // the fetches go on

	r := e.Reserve()
	lockFor, ok := r.Take(nil)
	require.True(t, ok)
	assert.Equal(t, 45*time.Second, lockFor, "the lock timeout and 15 s of waiting")
	item := &lock{until: now + lockFor.Milliseconds()}
	r.Settle([]*lock{item})
	now += 15*time.Second.Milliseconds() - 1
	assert.Empty(t, e.Stale(now, false), "it may wait 15 s")
	now++
	assert.Equal(t, []*lock{item}, e.Stale(now, false), "then it goes back")
}

// A backlog locked ahead as deep as the fetches' rate allows is taken
// whole at that rate before any of it waited its patience: none goes back
// to the queue to be queried and claimed again. Half a patience held only
// half of what the fetches would take in time, and a busy process queued
// the rest.
func TestABacklogLockedAheadIsTakenAtTheFetchesRateBeforeItsPatienceEnds(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	afterFetchCalls(e, &now, 60) // 60 a second, 30 s locks: a patience of 15 s
	defer e.Fetching(anyTag{}, 30*time.Second)()

	r := e.Reserve()
	var backlog []*lock
	for {
		lockFor, ok := r.Take(nil)
		if !ok {
			break
		}
		backlog = append(backlog, &lock{until: now + lockFor.Milliseconds()})
	}
	r.Settle(backlog)
	require.Greater(t, len(backlog), 60*15/2, "more than half a patience's worth is locked ahead")

	for taken := 0; taken < len(backlog); taken++ {
		if taken%60 == 0 {
			assert.Empty(t, e.Stale(now, false), "after %d taken, none waited its patience", taken)
		}
		got, ok := e.Take(anyTag{}, now)
		require.True(t, ok)
		assert.Same(t, backlog[taken], got, "taken in the order locked")
		now += 1000 / 60
	}
	assert.True(t, e.Empty())
}

// Without ahead (the turns), an item waits a poll interval and is locked
// for the fetches' lock timeout.
func TestWithoutAheadAnItemWaitsAPollInterval(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, false)
	defer e.Fetching(anyTag{}, 30*time.Second)()
	r := e.Reserve()
	lockFor, ok := r.Take(nil)
	require.True(t, ok)
	assert.Equal(t, 30*time.Second, lockFor)
	item := &lock{until: now + lockFor.Milliseconds()}
	r.Settle([]*lock{item})
	now += time.Second.Milliseconds()
	assert.Equal(t, []*lock{item}, e.Stale(now, false))
}

// An item's patience runs from its lock's writing, not from when the write's
// answer came: a commit whose answer is slow (a loaded host, a lost answer
// read back) still gives its items back with a whole lock timeout left,
// ahead (the worker items) and without (the turns) alike.
func TestAnItemsPatienceRunsFromItsLockNotFromTheAnswer(t *testing.T) {
	for _, ahead := range []bool{true, false} {
		now := int64(1_000_000)
		e := newTestReady(&now, ahead)
		afterFetchCalls(e, &now, 60)
		stop := e.Fetching(anyTag{}, 30*time.Second)
		r := e.Reserve()
		lockFor, ok := r.Take(nil)
		require.True(t, ok)
		item := &lock{until: now + lockFor.Milliseconds()} // written now
		answered := 5 * time.Second
		now += answered.Milliseconds()
		r.Settle([]*lock{item})
		waits := lockFor - 30*time.Second - answered // what is left of its patience
		if !ahead {
			waits = time.Second - answered // a poll interval, already gone
		}
		if waits > 0 {
			now += waits.Milliseconds() - 1
			assert.Empty(t, e.Stale(now, false), "ahead=%v: it may wait what is left of its patience", ahead)
		}
		now++
		assert.Equal(t, []*lock{item}, e.Stale(now, false), "ahead=%v: then it goes back, a lock timeout left", ahead)
		if ahead {
			assert.Equal(t, 30*time.Second.Milliseconds(), item.until-now, "a whole lock timeout left")
		}
		stop()
	}
}

// A reservation's wait is what is ready and promised before its first
// item, less what the running fetches take at once, at the rate the
// fetches took items in the last poll interval.
func TestAReservationsWaitIsWhatIsAheadOfItAtTheFetchesRate(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	afterFetchCalls(e, &now, 10)

	r := e.Reserve()
	_, ok := r.Take(nil)
	require.True(t, ok)
	assert.Zero(t, r.Wait(), "nothing ahead of it")
	r.Release()

	for range 20 {
		e.Offer(&lock{until: now + 60_000})
	}
	defer e.Fetching(anyTag{}, 30*time.Second)() // one fetch waits now
	r = e.Reserve()
	defer r.Release()
	for range 3 {
		_, ok := r.Take(nil)
		require.True(t, ok)
	}
	assert.Equal(t, 1900*time.Millisecond, r.Wait(), "19 ahead of the running fetch's, at 10 a second")
	assert.Zero(t, e.Reserve().Wait(), "a reservation that took nothing waits for nothing")
}

// At Close every ready item goes back, however long it may still wait.
func TestAllReadyItemsGoBackAtClose(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	item := &lock{until: now + 60_000}
	e.Offer(item)
	assert.Equal(t, []*lock{item}, e.Stale(now, true))
	assert.True(t, e.Empty())
}

// A list is idle once no fetch ran for a whole poll interval (its
// process's give-back then takes every ready item, handover.go).
func TestAListIsIdleOnceNoFetchRanForAPollInterval(t *testing.T) {
	now := int64(1_000_000)
	e := newTestReady(&now, true)
	assert.True(t, e.Idle(now), "no fetch ever")
	done := e.Fetching(anyTag{}, 30*time.Second)
	assert.False(t, e.Idle(now), "one runs")
	done()
	now += time.Second.Milliseconds()
	assert.False(t, e.Idle(now), "one ran in the last poll interval")
	now += time.Second.Milliseconds()
	assert.True(t, e.Idle(now), "none for a whole poll interval")
}
