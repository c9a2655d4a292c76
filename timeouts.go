package cdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// TimeoutOptions bounds how long the client waits on the network. A
// connection can stop answering without closing (a half-open TCP
// connection, a gateway that accepted a request and died): without these
// bounds a call made with a context that has no deadline waits until the
// kernel gives up, minutes later, while a lock it was renewing expires.
// Zero fields take the defaults.
type TimeoutOptions struct {
	// Attempt bounds one attempt of a point operation or a transactional
	// batch: sending it and reading its whole answer; default 15s. An
	// attempt that runs out is retried when the request is a read, and
	// reported with OutcomeUnknown when it is a write that may have been
	// sent, as any write whose answer was lost.
	Attempt time.Duration
	// QueryAttempt bounds one attempt of a query page or a feed read,
	// which the service may take longer to assemble; default 60s.
	QueryAttempt time.Duration
	// Dial bounds opening a connection (TCP and TLS); default 5s.
	Dial time.Duration
	// IdlePing is how long an HTTP/2 connection may stay silent before the
	// built-in transport pings it; a connection whose ping is not answered
	// within PingTimeout is closed, and the requests on it fail (and are
	// retried as above) instead of waiting. Defaults 2s and 1s, as the Go
	// SDK's: a dead connection is found in about 3s, well within the
	// seconds a lock renewal is sent before its lock expires.
	IdlePing    time.Duration
	PingTimeout time.Duration
}

const (
	defaultAttemptTimeout      = 15 * time.Second
	defaultQueryAttemptTimeout = 60 * time.Second
	defaultDialTimeout         = 5 * time.Second
	defaultIdlePing            = 2 * time.Second
	defaultPingTimeout         = time.Second
)

func (o TimeoutOptions) withDefaults() TimeoutOptions {
	orDefault(&o.Attempt, defaultAttemptTimeout)
	orDefault(&o.QueryAttempt, defaultQueryAttemptTimeout)
	orDefault(&o.Dial, defaultDialTimeout)
	orDefault(&o.IdlePing, defaultIdlePing)
	orDefault(&o.PingTimeout, defaultPingTimeout)
	return o
}

// attemptTimeout is the deadline of one attempt of r.
func (o TimeoutOptions) attemptTimeout(r *request) time.Duration {
	if r.long {
		return o.QueryAttempt
	}
	return o.Attempt
}

// attemptContext is the context of one attempt of r: the caller's, ended
// at the attempt's deadline at the latest, and within the lock the request
// keeps, if any (keepingLock).
func (c *Client) attemptContext(ctx context.Context, r *request) (context.Context, context.CancelFunc) {
	cause := c.attemptDeadline(ctx, r)
	return context.WithTimeoutCause(ctx, cause.after, cause)
}

// attemptDeadline is how long an attempt of r made with ctx may take, as
// the error it ends with when it runs out.
func (c *Client) attemptDeadline(ctx context.Context, r *request) *attemptTimeoutError {
	d := c.timeouts.attemptTimeout(r)
	if left, _ := ctx.Value(lockKeptKey{}).(func() time.Duration); left != nil {
		if within := attemptWithinLock(left()); within < d {
			return &attemptTimeoutError{after: within, lock: true}
		}
	}
	return &attemptTimeoutError{after: d}
}

// lockKeptKey is the context key of keepingLock.
type lockKeptKey struct{}

// keepingLock marks the requests made with ctx as keeping a lock (a
// renewal, an ack, a hand-over): each succeeds only while the lock holds.
// left says how long the lock has left; it is asked at each attempt, on
// the request's goroutine, so a lock renewed meanwhile counts its new
// expiry. The provider knows its locks; the client knows only this.
func keepingLock(ctx context.Context, left func() time.Duration) context.Context {
	return context.WithValue(ctx, lockKeptKey{}, left)
}

// keepingNoLock undoes keepingLock for the requests made with ctx: work
// that is done while the lock is renewed beside it (keepingFreshLock).
func keepingNoLock(ctx context.Context) context.Context {
	return context.WithValue(ctx, lockKeptKey{}, (func() time.Duration)(nil))
}

// lockAttemptFloor is the shortest deadline an attempt that keeps a lock
// gets: long enough for an answer from a live connection, even a slow one
// (a point write or a batch answers in milliseconds, a throttled one at
// once), so a lock about to expire is still tried rather than given up.
const lockAttemptFloor = 500 * time.Millisecond

// attemptWithinLock is the deadline of an attempt of a request that keeps
// a lock with left to run: half of it, so that an attempt lost to a silent
// connection leaves the other half for another on a fresh one
// (dropSilentConnection), but never less than lockAttemptFloor. While left
// is at least twice the floor, the attempt after a silent one starts
// before the lock expires with at least the floor to run.
func attemptWithinLock(left time.Duration) time.Duration {
	return max(left/2, lockAttemptFloor)
}

// attemptTimeoutError is an attempt that got no whole answer within its
// deadline. It unwraps to context.DeadlineExceeded: like any timeout on the
// wire it is worth another attempt, unless a write may have been applied.
type attemptTimeoutError struct {
	after time.Duration
	lock  bool // the deadline came from the time left on the lock the request keeps
}

func (e *attemptTimeoutError) Error() string {
	if e.lock {
		return fmt.Sprintf("no answer within the attempt deadline of %s (from the time left on the lock it keeps)", e.after)
	}
	return fmt.Sprintf("no answer within the attempt deadline of %s", e.after)
}

func (e *attemptTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// endedAtItsDeadline says an attempt's context ended at its own deadline,
// not because its caller gave up: the connection it was sent on did not
// answer in time.
func endedAtItsDeadline(attemptCtx context.Context) bool {
	var timeout *attemptTimeoutError
	return attemptCtx.Err() != nil && errors.As(context.Cause(attemptCtx), &timeout)
}

// dropSilentConnection closes the connection an attempt that ended at its
// own deadline was sent on, so that the next attempt goes on a fresh one.
// HTTP/1.1 closes it already; an HTTP/2 connection would stay in the pool
// and take the retry too (it is tested with a ping only once it has been
// silent for IdlePing). The other requests on it fail with it and are
// retried, or resolved as writes with an unknown outcome: a connection that
// left a point operation unanswered that long is most likely dead.
func dropSilentConnection(attemptCtx context.Context, conn net.Conn) {
	if conn != nil && endedAtItsDeadline(attemptCtx) {
		_ = conn.Close()
	}
}

// attemptError is what an attempt whose own deadline ended reports: the
// deadline rather than the transport's "context deadline exceeded", so
// logs and errors say which limit was hit. Other errors pass unchanged.
func attemptError(attemptCtx context.Context, err error) error {
	if err == nil || attemptCtx.Err() == nil {
		return err
	}
	if cause := context.Cause(attemptCtx); cause != nil && cause != attemptCtx.Err() {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}

// configureTimeouts gives the built-in transport its dial bound and
// HTTP/2 health checks.
func configureTimeouts(t *http.Transport, o TimeoutOptions) {
	dialer := &net.Dialer{Timeout: o.Dial, KeepAlive: 30 * time.Second}
	t.DialContext = dialer.DialContext
	t.TLSHandshakeTimeout = o.Dial
	if t.HTTP2 == nil {
		t.HTTP2 = &http.HTTP2Config{}
	}
	t.HTTP2.SendPingTimeout = o.IdlePing
	t.HTTP2.PingTimeout = o.PingTimeout
}
