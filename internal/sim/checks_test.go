package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The checks of the long-sequence, production-lock, cancellation, close
// and lost-first-turn scenarios, each shown firing on a crafted record.

// eagerScript drives a worker eager observer with batches of one
// partition, at wall times of the test's choosing (the account's clock is
// the wall clock here).
type eagerScript struct {
	t   *testing.T
	e   *eagerItems
	now time.Time
}

func newEagerScript(t *testing.T) *eagerScript {
	s := &eagerScript{t: t, now: time.UnixMilli(1_000_000)}
	s.e = newEagerItems(func(string) bool { return false }, func() time.Time { return s.now })
	s.e.wall = func() time.Time { return s.now }
	return s
}

func (s *eagerScript) at(ms int) { s.now = time.UnixMilli(1_000_000 + int64(ms)) }

func (s *eagerScript) batch(node string, ops ...string) { s.batchIn("p", node, ops...) }

func (s *eagerScript) batchIn(pk, node string, ops ...string) { s.batchAt(0, pk, node, ops...) }

// batchAt is a batch whose answer carried lsn (0: none).
func (s *eagerScript) batchAt(lsn int64, pk, node string, ops ...string) {
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(s.t, err)
	req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["`+pk+`"]`)
	s.e.observe(node, req, []byte("["+strings.Join(ops, ",")+"]"), http.StatusOK, lsn)
}

// eagerNodesHeldBy is what the hidden-items check knows of nodes none of
// which went down or saw a clock jump, with a 50ms poll interval and a
// bound of 600ms; heldBack is the writer's stalls.
func eagerNodesHeldBy(heldBack func(node, pk string, from, to time.Time) (time.Time, bool)) eagerNodes {
	return eagerNodes{gone: func(string, time.Time) bool { return false }, jumped: func(time.Time, time.Time) bool { return false },
		heldBack: heldBack, poll: func(string) time.Duration { return 50 * time.Millisecond }, slack: 500 * time.Millisecond}
}

// notHeldBack is a writer that never stalled.
func notHeldBack(string, string, time.Time, time.Time) (time.Time, bool) { return time.Time{}, false }

// lock is a commit's create of worker item id locked for lockMs from now.
func (s *eagerScript) lock(id string, lockMs int) string {
	return fmt.Sprintf(`{"operationType":"Create","resourceBody":{"id":%q,"type":"work","lockToken":"work_t.%s","lockedUntil":%d}}`,
		id, id, s.now.UnixMilli()+int64(lockMs))
}

func eagerPatch(id, token string) string {
	return fmt.Sprintf(`{"operationType":"Patch","id":%q,"resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":%q}]}}`, id, token)
}

func TestEagerNotHiddenFlagsAnItemItsLiveWriterLeftLockedUntilItsLockExpired(t *testing.T) {
	s := newEagerScript(t)
	s.batch("a", s.lock("w|1|1", 3000), s.lock("w|1|2", 3000), s.lock("w|1|3", 3000), s.lock("w|1|4", 3000), s.lock("w|1|6", 300),
		s.lock("w|1|7", 3000))
	s.batchIn("q", "a", s.lock("w|1|5", 3000))
	s.at(40)
	s.e.handedOut("a", "p", "w|1|1", s.now) // taken at once
	s.at(2500)
	s.batch("a", eagerPatch("w|1|2", "")) // given back late, but before its expiry: not hidden for its lock
	s.at(3100)
	s.batch("b", eagerPatch("w|1|3", "work_b")) // claimed by another after it expired: hidden
	s.batch("b", eagerPatch("w|1|4", "work_b")) // the same, but the writer's give-back met a fault
	s.e.items[stampKey{"p", "w|1|4"}].faultedWrite = true
	s.batchIn("q", "b", eagerPatch("w|1|5", "work_b")) // the same, but the writer drew faults on its partition until 2500
	s.batch("b", eagerPatch("w|1|6", "work_b"))        // a lock shorter than the bound
	s.batch("a", eagerPatch("w|1|7", ""))              // given back, late: the writer did not leave it to its expiry

	heldUntil := time.UnixMilli(1_002_500)
	nodes := eagerNodes{
		gone:   func(string, time.Time) bool { return false },
		jumped: func(time.Time, time.Time) bool { return false },
		heldBack: func(node, pk string, from, to time.Time) (time.Time, bool) {
			return heldUntil, node == "a" && pk == "q" && !heldUntil.Before(from) && !heldUntil.After(to)
		},
		poll:  func(string) time.Duration { return 50 * time.Millisecond },
		slack: 500 * time.Millisecond, // the bound is 600ms
	}
	v := &violations{}
	s.e.checkNotHidden(v, nodes, s.now)
	require.Len(t, v.all(), 1)
	assert.Equal(t, invEagerNotHidden, v.all()[0].Invariant)
	assert.Equal(t, "p", v.all()[0].Instance)
	assert.Contains(t, v.all()[0].Detail, "worker item w|1|3, locked to a by its commit")
	assert.Contains(t, v.all()[0].Detail, "waited 3s for it (bound 600ms) until taken by b")
	assert.Contains(t, s.e.hiddenSummary(), "given-back=2 handed-out=1 taken=4 still-locked=0; expired waiting=4")
	assert.Contains(t, s.e.hiddenSummary(), "excused=1, hidden=1")
}

func TestEagerNotHiddenJudgesAStillLockedItemAtTheEnd(t *testing.T) {
	s := newEagerScript(t)
	s.batch("a", s.lock("w|1|1", 1000))
	s.at(5000)
	v := &violations{}
	s.e.checkNotHidden(v, eagerNodes{gone: func(string, time.Time) bool { return false }, jumped: func(time.Time, time.Time) bool { return false },
		heldBack: func(string, string, time.Time, time.Time) (time.Time, bool) { return time.Time{}, false },
		poll:     func(string) time.Duration { return 50 * time.Millisecond }, slack: 100 * time.Millisecond}, s.now)
	require.Len(t, v.all(), 1)
	assert.Contains(t, v.all()[0].Detail, "until still locked")
	// A writer gone by the expiry is close-gives-back's to judge.
	v = &violations{}
	s.e.checkNotHidden(v, eagerNodes{gone: func(string, time.Time) bool { return true }, jumped: func(time.Time, time.Time) bool { return false },
		heldBack: func(string, string, time.Time, time.Time) (time.Time, bool) { return time.Time{}, false },
		poll:     func(string) time.Duration { return 50 * time.Millisecond }, slack: 100 * time.Millisecond}, s.now)
	assert.Empty(t, v.all())
}

// The account applies a batch before its transport reports it, so a
// deletion's sweep of items a commit locked may be reported before the
// commit is (soak seed 12404288: an eager commit answered 32ms after the
// forced deletion that swept its 13 items, which then read as waiting for
// their writer until their 25s locks expired). The lsns order them: a
// creation older than the removal already seen is of an item gone, and a
// newer one (a new life's item of the same id) waits as any other.
func TestEagerNotHiddenOrdersACreationReportedAfterTheRemovalOfItsItemByLsn(t *testing.T) {
	s := newEagerScript(t)
	sweep := `{"operationType":"Patch","id":"inst"},{"operationType":"Delete","id":"w|1|1"},{"operationType":"Delete","id":"w|1|2"}`
	s.batchAt(20, "p", "a", sweep)
	s.batchAt(10, "p", "a", s.lock("w|1|1", 1000)) // applied before the sweep, reported after it
	s.batchAt(30, "p", "a", s.lock("w|1|2", 1000)) // applied after it
	s.at(5000)
	v := &violations{}
	s.e.checkNotHidden(v, eagerNodesHeldBy(notHeldBack), s.now)
	require.Len(t, v.all(), 1, "only the item created after the sweep waited for its writer")
	assert.Contains(t, v.all()[0].Detail, "worker item w|1|2, locked to a")
	assert.Contains(t, s.e.hiddenSummary(), "removed=1 still-locked=1")
	assert.Contains(t, s.e.summary(), "ended-unconsumed=1 open=1")
}

// A writer's items others took after their locks expired are held
// against it (eager-taken-by-writer) only when the hidden-items check
// could not excuse their wait: a writer stalled on the partition until
// shortly before the locks expired could not have served them (soak seed
// 12404281: a one-worker node's 10 of 19 items, taken by others once their
// 531ms locks lapsed, each judged within its bound by eager-not-hidden).
func TestEagerTakenByWriterExcusesWhatTheHiddenCheckExcused(t *testing.T) {
	for name, stalled := range map[string]bool{"stalled": true, "not stalled": false} {
		t.Run(name, func(t *testing.T) {
			s := newEagerScript(t)
			var locks []string
			for i := range 14 {
				locks = append(locks, s.lock(fmt.Sprint("w|1|", i), 1000))
			}
			s.batch("a", locks...)
			for i := range 4 {
				s.batch("a", fmt.Sprintf(`{"operationType":"Delete","id":"w|1|%d"}`, i))
			}
			s.at(1100)
			for i := 4; i < 14; i++ {
				s.batch("b", eagerPatch(fmt.Sprint("w|1|", i), "work_b"))
				s.batch("b", fmt.Sprintf(`{"operationType":"Delete","id":"w|1|%d"}`, i))
			}
			heldUntil := s.now.Add(-1000 * time.Millisecond).Add(800 * time.Millisecond) // 200ms before the expiry
			held := func(node, pk string, from, to time.Time) (time.Time, bool) {
				return heldUntil, stalled && node == "a" && !heldUntil.Before(from) && !heldUntil.After(to)
			}
			v := &violations{}
			s.e.checkNotHidden(v, eagerNodesHeldBy(held), s.now)
			s.e.check(v, func(string) string { return "workers=1" })
			if stalled {
				assert.Empty(t, v.all())
				assert.Contains(t, s.e.summary(), "by-writer=4 by-others=10 (lapsed 0, wait excused 10)")
				return
			}
			invariants := map[string]int{}
			for _, x := range v.all() {
				invariants[x.Invariant]++
			}
			assert.Equal(t, map[string]int{invEagerNotHidden: 10, invEagerTakenByWriter: 1}, invariants)
		})
	}
}

func TestCancelledNotStartedFlagsAHandOutAfterItsNodesCancellingAckOrDeletion(t *testing.T) {
	v := &violations{}
	r := newRecorder(v)
	r.cancels = newCancelWatch()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	created := func(instance, id, run string, ms int) {
		r.cancels.created[stampKey{instance, id}] = append(r.cancels.created[stampKey{instance, id}], workCreate{at: at(ms), run: run})
	}
	handOut := func(node, instance string, exec, id uint64, run string, ms int) {
		input := fmt.Sprintf(`{"r":%q,"i":1}`, run)
		r.handedOut(node, cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: exec, ID: id, Input: input}, at(ms))
	}
	// i1: a's ack cancelled activities 3 and 4 at 100; a hands 3 out at
	// 150 (a violation), 4 at 90 (before the ack returned); b hands 3 out
	// at 160 (another node's cancellation: counted).
	created("i1", "w|1|3", "1.0", 0)
	created("i1", "w|1|4", "1.0", 0)
	r.cancelAcked("a", []cdb.ScheduledActivityIdentifier{{Instance: "i1", ExecutionID: 1, ActivityID: 3}, {Instance: "i1", ExecutionID: 1, ActivityID: 4}}, at(100))
	handOut("a", "i1", 1, 3, "1.0", 150)
	handOut("a", "i1", 1, 3, "1.0", 104) // within the slack: decided as the cancellation went out
	handOut("a", "i1", 1, 4, "1.0", 90)
	handOut("b", "i1", 1, 3, "1.0", 160)
	// i2: deleted through a; a removed w|1|5 (answer read at 200, plus a
	// slack of 5ms), the call returned at 300. Hand-outs at 204 (within
	// the slack), 210 (a violation), and of the id's next incarnation at 400.
	created("i2", "w|1|5", "2.0", 0)
	r.cancels.removedBy[stampKey{"i2", "w|1|5"}] = map[string]time.Time{"a": at(200)}
	r.deletedThrough("a", "i2", "2.0", at(300))
	handOut("a", "i2", 1, 5, "2.0", 204)
	handOut("a", "i2", 1, 5, "2.0", 210)
	handOut("a", "i2", 1, 5, "2.1", 400)

	tot := r.checkCancelled(v, 5*time.Millisecond)
	require.Len(t, v.all(), 2)
	for _, x := range v.all() {
		assert.Equal(t, invCancelledNotStarted, x.Invariant)
	}
	assert.Equal(t, "i1", v.all()[0].Instance)
	assert.Contains(t, v.all()[0].Detail, "i1 exec 1 activity 3 (run 1.0) was handed to a's runtime at "+stamp(at(150)))
	assert.Equal(t, "i2", v.all()[1].Instance)
	assert.Contains(t, v.all()[1].Detail, "i2 exec 1 activity 5 (run 2.0) was handed to a's runtime at "+stamp(at(210)))
	assert.Equal(t, "cancelled=2 handed-out-after-own-cancel=1 (as it went out 1) after-another-node's=1; deletions-through-holder=1 handed-out-after-own-deletion=1 after-another-node's=0", tot.String())
}

func TestOneHolderFlagsARunStartedWhileAHealthyProductionNodeRanIt(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	key := func(id uint64) activityKey { return activityKey{Instance: "i", Exec: 1, ID: id, Run: "0.0"} }
	run := func(id uint64, node string, from, to int) execution {
		return execution{Key: key(id), Node: node, Start: at(from), End: at(to), Finished: true}
	}
	execs := []execution{
		run(1, "prod", 0, 7000), run(1, "b", 5000, 5010), // a violation
		run(2, "prod", 0, 7000), run(2, "prod", 5000, 5010), // two of its own workers: a violation too
		run(3, "prod", 0, 7000), run(3, "b", 5000, 5010), // its renewal met a fault: excused
		run(4, "paused", 0, 7000), run(4, "b", 5000, 5010), // paused: excused
		run(5, "short", 0, 7000), run(5, "b", 5000, 5010), // short locks: counted
		run(6, "prod", 0, 4000), run(6, "b", 5000, 5010), // after it ended: fine
	}
	nodes := &holderNodes{
		long:   func(n string) bool { return n == "prod" || n == "paused" },
		paused: func(n string, _, _ time.Time) bool { return n == "paused" },
		writeFaulted: func(n, pk, id string, from, to time.Time) bool {
			return n == "prod" && pk == "i" && id == "w|1|3" && !at(2000).Before(from) && !at(2000).After(to)
		},
		jumped: func(time.Time, time.Time) bool { return false },
	}
	v := &violations{}
	checkOneHolder(v, execs, map[string]shutdownRecord{}, map[string]bool{}, nodes)
	require.Len(t, v.all(), 2)
	assert.Equal(t, invOneHolder, v.all()[0].Invariant)
	assert.Contains(t, v.all()[0].Detail, "i exec 1 activity 1 (run 0.0) started on b at "+stamp(at(5000))+" while it still ran on prod")
	assert.Contains(t, v.all()[1].Detail, "activity 2 (run 0.0) started on prod")
	assert.Equal(t, "overlaps on production nodes=4 (excused 2), on others=1 (their short locks expire under faults)", nodes.summary())
}

func TestCloseGivesBackFlagsWhatACleanCloseLeftLocked(t *testing.T) {
	s := newChainScript(t)
	closes := map[string]closeRecord{"a": {Began: time.UnixMilli(900), Ended: time.UnixMilli(1000), EndedMs: 10_000}}
	lockUntil := func(token string, until int) string {
		return fmt.Sprintf(`{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":%q},{"op":"set","path":"/lockedUntil","value":%d}]}}`, token, until)
	}
	// i1: locked by a's fetch as it closed, left until 13000, then taken by b.
	s.at(950)
	s.batch("a", "i1", 1, true, lockUntil("lock_a1", 13_000))
	s.at(4000)
	s.batch("b", "i1", 2, true, lockUntil("lock_b1", 16_000))
	// i2: a's chain, given back by the close.
	s.at(500)
	s.batch("a", "i2", 1, true, chainCommit("i2", "lock_2", "lock_chain.2"))
	s.at(960)
	s.batch("a", "i2", 2, true, chainRelease())
	// i3: a's lock that expires within the bound of the close's end.
	s.at(800)
	s.batch("a", "i3", 1, true, lockUntil("lock_a3", 10_050))
	// i4: a's chain, left open to the end of the run.
	s.at(700)
	s.batch("a", "i4", 1, true, chainCommit("i4", "lock_4", "lock_chain.4"))
	// i5: a's chain, which a deletion of a marked before the close (the
	// mark drops the chain without a write), swept by b after it.
	s.at(600)
	s.batch("a", "i5", 1, true, chainCommit("i5", "lock_5", "lock_chain.5"))
	s.at(700)
	s.batch("a", "i5", 2, true, `{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/deleting","value":"del-1"}]}}`)
	s.at(4000)
	s.batch("b", "i5", 3, true, `{"operationType":"Delete","id":"inst"}`)

	e := newEagerItems(func(string) bool { return false }, time.Now)
	item := func(id string, created, until int64) *eagerItem {
		it := &eagerItem{writer: "a", created: time.UnixMilli(created), createdMs: created * 10, until: until}
		e.items[stampKey{"p", id}] = it
		return it
	}
	item("w|1|1", 800, 13_000)                                                  // left: a violation
	item("w|1|2", 800, 13_000).end(eagerEndGivenBack, "a", time.UnixMilli(950)) // given back by the close
	it := item("w|1|3", 800, 13_000)                                            // its handler held it (R21)
	it.handedOut = true
	it.end(eagerEndHandedOut, "a", time.UnixMilli(850))
	item("w|1|4", 800, 13_000).end(eagerEndConsumed, "b", time.UnixMilli(500))                                               // ended before
	e.items[stampKey{"i5", "w|1|5"}] = &eagerItem{writer: "a", created: time.UnixMilli(650), createdMs: 6500, until: 13_000} // i5's deletion has it

	v := &violations{}
	notPaused := func(string, time.Time, time.Time) bool { return false }
	tot := checkCloses(v, closes, notPaused, s.c, e, func(string) time.Duration { return 100 * time.Millisecond })
	var details []string
	for _, x := range v.all() {
		assert.Equal(t, invCloseGivesBack, x.Invariant)
		detail := x.Detail[strings.Index(x.Detail, "with "):]
		if at := strings.Index(detail, " (the write that locked it: "); at >= 0 {
			detail = detail[:at] // when, on this machine's clock
		}
		details = append(details, x.Instance+": "+detail)
	}
	assert.Equal(t, []string{
		"i1: with the instance still locked with its token lock_a1 until 3s later",
		"i4: with the instance still locked with its token lock_chain.4 until 3s later",
		"p: with worker item w|1|1, which its commit locked to it eagerly and its runtime never took, still locked until 3s later",
	}, details)
	assert.Equal(t, "closes=1 (and 0 while paused) instances: given-back=1 left=2 (taken over after expiry 1) expiring-within-bound=1 marked-for-deletion=1; eager items: given-back=1 left=1 expiring-within-bound=0 handed-out-unacked=1 marked-for-deletion=1", tot.String())
}

