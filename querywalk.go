package cdb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A query across partitions whose compound session token would not fit in
// a request's headers is paged range by range: each page is one request to
// one partition key range, in key order, carrying that range's token only
// (as the SDKs send queries). The walk's position is the range being read
// and the service's continuation within it, handed to the caller as a
// continuation token of the client's own.

// walkTokenPrefix starts every continuation token of a range walk; the
// service's own tokens (JSON, or "+RID:...") never do. The version is in
// the prefix so a token of another version is refused by name.
const walkTokenPrefix = "cdbwalk1."

// rangeWalk is where a range-by-range query is: Parts[0] is being read;
// the ranges after the last part are found by key when it is done. There
// is more than one part after a split: the children of a range left
// half-read each resume from its continuation, as the SDKs do.
type rangeWalk struct {
	Query string     `json:"q"` // the fingerprint of the query the token belongs to
	Parts []walkPart `json:"p"`
	// planned: the gateway's plan showed the query mergeable range by
	// range (refuseUnmergeable). A walk that a token resumes was.
	planned bool
}

// walkPart is one range of the walk and the service's continuation in it.
// An empty ID is a range not yet chosen: the live range starting at Min.
type walkPart struct {
	ID           string `json:"r,omitempty"`
	MinInclusive string `json:"min"`
	MaxExclusive string `json:"max,omitempty"`
	Continuation string `json:"c,omitempty"`
}

// startWalk is the walk of the whole key space, from its first range.
func startWalk(fingerprint string) *rangeWalk {
	return &rangeWalk{Query: fingerprint, Parts: []walkPart{{MinInclusive: ""}}}
}

// queryFingerprint ties a walk's token to its container, query and
// parameters, so a token passed to another query is refused, not misread.
// It guards against mistakes, not forgery: a forged token reads no more
// than the query it names could.
func queryFingerprint(container string, body []byte) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s", container, body)
	return strconv.FormatUint(h.Sum64(), 36)
}

func isWalkToken(token string) bool { return strings.HasPrefix(token, "cdbwalk") }

// encode is the walk as the opaque token a page hands out.
func (w *rangeWalk) encode() string {
	raw, err := json.Marshal(w)
	if err != nil {
		panic(fmt.Sprintf("cdb: encoding a query walk: %v", err)) // strings only: cannot fail
	}
	return walkTokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
}

// decodeWalk reads back a token that encode made for the query with
// fingerprint; anything else is refused before a request is sent.
func decodeWalk(token, fingerprint string) (*rangeWalk, error) {
	const field = "options"
	if !strings.HasPrefix(token, walkTokenPrefix) {
		return nil, invalid(queryItemsOp, field, ErrInvalidQueryOptions, "ContinuationToken is of another version of this library's range-by-range queries")
	}
	raw, err := base64.RawURLEncoding.DecodeString(token[len(walkTokenPrefix):])
	if err != nil {
		return nil, invalid(queryItemsOp, field, ErrInvalidQueryOptions, "ContinuationToken is malformed: %v", err)
	}
	var w rangeWalk
	if err := json.Unmarshal(raw, &w); err != nil || len(w.Parts) == 0 {
		return nil, invalid(queryItemsOp, field, ErrInvalidQueryOptions, "ContinuationToken is malformed: not a range walk")
	}
	if w.Query != fingerprint {
		return nil, invalid(queryItemsOp, field, ErrInvalidQueryOptions, "ContinuationToken belongs to another query, container or parameters")
	}
	w.planned = true
	return &w, nil
}

// nextWalkPage reads the next page of the walk: one request to the range
// the walk is in. A range found gone is replaced by the ranges now holding
// its keys, and the page asked of them, within the client's retry budget.
func (p *QueryItemsPager) nextWalkPage(ctx context.Context) (QueryItemsResponse, error) {
	if !p.walk.planned {
		if err := p.cc.refuseUnmergeable(ctx, p.base.body); err != nil {
			return QueryItemsResponse{}, err
		}
		p.walk.planned = true
	}
	start := time.Now()
	for round := 1; ; round++ {
		part, err := p.cc.resolveWalkPart(ctx, p.walk.Parts[0])
		if err != nil {
			return QueryItemsResponse{}, err
		}
		p.walk.Parts[0] = part
		resp, err := p.cc.client.send(ctx, p.walkRequest(part))
		if isGoneRangeError(err) {
			if err := p.replaceGonePart(ctx, round, start); err != nil {
				return QueryItemsResponse{}, err
			}
			continue
		}
		if err != nil {
			return QueryItemsResponse{}, err
		}
		page, err := queryPage(resp)
		if err != nil {
			return QueryItemsResponse{}, err
		}
		p.walk.advance(resp.Header.Get("x-ms-continuation"))
		if p.done = len(p.walk.Parts) == 0; !p.done {
			page.ContinuationToken = p.walk.encode()
		}
		return page, nil
	}
}

