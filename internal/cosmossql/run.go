package cosmossql

import (
	"fmt"
	"sort"
	"strings"
)

// Run evaluates the query over docs and returns the complete result in
// order: WHERE, ORDER BY, projection, DISTINCT, OFFSET/LIMIT and TOP, or the
// single aggregate row. params maps parameter names, with or without their
// "@", to values; every referenced parameter must be present.
func (q *Query) Run(docs []map[string]any, params map[string]any) ([]any, error) {
	if len(q.groupBy) > 0 {
		return nil, &EvalError{Msg: "GROUP BY is not supported by this fake"}
	}
	bound, err := q.bindParameters(params)
	if err != nil {
		return nil, err
	}
	window, err := q.resultWindow(bound)
	if err != nil {
		return nil, err
	}
	rows := q.filter(docs, bound)
	var results []any
	if q.aggregate {
		results = q.aggregateRows(rows, bound)
	} else {
		q.sortRows(rows, bound)
		results = q.projectRows(rows, bound)
		if q.distinct {
			results = distinct(results)
		}
	}
	return window.apply(results), nil
}

// Matches reports whether doc satisfies the WHERE clause (true when there is
// none). The fake uses it for PATCH conditions and for scanning.
func (q *Query) Matches(doc map[string]any, params map[string]any) (bool, error) {
	bound, err := q.bindParameters(params)
	if err != nil {
		return false, err
	}
	return q.matches(doc, bound), nil
}

func (q *Query) matches(doc map[string]any, bound map[string]any) bool {
	if q.where == nil {
		return true
	}
	// Only exactly true keeps a document: false and undefined both drop it.
	return q.where.eval(&env{root: doc, params: bound}) == true
}

// bindParameters checks that every referenced parameter was supplied and
// normalizes the values; unreferenced parameters are ignored, as Cosmos does.
func (q *Query) bindParameters(params map[string]any) (map[string]any, error) {
	bound := make(map[string]any, len(q.params))
	for _, name := range q.params {
		v, ok := params[name]
		if !ok {
			v, ok = params[strings.TrimPrefix(name, "@")]
		}
		if !ok {
			return nil, &EvalError{Param: name, Msg: fmt.Sprintf("parameter %s is used by the query but was not supplied", name)}
		}
		n, err := normalizeValue(v)
		if err != nil {
			return nil, &EvalError{Param: name, Msg: fmt.Sprintf("parameter %s: %v", name, err)}
		}
		bound[name] = n
	}
	return bound, nil
}

func (q *Query) filter(docs []map[string]any, bound map[string]any) []map[string]any {
	var rows []map[string]any
	for _, doc := range docs {
		if q.matches(doc, bound) {
			rows = append(rows, doc)
		}
	}
	return rows
}

// sortRows orders rows by the ORDER BY terms with the Cosmos cross-type
// order. Rows whose key is undefined are kept and sort lowest: with the
// default (consistent, /*) indexing policy Cosmos returns items whose ORDER BY
// property is missing. The sort is stable, so ties keep input order.
func (q *Query) sortRows(rows []map[string]any, bound map[string]any) {
	if len(q.orderBy) == 0 {
		return
	}
	type keyedRow struct {
		doc map[string]any
		key []any
	}
	keyed := make([]keyedRow, len(rows))
	for i, doc := range rows {
		key := make([]any, len(q.orderBy))
		for j, t := range q.orderBy {
			key[j] = t.expr.eval(&env{root: doc, params: bound})
		}
		keyed[i] = keyedRow{doc: doc, key: key}
	}
	sort.SliceStable(keyed, func(a, b int) bool {
		return q.compareKeys(keyed[a].key, keyed[b].key) < 0
	})
	for i := range keyed {
		rows[i] = keyed[i].doc
	}
}

func (q *Query) compareKeys(a, b []any) int {
	for i, t := range q.orderBy {
		c := orderCompare(a[i], b[i])
		if t.descending {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// projectRows applies the SELECT list. SELECT VALUE drops undefined values;
// a select list omits undefined properties, possibly leaving {}.
func (q *Query) projectRows(rows []map[string]any, bound map[string]any) []any {
	results := make([]any, 0, len(rows))
	for _, doc := range rows {
		ev := &env{root: doc, params: bound}
		switch {
		case q.selectStar:
			results = append(results, doc)
		case q.selectValue != nil:
			if v := q.selectValue.eval(ev); !isUndefined(v) {
				results = append(results, v)
			}
		default:
			results = append(results, q.projectItems(ev))
		}
	}
	return results
}

func (q *Query) projectItems(ev *env) map[string]any {
	out := make(map[string]any, len(q.items))
	for _, item := range q.items {
		if v := item.expr.eval(ev); !isUndefined(v) {
			out[item.name] = v
		}
	}
	return out
}

// distinct keeps the first of each group of deeply equal results.
func distinct(results []any) []any {
	seen := make(map[string]bool, len(results))
	out := results[:0:0]
	for _, r := range results {
		var b strings.Builder
		canonicalKey(&b, r)
		if key := b.String(); !seen[key] {
			seen[key] = true
			out = append(out, r)
		}
	}
	return out
}

// window is the slice of results OFFSET/LIMIT and TOP select.
type window struct {
	offset int
	limit  int // -1: no limit
}

func (w window) apply(results []any) []any {
	if w.offset >= len(results) {
		return []any{}
	}
	results = results[w.offset:]
	if w.limit >= 0 && w.limit < len(results) {
		results = results[:w.limit]
	}
	return results
}

// resultWindow resolves OFFSET, LIMIT and TOP; with both, TOP further caps
// what OFFSET/LIMIT selected.
func (q *Query) resultWindow(bound map[string]any) (window, error) {
	w := window{limit: -1}
	var err error
	if q.offset != nil {
		if w.offset, err = q.offset.resolve("OFFSET", bound); err != nil {
			return w, err
		}
		if w.limit, err = q.limit.resolve("LIMIT", bound); err != nil {
			return w, err
		}
	}
	if q.top != nil {
		top, err := q.top.resolve("TOP", bound)
		if err != nil {
			return w, err
		}
		if w.limit < 0 || top < w.limit {
			w.limit = top
		}
	}
	return w, nil
}

func (c *countSpec) resolve(clause string, bound map[string]any) (int, error) {
	if c.param == "" {
		return c.literal, nil
	}
	v := bound[c.param]
	f, ok := numberOf(v)
	n, valid := countFromFloat(f)
	if kindOf(v) != kindNumber || !ok || !valid {
		return 0, &EvalError{Param: c.param, Msg: fmt.Sprintf("%s %s must be a non-negative integer, got %v", clause, c.param, v)}
	}
	return n, nil
}
