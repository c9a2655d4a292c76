package fakecosmos

import (
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Header names, lower-case as on the wire (net/http canonicalises them).
const (
	hdrAuthorization       = "authorization"
	hdrDate                = "x-ms-date"
	hdrVersion             = "x-ms-version"
	hdrActivityID          = "x-ms-activity-id"
	hdrRequestCharge       = "x-ms-request-charge"
	hdrSessionToken        = "x-ms-session-token"
	hdrSubStatus           = "x-ms-substatus"
	hdrLSN                 = "lsn"
	hdrRetryAfterMs        = "x-ms-retry-after-ms"
	hdrPartitionKey        = "x-ms-documentdb-partitionkey"
	hdrPartitionKeyRangeID = "x-ms-documentdb-partitionkeyrangeid"
	hdrIsUpsert            = "x-ms-documentdb-is-upsert"
	hdrIsQuery             = "x-ms-documentdb-isquery"
	hdrQuery               = "x-ms-documentdb-query"
	hdrEnableCrossPart     = "x-ms-documentdb-query-enablecrosspartition"
	hdrIsQueryPlan         = "x-ms-cosmos-is-query-plan-request"
	hdrMaxItemCount        = "x-ms-max-item-count"
	hdrContinuation        = "x-ms-continuation"
	hdrItemCount           = "x-ms-item-count"
	hdrIsBatch             = "x-ms-cosmos-is-batch-request"
	hdrBatchAtomic         = "x-ms-cosmos-batch-atomic"
	hdrPrefer              = "prefer"
	hdrIfMatch             = "if-match"
	hdrIfNoneMatch         = "if-none-match"
	hdrAIM                 = "a-im"
)

// Op names an operation, for the counters and for fault matching.
type Op string

// The operations the gateway serves.
const (
	OpReadAccount            Op = "ReadAccount"
	OpListDatabases          Op = "ListDatabases"
	OpCreateDatabase         Op = "CreateDatabase"
	OpReadDatabase           Op = "ReadDatabase"
	OpDeleteDatabase         Op = "DeleteDatabase"
	OpListContainers         Op = "ListContainers"
	OpCreateContainer        Op = "CreateContainer"
	OpReadContainer          Op = "ReadContainer"
	OpReplaceContainer       Op = "ReplaceContainer"
	OpDeleteContainer        Op = "DeleteContainer"
	OpCreateItem             Op = "CreateItem"
	OpUpsertItem             Op = "UpsertItem"
	OpReadItem               Op = "ReadItem"
	OpReplaceItem            Op = "ReplaceItem"
	OpDeleteItem             Op = "DeleteItem"
	OpPatchItem              Op = "PatchItem"
	OpBatch                  Op = "Batch"
	OpQuery                  Op = "Query"
	OpQueryPlan              Op = "QueryPlan"
	OpReadFeed               Op = "ReadFeed"
	OpChangeFeed             Op = "ChangeFeed"
	OpReadPartitionKeyRanges Op = "ReadPartitionKeyRanges"
	OpListOffers             Op = "ListOffers" // GET /offers, or POST /offers with a query
	OpReadOffer              Op = "ReadOffer"
	// OpUnknown is a request that names no resource or uses a verb the
	// resource does not support; it is still counted.
	OpUnknown Op = "Unknown"
)

type routeKind int

const (
	routeUnknown routeKind = iota
	routeAccount
	routeDatabases
	routeDatabase
	routeContainers
	routeContainer
	routeDocuments
	routeDocument
	routePartitionKeyRanges
	routeOffers
	routeOffer
)

// route is the resource a path addresses, with its ids percent-decoded.
type route struct {
	kind      routeKind
	database  string
	container string
	item      string
}

// parseRoute decodes the escaped path segment by segment, so that an id
// holding an escaped "/" stays one segment (and is then refused as an id).
func parseRoute(escapedPath string) (route, error) {
	trimmed := strings.Trim(escapedPath, "/")
	if trimmed == "" {
		return route{kind: routeAccount}, nil
	}
	raw := strings.Split(trimmed, "/")
	segs := make([]string, len(raw))
	for i, seg := range raw {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return route{}, badRequest("The path segment %q is not correctly escaped.", seg)
		}
		segs[i] = dec
	}
	rt, ok := matchRoute(segs)
	if !ok {
		return route{}, newError(http.StatusNotFound, "Unknown resource path %q.", escapedPath)
	}
	return rt, nil
}