func TestCloseGivesBackLeavesAClosePausedThroughoutAlone(t *testing.T) {
	s := newChainScript(t)
	closes := map[string]closeRecord{"a": {Began: time.UnixMilli(900), Ended: time.UnixMilli(1000), EndedMs: 10_000}}
	s.at(950)
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	v := &violations{}
	paused := func(node string, _, _ time.Time) bool { return node == "a" }
	tot := checkCloses(v, closes, paused, s.c, nil, func(string) time.Duration { return 100 * time.Millisecond })
	assert.Empty(t, v.all())
	assert.Contains(t, tot.String(), "closes=0 (and 1 while paused)")
}

// An item its live writer handed out without a renewal, or gave back, with
// less than a worker lock timeout (less a poll interval and the slack)
// left on its lock waited past its patience (eager-patience); a fault on
// the writer's give-back excuses it, and a host slower then than at the
// run's start widens the slack.
func TestEagerPatienceFlagsAnItemServedWithLessThanALockLeft(t *testing.T) {
	s := newEagerScript(t)
	// Locked for a 2 s worker lock and a 1 s patience.
	s.batch("a", s.lock("w|1|1", 3000), s.lock("w|1|2", 3000), s.lock("w|1|3", 3000), s.lock("w|1|4", 3000))
	s.at(400)
	s.e.handedOut("a", "p", "w|1|1", s.now) // 2.6 s left
	s.batch("a", eagerPatch("w|1|2", ""))   // given back at its patience, and a tick
	s.at(1900)
	s.batch("a", eagerPatch("w|1|3", "")) // given back with 1.1 s left: it waited 1.9 s
	s.batch("a", eagerPatch("w|1|4", "")) // the same, but an earlier give-back met a fault
	s.e.items[stampKey{"p", "w|1|4"}].faultedWrite = true

	nodes := eagerNodes{
		gone:       func(string, time.Time) bool { return false },
		jumped:     func(time.Time, time.Time) bool { return false },
		heldBack:   func(string, string, time.Time, time.Time) (time.Time, bool) { return time.Time{}, false },
		poll:       func(string) time.Duration { return 100 * time.Millisecond },
		workerLock: func(string) time.Duration { return 2 * time.Second },
		slack:      200 * time.Millisecond, // at least 1.7 s left
	}
	v := &violations{}
	s.e.checkNotHidden(v, nodes, s.now)
	require.Len(t, v.all(), 1)
	assert.Equal(t, invEagerPatience, v.all()[0].Invariant)
	assert.Contains(t, v.all()[0].Detail, "worker item w|1|3, locked to a by its commit")
	assert.Contains(t, v.all()[0].Detail, "was given-back at")
	assert.Contains(t, v.all()[0].Detail, "with 1.1s of its lock left (at least 1.7s")
	assert.Contains(t, s.e.hiddenSummary(), "patience judged=3")

	nodes.slower = func(time.Time, time.Time) time.Duration { return 600 * time.Millisecond }
	v = &violations{}
	s.e.checkNotHidden(v, nodes, s.now)
	assert.Empty(t, v.all(), "a host 600 ms slower while it waited than at the run's start: 1.1 s left is enough")
}

