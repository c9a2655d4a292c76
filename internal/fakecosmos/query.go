package fakecosmos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb/internal/cosmossql"
)

const (
	defaultMaxItemCount = 100
	// maxPageBytes caps a page as the service does (about 4 MB), whatever
	// x-ms-max-item-count says; a page always holds at least one result.
	maxPageBytes = 4 * 1024 * 1024
)

// queryRequest is a parsed query body.
type queryRequest struct {
	text   string
	params map[string]any
	query  *cosmossql.Query
}

func parseQueryRequest(q *request) (*queryRequest, error) {
	if mediaType(q.http) != "application/query+json" {
		return nil, badRequest("A query request must have Content-Type application/query+json, got %q.", q.header("Content-Type"))
	}
	obj, err := decodeObject(q.body)
	if err != nil {
		return nil, err
	}
	text, ok := obj["query"].(string)
	if !ok || strings.TrimSpace(text) == "" {
		return nil, badRequest("The query body must have a \"query\" string.")
	}
	params, err := parseQueryParameters(obj["parameters"])
	if err != nil {
		return nil, err
	}
	parsed, err := cosmossql.Parse(text)
	if err != nil {
		var se *cosmossql.SyntaxError
		if errors.As(err, &se) {
			return nil, badRequest("Syntax error in the query: %s", se.Error())
		}
		return nil, badRequest("The query is invalid: %v", err)
	}
	return &queryRequest{text: text, params: params, query: parsed}, nil
}

func parseQueryParameters(v any) (map[string]any, error) {
	params := map[string]any{}
	if v == nil {
		return params, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, badRequest("The query's \"parameters\" must be an array of {\"name\",\"value\"}.")
	}
	for _, item := range list {
		p, _ := item.(map[string]any)
		name, _ := p["name"].(string)
		if !strings.HasPrefix(name, "@") || len(name) < 2 {
			return nil, badRequest("Query parameter names must start with @, got %q.", name)
		}
		if _, dup := params[name]; dup {
			return nil, badRequest("The query parameter %s is given twice.", name)
		}
		params[name] = p["value"]
	}
	return params, nil
}

// needsWholeResult reports features that cannot be paged document by
// document (ordering, windows, aggregates...): exactly those the gateway
// refuses across partitions.
func needsWholeResult(f cosmossql.Features) bool {
	return f.OrderBy || f.Top || f.Offset || f.Distinct || f.Aggregate || f.GroupBy
}

// scopeKind is what part of the container a query or read feed reads.
type scopeKind int

const (
	scopePartition scopeKind = iota // one logical partition (pk header)
	scopeRange                      // one physical range (range id header)
	scopeCross                      // everything, range by range
)

type queryScope struct {
	kind  scopeKind
	pk    pkValue
	rng   *pkRange // scopeRange, or the range a scopePartition lies in
	label string   // identifies the scope in continuation tokens
}

// resolveScope reads the pk and range headers. Call with c.mu held.
func resolveScope(q *request, c *container) (queryScope, error) {
	if header := q.header(hdrPartitionKey); header != "" {
		pk, err := parsePartitionKeyHeader(header)
		if err != nil {
			return queryScope{}, err
		}
		return queryScope{kind: scopePartition, pk: pk, rng: c.rangeFor(c.epkPosition(pk)), label: "pk:" + pk.canonical}, nil
	}
	if id := q.header(hdrPartitionKeyRangeID); id != "" {
		rng := c.rangeByID(id)
		if rng == nil {
			return queryScope{}, newSubError(http.StatusGone, subStatusRangeGone, msgRangeGone)
		}
		if err := c.splitCompleting(); err != nil {
			return queryScope{}, err
		}
		return queryScope{kind: scopeRange, rng: rng, label: "range:" + id}, nil
	}
	return queryScope{kind: scopeCross, label: "cross"}, nil
}

// checkServable refuses what the gateway cannot serve in this scope. Call
// with c.mu held.
func checkServable(q *request, c *container, scope queryScope, qr *queryRequest) error {
	if scope.kind == scopeCross {
		if err := checkCrossPartition(q, qr); err != nil {
			return err
		}
	}
	return checkOrderByIndex(c, qr.query.OrderBy())
}

