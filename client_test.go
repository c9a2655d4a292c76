package cdb

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// The emulator's well-known key: public, and the key of the 1926 test vectors.
const testMasterKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

var testClock = time.Date(2024, time.March, 5, 6, 7, 8, 0, time.UTC)

// ---------------------------------------------------------------------------
// A scripted transport: records every request, answers from a function.

type wireRequest struct {
	Method  string
	Path    string // escaped, as on the wire
	Header  http.Header
	Body    []byte
	Arrived time.Time
}

type scriptedTransport struct {
	mu      sync.Mutex
	reqs    []wireRequest
	respond func(n int, r wireRequest) (*http.Response, error) // n counts from 0
}

func (s *scriptedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	rec := wireRequest{Method: req.Method, Path: req.URL.EscapedPath(), Header: req.Header.Clone(), Body: body, Arrived: time.Now()}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, rec)
	s.mu.Unlock()
	resp, err := s.respond(n, rec)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

func (s *scriptedTransport) requests() []wireRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]wireRequest(nil), s.reqs...)
}

func (s *scriptedTransport) count() int { return len(s.requests()) }

// reply builds a response; kv are header name/value pairs.
func reply(status int, body string, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
}

// replyAlways answers every request the same way.
func replyAlways(status int, body string, kv ...string) func(int, wireRequest) (*http.Response, error) {
	return func(int, wireRequest) (*http.Response, error) { return reply(status, body, kv...), nil }
}

// replySequence answers the n-th request with the n-th function, the last one
// repeating.
func replySequence(fs ...func(int, wireRequest) (*http.Response, error)) func(int, wireRequest) (*http.Response, error) {
	return func(n int, r wireRequest) (*http.Response, error) {
		return fs[min(n, len(fs)-1)](n, r)
	}
}

func fastRetryOptions() RetryOptions {
	return RetryOptions{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, MaxElapsed: time.Minute}
}

func newScriptedClient(t *testing.T, respond func(int, wireRequest) (*http.Response, error), opts ...func(*ClientOptions)) (*Client, *scriptedTransport) {
	t.Helper()
	st := &scriptedTransport{respond: respond}
	o := ClientOptions{Key: testMasterKey, Transport: st, Retry: fastRetryOptions(), Now: func() time.Time { return testClock }}
	for _, f := range opts {
		f(&o)
	}
	c, err := NewClient("https://acct.documents.azure.com:443/", o)
	require.NoError(t, err)
	return c, st
}

func newScriptedContainer(t *testing.T, respond func(int, wireRequest) (*http.Response, error), opts ...func(*ClientOptions)) (*ContainerClient, *scriptedTransport) {
	t.Helper()
	c, st := newScriptedClient(t, respond, opts...)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)
	return cc, st
}

// newFakeContainer is container "coll" of database "db", partitioned by
// /pk, created on acct through a client with fast retries; edit, when not
// nil, changes the client's options first (a transport of its own, say).
func newFakeContainer(t *testing.T, acct *FakeAccount, edit func(*ClientOptions)) *ContainerClient {
	t.Helper()
	o := ClientOptions{Key: acct.Key(), Transport: acct.Transport(), Retry: fastRetryOptions()}
	if edit != nil {
		edit(&o)
	}
	c, err := NewClient(acct.Endpoint(), o)
	require.NoError(t, err)
	require.NoError(t, c.EnsureDatabase(testCtx(t), "db"))
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)
	_, err = cc.Ensure(testCtx(t), ContainerProperties{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}})
	require.NoError(t, err)
	return cc
}

