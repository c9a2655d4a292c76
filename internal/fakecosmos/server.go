package fakecosmos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EmulatorKey is the well-known master key of Microsoft's Cosmos DB emulator,
// the default here so that tools configured for the emulator work unchanged.
const EmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// DefaultEndpoint is what GET / advertises when Options.Endpoint is empty.
const DefaultEndpoint = "https://localhost:8081/"

const (
	defaultMaxClockSkew = 15 * time.Minute
	// maxRequestBody bounds what is read of a request. Bigger bodies are
	// refused with 413 without parsing; the per-document and per-batch 2 MB
	// limits are checked separately, so this only has to exceed them.
	maxRequestBody = 16 << 20
)

// Options configures a Server. The zero value is a server with the
// emulator's key, one partition key range per container and no latency.
type Options struct {
	// Key is the master key (base64); default EmulatorKey.
	Key string
	// AADToken, if set, is accepted as `type=aad&ver=1.0&sig=<token>`.
	AADToken string
	// PartitionKeyRanges is the number of physical ranges of a new
	// container; default 1.
	PartitionKeyRanges int
	// Latency is added to every request, honouring the request's context.
	Latency time.Duration
	// Now is the clock (for x-ms-date checks and _ts); default time.Now.
	Now func() time.Time
	// MaxClockSkew is how far x-ms-date may be from Now; default 15m.
	MaxClockSkew time.Duration
	// Endpoint is what GET / advertises as the writable and readable
	// location; clients send every later request there. Default
	// DefaultEndpoint.
	Endpoint string
	// StaleReadsWithoutSessionToken serves point reads, queries and read
	// feeds that do not carry the session token of a document's last write
	// from a lagging replica that has not applied it (see session.go), as
	// an account with Session consistency may. Clients that echo session
	// tokens read their own writes; the others see stale data.
	StaleReadsWithoutSessionToken bool
	// MaxRequestHeaderBytes caps a request's line and headers, as the
	// gateway's front end does (400, see headerlimit.go); default
	// DefaultMaxRequestHeaderBytes, negative for no cap.
	MaxRequestHeaderBytes int
	// NewContainerWarmUp is how many document requests a container created
	// through the API answers 404/1003 (owner resource not found) before it
	// serves them, as a real account may right after creating it.
	NewContainerWarmUp int
	// ExpiredPurgeLag is how long after its expiry an item that expired by
	// its time to live still makes a create of its id conflict (409),
	// though no read, query or patch sees it: a real account purges
	// expired items in the background, and whether their ids are free
	// before that is not documented. Zero frees them at once.
	ExpiredPurgeLag time.Duration
	// Serverless makes the account a serverless one: it has no offers, so
	// reading the offers feed and creating a database or container with
	// throughput answer 400, as the service does. Otherwise the account is
	// provisioned: a container created without throughput gets 400 RU/s of
	// its own unless its database's throughput is shared (offers.go).
	Serverless bool
}

// Server is the in-memory gateway. It is safe for concurrent use; all its
// state lives in the value (there is no package-level mutable state).
type Server struct {
	key          string
	keyBytes     []byte
	aadToken     string
	rangesPerNew int
	staleReads   bool
	now          func() time.Time
	maxClockSkew time.Duration
	// maxHeaderBytes caps a request's line and headers; 0 or less: no cap.
	maxHeaderBytes int

	metadataWritesForbidden atomic.Bool
	failedOver              atomic.Bool
	newContainerWarmUp      int
	expiredPurgeLag         time.Duration
	serverless              bool

	queryIndex queryIndexState
	unindexed  unindexedFilterLog

	latency  atomic.Int64 // time.Duration
	endpoint atomic.Value // string
	// readRegions are the regions AddReadRegion listed, after the write
	// region, in readableLocations.
	readRegions atomic.Pointer[[]accountRegion]

	ids      idSource
	faults   faultSet
	counters counters

	// mu guards the database and container maps (not the documents: each
	// container has its own lock).
	mu          sync.RWMutex
	databases   map[string]*database
	metadataLSN int64
}

