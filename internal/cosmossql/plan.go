package cosmossql

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// OrderByFilterPlaceholder is where a client running a rewritten ORDER BY
// query puts its resume filter (or "true"), as the SDKs expect the
// gateway's rewritten queries to carry it.
const OrderByFilterPlaceholder = "{documentdb-formattableorderbyquery-filter}"

// PartitionedPlan is what a gateway's query plan tells a client that runs a
// query range by range and merges the answers itself: the query each range
// runs (RewrittenQuery, empty when the query runs as sent) and what the
// client does with the answers (merge on OrderBy, fold Aggregates, drop
// duplicates, cut the Offset/Limit/Top window). Names are the wire's.
type PartitionedPlan struct {
	DistinctType       string   // "None", "Ordered" or "Unordered"
	Top                *int     // TOP, resolved
	Offset, Limit      *int     // OFFSET and LIMIT, resolved
	OrderBy            []string // "Ascending" / "Descending", per term
	OrderByExpressions []string // each term as written
	Aggregates         []string // "Count", "Sum", "Min", "Max", "Average"
	HasSelectValue     bool
	RewrittenQuery     string
}

// UnsupportedPlanError names a query feature the range-by-range execution
// of this package does not support.
type UnsupportedPlanError struct{ Feature string }

func (e *UnsupportedPlanError) Error() string {
	return e.Feature + " is not supported in cross-partition query plans"
}

// PartitionedPlan plans the query for range-by-range execution. ORDER BY is
// rewritten, as the gateway does, to project each range's rows as
// {_rid, orderByItems: [{item: key}...], payload}; a VALUE aggregate to
// [{"item": partial}] (AVG as sum and count, MIN and MAX with their count);
// OFFSET n LIMIT m to OFFSET 0 LIMIT n+m, the window being the client's.
func (q *Query) PartitionedPlan(params map[string]any) (PartitionedPlan, error) {
	if err := q.checkPlannable(); err != nil {
		return PartitionedPlan{}, err
	}
	plan := PartitionedPlan{DistinctType: "None", HasSelectValue: q.selectValue != nil}
	if err := q.resolvePlanWindow(&plan, params); err != nil {
		return PartitionedPlan{}, err
	}
	switch {
	case q.aggregate:
		agg := q.selectValue.(*aggregateExpr)
		plan.Aggregates = []string{aggregateWireName(agg.name)}
		plan.RewrittenQuery = q.rebuild(plan, "VALUE [{\"item\": "+partialAggregate(agg)+"}]", false, q.source.where, "", "")
	case len(q.orderBy) > 0:
		q.planOrderBy(&plan)
	case plan.Offset != nil:
		plan.RewrittenQuery = q.rebuild(plan, q.selectionText(), q.distinct, q.source.where, "", q.rangeWindow(plan))
	}
	if q.distinct && len(q.orderBy) == 0 {
		plan.DistinctType = "Unordered"
	}
	return plan, nil
}

// checkPlannable refuses what the merge side of this package cannot do.
func (q *Query) checkPlannable() error {
	switch {
	case len(q.groupBy) > 0:
		return &UnsupportedPlanError{Feature: "GROUP BY"}
	case !q.aggregate:
		return nil
	case q.selectValue == nil:
		return &UnsupportedPlanError{Feature: "aggregates without SELECT VALUE"}
	case q.top != nil || q.offset != nil || q.distinct || len(q.orderBy) > 0:
		return &UnsupportedPlanError{Feature: "aggregates with TOP, OFFSET, DISTINCT or ORDER BY"}
	}
	if _, ok := q.selectValue.(*aggregateExpr); !ok {
		return &UnsupportedPlanError{Feature: "aggregates inside SELECT VALUE expressions"}
	}
	return nil
}

// resolvePlanWindow resolves TOP, OFFSET and LIMIT. Only their parameters
// are needed: the others are the ranges' business.
func (q *Query) resolvePlanWindow(plan *PartitionedPlan, params map[string]any) error {
	windowOnly := &Query{top: q.top, offset: q.offset, limit: q.limit}
	windowOnly.params = windowOnly.collectParameters()
	bound, err := windowOnly.bindParameters(params)
	if err != nil {
		return err
	}
	if q.top != nil {
		top, err := q.top.resolve("TOP", bound)
		if err != nil {
			return err
		}
		plan.Top = &top
	}
	if q.offset != nil {
		offset, err := q.offset.resolve("OFFSET", bound)
		if err != nil {
			return err
		}
		limit, err := q.limit.resolve("LIMIT", bound)
		if err != nil {
			return err
		}
		plan.Offset, plan.Limit = &offset, &limit
	}
	return nil
}