// A retention's TTL on a running instance's documents, or on a queue item,
// is out of its scope (retention-scoped); on a finished instance's with a
// retention it is where it belongs.
func TestRetentionScopedFlagsATTLGivenOutsideAFinishedInstance(t *testing.T) {
	ctx := context.Background()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ReconcileInterval: time.Hour})
	require.NoError(t, err)
	defer p.Close()
	put := func(doc string) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(doc), &m))
		_, err := p.Container().CreateItem(ctx, cdb.NewPartitionKeyString(m["pk"].(string)), []byte(doc), nil)
		require.NoError(t, err)
	}
	put(`{"id":"inst","pk":"done","type":"inst","status":"Completed","retainUntil":99}`)
	put(`{"id":"x|1","pk":"done","type":"exec","ttl":60,"retained":true}`)
	put(`{"id":"inst","pk":"live","type":"inst","status":"Running"}`)
	put(`{"id":"x|1","pk":"live","type":"exec","ttl":60,"retained":true}`)
	put(`{"id":"w|1|2","pk":"done","type":"work","ttl":60,"retained":true}`)

	v := &violations{}
	summary, err := checkRetention(ctx, v, p.Container())
	require.NoError(t, err)
	var details []string
	for _, x := range v.all() {
		assert.Equal(t, invRetentionScoped, x.Invariant)
		details = append(details, x.Instance+": "+x.Detail)
	}
	assert.ElementsMatch(t, []string{
		"done: queue item w|1|2 was given a retention's TTL",
		"live: 1 documents were given a retention's TTL (x|1 first) in a partition whose instance is Running without a retention",
	}, details)
	assert.Contains(t, summary, "finished instances with a retention=1")
}

