package cdb

import (
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentAccount is a fake account whose client gives each attempt
// attempt to answer.
func silentAccount(t *testing.T, attempt time.Duration) (*FakeAccount, *ContainerClient) {
	t.Helper()
	acct := NewFakeAccount(FakeAccountOptions{})
	return acct, newFakeContainer(t, acct, func(o *ClientOptions) {
		o.Timeouts = TimeoutOptions{Attempt: attempt, QueryAttempt: attempt}
	})
}

// A read whose attempt gets no answer, made with a context that has no
// deadline, ends at the attempt's deadline and is sent again.
func TestAReadWithoutAnAnswerIsSentAgainAtItsAttemptDeadline(t *testing.T) {
	acct, cc := silentAccount(t, 50*time.Millisecond)
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a","pk":"p"}`), nil)
	require.NoError(t, err)
	var reads atomic.Int32
	acct.InjectFault(FakeFault{Kind: FaultNoAnswer, Times: 1, Match: func(r FakeRequest) bool {
		if r.Operation == "ReadItem" {
			reads.Add(1)
			return true
		}
		return false
	}})
	resp, err := cc.ReadItem(context.Background(), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, resp.Attempts, "the silent attempt, then one answered")
	assert.Equal(t, int32(1), reads.Load(), "the fault held the first attempt")
}

// A write whose attempt gets no answer may have been applied: it is not
// sent again, and its error says the outcome is unknown and which deadline
// ended it.
func TestAWriteWithoutAnAnswerIsOutcomeUnknownAtItsAttemptDeadline(t *testing.T) {
	acct, cc := silentAccount(t, 50*time.Millisecond)
	var writes atomic.Int32
	acct.InjectFault(FakeFault{Kind: FaultNoAnswer, Match: func(r FakeRequest) bool {
		if r.Operation == "CreateItem" {
			writes.Add(1)
			return true
		}
		return false
	}})
	_, err := cc.CreateItem(context.Background(), NewPartitionKeyString("p"), []byte(`{"id":"a","pk":"p"}`), nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.True(t, ce.OutcomeUnknown)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "no answer within the attempt deadline of 50ms")
	var transportErr *url.Error
	assert.ErrorAs(t, err, &transportErr, "the transport's own error stays reachable")
	assert.Equal(t, int32(1), writes.Load(), "a write that may have been applied is not sent again")
	assert.True(t, IsRetryable(ToProviderError("Enqueue", err)), "the provider resolves an unknown outcome")
}

// A query page has its own, longer, attempt deadline.
func TestAQueryPageHasTheQueryAttemptDeadline(t *testing.T) {
	o := TimeoutOptions{}.withDefaults()
	assert.Equal(t, defaultAttemptTimeout, o.attemptTimeout(&request{operation: "ReadItem"}))
	assert.Equal(t, defaultQueryAttemptTimeout, o.attemptTimeout(&request{operation: "Query", long: true}))
	assert.Less(t, o.Attempt, o.QueryAttempt)
}

// A server that accepts connections and reads requests but never answers
// (a gateway that hung, a half-open connection) does not hold a read made
// with context.Background(): every attempt ends at its deadline, and the
// read fails as retryable once the client's attempts are spent.
func TestASilentServerDoesNotHoldAReadWithoutADeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { _, _ = io.Copy(io.Discard, conn) }() // read everything, answer nothing
			t.Cleanup(func() { conn.Close() })
		}
	}()
	c, err := NewClient("http://"+ln.Addr().String()+"/", ClientOptions{Key: testMasterKey,
		Retry:    RetryOptions{MaxAttempts: 2, BaseDelay: time.Millisecond},
		Timeouts: TimeoutOptions{Attempt: 100 * time.Millisecond}})
	require.NoError(t, err)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := cc.ReadItem(context.Background(), NewPartitionKeyString("p"), "a", nil)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a safety net for a regression, not a speed check
		t.Fatal("the read is still blocked on a silent server")
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "no answer within the attempt deadline of 100ms")
	assert.True(t, IsRetryable(ToProviderError("Read", err)))
	assert.GreaterOrEqual(t, accepted.Load(), int32(1))
	assert.Equal(t, int64(2), c.Stats().ByOperation["ReadItem"].Requests, "both attempts were sent")
}