// checkCrossPartition applies the gateway's rules for queries with neither
// a partition key nor a range: they must be enabled, and they may only
// filter and project (the rest needs a query plan, queryplan.go).
func checkCrossPartition(q *request, qr *queryRequest) error {
	if !q.flag(hdrEnableCrossPart) {
		return badRequest(msgCrossPartitionDisabled)
	}
	if needsWholeResult(qr.query.Features()) {
		return crossPartitionNotServable(qr)
	}
	return nil
}

// checkOrderByIndex: ORDER BY is served from the index. One property needs
// its path in the range index; two or more, a composite index with the same
// paths in the same order, whose directions are all equal to the query's or
// all inverted (the refusal names it). Call with c.mu held.
func checkOrderByIndex(c *container, order []cosmossql.OrderItem) error {
	switch {
	case len(order) == 1 && !c.index.indexes(order[0].Path):
		return badRequest(msgOrderByNotIndexed)
	case len(order) < 2:
		return nil
	}
	for _, ci := range c.index.composites {
		if compositeServes(ci, order) && !c.building(ci) {
			return nil
		}
	}
	return badRequest("%s Add the composite index (%s) to the indexing policy.", msgNoCompositeIndex, describeOrder(order))
}

func describeOrder(order []cosmossql.OrderItem) string {
	parts := make([]string, len(order))
	for i, item := range order {
		parts[i] = "/" + strings.Join(item.Path, "/") + map[bool]string{false: " ascending", true: " descending"}[item.Descending]
	}
	return strings.Join(parts, ", ")
}

func compositeServes(ci []compositePath, order []cosmossql.OrderItem) bool {
	if len(ci) != len(order) {
		return false
	}
	same, inverted := true, true
	for i, item := range order {
		if !slices.Equal(ci[i].path, item.Path) {
			return false
		}
		if ci[i].descending == item.Descending {
			inverted = false
		} else {
			same = false
		}
	}
	return same || inverted
}

// continuation is the paging state, serialised as the opaque JSON string
// clients echo in x-ms-continuation.
type continuation struct {
	Fingerprint string `json:"fp"`
	// Document-by-document paging: the effective-key span being read
	// (one physical range at a time) and the creation order of the last
	// document evaluated in it.
	Lo    uint64 `json:"lo,omitempty"`
	Hi    uint64 `json:"hi,omitempty"`
	After uint64 `json:"after,omitempty"`
	// Whole-result paging: how many results were already returned.
	Offset int `json:"offset,omitempty"`
}

// fingerprint ties a token to its query, parameters and scope, so a token
// replayed against another query is refused rather than misread.
func fingerprint(text string, params map[string]any, scope queryScope) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", text, encodeJSON(params), scope.label)
	return strconv.FormatUint(h.Sum64(), 16)
}

// continuationScope is the scope a query's continuation is tied to. A
// filter-and-project query of one range resumes by position (the creation
// order of the last document evaluated), which holds in any range inside
// the one it was read from: after a split the service reads a parent
// range's continuation in each of its children, which is how the SDKs go
// on (the Java SDK hands each replacing range the last continuation). So
// its token names the span read, not the range id; checkResumesInRange
// keeps it to that span. Whole-result pages (an offset into one range's
// answer) stay tied to their range.
func continuationScope(scope queryScope, qr *queryRequest) queryScope {
	if scope.kind == scopeRange && !needsWholeResult(qr.query.Features()) {
		scope.label = "range"
	}
	return scope
}

// checkResumesInRange refuses a range query's continuation read from a
// span that does not hold the range: another range's, not its parent's.
func checkResumesInRange(scope queryScope, tok continuation, resumed bool) error {
	if !resumed || scope.kind != scopeRange || tok.Offset != 0 {
		return nil
	}
	if tok.Lo > scope.rng.lo || tok.Hi < scope.rng.hi {
		return badRequest("The continuation token was read from another partition key range than %s or its parent.", scope.rng.id)
	}
	return nil
}