// A host that got slower than the run measured at its start (other test
// binaries started since) widens the bound of an item that waited then, by
// the host's part of the slack scaled by the difference.
func TestEagerNotHiddenAllowsForAHostThatSlowedDownWhileTheItemWaited(t *testing.T) {
	s := newEagerScript(t)
	s.batch("a", s.lock("w|1|1", 3000), s.lock("w|1|2", 3000))
	s.at(3100)
	s.batch("b", eagerPatch("w|1|1", "work_b"), eagerPatch("w|1|2", "work_b")) // both hidden 3 s
	slowFrom := time.UnixMilli(1_000_000)
	nodes := eagerNodes{
		gone:     func(string, time.Time) bool { return false },
		jumped:   func(time.Time, time.Time) bool { return false },
		heldBack: func(string, string, time.Time, time.Time) (time.Time, bool) { return time.Time{}, false },
		poll:     func(string) time.Duration { return 50 * time.Millisecond },
		slack:    500 * time.Millisecond, // the bound is 600ms
		slower: func(from, to time.Time) time.Duration {
			if from.Before(slowFrom) {
				return 0
			}
			return 2500 * time.Millisecond // the host was that much slower while they waited
		},
	}
	v := &violations{}
	s.e.checkNotHidden(v, nodes, s.now)
	assert.Empty(t, v.all(), "a 3 s wait is within 600 ms and the 2.5 s the host's slowing adds")

	nodes.slower = func(time.Time, time.Time) time.Duration { return 0 }
	v = &violations{}
	s.e.checkNotHidden(v, nodes, s.now)
	assert.Len(t, v.all(), 2, "without it both were hidden")
}

