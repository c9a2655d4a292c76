package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// QueryParameter binds a query parameter: Name starts with '@'; Value is
// anything encoding/json can encode.
type QueryParameter struct {
	Name  string
	Value any
}

// QueryOptions scope and page a query.
type QueryOptions struct {
	// PartitionKey scopes the query to one logical partition (the pk header).
	// Also filter on the partition key in WHERE: not every server scopes by
	// the header. Without it the query is cross-partition.
	PartitionKey *PartitionKey
	// PartitionKeyRangeID runs the query on one physical range, where ORDER
	// BY, TOP and aggregates are allowed. See QueryItemsPerRange.
	PartitionKeyRangeID string
	// MaxItemCount caps a page; 0 lets the service choose, -1 asks for all.
	MaxItemCount int32
	// ContinuationToken resumes a query where a page left it.
	ContinuationToken string
	// SessionToken is sent as x-ms-session-token instead of the one the
	// client keeps for the container.
	SessionToken string
}

// QueryItemsResponse is one page of results.
type QueryItemsResponse struct {
	Items             []json.RawMessage
	ContinuationToken string // empty on the last page
	RequestCharge     float64
	ActivityID        string
	SessionToken      string
	Attempts          int
}

// QueryResult is every page of a query, concatenated.
type QueryResult struct {
	Items         []json.RawMessage
	RequestCharge float64
	Pages         int
}

const queryItemsOp = "QueryItems"

// QueryItemsPager walks the pages of a query. A page may be empty and still
// have a successor: cross-partition results arrive range by range.
type QueryItemsPager struct {
	cc           *ContainerClient
	base         *request // the first page's request, without continuation
	continuation string
	partitionKey *PartitionKey // a single-partition query reads this key's range
	walk         *rangeWalk    // a query across partitions paged range by range (querywalk.go)
	done         bool
	err          error // invalid input, reported by the first NextPage
}

// NewQueryItemsPager prepares query with params. Input is checked now;
// problems come back from the first NextPage, before anything is sent.
// Each page is one request. Across partitions it carries the session
// tokens of the ranges the client knew of when the pager was made, while
// they fit in 4 KB; past that (a container of some hundreds of ranges) the
// pager reads the ranges one after the other, in key order, each page one
// request to one range with that range's token only, as QueryItems does.
// Such a pager's ContinuationToken is the client's own (the range and the
// service's continuation in it): pass it back in
// QueryOptions.ContinuationToken, with the same query and parameters, to
// resume there; a split of the range being read is followed. A token the
// service gave is passed on as before. A pager that reads range by range
// asks the gateway for the query plan first and refuses, as the gateway
// does across partitions (400/1004), ORDER BY, TOP, DISTINCT and
// aggregates, which each range would answer for itself.
func (cc *ContainerClient) NewQueryItemsPager(query string, params []QueryParameter, o *QueryOptions) *QueryItemsPager {
	var opts QueryOptions
	if o != nil {
		opts = *o
	}
	token := opts.ContinuationToken
	if isWalkToken(token) {
		opts.ContinuationToken = "" // the walk sends its own, per range
	}
	p := &QueryItemsPager{cc: cc, continuation: opts.ContinuationToken, partitionKey: opts.PartitionKey}
	if p.base, p.err = newQueryRequest(cc, query, params, opts); p.err == nil {
		p.walk, p.err = cc.walkFor(p.base, opts, token)
	}
	if p.err == nil && p.walk == nil && opts.PartitionKey == nil && opts.PartitionKeyRangeID == "" {
		// Its pages teach it the tokens of the ranges it reads, which it
		// does not need again; sent, they would outgrow the headers.
		p.base.session.knownRanges = cc.client.sessions.knownRanges(cc.sessionLink())
	}
	return p
}

