package cdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A look for an announced partition that finds it empty drops that
// partition's older announcements, but announcements of items handed over
// in process stand for one ready item each: one found taken already says
// nothing of the others.
func TestDrainedKeepsTheAnnouncementsOfItemsHandedOverInProcess(t *testing.T) {
	q := newQueueSignal(false, time.Now)
	q.announce(eagerScope, eagerScope, eagerScope, "p", "p")

	pk, at, ok := q.takeToken()
	require.True(t, ok)
	require.Equal(t, eagerScope, pk)
	q.drained(pk, at)
	assert.Equal(t, []wakeToken{{pk: eagerScope, items: 2, last: 3}, {pk: "p", items: 2, last: 5}}, q.tokens, "the other two ready items keep theirs")

	q.tokens = append(q.tokens[:0], q.tokens[1:]...) // the ready items taken
	pk, at, ok = q.takeToken()
	require.True(t, ok)
	require.Equal(t, "p", pk)
	q.drained(pk, at)
	assert.Empty(t, q.tokens, "a partition found empty: its older announcements name work that is gone")
}
