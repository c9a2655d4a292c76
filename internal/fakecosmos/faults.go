package fakecosmos

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// RequestInfo describes a request to a Fault's Match function. It is
// resolved before anything executes.
type RequestInfo struct {
	Op        Op
	Method    string
	Path      string // decoded URL path
	Database  string
	Container string
	ItemID    string
	// PartitionKey is the raw x-ms-documentdb-partitionkey header.
	PartitionKey        string
	PartitionKeyRangeID string
	// PriorityLevel is "High" or "Low" (x-ms-cosmos-priority-level; High
	// when the request names none): match Low to throttle background work
	// first, as an account with priority-based execution does.
	PriorityLevel string
	Body          []byte
}

// FaultKind says what an injected fault does.
type FaultKind int

const (
	// FaultStatus answers Status/SubStatus without executing the request.
	FaultStatus FaultKind = iota
	// FaultDropConnection drops the connection without executing.
	FaultDropConnection
	// FaultLoseResponse executes and commits the request, then drops the
	// connection: the client cannot know the outcome.
	FaultLoseResponse
	// FaultNoAnswer accepts the request and never answers, as a half-open
	// connection or a gateway that died mid-request: nothing executes, and
	// the request waits until the client gives up on it (its context ends).
	FaultNoAnswer
)

// Fault is a failure injected on demand.
type Fault struct {
	// Match selects the requests hit; nil matches every request.
	Match func(RequestInfo) bool
	Kind  FaultKind
	// Status and SubStatus are the answer of a FaultStatus, e.g. 429, 503,
	// 408, 410/1002, 449.
	Status, SubStatus int
	// RetryAfter becomes x-ms-retry-after-ms (meant for 429).
	RetryAfter time.Duration
	// Times is how many matching requests the fault hits; 0 means until
	// it is removed.
	Times int
}

type activeFault struct {
	Fault
	hits int
}

type faultSet struct {
	mu     sync.Mutex
	faults []*activeFault
}

// InjectFault installs f; faults are tried in the order they were
// injected and the first that matches applies. The returned function
// removes it.
func (s *Server) InjectFault(f Fault) (remove func()) {
	af := &activeFault{Fault: f}
	s.faults.mu.Lock()
	s.faults.faults = append(s.faults.faults, af)
	s.faults.mu.Unlock()
	return func() { s.faults.remove(af) }
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.faults = nil
}

func (fs *faultSet) remove(af *activeFault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f == af {
			fs.faults = append(fs.faults[:i:i], fs.faults[i+1:]...)
			return
		}
	}
}

// match returns the fault that hits this request, spending one of its
// Times; a spent fault is dropped from the set.
func (fs *faultSet) match(info RequestInfo) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.faults {
		if f.Match != nil && !f.Match(info) {
			continue
		}
		f.hits++
		if f.Times > 0 && f.hits >= f.Times {
			fs.faults = append(fs.faults[:i:i], fs.faults[i+1:]...)
		}
		return f.Fault, true
	}
	return Fault{}, false
}

// faultResponse answers a FaultStatus (or drops the connection). Nothing
// ran, so it costs no request units.
func (s *Server) faultResponse(r *http.Request, op Op, f Fault, activityID string) *response {
	if f.Kind == FaultDropConnection {
		return &response{drop: true}
	}
	status := f.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	ce := &cosmosError{status: status, subStatus: f.SubStatus, message: "Injected fault: " + http.StatusText(status) + "."}
	h := s.commonHeaders(r, op, activityID)
	h.Set(hdrRequestCharge, "0")
	if f.SubStatus != 0 {
		h.Set(hdrSubStatus, strconv.Itoa(f.SubStatus))
	}
	if f.RetryAfter > 0 {
		h.Set(hdrRetryAfterMs, strconv.FormatInt(f.RetryAfter.Milliseconds(), 10))
	}
	return &response{status: status, header: h, body: errorBody(ce, activityID)}
}
