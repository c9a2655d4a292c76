package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault kinds, as the report counts them.
const (
	faultThrottle     = "429"
	faultUnavailable  = "503"
	faultTimeout      = "408"
	faultGone         = "410"
	faultDrop         = "drop"
	faultLoseResponse = "lost-response"
	faultLatency      = "latency-spike"
	// The transient refusals (Faults.TransientRefusals).
	fault401  = "401"
	fault403  = "403"
	fault404x = "404.1003"
	fault413  = "413"
)

// minRefusedBody is the smallest request body the simulated account
// refuses as too large (413). A real account gives a 413 the provider did
// not plan for only where its size accounting and the provider's differ,
// which is near the limits (a 2 MiB batch or document): half of a limit
// and more. A smaller request is sized alike by both, give or take far
// less than the distance to the limit, and refusing it would model an
// account that refuses the same request again (a start of a 700 KB input,
// which no account refuses and nothing can make smaller, failed so).
const minRefusedBody = 1 << 20

// errNodeDown is what a crashed node's requests fail with: the process is
// gone, nothing it sends arrives and nothing comes back.
var errNodeDown = errors.New("sim: node is down")

// faultTransport sits between one node's Cosmos DB client and the account.
// It injects the configured faults at random, and it is how a node
// crashes: once killed, every request fails, including those in flight
// (whose effects may already have committed).
type faultTransport struct {
	next   http.RoundTripper
	faults Faults
	kinds  []string
	stats  *Stats
	commit func(req *http.Request, body []byte, resp *http.Response, answered bool)
	// tried, optional, is told of every request that got past a crash:
	// when it entered the transport, the fault drawn, the account's status
	// when the request reached it (0: it never did) and whether the node
	// got to read that answer.
	tried func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool)
	wire  *wireLog // nil: no journal
	// flight, optional, keeps a line per try naming a scenario (flight.go).
	flight *flightRecorder
	node   string
	// sent, optional, is shown every request the node sends while alive,
	// body included, before any fault (bounded-names).
	sent func(req *http.Request, body []byte)

	mu  sync.Mutex
	rng *rand.Rand

	// requests counts every request the node sent (the idle budget).
	requests atomic.Int64

	dead  atomic.Bool
	quiet atomic.Bool // faults off (a clean close, the end of a run): drawn, forced and failReads; crashes still apply
	// crashOn, when set, is checked on every request: it returns whether
	// the node dies before sending the request or after its response.
	crashOn atomic.Pointer[crashTrigger]
	// pausedUntil (unix nanoseconds) holds every request back until then:
	// the process is stalled (a GC or VM pause), not dead. pauseOn stalls
	// it at the first request it matches.
	pausedUntil atomic.Int64
	pauseOn     atomic.Pointer[pauseTrigger]
	// faultOn, when set, forces its fault on the first request it
	// matches: a fault aimed at one request the random draw would rarely
	// reach (a first turn's commit, say).
	faultOn atomic.Pointer[faultTrigger]
	// slowOn, when set, holds the first request it matches back for its
	// delay before sending it (a commit that takes seconds).
	slowOn atomic.Pointer[slowTrigger]
	// failReads, when set, fails the node's next reads of one partition
	// (firstturns.go: the reads that would tell whether a commit whose
	// answer was lost applied).
	failReads atomic.Pointer[readFaults]
	// stalled, optional, is told of every pause (pk "": every request
	// waits) and every fault drawn for a request of partition pk: the
	// times its node's work may have been held back.
	stalled func(pk string, from, until time.Time)
	// paused, optional, is told of every pause instead of stalled, so a
	// pause can be told from a fault drawn for a request with no
	// partition key (a cross-partition query), which stalled reports
	// under "" too.
	paused func(from, until time.Time)
}

// triesHook is a transport's hook for every request try (faultTransport.tried).
type triesHook = func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool)

// bothTries calls a and b (either may be nil).
func bothTries(a, b triesHook) triesHook {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
		a(req, body, entered, fault, status, answered)
		b(req, body, entered, fault, status, answered)
	}
}

// pauseTrigger stalls the node for d at the first request it matches,
// before sending it.
type pauseTrigger struct {
	match func(op string, body []byte) bool
	d     time.Duration
	fired func()
	once  sync.Once
}

