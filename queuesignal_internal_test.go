package cdb

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// A look for an announced partition that finds it empty drops that
// partition's older announcements, but announcements of items handed over
// in process stand for one ready item each: one found taken already says
// nothing of the others.
// Announced partitions take turns: one announced again and again does not
// keep the ones announced after it waiting.
func TestAnnouncedPartitionsTakeTurns(t *testing.T) {
	q := newQueueSignal(false, time.Now)
	ready, p := handoff.ItemReady(), handoff.InPartition("p")
	q.announce(ready, ready, ready, p)
	var order []handoff.Wake
	for range 4 {
		q.announce(ready) // ready items keep coming
		w, _, ok := q.takeToken()
		require.True(t, ok)
		order = append(order, w)
	}
	assert.Equal(t, []handoff.Wake{ready, p, ready, ready}, order)
}

func TestDrainedKeepsTheAnnouncementsOfItemsHandedOverInProcess(t *testing.T) {
	q := newQueueSignal(false, time.Now)
	ready, p := handoff.ItemReady(), handoff.InPartition("p")
	q.announce(ready, ready, ready, p, p)

	w, at, ok := q.takeToken()
	require.True(t, ok)
	require.Equal(t, ready, w)
	q.drained(w, at)
	assert.Equal(t, []wakeToken{{wake: p, items: 2, last: 5}, {wake: ready, items: 2, last: 3}}, q.tokens, "the other two ready items keep theirs")

	q.tokens = slices.DeleteFunc(q.tokens, func(t wakeToken) bool { return t.wake == ready }) // the ready items taken
	w, at, ok = q.takeToken()
	require.True(t, ok)
	require.Equal(t, p, w)
	q.drained(w, at)
	assert.Empty(t, q.tokens, "a partition found empty: its older announcements name work that is gone")
}