// walkFor is the range walk a pager follows, if any: the one a token of
// the client's own resumes, or a new one for a query across partitions
// whose compound session token would not fit (queriesRangeByRange).
func (cc *ContainerClient) walkFor(first *request, o QueryOptions, token string) (*rangeWalk, error) {
	fingerprint := queryFingerprint(cc.sessionLink(), first.body)
	if isWalkToken(token) {
		if o.PartitionKey != nil || o.PartitionKeyRangeID != "" {
			return nil, invalid(queryItemsOp, "options", ErrInvalidQueryOptions, "the ContinuationToken is of a query across partitions: it resumes no query of a partition key or range")
		}
		return decodeWalk(token, fingerprint)
	}
	if !cc.queriesRangeByRange(o) {
		return nil, nil
	}
	return startWalk(fingerprint), nil
}

// More reports whether NextPage has a page to fetch.
func (p *QueryItemsPager) More() bool { return !p.done }

// NextPage fetches the next page. After an error from the service the pager
// stays where it was, so calling NextPage again retries that page.
func (p *QueryItemsPager) NextPage(ctx context.Context) (QueryItemsResponse, error) {
	if p.err != nil {
		p.done = true
		return QueryItemsResponse{}, p.err
	}
	if p.done {
		return QueryItemsResponse{}, fmt.Errorf("cdb: %s: no more pages", queryItemsOp)
	}
	if p.walk != nil {
		return p.nextWalkPage(ctx)
	}
	r := *p.base
	r.header = p.base.header.Clone()
	if p.continuation != "" {
		r.header.Set("x-ms-continuation", p.continuation)
	}
	if p.partitionKey != nil {
		r.session = p.cc.pointSession(ctx, *p.partitionKey, r.header)
	}
	resp, err := p.cc.client.send(ctx, &r)
	if err != nil {
		return QueryItemsResponse{}, err
	}
	page, err := queryPage(resp)
	if err != nil {
		return QueryItemsResponse{}, err
	}
	p.continuation = resp.Header.Get("x-ms-continuation")
	p.done = p.continuation == ""
	page.ContinuationToken = p.continuation
	return page, nil
}

// queryPage decodes one page's answer: its documents and what the
// response says of the request; the continuation token is the caller's.
func queryPage(resp *response) (QueryItemsResponse, error) {
	var body struct {
		Documents []json.RawMessage `json:"Documents"`
	}
	if err := decodeJSON(queryItemsOp, resp.Body, &body); err != nil {
		return QueryItemsResponse{}, err
	}
	return QueryItemsResponse{
		Items:         body.Documents,
		RequestCharge: resp.RequestCharge,
		ActivityID:    resp.ActivityID,
		SessionToken:  resp.SessionToken,
		Attempts:      resp.Attempts,
	}, nil
}

// QueryItems runs query to the end, following every continuation (empty
// pages included). A query across partitions whose session token would
// not fit in a request's headers (the client keeps a token per range, and
// a container has thousands) runs range by range, as QueryItemsPerRange
// does, each request carrying its range's token only; its items come
// range by range, in range id order. ORDER BY, TOP, DISTINCT and
// aggregates, which each range would answer for itself, are then refused
// as across partitions (400/1004), from the gateway's query plan.
func (cc *ContainerClient) QueryItems(ctx context.Context, query string, params []QueryParameter, o *QueryOptions) (QueryResult, error) {
	var opts QueryOptions
	if o != nil {
		opts = *o
	}
	if cc.queriesRangeByRange(opts) {
		return cc.queryEveryRange(ctx, query, params, opts)
	}
	var out QueryResult
	pager := cc.NewQueryItemsPager(query, params, o)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return QueryResult{}, err
		}
		out.Items = append(out.Items, page.Items...)
		out.RequestCharge += page.RequestCharge
		out.Pages++
	}
	return out, nil
}

type queryBodyWire struct {
	Query      string               `json:"query"`
	Parameters []queryParameterWire `json:"parameters"`
}