// assertSignedFor checks the Authorization header of r against a signature
// computed independently with the test key over resourceType and link.
func assertSignedFor(t *testing.T, r wireRequest, resourceType, link string) {
	t.Helper()
	k, err := newMasterKey(testMasterKey)
	require.NoError(t, err)
	date := r.Header.Get("x-ms-date")
	require.NotEmpty(t, date)
	want, _ := k.authorize(context.Background(), r.Method, resourceType, link, date)
	assert.Equal(t, want, r.Header.Get("Authorization"), "signature over %s %q", resourceType, link)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(30*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// ---------------------------------------------------------------------------
// NewClient validation.

func TestNewClientRejectsBadEndpoints(t *testing.T) {
	cases := map[string]string{
		"":                                      "want an absolute http or https URL",
		"acct.documents.azure.com":              "want an absolute http or https URL",
		"ftp://acct.documents.azure.com/":       "want an absolute http or https URL",
		"https:///path":                         "no host",
		"https://acct.documents.azure.com/?x=1": "no query",
		"https://acct.documents.azure.com/#f":   "no fragment",
		"https://acct.documents.azure.com/dbs":  "no path",
		"://bad":                                "invalid endpoint",
	}
	for endpoint, want := range cases {
		_, err := NewClient(endpoint, ClientOptions{Key: testMasterKey})
		require.ErrorIs(t, err, ErrInvalidClientConfig, endpoint)
		assert.Contains(t, err.Error(), want, endpoint)
	}
	_, err := NewClient("://bad", ClientOptions{Key: testMasterKey})
	var parseErr *url.Error
	assert.ErrorAs(t, err, &parseErr, "the URL parse error stays reachable")
	for _, ok := range []string{"https://acct.documents.azure.com:443/", "https://acct.documents.azure.com", "http://127.0.0.1:8081"} {
		c, err := NewClient(ok, ClientOptions{Key: testMasterKey})
		require.NoError(t, err, ok)
		assert.Equal(t, ok, c.Endpoint())
	}
}

// TestNewClientRefusesPlainHTTPBeyondLoopback: the master-key signature and
// Entra tokens travel in the Authorization header, so plain http is only for
// the emulator on this machine.
func TestNewClientRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	refused := []string{
		"http://acct.documents.azure.com/",
		"http://acct.documents.azure.com:443",
		"http://10.0.0.5:8081/",
		"http://192.168.1.20:8081",
		"http://[2001:db8::1]:8081/",
		"http://0.0.0.0:8081/",
		"http://localhost.example.com:8081/",
		"http://127.0.0.1.nip.io:8081/",
	}
	for _, ep := range refused {
		for _, opts := range []ClientOptions{
			{Key: testMasterKey},
			{Credential: staticTokenCred("t")},
			{Key: testMasterKey, Transport: http.DefaultTransport},
		} {
			_, err := NewClient(ep, opts)
			require.Error(t, err, ep)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve, ep)
			assert.ErrorIs(t, err, ErrInsecureEndpoint, ep)
			assert.Equal(t, "endpoint", ve.Field)
			assert.Contains(t, err.Error(), "clear text", ep)
			assert.Contains(t, err.Error(), "InsecureAllowPlainHTTP", ep)
			assert.NotContains(t, err.Error(), testMasterKey)
		}
	}

	allowed := []string{"http://127.0.0.1:8081", "http://127.1.2.3:8081/", "http://localhost:8081/", "http://LOCALHOST:8081", "http://[::1]:8081/"}
	for _, ep := range allowed {
		_, err := NewClient(ep, ClientOptions{Key: testMasterKey})
		assert.NoError(t, err, ep)
	}

	// The loudly named opt-in lets a user who knows what it means go on.
	c, err := NewClient("http://cosmos.internal.example:8081/", ClientOptions{Key: testMasterKey, InsecureAllowPlainHTTP: true})
	require.NoError(t, err)
	assert.Equal(t, "http://cosmos.internal.example:8081/", c.Endpoint())
}

