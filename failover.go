package cdb

import (
	"context"
	"net/http"
	"slices"
	"strings"
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
//
// Reads follow the account too, as the SDKs route them: to the first of
// ClientOptions.PreferredRegions the account lists in readableLocations,
// else to the first readable location. Until the client has read the
// account (on the first request when PreferredRegions is set, else on the
// first failover answer), reads go to the configured endpoint, as on a
// single-region account they always may. A read answered 404/1002 (no
// replica here has this session's writes yet: the read region lags, or
// still serves after the write region moved) starts a refresh and is
// retried in the write region, where the session's writes are. The
// session tokens are kept across all this: they are positions of the
// container's ranges, valid in any region, and only a 404/1002 from the
// write region itself drops them (client.go's send).

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
	readBase  atomic.Pointer[string] // nil: the configured endpoint
	preferred []string               // ClientOptions.PreferredRegions
	learned   atomic.Bool            // the account was read: reads are routed by it

	// minRefresh is minRegionRefresh; a field so that a test can hold
	// refreshes off.
	minRefresh time.Duration

	mu          sync.Mutex
	refreshing  bool // a refresh runs: other requests do not start one, nor wait for it
	refreshedAt time.Time

	recycledAt atomic.Int64 // unix nanoseconds
}

func newRegionRouter(preferred []string) *regionRouter {
	return &regionRouter{minRefresh: minRegionRefresh, preferred: slices.Clone(preferred)}
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

// baseFor is the scheme://host a request goes to: writes, and reads
// retried after a 404/1002, to the write region; account reads to the
// configured endpoint; other reads to the read region.
func (c *Client) baseFor(r *request) string {
	b := c.regions.readBase.Load()
	switch {
	case isWrite(r) || r.inWriteRegion:
		b = c.regions.writeBase.Load()
	case r.ref.path == accountRef().path:
		b = nil
	}
	if b != nil {
		return *b
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

// followRegions re-reads the account and routes writes to the region it
// lists first for writes, reads to the preferred readable one, recycling
// the connections when either moved. Failures leave the routing as it
// was: the retry then goes where it went before.
//
// A refresh never waits on itself, and no request waits on another's: the
// account read it makes is a routing read (one attempt, and its own 403s
// start no refresh), one refresh runs at a time, and a request that meets
// a failover while another request's refresh runs goes on with the routing
// it has, its retries spaced by the backoff. Only the request that started
// the refresh waits for it, bounded by its context and one attempt's
// deadline.
func (c *Client) followRegions(ctx context.Context) {
	if !c.regions.startRefresh(time.Now()) {
		return
	}
	defer c.regions.endRefresh()
	account, err := c.readAccountForRouting(ctx)
	if err != nil {
		return
	}
	c.regions.learned.Store(true)
	write, writeOK := c.regionBase(account.WritableLocations, nil)
	read, readOK := c.regionBase(account.ReadableLocations, c.regions.preferred)
	if !readOK {
		read, readOK = write, writeOK
	}
	moved := writeOK && c.route(&c.regions.writeBase, write, "writes")
	moved = readOK && c.route(&c.regions.readBase, read, "reads") || moved
	if moved {
		c.conns.recycle()
	}
}

// regionBase is the scheme://host of the first of preferred that regions
// lists (names compared without case or spaces, so "westus2" is "West US
// 2"), else of its first region; false when there is none, or when the
// endpoint is one the client would refuse to be configured with.
func (c *Client) regionBase(regions []AccountRegion, preferred []string) (string, bool) {
	if len(regions) == 0 {
		return "", false
	}
	chosen := regions[0]
	for _, name := range preferred {
		i := slices.IndexFunc(regions, func(r AccountRegion) bool { return sameRegion(r.Name, name) })
		if i >= 0 {
			chosen = regions[i]
			break
		}
	}
	base, host, err := parseEndpoint(chosen.Endpoint)
	if err != nil || checkPlainHTTP(base, host, c.allowPlainHTTP) != nil {
		return "", false // never follow an account document to an endpoint we would refuse
	}
	return base, true
}

func sameRegion(a, b string) bool {
	squash := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, " ", "")) }
	return squash(a) == squash(b)
}

// route points one kind of request at base; true when that moved it.
func (c *Client) route(to *atomic.Pointer[string], base, what string) bool {
	cur := to.Load()
	if cur == nil && base == c.base || cur != nil && *cur == base {
		return false
	}
	to.Store(&base)
	if c.logger != nil {
		c.logger.Info("cdb: "+what+" follow the account's regions", "endpoint", base)
	}
	return true
}

// learnRegions reads the account before a client's first request when
// PreferredRegions asks for a region: reads go there from the start.
func (c *Client) learnRegions(ctx context.Context, r *request) {
	if len(c.regions.preferred) > 0 && !r.routing && !c.regions.learned.Load() {
		c.followRegions(ctx)
	}
}

// retryInWriteRegion sends a read answered 404/1002 to the write region
// from its next attempt, after a refresh has found where that is now. It
// records that the write region itself answered so, when it did.
func (c *Client) retryInWriteRegion(ctx context.Context, r *request) {
	if r.inWriteRegion {
		r.missedInWriteRegion = true
		return
	}
	c.followRegions(ctx)
	r.inWriteRegion = true
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
