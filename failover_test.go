package cdb

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb/internal/hostspeed"

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
// lists for writes, and keeps sending writes there; reads follow to the
// region the account now lists for reads.
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
		"GET westus.localhost:8081/dbs/db/colls/coll/docs/after",
	}, log.take(), "later writes and reads go to the new region at once")
}

// An account document never takes writes to an endpoint the client would
// refuse to be configured with (plain http to another host).
func TestAFailoverIsNotFollowedToAPlainHTTPHost(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	c, err := NewClient(acct.Endpoint(), ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Retry: fastRetryOptions()})
	require.NoError(t, err)
	acct.FailOver("http://evil.example.com/")
	c.followRegions(testCtx(t))
	assert.Nil(t, c.regions.writeBase.Load())
	assert.Nil(t, c.regions.readBase.Load())
}

// failedOverContainer is a container whose account has just failed over
// to westus: the next write meets 403/3 at the configured endpoint.
// Refreshes of the account are held off after the first, so a test
// counts the account reads of one refresh.
func failedOverContainer(t *testing.T, edit func(*ClientOptions)) (*FakeAccount, *ContainerClient, *hostLog) {
	t.Helper()
	acct := NewFakeAccount(FakeAccountOptions{})
	log := &hostLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) {
		o.Transport = log
		if edit != nil {
			edit(o)
		}
	})
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("before", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "before", nil)
	require.NoError(t, err)
	acct.FailOver("https://westus.localhost:8081/")
	cc.client.regions.minRefresh = time.Hour
	log.take()
	return acct, cc, log
}

// accountReads counts the account reads among sent requests.
func accountReads(sent []string) int {
	n := 0
	for _, s := range sent {
		if strings.HasPrefix(s, "GET ") && strings.HasSuffix(s, "/") && strings.Count(s, "/") == 1 {
			n++
		}
	}
	return n
}

// isAccountRead matches the fake's account reads.
func isAccountRead(r FakeRequest) bool { return r.Operation == "ReadAccount" }

// writeWithin runs a write and fails the test, rather than hang it, if the
// write has not returned within a deadline far beyond its retries.
func writeWithin(t *testing.T, cc *ContainerClient, id string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := cc.CreateItem(context.Background(), NewPartitionKeyString("p"), itemJSON(id, "p", 2), nil)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(hostspeed.Scale(20 * time.Second)):
		t.Fatalf("the write %s still waits: a region refresh blocked it", id)
		return nil
	}
}

// requireWriteForbidden asserts the write ended on the old region's 403/3:
// the refresh failed, so the routing stayed as it was.
func requireWriteForbidden(t *testing.T, err error) {
	t.Helper()
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, [2]int{http.StatusForbidden, SubStatusWriteForbidden}, [2]int{ce.StatusCode, ce.SubStatusCode}, "%v", err)
}

// A 403/1008 to the account read a refresh makes does not start a refresh
// of its own (which waited on the first: a deadlock), and the refresh reads
// the account once.
func TestARefusedAccountReadDuringAFailoverDoesNotHangTheWrite(t *testing.T) {
	acct, cc, log := failedOverContainer(t, nil)
	acct.InjectFault(FakeFault{Match: isAccountRead, Status: http.StatusForbidden, SubStatus: SubStatusDatabaseAccountNotFound})

	requireWriteForbidden(t, writeWithin(t, cc, "after"))
	assert.Equal(t, 1, accountReads(log.take()), "one refresh, one account read")
}

// An account read that never answers ends at the attempt deadline, and a
// refresh does not retry it: the write's own retries start the next one.
func TestAnUnansweredAccountReadDuringAFailoverEndsAtOneAttempt(t *testing.T) {
	acct, cc, log := failedOverContainer(t, func(o *ClientOptions) { o.Timeouts.Attempt = 200 * time.Millisecond })
	acct.InjectFault(FakeFault{Match: isAccountRead, Kind: FaultNoAnswer})

	requireWriteForbidden(t, writeWithin(t, cc, "after"))
	assert.Equal(t, 1, accountReads(log.take()), "the refresh's account read is not retried")
}

// A 5xx to the account read leaves the routing as it was; once the account
// answers, the next refresh moves writes to the new region.
func TestAFailedAccountReadDuringAFailoverIsMadeUpByTheNextRefresh(t *testing.T) {
	acct, cc, log := failedOverContainer(t, nil)
	remove := acct.InjectFault(FakeFault{Match: isAccountRead, Status: http.StatusServiceUnavailable})

	requireWriteForbidden(t, writeWithin(t, cc, "after"))
	assert.Equal(t, 1, accountReads(log.take()), "the refresh's account read is not retried")

	remove()
	cc.client.regions.minRefresh = 0
	require.NoError(t, writeWithin(t, cc, "later"))
	assert.Equal(t, "https://westus.localhost:8081", *cc.client.regions.writeBase.Load(), "writes follow the region")
}