type queryParameterWire struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// newQueryRequest checks the input and builds the request of the first page.
func newQueryRequest(cc *ContainerClient, query string, params []QueryParameter, o QueryOptions) (*request, error) {
	const op = queryItemsOp
	if strings.TrimSpace(query) == "" {
		return nil, invalid(op, "query", ErrInvalidQueryOptions, "empty query")
	}
	wire := queryBodyWire{Query: query, Parameters: make([]queryParameterWire, 0, len(params))}
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		if err := validateParameterName(op, i, p.Name, seen); err != nil {
			return nil, err
		}
		v, err := marshalCompact(p.Value)
		if err != nil {
			return nil, invalid(op, "parameter "+p.Name, ErrInvalidQueryParameter, "value cannot be encoded as JSON: %v", err)
		}
		wire.Parameters = append(wire.Parameters, queryParameterWire{Name: p.Name, Value: v})
	}
	body, err := marshalCompact(wire)
	if err != nil {
		return nil, fmt.Errorf("cdb: %s: encoding the query: %w", op, err)
	}
	h, err := queryHeaders(op, o)
	if err != nil {
		return nil, err
	}
	return &request{
		operation:     op,
		method:        http.MethodPost,
		ref:           documentsFeedRef(cc.databaseID, cc.id),
		header:        h,
		body:          body,
		contentType:   "application/query+json",
		idempotent:    true, // a POST, but it reads
		long:          true,
		rangeTargeted: o.PartitionKeyRangeID != "",
		session:       cc.querySession(o.PartitionKeyRangeID),
	}, nil
}

func validateParameterName(op string, i int, name string, seen map[string]bool) error {
	switch {
	case !strings.HasPrefix(name, "@") || len(name) < 2:
		return invalid(op, fmt.Sprintf("parameter %d", i), ErrInvalidQueryParameter, "name %q must start with '@' and name something", name)
	case strings.ContainsAny(name[1:], " \t\r\n@,()"):
		return invalid(op, fmt.Sprintf("parameter %d", i), ErrInvalidQueryParameter, "name %q is not an identifier", name)
	case seen[name]:
		return invalid(op, fmt.Sprintf("parameter %d", i), ErrInvalidQueryParameter, "name %q is bound twice", name)
	}
	seen[name] = true
	return nil
}

func queryHeaders(op string, o QueryOptions) (http.Header, error) {
	h := http.Header{}
	// Both: the REST docs name isquery, the Go SDK sends query, and servers
	// route on one or the other.
	h.Set("x-ms-documentdb-isquery", "True")
	h.Set("x-ms-documentdb-query", "True")
	if o.PartitionKey != nil {
		if o.PartitionKeyRangeID != "" {
			return nil, invalid(op, "options", ErrInvalidQueryOptions, "set PartitionKey or PartitionKeyRangeID, not both")
		}
		pkh, err := o.PartitionKey.header(op)
		if err != nil {
			return nil, err
		}
		h.Set("x-ms-documentdb-partitionkey", pkh)
	} else {
		h.Set("x-ms-documentdb-query-enablecrosspartition", "True")
	}
	if o.PartitionKeyRangeID != "" {
		h.Set("x-ms-documentdb-partitionkeyrangeid", o.PartitionKeyRangeID)
	}
	if o.MaxItemCount != 0 {
		if o.MaxItemCount < -1 {
			return nil, invalid(op, "options", ErrInvalidQueryOptions, "MaxItemCount %d: want -1, 0 or a positive count", o.MaxItemCount)
		}
		h.Set("x-ms-max-item-count", strconv.Itoa(int(o.MaxItemCount)))
	}
	if o.ContinuationToken != "" {
		h.Set("x-ms-continuation", o.ContinuationToken)
	}
	if o.SessionToken != "" {
		h.Set("x-ms-session-token", o.SessionToken)
	}
	return h, nil
}

// ---------------------------------------------------------------------------
// Partition key ranges.

// PartitionKeyRange is one physical partition of a container: the effective
// partition key hashes in [MinInclusive, MaxExclusive).
type PartitionKeyRange struct {
	ID           string   `json:"id"`
	MinInclusive string   `json:"minInclusive"`
	MaxExclusive string   `json:"maxExclusive"`
	Parents      []string `json:"parents"` // ranges this one was split or merged from
}