// faultTrigger forces kind on the first request it matches.
type faultTrigger struct {
	match func(op string, body []byte) bool
	kind  string
	fired func()
	once  sync.Once
}

// readFaults fails the next left reads of partition pk (point reads, and
// batches of reads from the primary) with kind.
type readFaults struct {
	pk   string
	kind string
	left atomic.Int32
}

// take says this request is one of those reads, and counts it.
func (rf *readFaults) take(req *http.Request, op string, body []byte) bool {
	if partitionKeyOf(req) != rf.pk || !isRead(op, body) {
		return false
	}
	return rf.left.Add(-1) >= 0
}

// isRead says a request only reads: a point read, or a batch of reads.
func isRead(op string, body []byte) bool {
	switch op {
	case "ReadItem":
		return true
	case "Batch":
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil || len(ops) == 0 {
			return false
		}
		for _, o := range ops {
			if !strings.EqualFold(o.OperationType, "read") {
				return false
			}
		}
		return true
	}
	return false
}

// crashTrigger kills the node at the first request it matches.
type crashTrigger struct {
	match func(op string, body []byte) bool
	after bool // let the request execute, then die before the response
	fired func()
	once  sync.Once
}

// newFaultTransport builds a node's transport; refusals says whether the
// transient refusals apply to it (not to the application's calls).
func newFaultTransport(next http.RoundTripper, faults Faults, seed int64, stats *Stats, refusals bool) *faultTransport {
	t := &faultTransport{next: next, faults: faults, stats: stats, rng: rand.New(rand.NewSource(seed))}
	refuse := faults.TransientRefusals && refusals
	for kind, on := range map[string]bool{
		faultThrottle: faults.Throttle, faultUnavailable: faults.Unavailable, faultTimeout: faults.Timeout,
		faultGone: faults.Gone, faultDrop: faults.DropConnection, faultLoseResponse: faults.LoseResponse,
		faultLatency: faults.LatencySpike, fault401: refuse, fault403: refuse, fault404x: refuse, fault413: refuse,
	} {
		if on {
			t.kinds = append(t.kinds, kind)
		}
	}
	// Map order is random; the draw must depend on the seed only.
	slices.Sort(t.kinds)
	return t
}

// kill makes every request from now on fail, as if the process died.
func (t *faultTransport) kill() { t.dead.Store(true) }

// RoundTrip applies a pending crash or a random fault, or forwards.
func (t *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	if t.dead.Load() {
		return nil, t.downError(req)
	}
	body, err := readAll(req)
	if err != nil {
		return nil, err
	}
	if t.sent != nil {
		t.sent(req, body)
	}
	entered := time.Now()
	resp, answer, kind, status, err := t.roundTrip(req, body)
	if t.tried != nil {
		t.tried(req, body, entered, kind, status, status != 0 && resp != nil)
	}
	if t.wire != nil {
		t.wire.record(t.node, operationOf(req), req, body, kind, resp, answer, err)
	}
	if t.flight != nil {
		t.flight.request(t.node, operationOf(req), req, body, kind, status, err)
	}
	return resp, err
}

