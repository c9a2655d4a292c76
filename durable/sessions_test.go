package durable

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// Session lock renewals on a store that fails or answers slowly: the
// session stays with its runtime as long as its lock could.

// sessionRenewals wraps a provider and records the session renewals; the
// first one fails with failFirst, or answers only after slowFirst.
type sessionRenewals struct {
	cdb.Provider
	failFirst error
	slowFirst time.Duration

	mu      sync.Mutex
	at      []time.Time
	results []error
	seen    chan struct{} // gets a value after each renewal
}

func newSessionRenewals(t *testing.T) *sessionRenewals {
	mem := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = mem.Close() })
	return &sessionRenewals{Provider: mem, seen: make(chan struct{}, 64)}
}

func (p *sessionRenewals) RenewSessionLock(ctx context.Context, owners []string, extend, idle time.Duration) (int, error) {
	p.mu.Lock()
	first := len(p.at) == 0
	p.at = append(p.at, time.Now())
	p.mu.Unlock()
	n, err := p.renew(ctx, first, owners, extend, idle)
	p.mu.Lock()
	p.results = append(p.results, err)
	p.mu.Unlock()
	p.seen <- struct{}{}
	return n, err
}

func (p *sessionRenewals) renew(ctx context.Context, first bool, owners []string, extend, idle time.Duration) (int, error) {
	if first && p.failFirst != nil {
		return 0, p.failFirst
	}
	if first && p.slowFirst > 0 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(p.slowFirst):
		}
	}
	return p.Provider.RenewSessionLock(ctx, owners, extend, idle)
}

// waitRenewals waits until n renewals have returned.
func (p *sessionRenewals) waitRenewals(t *testing.T, n int) {
	t.Helper()
	for {
		p.mu.Lock()
		done := len(p.results) >= n
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-p.seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("waited 30s for %d session renewals", n)
		}
	}
}

func (p *sessionRenewals) record() ([]time.Time, []error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.at...), append([]error(nil), p.results...)
}

// runInSession runs an orchestration whose one session activity returns
// once release returns.
func runInSession(t *testing.T, p cdb.Provider, lockTimeout, buffer time.Duration, release func()) string {
	h := newHarness(t, p)
	h.activity("Held", func(_ ActivityContext, in string) (string, error) {
		release()
		return in, nil
	})
	h.orchestration("OneInSession", func(ctx *OrchestrationContext, in string) (string, error) {
		return ctx.ScheduleActivity("Held", in, WithSession("s")).Await()
	})
	h.run(func(o *Options) {
		o.SessionLockTimeout, o.SessionLockRenewalBuffer = lockTimeout, buffer
		o.WorkerLockTimeout = 30 * time.Second // only the session lock is under test
	})
	h.start("held", "OneInSession", "kept")
	return h.completed("held")
}

// A failed session renewal is tried again within the renewal buffer, not a
// whole interval later: the interval leaves only the buffer before the
// locks expire, so one failure would otherwise let every session go.
func TestAFailedSessionRenewalIsRetriedBeforeTheLockExpires(t *testing.T) {
	p := newSessionRenewals(t)
	p.failFirst = cdb.Retryable("renew_session_lock", "request timeout")
	const lockTimeout, buffer = 4 * time.Second, time.Second
	interval := renewalInterval(lockTimeout, buffer)

	out := runInSession(t, p, lockTimeout, buffer, func() { p.waitRenewals(t, 2) })

	assert.Equal(t, "kept", out)
	at, results := p.record()
	require.GreaterOrEqual(t, len(at), 2)
	assert.ErrorIs(t, results[0], p.failFirst, "the first renewal is the injected failure")
	assert.NoError(t, results[1], "the retry renewed the session")
	assert.Less(t, at[1].Sub(at[0]), interval/2, "the retry came %s after the failure; the renewal interval is %s", at[1].Sub(at[0]), interval)
}

// A renewal the store answers after the renewal interval, but before the
// session lock would expire, is waited for and keeps the session: it is
// not cut off at the interval.
func TestASlowSessionRenewalIsWaitedForUntilTheLockWouldExpire(t *testing.T) {
	p := newSessionRenewals(t)
	const lockTimeout, buffer = 2 * time.Second, 500 * time.Millisecond
	interval := renewalInterval(lockTimeout, buffer)
	p.slowFirst = interval + interval/2

	out := runInSession(t, p, lockTimeout, buffer, func() { p.waitRenewals(t, 1) })

	assert.Equal(t, "kept", out)
	_, results := p.record()
	require.NotEmpty(t, results)
	assert.NoError(t, results[0], "a renewal slower than the interval (%s) but within the lock (%s)", p.slowFirst, lockTimeout)
}