// TestNewClientDoesNotEchoUserInfo: an endpoint with user information is
// refused for it, also when it is wrong in another way that would name the
// endpoint (a scheme, a port that does not parse, no "//").
func TestNewClientDoesNotEchoUserInfo(t *testing.T) {
	for _, endpoint := range []string{
		"https://user:hunter2secret@acct.documents.azure.com/",
		"ftp://user:hunter2secret@acct.documents.azure.com/",
		"https://user:hunter2secret@acct.documents.azure.com:bad/",
		"https://user:hunter2secret@/dbs",
		"user:hunter2secret@acct.documents.azure.com",
	} {
		_, err := NewClient(endpoint, ClientOptions{Key: testMasterKey})
		require.ErrorIs(t, err, ErrInvalidClientConfig, endpoint)
		require.ErrorContains(t, err, "user information is not allowed", "refused for its user information, not for another reason")
		assert.NotContains(t, err.Error(), "hunter2secret")
	}
}

func TestNewClientValidatesKeyWithoutEchoingIt(t *testing.T) {
	secretish := "sEcReT-not-base64!!" + strings.Repeat("x", 30)
	cases := []struct {
		opts ClientOptions
		want string
	}{
		{ClientOptions{}, "empty"},
		{ClientOptions{Key: "   "}, "empty"},
		{ClientOptions{Key: secretish}, "not valid standard base64"},
		{ClientOptions{Key: testMasterKey[:len(testMasterKey)-3]}, "not valid standard base64"},
		{ClientOptions{Key: testMasterKey, Credential: staticTokenCred("t")}, "exactly one"},
	}
	for _, tc := range cases {
		_, err := NewClient("https://acct.documents.azure.com/", tc.opts)
		require.ErrorIs(t, err, ErrInvalidClientConfig)
		assert.Contains(t, err.Error(), tc.want)
		if tc.opts.Key != "" && strings.TrimSpace(tc.opts.Key) != "" {
			assert.NotContains(t, err.Error(), tc.opts.Key)
			assert.NotContains(t, err.Error(), "sEcReT")
		}
	}
}

func TestNewClientTLSRules(t *testing.T) {
	_, err := NewClient("https://acct.documents.azure.com/", ClientOptions{Key: testMasterKey, TLS: TLSOptions{InsecureSkipVerify: true}})
	require.ErrorIs(t, err, ErrInvalidClientConfig)
	assert.Contains(t, err.Error(), "loopback")

	for _, ep := range []string{"https://localhost:8081/", "https://127.0.0.1:8081/", "https://[::1]:8081/"} {
		_, err := NewClient(ep, ClientOptions{Key: testMasterKey, TLS: TLSOptions{InsecureSkipVerify: true}})
		assert.NoError(t, err, ep)
	}

	_, err = NewClient("https://localhost:8081/", ClientOptions{Key: testMasterKey, Transport: http.DefaultTransport, TLS: TLSOptions{CAFile: "x.pem"}})
	require.ErrorIs(t, err, ErrInvalidClientConfig)
	assert.Contains(t, err.Error(), "custom Transport")

	_, err = NewClient("https://localhost:8081/", ClientOptions{Key: testMasterKey, TLS: TLSOptions{CAFile: filepath.Join(t.TempDir(), "missing.pem")}})
	require.ErrorIs(t, err, ErrInvalidClientConfig)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the read error stays reachable")
	assert.ErrorContains(t, err, "reading TLS CA file")

	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	_, err = NewClient("https://localhost:8081/", ClientOptions{Key: testMasterKey, TLS: TLSOptions{CAFile: notPEM}})
	require.ErrorIs(t, err, ErrInvalidClientConfig)
	assert.ErrorContains(t, err, "holds no PEM certificate")
}

// ---------------------------------------------------------------------------
// TLS against a real TLS server.