// New returns a Server with opts applied over the defaults. It panics if
// opts.Key is not base64, which is a programming error.
func New(opts Options) *Server {
	if opts.Key == "" {
		opts.Key = EmulatorKey
	}
	keyBytes, err := base64.StdEncoding.DecodeString(opts.Key)
	if err != nil {
		panic("fakecosmos: Options.Key is not base64: " + err.Error())
	}
	if opts.PartitionKeyRanges < 1 {
		opts.PartitionKeyRanges = 1
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxClockSkew <= 0 {
		opts.MaxClockSkew = defaultMaxClockSkew
	}
	if opts.Endpoint == "" {
		opts.Endpoint = DefaultEndpoint
	}
	if opts.MaxRequestHeaderBytes == 0 {
		opts.MaxRequestHeaderBytes = DefaultMaxRequestHeaderBytes
	}
	s := &Server{
		key:          opts.Key,
		keyBytes:     keyBytes,
		aadToken:     opts.AADToken,
		rangesPerNew: opts.PartitionKeyRanges,
		staleReads:   opts.StaleReadsWithoutSessionToken,
		now:          opts.Now,
		maxClockSkew: opts.MaxClockSkew,

		maxHeaderBytes:     opts.MaxRequestHeaderBytes,
		newContainerWarmUp: opts.NewContainerWarmUp,
		expiredPurgeLag:    opts.ExpiredPurgeLag,
		serverless:         opts.Serverless,

		databases: map[string]*database{},
		ids:       newIDSource(),
	}
	s.latency.Store(int64(opts.Latency))
	s.endpoint.Store(opts.Endpoint)
	s.counters.reset()
	return s
}

// Key returns the master key clients must sign with.
func (s *Server) Key() string { return s.key }

// SetLatency changes the latency added to every later request.
func (s *Server) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// SetEndpoint changes what GET / advertises; whoever serves the Server on a
// socket sets it to the address clients can reach.
func (s *Server) SetEndpoint(url string) { s.endpoint.Store(url) }

func (s *Server) currentEndpoint() string { return s.endpoint.Load().(string) }

// response is a finished answer, or the instruction to drop the connection.
type response struct {
	status int
	header http.Header
	body   []byte
	drop   bool
}

// ServeHTTP serves one request. A fault that drops the connection hijacks
// and closes it (or aborts the handler where hijacking is impossible).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp := s.handle(r)
	if resp == nil {
		return // the client went away while we waited
	}
	if resp.drop {
		dropConnection(w)
		return
	}
	for k, v := range resp.header {
		w.Header()[k] = v
	}
	if bodyAllowed(resp.status) {
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

// bodyAllowed is false for the statuses that carry neither a body nor a
// Content-Length (RFC 9110).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// dropConnection closes the client's connection without an answer, as a
// crashed gateway or a network failure would.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // net/http closes the stream without logging
}

// handle runs the whole pipeline for one request: read, route, count, wait,
// authenticate, apply faults, execute. It returns nil when the request's
// context ended during the latency wait or while a FaultNoAnswer held it.
func (s *Server) handle(r *http.Request) *response {
	activityID := s.ids.activityID()
	body, bodyErr := readBody(r)
	rt, routeErr := parseRoute(r.URL.EscapedPath())
	op := resolveOp(rt, r)
	s.counters.request(op)
	if refused := s.refuseOversizedHeaders(r); refused != nil {
		return refused // the front end answers before the service sees anything
	}

	if err := s.waitLatency(r.Context()); err != nil {
		return nil
	}
	if routeErr != nil { // nothing to sign against: say what is wrong
		return s.errorResponse(r, op, routeErr, activityID)
	}
	signed, err := s.authenticate(r, rt)
	if err != nil {
		return s.errorResponse(r, op, err, activityID)
	}
	if err := s.refuseMetadataWrite(r, op, signed); err != nil {
		return s.errorResponse(r, op, err, activityID)
	}
	if err := s.refuseWriteElsewhere(r, op); err != nil {
		return s.errorResponse(r, op, err, activityID)
	}
	priority, err := priorityLevel(r)
	if err != nil {
		return s.errorResponse(r, op, err, activityID)
	}

	info := RequestInfo{
		PriorityLevel: priority,
		Op:            op, Method: r.Method, Path: r.URL.Path,
		Database: rt.database, Container: rt.container, ItemID: rt.item,
		PartitionKey:        r.Header.Get(hdrPartitionKey),
		PartitionKeyRangeID: r.Header.Get(hdrPartitionKeyRangeID),
		Body:                body,
	}
	fault, faulted := s.faults.match(info)
	if faulted && fault.Kind == FaultNoAnswer {
		<-r.Context().Done()
		return nil
	}
	if faulted && fault.Kind != FaultLoseResponse {
		return s.faultResponse(r, op, fault, activityID)
	}

	if err := s.notReadyYet(rt, op); err != nil {
		return s.errorResponse(r, op, err, activityID)
	}
	resp := s.execute(r, rt, op, body, bodyErr, activityID)
	if faulted { // FaultLoseResponse: executed and committed, answer lost
		return &response{drop: true}
	}
	return resp
}

// execute runs the operation and renders its answer.
func (s *Server) execute(r *http.Request, rt route, op Op, body []byte, bodyErr error, activityID string) *response {
	if bodyErr != nil {
		return s.errorResponse(r, op, bodyErr, activityID)
	}
	res, err := s.dispatch(&request{http: r, route: rt, op: op, body: body})
	if err != nil {
		return s.errorResponse(r, op, err, activityID)
	}
	return s.successResponse(r, op, res, activityID)
}

func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return nil, badRequest("could not read the request body: %v", err)
	}
	if len(body) > maxRequestBody {
		return nil, tooLarge()
	}
	return body, nil
}

