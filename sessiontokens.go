package cdb

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A process reads its own writes. Accounts default to Session consistency: a
// read is served by a replica that has applied at least the position its
// x-ms-session-token names, and by any replica when it names none, possibly
// one that has not applied this process's latest writes. So, as the official
// SDKs do, the client keeps the highest session token it has seen per
// container and partition key range, from writes and reads alike, and sends
// on a read the token of the range it reads (routing.go finds it), on a query
// across partitions those of every range, or, when they would not fit in
// a request's headers, the query range by range (QueryItems).
//
// A token is "<range id>:<version>#<global lsn>[#<region>=<local lsn>...]"
// (older servers send "<range id>:<lsn>"); several, comma-separated, make a
// compound token. Segments in any other form are ignored, so a server that
// sends none, or a format of its own, gets none back.

const headerSessionToken = "x-ms-session-token"

// sessionToken is one range's position.
type sessionToken struct {
	simple  bool  // the older "<lsn>" form: only global is set
	version int64 // bumped when the replica set changes
	global  int64
	regions map[int64]int64 // region id → local LSN, multi-region writes
}

// parseSessionToken reads a token without its range id.
func parseSessionToken(s string) (sessionToken, bool) {
	parts := strings.Split(s, "#")
	if len(parts) == 1 {
		lsn, err := strconv.ParseInt(s, 10, 64)
		return sessionToken{simple: true, global: lsn}, err == nil && lsn >= 0
	}
	version, err1 := strconv.ParseInt(parts[0], 10, 64)
	global, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || global < 0 {
		return sessionToken{}, false
	}
	t := sessionToken{version: version, global: global}
	for _, p := range parts[2:] {
		id, local, ok := strings.Cut(p, "=")
		region, err1 := strconv.ParseInt(id, 10, 64)
		lsn, err2 := strconv.ParseInt(local, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return sessionToken{}, false
		}
		if t.regions == nil {
			t.regions = map[int64]int64{}
		}
		t.regions[region] = lsn
	}
	return t, true
}

func (t sessionToken) String() string {
	if t.simple {
		return strconv.FormatInt(t.global, 10)
	}
	var b strings.Builder
	b.WriteString(strconv.FormatInt(t.version, 10))
	b.WriteByte('#')
	b.WriteString(strconv.FormatInt(t.global, 10))
	regions := make([]int64, 0, len(t.regions))
	for r := range t.regions {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	for _, r := range regions {
		b.WriteByte('#')
		b.WriteString(strconv.FormatInt(r, 10))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(t.regions[r], 10))
	}
	return b.String()
}

// merge is the later of two positions of one range, as the SDKs merge vector
// tokens: the higher version's regions, each at the higher local LSN, and
// the higher global LSN. Two forms that cannot be compared keep the newer.
func (t sessionToken) merge(newer sessionToken) sessionToken {
	if t.simple != newer.simple {
		return newer
	}
	if t.simple {
		return sessionToken{simple: true, global: max(t.global, newer.global)}
	}
	hi, lo := t, newer
	if newer.version > t.version {
		hi, lo = newer, t
	}
	out := sessionToken{version: hi.version, global: max(t.global, newer.global)}
	for r, lsn := range hi.regions {
		if other, ok := lo.regions[r]; ok {
			lsn = max(lsn, other)
		}
		if out.regions == nil {
			out.regions = map[int64]int64{}
		}
		out.regions[r] = lsn
	}
	return out
}

// sessionStore holds the tokens of every container a Client has touched, by
// container link, then by partition key range id.
type sessionStore struct {
	mu       sync.Mutex
	disabled bool // test hook: neither keep nor send tokens
	tokens   map[string]map[string]keptToken
	seq      uint64 // counts captures, to tell tokens learnt after a mark
}

// keptToken is a range's token and the capture that last moved it.
type keptToken struct {
	token sessionToken
	seq   uint64
}

func newSessionStore() *sessionStore {
	return &sessionStore{tokens: map[string]map[string]keptToken{}}
}

// capture merges the segments of a response's session token header and
// returns the range ids it named.
func (s *sessionStore) capture(container, header string) []string {
	if header == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return nil
	}
	s.seq++
	var ids []string
	for _, seg := range strings.Split(header, ",") {
		rangeID, raw, ok := strings.Cut(strings.TrimSpace(seg), ":")
		if !ok || rangeID == "" {
			continue
		}
		tok, ok := parseSessionToken(raw)
		if !ok {
			continue
		}
		ranges := s.tokens[container]
		if ranges == nil {
			ranges = map[string]keptToken{}
			s.tokens[container] = ranges
		}
		if prev, seen := ranges[rangeID]; seen {
			tok = prev.token.merge(tok)
		}
		ranges[rangeID] = keptToken{token: tok, seq: s.seq}
		ids = append(ids, rangeID)
	}
	return ids
}

// holds reports whether any token of the container is kept.
func (s *sessionStore) holds(container string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tokens[container]) > 0
}

// mark is the position of the latest capture, for prune.
func (s *sessionStore) mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// prune forgets the tokens of the ranges that are gone, given the live
// ranges read after mark: those not live, unless one is the nearest parent
// with a token of a live range that has none of its own (a read of that
// range sends it, as the SDKs do). Tokens captured after mark are kept:
// they may be of ranges newer than the list.
func (s *sessionStore) prune(container string, live []PartitionKeyRange, mark uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranges := s.tokens[container]
	if len(ranges) == 0 {
		return
	}
	keep := make(map[string]bool, len(live))
	for _, r := range live {
		keep[r.ID] = true
		if _, own := ranges[r.ID]; own {
			continue
		}
		if parent, ok := nearestKept(ranges, r.Parents); ok {
			keep[parent] = true
		}
	}
	for id, kept := range ranges {
		if !keep[id] && kept.seq <= mark {
			delete(ranges, id)
		}
	}
}

