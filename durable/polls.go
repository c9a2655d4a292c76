package durable

// Polls: how a Client's waits space their reads of the store, and how the
// waits on one instance share them.

import (
	"context"
	"sync"
	"time"
)

// pollBackoff is how far apart a wait's reads are: from first, doubling up
// to most, and once the wait has lasted longer, up to a fifth of the time
// waited so far, at most longest. So an end is seen within a fifth of the
// time it took (a short orchestration's at once, a long one's at most
// longest late), and a wait costs reads in proportion to the logarithm of
// its length rather than to its length.
type pollBackoff struct{ first, most, longest time.Duration }

// A wait's reads are frequent at first, when a short orchestration ends,
// then ten a second, and one a second at the slowest, unless the client's
// pollBackoff says otherwise.
const (
	defaultPollFirst   = 5 * time.Millisecond
	defaultPollMost    = 100 * time.Millisecond
	defaultPollLongest = time.Second
)

// withDefaults fills what b leaves zero.
func (b pollBackoff) withDefaults() pollBackoff {
	if b.first <= 0 {
		b.first = defaultPollFirst
	}
	if b.most <= 0 {
		b.most = defaultPollMost
	}
	if b.longest <= 0 {
		b.longest = defaultPollLongest
	}
	b.longest = max(b.longest, b.most)
	return b
}

// next is the wait after one of delay, waited elapsed so far.
func (b pollBackoff) next(delay, elapsed time.Duration) time.Duration {
	ceiling := min(max(b.most, elapsed/5), b.longest)
	return min(delay*2, ceiling)
}

// poll calls check with the default backoff until it is done or fails,
// timeout passes (ErrTimeout) or ctx ends.
func poll(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	return pollWaking(ctx, timeout, pollBackoff{}, nil, check)
}

// poll is the package's poll with the client's backoff, cut short by wake.
func (c *Client) poll(ctx context.Context, timeout time.Duration, wake <-chan struct{}, check func() (bool, error)) error {
	return pollWaking(ctx, timeout, c.pollBackoff, wake, check)
}

// pollWaking calls check until it is done or fails, timeout passes
// (ErrTimeout) or ctx ends, spaced by backoff; wake, when ready, cuts one
// wait short (a closed channel stays ready: after it the backoff alone
// spaces the calls, should the store not show the end yet).
func pollWaking(ctx context.Context, timeout time.Duration, backoff pollBackoff, wake <-chan struct{}, check func() (bool, error)) error {
	backoff = backoff.withDefaults()
	began := time.Now()
	deadline := began.Add(timeout)
	delay := backoff.first
	for {
		done, err := check()
		if err != nil || done {
			return err
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return ErrTimeout
		}
		t := time.NewTimer(min(delay, remaining))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
			t.Stop()
			wake = nil
			continue
		case <-t.C:
		}
		delay = backoff.next(delay, time.Since(began))
	}
}

// statusReads shares the status reads of a Client's waits: the waits on
// one instance send one read at a time between them, however many there
// are, and a wait takes the answer of a read another wait sent since its
// own last look instead of sending one of its own.
type statusReads struct {
	mu    sync.Mutex
	reads map[string]*sharedRead
}

// sharedRead is one instance's last status read and the one under way.
type sharedRead struct {
	waits int // the waits joined
	// pending is closed when the read under way returns (nil: none under
	// way), which began at pendingSince.
	pending      chan struct{}
	pendingSince time.Time
	// The last read's answer, and when it began (zero: none to share).
	st    Status
	err   error
	since time.Time
}

// join counts a wait on instance until leave is called.
func (s *statusReads) join(instance string) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reads == nil {
		s.reads = map[string]*sharedRead{}
	}
	r := s.reads[instance]
	if r == nil {
		r = &sharedRead{}
		s.reads[instance] = r
	}
	r.waits++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.waits--; r.waits == 0 && s.reads[instance] == r {
			delete(s.reads, instance)
		}
	}
}

// read is instance's status as a read that began at notBefore or later
// saw it: the answer of one under way or returned, or of a read through
// get, sent once no other is under way. A failed read is shared too (each
// wait decides what it means to it), except one that failed for its own
// reader's context, whose waits read again.
func (s *statusReads) read(ctx context.Context, instance string, notBefore time.Time, get func(ctx context.Context, instance string) (Status, error)) (Status, error) {
	s.mu.Lock()
	r := s.reads[instance]
	if r == nil { // not joined: nothing to share
		s.mu.Unlock()
		return get(ctx, instance)
	}
	for r.pending != nil {
		pending, joined := r.pending, !r.pendingSince.Before(notBefore)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return Status{}, ctx.Err()
		case <-pending:
		}
		s.mu.Lock()
		if joined && !r.since.IsZero() {
			defer s.mu.Unlock()
			return r.st, r.err
		}
	}
	if !r.since.IsZero() && !r.since.Before(notBefore) {
		defer s.mu.Unlock()
		return r.st, r.err
	}
	pending, since := make(chan struct{}), time.Now()
	r.pending, r.pendingSince = pending, since
	s.mu.Unlock()

	st, err := get(ctx, instance)
	s.mu.Lock()
	defer s.mu.Unlock()
	r.pending = nil
	r.st, r.err, r.since = st, err, since
	if err != nil && ctx.Err() != nil {
		r.since = time.Time{} // its reader's own end: no answer to share
	}
	close(pending)
	return st, err
}