func (s *Server) waitLatency(ctx context.Context) error {
	d := time.Duration(s.latency.Load())
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request is what a handler needs of an incoming request.
type request struct {
	http  *http.Request
	route route
	op    Op
	body  []byte
}

func (q *request) header(name string) string { return q.http.Header.Get(name) }

func (q *request) flag(name string) bool { return isTrue(q.http.Header.Get(name)) }

// preferMinimal reports `Prefer: return=minimal`: write responses carry no
// body (the etag header still does).
func (q *request) preferMinimal() bool {
	return strings.EqualFold(strings.TrimSpace(q.header(hdrPrefer)), "return=minimal")
}

// isTrue reads a boolean header the way the gateway does: "True" (REST docs)
// and "true" (Go SDK) alike.
func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// result is a handler's successful answer.
type result struct {
	status  int
	body    []byte // nil: no body
	etag    string
	charge  float64
	header  http.Header // extra headers (continuation, item count...)
	session string      // x-ms-session-token: a document answer's range and LSN
	lsn     int64
}

func (s *Server) dispatch(q *request) (*result, error) {
	switch q.op {
	case OpReadAccount:
		return s.readAccount(q)
	case OpListDatabases:
		return s.listDatabases(q)
	case OpCreateDatabase:
		return s.createDatabase(q)
	case OpReadDatabase:
		return s.readDatabase(q)
	case OpDeleteDatabase:
		return s.deleteDatabase(q)
	case OpListContainers:
		return s.listContainers(q)
	case OpCreateContainer:
		return s.createContainer(q)
	case OpReadContainer:
		return s.readContainer(q)
	case OpReplaceContainer:
		return s.replaceContainer(q)
	case OpDeleteContainer:
		return s.deleteContainer(q)
	case OpCreateItem, OpUpsertItem:
		return s.createOrUpsertItem(q)
	case OpReadItem:
		return s.readItem(q)
	case OpReplaceItem:
		return s.replaceItem(q)
	case OpDeleteItem:
		return s.deleteItem(q)
	case OpPatchItem:
		return s.patchItem(q)
	case OpBatch:
		return s.executeBatch(q)
	case OpQuery:
		return s.queryItems(q)
	case OpQueryPlan:
		return s.serveQueryPlan(q)
	case OpReadFeed:
		return s.readFeed(q)
	case OpChangeFeed:
		return s.readChangeFeed(q)
	case OpReadPartitionKeyRanges:
		return s.readPartitionKeyRanges(q)
	case OpListOffers:
		return s.listOffers(q)
	case OpReadOffer:
		return s.readOffer(q)
	}
	return nil, newError(http.StatusMethodNotAllowed, "The requested verb %s is not supported on %s.", q.http.Method, q.http.URL.Path)
}

// commonHeaders are on every answer, success or refusal. Answers about
// documents carry their range's session token instead of the metadata one,
// set by the handler, or none when the request never reached a range.
func (s *Server) commonHeaders(r *http.Request, op Op, activityID string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(hdrActivityID, activityID)
	version := r.Header.Get(hdrVersion)
	if version == "" {
		version = "2020-11-05"
	}
	h.Set(hdrVersion, version)
	h.Set("Date", s.now().UTC().Format(http.TimeFormat))
	if !isDocumentOp(op) {
		lsn := s.currentMetadataLSN()
		h.Set(hdrSessionToken, sessionToken("0", lsn))
		h.Set(hdrLSN, strconv.FormatInt(lsn, 10))
	}
	return h
}

func (s *Server) successResponse(r *http.Request, op Op, res *result, activityID string) *response {
	h := s.commonHeaders(r, op, activityID)
	for k, v := range res.header {
		h[k] = v
	}
	charge := roundCharge(res.charge)
	s.counters.charge(charge)
	h.Set(hdrRequestCharge, formatCharge(charge))
	if res.session != "" {
		h.Set(hdrSessionToken, res.session)
		h.Set(hdrLSN, strconv.FormatInt(res.lsn, 10))
	}
	if res.etag != "" {
		h.Set("etag", res.etag)
	}
	return &response{status: res.status, header: h, body: res.body}
}

func (s *Server) errorResponse(r *http.Request, op Op, err error, activityID string) *response {
	var ce *cosmosError
	if !errors.As(err, &ce) {
		ce = newError(http.StatusInternalServerError, "%v", err)
	}
	h := s.commonHeaders(r, op, activityID)
	if ce.session != "" {
		h.Set(hdrSessionToken, ce.session)
		h.Set(hdrLSN, strconv.FormatInt(ce.lsn, 10))
	}
	s.counters.charge(chargeRefusal)
	h.Set(hdrRequestCharge, formatCharge(chargeRefusal))
	if ce.subStatus != 0 {
		h.Set(hdrSubStatus, strconv.Itoa(ce.subStatus))
	}
	return &response{status: ce.status, header: h, body: errorBody(ce, activityID)}
}

func (s *Server) currentMetadataLSN() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.metadataLSN
}

func sessionToken(rangeID string, lsn int64) string {
	return rangeID + ":-1#" + strconv.FormatInt(lsn, 10)
}

// randomBytes fills n bytes from crypto/rand; a failure there means the
// platform is broken, so it panics rather than hand out colliding ids.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("fakecosmos: crypto/rand failed: " + err.Error())
	}
	return b
}
