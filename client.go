package cdb

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAPIVersion is the x-ms-version sent unless ClientOptions says
// otherwise: enough for CRUD, PATCH, batch and queries.
const DefaultAPIVersion = "2020-07-15"

const (
	defaultUserAgent   = "cdb-go"
	defaultMaxAttempts = 9
	defaultMaxElapsed  = 30 * time.Second
	defaultBaseDelay   = 25 * time.Millisecond
	defaultMaxDelay    = 2 * time.Second

	// maxResponseBytes bounds what one response may make us buffer; query
	// pages are capped by the service at a few MB.
	maxResponseBytes = 64 << 20
	// maxErrorMessage bounds the service message kept in a CosmosError.
	maxErrorMessage = 2048
)

// ClientOptions configures a Client. Exactly one of Key or Credential is
// required; everything else has a default.
type ClientOptions struct {
	// Key is the account's base64 master key. It never appears in errors or
	// logs.
	Key string
	// Credential supplies Entra ID tokens instead of a master key.
	Credential TokenCredential
	// Transport replaces the HTTP transport, e.g. with an in-memory fake.
	// When nil, a transport is built from TLS.
	Transport http.RoundTripper
	// TLS configures the built-in transport; it cannot be combined with
	// Transport.
	TLS TLSOptions
	// Retry bounds the retries of throttled and transient failures.
	Retry RetryOptions
	// Timeouts bounds each attempt and, on the built-in transport, dialing
	// and silent HTTP/2 connections.
	Timeouts TimeoutOptions
	// Background says how requests of low priority (ContextWithPriorityLevel)
	// wait after the account throttled any request (a 429), so that its
	// RU/s go to the others first.
	Background BackgroundOptions
	// Logger receives one debug record per HTTP attempt. Nil logs nothing.
	Logger *slog.Logger
	// PreferredRegions lists, most preferred first, the regions reads go
	// to, by the names the account lists them under ("West US 2"; case
	// and spaces do not matter): reads go to the first of them the account
	// can read in, else to its first readable location. The client then
	// reads the account (GET /) before its first request. Writes go to the
	// account's write region whatever this says. Empty: reads go to the
	// configured endpoint until a failover makes the client read the
	// account, then to its first readable location.
	PreferredRegions []string
	// Telemetry receives the client's metrics and, with RequestSpans, a
	// span per operation (ARCHITECTURE.md lists them); the zero value
	// reports nothing, at no cost. ContextWithMetricAttributes adds a
	// caller's attributes to an operation's points.
	Telemetry Telemetry
	// APIVersion is the x-ms-version header; default DefaultAPIVersion.
	APIVersion string
	// UserAgent is the User-Agent header; default "cdb-go".
	UserAgent string
	// Now is this machine's clock; default time.Now. For tests. Requests
	// are signed (x-ms-date) with it corrected by the offset the service's
	// responses show (Client.ClockOffset), so a clock minutes or hours off
	// still talks to the account.
	Now func() time.Time
	// InsecureAllowPlainHTTP lets an http:// endpoint name a host other than
	// loopback (127.0.0.0/8, ::1, localhost). DANGER: every request then
	// carries the master-key signature or the Entra ID token in clear text,
	// readable and replayable by anyone on the path. Without it such an
	// endpoint is refused; loopback (the emulator) never needs it.
	InsecureAllowPlainHTTP bool
}

// TLSOptions configures certificate verification of the built-in transport.
// Verification is on unless InsecureSkipVerify is set, which is accepted only
// for a loopback endpoint (the emulator's self-signed certificate).
type TLSOptions struct {
	RootCAs            *x509.CertPool // trusted roots; nil means the system pool
	CAFile             string         // PEM file of extra trusted roots, e.g. the emulator's certificate
	InsecureSkipVerify bool
}

func (t TLSOptions) isZero() bool {
	return t.RootCAs == nil && t.CAFile == "" && !t.InsecureSkipVerify
}

// RetryOptions bounds retries. Zero fields take the defaults.
type RetryOptions struct {
	MaxAttempts int           // attempts per operation, first included; default 9
	MaxElapsed  time.Duration // total time an operation may spend retrying; default 30s
	BaseDelay   time.Duration // first backoff; default 25ms
	MaxDelay    time.Duration // backoff cap (a server's retry-after may exceed it); default 2s
}

func (r RetryOptions) withDefaults() RetryOptions {
	orDefault(&r.MaxAttempts, defaultMaxAttempts)
	orDefault(&r.MaxElapsed, defaultMaxElapsed)
	orDefault(&r.BaseDelay, defaultBaseDelay)
	orDefault(&r.MaxDelay, defaultMaxDelay)
	if r.MaxDelay < r.BaseDelay {
		r.MaxDelay = r.BaseDelay
	}
	return r
}

