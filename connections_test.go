package cdb

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connTracker records the client address of each request and which
// connections closed.
type connTracker struct {
	mu     sync.Mutex
	closed map[string]bool
}

func (ct *connTracker) state(c net.Conn, s http.ConnState) {
	if s == http.StateClosed || s == http.StateHijacked {
		ct.mu.Lock()
		ct.closed[c.RemoteAddr().String()] = true
		ct.mu.Unlock()
	}
}

func (ct *connTracker) isClosed(addr string) bool {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.closed[addr]
}

// Recycling the built-in transport (after a failover, or every connMaxAge)
// moves new requests off a busy connection and closes it once its request
// has ended, so that no later request takes it up again: a busy HTTP/1.1
// connection that CloseIdleConnections did not close went back to the pool
// when its request ended, and later requests reused it.
func TestRecyclingRetiresABusyConnection(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "http2"}[h2], func(t *testing.T) {
			testRecyclingRetiresABusyConnection(t, h2)
		})
	}
}

func testRecyclingRetiresABusyConnection(t *testing.T, h2 bool) {
	release := make(chan struct{})
	addrs := make(chan string, 64)
	ct := &connTracker{closed: map[string]bool{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addrs <- r.RemoteAddr
		if r.URL.Path == "/dbs/slow" {
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x"}`))
	}))
	srv.EnableHTTP2 = h2
	srv.Config.ConnState = ct.state
	srv.StartTLS()
	defer srv.Close()

	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, TLS: TLSOptions{InsecureSkipVerify: true}, Retry: fastRetryOptions()})
	require.NoError(t, err)
	slow := make(chan error, 1)
	go func() {
		_, err := c.ReadDatabase(testCtx(t), "slow")
		slow <- err
	}()
	busy := <-addrs

	c.conns.recycle() // as a failover or connMaxAge does
	_, err = c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	assert.NotEqual(t, busy, <-addrs, "after a recycle, a new connection")
	assert.False(t, ct.isClosed(busy), "the busy connection's request goes on")

	close(release)
	require.NoError(t, <-slow)
	// Pairs of requests at once, so that each takes its own of the pooled
	// connections, for as long as the old one might come back to the pool.
	for range 10 {
		var pair sync.WaitGroup
		for range 2 {
			pair.Add(1)
			go func() {
				defer pair.Done()
				_, err := c.ReadAccount(testCtx(t))
				assert.NoError(t, err)
			}()
		}
		pair.Wait()
		assert.NotEqual(t, busy, <-addrs, "the old connection is not taken up again")
		assert.NotEqual(t, busy, <-addrs, "the old connection is not taken up again")
	}
	require.Eventually(t, func() bool { return ct.isClosed(busy) }, hostspeed.Scale(10*time.Second), 10*time.Millisecond,
		"the old connection is closed once its request ended")
}
