package cdb

import (
	"net/http"
	"sync"
	"time"
)

// The service's clock. A machine's clock may be minutes or hours off; the
// account refuses a request whose x-ms-date is more than 15 minutes from
// its own time, and every time the provider writes (visibility, lock
// expiries, timers, leases, beats) is read by other processes against
// theirs. So the client reads the service's time from the Date header of
// every response and keeps the offset between it and its own clock.
//
// The header has a resolution of a second (the service truncates its
// time), and the service wrote it at some instant between the request's
// send and its response's arrival. So one response bounds the offset
// (service − local) to [Date − received, Date + 1s − sent). Each response
// narrows the bounds (their intersection); one whose bounds do not meet
// the known ones means the local clock jumped, and replaces them. So the
// bounds always hold the offset as of the latest response, and the
// estimate (their middle) is within the latest response's round trip
// plus a second of it.
//
// The estimate is applied (ServiceTime) only once the bounds lie wholly
// beyond clockTolerance: a clock off by less reads within the header's
// resolution of the service either way, and is left alone (the hybrid
// logical seq orders the small skews of healthy hosts, sequencer.go).

// clockTolerance is the offset below which the local clock is used as it
// is: about the Date header's resolution plus a round trip.
const clockTolerance = time.Second

// serviceClock is what a client knows of the offset between the service's
// clock and its own.
type serviceClock struct {
	mu     sync.Mutex
	known  bool
	lo, hi time.Duration // service − local lies in [lo, hi)
}

// observe learns from one response: the service wrote date (an RFC 1123
// time, a Date header) while the local clock read between sent and
// received. A missing or unreadable date teaches nothing.
func (s *serviceClock) observe(sent, received time.Time, date string) {
	if date == "" {
		return
	}
	at, err := http.ParseTime(date)
	if err != nil {
		return
	}
	lo, hi := at.Sub(received), at.Add(time.Second).Sub(sent)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known && lo < s.hi && hi > s.lo {
		s.lo, s.hi = max(s.lo, lo), min(s.hi, hi)
		return
	}
	// The first response, or the local clock jumped since the last.
	s.known, s.lo, s.hi = true, lo, hi
}

// offset is what to add to the local clock to read the service's: the
// middle of the bounds once they show the clocks apart by more than
// clockTolerance, else zero.
func (s *serviceClock) offset() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.applied() {
		return 0
	}
	return s.lo + (s.hi-s.lo)/2
}

// spread is how far the service's clock may read from the corrected one,
// either way: half the bounds' width while the offset is applied, else
// zero (a clock within clockTolerance is used as it is). It is widest
// after the first response or a jump, and narrows as responses come.
func (s *serviceClock) spread() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.applied() {
		return 0
	}
	return (s.hi - s.lo) / 2
}

// applied says the bounds show the clocks apart by more than
// clockTolerance. Called with s.mu held.
func (s *serviceClock) applied() bool {
	return s.known && (s.lo > clockTolerance || s.hi < -clockTolerance)
}