// planOrderBy rewrites an ORDER BY query. With DISTINCT the _rid is left
// out, or no two rows would be duplicates.
func (q *Query) planOrderBy(plan *PartitionedPlan) {
	items := make([]string, len(q.orderBy))
	for i, t := range q.orderBy {
		items[i] = `{"item": ` + t.text + `}`
		plan.OrderByExpressions = append(plan.OrderByExpressions, t.text)
		plan.OrderBy = append(plan.OrderBy, map[bool]string{false: "Ascending", true: "Descending"}[t.descending])
	}
	var selection strings.Builder
	if q.distinct {
		plan.DistinctType = "Ordered"
	} else {
		selection.WriteString(q.alias + "._rid, ")
	}
	fmt.Fprintf(&selection, "[%s] AS orderByItems, %s AS payload", strings.Join(items, ", "), q.payloadText())
	where := "(" + OrderByFilterPlaceholder + ")"
	if q.source.where != "" {
		where = "(" + q.source.where + ") AND " + where
	}
	plan.RewrittenQuery = q.rebuild(*plan, selection.String(), q.distinct, where, q.source.orderBy, q.rangeWindow(*plan))
}

// payloadText is the expression that yields what the original query
// returns for one document.
func (q *Query) payloadText() string {
	switch {
	case q.selectStar:
		return q.alias
	case q.selectValue != nil:
		return q.source.selectValue
	}
	fields := make([]string, len(q.items))
	for i, item := range q.items {
		name, _ := json.Marshal(item.name)
		fields[i] = string(name) + ": " + item.text
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

// selectionText is the original selection, rebuilt from its parts.
func (q *Query) selectionText() string {
	switch {
	case q.selectStar:
		return "*"
	case q.selectValue != nil:
		return "VALUE " + q.source.selectValue
	}
	items := make([]string, len(q.items))
	for i, item := range q.items {
		items[i] = item.text
		if item.alias != "" {
			items[i] += " AS " + item.alias
		}
	}
	return strings.Join(items, ", ")
}

// rangeWindow is what each range returns so that the client can cut the
// window: the first offset+limit rows.
func (q *Query) rangeWindow(plan PartitionedPlan) string {
	if plan.Offset == nil {
		return ""
	}
	return "OFFSET 0 LIMIT " + strconv.Itoa(*plan.Offset+*plan.Limit)
}

// rebuild writes SELECT [DISTINCT] [TOP n] selection FROM ... [WHERE]
// [ORDER BY] [window], with the plan's resolved TOP.
func (q *Query) rebuild(plan PartitionedPlan, selection string, distinct bool, where, orderBy, window string) string {
	parts := []string{"SELECT"}
	if distinct {
		parts = append(parts, "DISTINCT")
	}
	if plan.Top != nil {
		parts = append(parts, "TOP", strconv.Itoa(*plan.Top))
	}
	parts = append(parts, selection, q.source.from)
	if where != "" {
		parts = append(parts, "WHERE", where)
	}
	for _, clause := range []string{orderBy, window} {
		if clause != "" {
			parts = append(parts, clause)
		}
	}
	return strings.Join(parts, " ")
}

// partialAggregate is what one range contributes to the client's fold.
func partialAggregate(agg *aggregateExpr) string {
	arg := agg.argText
	switch agg.name {
	case "AVG":
		return fmt.Sprintf(`{"sum": SUM(%s), "count": COUNT(%s)}`, arg, arg)
	case "MIN":
		return fmt.Sprintf(`{"min": MIN(%s), "count": COUNT(%s)}`, arg, arg)
	case "MAX":
		return fmt.Sprintf(`{"max": MAX(%s), "count": COUNT(%s)}`, arg, arg)
	}
	return agg.name + "(" + arg + ")"
}

func aggregateWireName(name string) string {
	switch name {
	case "COUNT":
		return "Count"
	case "SUM":
		return "Sum"
	case "MIN":
		return "Min"
	case "MAX":
		return "Max"
	}
	return "Average"
}
