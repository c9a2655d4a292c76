package cdb

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A sighting is taken once, only while fresh, and the oldest goes first
// once maxSightings are kept.
func TestSightingsAreTakenOnceWhileFreshAndBounded(t *testing.T) {
	s := newSightings()
	s.keep(instanceGroup{pk: "a"}, 1000, 0)
	_, ok := s.take("a", 1001)
	assert.False(t, ok, "older than asked for")
	s.keep(instanceGroup{pk: "a"}, 1000, 0)
	got, ok := s.take("a", 1000)
	assert.True(t, ok)
	assert.Equal(t, "a", got.group.pk)
	_, ok = s.take("a", 0)
	assert.False(t, ok, "taken once")

	for i := range maxSightings + 1 {
		s.keep(instanceGroup{pk: fmt.Sprint(i)}, int64(i), 0)
	}
	assert.Len(t, s.by, maxSightings)
	_, ok = s.take("0", 0)
	assert.False(t, ok, "the oldest was dropped")
	_, ok = s.take(fmt.Sprint(maxSightings), 0)
	assert.True(t, ok)

	s.keep(instanceGroup{pk: "x"}, 5000, 4000)
	s.keep(instanceGroup{pk: "y"}, 5000, 4000)
	assert.Len(t, s.by, 2, "once full, every sighting too old to take went")
}