func newTLSTestServer(t *testing.T) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ms-request-charge", "1")
		_, _ = w.Write([]byte(`{"id":"acct"}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTLSVerificationIsOnByDefault(t *testing.T) {
	srv := newTLSTestServer(t)
	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, Retry: fastRetryOptions()})
	require.NoError(t, err)
	_, err = c.ReadAccount(testCtx(t))
	require.Error(t, err)
	assert.True(t, isCertificateError(err), "got %v", err)
	assert.Equal(t, int64(1), c.Stats().Requests, "a certificate failure is not retried")
	assert.False(t, IsRetryable(ToProviderError("Read", err)), "a certificate failure is permanent")
}

func TestTLSCustomCAAccepted(t *testing.T) {
	srv := newTLSTestServer(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, TLS: TLSOptions{CAFile: caFile}})
	require.NoError(t, err)
	acct, err := c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, "acct", acct.ID)

	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err = NewClient(srv.URL, ClientOptions{Key: testMasterKey, TLS: TLSOptions{RootCAs: pool}})
	require.NoError(t, err)
	_, err = c.ReadAccount(testCtx(t))
	require.NoError(t, err)
}

func TestTLSInsecureSkipVerifyOnLoopback(t *testing.T) {
	srv := newTLSTestServer(t) // listens on 127.0.0.1
	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, TLS: TLSOptions{InsecureSkipVerify: true}})
	require.NoError(t, err)
	_, err = c.ReadAccount(testCtx(t))
	require.NoError(t, err)
}

func TestTLSCAFileWithoutCertificates(t *testing.T) {
	f := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(f, []byte("not a pem"), 0o600))
	_, err := NewClient("https://localhost:8081/", ClientOptions{Key: testMasterKey, TLS: TLSOptions{CAFile: f}})
	assert.ErrorContains(t, err, "no PEM certificate")
}

// ---------------------------------------------------------------------------
// Common headers.

func TestCommonHeaders(t *testing.T) {
	c, st := newScriptedClient(t, replyAlways(200, `{"id":"acct"}`))
	_, err := c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	r := st.requests()[0]
	assert.Equal(t, "GET", r.Method)
	assert.Equal(t, "/", r.Path)
	assert.Equal(t, "Tue, 05 Mar 2024 06:07:08 GMT", r.Header.Get("x-ms-date"))
	assert.Equal(t, "2020-07-15", r.Header.Get("x-ms-version"))
	assert.Equal(t, "cdb-go", r.Header.Get("User-Agent"))
	assert.Equal(t, "application/json", r.Header.Get("Accept"))
	assert.Empty(t, r.Header.Get("Content-Type"), "no body, no content type")
	assertSignedFor(t, r, "", "")

	c, st = newScriptedClient(t, replyAlways(200, `{}`), func(o *ClientOptions) {
		o.APIVersion = "2018-12-31"
		o.UserAgent = "my-app/1"
	})
	_, err = c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, "2018-12-31", st.requests()[0].Header.Get("x-ms-version"))
	assert.Equal(t, "my-app/1", st.requests()[0].Header.Get("User-Agent"))
}

func TestReadAccountParsesProperties(t *testing.T) {
	c, _ := newScriptedClient(t, replyAlways(200, `{"id":"acct","writableLocations":[{"name":"West US","databaseAccountEndpoint":"https://acct-westus.documents.azure.com:443/"}],"userConsistencyPolicy":{"defaultConsistencyLevel":"Session"}}`))
	acct, err := c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, "acct", acct.ID)
	require.Len(t, acct.WritableLocations, 1)
	assert.Equal(t, "West US", acct.WritableLocations[0].Name)
	assert.Equal(t, "Session", acct.ConsistencyPolicy.DefaultConsistencyLevel)
}

// ---------------------------------------------------------------------------
// Retries: throttling and transient statuses are retried with backoff and a
// bound; a write that may have been applied is reported OutcomeUnknown rather
// than sent again.

func TestRetryHonoursRetryAfterOn429(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(
		replyAlways(429, `{"code":"TooManyRequests","message":"slow down"}`, "x-ms-retry-after-ms", "80", "x-ms-request-charge", "0.5"),
		replyAlways(200, `{"id":"a"}`, "x-ms-request-charge", "1", "etag", `"e1"`),
	))
	resp, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, resp.Attempts)
	assert.Equal(t, 1.5, resp.RequestCharge, "charges of every attempt add up")
	reqs := st.requests()
	require.Len(t, reqs, 2)
	assert.GreaterOrEqual(t, reqs[1].Arrived.Sub(reqs[0].Arrived), 80*time.Millisecond, "waited the advertised retry-after")

	s := cc.client.Stats()
	assert.Equal(t, int64(2), s.Requests)
	assert.Equal(t, int64(1), s.Retries)
	assert.Equal(t, int64(1), s.Throttles)
	assert.Equal(t, int64(1), s.ByOperation["ReadItem"].Throttles)
	assert.Equal(t, int64(1), s.ByOperation["ReadItem"].Operations)
	assert.InDelta(t, 1.5, s.RequestCharge, 1e-9)
}

func TestRetryAfterHeaderPrecedence(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "3")
	assert.Equal(t, 3*time.Second, retryAfter(h))
	h.Set("retry-after-ms", "250")
	assert.Equal(t, 250*time.Millisecond, retryAfter(h))
	h.Set("x-ms-retry-after-ms", "12.5")
	assert.Equal(t, 12500*time.Microsecond, retryAfter(h))
	assert.Equal(t, time.Duration(0), retryAfter(http.Header{}))
}

func TestRetryIsBoundedByMaxAttempts(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(429, `{"code":"TooManyRequests","message":"x"}`, "x-ms-retry-after-ms", "1", "x-ms-substatus", "3200"),
		func(o *ClientOptions) { o.Retry.MaxAttempts = 3 })
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 429, ce.StatusCode)
	assert.Equal(t, 3200, ce.SubStatusCode)
	assert.Equal(t, time.Millisecond, ce.RetryAfter)
	assert.Equal(t, 3, st.count())
	s := cc.client.Stats()
	assert.Equal(t, int64(3), s.Throttles)
	assert.Equal(t, int64(2), s.Retries)
	assert.Equal(t, int64(1), s.ByOperation["ReadItem"].Errors)
	assert.True(t, IsRetryable(ToProviderError("Read", err)))
}

func TestARefusalThatLastsIsTriedThreeTimesThenReported(t *testing.T) {
	for _, status := range []int{401, 403} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			cc, st := newScriptedContainer(t, replyAlways(status, `{"code":"X","message":"refused"}`))
			_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
			var ce *CosmosError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, status, ce.StatusCode)
			assert.False(t, ce.OutcomeUnknown, "the service refused before it ran anything")
			assert.False(t, IsRetryable(ToProviderError("Enqueue", err)), "the client has retried: it is the caller's now")
			assert.Equal(t, 3, st.count())
		})
	}
}

func TestRetryIsBoundedByMaxElapsed(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(429, `{}`, "x-ms-retry-after-ms", "3600000"),
		func(o *ClientOptions) { o.Retry.MaxElapsed = time.Second })
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	assert.True(t, HasStatus(err, 429))
	assert.Equal(t, 1, st.count(), "an hour's wait does not fit in a second's budget")
}

func TestContextCancelStopsTheRetryWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc, st := newScriptedContainer(t, func(int, wireRequest) (*http.Response, error) {
		cancel() // the caller gives up while the client waits ten minutes
		return reply(429, `{}`, "x-ms-retry-after-ms", "600000"), nil
	}, func(o *ClientOptions) { o.Retry.MaxElapsed = time.Hour })
	_, err := cc.ReadItem(ctx, NewPartitionKeyString("p"), "a", nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, st.count())
	assert.ErrorIs(t, ToProviderError("Read", err), context.Canceled)
}

func TestRetriedStatuses(t *testing.T) {
	cases := []struct {
		status, sub int
		write       bool
		retried     bool
	}{
		{449, 0, true, true},
		{503, 0, true, true},
		{410, 1000, true, true},
		{410, 1002, false, true}, // not range-targeted: the gateway re-routes
		{404, 1002, false, true},
		{404, 1003, true, true}, // the container just created: a real account says so for a while
		{404, 1003, false, true},
		{403, 3, true, true},
		{408, 0, false, true},
		{502, 0, false, true},
		{504, 0, false, true},
		{404, 0, false, false},
		{409, 0, true, false},
		{412, 0, true, false},
		{400, 0, true, false},
		{401, 0, false, true}, // a token or the signing clock refreshing
		{401, 0, true, true},  // refused before it ran: a write is resent too
		{403, 0, true, true},  // a role assignment propagating
		{403, 1014, true, false},
		{403, 5300, false, false},
		{413, 0, true, false},
		{500, 0, false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d.%d write=%v", tc.status, tc.sub, tc.write), func(t *testing.T) {
			cc, st := newScriptedContainer(t, replySequence(
				replyAlways(tc.status, `{"code":"X","message":"m"}`, "x-ms-substatus", fmt.Sprint(tc.sub)),
				replyAlways(201, `{"id":"a"}`),
			))
			var err error
			if tc.write {
				_, err = cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
			} else {
				_, err = cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
			}
			if tc.retried {
				assert.NoError(t, err)
				var sent []string
				for _, r := range st.requests() {
					sent = append(sent, r.Method+" "+r.Path)
				}
				if tc.status == 403 && tc.sub != 0 || tc.status == 404 && tc.sub == 1002 {
					// The write region moved, or a read region lags: the
					// account is read again between the two attempts
					// (failover.go).
					require.Len(t, sent, 3, "%v", sent)
					assert.Equal(t, "GET /", sent[1])
				} else {
					assert.Len(t, sent, 2, "%v", sent)
				}
			} else {
				assert.True(t, HasStatus(err, tc.status), "%v", err)
				assert.Equal(t, 1, st.count())
			}
		})
	}
}

func TestWriteTimeoutsAreOutcomeUnknownNotRetried(t *testing.T) {
	for _, status := range []int{408, 500, 502, 504} {
		cc, st := newScriptedContainer(t, replyAlways(status, `{"code":"RequestTimeout","message":"m"}`))
		_, err := cc.ReplaceItem(testCtx(t), NewPartitionKeyString("p"), "a", []byte(`{"id":"a"}`), nil)
		var ce *CosmosError
		require.ErrorAs(t, err, &ce, "status %d", status)
		assert.True(t, ce.OutcomeUnknown, "status %d", status)
		assert.Equal(t, 1, st.count(), "status %d: a write whose outcome is unknown is not resent", status)
		assert.True(t, IsRetryable(ToProviderError("ack", err)))
	}
}

func TestRetryReplaysTheSameBody(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(replyAlways(449, `{}`), replyAlways(201, ``)))
	item := []byte(`{"id":"a","payload":"` + strings.Repeat("x", 10000) + `"}`)
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), item, nil)
	require.NoError(t, err)
	reqs := st.requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, item, reqs[0].Body)
	assert.Equal(t, item, reqs[1].Body)
}

func TestEveryAttemptIsSignedWithAFreshDate(t *testing.T) {
	var mu sync.Mutex
	clock := testClock
	cc, st := newScriptedContainer(t, replySequence(replyAlways(503, `{}`), replyAlways(200, `{"id":"a"}`)), func(o *ClientOptions) {
		o.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		}
	})
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	reqs := st.requests()
	require.Len(t, reqs, 2)
	assert.NotEqual(t, reqs[0].Header.Get("x-ms-date"), reqs[1].Header.Get("x-ms-date"))
	assert.NotEqual(t, reqs[0].Header.Get("Authorization"), reqs[1].Header.Get("Authorization"))
	for _, r := range reqs {
		assertSignedFor(t, r, "docs", "dbs/db/colls/coll/docs/a")
	}
}

func TestTransportErrorOnCustomTransport(t *testing.T) {
	reset := errors.New("connection reset by peer")
	// A custom transport cannot tell whether the request left: a write is
	// reported, not resent.
	cc, st := newScriptedContainer(t, func(int, wireRequest) (*http.Response, error) { return nil, reset })
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	require.ErrorIs(t, err, reset)
	assert.True(t, IsOutcomeUnknown(err))
	assert.Equal(t, 1, st.count())
	assert.True(t, IsRetryable(ToProviderError("ack", err)))

	// A read is simply retried.
	cc, st = newScriptedContainer(t, replySequence(
		func(int, wireRequest) (*http.Response, error) { return nil, reset },
		replyAlways(200, `{"id":"a"}`),
	))
	resp, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, resp.Attempts)
	assert.Equal(t, 2, st.count())
}

// newDroppingServer hijacks and closes the connection of the first drops
// requests, then answers 200 or 201.
func newDroppingServer(t *testing.T, drops int) (*httptest.Server, func() int) {
	var mu sync.Mutex
	seen := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n <= drops {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("etag", `"e"`)
		if r.Method == http.MethodPost {
			w.WriteHeader(201)
		}
		_, _ = w.Write([]byte(`{"id":"a"}`))
	}))
	// No connection reuse, so the transport never retries on its own.
	srv.Config.SetKeepAlivesEnabled(false)
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return seen }
}

func TestDroppedConnectionWriteIsNotRetriedAndFlaggedOutcomeUnknown(t *testing.T) {
	srv, seen := newDroppingServer(t, 1)
	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, Retry: fastRetryOptions()})
	require.NoError(t, err)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)

	_, err = cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.True(t, ce.OutcomeUnknown)
	assert.Equal(t, 0, ce.StatusCode)
	assert.Equal(t, 1, seen(), "the write reached the server once and was not resent")
	pe := ToProviderError("ack", err)
	assert.True(t, IsRetryable(pe))
}

func TestDroppedConnectionReadIsRetried(t *testing.T) {
	srv, seen := newDroppingServer(t, 1)
	c, err := NewClient(srv.URL, ClientOptions{Key: testMasterKey, Retry: fastRetryOptions()})
	require.NoError(t, err)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)
	resp, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, resp.Attempts)
	assert.Equal(t, 2, seen())
	assert.Equal(t, ETag(`"e"`), resp.ETag)
}

func TestRefusedConnectionIsRetriedEvenForWrites(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens: every dial is refused

	retry := fastRetryOptions()
	retry.MaxAttempts = 3
	c, err := NewClient("http://"+addr, ClientOptions{Key: testMasterKey, Retry: retry})
	require.NoError(t, err)
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)
	_, err = cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.False(t, ce.OutcomeUnknown, "a refused dial sent nothing")
	assert.Equal(t, int64(3), c.Stats().Requests, "a write that never left is retried")
}

func TestCancelledWriteInFlightIsOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc, _ := newScriptedContainer(t, func(int, wireRequest) (*http.Response, error) {
		cancel()
		return nil, context.Canceled
	})
	_, err := cc.UpsertItem(ctx, NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, IsOutcomeUnknown(err))
}

func TestCredentialFailureIsNotRetried(t *testing.T) {
	boom := errors.New("no token for you")
	c, st := newScriptedClient(t, replyAlways(200, `{}`), func(o *ClientOptions) {
		o.Key = ""
		o.Credential = failingTokenCred{boom}
	})
	_, err := c.ReadAccount(testCtx(t))
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 0, st.count())
}

// ---------------------------------------------------------------------------
// Diagnostics.

func TestStatsAreSafeForConcurrentUse(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"id":"a"}`, "x-ms-request-charge", "1.25"))
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cc.ReadItem(context.Background(), NewPartitionKeyString("p"), "a", nil)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	s := cc.client.Stats()
	assert.Equal(t, int64(50), s.Requests)
	assert.Equal(t, 50, st.count())
	assert.InDelta(t, 62.5, s.RequestCharge, 1e-9)
	assert.Equal(t, int64(50), s.ByOperation["ReadItem"].Operations)
	assert.InDelta(t, 62.5, s.ByOperation["ReadItem"].RequestCharge, 1e-9)

	// The snapshot is a copy.
	s.ByOperation["ReadItem"] = OperationStats{}
	assert.Equal(t, int64(50), cc.client.Stats().ByOperation["ReadItem"].Requests)
}

