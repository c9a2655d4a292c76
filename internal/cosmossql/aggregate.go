package cosmossql

// aggregateRows computes the single result row of an aggregate query. Over
// no input COUNT and SUM give 0 while MIN, MAX and AVG are undefined, so
// SELECT VALUE MAX(...) returns no row and MAX(...) AS m returns {}.
func (q *Query) aggregateRows(rows []map[string]any, bound map[string]any) []any {
	if q.selectValue != nil {
		v := q.selectValue.eval(&env{params: bound, aggregates: computeAggregates(q.selectValue, rows, bound)})
		if isUndefined(v) {
			return []any{}
		}
		return []any{v}
	}
	out := make(map[string]any, len(q.items))
	for _, item := range q.items {
		if v := aggregate(item.expr.(*aggregateExpr), rows, bound); !isUndefined(v) {
			out[item.name] = v
		}
	}
	return []any{out}
}

// computeAggregates folds every aggregate of a SELECT VALUE expression (one,
// or several inside constructors) over rows.
func computeAggregates(root expr, rows []map[string]any, bound map[string]any) map[*aggregateExpr]any {
	computed := map[*aggregateExpr]any{}
	walk(root, func(e expr) bool {
		if agg, ok := e.(*aggregateExpr); ok {
			computed[agg] = aggregate(agg, rows, bound)
			return false
		}
		return true
	})
	return computed
}

// aggregate evaluates the argument on each row, skipping undefined values
// as Cosmos does, and folds the rest.
func aggregate(agg *aggregateExpr, rows []map[string]any, bound map[string]any) any {
	var values []any
	for _, doc := range rows {
		if v := agg.arg.eval(&env{root: doc, params: bound}); !isUndefined(v) {
			values = append(values, v)
		}
	}
	switch agg.name {
	case "COUNT":
		return makeNumber(float64(len(values)))
	case "SUM":
		return sum(values)
	case "AVG":
		return average(values)
	case "MIN":
		return extreme(values, -1)
	default: // MAX
		return extreme(values, 1)
	}
}

// sum is undefined as soon as one value is not a number (string, boolean,
// null, ...), per the SUM reference page.
func sum(values []any) any {
	total := 0.0
	for _, v := range values {
		if kindOf(v) != kindNumber {
			return undefinedValue{}
		}
		n, _ := numberOf(v)
		total += n
	}
	return makeNumber(total)
}

func average(values []any) any {
	if len(values) == 0 {
		return undefinedValue{}
	}
	total := sum(values)
	if isUndefined(total) {
		return total
	}
	n, _ := numberOf(total)
	return makeNumber(n / float64(len(values)))
}

// extreme is MIN (sign -1) or MAX (sign 1). The MAX reference page allows
// numbers, strings, booleans and null, ordered null < boolean < number <
// string across types; an array or object makes the result undefined.
func extreme(values []any, sign int) any {
	var best any = undefinedValue{}
	for _, v := range values {
		if k := kindOf(v); k == kindArray || k == kindObject {
			return undefinedValue{}
		}
		if isUndefined(best) || orderCompare(v, best)*sign > 0 {
			best = v
		}
	}
	return best
}
