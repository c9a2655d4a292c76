package durabletest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
)

// How the skipper looks: every lookInterval, and it moves the clock only
// once its looks agreed for a period of real time: settlePeriod for an
// idle account, strandedPeriod for ready work no process takes. One look
// is several queries run one after another, and a relay delivers an
// effect between two of them; a run of looks that all agree is not fooled
// by that.
const (
	lookInterval   = 10 * time.Millisecond
	settlePeriod   = 50 * time.Millisecond
	strandedPeriod = 250 * time.Millisecond
)

// errSkipperStopped is what WaitIdle returns once the skipper has stopped.
var errSkipperStopped = errors.New("durabletest: auto-skip stopped")

// Skipper moves a Clock by itself (Clock.AutoSkip). Its methods are safe
// for concurrent use.
type Skipper struct {
	clock    *Clock
	provider *cdb.CosmosProvider
	tb       testing.TB
	stop     context.CancelFunc
	done     chan struct{}

	mu        sync.Mutex
	callbacks []callback // by time, earliest first
	looks     uint64     // looks begun
	idleLook  uint64     // the last look that found the account settled with nothing to skip to
	idle      chan struct{}
}

// callback is a function AfterFunc runs once the clock reaches at.
type callback struct {
	at time.Time
	f  func()
}

// AutoSkip makes c move by itself, as Temporal's test environment skips
// time: once every process on the account is idle (no queue item ready,
// no lock held: no turn or activity running, nothing locked ahead; no
// outbox undelivered) and has stayed so for a short settle period, it
// advances c exactly to the next point: the earliest queue item not due
// yet (a durable timer, a retry policy's backoff, a delayed abandon, a
// parked message's deadline) or the earliest AfterFunc, whichever comes
// first. provider is any provider on the account (NewProvider,
// NewProviderOn): the skipper reads the account's queues through it
// (cdb.CosmosProvider.QueueWaits), so it sees every process's work.
//
// An activity that runs in real time holds its item's lock, so the clock
// stands still until it returns. A lock's expiry is never a point to
// skip to, nor the age at which a crashed process's undelivered outbox is
// taken over: the store cannot tell a crashed process's lock from the lock
// of a turn or an activity running now, so a test that crashes a process
// moves the clock past the lock timeouts itself (Advance) before the
// skipper goes on. An instance waiting for an event with no timer leaves
// nothing to skip to, so the clock stays: raise the event from the test,
// or from AfterFunc to have it come at a time of the test clock. What the
// test itself writes (a start, an event) is not waited for: a skip may
// come before it, so start the instances a test needs before the skips
// they must not miss, or from AfterFunc.
//
// Ready work no process takes while nothing is locked moves the clock too,
// by one poll interval (10 ms) and never past the next point, after a
// longer settle period: it is work one process wrote for another, which
// an idle process looks for only as its clock passes its poll interval.
//
// Advance still moves the clock by hand. The skipper stops when tb ends
// or at Stop.
func (c *Clock) AutoSkip(tb testing.TB, provider *cdb.CosmosProvider) *Skipper {
	tb.Helper()
	ctx, stop := context.WithCancel(context.Background())
	s := &Skipper{clock: c, provider: provider, tb: tb, stop: stop, done: make(chan struct{}), idle: make(chan struct{})}
	go s.run(ctx)
	tb.Cleanup(s.Stop)
	return s
}

// Stop ends the skipping and waits until the skipper's goroutine has
// returned, with any AfterFunc it was running; the clock stays where it
// is. Calling it again does nothing.
func (s *Skipper) Stop() {
	s.stop()
	<-s.done
}

// AfterFunc runs f on the skipper's goroutine once the clock reaches d
// from now: the skipper skips to that time as it would to a timer, and
// runs f before it looks again. A manual Advance past it runs it too, at
// the skipper's next look. The skipper does not look while f runs.
func (s *Skipper) AfterFunc(d time.Duration, f func()) {
	at := s.clock.Now().Add(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbacks = append(s.callbacks, callback{at: at, f: f})
	slices.SortStableFunc(s.callbacks, func(a, b callback) int { return a.at.Compare(b.at) })
}

// WaitIdle waits until a look the skipper began after the call finds
// every process on the account settled idle with nothing to skip to: no
// timer pending, no AfterFunc left. It returns ctx's error if ctx ends
// first, and an error if the skipper stops.
func (s *Skipper) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	after := s.looks
	s.mu.Unlock()
	for {
		s.mu.Lock()
		seen, idle := s.idleLook, s.idle
		s.mu.Unlock()
		if seen > after {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errSkipperStopped
		}
	}
}