// roundTrip is RoundTrip for a read body; it returns the fault it drew, and
// the account's answer and status (0 when the request did not reach it),
// also where the node does not get to read them.
func (t *faultTransport) roundTrip(req *http.Request, body []byte) (_ *http.Response, answer []byte, kind string, status int, _ error) {
	op := operationOf(req)
	// Triggers see the partition key header, a newline, then the body.
	seen := append([]byte(req.Header.Get("x-ms-documentdb-partitionkey")+"\n"), body...)
	if err := t.holdWhilePaused(req.Context(), op, seen); err != nil {
		return nil, nil, "", 0, err
	}
	if t.dead.Load() {
		return nil, nil, "", 0, t.downError(req)
	}
	crashAfter := false
	if trig := t.crashOn.Load(); trig != nil && trig.match(op, seen) {
		if !trig.after {
			trig.once.Do(trig.fired)
			return nil, nil, "crash-before", 0, t.downError(req)
		}
		crashAfter = true
	}
	if err := t.slowDown(req, op, seen); err != nil {
		return nil, nil, "slow", 0, err
	}
	kind = t.draw()
	if forced := t.forced(op, seen); forced != "" {
		kind = forced
	}
	if rf := t.failReads.Load(); rf != nil && !t.quiet.Load() && rf.take(req, op, body) {
		kind = rf.kind
	}
	if kind == fault413 && len(body) < minRefusedBody {
		kind = ""
	}
	if kind != "" {
		t.stats.fault(kind, op)
		if kind != faultLatency { // a spike notes its own delay
			t.stall(partitionKeyOf(req), time.Now(), time.Now())
		}
	}
	switch kind {
	case faultThrottle:
		return statusResponse(req, http.StatusTooManyRequests, 3200, 5*time.Millisecond), nil, kind, 0, nil
	case faultUnavailable:
		return statusResponse(req, http.StatusServiceUnavailable, 0, 0), nil, kind, 0, nil
	case faultTimeout:
		return statusResponse(req, http.StatusRequestTimeout, 0, 0), nil, kind, 0, nil
	case faultGone:
		return statusResponse(req, http.StatusGone, 1002, 0), nil, kind, 0, nil
	case fault401:
		return statusResponse(req, http.StatusUnauthorized, 0, 0), nil, kind, 0, nil
	case fault403:
		return statusResponse(req, http.StatusForbidden, 0, 0), nil, kind, 0, nil
	case fault404x:
		return statusResponse(req, http.StatusNotFound, 1003, 0), nil, kind, 0, nil
	case fault413:
		return statusResponse(req, http.StatusRequestEntityTooLarge, 0, 0), nil, kind, 0, nil
	case faultDrop:
		return nil, nil, kind, 0, fmt.Errorf("sim: %s %s: connection reset before the request was sent: %w", req.Method, req.URL.Path, io.ErrUnexpectedEOF)
	case faultLatency:
		if err := t.spike(req.Context(), partitionKeyOf(req)); err != nil {
			return nil, nil, kind, 0, err
		}
	}
	resp, answer, err := t.forward(req, body)
	if err != nil {
		return nil, nil, kind, 0, err
	}
	// answered: the node gets to read the answer (a node killed later in
	// flight does not either, and is gone).
	answered := !crashAfter && kind != faultLoseResponse && !t.dead.Load() && req.Context().Err() == nil
	if t.commit != nil && resp.StatusCode < 300 {
		t.commit(req, body, resp, answered)
	}
	if crashAfter {
		trig := t.crashOn.Load()
		trig.once.Do(trig.fired)
		return nil, answer, "crash-after", resp.StatusCode, t.downError(req)
	}
	if t.dead.Load() {
		// The node died while the request was in flight: it committed,
		// nobody will read the answer.
		return nil, answer, kind, resp.StatusCode, t.downError(req)
	}
	if kind == faultLoseResponse {
		return nil, answer, kind, resp.StatusCode, fmt.Errorf("sim: %s %s: connection closed before the response: %w", req.Method, req.URL.Path, io.ErrUnexpectedEOF)
	}
	return resp, answer, kind, resp.StatusCode, nil
}

// holdWhilePaused makes a request wait while the node is paused (arming a
// pause first if this request matches pauseOn).
func (t *faultTransport) holdWhilePaused(ctx context.Context, op string, body []byte) error {
	if trig := t.pauseOn.Load(); trig != nil && trig.match(op, body) {
		trig.once.Do(func() {
			t.pause(trig.d)
			if trig.fired != nil {
				trig.fired()
			}
		})
	}
	wait := time.Until(time.Unix(0, t.pausedUntil.Load()))
	if wait <= 0 {
		return nil
	}
	if !sleepCtx(ctx, wait) {
		return fmt.Errorf("sim: paused: %w", ctx.Err())
	}
	return nil
}

// forced is the fault faultOn forces on this request, "" for none; it
// fires once, and not once faults are off.
func (t *faultTransport) forced(op string, body []byte) string {
	trig := t.faultOn.Load()
	if trig == nil || t.quiet.Load() || !trig.match(op, body) {
		return ""
	}
	kind := ""
	trig.once.Do(func() {
		kind = trig.kind
		if trig.fired != nil {
			trig.fired()
		}
	})
	return kind
}