// TestStatsCountPreconditionFailures: a 412 (a stale ETag or a false PATCH
// condition) is counted per operation, whether the service answers it for
// the request or, in a batch it rolled back, for one of its operations; the
// bench reports lost claim races from this count.
func TestStatsCountPreconditionFailures(t *testing.T) {
	cc, _ := newScriptedContainer(t, replySequence(
		replyAlways(412, `{"code":"PreconditionFailed","message":"stale"}`),
		replyAlways(207, `[{"statusCode":412},{"statusCode":424}]`),
		replyAlways(207, `[{"statusCode":409},{"statusCode":424}]`),
		replyAlways(200, `{"id":"a"}`),
	))
	ctx, pk, etag := testCtx(t), NewPartitionKeyString("p"), ETag(`"stale"`)
	var ops PatchOperations
	ops.AppendSet("/x", 1)
	_, err := cc.PatchItem(ctx, pk, "a", ops, &ItemOptions{IfMatch: &etag})
	require.True(t, IsPreconditionFailed(err))
	for range 2 {
		b := cc.NewTransactionalBatch(pk)
		b.PatchItem("a", ops, &TransactionalBatchItemOptions{IfMatch: &etag})
		b.DeleteItem("b", nil)
		_, err = cc.ExecuteTransactionalBatch(ctx, b, nil)
		require.NoError(t, err)
	}
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)

	s := cc.client.Stats()
	assert.Equal(t, int64(2), s.PreconditionFailed, "the 412 and the batch rolled back on a 412; not the 409")
	assert.Equal(t, int64(1), s.ByOperation["PatchItem"].PreconditionFailed)
	assert.Equal(t, int64(1), s.ByOperation["ExecuteTransactionalBatch"].PreconditionFailed)
	assert.Equal(t, int64(0), s.ByOperation["ReadItem"].PreconditionFailed)
}

