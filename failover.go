package cdb

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Regional failover. A client is configured with the account's global
// endpoint, and sends everything there over pooled keep-alive connections.
// After a failover, those connections can still reach the old write
// region's gateway, which answers writes with 403/3 (write forbidden) or
// 403/1008: sent again on the same connections they fail the same way. So,
// as the official SDKs do, a client that meets one re-reads the account
// (GET /), sends writes to the region it lists first in writableLocations
// from then on, and recycles its connections, busy ones too
// (connections.go), so the next ones resolve and connect afresh.
// Connections are also recycled every connMaxAge, so a DNS change behind
// the global endpoint is seen without an error first.

// connMaxAge bounds how long pooled connections, busy ones included, are
// reused.
const connMaxAge = 5 * time.Minute

// minRegionRefresh spaces re-reads of the account: many requests meeting
// the same failover at once read it once.
const minRegionRefresh = time.Second

// regionRouter holds where writes go, and when connections were last
// recycled.
type regionRouter struct {
	writeBase atomic.Pointer[string] // nil: the configured endpoint

	// minRefresh is minRegionRefresh; a field so that a test can hold
	// refreshes off.
	minRefresh time.Duration

	mu          sync.Mutex
	refreshing  bool // a refresh runs: other requests do not start one, nor wait for it
	refreshedAt time.Time

	recycledAt atomic.Int64 // unix nanoseconds
}

func newRegionRouter() *regionRouter {
	return &regionRouter{minRefresh: minRegionRefresh}
}

// startRefresh takes the one refresh turn: false when a refresh runs or
// one started less than minRefresh ago.
func (rr *regionRouter) startRefresh(now time.Time) bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.refreshing || now.Sub(rr.refreshedAt) < rr.minRefresh {
		return false
	}
	rr.refreshing, rr.refreshedAt = true, now
	return true
}

func (rr *regionRouter) endRefresh() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.refreshing = false
}

// baseFor is the scheme://host a request goes to: writes to the current
// write region, everything else to the configured endpoint.
func (c *Client) baseFor(r *request) string {
	if isWrite(r) {
		if b := c.regions.writeBase.Load(); b != nil {
			return *b
		}
	}
	return c.base
}

// isWrite reports a request that changes items: any method but GET, except
// a query (a POST that reads).
func isWrite(r *request) bool {
	return r.method != http.MethodGet && r.contentType != "application/query+json"
}

// isWriteRegionMoved reports the answers that mean the write region is
// elsewhere now.
func isWriteRegionMoved(ce *CosmosError) bool {
	return ce.StatusCode == http.StatusForbidden &&
		(ce.SubStatusCode == SubStatusWriteForbidden || ce.SubStatusCode == SubStatusDatabaseAccountNotFound)
}

// followWriteRegion re-reads the account and routes writes to the region
// it lists first for writes, recycling the connections. Failures leave the
// routing as it was: the retry then goes where it went before.
//
// A refresh never waits on itself, and no request waits on another's: the
// account read it makes is a routing read (one attempt, and its own 403s
// start no refresh), one refresh runs at a time, and a request that meets
// a failover while another request's refresh runs goes on with the routing
// it has, its retries spaced by the backoff. Only the request that started
// the refresh waits for it, bounded by its context and one attempt's
// deadline.
func (c *Client) followWriteRegion(ctx context.Context) {
	if !c.regions.startRefresh(time.Now()) {
		return
	}
	defer c.regions.endRefresh()
	account, err := c.readAccountForRouting(ctx)
	if err != nil || len(account.WritableLocations) == 0 {
		return
	}
	base, host, err := parseEndpoint(account.WritableLocations[0].Endpoint)
	if err != nil || checkPlainHTTP(base, host, c.allowPlainHTTP) != nil {
		return // never follow an account document to an endpoint we would refuse
	}
	if cur := c.regions.writeBase.Load(); cur == nil && base == c.base || cur != nil && *cur == base {
		return
	}
	c.regions.writeBase.Store(&base)
	c.conns.recycle()
	if c.logger != nil {
		c.logger.Info("cdb: writes follow the account's write region", "endpoint", base)
	}
}

// readAccountForRouting is the account read of a refresh: a routing
// request, so that neither its answer nor its failure starts another.
func (c *Client) readAccountForRouting(ctx context.Context) (AccountProperties, error) {
	var props AccountProperties
	resp, err := c.send(ctx, &request{operation: "ReadAccount", method: http.MethodGet, ref: accountRef(), idempotent: true, routing: true})
	if err != nil {
		return props, err
	}
	return props, decodeJSON("ReadAccount", resp.Body, &props)
}

// recycleConnections recycles the pooled connections (connections.go) once
// they may be older than connMaxAge.
func (c *Client) recycleConnections() {
	now := time.Now().UnixNano()
	last := c.regions.recycledAt.Load()
	if last == 0 {
		c.regions.recycledAt.CompareAndSwap(0, now)
		return
	}
	if time.Duration(now-last) < connMaxAge || !c.regions.recycledAt.CompareAndSwap(last, now) {
		return
	}
	c.conns.recycle()
}