// bellScript drives a bell watch with requests at wall times of the
// test's choosing (the account's clock is the wall clock here).
type bellScript struct {
	t   *testing.T
	b   *bellWatch
	now time.Time
}

func newBellScript(t *testing.T) *bellScript {
	s := &bellScript{t: t, now: time.UnixMilli(1_000_000)}
	s.b = newBellWatch(func() time.Time { return s.now })
	s.b.wall = func() time.Time { return s.now }
	return s
}

func (s *bellScript) at(ms int) { s.now = time.UnixMilli(1_000_000 + int64(ms)) }

// patchBell is node's patch of the bell with ops (JSON objects).
func (s *bellScript) patchBell(node string, ops ...string) {
	req, err := http.NewRequest(http.MethodPatch, "https://acct/dbs/d/colls/c/docs/bell", nil)
	require.NoError(s.t, err)
	req.Header.Set("x-ms-documentdb-partitionkey", `["bell|bell"]`)
	s.b.observe(node, req, []byte(`{"operations":[`+strings.Join(ops, ",")+`]}`), http.StatusOK)
}

func (s *bellScript) listen(node string) {
	s.patchBell(node, fmt.Sprintf(`{"op":"set","path":"/listeners/%s","value":%d}`, node, s.now.UnixMilli()+30_000))
}