// run looks at the account every lookInterval until ctx ends, moving
// the clock whenever a run of agreeing looks allows.
func (s *Skipper) run(ctx context.Context) {
	defer close(s.done)
	ticker := time.NewTicker(lookInterval)
	defer ticker.Stop()
	var quiet settling
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.runDueCallbacks(ctx)
		look := s.beginLook()
		from := s.clock.Now()
		w, err := s.provider.QueueWaits(ctx)
		lastErr = s.logLookError(ctx, err, lastErr)
		if err != nil || w.Locked > 0 || w.Outbox > 0 || !s.clock.Now().Equal(from) {
			quiet = settling{}
			continue
		}
		to, ok, period := s.target(w, from)
		if !quiet.holds(from, to, w.Ready > 0, time.Now(), period) {
			continue
		}
		if !ok {
			s.noteIdle(look)
			continue
		}
		s.clock.advanceFrom(from, to)
		quiet = settling{}
	}
}

// target is where the clock goes from from after the look w, which found
// nothing locked or undelivered, and how long the looks must agree first:
// the next point after settlePeriod, or a stranded step after
// strandedPeriod when work is ready. ok is false when there is nowhere to
// go.
func (s *Skipper) target(w cdb.QueueWaits, from time.Time) (to time.Time, ok bool, period time.Duration) {
	to, ok = s.nextPoint(w, from)
	if w.Ready > 0 {
		return strandedStep(from, to, ok), true, strandedPeriod
	}
	return to, ok, settlePeriod
}

// logLookError logs a look's error unless the skipper is stopping or the
// last look failed the same way, and returns it (nil for a look that did
// not fail).
func (s *Skipper) logLookError(ctx context.Context, err, last error) error {
	if err != nil && ctx.Err() == nil && (last == nil || err.Error() != last.Error()) {
		s.tb.Logf("durabletest: auto-skip: look at the queues: %v", err)
	}
	return err
}

// strandedStep is how far to move the clock from from for ready work that
// no process takes while nothing is locked: work one process wrote for
// another, which an idle process looks for only as its clock passes its
// poll interval (cdb.Config.PollInterval, the pollInterval of
// NewProviderOn's providers), so a standing clock would hide it for good.
// It is one poll interval, and never past next, the next point (if ok).
func strandedStep(from, next time.Time, ok bool) time.Time {
	step := from.Add(pollInterval)
	if ok && next.Before(step) {
		return next
	}
	return step
}

// beginLook counts a look and returns its number.
func (s *Skipper) beginLook() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looks++
	return s.looks
}

// noteIdle records that look found nothing to skip to, and wakes WaitIdle.
func (s *Skipper) noteIdle(look uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idleLook = look
	close(s.idle)
	s.idle = make(chan struct{})
}

// nextPoint is the clock time to skip to from from, given the look w
// taken then: the earliest of the next due queue item (measured from the
// look's time, the provider's, which may differ from the clock by the
// account's offset) and the next callback. ok is false when there is
// neither.
func (s *Skipper) nextPoint(w cdb.QueueWaits, from time.Time) (to time.Time, ok bool) {
	if w.NextDue != nil {
		to, ok = from.Add(w.NextDue.Sub(w.Now)), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.callbacks) > 0 && (!ok || s.callbacks[0].at.Before(to)) {
		to, ok = s.callbacks[0].at, true
	}
	return to, ok
}

// runDueCallbacks runs, in order, the callbacks the clock has reached.
func (s *Skipper) runDueCallbacks(ctx context.Context) {
	for ctx.Err() == nil {
		f := s.takeDueCallback()
		if f == nil {
			return
		}
		f()
	}
}

// takeDueCallback takes the earliest callback if the clock has reached it.
func (s *Skipper) takeDueCallback() func() {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.callbacks) == 0 || s.callbacks[0].at.After(now) {
		return nil
	}
	f := s.callbacks[0].f
	s.callbacks = s.callbacks[1:]
	return f
}

// settling is a run of looks that agree on the clock, the next point and
// whether work was ready: since is the real time of the first.
type settling struct {
	since    time.Time
	from, to time.Time
	ready    bool
}

// holds adds a look that found the account with nothing locked at clock
// time from, ready work or not, and to next, at real time now; it reports
// whether the run has lasted period. A look that disagrees starts a new
// run.
func (q *settling) holds(from, to time.Time, ready bool, now time.Time, period time.Duration) bool {
	if q.since.IsZero() || !q.from.Equal(from) || !q.to.Equal(to) || q.ready != ready {
		*q = settling{since: now, from: from, to: to, ready: ready}
		return false
	}
	return now.Sub(q.since) >= period
}
