package cdb

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A look for an announced partition that finds it empty drops that
// partition's older announcements, but announcements of items handed over
// in process stand for one ready item each: one found taken already says
// nothing of the others.
// Announced partitions take turns: one announced again and again does not
// keep the ones announced after it waiting.
func TestAnnouncedPartitionsTakeTurns(t *testing.T) {
	q := newQueueSignal(false, time.Now)
	q.announce(eagerScope, eagerScope, eagerScope, "p")
	var order []string
	for range 4 {
		q.announce(eagerScope) // ready items keep coming
		pk, _, ok := q.takeToken()
		require.True(t, ok)
		order = append(order, pk)
	}
	assert.Equal(t, []string{eagerScope, "p", eagerScope, eagerScope}, order)
}

func TestDrainedKeepsTheAnnouncementsOfItemsHandedOverInProcess(t *testing.T) {
	q := newQueueSignal(false, time.Now)
	q.announce(eagerScope, eagerScope, eagerScope, "p", "p")

	pk, at, ok := q.takeToken()
	require.True(t, ok)
	require.Equal(t, eagerScope, pk)
	q.drained(pk, at)
	assert.Equal(t, []wakeToken{{pk: "p", items: 2, last: 5}, {pk: eagerScope, items: 2, last: 3}}, q.tokens, "the other two ready items keep theirs")

	q.tokens = slices.DeleteFunc(q.tokens, func(t wakeToken) bool { return t.pk == eagerScope }) // the ready items taken
	pk, at, ok = q.takeToken()
	require.True(t, ok)
	require.Equal(t, "p", pk)
	q.drained(pk, at)
	assert.Empty(t, q.tokens, "a partition found empty: its older announcements name work that is gone")
}
