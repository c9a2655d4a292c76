package fakecosmos

import (
	"errors"
	"net/http"
	"strings"

	"github.com/duroxide-go/cdb/internal/cosmossql"
)

const hdrSupportedQueryFeatures = "x-ms-cosmos-supported-query-features"

// queryPlan is the gateway's answer to a query plan request
// (PartitionedQueryExecutionInfo, version 2), as the SDKs read it.
type queryPlan struct {
	Version     int          `json:"partitionedQueryExecutionInfoVersion"`
	QueryInfo   queryInfo    `json:"queryInfo"`
	QueryRanges []queryRange `json:"queryRanges"`
}

type queryInfo struct {
	DistinctType                string            `json:"distinctType"`
	Top                         *int              `json:"top"`
	Offset                      *int              `json:"offset"`
	Limit                       *int              `json:"limit"`
	OrderBy                     []string          `json:"orderBy"`
	OrderByExpressions          []string          `json:"orderByExpressions"`
	GroupByExpressions          []string          `json:"groupByExpressions"`
	GroupByAliases              []string          `json:"groupByAliases"`
	Aggregates                  []string          `json:"aggregates"`
	GroupByAliasToAggregateType map[string]string `json:"groupByAliasToAggregateType"`
	RewrittenQuery              string            `json:"rewrittenQuery"`
	HasSelectValue              bool              `json:"hasSelectValue"`
	DCountInfo                  any               `json:"dCountInfo"`
	HasNonStreamingOrderBy      bool              `json:"hasNonStreamingOrderBy"`
}

// queryRange is an effective-partition-key range the query must read. The
// fake always answers the whole space: a client intersects it with the
// ranges it knows, and every range's answer is filtered anyway.
type queryRange struct {
	Min            string `json:"min"`
	Max            string `json:"max"`
	IsMinInclusive bool   `json:"isMinInclusive"`
	IsMaxInclusive bool   `json:"isMaxInclusive"`
}

// serveQueryPlan answers POST .../docs with x-ms-cosmos-is-query-plan-request.
// The answer reads no range, so it carries no session token: a client
// would file one under the container and send it back on its reads.
func (s *Server) serveQueryPlan(q *request) (*result, error) {
	qr, err := parseQueryRequest(q)
	if err != nil {
		return nil, err
	}
	if _, err := s.lookupContainer(q.route); err != nil {
		return nil, err
	}
	if err := checkClientSupports(q.header(hdrSupportedQueryFeatures), qr.query); err != nil {
		return nil, err
	}
	plan, err := buildQueryPlan(qr)
	if err != nil {
		return nil, err
	}
	return &result{status: http.StatusOK, body: encodeJSON(plan), charge: chargeMetadata}, nil
}

// buildQueryPlan plans qr for range-by-range execution, or refuses, naming
// what the fake cannot plan.
func buildQueryPlan(qr *queryRequest) (*queryPlan, error) {
	p, err := qr.query.PartitionedPlan(qr.params)
	if err != nil {
		var unsupported *cosmossql.UnsupportedPlanError
		if errors.As(err, &unsupported) {
			return nil, badRequest("%s is not supported by this fake in cross-partition queries; query per partition key or per range instead.", unsupported.Feature)
		}
		return nil, badRequest("The query could not be planned: %v", err)
	}
	return &queryPlan{
		Version: 2,
		QueryInfo: queryInfo{
			DistinctType:                p.DistinctType,
			Top:                         p.Top,
			Offset:                      p.Offset,
			Limit:                       p.Limit,
			OrderBy:                     nonNil(p.OrderBy),
			OrderByExpressions:          nonNil(p.OrderByExpressions),
			GroupByExpressions:          []string{},
			GroupByAliases:              []string{},
			Aggregates:                  nonNil(p.Aggregates),
			GroupByAliasToAggregateType: map[string]string{},
			RewrittenQuery:              p.RewrittenQuery,
			HasSelectValue:              p.HasSelectValue,
		},
		QueryRanges: []queryRange{{Min: "", Max: "FF", IsMinInclusive: true, IsMaxInclusive: false}},
	}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// requiredQueryFeatures names, as the SDKs' QueryFeature enum does, what a
// client must be able to do to merge the query's range answers.
func requiredQueryFeatures(query *cosmossql.Query) []string {
	f := query.Features()
	var need []string
	add := func(cond bool, name string) {
		if cond {
			need = append(need, name)
		}
	}
	add(len(query.OrderBy()) == 1, "OrderBy")
	add(len(query.OrderBy()) > 1, "MultipleOrderBy")
	add(f.Top, "Top")
	add(f.Offset, "OffsetAndLimit")
	add(f.Distinct, "Distinct")
	add(f.Aggregate && f.Value, "Aggregate")
	add(f.Aggregate && !f.Value, "NonValueAggregate")
	add(f.GroupBy, "GroupBy")
	return need
}

// checkClientSupports refuses, as the gateway does, a query whose merge
// needs a feature the client did not declare in
// x-ms-cosmos-supported-query-features (absent: none).
func checkClientSupports(header string, query *cosmossql.Query) error {
	supported := map[string]bool{}
	for _, name := range strings.Split(header, ",") {
		supported[strings.TrimSpace(name)] = true
	}
	for _, need := range requiredQueryFeatures(query) {
		if !supported[need] {
			return badRequest("Query contains 1 or more unsupported features. Upgrade your SDK to a version that does support the requested features: Query contained %s, which the calling client does not support.", need)
		}
	}
	return nil
}

// crossPartitionNotServable is the gateway's first-chance 1004 refusal. It
// carries the query plan in additionalErrorInfo, which is what tells the
// SDKs to fetch a plan and run the query range by range. A query no plan
// can serve is refused by name instead.
func crossPartitionNotServable(qr *queryRequest) error {
	plan, err := buildQueryPlan(qr)
	if err != nil {
		return err
	}
	e := newSubError(http.StatusBadRequest, subStatusCrossPartitionServing, msgCrossPartitionNotServable)
	e.additionalErrorInfo = string(encodeJSON(plan))
	return e
}
