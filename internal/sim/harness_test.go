package sim

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// The harness's own checks: an invariant that never fires proves nothing,
// so each is shown firing on a fabricated record.

func TestRecorderFlagsAnActivityStartedAfterItsCompletionCommitted(t *testing.T) {
	v := &violations{}
	rec := newRecorder(v)
	key := activityKey{Instance: "i", Exec: 1, ID: 2, Run: "0.0"}
	t0 := time.Now()
	rec.started(execution{Key: key, Node: "a", Start: t0})
	rec.ended(execution{Key: key, Node: "a", Start: t0, End: t0.Add(time.Millisecond), Finished: true})
	rec.committed(commitRecord{Key: key, At: t0.Add(2 * time.Millisecond), Node: "a"})
	require.Empty(t, v.all(), "a first run is fine")

	rec.started(execution{Key: key, Node: "b", Start: t0.Add(3 * time.Millisecond)})
	got := v.all()
	require.Len(t, got, 1)
	assert.Equal(t, invActivityRanAfterCompletion, got[0].Invariant)
}

func TestRecorderFlagsASecondCommittedCompletion(t *testing.T) {
	v := &violations{}
	rec := newRecorder(v)
	key := activityKey{Instance: "i", Exec: 1, ID: 2, Run: "0.0"}
	rec.committed(commitRecord{Key: key, At: time.Now(), Node: "a"})
	rec.committed(commitRecord{Key: key, At: time.Now(), Node: "b"})
	got := v.all()
	require.Len(t, got, 1)
	assert.Equal(t, invCompletionOnce, got[0].Invariant)
}

func TestSessionsFlagAnotherOwnerWhileTheSessionIsHeld(t *testing.T) {
	v := &violations{}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	execs := []execution{
		{Key: activityKey{Instance: "x", ID: 1}, Node: "a", Owner: "a", Session: "s", Start: at(0), End: at(10), Finished: true},
		{Key: activityKey{Instance: "y", ID: 1}, Node: "b", Owner: "b", Session: "s", Start: at(5), End: at(15), Finished: true},
		{Key: activityKey{Instance: "z", ID: 1}, Node: "b", Owner: "b", Session: "s", Start: at(20), End: at(30), Finished: true},
		{Key: activityKey{Instance: "w", ID: 1}, Node: "c", Owner: "c", Session: "s", Start: at(5000), End: at(5010), Finished: true},
	}
	checkSessions(v, execs, map[string]bool{}, nil)
	got := v.all()
	require.Len(t, got, 2, "y overlaps x on another owner, z starts right after x on another owner; w comes long after")
	assert.Equal(t, invSessionAffinity, got[0].Invariant)
	assert.ElementsMatch(t, []string{"y", "z"}, []string{got[0].Instance, got[1].Instance})

	handover := []execution{
		{Key: activityKey{Instance: "x", ID: 1}, Node: "a", Owner: "a", Session: "s", Start: at(0), End: at(10), Finished: true},
		{Key: activityKey{Instance: "y", ID: 1}, Node: "b", Owner: "b", Session: "s", Start: at(100), End: at(110), Finished: true},
	}
	checkSessions(v, handover, map[string]bool{}, nil)
	assert.Len(t, v.all(), 3, "a session moving to another owner right after an activity")
	checkSessions(v, handover, map[string]bool{"a": true}, nil)
	assert.Len(t, v.all(), 3, "a crashed owner's runs are left out: its sessions may move")
}

func TestOutcomeMismatchesAreViolations(t *testing.T) {
	v := &violations{}
	s := spec{Kind: kindChain, Run: "1.0", N: 2}
	e := &expectation{instance: "c", spec: s, want: expected(s)}
	checkOutcome(v, e, statusCompleted("chain:1.0:w0:0,w1:0"))
	require.Empty(t, v.all())
	checkOutcome(v, e, statusCompleted("chain:1.0:w0:0"))
	require.Len(t, v.all(), 1)
	assert.Equal(t, invOutput, v.all()[0].Invariant)
}

