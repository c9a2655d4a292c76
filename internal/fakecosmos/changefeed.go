package fakecosmos

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	hdrIfModifiedSince = "if-modified-since"
	hdrStartEPK        = "x-ms-start-epk"
	hdrEndEPK          = "x-ms-end-epk"

	// aimIncremental is the latest-version change feed, the only mode
	// served; "Full-Fidelity Feed" (all versions and deletes) is refused.
	aimIncremental = "incremental feed"
	// ifNoneMatchNow starts the change feed at the range's current LSN.
	ifNoneMatchNow = "*"
)

// changeFeedStart is where a change feed request starts reading: after an
// LSN of the range, and only documents last written at or after a time.
type changeFeedStart struct {
	afterLSN int64
	fromNow  bool
	since    int64 // _ts lower bound in seconds; 0: none
}

// readChangeFeed serves GET .../docs with A-IM: Incremental feed, for one
// partition key range or one logical partition: the latest version of every
// document whose last write comes after the start, in LSN order. Deleted
// documents do not appear. The etag answered is the continuation (an LSN);
// 304 means nothing new. The feed is read from the primary: the session
// token is checked, and the answer carries the range's position.
func (s *Server) readChangeFeed(q *request) (*result, error) {
	if err := checkChangeFeedMode(q); err != nil {
		return nil, err
	}
	start, err := parseChangeFeedStart(q)
	if err != nil {
		return nil, err
	}
	maxItems, err := pageLimits(q)
	if err != nil {
		return nil, err
	}
	if _, err := s.newReadView(q); err != nil {
		return nil, err
	}
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	scope, err := resolveScope(q, c)
	if err != nil {
		return nil, err
	}
	if scope.kind == scopeCross {
		return nil, badRequest("The change feed is read per partition key range (x-ms-documentdb-partitionkeyrangeid) or per partition key (x-ms-documentdb-partitionkey).")
	}
	if start.fromNow {
		start.afterLSN = scope.rng.lsn
	}
	changes, scanned := c.changesAfter(scope, start, s.now())
	page, next := cutChangeFeedPage(changes, maxItems, scope.rng.lsn)
	return s.renderChangeFeedPage(c, scope, page, scanned, next), nil
}

func checkChangeFeedMode(q *request) error {
	mode := strings.TrimSpace(q.header(hdrAIM))
	if !strings.EqualFold(mode, aimIncremental) {
		return badRequest("The change feed mode %q (A-IM) is not supported by this fake; only \"Incremental feed\" (latest version) is.", mode)
	}
	if q.header(hdrStartEPK) != "" || q.header(hdrEndEPK) != "" {
		return badRequest("A change feed of part of a range (x-ms-start-epk, x-ms-end-epk) is not supported by this fake; read whole ranges or one partition key.")
	}
	return nil
}

// parseChangeFeedStart reads If-None-Match (absent: from the beginning; *:
// from now; else the etag of an earlier answer) and If-Modified-Since.
func parseChangeFeedStart(q *request) (changeFeedStart, error) {
	var start changeFeedStart
	switch etag := strings.TrimSpace(q.header(hdrIfNoneMatch)); etag {
	case "":
	case ifNoneMatchNow:
		start.fromNow = true
	default:
		lsn, err := strconv.ParseInt(strings.Trim(etag, `"`), 10, 64)
		if err != nil || lsn < 0 {
			return start, badRequest("The change feed continuation (If-None-Match) %q is not an etag this gateway answered.", etag)
		}
		start.afterLSN = lsn
	}
	if raw := q.header(hdrIfModifiedSince); raw != "" {
		t, err := http.ParseTime(raw)
		if err != nil {
			return start, badRequest("If-Modified-Since %q is not an HTTP date.", raw)
		}
		start.since = t.Unix()
	}
	return start, nil
}

// changesAfter lists the scope's current documents written after the
// start, in LSN order (creation order within one LSN, as a batch wrote
// them), and how many documents it looked at. Call with c.mu held.
func (c *container) changesAfter(scope queryScope, start changeFeedStart, now time.Time) (changes []*document, scanned int) {
	for canonical, p := range c.partitions {
		if !c.partitionInScope(scope, canonical, p) {
			continue
		}
		for _, d := range p.docs {
			scanned++
			if d.lsn > start.afterLSN && writtenSince(d, start.since) && visibleInChangeFeed(d, now) {
				changes = append(changes, d)
			}
		}
	}
	slices.SortFunc(changes, func(a, b *document) int {
		if a.lsn != b.lsn {
			return compareUint(uint64(a.lsn), uint64(b.lsn))
		}
		return compareUint(a.seq, b.seq)
	})
	return changes, scanned
}

func (c *container) partitionInScope(scope queryScope, canonical string, p *logicalPartition) bool {
	if scope.kind == scopePartition {
		return canonical == scope.pk.canonical
	}
	return p.epk >= scope.rng.lo && p.epk < scope.rng.hi
}

func writtenSince(d *document, since int64) bool {
	if since == 0 {
		return true
	}
	ts, err := strconv.ParseInt(string(encodeJSON(d.body["_ts"])), 10, 64)
	return err == nil && ts >= since
}

// visibleInChangeFeed is the single place where documents the change feed
// must not show are left out: an expired document is gone from the feed as
// from reads and queries. Deleted documents never reach it: only stored
// documents are listed.
func visibleInChangeFeed(d *document, now time.Time) bool {
	return !d.expiredAt(now)
}

// cutChangeFeedPage takes up to maxItems changes, extended to the end of
// the last one's LSN so that a transactional batch is never split across
// pages, and the etag to continue from: the last LSN returned, or the
// range's when the page holds everything.
func cutChangeFeedPage(changes []*document, maxItems int, rangeLSN int64) (page []*document, next int64) {
	if maxItems <= 0 || len(changes) <= maxItems {
		return changes, rangeLSN
	}
	end := maxItems
	for end < len(changes) && changes[end].lsn == changes[maxItems-1].lsn {
		end++
	}
	if end == len(changes) {
		return changes, rangeLSN
	}
	return changes[:end], changes[end-1].lsn
}

// renderChangeFeedPage answers 200 with the documents, or 304 without a
// body when there are none; both carry the continuation etag.
func (s *Server) renderChangeFeedPage(c *container, scope queryScope, page []*document, scanned int, next int64) *result {
	h := http.Header{}
	h.Set(hdrItemCount, strconv.Itoa(len(page)))
	res := &result{
		status: http.StatusOK, header: h,
		etag:    `"` + strconv.FormatInt(next, 10) + `"`,
		session: sessionToken(scope.rng.id, scope.rng.lsn), lsn: scope.rng.lsn,
	}
	if len(page) == 0 {
		res.status = http.StatusNotModified
		res.charge = queryCharge(scanned, 0)
		s.counters.query(scanned, 0, false)
		return res
	}
	raws := make([][]byte, len(page))
	size := 0
	for i, d := range page {
		raws[i] = d.raw
		size += len(d.raw)
	}
	var body bytes.Buffer
	body.WriteString(`{"_rid":`)
	body.Write(encodeJSON(c.rid))
	body.WriteString(`,"Documents":[`)
	body.Write(bytes.Join(raws, []byte(",")))
	body.WriteString(`],"_count":`)
	body.WriteString(strconv.Itoa(len(page)))
	body.WriteString("}")
	res.body = body.Bytes()
	res.charge = queryCharge(scanned, size)
	s.counters.query(scanned, len(page), false)
	return res
}
