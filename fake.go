package cdb

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// FakeAccountOptions tunes an in-memory Cosmos DB account.
type FakeAccountOptions struct {
	// PartitionKeyRanges is the number of physical ranges each new container
	// gets (default 1). More ranges exercise range-targeted queries.
	PartitionKeyRanges int
	// Latency is added to every request, to see how code behaves at a
	// realistic round-trip time.
	Latency time.Duration
	// StaleReadsWithoutSessionToken serves point reads and queries that do
	// not carry the session token of a document's last write from a
	// lagging replica, as an account at Session consistency may: they see
	// the document as it was before that write (absent if it created it,
	// still there if it deleted it). Batches and writes see the current
	// state. A Client echoes the session tokens of its writes and reads, so
	// it reads its own writes; code that bypasses it does not.
	StaleReadsWithoutSessionToken bool
	// Now is the account's clock (default time.Now): it stamps _ts and
	// decides when items expire by their container's defaultTtl and their
	// own ttl, so a test can move it past an expiry. The account checks
	// x-ms-date against it; Client signs with it, and other clients should
	// too (ClientOptions.Now).
	Now func() time.Time
	// NewContainerWarmUp is how many document requests a container created
	// through the API answers 404/1003 (owner resource not found) before it
	// serves them, as a real account may right after creating it.
	NewContainerWarmUp int
	// ExpiredPurgeLag is how long an item expired by its time to live
	// still makes a create of its id conflict, as an account whose
	// background purge has not reached it may (not documented either way).
	ExpiredPurgeLag time.Duration
	// Serverless makes it a serverless account, which has no offers:
	// ReadThroughput reports ThroughputServerless, and creating a database
	// or container with throughput is refused. Otherwise it is provisioned:
	// a container created without throughput gets 400 RU/s manual unless
	// its database's throughput is shared, as on an Azure account.
	Serverless bool
}

// FakeAccount is a strict in-memory Cosmos DB account: it checks signatures,
// ETags, batch atomicity and limits, and refuses the queries the real
// gateway refuses. Tests and demos use it with no network and no Docker.
type FakeAccount struct {
	srv *fakecosmos.Server
	now func() time.Time
}

// fakeEndpoint is what clients of a FakeAccount are configured with; the
// requests never leave the process.
const fakeEndpoint = "https://localhost:8081/"

// NewFakeAccount starts a fresh, empty in-memory account.
func NewFakeAccount(o FakeAccountOptions) *FakeAccount {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &FakeAccount{now: o.Now, srv: fakecosmos.New(fakecosmos.Options{
		PartitionKeyRanges: o.PartitionKeyRanges,
		Latency:            o.Latency,
		Endpoint:           fakeEndpoint,
		Now:                o.Now,

		StaleReadsWithoutSessionToken: o.StaleReadsWithoutSessionToken,
		NewContainerWarmUp:            o.NewContainerWarmUp,
		ExpiredPurgeLag:               o.ExpiredPurgeLag,
		Serverless:                    o.Serverless,
	})}
}

// ForbidMetadataWrites makes the account refuse (or, false, accept again)
// creating, changing and deleting databases and containers with 403, as an
// account with disableKeyBasedMetadataWriteAccess does; reads pass.
func (a *FakeAccount) ForbidMetadataWrites(forbid bool) { a.srv.ForbidMetadataWrites(forbid) }

// Client returns a Client wired to the account in-process. ClientWith
// takes options too (telemetry, a logger, retries).
func (a *FakeAccount) Client() *Client {
	c, err := a.ClientWith(ClientOptions{})
	if err != nil {
		// The endpoint and key are the fake's own, so this is a bug here.
		panic(fmt.Sprintf("cdb: client for the fake account: %v", err))
	}
	return c
}