// walkRequest is the page's request: the query aimed at the part's range,
// with its continuation there and that range's session token.
func (p *QueryItemsPager) walkRequest(part walkPart) *request {
	r := *p.base
	r.header = p.base.header.Clone()
	r.header.Del("x-ms-continuation")
	r.header.Set("x-ms-documentdb-partitionkeyrangeid", part.ID)
	if part.Continuation != "" {
		r.header.Set("x-ms-continuation", part.Continuation)
	}
	r.rangeTargeted = true
	r.session = p.cc.querySession(part.ID)
	return &r
}

// advance moves the walk past a page whose service continuation is next:
// on in the same range, or to the next part, or to the range after the
// last one; the walk is over after the range ending the key space.
func (w *rangeWalk) advance(next string) {
	if next != "" {
		w.Parts[0].Continuation = next
		return
	}
	done := w.Parts[0]
	w.Parts = w.Parts[1:]
	if len(w.Parts) == 0 && !strings.EqualFold(done.MaxExclusive, "FF") {
		w.Parts = []walkPart{{MinInclusive: done.MaxExclusive}}
	}
}

// resolveWalkPart chooses the range of a part that has none: the live
// range starting where the part does, from the cached list, or from one
// read anew if the cached list has none (it predates a split).
func (cc *ContainerClient) resolveWalkPart(ctx context.Context, part walkPart) (walkPart, error) {
	if part.ID != "" {
		return part, nil
	}
	for _, refresh := range []bool{false, true} {
		ranges, err := cc.ReadPartitionKeyRanges(ctx, refresh)
		if err != nil {
			return walkPart{}, fmt.Errorf("cdb: %s: reading the partition key ranges: %w", queryItemsOp, err)
		}
		if r, ok := rangeStartingAt(ranges, part.MinInclusive); ok {
			return walkPart{ID: r.ID, MinInclusive: r.MinInclusive, MaxExclusive: r.MaxExclusive}, nil
		}
	}
	return walkPart{}, fmt.Errorf("cdb: %s: no partition key range starts at %q, where the query goes on", queryItemsOp, part.MinInclusive)
}

func rangeStartingAt(ranges []PartitionKeyRange, minInclusive string) (PartitionKeyRange, bool) {
	i := slices.IndexFunc(ranges, func(r PartitionKeyRange) bool { return strings.EqualFold(r.MinInclusive, minInclusive) })
	if i < 0 {
		return PartitionKeyRange{}, false
	}
	return ranges[i], true
}

// replaceGonePart puts in the walk, instead of the range it was reading,
// the live ranges that now hold its keys, each resuming from the gone
// range's continuation: after a split the service reads a parent's
// continuation in each child, which is how the SDKs go on (the Java SDK's
// DocumentProducer hands each replacing range the last continuation).
// Ranges reaching outside the gone one's keys (a merge) would repeat items
// already returned, so they end the walk with an error instead.
func (p *QueryItemsPager) replaceGonePart(ctx context.Context, round int, start time.Time) error {
	gone := p.walk.Parts[0]
	fresh, err := p.cc.replanAfterSplit(ctx, round, start)
	if err != nil {
		return fmt.Errorf("cdb: %s: range %s is gone: %w", queryItemsOp, gone.ID, err)
	}
	var children []walkPart
	for _, r := range sortedByMin(fresh) {
		if !overlaps(r, PartitionKeyRange{MinInclusive: gone.MinInclusive, MaxExclusive: gone.MaxExclusive}) {
			continue
		}
		if lessBound(r.MinInclusive, gone.MinInclusive) || lessBound(gone.MaxExclusive, r.MaxExclusive) {
			return fmt.Errorf("cdb: %s: range %s is gone and range %s, which replaces it, also holds keys read before; run the query again", queryItemsOp, gone.ID, r.ID)
		}
		children = append(children, walkPart{ID: r.ID, MinInclusive: r.MinInclusive, MaxExclusive: r.MaxExclusive, Continuation: gone.Continuation})
	}
	if len(children) == 0 {
		return fmt.Errorf("cdb: %s: range %s is gone and no range replaces it", queryItemsOp, gone.ID)
	}
	p.walk.Parts = append(children, p.walk.Parts[1:]...)
	return nil
}