// orDefault sets an option left zero (or negative, which no option means)
// to its default.
func orDefault[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Client is a Cosmos DB NoSQL account reached over its REST API. It is safe
// for concurrent use; share one per account.
type Client struct {
	endpoint   string
	base       string // scheme://host[:port], no trailing slash
	auth       authorizer
	conns      *connPool // the transport, replaced to recycle busy connections too (connections.go)
	builtin    bool      // the transport is ours, so httptrace tells us whether a request left
	retry      RetryOptions
	timeouts   TimeoutOptions
	background *backgroundBudget // low-priority requests wait after 429s (backgroundbudget.go)
	logger     *slog.Logger
	apiVersion string
	userAgent  string
	now        func() time.Time
	service    *serviceClock // the offset of the service's clock from now

	stats    *statsRecorder
	tel      clientTelemetry
	routing  *routingCache // containers' partition key definitions and ranges (routing.go)
	sessions *sessionStore
	regions  *regionRouter // where writes go after a failover (failover.go)

	allowPlainHTTP bool
}

// NewClient checks the endpoint and credentials and builds a client. Errors
// describe what is wrong without echoing the key.
func NewClient(endpoint string, opts ClientOptions) (*Client, error) {
	base, host, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := checkPlainHTTP(base, host, opts.InsecureAllowPlainHTTP); err != nil {
		return nil, err
	}
	auth, err := newAuthorizer(opts)
	if err != nil {
		return nil, err
	}
	transport, builtin, err := newTransport(host, opts)
	if err != nil {
		return nil, err
	}
	var fresh func() http.RoundTripper
	if builtin {
		template := transport.(*http.Transport).Clone() // never used itself
		fresh = func() http.RoundTripper { return template.Clone() }
	}
	c := &Client{
		endpoint:   endpoint,
		base:       base,
		auth:       auth,
		conns:      newConnPool(transport, fresh),
		builtin:    builtin,
		retry:      opts.Retry.withDefaults(),
		timeouts:   opts.Timeouts.withDefaults(),
		background: newBackgroundBudget(opts.Background),
		logger:     opts.Logger,
		apiVersion: opts.APIVersion,
		userAgent:  opts.UserAgent,
		now:        opts.Now,
		service:    &serviceClock{},
		stats:      newStatsRecorder(),
		tel:        newClientTelemetry(opts.Telemetry),
		routing:    newRoutingCache(),
		sessions:   newSessionStore(),
		regions:    newRegionRouter(opts.PreferredRegions),

		allowPlainHTTP: opts.InsecureAllowPlainHTTP,
	}
	if c.apiVersion == "" {
		c.apiVersion = DefaultAPIVersion
	}
	if c.userAgent == "" {
		c.userAgent = defaultUserAgent
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// parseEndpoint accepts an absolute http(s) URL with at most a "/" path and
// returns its scheme://host form and host name.
func parseEndpoint(endpoint string) (base, host string, err error) {
	if hasUserInfo(endpoint) {
		// Credentials belong in ClientOptions; do not echo them back, so
		// this is checked before any message names the endpoint.
		return "", "", invalidConfig("endpoint", "invalid endpoint: user information is not allowed in the URL")
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		refusal := invalidConfig("endpoint", "invalid endpoint %q: %v", endpoint, err)
		refusal.Cause = err
		return "", "", refusal
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "", invalidConfig("endpoint", "invalid endpoint %q: want an absolute http or https URL", endpoint)
	case u.Host == "" || u.Hostname() == "":
		return "", "", invalidConfig("endpoint", "invalid endpoint %q: no host", endpoint)
	case u.RawQuery != "" || u.ForceQuery:
		return "", "", invalidConfig("endpoint", "invalid endpoint %q: no query allowed", endpoint)
	case u.Fragment != "" || strings.Contains(endpoint, "#"):
		return "", "", invalidConfig("endpoint", "invalid endpoint %q: no fragment allowed", endpoint)
	case u.Path != "" && u.Path != "/":
		return "", "", invalidConfig("endpoint", "invalid endpoint %q: the account endpoint has no path", endpoint)
	}
	return u.Scheme + "://" + u.Host, u.Hostname(), nil
}

// hasUserInfo reports an "@" in the endpoint's authority, or anywhere
// before its first "/", "?" or "#" when it has no "//": what url.Parse
// would read as user information, and what a URL it refuses or reads as
// opaque may still carry.
func hasUserInfo(endpoint string) bool {
	authority := endpoint
	if _, after, ok := strings.Cut(endpoint, "//"); ok {
		authority = after
	}
	if end := strings.IndexAny(authority, "/?#"); end >= 0 {
		authority = authority[:end]
	}
	return strings.Contains(authority, "@")
}

// invalidConfig refuses NewClient's endpoint or one of its options.
func invalidConfig(field, format string, args ...any) *ValidationError {
	return invalid("NewClient", field, ErrInvalidClientConfig, format, args...)
}

// checkPlainHTTP refuses http:// beyond loopback unless the caller opted in:
// the Authorization header (a signature over the key, or a bearer token)
// would cross the network in clear text.
func checkPlainHTTP(base, host string, allowed bool) error {
	if !strings.HasPrefix(base, "http://") || isLoopback(host) || allowed {
		return nil
	}
	return invalid("NewClient", "endpoint", ErrInsecureEndpoint,
		"plain http to %q would send the credentials in clear text; use https, a loopback host "+
			"(127.0.0.0/8, ::1, localhost) for the emulator, or set ClientOptions.InsecureAllowPlainHTTP "+
			"if you accept that risk", host)
}

func newAuthorizer(opts ClientOptions) (authorizer, error) {
	switch {
	case opts.Key != "" && opts.Credential != nil:
		return nil, invalidConfig("key", "set exactly one of ClientOptions.Key and ClientOptions.Credential, not both")
	case opts.Credential != nil:
		return aadToken{cred: opts.Credential}, nil
	case opts.Key == "":
		return nil, invalidConfig("key", "invalid key: empty (set ClientOptions.Key or ClientOptions.Credential)")
	}
	return newMasterKey(opts.Key)
}

// newTransport returns opts.Transport, or a TLS transport built from
// opts.TLS. builtin reports the latter.
func newTransport(host string, opts ClientOptions) (rt http.RoundTripper, builtin bool, err error) {
	if opts.TLS.InsecureSkipVerify && !isLoopback(host) {
		return nil, false, invalidConfig("TLS", "TLS InsecureSkipVerify is allowed only for a loopback endpoint (the emulator), not %q", host)
	}
	if opts.Transport != nil {
		if !opts.TLS.isZero() {
			return nil, false, invalidConfig("TLS", "ClientOptions.TLS applies to the built-in transport; configure TLS on the custom Transport instead")
		}
		return opts.Transport, false, nil
	}
	cfg, err := tlsConfig(opts.TLS)
	if err != nil {
		return nil, false, err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	// Many goroutines share one client and one account host.
	t.MaxIdleConnsPerHost = 64
	configureTimeouts(t, opts.Timeouts.withDefaults())
	return t, true, nil
}

func tlsConfig(o TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: o.RootCAs, InsecureSkipVerify: o.InsecureSkipVerify}
	if o.CAFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		refusal := invalidConfig("TLS", "reading TLS CA file: %v", err)
		refusal.Cause = err
		return nil, refusal
	}
	pool := o.RootCAs
	if pool == nil {
		// Extra roots add to the system's so a real account still verifies.
		if pool, err = x509.SystemCertPool(); err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
	} else {
		pool = pool.Clone()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, invalidConfig("TLS", "TLS CA file %q holds no PEM certificate", o.CAFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Endpoint returns the account endpoint the client was built with.
func (c *Client) Endpoint() string { return c.endpoint }

// ClockOffset is how far the service's clock is ahead of this client's
// (ClientOptions.Now; negative when it is behind), as the Date headers of
// the responses so far show it, to within a second plus a round trip. It
// is zero until a response shows the two clocks more than a second apart:
// a smaller offset is below what the header can tell.
func (c *Client) ClockOffset() time.Duration { return c.service.offset() }

// ServiceTime is the service's time as this client reads it: its own clock
// corrected by ClockOffset. Requests are signed with it.
func (c *Client) ServiceTime() time.Time { return c.now().Add(c.service.offset()) }

// ---------------------------------------------------------------------------
// Requests: one operation, possibly several HTTP attempts.

// request is one logical operation on the wire. Its body is kept as bytes so
// that every attempt can replay it.
type request struct {
	operation     string // stats, logs and errors, e.g. "ReadItem"
	method        string
	ref           resourceRef
	header        http.Header // operation headers; the common ones are added per attempt
	body          []byte
	contentType   string
	idempotent    bool // safe to resend after it may have reached the service
	long          bool // a query page or feed read: the longer attempt deadline
	rangeTargeted bool // carries x-ms-documentdb-partitionkeyrangeid: a 410 goes back to the caller
	// routing marks the account read of a region refresh (failover.go):
	// one attempt, and no answer to it starts a refresh.
	routing bool
	// recreated is set once an attempt met a recreated container (404 or
	// 400 with substatus 1024): the retry after it is the only one.
	recreated bool
	// inWriteRegion sends a read to the write region: it met a 404/1002
	// elsewhere; missedInWriteRegion says the write region answered so too.
	inWriteRegion, missedInWriteRegion bool
	session                            sessionUse
	// retryOK asks for a retry of a successful response (a rolled-back
	// batch that was throttled inside); nil never does.
	retryOK func(*response) (retry bool, after time.Duration)
}

// response is the outcome of the last attempt, with totals over all attempts.
type response struct {
	StatusCode    int
	Header        http.Header
	Body          []byte
	RequestCharge float64 // summed over attempts
	ActivityID    string
	SessionToken  string
	Attempts      int
}

func (r *response) etag() ETag { return ETag(r.Header.Get("etag")) }

func (r *response) bodyOrNil() []byte {
	if len(r.Body) == 0 {
		return nil
	}
	return r.Body
}

// send runs r, retried with backoff and a bound where retryStatus or
// decideTransport says so, and records statistics and telemetry. A non-2xx
// final status is returned as *CosmosError.
func (c *Client) send(ctx context.Context, r *request) (*response, error) {
	c.learnRegions(ctx, r)
	ctx, observed := c.tel.startOperation(ctx, r)
	resp, charge, err := c.sendWithRetries(ctx, r)
	c.stats.operation(r.operation, err != nil)
	c.tel.endOperation(ctx, r, observed, resp, charge, err)
	if r.session.container != "" && isReadSessionNotAvailable(err) && (r.missedInWriteRegion || isWrite(r)) {
		// Retries did not find a replica at our position, not even in
		// the write region, which has every write this session saw: the
		// tokens are not this container's (it was created again under
		// the same name). Start over, as the SDKs do, rather than fail
		// every read. A read region that lags does not drop them (a later
		// read could then miss this process's own write).
		c.sessions.forget(r.session.container)
		c.routing.forget(r.session.container) // its definition and ranges may differ too
	}
	if r.session.container != "" && isGoneRangeError(err) {
		c.routing.invalidate(r.session.container) // a split: the next read resolves on the new ranges
	}
	return resp, err
}

// sendWithRetries returns the last attempt's answer or the operation's
// error, and the request charge of all its attempts (a failed operation's
// too). A low-priority request first waits out the background budget's
// pause, outside its retry budget.
func (c *Client) sendWithRetries(ctx context.Context, r *request) (_ *response, charge float64, _ error) {
	if err := c.background.yield(ctx); err != nil {
		return nil, 0, fmt.Errorf("cdb: %s: %w (while yielding to requests of higher priority)", r.operation, err)
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			// Nothing of this attempt has left: no outcome to be unsure of.
			return nil, charge, fmt.Errorf("cdb: %s: %w", r.operation, err)
		}
		attemptCtx, cancel := c.attemptContext(ctx, r)
		resp, sent, err := c.roundTrip(attemptCtx, r, attempt)
		err = attemptError(attemptCtx, err)
		cancel()
		if resp != nil {
			charge += resp.RequestCharge
			resp.RequestCharge = charge
			resp.Attempts = attempt
		}
		d := c.decide(ctx, r, attempt, resp, sent, err)
		if !d.retry || attempt >= c.maxAttempts(r) || time.Since(start)+d.wait > c.retry.MaxElapsed {
			if d.err != nil {
				return nil, charge, d.err
			}
			return resp, charge, nil
		}
		slept := time.Now()
		err = sleep(ctx, d.wait)
		if d.throttled {
			c.tel.throttled(ctx, r, time.Since(slept))
		}
		if err != nil {
			return nil, charge, fmt.Errorf("cdb: %s: %w (while waiting to retry after: %v)", r.operation, err, d.cause())
		}
	}
}

// maxAttempts is how many attempts r gets: one for a routing read, whose
// failure a later refresh makes up for, else RetryOptions.MaxAttempts.
func (c *Client) maxAttempts(r *request) int {
	if r.routing {
		return 1
	}
	return c.retry.MaxAttempts
}

// decision is what to do after one attempt.
type decision struct {
	retry bool
	wait  time.Duration
	// throttled says the wait is the one the service asked for (a 429, 449
	// or 503 with a retry-after, or a batch rolled back for one inside).
	throttled bool
	err       error     // the error to return if we stop here; nil for a success
	resp      *response // kept for cause()
}

func (d decision) cause() string {
	if d.err != nil {
		return d.err.Error()
	}
	if d.resp != nil {
		return fmt.Sprintf("status %d", d.resp.StatusCode)
	}
	return "unknown"
}

func (c *Client) decide(ctx context.Context, r *request, attempt int, resp *response, sent bool, err error) decision {
	if err != nil {
		return c.decideTransport(ctx, r, attempt, sent, err)
	}
	if resp.StatusCode >= 300 {
		ce := newCosmosError(r.operation, resp)
		if ce.StatusCode == http.StatusTooManyRequests {
			c.background.throttled()
		}
		switch {
		case r.routing:
		case isWriteRegionMoved(ce):
			c.followRegions(ctx)
		case isReadSessionNotAvailable(ce) && !isWrite(r):
			c.retryInWriteRegion(ctx, r)
		}
		retry, hint := c.retryStatus(r, ce, attempt)
		return decision{retry: retry, wait: c.backoff(attempt, hint), throttled: retry && hint > 0, err: ce, resp: resp}
	}
	if r.retryOK != nil {
		if retry, hint := r.retryOK(resp); retry {
			c.background.throttled() // an operation inside was throttled (429) or asked for a retry (449)
			return decision{retry: true, wait: c.backoff(attempt, hint), throttled: hint > 0, resp: resp}
		}
	}
	return decision{resp: resp}
}

// decideTransport handles an attempt that got no response. A write that may
// have reached the service is never resent: it is reported OutcomeUnknown.
func (c *Client) decideTransport(ctx context.Context, r *request, attempt int, sent bool, err error) decision {
	if be := (*buildError)(nil); errors.As(err, &be) {
		// Nothing was sent; a credential that cannot produce a token
		// will not produce one on the next attempt either.
		return decision{err: fmt.Errorf("cdb: %s: %w", r.operation, be.err)}
	}
	unknown := sent && !r.idempotent
	if ctxErr := ctx.Err(); ctxErr != nil {
		if unknown {
			return decision{err: &CosmosError{Operation: r.operation, OutcomeUnknown: true,
				Message: "context ended after the request was sent", err: ctxErr}}
		}
		return decision{err: fmt.Errorf("cdb: %s: %w", r.operation, ctxErr)}
	}
	ce := &CosmosError{Operation: r.operation, Message: err.Error(), OutcomeUnknown: unknown, err: err}
	retry := !unknown && !isCertificateError(err)
	return decision{retry: retry, wait: c.backoff(attempt, 0), err: ce}
}

// retryStatus decides from a response's status whether to retry; the
// transport half is decideTransport. It may mark a write OutcomeUnknown.
func (c *Client) retryStatus(r *request, ce *CosmosError, attempt int) (retry bool, hint time.Duration) {
	if isTransientRefusal(ce) {
		return attempt < refusalAttempts, 0
	}
	if containerRecreated(ce) {
		return c.retryRecreatedContainer(r), 0
	}
	switch ce.StatusCode {
	case http.StatusTooManyRequests:
		return true, ce.RetryAfter
	case 449, http.StatusServiceUnavailable:
		return true, ce.RetryAfter
	case http.StatusGone:
		// A range-targeted request must be re-planned on the new ranges.
		return !(r.rangeTargeted && isRangeGone(ce.SubStatusCode)), 0
	case http.StatusNotFound:
		return transientNotFound(ce), 0
	case http.StatusForbidden:
		return ce.SubStatusCode == SubStatusWriteForbidden || ce.SubStatusCode == SubStatusDatabaseAccountNotFound, 0
	case http.StatusRequestTimeout, http.StatusBadGateway, http.StatusGatewayTimeout:
		if r.idempotent {
			return true, 0
		}
		ce.OutcomeUnknown = true
		return false, 0
	case http.StatusInternalServerError:
		// Not retried here (the provider decides), but a write may have
		// been applied.
		ce.OutcomeUnknown = !r.idempotent
		return false, 0
	}
	return false, 0
}

// retryRecreatedContainer drops what the client keeps of a container that
// was created again under the same name (its partition key definition, its
// ranges, its session tokens: all the old one's) and reports whether to
// retry: once, and not a range-targeted request, whose range id belongs to
// the old container (its caller plans again on the new ranges).
func (c *Client) retryRecreatedContainer(r *request) bool {
	if r.session.container != "" {
		c.sessions.forget(r.session.container)
		c.routing.forget(r.session.container)
	}
	first := !r.recreated
	r.recreated = true
	return first && !r.rangeTargeted
}

// refusalAttempts is how many attempts a request gets when the account
// refuses its credential (401) or its authorization (403 with no
// substatus). A real account does so for a moment while the clock or token
// a request is signed with refreshes, or while a role assignment
// propagates, and for a date too far from its own time; each attempt is
// signed anew, with the service's time the refusal's Date showed. The
// service refuses before it executes anything, so a write is as safe to
// resend as a read. Few attempts, so a wrong key or a missing role is
// still reported at once.
const refusalAttempts = 3

// isTransientRefusal reports the refusals of refusalAttempts.
func isTransientRefusal(ce *CosmosError) bool {
	return ce.StatusCode == http.StatusUnauthorized || ce.StatusCode == http.StatusForbidden && ce.SubStatusCode == 0
}

// isRangeGone reports the 410 substatuses that mean "this partition key range
// no longer exists": re-read the ranges. A split or migration that is
// completing (1007, 1008) is not: the same range serves again shortly, so
// the request is retried as it is.
func isRangeGone(sub int) bool {
	return sub == 0 || sub == SubStatusPartitionKeyRangeGone
}

// backoff is the wait before the next attempt: the server's hint when it gave
// one, else exponential from BaseDelay, capped at MaxDelay, with jitter so
// that many goroutines throttled together do not retry together.
func (c *Client) backoff(attempt int, hint time.Duration) time.Duration {
	if hint > 0 {
		return hint
	}
	d := c.retry.BaseDelay
	for i := 1; i < attempt && d < c.retry.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, c.retry.MaxDelay)
	d = d/2 + rand.N(d/2+1)
	return max(d, c.retry.BaseDelay)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// roundTrip sends one attempt, signed afresh. sent reports whether the
// request may have reached the service when err is not nil.
func (c *Client) roundTrip(ctx context.Context, r *request, attempt int) (resp *response, sent bool, err error) {
	req, err := c.newHTTPRequest(ctx, r)
	if err != nil {
		return nil, false, &buildError{err: err}
	}
	var wrote atomic.Bool
	var conn atomic.Pointer[net.Conn] // the connection it went on, if the transport says
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn:      func(info httptrace.GotConnInfo) { conn.Store(&info.Conn) },
		WroteHeaders: func() { wrote.Store(true) },
	}))
	defer func() {
		if err != nil {
			dropSilentConnection(ctx, derefConn(conn.Load()))
		}
	}()
	c.recycleConnections()
	conns := c.conns.acquire()
	defer conns.release() // after the body is read: the connection is idle by then
	start, sentAt := time.Now(), c.now()
	res, err := conns.client.Do(req)
	if err != nil {
		sent = c.mayHaveBeenSent(err, wrote.Load())
		c.stats.request(r.operation, attempt, 0, responseCounts{})
		c.tel.attempt(ctx, r, nil, err)
		c.logAttempt(ctx, r, attempt, nil, time.Since(start), err)
		return nil, sent, err
	}
	// Every answer, a refusal included, tells the service's time: a
	// request refused for its date is signed again with the corrected
	// one (refusalAttempts).
	c.service.observe(sentAt, c.now(), res.Header.Get("Date"))
	body, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	res.Body.Close()
	resp = parseResponse(res, body)
	c.stats.request(r.operation, attempt, resp.RequestCharge, countsOf(resp))
	c.tel.attempt(ctx, r, resp, nil)
	if r.session.container != "" && capturesSession(resp) {
		ids := c.sessions.capture(r.session.container, resp.SessionToken)
		if !c.routing.listsAll(r.session.container, ids) {
			// A range the kept list does not hold answered: the list
			// predates a split.
			c.routing.invalidate(r.session.container)
		}
	}
	if err != nil {
		// The status arrived but the body did not: the request was sent.
		c.logAttempt(ctx, r, attempt, resp, time.Since(start), err)
		return nil, true, fmt.Errorf("reading response body: %w", err)
	}
	c.logAttempt(ctx, r, attempt, resp, time.Since(start), nil)
	return resp, true, nil
}

func derefConn(c *net.Conn) net.Conn {
	if c == nil {
		return nil
	}
	return *c
}

// newHTTPRequest builds one attempt: fresh date (the service's time, as
// far as this client knows it), fresh signature, replayed body.
func (c *Client) newHTTPRequest(ctx context.Context, r *request) (*http.Request, error) {
	date := c.ServiceTime().UTC().Format(http.TimeFormat)
	authz, err := c.auth.authorize(ctx, r.method, r.ref.resourceType, r.ref.link, date)
	if err != nil {
		return nil, err
	}
	var body io.Reader = http.NoBody
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.baseFor(r)+r.ref.path, body)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	h := req.Header
	for k, v := range r.header {
		h[k] = v
	}
	if token := c.sessionHeader(r); token != "" {
		h.Set(headerSessionToken, token) // per attempt: a retry sends the latest
	}
	if level := priorityLevel(ctx); level != "" {
		h.Set(headerPriorityLevel, string(level))
	}
	h.Set("Authorization", authz)
	h.Set("x-ms-date", date)
	h.Set("x-ms-version", c.apiVersion)
	h.Set("User-Agent", c.userAgent)
	h.Set("Accept", "application/json")
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		h.Set("Content-Type", ct)
	}
	return req, nil
}

