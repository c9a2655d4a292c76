package cdb

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// answerAt is one response the service wrote at service time at, seen by a
// machine whose clock is offset behind the service's, with no round trip.
func answerAt(s *serviceClock, at time.Time, offset time.Duration) {
	local := at.Add(-offset)
	s.observe(local, local, at.UTC().Format(http.TimeFormat))
}

// Each answer bounds the offset to its Date's second; answers at other
// phases of the second narrow it, so the estimate gets better than the
// header's resolution.
func TestTheServiceClockNarrowsWithEachAnswer(t *testing.T) {
	var s serviceClock
	truth := 3*time.Hour + 300*time.Millisecond // the service is ahead
	start := time.Date(2026, time.November, 25, 12, 0, 0, 0, time.UTC)
	for _, phase := range []time.Duration{0, 250, 500, 750, 1100, 1600} {
		answerAt(&s, start.Add(phase*time.Millisecond), truth)
	}
	assert.InDelta(t, float64(truth), float64(s.offset()), float64(125*time.Millisecond))
}

// An offset within clockTolerance is left alone, however the answers fall:
// the local clock is used as it is.
func TestASmallOffsetIsNotCorrected(t *testing.T) {
	start := time.Date(2026, time.November, 25, 12, 0, 0, 0, time.UTC)
	for _, truth := range []time.Duration{0, 400 * time.Millisecond, -900 * time.Millisecond, time.Second} {
		var s serviceClock
		for _, phase := range []time.Duration{0, 250, 500, 750, 999} {
			answerAt(&s, start.Add(phase*time.Millisecond), truth)
			assert.Zero(t, s.offset(), "offset %s, answer at +%dms", truth, phase)
		}
	}
	var s serviceClock
	answerAt(&s, start, 0)
	s.observe(start, start, "")
	s.observe(start, start, "not a date")
	assert.Zero(t, s.offset(), "answers without a readable Date teach nothing")
}