// heldAccountReads holds every account read until released.
type heldAccountReads struct {
	next    http.RoundTripper
	arrived chan struct{}
	release chan struct{}
}

func (h *heldAccountReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Path == "/" {
		select {
		case h.arrived <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return h.next.RoundTrip(r)
}

// While one write's refresh waits on a slow account read, other writes
// meeting 403/3 go on with the routing they have instead of waiting for it;
// the write that started the refresh follows the region once it answers.
func TestWritesDoNotWaitOnAnotherRequestsRegionRefresh(t *testing.T) {
	held := &heldAccountReads{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	_, cc, _ := failedOverContainer(t, func(o *ClientOptions) {
		held.next = o.Transport
		o.Transport = held
	})
	cc.client.regions.minRefresh = 0

	first := make(chan error, 1)
	go func() {
		_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), itemJSON("first", "p", 2), nil)
		first <- err
	}()
	select {
	case <-held.arrived:
	case <-time.After(hostspeed.Scale(20 * time.Second)):
		t.Fatal("the first write never read the account")
	}

	requireWriteForbidden(t, writeWithin(t, cc, "second"))
	select {
	case err := <-first:
		t.Fatalf("the first write ended before its refresh did: %v", err)
	default:
	}

	close(held.release)
	require.NoError(t, <-first, "the refresh it started moved writes to the new region")
}

// PreferredRegions sends reads to the first of them the account can read
// in (names compared without case or spaces); writes stay in the write
// region.
func TestPreferredRegionsChooseWhereReadsGo(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	acct.AddReadRegion("East US", "https://eastus.localhost:8081/")
	acct.AddReadRegion("North Europe", "https://northeurope.localhost:8081/")
	log := &hostLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) {
		o.Transport = log
		o.PreferredRegions = []string{"Japan East", "northeurope", "East US"}
	})
	assert.Equal(t, "GET localhost:8081/", log.take()[0], "the account is read before the first request")

	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "a", nil)
	require.NoError(t, err)
	sent := log.take()
	assert.Equal(t, "POST localhost:8081/dbs/db/colls/coll/docs", sent[0])
	assert.Equal(t, "GET northeurope.localhost:8081/dbs/db/colls/coll/docs/a", sent[len(sent)-1])
}

// laggingRegion answers every item read sent to host with 404/1002: no
// replica there has this session's writes yet.
type laggingRegion struct {
	next http.RoundTripper
	host string
}

func (l *laggingRegion) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || r.URL.Host != l.host || !strings.Contains(r.URL.Path, "/docs/") {
		return l.next.RoundTrip(r)
	}
	h := http.Header{}
	h.Set("x-ms-substatus", "1002")
	h.Set("Content-Type", "application/json")
	body := `{"code":"NotFound","message":"The read session is not available for the input session token."}`
	return &http.Response{StatusCode: http.StatusNotFound, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// A read region that lags answers 404/1002: the read is retried in the
// write region, which has the session's writes, and the session tokens are
// kept for the reads after it.
func TestAReadSessionNotAvailableIsRetriedInTheWriteRegion(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	acct.AddReadRegion("East US", "https://eastus.localhost:8081/")
	log := &hostLog{next: &laggingRegion{next: acct.Transport(), host: "eastus.localhost:8081"}}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) {
		o.Transport = log
		o.PreferredRegions = []string{"East US"}
	})
	cc.client.regions.minRefresh = time.Hour
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "a", nil) // resolves p's range: no range read below
	require.NoError(t, err)
	log.take()

	item, err := cc.ReadItem(testCtx(t), pk, "a", nil)
	require.NoError(t, err)
	assert.Contains(t, string(item.Value), `"v":1`)
	assert.Equal(t, []string{
		"GET eastus.localhost:8081/dbs/db/colls/coll/docs/a", // the read region: 404/1002
		"GET localhost:8081/dbs/db/colls/coll/docs/a",        // the write region
	}, log.take())
	assert.True(t, cc.client.sessions.holds(cc.sessionLink()), "a lagging read region does not drop the session tokens")
}

// After a failover, a read that meets 404/1002 at the old region finds the
// account's new regions and is retried in the write region; the session
// tokens are kept, so later reads still see this process's writes.
func TestReadsFollowAFailoverAndKeepTheSession(t *testing.T) {
	acct, cc, log := failedOverContainer(t, nil)
	cc.client.regions.minRefresh = 0
	acct.InjectFault(FakeFault{Match: isItemRead, Status: http.StatusNotFound, SubStatus: SubStatusReadSessionNotAvailable, Times: 1})

	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "before", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"GET localhost:8081/dbs/db/colls/coll/docs/before", // the old region: 404/1002
		"GET localhost:8081/",                              // the account, re-read
		"GET westus.localhost:8081/dbs/db/colls/coll/docs/before",
	}, log.take())
	assert.True(t, cc.client.sessions.holds(cc.sessionLink()), "the session tokens are kept across the failover")
}