// TestTheTransportSeesCompletionsCommit guards the no-run-after-complete
// check: if the provider's ack changed shape so that the transport no
// longer recognised completions, that check would pass vacuously.
func TestTheTransportSeesCompletionsCommit(t *testing.T) {
	cfg := Config{Seed: 7, Scenarios: 4, Features: Features{Chains: true}}
	report, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.True(t, report.OK(), "%v", report.Violations)
	assert.Positive(t, report.Stats.Commits)
	assert.Equal(t, report.Stats.Activities, report.Stats.Commits, "every activity of a fault-free run commits once")
}

func statusCompleted(out string) rt.Status { return rt.Status{State: rt.StateCompleted, Output: out} }

// TestAWaitEndsOnlyWhenTheRunStopsProgressing shows the no-progress rule: a
// wait whose condition takes several stall stretches to hold still succeeds
// while something keeps marking progress, and a wait with no progress at all
// gives up.
func TestAWaitEndsOnlyWhenTheRunStopsProgressing(t *testing.T) {
	p := newProgress(50*time.Millisecond, 0)
	var ready atomic.Bool
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			p.mark()
			if i == 60 { // some 300ms in: six stall stretches
				ready.Store(true)
			}
		}
	}()
	assert.True(t, p.waitUntil(context.Background(), time.Millisecond, ready.Load), "a progressing run is waited for")
	close(stop)

	assert.False(t, p.waitUntil(context.Background(), time.Millisecond, func() bool { return false }), "a stalled run is not")
	assert.True(t, p.stalled())
	assert.Contains(t, p.why(), "no progress anywhere")
}

func TestOneHolderFlagsAnotherNodeBeforeTheShutDownNodesGraceEnds(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	key := activityKey{Instance: "i", Exec: 1, ID: 2, Run: "0.0"}
	a := execution{Key: key, Node: "a", Start: at(0), End: at(2000), Finished: true}
	shutdowns := map[string]shutdownRecord{"a": {At: at(100), Grace: 500 * time.Millisecond}}

	v := &violations{}
	checkOneHolder(v, []execution{a, {Key: key, Node: "b", Start: at(150), End: at(200), Finished: true}}, shutdowns, map[string]bool{}, nil)
	require.Len(t, v.all(), 1, "b started while a's runtime was shutting down, inside its grace")
	assert.Equal(t, invOneHolder, v.all()[0].Invariant)

	v = &violations{}
	checkOneHolder(v, []execution{a, {Key: key, Node: "b", Start: at(700), End: at(800), Finished: true}}, shutdowns, map[string]bool{}, nil)
	assert.Empty(t, v.all(), "after the grace the item may move")
	checkOneHolder(v, []execution{a, {Key: key, Node: "b", Start: at(150), End: at(200), Finished: true}}, shutdowns, map[string]bool{"a": true}, nil)
	assert.Empty(t, v.all(), "a crashed node holds nothing")

	// A renewal of a's that met a fault before the shutdown may have let
	// the lock lapse: at-least-once, not the runtime's release.
	faultedAt := at(50)
	nodes := &holderNodes{
		long:   func(string) bool { return false },
		paused: func(string, time.Time, time.Time) bool { return false },
		writeFaulted: func(n, pk, id string, from, to time.Time) bool {
			return n == "a" && pk == "i" && id == "w|1|2" && !faultedAt.Before(from) && !faultedAt.After(to)
		},
		jumped: func(time.Time, time.Time) bool { return false },
	}
	checkOneHolder(v, []execution{a, {Key: key, Node: "b", Start: at(150), End: at(200), Finished: true}}, shutdowns, map[string]bool{}, nodes)
	assert.Empty(t, v.all(), "a lock whose renewal met a fault may lapse in the grace")
	faultedAt = at(1000)
	checkOneHolder(v, []execution{a, {Key: key, Node: "b", Start: at(150), End: at(200), Finished: true}}, shutdowns, map[string]bool{}, nodes)
	require.Len(t, v.all(), 1, "a fault after the other start excuses nothing")
}

