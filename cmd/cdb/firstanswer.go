package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// defaultConnectTimeout is how long a command waits for the endpoint's
// first answer unless -connect-timeout says otherwise.
const defaultConnectTimeout = 30 * time.Second

// slowAnswerNotice is when a command says on stderr that the endpoint has
// not answered yet: after a couple of seconds, or half the timeout when
// that is shorter, so that a silent endpoint (one that accepts connections
// and never answers) is not a silent wait.
func slowAnswerNotice(timeout time.Duration) time.Duration {
	return min(2*time.Second, timeout/2)
}

// awaitFirstAnswer runs call, the command's first requests to endpoint,
// bounded by the connection's -connect-timeout, and prints a line on
// stderr once they take longer than slowAnswerNotice.
func (c *connection) awaitFirstAnswer(ctx context.Context, stderr io.Writer, endpoint string, call func(context.Context) error) error {
	timeout := c.connectTimeout
	probe, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answered := make(chan struct{})
	noticed := make(chan struct{})
	go func() {
		defer close(noticed)
		select {
		case <-answered:
		case <-time.After(slowAnswerNotice(timeout)):
			fmt.Fprintf(stderr, "cdb: waiting for %s: no answer yet (giving up after %s; -connect-timeout to change)\n", endpoint, timeout)
		}
	}()
	err := call(probe)
	close(answered)
	<-noticed // the notice is not written after the command's own output
	if err != nil && errors.Is(probe.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return noAnswer{endpoint: endpoint, timeout: timeout}
	}
	return err
}

// noAnswer is a first answer that did not come within -connect-timeout.
type noAnswer struct {
	endpoint string
	timeout  time.Duration
}

func (e noAnswer) Error() string {
	return fmt.Sprintf("no answer from %s in %s: check the endpoint and the network, or wait longer with -connect-timeout", e.endpoint, e.timeout)
}

func (e noAnswer) Unwrap() error { return context.DeadlineExceeded }
