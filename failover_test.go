package cdb

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostLog records the host and method of every request a transport sends.
type hostLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []string
}

func (h *hostLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.sent = append(h.sent, r.Method+" "+r.URL.Host+r.URL.Path)
	h.mu.Unlock()
	return h.next.RoundTrip(r)
}

func (h *hostLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.sent
	h.sent = nil
	return out
}

// After a regional failover the old write region answers writes with 403/3.
// The client re-reads the account, sends the write again to the region it now
// lists for writes, and keeps sending writes there; reads stay on the
// configured endpoint.
func TestWritesFollowTheWriteRegionAfterAFailover(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	log := &hostLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) { o.Transport = log })
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("before", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "before", nil) // resolves p's range: no range read below
	require.NoError(t, err)

	acct.FailOver("https://westus.localhost:8081/")
	log.take()
	_, err = cc.CreateItem(testCtx(t), pk, itemJSON("after", "p", 2), nil)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"POST localhost:8081/dbs/db/colls/coll/docs",        // the old region: 403/3
		"GET localhost:8081/",                               // the account, re-read
		"POST westus.localhost:8081/dbs/db/colls/coll/docs", // the write region
	}, log.take())

	_, err = cc.UpsertItem(testCtx(t), pk, itemJSON("after", "p", 3), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "after", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"POST westus.localhost:8081/dbs/db/colls/coll/docs",
		"GET localhost:8081/dbs/db/colls/coll/docs/after",
	}, log.take(), "later writes go to the write region at once; reads stay")
}

// An account document never takes writes to an endpoint the client would
// refuse to be configured with (plain http to another host).
func TestAFailoverIsNotFollowedToAPlainHTTPHost(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	c, err := NewClient(acct.Endpoint(), ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Retry: fastRetryOptions()})
	require.NoError(t, err)
	acct.FailOver("http://evil.example.com/")
	c.followWriteRegion(testCtx(t))
	assert.Nil(t, c.regions.writeBase.Load())
}
