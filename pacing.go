package cdb

import "time"

// Pacing: what spaces this process's looks at the queue (an idle window, a
// contention note) ends by the provider's clock, or after a bound on the
// machine's monotonic clock, whichever comes first. The provider's clock
// says when work comes due, so a clock a test moves ends a pause at once,
// and while the two clocks run together the provider's ends it; the
// machine's bounds it when the provider's stands still (a test's clock
// between its steps) or goes back, so no pause lasts for good.

// pause is a time without looks, on both clocks.
type pause struct {
	until     time.Time // on the provider's clock
	untilReal time.Time // on the machine's monotonic clock
}

// pauseUntil is a pause that ends at until on the provider's clock (now
// being its time) or real after this moment on the machine's.
func pauseUntil(now, until time.Time, real time.Duration) pause {
	return pause{until: until, untilReal: time.Now().Add(max(real, until.Sub(now), 0))}
}

// over says the pause has ended (a zero one has).
func (p pause) over(now time.Time) bool {
	return !now.Before(p.until) || !time.Now().Before(p.untilReal)
}