func parseContinuation(raw, fp string) (continuation, bool, error) {
	if raw == "" {
		return continuation{}, false, nil
	}
	var tok continuation
	if err := json.Unmarshal([]byte(raw), &tok); err != nil || tok.Fingerprint != fp {
		return continuation{}, false, badRequest("The continuation token %q is malformed or belongs to another query.", raw)
	}
	return tok, true, nil
}

func (tok continuation) String() string { return string(encodeJSON(tok)) }

// pageLimits reads x-ms-max-item-count: default 100, -1 for no count limit.
func pageLimits(q *request) (int, error) {
	raw := strings.TrimSpace(q.header(hdrMaxItemCount))
	if raw == "" {
		return defaultMaxItemCount, nil
	}
	n, err := strconv.Atoi(raw)
	switch {
	case err != nil || n < -1:
		return 0, badRequest("x-ms-max-item-count must be a positive integer or -1, got %q.", raw)
	case n == -1:
		return 0, nil // no count limit; maxPageBytes still applies
	case n == 0:
		return defaultMaxItemCount, nil
	}
	return n, nil
}

// page is one answer of a query or read feed.
type page struct {
	results [][]byte // encoded results
	bytes   int
	scanned int // documents evaluated: handed over by the index, or scanned
	walked  int // documents this fake evaluated to serve it (valueindex.go)
	next    *continuation
	rng     *pkRange // the range read, whose session position the page carries
}

func (p *page) full(maxItems int) bool {
	return (maxItems > 0 && len(p.results) >= maxItems) || p.bytes >= maxPageBytes
}

func (p *page) add(encoded []byte) {
	p.results = append(p.results, encoded)
	p.bytes += len(encoded)
}

