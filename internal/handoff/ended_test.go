package handoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// What was locked before an end belongs to it; what was locked after it
// (a new life of the id) does not; an end under way covers everything;
// old entries are forgotten.
func TestEndedTellsWhatBelongsToAnEnd(t *testing.T) {
	e := NewEnded(time.Minute)
	e.Ending("p")
	assert.True(t, e.Since("p", 1_000_000), "while it is being ended, everything of it")
	e.Ended("p", 1_000)
	assert.True(t, e.Since("p", 900), "locked before the end")
	assert.True(t, e.Since("p", 1_000))
	assert.False(t, e.Since("p", 1_001), "locked after the end: a new life")
	assert.False(t, e.Since("q", 0), "never ended")
	e.Ended("q", 1_000+time.Minute.Milliseconds()+1)
	assert.False(t, e.Since("p", 900), "forgotten once older than keep")
}

// An end that did not happen (its write failed) is withdrawn; an end that
// did happen stays, whatever a later failed attempt says.
func TestAnEndThatDidNotHappenIsWithdrawn(t *testing.T) {
	e := NewEnded(time.Minute)
	e.Ending("a")
	e.NotEnded("a")
	assert.False(t, e.Since("a", 0), "the cancelling write failed: nothing ended")
	e.Ended("b", 1_000)
	e.NotEnded("b")
	assert.True(t, e.Since("b", 900), "ended before: a failed attempt does not undo it")
}