// buildError is an attempt that failed before anything was sent: the
// request could not be built or signed.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// mayHaveBeenSent is false only when we know the request never left: a
// failed dial or name lookup, or, on our own transport, headers never
// written. A custom transport tells us nothing, so assume the worst.
func (c *Client) mayHaveBeenSent(err error, wroteHeaders bool) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return false
	}
	if c.builtin {
		return wroteHeaders
	}
	return true
}

func parseResponse(res *http.Response, body []byte) *response {
	charge, _ := strconv.ParseFloat(res.Header.Get("x-ms-request-charge"), 64)
	return &response{
		StatusCode:    res.StatusCode,
		Header:        res.Header,
		Body:          body,
		RequestCharge: charge,
		ActivityID:    res.Header.Get("x-ms-activity-id"),
		SessionToken:  res.Header.Get("x-ms-session-token"),
	}
}

// newCosmosError reads an error response: status, substatus, the service's
// {"code","message"} body and the retry-after hint.
func newCosmosError(op string, resp *response) *CosmosError {
	sub, _ := strconv.Atoi(resp.Header.Get("x-ms-substatus"))
	ce := &CosmosError{
		Operation:     op,
		StatusCode:    resp.StatusCode,
		SubStatusCode: sub,
		ActivityID:    resp.ActivityID,
		RequestCharge: resp.RequestCharge,
		RetryAfter:    retryAfter(resp.Header),
	}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(resp.Body, &body) == nil {
		ce.Code, ce.Message = body.Code, body.Message
	} else {
		ce.Message = strings.TrimSpace(string(resp.Body))
	}
	if len(ce.Message) > maxErrorMessage {
		ce.Message = ce.Message[:maxErrorMessage] + "…"
	}
	return ce
}