// querySession sends a range-targeted query that range's token (or its
// parent's, after a split, from the cached ranges); any other query the
// compound token.
func (cc *ContainerClient) querySession(rangeID string) sessionUse {
	s := cc.readSession()
	if rangeID == "" {
		return s
	}
	s.rangeID = rangeID
	if r, ok := cc.client.routing.rangeByID(cc.sessionLink(), rangeID); ok {
		s.parents = r.Parents
	}
	return s
}

// ReadPartitionKeyRanges lists the container's partition key ranges, from
// the client's cache unless forceRefresh or not yet read. A list read
// anew also forgets the session tokens of the ranges that are gone.
func (cc *ContainerClient) ReadPartitionKeyRanges(ctx context.Context, forceRefresh bool) ([]PartitionKeyRange, error) {
	ref := pkRangesRef(cc.databaseID, cc.id)
	if !forceRefresh {
		if r, ok := cc.client.routing.get(ref.link); ok {
			return r, nil
		}
	}
	// Tokens learnt while the list is read may be of ranges it predates.
	mark := cc.client.sessions.mark()
	ranges, err := cc.fetchPartitionKeyRanges(ctx, ref)
	if err != nil {
		return nil, err
	}
	if ranges, err = liveRanges(ranges); err != nil {
		return nil, err
	}
	cc.client.routing.put(ref.link, ranges)
	cc.client.sessions.prune(cc.sessionLink(), ranges, mark)
	return ranges, nil
}

// liveRanges leaves out of a range list the ranges another one names as its
// parent: after a split the service may list the split range beside its
// children for a while, and a request to it answers 410. What is left must
// cover the effective partition key space once, from "" to "FF"; a list
// that does not (read in the middle of a change) is refused as retryable,
// for the caller to read again.
func liveRanges(all []PartitionKeyRange) ([]PartitionKeyRange, error) {
	parents := map[string]bool{}
	for _, r := range all {
		for _, p := range r.Parents {
			parents[p] = true
		}
	}
	live := make([]PartitionKeyRange, 0, len(all))
	for _, r := range all {
		if !parents[r.ID] {
			live = append(live, r)
		}
	}
	if err := checkCoverage(live); err != nil {
		return nil, &CosmosError{Operation: "ReadPartitionKeyRanges", StatusCode: http.StatusGone,
			SubStatusCode: SubStatusCompletingSplit, Message: err.Error(), err: err}
	}
	return live, nil
}

// checkCoverage says whether ranges tile the key space: sorted by their
// lower bound, each starts where the one before ends, from "" to "FF".
func checkCoverage(ranges []PartitionKeyRange) error {
	at := ""
	for _, r := range sortedByMin(ranges) {
		if !strings.EqualFold(r.MinInclusive, at) {
			return fmt.Errorf("the partition key ranges listed leave a gap or overlap at %q (range %s starts at %q)", at, r.ID, r.MinInclusive)
		}
		at = r.MaxExclusive
	}
	if !strings.EqualFold(at, "FF") {
		return fmt.Errorf("the partition key ranges listed end at %q, not at the end of the key space", at)
	}
	return nil
}

// sortedByMin is ranges in key order.
func sortedByMin(ranges []PartitionKeyRange) []PartitionKeyRange {
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b PartitionKeyRange) int {
		return strings.Compare(strings.ToUpper(a.MinInclusive), strings.ToUpper(b.MinInclusive))
	})
	return sorted
}

