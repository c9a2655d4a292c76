package sim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainScript drives a chainedTurns observer with the writes of a test:
// each a batch of one partition, numbered by the account's LSN.
type chainScript struct {
	t *testing.T
	c *chainedTurns
}

func newChainScript(t *testing.T, gone ...string) *chainScript {
	isGone := func(node string, _ time.Time) bool { return slices.Contains(gone, node) }
	nodes := chainNodes{gone: isGone, stalled: func(string, string, time.Time, time.Time) bool { return false },
		poll: func(string) time.Duration { return 50 * time.Millisecond }}
	return &chainScript{t: t, c: newChainedTurns(nodes, func() time.Time { return time.UnixMilli(10_000) }, 50*time.Millisecond, 0)}
}

// batch reports a committed batch of node on partition pk at lsn.
func (s *chainScript) batch(node, pk string, lsn int, answered bool, ops ...string) {
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(s.t, err)
	req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["`+pk+`"]`)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
	resp.Header.Set("lsn", strconv.Itoa(lsn))
	s.c.observe(node, req, []byte("["+strings.Join(ops, ",")+"]"), resp, answered)
}

// commit is an ack's write of the instance document: locked with a chain
// token until 13000 when chain is set, acking with ack.
func chainCommit(instance, ack, chain string) string {
	until := 0
	if chain != "" {
		until = 13_000
	}
	return fmt.Sprintf(`{"operationType":"Replace","id":"inst","resourceBody":{"id":"inst","type":"inst","instance":%q,"lockToken":%q,"lockedUntil":%d,"lastAck":%q}}`,
		instance, chain, until, ack)
}

// claimed is a worker ack's completion written claimed with chain.
func chainClaimed(id, chain string, until, attempts int) string {
	return fmt.Sprintf(`{"operationType":"Delete","id":"w|%s"},{"operationType":"Create","resourceBody":{"id":%q,"type":"msg","lockToken":%q,"lockedUntil":%d,"attempts":%d}}`,
		id, id, chain, until, attempts)
}

// query reports node's query of partition pk under token at the wall
// time at (ms); answered says whether its answer reached the node.
func (s *chainScript) query(node, pk, token string, at int, answered bool) {
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(s.t, err)
	req.Header.Set("x-ms-documentdb-isquery", "true")
	req.Header.Set("x-ms-documentdb-partitionkey", `["`+pk+`"]`)
	body := fmt.Sprintf(`{"query":"SELECT * FROM c","parameters":[{"name":"@pk","value":%q},{"name":"@token","value":%q}]}`, pk, token)
	s.at(at)
	s.c.observe(node, req, []byte(body), &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, answered)
}

// at sets the wall time of the reports that follow to ms.
func (s *chainScript) at(ms int) { s.c.wall = func() time.Time { return time.UnixMilli(int64(ms)) } }

func chainRelease() string {
	return `{"operationType":"Patch","id":"inst","resourceBody":{"operations":[{"op":"set","path":"/lockToken","value":""},{"op":"set","path":"/lockedUntil","value":0}]}}`
}

func chainLock(token string) string {
	return fmt.Sprintf(`{"operationType":"Patch","id":"inst","resourceBody":{"condition":"from c where c.lockedUntil <= 1","operations":[{"op":"set","path":"/lockToken","value":%q},{"op":"set","path":"/lockedUntil","value":99999}]}}`, token)
}

// chainOpen is a worker ack's patch of the instance's lock for a chain it
// opens, until 13000.
func chainOpen(token string) string {
	return fmt.Sprintf(`{"operationType":"Patch","id":"inst","resourceBody":{"condition":"from c where c.lockedUntil <= 1","operations":[{"op":"set","path":"/lockToken","value":%q},{"op":"set","path":"/lockedUntil","value":13000}]}}`, token)
}

func chainTouch(kind, id string) string { return fmt.Sprintf(`{"operationType":%q,"id":%q}`, kind, id) }

func TestChainsFollowEachChainToItsEnd(t *testing.T) {
	s := newChainScript(t, "dead")
	// By the writer: its chained turn acks with the chain's token and
	// consumes the completion, and chains again.
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	s.batch("a", "i1", 2, true, chainClaimed("m|1", "lock_chain.1", 13_000, 1))
	s.batch("a", "i1", 3, true, chainCommit("i1", "lock_chain.1", "lock_chain.chain.1"), chainTouch("Delete", "m|1"))
	// Given back, its completion unlocked with it.
	s.batch("a", "i1", 4, true, chainClaimed("m|2", "lock_chain.chain.1", 13_000, 1))
	s.batch("a", "i1", 5, true, chainRelease(), chainTouch("Patch", "m|2"))
	// Taken over: the writer crashed.
	s.batch("dead", "i2", 1, true, chainCommit("i2", "lock_2", "lock_chain.2"))
	s.batch("b", "i2", 2, true, chainLock("lock_b2"))
	// Deleted, and one still open.
	s.batch("a", "i3", 1, true, chainCommit("i3", "lock_3", "lock_chain.3"))
	s.batch("d", "i3", 2, true, chainTouch("Patch", "inst"), chainTouch("Delete", "inst"))
	s.batch("a", "i4", 1, true, chainCommit("i4", "lock_4", "lock_chain.4"))
	// A read from the primary (a batch of reads) leaves the chain as it is.
	s.batch("b", "i4", 2, true, `{"operationType":"Read","id":"inst"}`)
	// Not a chain: an ack that releases the lock.
	s.batch("a", "i5", 1, true, chainCommit("i5", "lock_5", ""))

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	assert.Empty(t, v.all())
	assert.Equal(t, "chains=5 opened-by-acks=0 by-writer=1 released=1 taken-over=1 open=1 claimed-completions=2 taken-from-live=0 (lapsed 0) deleted=1 left-claimed=0 excused=0 writers-checked=0 read=0 unread=1 unread-excused=0", s.c.summary())
}

func TestChainsReplayAPartitionInTheAccountsOrder(t *testing.T) {
	s := newChainScript(t)
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	// The lock batch that followed the give-back is reported first.
	s.batch("b", "i1", 3, true, chainLock("lock_b1"))
	s.batch("a", "i1", 2, true, chainRelease())

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	assert.Empty(t, v.all(), "the account released the chain before the lock batch took the instance")
	assert.Contains(t, s.c.summary(), "chains=1 opened-by-acks=0 by-writer=0 released=1 taken-over=0 open=0")
}

func TestChainsFlagALockThatTakesALiveWritersChainBeforeItExpired(t *testing.T) {
	s := newChainScript(t)
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	s.batch("b", "i1", 2, true, chainLock("lock_b1")) // the account's clock reads 10000: 3 s early
	s.batch("a", "i2", 1, true, `{"operationType":"Replace","id":"inst","resourceBody":{"instance":"i2","lockToken":"lock_chain.2","lockedUntil":10040}}`)
	s.batch("b", "i2", 2, true, chainLock("lock_b2")) // 40 ms early: within the skew

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	require.Len(t, v.all(), 1)
	assert.Equal(t, Violation{Invariant: invChainTakenEarly, Instance: "i1",
		Detail: "b took the instance (lsn 2) 3000 ms before chain lock_chain.1 of a, which was up, expired (at 13000 on the account's clock)"}, v.all()[0])
	assert.Contains(t, s.c.summary(), "taken-over=2 open=0 claimed-completions=0 taken-from-live=2 (lapsed 0)")
}

func TestChainsFlagACompletionLeftClaimedWhenItsChainEnded(t *testing.T) {
	s := newChainScript(t, "dead")
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	s.batch("a", "i1", 2, true, chainClaimed("m|1", "lock_chain.1", 13_000, 1))
	s.batch("a", "i1", 3, false, chainClaimed("m|2", "lock_chain.1", 13_000, 1)) // its answer was lost
	s.batch("a", "i1", 4, true, chainRelease())                                  // unlocks neither
	s.batch("a", "i1", 5, true, chainClaimed("m|3", "lock_chain.1", 13_000, 1))  // after the give-back
	s.batch("dead", "i2", 1, true, chainCommit("i2", "lock_2", "lock_chain.2"))
	s.batch("dead", "i2", 2, true, chainClaimed("m|4", "lock_chain.2", 13_000, 1))
	s.batch("dead", "i2", 3, true, chainCommit("i2", "lock_chain.2", "")) // its writer was gone by then
	s.batch("a", "i3", 1, true, chainClaimed("m|5", "lock_chain.9", 13_000, 1))
	s.batch("a", "i4", 1, true, chainCommit("i4", "lock_4", "lock_chain.4"))
	s.batch("a", "i4", 2, true, chainClaimed("m|6", "lock_chain.4", 14_000, 2))

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	details := []string{}
	for _, x := range v.all() {
		assert.Equal(t, invChainClaims, x.Invariant)
		details = append(details, x.Instance+": "+x.Detail)
	}
	assert.Equal(t, []string{
		"i1: completion m|1, written by a claimed with chain lock_chain.1, was left claimed until 13000: a ended the chain released (lsn 4) without consuming or unlocking it",
		"i1: completion m|3, written by a claimed with chain lock_chain.1, was left claimed until 13000: it was written (lsn 5) after the chain ended released",
		": a wrote completion m|5 of partition i3 claimed with lock_chain.9 (lsn 1), a token no instance document carried, and never released it",
		"i4: a wrote completion m|6 claimed with chain lock_chain.4 of a (lsn 2) with expiry 14000 and 2 attempts; the chain's expiry is 13000",
	}, details)
	assert.Contains(t, s.c.summary(), "left-claimed=5 excused=2")
}

// A chain a worker ack opens (its batch patches the instance's lock) is
// followed as a commit's: a sibling's completion claimed with it may land
// before the opening, and one claimed into an opening that was refused
// (another held the instance) is released by its writer.
func TestChainsFollowAChainAWorkerAckOpens(t *testing.T) {
	s := newChainScript(t)
	s.batch("a", "i1", 1, true, chainClaimed("m|2", "lock_chain.1", 13_000, 1)) // the sibling's lands first
	s.batch("a", "i1", 2, true, chainClaimed("m|1", "lock_chain.1", 13_000, 1), chainOpen("lock_chain.1"))
	s.batch("a", "i1", 3, true, chainCommit("i1", "lock_chain.1", ""), chainTouch("Delete", "m|1"), chainTouch("Delete", "m|2"))
	s.batch("a", "i2", 1, true, chainClaimed("m|3", "lock_chain.2", 13_000, 1))
	s.batch("a", "i2", 2, true, chainTouch("Patch", "m|3")) // released: the opening was refused

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	assert.Empty(t, v.all())
	assert.Contains(t, s.c.summary(), "chains=1 opened-by-acks=1 by-writer=1 released=0 taken-over=0 open=0 claimed-completions=3")
	assert.Contains(t, s.c.summary(), "left-claimed=0")
}

func TestChainsFlagALiveWriterThatLeavesMostOfItsChainsToExpire(t *testing.T) {
	s := newChainScript(t)
	for i := range 12 {
		pk := fmt.Sprint("i", i)
		s.batch("a", pk, 1, true, chainCommit(pk, "lock_"+pk, "lock_chain."+pk))
		if i < 5 {
			s.batch("a", pk, 2, true, chainRelease())
			continue
		}
		s.batch("a", pk, 2, true, chainLock("lock_a2")) // its own fetch, after the expiry
	}
	v := &violations{}
	s.c.check(v, func(string) string { return "poll=50ms" })
	require.Len(t, v.all(), 1)
	assert.Equal(t, invChainEndedByWriter, v.all()[0].Invariant)
	assert.Equal(t, "a kept 12 instances locked for its activities' completions and ended 5 of those chains itself: 7 were left to expire while it was up (poll=50ms)", v.all()[0].Detail)
}

func TestChainsDoNotCountAgainstAWriterTheChainsThatLapsedByDesign(t *testing.T) {
	// a ends 7 of 16 chains itself; of the 9 taken over, three lapsed: a
	// renewal or give-back of a that met a fault (i9), a pause of a (i10)
	// and a clock jump (i11). 7 of the 13 that count: not most.
	s := newChainScript(t)
	s.c.nodes.writeFaulted = func(node, pk, id string, _, _ time.Time) bool { return node == "a" && pk == "i9" && id == "inst" }
	s.c.nodes.paused = func(node string, from, _ time.Time) bool { return node == "a" && from.Equal(time.UnixMilli(1000)) }
	s.c.nodes.stalled = func(string, string, time.Time, time.Time) bool { return true } // a fault on another request excuses nothing
	s.c.nodes.jumped = func(from, to time.Time) bool {
		return !from.After(time.UnixMilli(1120)) && !to.Before(time.UnixMilli(1120))
	}
	for i := range 16 {
		pk := fmt.Sprint("i", i)
		s.at(100 * i)
		s.batch("a", pk, 1, true, chainCommit(pk, "lock_"+pk, "lock_chain."+pk))
		if i < 7 {
			s.batch("a", pk, 2, true, chainRelease())
			continue
		}
		s.at(100*i + 50)
		s.batch("a", pk, 2, true, chainLock("lock_a2"))
	}
	v := &violations{}
	s.c.check(v, func(string) string { return "poll=50ms" })
	assert.Empty(t, v.all())
	assert.Contains(t, s.c.summary(), "taken-from-live=9 (lapsed 3)")
}

func TestChainsFlagAHoldWhoseChainedTurnDidNotReadWithinAPollInterval(t *testing.T) {
	// The poll interval is 50 ms and the skew 50 ms: a chained turn that
	// does not read is acked within 200 ms of the hold's last read.
	s := newChainScript(t)
	s.c.nodes.stalled = func(node, pk string, from, to time.Time) bool {
		return node == "a" && pk == "i1" && from.Before(time.UnixMilli(700)) && to.After(time.UnixMilli(650))
	}
	s.at(0)
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1")) // the fetch read before it
	s.at(150)
	s.batch("a", "i1", 2, true, chainCommit("i1", "lock_chain.1", "lock_chain.2")) // 150 ms: within
	s.query("b", "i1", "lock_chain.2", 250, true)                                  // another node's query is no read of a's
	s.query("a", "i1", "lock_chain.2", 260, false)                                 // its answer was lost: no read
	s.query("a", "i1", "lock_chain.2", 270, true)
	s.at(300)
	s.batch("a", "i1", 3, true, chainCommit("i1", "lock_chain.2", "lock_chain.3")) // read
	s.at(500)
	s.batch("a", "i1", 4, true, chainCommit("i1", "lock_chain.3", "lock_chain.4")) // 230 ms after the read at 270
	s.at(800)
	s.batch("a", "i1", 5, true, chainCommit("i1", "lock_chain.4", "lock_chain.5")) // 530 ms, but a was stalled
	s.at(900)
	s.batch("a", "i1", 6, true, chainRelease())
	// A new hold starts from its first chain's commit.
	s.at(1000)
	s.batch("a", "i1", 7, true, chainCommit("i1", "lock_7", "lock_chain.7"))
	s.at(1190)
	s.batch("a", "i1", 8, true, chainCommit("i1", "lock_chain.7", "lock_chain.8")) // 190 ms: within
	// A large turn stages parts before its commit: late, but excused.
	s.at(1400)
	s.batch("a", "i1", 9, true, `{"operationType":"Create","resourceBody":{"id":"hp|lock_chain.8|0","type":"hist-part"}}`)
	s.at(1500)
	s.batch("a", "i1", 10, true, chainCommit("i1", "lock_chain.8", ""))

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	require.Len(t, v.all(), 1)
	assert.Equal(t, Violation{Invariant: invChainReadsOthers, Instance: "i1",
		Detail: "a acked the chained turn of chain lock_chain.3 (lsn 4) without reading the partition 230ms after the hold's last read; its poll interval is 50ms"}, v.all()[0])
	assert.Contains(t, s.c.summary(), "by-writer=6 released=1")
	assert.Contains(t, s.c.summary(), "read=1 unread=5 unread-excused=2")
}

// A chained turn acked late without a read is excused while the host was
// measured slower than at the run's start: the bound stretches by what the
// slowness adds to it; a turn acked later still is flagged.
func TestChainsStretchTheReadBoundWhileTheHostIsSlow(t *testing.T) {
	s := newChainScript(t)
	s.c.nodes.slower = func(from, to time.Time, d time.Duration) time.Duration {
		if to.After(time.UnixMilli(1000)) {
			return 0 // the host was back to its speed
		}
		return d / 2 // measured half again as slow
	}
	s.at(0)
	s.batch("a", "i1", 1, true, chainCommit("i1", "lock_1", "lock_chain.1"))
	s.at(290)
	s.batch("a", "i1", 2, true, chainCommit("i1", "lock_chain.1", "lock_chain.2")) // 290 ms: within 200 + 100
	s.at(1000)
	s.batch("a", "i1", 3, true, chainCommit("i1", "lock_chain.2", "lock_chain.3")) // 1,000 ms: past 300
	s.at(1300)
	s.batch("a", "i1", 4, true, chainCommit("i1", "lock_chain.3", "lock_chain.4")) // 1,300 ms, the host at its speed

	v := &violations{}
	s.c.check(v, func(string) string { return "" })
	require.Len(t, v.all(), 2)
	assert.Contains(t, v.all()[0].Detail, "without reading the partition 1s after the hold's last read")
	assert.Contains(t, v.all()[1].Detail, "without reading the partition 1.3s after the hold's last read")
	assert.Contains(t, s.c.summary(), "read=0 unread=3 unread-excused=1")
}