func (s *bellScript) ring(node, queue string) {
	s.patchBell(node, fmt.Sprintf(`{"op":"incr","path":"/%s","value":1}`, queue))
}

// write is node's batch creating a queue item of type typ, visible now
// unless lockToken says it is locked.
func (s *bellScript) write(node, pk, id, typ, lockToken string) {
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(s.t, err)
	req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["`+pk+`"]`)
	body := fmt.Sprintf(`[{"operationType":"Create","resourceBody":{"id":%q,"type":%q,"lockToken":%q,"visibleAt":%d}}]`, id, typ, lockToken, s.now.UnixMilli())
	s.b.observe(node, req, []byte(body), http.StatusOK)
}

// A write of work visible at once, by a node whose view of the bell must
// list another listener, is followed by its ring of that queue within the
// ring gap and the slack; work written before the listener could be in
// every view, locked work, and a writer that stalled on the bell are not
// held against it.
func TestBellRungFlagsAWriteOfWorkNotRungWhileAnotherProcessListened(t *testing.T) {
	s := newBellScript(t)
	s.listen("l")
	s.at(1000)
	s.write("w", "p1", "m|early", "msg", "") // the listing may be in no view yet
	s.at(6000)
	s.write("w", "p2", "m|rung", "msg", "")
	s.at(6010)
	s.ring("w", "orchestrator")
	s.write("w", "p3", "w|1|1", "work", "") // the worker queue's bell never rings
	s.write("w", "p4", "m|w|t", "msg", "lock_chain.x")
	s.write("x", "p5", "m|stalled", "msg", "")
	s.write("w", "p6", "m|refused", "msg", "") // a refused start's message, removed at once
	req, err := http.NewRequest(http.MethodDelete, "https://acct/dbs/d/colls/c/docs/m|refused", nil)
	require.NoError(t, err)
	req.Header.Set("x-ms-documentdb-partitionkey", `["p6"]`)
	s.b.observe("w", req, nil, http.StatusNoContent)
	s.at(20_000)
	nodes := bellNodes{gone: func(string, time.Time) bool { return false }, jumped: func(time.Time, time.Time) bool { return false },
		stalled: func(node, pk string, from, to time.Time) bool { return node == "x" && pk == "bell|bell" },
		poll:    func(string) time.Duration { return 40 * time.Millisecond }, slack: 100 * time.Millisecond}
	v := &violations{}
	s.b.check(v, nodes, s.now)
	require.Len(t, v.all(), 1)
	assert.Equal(t, invBellRung, v.all()[0].Invariant)
	assert.Equal(t, "p3", v.all()[0].Instance)
	assert.Contains(t, v.all()[0].Detail, "w wrote w|1|1 (the worker queue's)")
	assert.Equal(t, "listings=1 leaves=0 rings=1 writes of work visible at once=5 (gone by the bound 1; judged 3: rung in time 1, excused 1, late 1)", s.b.summary())

	// A listener that left is not heard: nothing is judged after its leave.
	s = newBellScript(t)
	s.listen("l")
	s.at(6000)
	s.patchBell("l", `{"op":"remove","path":"/listeners/l"}`)
	s.write("w", "p", "m|1", "msg", "")
	s.at(20_000)
	v = &violations{}
	s.b.check(v, nodes, s.now)
	assert.Empty(t, v.all())
	assert.Contains(t, s.b.summary(), "judged 0:")

	// An outbox or a deletion intent still there at the bound rings the
	// chores' counter, which the reconciler's looks wait on.
	s = newBellScript(t)
	s.listen("l")
	s.at(6000)
	s.write("w", "p1", "o|rung", "outbox", "")
	s.write("y", "p2", "d|unrung", "delete", "")
	s.at(6010)
	s.ring("w", "chores")
	s.at(20_000)
	v = &violations{}
	s.b.check(v, nodes, s.now)
	require.Len(t, v.all(), 1)
	assert.Contains(t, v.all()[0].Detail, "y wrote d|unrung (the chores queue's)")
}

// A ring that came late because the host was slower than the run measured
// it (other test binaries started since) is given that much more time, as
// the hidden items' bound is: the bound's host part scales with the host.
func TestBellRungWidensItsBoundForAHostSlowerThanMeasured(t *testing.T) {
	s := newBellScript(t)
	s.listen("l")
	s.at(6000)
	s.write("w", "p", "m|slow", "msg", "")
	s.at(6500)
	s.ring("w", "orchestrator") // 500 ms late for a bound of 110 ms
	s.at(20_000)
	nodes := bellNodes{gone: func(string, time.Time) bool { return false }, jumped: func(time.Time, time.Time) bool { return false },
		stalled: func(string, string, time.Time, time.Time) bool { return false },
		poll:    func(string) time.Duration { return 40 * time.Millisecond }, slack: 100 * time.Millisecond}
	v := &violations{}
	s.b.check(v, nodes, s.now)
	require.Len(t, v.all(), 1, "late on a host as fast as measured")

	nodes.slower = func(time.Time, time.Time) time.Duration { return time.Second }
	v = &violations{}
	s.b.check(v, nodes, s.now)
	assert.Empty(t, v.all(), "in time for a host a second's worth slower")
}