func TestATimerStampedBeforeItsDueTimeIsEarly(t *testing.T) {
	src := uint64(2)
	fired := func(dueMs, stampMs uint64) cdb.Event {
		return cdb.Event{EventID: 3, SourceEventID: &src, TimestampMs: stampMs, Kind: cdb.TimerFired{FireAtMs: dueMs}}
	}
	v := &violations{}
	checkHistory(v, "i", 1, []cdb.Event{fired(10_000, 10_010)}, 50*time.Millisecond)
	checkHistory(v, "i", 1, []cdb.Event{fired(10_000, 9_960)}, 50*time.Millisecond)
	require.Empty(t, v.all(), "on time, and early within the skew")
	checkHistory(v, "i", 1, []cdb.Event{fired(10_000+3_600_000, 10_000)}, 50*time.Millisecond)
	require.Len(t, v.all(), 1)
	assert.Equal(t, invTimerNotEarly, v.all()[0].Invariant)
}

func TestStampsFlagAWriterWhoseStampedItemsOthersTake(t *testing.T) {
	crashed := map[string]bool{}
	s := newStamps(func(n string) bool { return crashed[n] })
	for i := range 20 {
		key := stampKey{pk: "p", id: fmt.Sprint(i)}
		s.open[key] = "w"
		taker := "w"
		if i%4 != 0 {
			taker = "other" // three quarters taken by another process
		}
		s.consumed(taker, key)
	}
	s.open[stampKey{pk: "p", id: "x"}] = "z"
	s.consumed("z", stampKey{pk: "p", id: "x"})
	// A rolled-back batch (207) consumes nothing: w's item is another's
	// only once a batch of another commits.
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(t, err)
	req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["p"]`)
	s.open[stampKey{pk: "p", id: "y"}] = "z"
	s.observe("other", req, []byte(`[{"operationType":"Delete","id":"y"}]`), http.StatusMultiStatus)
	s.observe("z", req, []byte(`[{"operationType":"Delete","id":"y"}]`), http.StatusOK)
	v := &violations{}
	s.check(v, func(string) string { return "poll=50ms" })
	require.Len(t, v.all(), 1)
	assert.Equal(t, invStampHonoured, v.all()[0].Invariant)
	assert.Contains(t, v.all()[0].Detail, "w stamped 20")
	assert.Equal(t, "w.others=15 w.own=5 z.own=2", s.summary(), "the rolled-back batch consumed nothing")
}

func TestEagerFlagsALiveWriterWhoseLockedItemsOthersTake(t *testing.T) {
	gone := map[string]bool{"dead": true}
	e := newEagerItems(func(n string) bool { return gone[n] }, time.Now)
	lockedBy := func(writer, id string) stampKey {
		key := stampKey{pk: "p", id: id}
		e.open[key] = writer
		return key
	}
	for i := range 20 {
		taker := "w"
		if i%4 != 0 {
			taker = "other" // three quarters taken by another process
		}
		e.consumed(taker, lockedBy("w", fmt.Sprint("w", i)))
	}
	for i := range 20 {
		taker := "kept"
		if i%2 == 0 {
			taker = "other" // half: not more than half
		}
		e.consumed(taker, lockedBy("kept", fmt.Sprint("k", i)))
	}
	for i := range 20 {
		e.consumed("other", lockedBy("dead", fmt.Sprint("d", i))) // a crashed writer's: taken over
	}
	v := &violations{}
	e.check(v, func(string) string { return "workers=2" })
	require.Len(t, v.all(), 1, "only the live writer that left three quarters to others")
	assert.Equal(t, invEagerTakenByWriter, v.all()[0].Invariant)
	assert.Contains(t, v.all()[0].Detail, "w locked 20 worker items to itself eagerly and took 5 itself: 15 were hidden")
	assert.Equal(t, "locked=0 by-writer=15 by-others=25 (lapsed 0, wait excused 0) given-back=0 taken-over=20 ended-unconsumed=0 open=0 expired-at-commit=0 writers-checked=2", e.summary())
}

// An item its writer handed out was taken by its writer, whoever acked it
// in the end: its runtime's lock may lapse after the hand-out (a renewal
// that failed under short locks), which one-holder judges. One whose
// give-back or refresh by its writer met a fault was left to expire by
// design. Neither is held against the writer; before, a node with short
// locks under faults was reported for its own runtime's lapses.
func TestEagerDoesNotHoldAgainstAWriterWhatItHandedOutOrLeftAfterAFault(t *testing.T) {
	e := newEagerItems(func(string) bool { return false }, time.Now)
	for i := range 20 {
		key := stampKey{pk: "p", id: fmt.Sprint("w", i)}
		e.open[key] = "w"
		e.items[key] = &eagerItem{writer: "w"}
		switch i % 4 {
		case 0:
			e.consumed("w", key)
		case 1, 2:
			e.handedOut("w", "p", key.id, time.Now())
			e.consumed("other", key) // its lock lapsed after the hand-out
		case 3:
			e.items[key].faultedWrite = true
			e.consumed("other", key)
		}
	}
	v := &violations{}
	e.check(v, func(string) string { return "" })
	assert.Empty(t, v.all())
	assert.Contains(t, e.summary(), "by-writer=15 by-others=0 (lapsed 5, wait excused 0)")
}

func TestEagerSeesItemsLockedInACommitAndTheWorkerAckThatConsumesThem(t *testing.T) {
	e := newEagerItems(func(n string) bool { return n == "gone" }, func() time.Time { return time.UnixMilli(10_000) })
	batch := func(node string, status int, ops ...string) {
		req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
		require.NoError(t, err)
		req.Header.Set("x-ms-cosmos-is-batch-request", "true")
		req.Header.Set("x-ms-documentdb-partitionkey", `["p"]`)
		e.observe(node, req, []byte("["+strings.Join(ops, ",")+"]"), status, 0)
	}
	create := func(id, lockToken string, lockedUntil int) string {
		return fmt.Sprintf(`{"operationType":"Create","resourceBody":{"id":%q,"type":"work","lockToken":%q,"lockedUntil":%d}}`, id, lockToken, lockedUntil)
	}
	del := func(id string) string { return fmt.Sprintf(`{"operationType":"Delete","id":%q}`, id) }
	completion := `{"operationType":"Create","resourceBody":{"id":"m|w|t","type":"msg"}}`
	instance := `{"operationType":"Replace","id":"inst","resourceBody":{"id":"inst","type":"inst"}}`
	fence := `{"operationType":"Patch","id":"inst"}`
	tombstone := func(id string) string {
		return fmt.Sprintf(`{"operationType":"Upsert","resourceBody":{"id":%q,"type":"work-x"}}`, id)
	}

	batch("a", http.StatusOK, instance, create("w|1|1", "work_t.1.1", 13_000), create("w|1|2", "work_t.1.2", 13_000),
		create("w|1|3", "", 0), create("w|1|4", "work_t.1.4", 9_000), create("w|1|5", "work_t.1.5", 13_000),
		create("w|1|6", "work_t.1.6", 13_000))
	batch("gone", http.StatusOK, instance, create("w|1|7", "work_u.1.7", 13_000))
	batch("a", http.StatusMultiStatus, create("w|1|9", "work_v.1.9", 13_000)) // rolled back
	batch("a", http.StatusOK, del("w|1|1"), completion)                       // the writer's ack
	batch("b", http.StatusMultiStatus, del("w|1|2"), completion)              // refused: not consumed
	batch("b", http.StatusOK, del("w|1|2"), completion)                       // another's, after the lock expired
	batch("c", http.StatusOK, del("w|1|3"), completion)                       // never locked eagerly
	batch("b", http.StatusOK, del("w|1|7"), completion)                       // a crashed writer's, taken over
	batch("d", http.StatusOK, fence, del("w|1|4"))                            // the instance's deletion
	batch("a", http.StatusOK, instance, tombstone("w|1|5"))                   // cancelled
	renew := `{"operationType":"Patch","id":"w|1|6","resourceBody":{"operations":[{"op":"set","path":"/lockedUntil","value":20000}]}}`
	batch("a", http.StatusOK, renew) // a renewal gives nothing back
	patch := func(node, id, token string) {
		req, err := http.NewRequest(http.MethodPatch, "https://acct/dbs/d/colls/c/docs/"+id, nil)
		require.NoError(t, err)
		req.Header.Set("x-ms-documentdb-partitionkey", `["p"]`)
		e.observe(node, req, []byte(fmt.Sprintf(`{"operations":[{"op":"set","path":"/lockToken","value":%q},{"op":"set","path":"/lockedUntil","value":0}]}`, token)), http.StatusOK, 0)
	}
	patch("b", "w|1|6", "")                             // not the writer's: no give-back of its
	patch("a", "w|1|6", "")                             // the writer gives it back
	batch("b", http.StatusOK, del("w|1|6"), completion) // then anyone takes it: not held against the writer
	assert.Equal(t, "locked=6 by-writer=1 by-others=1 (lapsed 0, wait excused 0) given-back=1 taken-over=1 ended-unconsumed=2 open=0 expired-at-commit=1 writers-checked=0", e.summary())
}

func TestEagerStartsSeeStartsLockedInTheirBatchAndTheAckThatConsumesThem(t *testing.T) {
	e := newEagerStartItems(func(n string) bool { return n == "gone" }, func() time.Time { return time.UnixMilli(10_000) })
	batch := func(node, pk string, ops ...string) {
		req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
		require.NoError(t, err)
		req.Header.Set("x-ms-cosmos-is-batch-request", "true")
		req.Header.Set("x-ms-documentdb-partitionkey", `["`+pk+`"]`)
		e.observe(node, req, []byte("["+strings.Join(ops, ",")+"]"), http.StatusOK, 0)
	}
	start := func(id, lockToken string) string {
		return fmt.Sprintf(`{"operationType":"Create","resourceBody":{"id":"inst","type":"inst","lockToken":%q}},{"operationType":"Create","resourceBody":{"id":%q,"type":"msg","lockToken":%q,"lockedUntil":13000,"item":"{\"StartOrchestration\":{}}"}}`, lockToken, id, lockToken)
	}
	consume := func(id string) string {
		return `{"operationType":"Replace","id":"inst","resourceBody":{"id":"inst","type":"inst"}},` +
			fmt.Sprintf(`{"operationType":"Replace","id":%q,"resourceBody":{"id":%q,"type":"consumed"}}`, id, id)
	}
	batch("a", "i1", start("m|1", "lock_1"))
	batch("a", "i2", start("m|2", "lock_2"))
	batch("a", "i3", start("m|3", ""))
	batch("gone", "i4", start("m|4", "lock_4"))
	batch("a", "i1", consume("m|1")) // the writer's first turn
	batch("b", "i2", consume("m|2")) // another's, after the lock expired
	batch("b", "i3", consume("m|3")) // never locked eagerly
	batch("b", "i4", consume("m|4")) // a crashed writer's, taken over
	batch("a", "i5", start("m|5", "lock_5"))
	batch("a", "i5", `{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":""}]}},`+
		`{"operationType":"Patch","id":"m|5","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":""},{"op":"set","path":"/lockedUntil","value":0}]}}`) // given back
	batch("b", "i5", consume("m|5"))
	batch("a", "i6", `{"operationType":"Create","resourceBody":{"id":"inst","type":"inst","lastAck":"lock_6"}}`, // a start written by its first turn
		`{"operationType":"Create","resourceBody":{"id":"m|w|x","type":"msg","lockToken":"lock_chain.6","item":"{\"ActivityCompleted\":{}}"}}`) // a chained completion: not a start
	assert.True(t, strings.HasPrefix(e.summary(), "locked=4 by-writer=1 by-others=1 (lapsed 0, wait excused 0) given-back=1 taken-over=1 ended-unconsumed=0 open=0 expired-at-commit=0 writers-checked=0 written-by-first-turn=1 "), e.summary())
}