// supportedQueryFeatures is what a query plan request declares, as the
// SDKs do (azcosmos's getQueryPlanFromGateway, the .NET QueryPlanRetriever),
// so that the gateway plans the query instead of refusing it; the plan
// says what the query needs.
const supportedQueryFeatures = "Aggregate, CompositeAggregate, Distinct, GroupBy, MultipleAggregates, MultipleOrderBy, NonValueAggregate, OffsetAndLimit, OrderBy, Top"

// queryInfoWire is what refuseUnmergeable reads of the gateway's query plan
// (PartitionedQueryExecutionInfo).
type queryInfoWire struct {
	QueryInfo struct {
		DistinctType       string   `json:"distinctType"`
		Top                *int     `json:"top"`
		Offset             *int     `json:"offset"`
		Limit              *int     `json:"limit"`
		OrderBy            []string `json:"orderBy"`
		Aggregates         []string `json:"aggregates"`
		GroupByExpressions []string `json:"groupByExpressions"`
	} `json:"queryInfo"`
}

// unmergeable names what in the plan needs the ranges' answers merged.
func (q queryInfoWire) unmergeable() string {
	i := q.QueryInfo
	switch {
	case len(i.OrderBy) > 0:
		return "ORDER BY"
	case i.Top != nil:
		return "TOP"
	case i.Offset != nil || i.Limit != nil:
		return "OFFSET LIMIT"
	case len(i.Aggregates) > 0:
		return "an aggregate"
	case len(i.GroupByExpressions) > 0:
		return "GROUP BY"
	case i.DistinctType != "" && i.DistinctType != "None":
		return "DISTINCT"
	}
	return ""
}

// refuseUnmergeable asks the gateway for the query's plan before a walk's
// first page. Each range serves ORDER BY, TOP, aggregates and DISTINCT of
// its own documents, so a walk would return per-range answers where one
// request across partitions is refused (400/1004); the walk is refused the
// same way. The plan request reads no range and carries no session token.
func (cc *ContainerClient) refuseUnmergeable(ctx context.Context, body []byte) error {
	h := http.Header{}
	h.Set("x-ms-documentdb-isquery", "True")
	h.Set("x-ms-documentdb-query", "True")
	h.Set("x-ms-documentdb-query-enablecrosspartition", "True")
	h.Set("x-ms-cosmos-is-query-plan-request", "True")
	h.Set("x-ms-cosmos-supported-query-features", supportedQueryFeatures)
	h.Set("x-ms-cosmos-query-version", "1.0") // as the .NET and Python SDKs send it
	resp, err := cc.client.send(ctx, &request{
		operation: queryItemsOp, method: http.MethodPost, ref: documentsFeedRef(cc.databaseID, cc.id),
		header: h, body: body, contentType: "application/query+json", idempotent: true, long: true,
	})
	if err != nil {
		return fmt.Errorf("cdb: %s: reading the query plan: %w", queryItemsOp, err)
	}
	var plan queryInfoWire
	if err := decodeJSON(queryItemsOp, resp.Body, &plan); err != nil {
		return err
	}
	if feature := plan.unmergeable(); feature != "" {
		return &CosmosError{Operation: queryItemsOp, StatusCode: http.StatusBadRequest, SubStatusCode: SubStatusCrossPartitionQueryNotServable,
			Message: fmt.Sprintf("the query has %s, which a query across partitions cannot serve (the gateway refuses it, and it is run range by range here): query each range (QueryItemsPerRange) and merge, or query one partition key", feature)}
	}
	return nil
}
