package cdb

import (
	"net/http"
	"sync/atomic"
)

// Recycling connections. CloseIdleConnections closes idle connections
// only: one busy at that moment goes back to the pool when its request
// ends, and the next request reuses it, so after a failover or a DNS
// change behind the endpoint a busy client would keep reaching the old
// host. So the client recycles its built-in transport by replacing it:
// new requests take a new transport, which resolves and connects afresh,
// and the old one's connections are closed once the requests on them have
// ended. A caller's Transport cannot be copied: recycling it closes its
// idle connections.

// connPool is the HTTP client requests go through, replaced as a whole.
type connPool struct {
	cur   atomic.Pointer[connGeneration]
	fresh func() http.RoundTripper // a new built-in transport; nil for a caller's
}

// connGeneration is one transport and the requests in flight on it.
type connGeneration struct {
	client   *http.Client
	inflight atomic.Int64
	retired  atomic.Bool
}

// newConnPool serves requests over rt; fresh builds its replacements, nil
// when rt is the caller's.
func newConnPool(rt http.RoundTripper, fresh func() http.RoundTripper) *connPool {
	p := &connPool{fresh: fresh}
	p.cur.Store(newConnGeneration(rt))
	return p
}

func newConnGeneration(rt http.RoundTripper) *connGeneration {
	return &connGeneration{client: &http.Client{
		Transport: rt,
		// Cosmos does not redirect; following one would re-send a
		// request signed for another resource.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// acquire is the generation a request goes through; release it once the
// response body is read.
func (p *connPool) acquire() *connGeneration {
	g := p.cur.Load()
	g.inflight.Add(1)
	return g
}

// release ends a request; the last one on a retired generation closes its
// connections, idle by then (one that comes back to the old pool later is
// closed by it: nothing asks that pool for a connection again).
func (g *connGeneration) release() {
	if g.inflight.Add(-1) == 0 && g.retired.Load() {
		g.client.CloseIdleConnections()
	}
}

// recycle makes the next requests connect afresh: over a new transport
// when the transport is built-in, the old one's connections closed as
// their requests end; else by closing the idle connections.
func (p *connPool) recycle() {
	if p.fresh == nil {
		p.cur.Load().client.CloseIdleConnections()
		return
	}
	old := p.cur.Swap(newConnGeneration(p.fresh()))
	old.retired.Store(true)
	if old.inflight.Load() == 0 {
		old.client.CloseIdleConnections()
	}
}