// slowDown holds the request back when slowOn matches it (once), noting
// the stall on its partition.
func (t *faultTransport) slowDown(req *http.Request, op string, seen []byte) error {
	trig := t.slowOn.Load()
	if trig == nil || !trig.match(op, seen) {
		return nil
	}
	fired := false
	trig.once.Do(func() { fired = true })
	if !fired {
		return nil
	}
	from := time.Now()
	t.stall(partitionKeyOf(req), from, from.Add(trig.d))
	if trig.fired != nil {
		trig.fired()
	}
	if !sleepCtx(req.Context(), trig.d) {
		return fmt.Errorf("sim: slow request: %w", req.Context().Err())
	}
	return nil
}

// pause stalls every request from now for d.
func (t *faultTransport) pause(d time.Duration) {
	from := time.Now()
	t.pausedUntil.Store(from.Add(d).UnixNano())
	if t.paused != nil {
		t.paused(from, from.Add(d))
		return
	}
	t.stall("", from, from.Add(d))
}

func (t *faultTransport) stall(pk string, from, until time.Time) {
	if t.stalled != nil {
		t.stalled(pk, from, until)
	}
}

func (t *faultTransport) forward(req *http.Request, body []byte) (*http.Response, []byte, error) {
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	resp, err := t.next.RoundTrip(out)
	if err != nil {
		return nil, nil, err
	}
	// Read the body now, so a lost response still lets the request finish.
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("sim: read response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp, data, nil
}

func (t *faultTransport) downError(req *http.Request) error {
	return fmt.Errorf("sim: %s %s: %w", req.Method, req.URL.Path, errNodeDown)
}

// draw picks this request's fault, "" for none.
func (t *faultTransport) draw() string {
	if len(t.kinds) == 0 || t.faults.Rate <= 0 || t.quiet.Load() {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rng.Float64() >= t.faults.Rate {
		return ""
	}
	return t.kinds[t.rng.Intn(len(t.kinds))]
}

func (t *faultTransport) spike(ctx context.Context, pk string) error {
	t.mu.Lock()
	d := time.Duration(t.rng.Int63n(int64(t.faults.LatencySpikeMaxDelay))) + 10*time.Millisecond
	t.mu.Unlock()
	t.stall(pk, time.Now(), time.Now().Add(d))
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("sim: latency spike: %w", ctx.Err())
	case <-timer.C:
		return nil
	}
}

func readAll(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	defer req.Body.Close()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("sim: read request body: %w", err)
	}
	return body, nil
}

// injectedFaultMessage is the message of every error answer the run
// injects.
const injectedFaultMessage = "sim: injected fault"

// statusResponse is a Cosmos DB error answer that did not execute.
func statusResponse(req *http.Request, status, subStatus int, retryAfter time.Duration) *http.Response {
	body := []byte(`{"code":"` + strings.ReplaceAll(http.StatusText(status), " ", "") + `","message":"` + injectedFaultMessage + `"}`)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-ms-request-charge", "0")
	h.Set("x-ms-activity-id", "00000000-0000-0000-0000-000000000000")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if subStatus != 0 {
		h.Set("x-ms-substatus", strconv.Itoa(subStatus))
	}
	if retryAfter > 0 {
		h.Set("x-ms-retry-after-ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// operationOf names a request's Cosmos DB operation, as the fake's
// counters do.
func operationOf(req *http.Request) string {
	path := strings.Trim(req.URL.Path, "/")
	segments := strings.Split(path, "/")
	last := segments[len(segments)-1]
	switch {
	case last == "pkranges":
		return "ReadPartitionKeyRanges"
	case last == "docs" && req.Method == http.MethodPost:
		switch {
		case isTrue(req.Header.Get("x-ms-cosmos-is-batch-request")):
			return "Batch"
		case isTrue(req.Header.Get("x-ms-documentdb-isquery")):
			return "Query"
		case isTrue(req.Header.Get("x-ms-documentdb-is-upsert")):
			return "UpsertItem"
		}
		return "CreateItem"
	case len(segments) >= 2 && segments[len(segments)-2] == "docs":
		switch req.Method {
		case http.MethodGet:
			return "ReadItem"
		case http.MethodPut:
			return "ReplaceItem"
		case http.MethodDelete:
			return "DeleteItem"
		case http.MethodPatch:
			return "PatchItem"
		}
	}
	return "Other"
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// isWrite reports the operations a crash may interrupt half way.
func isWrite(op string) bool {
	switch op {
	case "Batch", "CreateItem", "UpsertItem", "ReplaceItem", "DeleteItem", "PatchItem":
		return true
	}
	return false
}