// retryAfter reads the service's wait advice: x-ms-retry-after-ms, then
// retry-after-ms, then Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	for _, name := range []string{"x-ms-retry-after-ms", "retry-after-ms"} {
		if v := h.Get(name); v != "" {
			if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
				return time.Duration(ms * float64(time.Millisecond))
			}
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		// Against the service's own time, not this machine's clock,
		// which may be far off.
		at := time.Now()
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			at = d
		}
		return max(t.Sub(at), 0)
	}
	return 0
}

// logAttempt writes one debug record per attempt. It never logs headers:
// the Authorization header is a signature over the key.
func (c *Client) logAttempt(ctx context.Context, r *request, attempt int, resp *response, d time.Duration, err error) {
	if c.logger == nil || !c.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{
		slog.String("operation", r.operation),
		slog.String("method", r.method),
		slog.String("resource_type", r.ref.resourceType),
		slog.String("link", r.ref.link),
		slog.Int("attempt", attempt),
		slog.Duration("duration", d),
	}
	if resp != nil {
		sub, _ := strconv.Atoi(resp.Header.Get("x-ms-substatus"))
		attrs = append(attrs,
			slog.Int("status", resp.StatusCode),
			slog.Int("substatus", sub),
			slog.Float64("charge", resp.RequestCharge),
			slog.String("activity_id", resp.ActivityID))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	c.logger.LogAttrs(ctx, slog.LevelDebug, "cosmos request", attrs...)
}

// decodeJSON decodes a resource body the service sent.
func decodeJSON(op string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("cdb: %s: decoding the response body: %w", op, err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Statistics.

// ClientStats are cumulative diagnostics of a Client.
type ClientStats struct {
	Requests      int64   // HTTP requests sent, retries included
	RequestCharge float64 // RU, over all requests
	Retries       int64   // attempts after the first
	Throttles     int64   // 429 responses
	// PreconditionFailed counts 412 responses, a batch's included: a
	// write whose ETag or condition no longer held (a lost race).
	PreconditionFailed int64
	ByOperation        map[string]OperationStats
}

// OperationStats are the diagnostics of one operation name, e.g. "ReadItem".
type OperationStats struct {
	Operations         int64 // calls, however many attempts each took
	Errors             int64 // calls that ended in an error
	Requests           int64
	RequestCharge      float64
	Retries            int64
	Throttles          int64
	PreconditionFailed int64
}

type statsRecorder struct {
	mu    sync.Mutex
	total ClientStats
	by    map[string]*OperationStats
}

func newStatsRecorder() *statsRecorder {
	return &statsRecorder{by: make(map[string]*OperationStats)}
}

func (s *statsRecorder) entry(op string) *OperationStats {
	e := s.by[op]
	if e == nil {
		e = &OperationStats{}
		s.by[op] = e
	}
	return e
}

// responseCounts is what a response adds to the statistics besides the
// request and its charge.
type responseCounts struct {
	throttled, preconditionFailed bool
}

// countsOf classifies a response. A batch the service rolled back (207)
// failed on a precondition when one of its operations answered 412.
func countsOf(resp *response) responseCounts {
	out := responseCounts{
		throttled:          resp.StatusCode == http.StatusTooManyRequests,
		preconditionFailed: resp.StatusCode == http.StatusPreconditionFailed,
	}
	if resp.StatusCode == http.StatusMultiStatus {
		var results []batchResultWire
		if json.Unmarshal(resp.Body, &results) == nil {
			for _, r := range results {
				out.preconditionFailed = out.preconditionFailed || r.StatusCode == http.StatusPreconditionFailed
			}
		}
	}
	return out
}

func (s *statsRecorder) request(op string, attempt int, charge float64, counts responseCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(op)
	s.total.Requests++
	e.Requests++
	s.total.RequestCharge += charge
	e.RequestCharge += charge
	if attempt > 1 {
		s.total.Retries++
		e.Retries++
	}
	if counts.throttled {
		s.total.Throttles++
		e.Throttles++
	}
	if counts.preconditionFailed {
		s.total.PreconditionFailed++
		e.PreconditionFailed++
	}
}

func (s *statsRecorder) operation(op string, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(op)
	e.Operations++
	if failed {
		e.Errors++
	}
}

func (s *statsRecorder) snapshot() ClientStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.total
	out.ByOperation = make(map[string]OperationStats, len(s.by))
	for k, v := range s.by {
		out.ByOperation[k] = *v
	}
	return out
}

// Stats returns a snapshot of the cumulative diagnostics.
func (c *Client) Stats() ClientStats { return c.stats.snapshot() }

// ---------------------------------------------------------------------------
// Account and databases.

// AccountProperties is what GET / says about the account.
type AccountProperties struct {
	ID                           string          `json:"id"`
	WritableLocations            []AccountRegion `json:"writableLocations"`
	ReadableLocations            []AccountRegion `json:"readableLocations"`
	EnableMultipleWriteLocations bool            `json:"enableMultipleWriteLocations"`
	ConsistencyPolicy            struct {
		DefaultConsistencyLevel string `json:"defaultConsistencyLevel"`
	} `json:"userConsistencyPolicy"`
}

// AccountRegion is one region of the account.
type AccountRegion struct {
	Name     string `json:"name"`
	Endpoint string `json:"databaseAccountEndpoint"`
}

// ReadAccount reads the account properties (GET /). It is also a cheap check
// that the endpoint and key work.
func (c *Client) ReadAccount(ctx context.Context) (AccountProperties, error) {
	var props AccountProperties
	resp, err := c.send(ctx, &request{operation: "ReadAccount", method: http.MethodGet, ref: accountRef(), idempotent: true})
	if err != nil {
		return props, err
	}
	return props, decodeJSON("ReadAccount", resp.Body, &props)
}

// DatabaseProperties describes a database.
type DatabaseProperties struct {
	ID         string `json:"id"`
	ResourceID string `json:"_rid,omitempty"`
	ETag       ETag   `json:"_etag,omitempty"`
}

// CreateDatabase creates database id; 409 if it exists.
func (c *Client) CreateDatabase(ctx context.Context, id string) (DatabaseProperties, error) {
	const op = "CreateDatabase"
	var props DatabaseProperties
	if err := validateName(op, "database id", id); err != nil {
		return props, err
	}
	body, err := json.Marshal(map[string]string{"id": id})
	if err != nil {
		return props, fmt.Errorf("cdb: %s: %w", op, err)
	}
	resp, err := c.send(ctx, &request{operation: op, method: http.MethodPost, ref: databasesFeedRef(), body: body})
	if err != nil {
		return props, err
	}
	return props, decodeJSON(op, resp.Body, &props)
}

// ReadDatabase reads database id; 404 if it does not exist.
func (c *Client) ReadDatabase(ctx context.Context, id string) (DatabaseProperties, error) {
	const op = "ReadDatabase"
	var props DatabaseProperties
	if err := validateName(op, "database id", id); err != nil {
		return props, err
	}
	resp, err := c.send(ctx, &request{operation: op, method: http.MethodGet, ref: databaseRef(id), idempotent: true})
	if err != nil {
		return props, err
	}
	return props, decodeJSON(op, resp.Body, &props)
}

// DeleteDatabase deletes database id and everything in it.
func (c *Client) DeleteDatabase(ctx context.Context, id string) error {
	const op = "DeleteDatabase"
	if err := validateName(op, "database id", id); err != nil {
		return err
	}
	_, err := c.send(ctx, &request{operation: op, method: http.MethodDelete, ref: databaseRef(id)})
	if err == nil {
		c.sessions.forgetDatabase(id)
		c.routing.forgetDatabase(id)
	}
	return err
}

// NewContainer returns a client for container containerID of database
// databaseID. Nothing is sent; the names are checked.
func (c *Client) NewContainer(databaseID, containerID string) (*ContainerClient, error) {
	const op = "NewContainer"
	if err := validateName(op, "database id", databaseID); err != nil {
		return nil, err
	}
	if err := validateName(op, "container id", containerID); err != nil {
		return nil, err
	}
	return &ContainerClient{client: c, databaseID: databaseID, id: containerID}, nil
}