// nearestKept is the last of parents (the nearest ancestor) with a token.
func nearestKept(ranges map[string]keptToken, parents []string) (string, bool) {
	for i := len(parents) - 1; i >= 0; i-- {
		if _, ok := ranges[parents[i]]; ok {
			return parents[i], true
		}
	}
	return "", false
}

// compound is the token of every range of the container, for a request
// whose range the client does not resolve (a query across partitions, or
// a point read whose range could not be resolved): the service picks the
// segment of the range it reads. "" when none is known. It grows with the
// container's ranges; prune keeps it from growing with its history too.
func (s *sessionStore) compound(container string) string {
	return s.compoundOf(container, nil)
}

// compoundOf is the compound token of the ranges named in ids that the
// client holds a token of (every range when ids is nil). A query across
// partitions sends the ranges it knew of when it started: those its own
// pages teach it, the ones it has read, it needs no more, and with them
// the token would grow past the header limit as it walks a large container.
func (s *sessionStore) compoundOf(container string, ids []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranges := s.tokens[container]
	if s.disabled || len(ranges) == 0 {
		return ""
	}
	if ids == nil {
		ids = slices.Collect(maps.Keys(ranges))
	}
	ids = slices.Sorted(slices.Values(ids))
	segs := make([]string, 0, len(ids))
	for _, id := range ids {
		if kept, ok := ranges[id]; ok {
			segs = append(segs, id+":"+kept.token.String())
		}
	}
	return strings.Join(segs, ",")
}

// knownRanges is the ids of the container's ranges the client holds a
// token of; never nil (nil asks compoundOf for every range).
func (s *sessionStore) knownRanges(container string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.tokens[container]))
	if !s.disabled {
		for id := range s.tokens[container] {
			ids = append(ids, id)
		}
	}
	return ids
}

// compoundFits reports whether the compound token of the container is at
// most limit bytes long, without building it.
func (s *sessionStore) compoundFits(container string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disabled {
		return true
	}
	n := -1 // no comma before the first segment
	for id, kept := range s.tokens[container] {
		n += len(id) + 2 + len(kept.token.String()) // "," id ":" token
		if n > limit {
			return false
		}
	}
	return true
}

// forRange is the token for a request that targets one range: its own, or,
// after a split, that of its nearest parent, under the range's id (as the
// SDKs send it: the service reads a child's position from its parent's).
// "" when none is known: the first read of a range sends no token, not
// the compound one, so the header never grows with the container.
func (s *sessionStore) forRange(container, rangeID string, parents []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranges := s.tokens[container]
	if s.disabled || ranges == nil {
		return ""
	}
	if kept, ok := ranges[rangeID]; ok {
		return rangeID + ":" + kept.token.String()
	}
	if parent, ok := nearestKept(ranges, parents); ok {
		return rangeID + ":" + ranges[parent].token.String()
	}
	return ""
}

// forget drops a container's tokens: it was deleted or created, or the
// service cannot serve them (a container created again elsewhere under the
// same name has positions of its own).
func (s *sessionStore) forget(container string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, container)
}

// forgetDatabase drops the tokens of every container of a database.
func (s *sessionStore) forgetDatabase(database string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := databaseRef(database).link + "/"
	for link := range s.tokens {
		if strings.HasPrefix(link, prefix) {
			delete(s.tokens, link)
		}
	}
}

func (s *sessionStore) disable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disabled = true
	s.tokens = map[string]map[string]keptToken{}
}

// sessionUse says how a request takes part in the session: the container
// whose tokens it updates and, for reads, which token it sends.
type sessionUse struct {
	container string // container link; "" for requests outside documents
	send      bool   // a read or query: send the session token
	rangeID   string // the range read (targeted, or resolved from the partition key): send its token only
	parents   []string
	// knownRanges, for a query across partitions, are the ranges whose
	// tokens it sends: those known when it started (nil: every range).
	knownRanges []string
}

// capturesSession reports the answers whose token is a position of the
// documents' range: successes and the refusals a replica served (not found,
// conflict, precondition failed). A 404/1002 names no position.
func capturesSession(resp *response) bool {
	switch {
	case resp.StatusCode < http.StatusMultipleChoices:
		return true
	case resp.StatusCode == http.StatusNotFound:
		return subStatus(resp) != SubStatusReadSessionNotAvailable
	}
	return resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusPreconditionFailed
}

func subStatus(resp *response) int {
	sub, _ := strconv.Atoi(resp.Header.Get("x-ms-substatus"))
	return sub
}

// sessionHeader is the token to send on one attempt; a caller's own token
// (ItemOptions.SessionToken, QueryOptions.SessionToken) wins.
func (c *Client) sessionHeader(r *request) string {
	if !r.session.send || r.session.container == "" || r.header.Get(headerSessionToken) != "" {
		return ""
	}
	if r.session.rangeID != "" {
		return c.sessions.forRange(r.session.container, r.session.rangeID, r.session.parents)
	}
	return c.sessions.compoundOf(r.session.container, r.session.knownRanges)
}