func TestDebugLogPerRequest(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cc, _ := newScriptedContainer(t, replySequence(
		replyAlways(429, `{}`, "x-ms-retry-after-ms", "1", "x-ms-activity-id", "act-1"),
		replyAlways(200, `{"id":"a"}`, "x-ms-request-charge", "2.5", "x-ms-activity-id", "act-2"),
	), func(o *ClientOptions) { o.Logger = logger })
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)

	var records []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		records = append(records, m)
	}
	require.Len(t, records, 2)
	last := records[1]
	assert.Equal(t, "ReadItem", last["operation"])
	assert.Equal(t, "GET", last["method"])
	assert.Equal(t, "docs", last["resource_type"])
	assert.Equal(t, "dbs/db/colls/coll/docs/a", last["link"])
	assert.EqualValues(t, 200, last["status"])
	assert.EqualValues(t, 0, last["substatus"])
	assert.EqualValues(t, 2.5, last["charge"])
	assert.Equal(t, "act-2", last["activity_id"])
	assert.EqualValues(t, 2, last["attempt"])
	assert.Contains(t, last, "duration")
	assert.EqualValues(t, 429, records[0]["status"])
}

func TestUndecodableSuccessBodyIsAnError(t *testing.T) {
	c, _ := newScriptedClient(t, replyAlways(200, `<html>proxy</html>`))
	_, err := c.ReadAccount(testCtx(t))
	assert.ErrorContains(t, err, "ReadAccount: decoding the response body")
}

func TestRetryAfterAsHTTPDate(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
	assert.Greater(t, retryAfter(h), 59*time.Minute)
	h.Set("Retry-After", "garbage")
	assert.Equal(t, time.Duration(0), retryAfter(h))
}
