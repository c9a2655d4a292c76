package fakecosmos

import (
	"net/http"
	"strconv"
	"strings"
)

// Session consistency (a reader that carries the session token of a write
// reads it): the model is described in the package documentation.

const subStatusReadSessionNotAvailable = 1002 // with 404

const msgReadSessionNotAvailable = "The read session is not available for the input session token."

// sessionView is the session token a request carries: per range id, the
// highest global LSN it names.
type sessionView map[string]int64

// parseSessionToken reads x-ms-session-token: comma-separated
// "<range id>:<token>" segments, where a token is "<version>#<global
// lsn>[#<region>=<local lsn>...]" (or, in the older form, just "<lsn>").
// A segment that does not parse answers 400, as the gateway does.
func parseSessionToken(header string) (sessionView, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return nil, nil
	}
	view := sessionView{}
	for _, seg := range strings.Split(header, ",") {
		rangeID, token, ok := strings.Cut(strings.TrimSpace(seg), ":")
		if !ok || rangeID == "" {
			return nil, badRequest("The session token provided %q is invalid: each segment must be <partition key range id>:<token>.", header)
		}
		lsn, ok := globalLSN(token)
		if !ok {
			return nil, badRequest("The session token provided %q is invalid.", header)
		}
		if prev, seen := view[rangeID]; !seen || lsn > prev {
			view[rangeID] = lsn
		}
	}
	return view, nil
}

// globalLSN reads the global LSN of a vector token ("-1#12#1=5") or a
// simple one ("12").
func globalLSN(token string) (int64, bool) {
	parts := strings.Split(token, "#")
	if len(parts) == 1 {
		lsn, err := strconv.ParseInt(parts[0], 10, 64)
		return lsn, err == nil && lsn >= 0
	}
	if _, err := strconv.ParseInt(parts[0], 10, 64); err != nil {
		return 0, false
	}
	lsn, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || lsn < 0 {
		return 0, false
	}
	for _, region := range parts[2:] {
		id, local, ok := strings.Cut(region, "=")
		if !ok {
			return 0, false
		}
		if _, err := strconv.ParseInt(id, 10, 64); err != nil {
			return 0, false
		}
		if _, err := strconv.ParseInt(local, 10, 64); err != nil {
			return 0, false
		}
	}
	return lsn, true
}

// lsnFor is the LSN the view names for r: its own segment, else that of
// its nearest ancestor (a token taken before a split).
func (v sessionView) lsnFor(r *pkRange) (int64, bool) {
	if lsn, ok := v[r.id]; ok {
		return lsn, true
	}
	for i := len(r.parents) - 1; i >= 0; i-- {
		if lsn, ok := v[r.parents[i]]; ok {
			return lsn, true
		}
	}
	return 0, false
}

// readView is how a read request sees the documents: current, or through
// the lagging replica of the stale mode.
type readView struct {
	stale   bool
	session sessionView
}

// newReadView reads the request's session token. The token is checked in
// every mode; it only changes what is served in the stale mode.
func (s *Server) newReadView(q *request) (readView, error) {
	session, err := parseSessionToken(q.header(hdrSessionToken))
	if err != nil {
		return readView{}, err
	}
	return readView{stale: s.staleReads, session: session}, nil
}

// checkReachable refuses a token ahead of r: no replica has that session
// yet. Only the stale mode has replicas to be behind.
func (v readView) checkReachable(r *pkRange) error {
	if !v.stale {
		return nil
	}
	if lsn, ok := v.session.lsnFor(r); ok && lsn > r.lsn {
		return newSubError(http.StatusNotFound, subStatusReadSessionNotAvailable, msgReadSessionNotAvailable)
	}
	return nil
}

// version is what the view sees of entry, a stored document or a deletion
// tombstone of range r: the entry itself when its write is covered by the
// session (or in the default mode), else what was there before. Nil means
// absent.
func (v readView) version(entry *document, r *pkRange) *document {
	if entry == nil {
		return nil
	}
	fresh := !v.stale
	if !fresh {
		lsn, ok := v.session.lsnFor(r)
		fresh = ok && lsn >= entry.lsn
	}
	switch {
	case !fresh:
		return live(entry.prev)
	case entry.tombstone:
		return nil
	}
	return live(entry) // an expired document is gone from every read
}

// withSession attaches the range's session position to an error answer of
// a document operation.
func withSession(err error, r *pkRange) error {
	if ce, ok := err.(*cosmosError); ok && ce.session == "" && ce.subStatus != subStatusReadSessionNotAvailable {
		withToken := *ce
		withToken.session, withToken.lsn = sessionToken(r.id, r.lsn), r.lsn
		return &withToken
	}
	return err
}

// isDocumentOp reports the operations whose session tokens are per range;
// the others carry the account's metadata LSN.
func isDocumentOp(op Op) bool {
	switch op {
	case OpCreateItem, OpUpsertItem, OpReadItem, OpReplaceItem, OpDeleteItem, OpPatchItem, OpBatch, OpQuery, OpQueryPlan, OpReadFeed, OpChangeFeed:
		return true
	}
	return false
}