func (cc *ContainerClient) fetchPartitionKeyRanges(ctx context.Context, ref resourceRef) ([]PartitionKeyRange, error) {
	const op = "ReadPartitionKeyRanges"
	var all []PartitionKeyRange
	continuation := ""
	for {
		h := http.Header{}
		if continuation != "" {
			h.Set("x-ms-continuation", continuation)
		}
		resp, err := cc.client.send(ctx, &request{operation: op, method: http.MethodGet, ref: ref, header: h, idempotent: true, long: true})
		if err != nil {
			return nil, err
		}
		var body struct {
			PartitionKeyRanges []PartitionKeyRange `json:"PartitionKeyRanges"`
		}
		if err := decodeJSON(op, resp.Body, &body); err != nil {
			return nil, err
		}
		all = append(all, body.PartitionKeyRanges...)
		if continuation = resp.Header.Get("x-ms-continuation"); continuation == "" {
			break
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("cdb: %s: the service listed no partition key ranges", op)
	}
	return all, nil
}

// maxRangeConcurrency bounds the ranges queried at once: a large container
// has hundreds, and one caller should not open hundreds of connections.
const maxRangeConcurrency = 16

// replanAfterSplit reads the ranges again after some went away, after a
// backoff: a split lists its children, and leaves its parents' requests
// answering 410, over a window; re-planning at once would spin through it.
// Re-plans are bounded by the client's retry budget in time (MaxElapsed).
func (cc *ContainerClient) replanAfterSplit(ctx context.Context, round int, start time.Time) ([]PartitionKeyRange, error) {
	wait := cc.client.backoff(round, 0)
	if time.Since(start)+wait > cc.client.retry.MaxElapsed {
		return nil, &CosmosError{Operation: "QueryItemsPerRange", StatusCode: http.StatusGone, SubStatusCode: SubStatusPartitionKeyRangeGone,
			Message: fmt.Sprintf("partition key ranges kept changing for %s", time.Since(start).Round(time.Millisecond))}
	}
	if err := sleep(ctx, wait); err != nil {
		return nil, err
	}
	for {
		fresh, err := cc.ReadPartitionKeyRanges(ctx, true)
		if err == nil || !retryableError(err) || time.Since(start) > cc.client.retry.MaxElapsed {
			return fresh, err
		}
		round++
		if err := sleep(ctx, cc.client.backoff(round, 0)); err != nil {
			return nil, err
		}
	}
}

// QueryItemsPerRange runs query on every partition key range separately
// (x-ms-documentdb-partitionkeyrangeid), where the gateway allows ORDER BY,
// TOP and aggregates that it refuses across partitions. Results are by
// range id; merging is the caller's. When a range is gone (410: split or
// migration) the ranges are re-read and the query re-run on those that
// replaced it.
func (cc *ContainerClient) QueryItemsPerRange(ctx context.Context, query string, params []QueryParameter, o *QueryOptions) (map[string]QueryResult, error) {
	const op = "QueryItemsPerRange"
	var opts QueryOptions
	if o != nil {
		opts = *o
	}
	if opts.PartitionKey != nil || opts.PartitionKeyRangeID != "" || opts.ContinuationToken != "" {
		return nil, invalid(op, "options", ErrInvalidQueryOptions, "PartitionKey, PartitionKeyRangeID and ContinuationToken do not apply to a per-range query")
	}
	if _, err := newQueryRequest(cc, query, params, opts); err != nil {
		return nil, err // refuse bad input before reading the ranges
	}
	ranges, err := cc.ReadPartitionKeyRanges(ctx, false)
	if err != nil {
		return nil, err
	}
	return cc.queryRangesReplanned(ctx, op, query, params, opts, ranges)
}

// maxCompoundSessionToken is the largest session token a query across
// partitions sends in one request. The gateway refuses a request whose
// line and headers pass 16 KB (400, or 431 on some front ends), and an
// Entra ID token or a continuation takes several of them; a token per
// range is 15 to 40 bytes, so this is a hundred ranges or more.
const maxCompoundSessionToken = 4 << 10

// queriesRangeByRange reports whether a query with options o is one across
// partitions whose compound session token passes maxCompoundSessionToken:
// the SDKs send such a query to each range with that range's token. A
// caller's own token or continuation keeps the query as it is.
func (cc *ContainerClient) queriesRangeByRange(o QueryOptions) bool {
	if o.PartitionKey != nil || o.PartitionKeyRangeID != "" || o.ContinuationToken != "" || o.SessionToken != "" {
		return false
	}
	return !cc.client.sessions.compoundFits(cc.sessionLink(), maxCompoundSessionToken)
}

// queryEveryRange runs a query across partitions on every range, with its
// items in range id order. What only a merge of the ranges' answers could
// serve (ORDER BY, TOP, aggregates...) is refused, as across partitions.
func (cc *ContainerClient) queryEveryRange(ctx context.Context, query string, params []QueryParameter, opts QueryOptions) (QueryResult, error) {
	first, err := newQueryRequest(cc, query, params, opts)
	if err != nil {
		return QueryResult{}, err // refuse bad input before reading the ranges
	}
	if err := cc.refuseUnmergeable(ctx, first.body); err != nil {
		return QueryResult{}, err
	}
	ranges, err := cc.ReadPartitionKeyRanges(ctx, false)
	if err != nil {
		return QueryResult{}, fmt.Errorf("cdb: %s: %w", queryItemsOp, err)
	}
	byRange, err := cc.queryRangesReplanned(ctx, queryItemsOp, query, params, opts, ranges)
	if err != nil {
		return QueryResult{}, err
	}
	return concatByRangeID(byRange), nil
}

// concatByRangeID is every range's result, in range id order.
func concatByRangeID(byRange map[string]QueryResult) QueryResult {
	var out QueryResult
	for _, id := range slices.Sorted(maps.Keys(byRange)) {
		r := byRange[id]
		out.Items = append(out.Items, r.Items...)
		out.RequestCharge += r.RequestCharge
		out.Pages += r.Pages
	}
	return out
}

// QueryItemsForPartitionKeys runs query on the partition key ranges that
// hold keys, one request a range (concurrently), where a cross-partition
// query sends one to every range: a look at a few logical partitions costs
// what they need, however many ranges the container has. The query must
// filter on the keys itself (a range holds other partitions too). One key
// is a single-partition query; on a container the client cannot route by
// partition key, it is a cross-partition query. A range gone meanwhile (a
// split) is replaced as in QueryItemsPerRange. Items come range by range.
func (cc *ContainerClient) QueryItemsForPartitionKeys(ctx context.Context, query string, params []QueryParameter, keys []PartitionKey, o *QueryOptions) (QueryResult, error) {
	const op = "QueryItemsForPartitionKeys"
	var opts QueryOptions
	if o != nil {
		opts = *o
	}
	if opts.PartitionKey != nil || opts.PartitionKeyRangeID != "" || opts.ContinuationToken != "" {
		return QueryResult{}, invalid(op, "options", ErrInvalidQueryOptions, "PartitionKey, PartitionKeyRangeID and ContinuationToken do not apply to a query of several partition keys")
	}
	if _, err := newQueryRequest(cc, query, params, opts); err != nil {
		return QueryResult{}, err // refuse bad input before resolving a range
	}
	switch len(keys) {
	case 0:
		return QueryResult{}, nil
	case 1:
		opts.PartitionKey = &keys[0]
		return cc.QueryItems(ctx, query, params, &opts)
	}
	ranges, routed := cc.rangesHolding(ctx, keys)
	if !routed {
		return cc.QueryItems(ctx, query, params, &opts)
	}
	byRange, err := cc.queryRangesReplanned(ctx, op, query, params, opts, ranges)
	if err != nil {
		return QueryResult{}, err
	}
	return concatByRangeID(byRange), nil
}

// rangesHolding is the live ranges that hold keys, each once; false when a
// key cannot be routed.
func (cc *ContainerClient) rangesHolding(ctx context.Context, keys []PartitionKey) ([]PartitionKeyRange, bool) {
	var ranges []PartitionKeyRange
	for _, k := range keys {
		r, ok := cc.resolveRange(ctx, k)
		if !ok {
			return nil, false
		}
		if !slices.ContainsFunc(ranges, func(x PartitionKeyRange) bool { return x.ID == r.ID }) {
			ranges = append(ranges, r)
		}
	}
	return ranges, true
}

// queryRangesReplanned runs query on each of ranges, and on the ranges that
// replace one found gone, until every part of the key space asked for is
// answered; results by range id.
func (cc *ContainerClient) queryRangesReplanned(ctx context.Context, op, query string, params []QueryParameter, opts QueryOptions, ranges []PartitionKeyRange) (map[string]QueryResult, error) {
	results := make(map[string]QueryResult, len(ranges))
	pending := ranges
	start := time.Now()
	for round := 1; len(pending) > 0; round++ {
		done, gone, err := cc.queryRanges(ctx, op, query, params, opts, pending)
		if err != nil {
			return nil, err
		}
		for id, r := range done {
			results[id] = r
		}
		if len(gone) == 0 {
			break
		}
		fresh, err := cc.replanAfterSplit(ctx, round, start)
		if err != nil {
			return nil, fmt.Errorf("cdb: %s: range %s is gone: %w", op, gone[0].ID, err)
		}
		pending = replacements(gone, fresh)
		if len(pending) == 0 {
			return nil, fmt.Errorf("cdb: %s: range %s is gone and no range replaces it", op, gone[0].ID)
		}
		for _, r := range pending {
			// A replacement that also covers a range already read (a merge)
			// supersedes that range's results.
			for _, parent := range r.Parents {
				delete(results, parent)
			}
			delete(results, r.ID)
		}
	}
	return results, nil
}

// queryRanges queries each range concurrently. A range that is gone is
// reported in gone, not as an error; any other error cancels the rest.
func (cc *ContainerClient) queryRanges(ctx context.Context, op, query string, params []QueryParameter, opts QueryOptions, ranges []PartitionKeyRange) (map[string]QueryResult, []PartitionKeyRange, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res QueryResult
		err error
	}
	outcomes := make([]outcome, len(ranges))
	sem := make(chan struct{}, maxRangeConcurrency)
	var wg sync.WaitGroup
	for i, r := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o := opts
			o.PartitionKeyRangeID = r.ID
			res, err := cc.QueryItems(ctx, query, params, &o)
			if err != nil && !isGoneRangeError(err) {
				cancel()
			}
			outcomes[i] = outcome{res, err}
		}()
	}
	wg.Wait()
	done := make(map[string]QueryResult, len(ranges))
	var gone []PartitionKeyRange
	var firstErr error
	for i, oc := range outcomes {
		switch {
		case oc.err == nil:
			done[ranges[i].ID] = oc.res
		case isGoneRangeError(oc.err):
			gone = append(gone, ranges[i])
		case firstErr == nil || errors.Is(firstErr, context.Canceled):
			// Prefer the cause over the cancellations it triggered.
			firstErr = fmt.Errorf("cdb: %s: range %s: %w", op, ranges[i].ID, oc.err)
		}
	}
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return done, gone, nil
}