func matchRoute(segs []string) (route, bool) {
	n := len(segs)
	if segs[0] == "offers" {
		return matchOfferRoute(segs)
	}
	if segs[0] != "dbs" {
		return route{}, false
	}
	switch {
	case n == 1:
		return route{kind: routeDatabases}, true
	case n == 2:
		return route{kind: routeDatabase, database: segs[1]}, true
	case segs[2] != "colls":
		return route{}, false
	case n == 3:
		return route{kind: routeContainers, database: segs[1]}, true
	case n == 4:
		return route{kind: routeContainer, database: segs[1], container: segs[3]}, true
	case n == 5 && segs[4] == "docs":
		return route{kind: routeDocuments, database: segs[1], container: segs[3]}, true
	case n == 5 && segs[4] == "pkranges":
		return route{kind: routePartitionKeyRanges, database: segs[1], container: segs[3]}, true
	case n == 6 && segs[4] == "docs":
		return route{kind: routeDocument, database: segs[1], container: segs[3], item: segs[5]}, true
	}
	return route{}, false
}

// matchOfferRoute is /offers and /offers/{rid}: an offer is addressed by
// its rid, kept in item.
func matchOfferRoute(segs []string) (route, bool) {
	switch len(segs) {
	case 1:
		return route{kind: routeOffers}, true
	case 2:
		return route{kind: routeOffer, item: segs[1]}, true
	}
	return route{}, false
}

// resourceType and resourceLink are what the client signed:
// a feed is signed with its parent's link and its own type.
func (rt route) resourceType() string {
	switch rt.kind {
	case routeDatabases, routeDatabase:
		return "dbs"
	case routeContainers, routeContainer:
		return "colls"
	case routeDocuments, routeDocument:
		return "docs"
	case routePartitionKeyRanges:
		return "pkranges"
	case routeOffers, routeOffer:
		return "offers"
	}
	return ""
}

func (rt route) resourceLink() string {
	switch rt.kind {
	case routeDatabase, routeContainers:
		return "dbs/" + rt.database
	case routeContainer, routeDocuments, routePartitionKeyRanges:
		return "dbs/" + rt.database + "/colls/" + rt.container
	case routeDocument:
		return "dbs/" + rt.database + "/colls/" + rt.container + "/docs/" + rt.item
	case routeOffer:
		return strings.ToLower(rt.item) // a rid-based link is signed lower-cased
	}
	return ""
}

// resolveOp names the operation before anything runs, so that refused and
// faulted requests are counted under the operation they attempted.
func resolveOp(rt route, r *http.Request) Op {
	isQuery := isTrue(r.Header.Get(hdrIsQuery)) || isTrue(r.Header.Get(hdrQuery))
	m := r.Method
	switch rt.kind {
	case routeAccount:
		return pick(m == http.MethodGet, OpReadAccount)
	case routeDatabases:
		if m == http.MethodPost && isQuery {
			return OpListDatabases
		}
		return pickMethod(m, map[string]Op{http.MethodGet: OpListDatabases, http.MethodPost: OpCreateDatabase})
	case routeDatabase:
		return pickMethod(m, map[string]Op{http.MethodGet: OpReadDatabase, http.MethodDelete: OpDeleteDatabase})
	case routeContainers:
		if m == http.MethodPost && isQuery {
			return OpListContainers
		}
		return pickMethod(m, map[string]Op{http.MethodGet: OpListContainers, http.MethodPost: OpCreateContainer})
	case routeContainer:
		return pickMethod(m, map[string]Op{http.MethodGet: OpReadContainer, http.MethodPut: OpReplaceContainer, http.MethodDelete: OpDeleteContainer})
	case routeDocuments:
		return documentsFeedOp(r, isQuery)
	case routeDocument:
		return pickMethod(m, map[string]Op{http.MethodGet: OpReadItem, http.MethodPut: OpReplaceItem, http.MethodPatch: OpPatchItem, http.MethodDelete: OpDeleteItem})
	case routePartitionKeyRanges:
		return pick(m == http.MethodGet, OpReadPartitionKeyRanges)
	case routeOffers:
		return pick(m == http.MethodGet || m == http.MethodPost && isQuery, OpListOffers)
	case routeOffer:
		return pick(m == http.MethodGet, OpReadOffer)
	}
	return OpUnknown
}

func documentsFeedOp(r *http.Request, isQuery bool) Op {
	switch {
	case r.Method == http.MethodGet && r.Header.Get(hdrAIM) != "":
		return OpChangeFeed
	case r.Method == http.MethodGet:
		return OpReadFeed
	case r.Method != http.MethodPost:
		return OpUnknown
	case isTrue(r.Header.Get(hdrIsBatch)):
		return OpBatch
	case isTrue(r.Header.Get(hdrIsQueryPlan)):
		return OpQueryPlan
	case isQuery:
		return OpQuery
	case isTrue(r.Header.Get(hdrIsUpsert)):
		return OpUpsertItem
	}
	return OpCreateItem
}

func pick(ok bool, op Op) Op {
	if ok {
		return op
	}
	return OpUnknown
}

func pickMethod(method string, ops map[string]Op) Op {
	if op, ok := ops[method]; ok {
		return op
	}
	return OpUnknown
}

// mediaType is the Content-Type without parameters, lower-cased.
func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}
