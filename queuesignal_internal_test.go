package cdb

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// Announced partitions take turns, a run each: the items a partition had
// when its turn came are taken one after the other (a turn's activities
// run together), and what is announced for it meanwhile waits for its next
// turn, so one announced again and again does not keep the ones announced
// after it waiting longer than a run. Before, partitions took turns item by
// item, and behind a backlog a fan-out of five ran one activity every few
// seconds, each completion making a turn of its own.
func TestAnnouncedPartitionsTakeTurnsARunEach(t *testing.T) {
	q := newQueueSignal(false, time.Second, time.Now)
	p, other := handoff.InPartition("p"), handoff.InPartition("other")
	q.announce(p, p, p, other)
	var order []handoff.Wake
	for range 6 {
		w, _, ok := q.takeToken()
		require.True(t, ok)
		order = append(order, w)
		q.announce(p) // p's items keep coming
	}
	assert.Equal(t, []handoff.Wake{p, p, p, other, p, p}, order, "p's first run is the three it had; the three announced during it are the next")
}

// A look for an announced partition that finds it empty drops that
// partition's older announcements, but announcements of items handed over
// in process stand for one ready item each: one found taken already says
// nothing of the others.
func TestDrainedKeepsTheAnnouncementsOfItemsHandedOverInProcess(t *testing.T) {
	q := newQueueSignal(false, time.Second, time.Now)
	ready, p := handoff.ItemReady(), handoff.InPartition("p")
	q.announce(ready, ready, ready, p, p)

	w, at, ok := q.takeToken()
	require.True(t, ok)
	require.Equal(t, ready, w)
	q.drained(w, at)
	assert.Equal(t, []wakeToken{{wake: p, items: 2, last: 5}, {wake: ready, items: 2, last: 3}}, withoutSince(q.tokens), "the other two ready items keep theirs")

	q.tokens = slices.DeleteFunc(q.tokens, func(t wakeToken) bool { return t.wake == ready }) // the ready items taken
	w, at, ok = q.takeToken()
	require.True(t, ok)
	require.Equal(t, p, w)
	q.drained(w, at)
	assert.Empty(t, q.tokens, "a partition found empty: its older announcements name work that is gone")
}

// What this process made ready goes before the partitions announced, until
// a partition's announcement waited a poll interval: then one of it goes
// after every readyPerAgedPartition ready ones, however fast things are
// made ready.
func TestReadyAnnouncementsGoFirstUntilAPartitionWaitedAPollInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQueueSignal(false, time.Second, func() time.Time { return now })
	ready, turn := handoff.ItemReady(), handoff.TurnReady("t")
	a, b := handoff.InPartition("a"), handoff.InPartition("b")
	q.announce(a, b, ready, ready, turn)
	take := func() handoff.Wake {
		w, _, ok := q.takeToken()
		require.True(t, ok)
		return w
	}
	assert.Equal(t, []handoff.Wake{ready, turn}, []handoff.Wake{take(), take()}, "the partitions waited less than a poll interval")

	now = now.Add(time.Second)
	for range 2 * readyPerAgedPartition {
		q.announce(ready) // ready items keep coming
	}
	var order []handoff.Wake
	for range 2*readyPerAgedPartition + 3 {
		order = append(order, take())
	}
	assert.Equal(t, []handoff.Wake{ready, a, ready, ready, ready, b, ready, ready, ready}, order,
		"two ready ones went before, unaged; then the waiting partitions take every fourth fetch")
	_, _, ok := q.takeToken()
	assert.False(t, ok)
}

// A partition announced with many items (a fan-out written to the queue)
// keeps its age while it has items left: once aged it takes every fourth
// fetch until its items run out, not one item a poll interval. Before,
// each item taken made the rest look freshly announced, and a fan-out of
// 50 queued behind a busy process's ready items took 50 seconds.
func TestAnAgedPartitionKeepsItsTurnUntilItsItemsRunOut(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQueueSignal(false, time.Second, func() time.Time { return now })
	wide := handoff.InPartition("wide")
	q.announce(handoff.Repeated(wide, 3)...)
	now = now.Add(time.Second)
	var partitions int
	for range 4 * 3 {
		q.announce(handoff.ItemReady()) // ready items keep coming
		w, _, ok := q.takeToken()
		require.True(t, ok)
		if w.Partitioned() {
			partitions++
		}
		now = now.Add(10 * time.Millisecond)
	}
	assert.Equal(t, 3, partitions, "each of its three items within twelve fetches, a tenth of a poll interval")
}

// withoutSince is tokens with their times left out, to compare the rest.
func withoutSince(tokens []wakeToken) []wakeToken {
	out := slices.Clone(tokens)
	for i := range out {
		out[i].since = time.Time{}
	}
	return out
}