// ClientWith returns a Client wired to the account in-process, with opts:
// Telemetry, Logger, Retry, Timeouts, UserAgent and the rest. The account
// supplies the key and the transport, so opts must leave Key, Credential,
// Transport and TLS unset; Now defaults to the account's clock.
func (a *FakeAccount) ClientWith(opts ClientOptions) (*Client, error) {
	if taken := accountOwnedOptions(opts); len(taken) > 0 {
		return nil, invalid("FakeAccount.ClientWith", strings.Join(taken, ", "), ErrInvalidClientConfig,
			"the fake account supplies its own key and in-process transport; leave these unset")
	}
	opts.Key, opts.Transport = a.srv.Key(), a.srv.Transport()
	if opts.Now == nil {
		opts.Now = a.now
	}
	return NewClient(fakeEndpoint, opts)
}

// accountOwnedOptions names the options set in opts that a fake account's
// client takes from the account instead.
func accountOwnedOptions(opts ClientOptions) []string {
	var taken []string
	if opts.Key != "" {
		taken = append(taken, "Key")
	}
	if opts.Credential != nil {
		taken = append(taken, "Credential")
	}
	if opts.Transport != nil {
		taken = append(taken, "Transport")
	}
	if !opts.TLS.isZero() {
		taken = append(taken, "TLS")
	}
	return taken
}

// Transport is the in-process http.RoundTripper that reaches the account.
func (a *FakeAccount) Transport() http.RoundTripper { return a.srv.Transport() }

// Handler serves the account over HTTP, e.g. with httptest.NewServer.
func (a *FakeAccount) Handler() http.Handler { return a.srv }

// Endpoint is the endpoint to configure a client with, with Transport.
func (a *FakeAccount) Endpoint() string { return fakeEndpoint }

// Key is the master key the account checks signatures with (the Cosmos DB
// emulator's well-known key).
func (a *FakeAccount) Key() string { return a.srv.Key() }

// FakeCounts are the requests a FakeAccount has served, for tests and
// benchmarks that count round trips and RU.
type FakeCounts struct {
	Requests      int64
	RequestCharge float64
	// ByOperation counts requests per operation: "CreateItem", "ReadItem",
	// "ReplaceItem", "UpsertItem", "DeleteItem", "PatchItem", "Batch",
	// "Query", "ReadPartitionKeyRanges", and the database and container
	// operations.
	ByOperation map[string]int64
	// DocumentsScanned counts documents queries evaluated (the fake has no
	// index, so it evaluates every document in scope); DocumentsReturned the
	// documents they returned.
	DocumentsScanned  int64
	DocumentsReturned int64
	// CrossPartitionQueries counts query pages served with neither a
	// partition key nor a range.
	CrossPartitionQueries int64
}

// Counts returns what the account has served so far.
func (a *FakeAccount) Counts() FakeCounts {
	c := a.srv.Counts()
	out := FakeCounts{
		Requests: c.Requests, RequestCharge: c.RequestCharge, ByOperation: map[string]int64{},
		DocumentsScanned: c.DocumentsScanned, DocumentsReturned: c.DocumentsReturned, CrossPartitionQueries: c.CrossPartitionQueries,
	}
	for op, n := range c.ByOp {
		out.ByOperation[string(op)] = n
	}
	return out
}

// ResetCounts zeroes the counters.
func (a *FakeAccount) ResetCounts() { a.srv.ResetCounts() }

// SetLatency changes the latency added to every request.
func (a *FakeAccount) SetLatency(d time.Duration) { a.srv.SetLatency(d) }

// FakeRequest describes a request a FakeFault may match.
type FakeRequest struct {
	Operation           string // as in FakeCounts.ByOperation
	Method, Path        string
	ItemID              string
	PartitionKey        string // the raw x-ms-documentdb-partitionkey header, e.g. ["order-1"]
	PartitionKeyRangeID string
	// PriorityLevel is "High" or "Low" (x-ms-cosmos-priority-level, High
	// when not sent): match "Low" to throttle low-priority requests first,
	// as an account with priority-based execution on does.
	PriorityLevel string
	Body          []byte
}

// FakeFaultKind says what a FakeFault does.
type FakeFaultKind int

