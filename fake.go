package cdb

import (
	"fmt"
	"net/http"
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
}

// FakeAccount is a strict in-memory Cosmos DB account: it checks signatures,
// ETags, batch atomicity and limits, and refuses the queries the real
// gateway refuses. Tests and demos use it with no network and no Docker.
type FakeAccount struct {
	srv *fakecosmos.Server
}

// fakeEndpoint is what clients of a FakeAccount are configured with; the
// requests never leave the process.
const fakeEndpoint = "https://localhost:8081/"

// NewFakeAccount starts a fresh, empty in-memory account.
func NewFakeAccount(o FakeAccountOptions) *FakeAccount {
	return &FakeAccount{srv: fakecosmos.New(fakecosmos.Options{
		PartitionKeyRanges: o.PartitionKeyRanges,
		Latency:            o.Latency,
		Endpoint:           fakeEndpoint,
	})}
}

// Client returns a Client wired to the account in-process.
func (a *FakeAccount) Client() *Client {
	c, err := NewClient(fakeEndpoint, ClientOptions{Key: a.srv.Key(), Transport: a.srv.Transport()})
	if err != nil {
		// The endpoint and key are the fake's own, so this is a bug here.
		panic(fmt.Sprintf("cdb: client for the fake account: %v", err))
	}
	return c
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