// queryItems serves POST .../docs with a query.
func (s *Server) queryItems(q *request) (*result, error) {
	qr, err := parseQueryRequest(q)
	if err != nil {
		return nil, err
	}
	maxItems, err := pageLimits(q)
	if err != nil {
		return nil, err
	}
	view, err := s.newReadView(q)
	if err != nil {
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
	if err := checkServable(q, c, scope, qr); err != nil {
		return nil, err
	}
	fp := fingerprint(qr.text, qr.params, continuationScope(scope, qr))
	tok, resumed, err := parseContinuation(q.header(hdrContinuation), fp)
	if err != nil {
		return nil, err
	}
	if err := checkResumesInRange(scope, tok, resumed); err != nil {
		return nil, err
	}
	s.unindexed.record(c.unindexedFilters(qr.query), qr.text)
	pg, err := s.servePage(c, view, scope, qr, tok, resumed, maxItems)
	if err != nil {
		return nil, err
	}
	if pg.next != nil {
		pg.next.Fingerprint = fp
	}
	return s.renderPage(c, scope, pg, true), nil
}

// queryPage computes one page of qr; useIndex lets it walk only what the
// value index lists (valueindex.go). Call with c.mu held.
func (c *container) queryPage(view readView, scope queryScope, qr *queryRequest, tok continuation, resumed bool, maxItems int, useIndex bool) (*page, error) {
	if needsWholeResult(qr.query.Features()) {
		return c.wholeResultPage(view, scope, qr, tok, maxItems, useIndex)
	}
	return c.streamingPage(view, scope, qr, tok, resumed, maxItems, useIndex)
}

// readFeed serves GET .../docs: every document of the scope, paged.
func (s *Server) readFeed(q *request) (*result, error) {
	maxItems, err := pageLimits(q)
	if err != nil {
		return nil, err
	}
	view, err := s.newReadView(q)
	if err != nil {
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
	fp := fingerprint("", nil, scope)
	tok, resumed, err := parseContinuation(q.header(hdrContinuation), fp)
	if err != nil {
		return nil, err
	}
	pg, err := c.streamingPage(view, scope, nil, tok, resumed, maxItems, false)
	if err != nil {
		return nil, err
	}
	if pg.next != nil {
		pg.next.Fingerprint = fp
	}
	return s.renderPage(c, scope, pg, false), nil
}

// renderPage writes {"_rid","Documents","_count"} and counts the page;
// only queries count as cross-partition queries.
func (s *Server) renderPage(c *container, scope queryScope, pg *page, isQuery bool) *result {
	var body bytes.Buffer
	body.WriteString(`{"_rid":`)
	body.Write(encodeJSON(c.rid))
	body.WriteString(`,"Documents":[`)
	body.Write(bytes.Join(pg.results, []byte(",")))
	body.WriteString(`],"_count":`)
	body.WriteString(strconv.Itoa(len(pg.results)))
	body.WriteString("}")

	h := http.Header{}
	h.Set(hdrItemCount, strconv.Itoa(len(pg.results)))
	if pg.next != nil {
		h.Set(hdrContinuation, pg.next.String())
	}
	s.counters.query(pg.scanned, len(pg.results), isQuery && scope.kind == scopeCross)
	s.counters.walked(pg.walked)
	return &result{
		status: http.StatusOK, body: body.Bytes(), header: h,
		charge:  queryCharge(pg.scanned, pg.bytes),
		session: sessionToken(pg.rng.id, pg.rng.lsn), lsn: pg.rng.lsn,
	}
}

// docsIn lists the documents of the scope whose effective key lies in
// [lo, hi) (a partition scope ignores the span), in creation order, as
// view sees them. Call with c.mu held.
func (c *container) docsIn(view readView, scope queryScope, lo, hi uint64) []*document {
	var docs []*document
	collect := func(p *logicalPartition) {
		r := c.rangeFor(p.epk)
		for _, d := range p.docs {
			if v := view.version(d, r); v != nil {
				docs = append(docs, v)
			}
		}
		for _, g := range p.ghosts {
			if v := view.version(g, r); v != nil {
				docs = append(docs, v)
			}
		}
	}
	if scope.kind == scopePartition {
		if p := c.partitions[scope.pk.canonical]; p != nil {
			collect(p)
		}
	} else {
		for _, p := range c.partitions {
			if p.epk >= lo && p.epk < hi {
				collect(p)
			}
		}
	}
	slices.SortFunc(docs, func(a, b *document) int { return compareUint(a.seq, b.seq) })
	return docs
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// span is the effective-key span a streaming page reads: the token's, or
// the scope's first. A cross-partition scan reads one physical range per
// page, as the gateway does; the token keeps the span's bounds, so a split
// between pages neither skips nor repeats documents.
func (c *container) span(scope queryScope, tok continuation, resumed bool) (lo, hi uint64, rng *pkRange) {
	switch {
	case scope.kind == scopePartition:
		return 0, c.partitionKey.epkSpaceEnd(), scope.rng
	case scope.kind == scopeRange:
		return scope.rng.lo, scope.rng.hi, scope.rng
	case resumed:
		return tok.Lo, tok.Hi, c.rangeFor(tok.Lo)
	}
	first := c.ranges[0]
	return first.lo, first.hi, first
}

// nextSpan is the first current range at or after hi, if any.
func (c *container) nextSpan(hi uint64) (*pkRange, bool) {
	for _, r := range c.ranges {
		if r.lo >= hi {
			return r, true
		}
	}
	return nil, false
}

// streamingPage pages a filter-and-project query (or a read feed, qr ==
// nil) document by document: the documents after the token's position are
// evaluated in creation order until the page is full. A walk the value
// index narrowed (useIndex) ends its page where the whole walk would.
func (c *container) streamingPage(view readView, scope queryScope, qr *queryRequest, tok continuation, resumed bool, maxItems int, useIndex bool) (*page, error) {
	lo, hi, rng := c.span(scope, tok, resumed)
	if err := view.checkReachable(rng); err != nil {
		return nil, err
	}
	use, err := c.planIndexUse(qr)
	if err != nil {
		return nil, err
	}
	pg := &page{rng: rng}
	var matched []*document
	matchedBytes := 0 // of the stored documents: an upper bound of the projection
	full := func() bool {
		return (maxItems > 0 && len(matched) >= maxItems) || matchedBytes >= maxPageBytes
	}
	var last uint64
	exhausted := true
	docs, narrowed := c.docsToWalk(view, scope, lo, hi, use, useIndex)
	for _, d := range docs {
		if d.seq <= tok.After {
			continue
		}
		if full() {
			exhausted = false
			break
		}
		last = d.seq
		pg.walked++
		if !use.handsOver(d) {
			continue
		}
		pg.scanned++
		ok, err := matchesQuery(qr, d)
		if err != nil {
			return nil, err
		}
		if ok {
			matched = append(matched, d)
			matchedBytes += len(d.raw)
		}
	}
	if exhausted && narrowed && full() && c.anyAfter(view, scope, lo, hi, last) {
		exhausted = false
	}
	results, err := project(qr, matched)
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		pg.add(r)
	}
	switch {
	case !exhausted:
		pg.next = &continuation{Lo: lo, Hi: hi, After: last}
	case scope.kind == scopeCross:
		if r, ok := c.nextSpan(hi); ok {
			pg.next = &continuation{Lo: r.lo, Hi: r.hi}
		}
	}
	return pg, nil
}

func matchesQuery(qr *queryRequest, d *document) (bool, error) {
	if qr == nil {
		return true, nil
	}
	ok, err := qr.query.Matches(d.body, qr.params)
	if err != nil {
		return false, badRequest("The query could not be evaluated: %v", err)
	}
	return ok, nil
}

// project applies the SELECT list to the matched documents (a read feed
// returns them as stored).
func project(qr *queryRequest, docs []*document) ([][]byte, error) {
	out := make([][]byte, 0, len(docs))
	if qr == nil {
		for _, d := range docs {
			out = append(out, d.raw)
		}
		return out, nil
	}
	bodies := make([]map[string]any, len(docs))
	for i, d := range docs {
		bodies[i] = d.body
	}
	results, err := qr.query.Run(bodies, qr.params)
	if err != nil {
		return nil, badRequest("The query could not be evaluated: %v", err)
	}
	for _, r := range results {
		out = append(out, encodeJSON(r))
	}
	return out, nil
}

// wholeResultPage serves ORDER BY, TOP, OFFSET, DISTINCT and aggregates
// (allowed in one partition or one range): the whole result is computed and
// paged by position; each page is charged for the documents the index
// walks to produce it (queryindex.go).
// useIndex lets it run on what the value index lists (valueindex.go).
func (c *container) wholeResultPage(view readView, scope queryScope, qr *queryRequest, tok continuation, maxItems int, useIndex bool) (*page, error) {
	if err := view.checkReachable(scope.rng); err != nil {
		return nil, err
	}
	lo, hi := uint64(0), c.partitionKey.epkSpaceEnd()
	if scope.kind == scopeRange {
		lo, hi = scope.rng.lo, scope.rng.hi
	}
	use, useErr := c.planIndexUse(qr)
	docs, _ := c.docsToWalk(view, scope, lo, hi, use, useIndex && useErr == nil)
	bodies := make([]map[string]any, len(docs))
	for i, d := range docs {
		bodies[i] = d.body
	}
	results, err := qr.query.Run(bodies, qr.params)
	if err != nil {
		return nil, badRequest("The query could not be evaluated: %v", err)
	}
	pg := &page{rng: scope.rng, walked: len(docs)}
	i := tok.Offset
	for ; i < len(results) && !pg.full(maxItems); i++ {
		pg.add(encodeJSON(results[i]))
	}
	if i < len(results) {
		pg.next = &continuation{Offset: i}
	}
	if useErr != nil {
		return nil, useErr
	}
	if pg.scanned, err = use.evaluatedFor(docs, tok.Offset, i, pg.next == nil); err != nil {
		return nil, err
	}
	return pg, nil
}

// runMetadataQuery filters database or container resources by a query's
// WHERE clause (the SDK's database and container query pagers).
func runMetadataQuery(q *request, resources []map[string]any) ([]map[string]any, error) {
	qr, err := parseQueryRequest(q)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, r := range resources {
		decoded, _ := decodeJSON(encodeJSON(r)) // numbers as json.Number, as the engine expects
		ok, err := qr.query.Matches(decoded.(map[string]any), qr.params)
		if err != nil {
			return nil, badRequest("The query could not be evaluated: %v", err)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}