// A queue whose partition announcements reached their bound still keeps
// the announcements of things made ready here: nothing else sends a fetch
// to them while the queue has work.
func TestAFullQueueOfPartitionsStillKeepsReadyAnnouncements(t *testing.T) {
	q := newQueueSignal(false, time.Second, time.Now)
	for i := range maxWakeTokens + 1 {
		q.announce(handoff.InPartition(fmt.Sprint(i)))
	}
	q.announce(handoff.TurnReady("t"))
	w, _, ok := q.takeToken()
	require.True(t, ok)
	assert.Equal(t, handoff.TurnReady("t"), w)
	assert.Equal(t, uint64(1), q.spills, "the partition past the bound is left to the looks at the whole queue")
}

// Once a look at the whole queue saw work that waited a poll interval,
// every readyPerAgedPartition+1st fetch looks at the whole queue (oldest
// first) instead of taking an announcement, however many partitions keep
// being announced, until such a look sees no aged work; a look at part of
// the slots can find aged work but not clear it. Before, a busy process
// whose completions kept coming looked at the whole queue once a poll
// interval, and a third of a burst of 500 starts waited over a minute.
func TestAgedWorkSeenByAWholeLookGetsEveryFourthFetch(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQueueSignal(false, time.Second, func() time.Time { return now })
	next := func() string {
		q.announce(handoff.InPartition(fmt.Sprint(now.UnixNano()))) // completions keep coming
		now = now.Add(time.Millisecond)
		if _, _, ok := q.takeToken(); !ok {
			q.sawQueue(now.Add(-2*time.Second).UnixMilli(), false) // the whole look still sees aged work
			return "whole"
		}
		return "partition"
	}
	var order []string
	for range 4 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"partition", "partition", "partition", "partition"}, order, "no whole look saw aged work yet")

	q.sawQueue(now.Add(-2*time.Second).UnixMilli(), false)
	order = nil
	for range 8 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"partition", "partition", "partition", "whole", "partition", "partition", "partition", "whole"}, order)
	assert.True(t, q.spilled(), "an idle look must query while aged work waits")

	q.sawQueue(now.UnixMilli(), true)
	assert.True(t, q.aged, "a look at part of the slots cannot say the aged work is gone")
	q.sawQueue(now.UnixMilli(), false)
	order = nil
	for range 4 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"partition", "partition", "partition", "partition"}, order, "a whole look saw nothing aged")
}

// Work whose announcement was dropped at the bound is found only by a look
// at the whole queue: once it waited a poll interval, such a look takes
// the aged work's turn (after every readyPerAgedPartition ready ones),
// alternating with the aged partitions kept, however fast things are made
// ready, until the looks accounted for it. Before, a busy process's ready
// announcements never ran out, and that work waited for the load to end.
func TestDroppedAnnouncementsGetALookAtTheWholeQueueInTurn(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQueueSignal(false, time.Second, func() time.Time { return now })
	for i := range maxWakeTokens + 1 {
		q.announce(handoff.InPartition(fmt.Sprint(i)))
	}
	require.Equal(t, uint64(1), q.spills)
	ready := handoff.ItemReady()
	next := func() string {
		q.announce(ready) // ready items keep coming
		w, _, ok := q.takeToken()
		switch {
		case !ok:
			return "whole"
		case w.Partitioned():
			return "partition"
		}
		return "ready"
	}
	var order []string
	for range 4 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"ready", "ready", "ready", "ready"}, order, "nothing waited a poll interval yet")

	now = now.Add(time.Second)
	order = nil
	for range 12 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"whole", "ready", "ready", "ready", "partition", "ready", "ready", "ready", "whole", "ready", "ready", "ready"}, order)
	assert.True(t, q.queueLookDue(), "a whole look goes to the queue first while the dropped work waits")

	q.spillTaken() // a look took it
	order = nil
	for range 4 {
		order = append(order, next())
	}
	assert.Equal(t, []string{"partition", "ready", "ready", "ready"}, order, "accounted for: the aged partitions alone")
}

// Dropped work gets its looks at the whole queue among partitions'
// announcements too, not only among things made ready here: a worker
// queue behind a backlog takes partitions alone. Before, only ready
// announcements counted towards the look's turn, and such a queue never
// looked: activities whose announcements were dropped waited over a minute.
func TestDroppedAnnouncementsGetALookAmongPartitionsAlone(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newQueueSignal(false, time.Second, func() time.Time { return now })
	for i := range maxWakeTokens + 1 {
		q.announce(handoff.InPartition(fmt.Sprint(i)))
	}
	require.Equal(t, uint64(1), q.spills)
	now = now.Add(time.Second)
	var order []string
	for range 8 {
		if _, _, ok := q.takeToken(); !ok {
			order = append(order, "whole")
			continue
		}
		order = append(order, "partition")
	}
	assert.Equal(t, []string{"partition", "partition", "partition", "whole", "partition", "partition", "partition", "whole"}, order, "every fourth fetch")
}