func isGoneRangeError(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusGone && isRangeGone(ce.SubStatusCode)
}

// replacements picks from fresh the ranges that replace the gone ones: those
// listing a gone range as parent, those overlapping one when no parent is
// listed, and a gone range that in fact still exists.
func replacements(gone, fresh []PartitionKeyRange) []PartitionKeyRange {
	var out []PartitionKeyRange
	add := func(r PartitionKeyRange) {
		if !slices.ContainsFunc(out, func(x PartitionKeyRange) bool { return x.ID == r.ID }) {
			out = append(out, r)
		}
	}
	for _, g := range gone {
		found := false
		for _, r := range fresh {
			if r.ID == g.ID || slices.Contains(r.Parents, g.ID) {
				add(r)
				found = true
			}
		}
		if found {
			continue
		}
		for _, r := range fresh {
			if overlaps(g, r) {
				add(r)
			}
		}
	}
	return out
}

// overlaps compares effective partition key ranges. Bounds are uppercase hex
// strings, "" the lowest and "FF" the highest, so string order is key order.
func overlaps(a, b PartitionKeyRange) bool {
	return lessBound(a.MinInclusive, b.MaxExclusive) && lessBound(b.MinInclusive, a.MaxExclusive)
}

func lessBound(minInclusive, maxExclusive string) bool {
	if maxExclusive == "" {
		return false
	}
	return strings.ToUpper(minInclusive) < strings.ToUpper(maxExclusive)
}