// An attempt that ran out on a silent HTTP/2 connection is not sent again
// on it: the connection is closed and the retry opens a fresh one. Without
// that, the pooled connection takes the retry too, and a dead one holds it
// as long.
func TestARetryAfterASilentHTTP2ConnectionGoesOnAFreshOne(t *testing.T) {
	var mu sync.Mutex
	var conns []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/docs/a") {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		conns = append(conns, r.RemoteAddr)
		first := len(conns) == 1
		mu.Unlock()
		assert.Equal(t, 2, r.ProtoMajor, "the client speaks HTTP/2")
		if first {
			<-r.Context().Done() // accepted, never answered
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"a","pk":"p"}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := NewClient(srv.URL+"/", ClientOptions{Key: testMasterKey, TLS: TLSOptions{RootCAs: roots},
		Retry:    RetryOptions{MaxAttempts: 2, BaseDelay: time.Millisecond},
		Timeouts: TimeoutOptions{Attempt: 200 * time.Millisecond}})
	require.NoError(t, err)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)

	resp, err := cc.ReadItem(context.Background(), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, resp.Attempts)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, conns, 2)
	assert.NotEqual(t, conns[0], conns[1], "the retry went on a fresh connection")
}

// The built-in transport dials with a bound and pings silent HTTP/2
// connections.
func TestTheBuiltInTransportBoundsDialingAndPingsSilentConnections(t *testing.T) {
	rt, builtin, err := newTransport("acct.documents.azure.com", ClientOptions{Timeouts: TimeoutOptions{Dial: 2 * time.Second, IdlePing: 7 * time.Second}})
	require.NoError(t, err)
	require.True(t, builtin)
	tr, ok := rt.(*http.Transport)
	require.True(t, ok)
	assert.Equal(t, 2*time.Second, tr.TLSHandshakeTimeout)
	assert.NotNil(t, tr.DialContext)
	require.NotNil(t, tr.HTTP2)
	assert.Equal(t, 7*time.Second, tr.HTTP2.SendPingTimeout)
	assert.Equal(t, defaultPingTimeout, tr.HTTP2.PingTimeout)
	assert.True(t, tr.ForceAttemptHTTP2)
}

// By default the built-in transport finds a dead HTTP/2 connection about
// as fast as the Go SDK (a ping after 2 s of silence, closed 1 s later):
// within the 2 s before expiry that the runtime renews an orchestration
// lock at, not after 15 s.
func TestTheBuiltInTransportFindsADeadHTTP2ConnectionInAboutThreeSeconds(t *testing.T) {
	rt, _, err := newTransport("acct.documents.azure.com", ClientOptions{})
	require.NoError(t, err)
	tr, ok := rt.(*http.Transport)
	require.True(t, ok)
	require.NotNil(t, tr.HTTP2)
	assert.Equal(t, 2*time.Second, tr.HTTP2.SendPingTimeout)
	assert.Equal(t, time.Second, tr.HTTP2.PingTimeout)
}

// An attempt of a request that keeps a lock gets at most half the time left
// on the lock, never less than the floor, and never more than its own
// deadline; a request that keeps no lock keeps its own.
func TestAnAttemptThatKeepsALockGetsHalfTheTimeLeftOnIt(t *testing.T) {
	c := &Client{timeouts: TimeoutOptions{}.withDefaults()}
	deadlineOf := func(ctx context.Context) time.Duration {
		return c.attemptDeadline(ctx, &request{operation: "PatchItem"}).after
	}
	left := func(d time.Duration) func() time.Duration { return func() time.Duration { return d } }
	ctx := context.Background()
	assert.Equal(t, lockAttemptFloor, attemptWithinLock(0), "a lock about to expire is still tried")
	assert.Equal(t, lockAttemptFloor, attemptWithinLock(lockAttemptFloor))
	assert.Equal(t, 2500*time.Millisecond, attemptWithinLock(5*time.Second), "a worker lock renewed 5 s before it expires")
	assert.Equal(t, time.Second, attemptWithinLock(2*time.Second), "an orchestration lock renewed 2 s before it expires")
	assert.Equal(t, lockAttemptFloor, deadlineOf(keepingLock(ctx, left(200*time.Millisecond))))
	assert.Equal(t, time.Second, deadlineOf(keepingLock(ctx, left(2*time.Second))))

	c.timeouts.Attempt = 300 * time.Millisecond
	assert.Equal(t, 300*time.Millisecond, deadlineOf(keepingLock(ctx, left(time.Minute))), "a long lock leaves the attempt's own deadline")
	assert.Equal(t, 300*time.Millisecond, deadlineOf(ctx), "no lock kept")
	assert.Equal(t, 300*time.Millisecond, deadlineOf(keepingNoLock(keepingLock(ctx, left(0)))), "work done while the lock is renewed beside it")
}

// An attempt whose deadline came from a lock says so when it runs out.
func TestAnAttemptThatRanOutOnALockSaysSo(t *testing.T) {
	acct, cc := silentAccount(t, time.Minute)
	acct.InjectFault(FakeFault{Kind: FaultNoAnswer, Match: func(r FakeRequest) bool { return r.Operation == "CreateItem" }})
	ctx := keepingLock(context.Background(), func() time.Duration { return 0 })
	_, err := cc.CreateItem(ctx, NewPartitionKeyString("p"), []byte(`{"id":"a","pk":"p"}`), nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "no answer within the attempt deadline of 500ms (from the time left on the lock it keeps)")
}