const (
	// FaultStatus answers Status (and SubStatus, RetryAfter) without
	// executing the request.
	FaultStatus FakeFaultKind = iota
	// FaultDropConnection drops the connection without executing.
	FaultDropConnection
	// FaultLoseResponse executes and commits the request, then drops the
	// connection: the client cannot know it succeeded.
	FaultLoseResponse
	// FaultNoAnswer accepts the request and never answers (a half-open
	// connection): nothing executes, and the request waits until the
	// client's attempt deadline or context ends it.
	FaultNoAnswer
)

// FakeFault makes the account misbehave on matching requests.
type FakeFault struct {
	Match      func(FakeRequest) bool // nil matches every request
	Kind       FakeFaultKind
	Status     int
	SubStatus  int
	RetryAfter time.Duration
	Times      int // matching requests it hits; 0 until removed
}

// InjectFault adds a fault; the returned function removes it.
func (a *FakeAccount) InjectFault(f FakeFault) (remove func()) {
	var match func(fakecosmos.RequestInfo) bool
	if f.Match != nil {
		match = func(ri fakecosmos.RequestInfo) bool {
			return f.Match(FakeRequest{
				Operation: string(ri.Op), Method: ri.Method, Path: ri.Path, ItemID: ri.ItemID,
				PartitionKey: ri.PartitionKey, PartitionKeyRangeID: ri.PartitionKeyRangeID, PriorityLevel: ri.PriorityLevel, Body: ri.Body,
			})
		}
	}
	kinds := map[FakeFaultKind]fakecosmos.FaultKind{
		FaultStatus: fakecosmos.FaultStatus, FaultDropConnection: fakecosmos.FaultDropConnection, FaultLoseResponse: fakecosmos.FaultLoseResponse,
		FaultNoAnswer: fakecosmos.FaultNoAnswer,
	}
	return a.srv.InjectFault(fakecosmos.Fault{
		Match: match, Kind: kinds[f.Kind], Status: f.Status, SubStatus: f.SubStatus, RetryAfter: f.RetryAfter, Times: f.Times,
	})
}

// FakeSplitOptions shows what a real split does for a while after it.
type FakeSplitOptions struct {
	// ListParentsFor is how many reads of the range list still list the
	// split ranges beside their children, as the service may.
	ListParentsFor int
	// CompletingFor is how many range-targeted requests answer 410 with
	// substatus 1007 (completing split) before the children serve.
	CompletingFor int
}

// SplitPartitionKeyRangesWith splits every range of a container in two,
// with the window o describes.
func (a *FakeAccount) SplitPartitionKeyRangesWith(database, container string, o FakeSplitOptions) error {
	return a.srv.SplitPartitionKeyRangesWith(database, container, fakecosmos.SplitOptions{ListParentsFor: o.ListParentsFor, CompletingFor: o.CompletingFor})
}

// SetIndexTransformationProgress holds the container's last change to its
// indexing policy at percent done, as a real account builds a new index in
// the background: container reads report the progress, and until it is
// 100 the composite indexes the change added serve no ORDER BY.
func (a *FakeAccount) SetIndexTransformationProgress(database, container string, percent int) error {
	return a.srv.SetIndexTransformationProgress(database, container, percent)
}

// FailOver moves the account's write region to endpoint (an https URL
// whose host differs from Endpoint's), as a regional failover does: the
// account lists it first in writableLocations, and a write that still
// reaches the old host answers 403/3. Clients of the account reach either
// host in-process.
func (a *FakeAccount) FailOver(endpoint string) { a.srv.FailOver(endpoint) }

// AddReadRegion lists a read region in the account's readableLocations,
// after the write region, as a multi-region account does (name as Azure
// spells it, e.g. "East US"; endpoint an https URL whose host differs from
// Endpoint's). Requests are served whichever host they name.
func (a *FakeAccount) AddReadRegion(name, endpoint string) { a.srv.AddReadRegion(name, endpoint) }

// SplitPartitionKeyRanges splits every range of a container in two.
func (a *FakeAccount) SplitPartitionKeyRanges(database, container string) error {
	return a.srv.SplitPartitionKeyRanges(database, container)
}
