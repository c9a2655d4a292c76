package cdb

import (
	"context"
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
	// retried as above) instead of waiting. Defaults 10s and 5s.
	IdlePing    time.Duration
	PingTimeout time.Duration
}

const (
	defaultAttemptTimeout      = 15 * time.Second
	defaultQueryAttemptTimeout = 60 * time.Second
	defaultDialTimeout         = 5 * time.Second
	defaultIdlePing            = 10 * time.Second
	defaultPingTimeout         = 5 * time.Second
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
// at the attempt's deadline at the latest.
func (c *Client) attemptContext(ctx context.Context, r *request) (context.Context, context.CancelFunc) {
	d := c.timeouts.attemptTimeout(r)
	return context.WithTimeoutCause(ctx, d, &attemptTimeoutError{after: d})
}

// attemptTimeoutError is an attempt that got no whole answer within its
// deadline. It unwraps to context.DeadlineExceeded: like any timeout on the
// wire it is worth another attempt, unless a write may have been applied.
type attemptTimeoutError struct{ after time.Duration }

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("no answer within the attempt deadline of %s", e.after)
}

func (e *attemptTimeoutError) Unwrap() error { return context.DeadlineExceeded }

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
