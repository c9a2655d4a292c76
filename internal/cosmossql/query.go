package cosmossql

import (
	"sort"
	"strconv"
	"strings"
)

// Query is a parsed query. It is immutable and safe for concurrent use.
type Query struct {
	distinct    bool
	top         *countSpec
	selectStar  bool
	selectValue expr         // SELECT VALUE expr
	items       []selectItem // SELECT expr [AS alias], ...
	alias       string       // the FROM alias every identifier must name
	where       expr
	groupBy     []expr
	orderBy     []orderTerm
	offset      *countSpec
	limit       *countSpec
	params      []string // referenced parameters, sorted, with their "@"
	aggregate   bool
	source      clauseSource
}

// clauseSource keeps the written form of the clauses a query plan reuses
// when it rewrites the query for range-by-range execution (plan.go).
type clauseSource struct {
	selectValue string // the expression after SELECT VALUE
	from        string // "FROM c" as written, alias included
	where       string // the WHERE predicate, without WHERE
	orderBy     string // "ORDER BY c.a DESC, c.b" as written
}

// countSpec is the operand of TOP, OFFSET or LIMIT: a literal or a parameter.
type countSpec struct {
	literal int
	param   string // with its "@"; empty for a literal
	pos     int
}

type selectItem struct {
	expr     expr
	alias    string // as written after AS; empty if none
	aliasPos int
	name     string // the output property: the alias, or one Cosmos would derive
	text     string // the expression as written
}

type orderTerm struct {
	expr       expr
	text       string // the expression as written, without ASC/DESC
	path       []string
	descending bool
}

// Features reports which clauses a query uses, so that the fake can refuse
// what the gateway cannot serve across partitions.
type Features struct {
	Top, OrderBy, Offset, Distinct, Aggregate, GroupBy, Value bool
}

// OrderItem is one ORDER BY term: a property path under the FROM alias
// (c.status → ["status"], c["a"].b → ["a","b"], c.arr[0] → ["arr","0"]).
type OrderItem struct {
	Path       []string
	Descending bool
}

// Parse parses a query such as the gateway receives in a query request.
func Parse(text string) (*Query, error) {
	toks, err := tokenize(text)
	if err != nil {
		return nil, err
	}
	p := &parser{src: text, toks: toks}
	q, err := p.parseQuery()
	if err != nil {
		return nil, err
	}
	if err := q.validate(); err != nil {
		return nil, err
	}
	return q, nil
}

// conditionPrefix turns a PATCH condition into a query.
const conditionPrefix = "SELECT * "

// ParseCondition parses the condition of a PATCH request, which Cosmos
// documents as "the from-clause of a sql statement", e.g.
// "from c where c.status = 'queued'". Only FROM and WHERE are allowed;
// error positions refer to the condition text.
func ParseCondition(condition string) (*Query, error) {
	trimmed := strings.TrimLeft(condition, " \t\r\n\f\v")
	if len(trimmed) < 4 || !strings.EqualFold(trimmed[:4], "FROM") {
		return nil, syntaxErrorf(len(condition)-len(trimmed), "a PATCH condition must start with FROM")
	}
	q, err := Parse(conditionPrefix + condition)
	if err != nil {
		if se, ok := err.(*SyntaxError); ok {
			return nil, syntaxErrorf(max(se.Pos-len(conditionPrefix), 0), "%s", se.Msg)
		}
		return nil, err
	}
	f := q.Features()
	if f.Top || f.OrderBy || f.Offset || f.Distinct || f.Aggregate || f.GroupBy || f.Value {
		return nil, syntaxErrorf(0, "a PATCH condition may only hold FROM and WHERE")
	}
	return q, nil
}

// Features reports the clauses the query uses.
func (q *Query) Features() Features {
	return Features{
		Top:       q.top != nil,
		OrderBy:   len(q.orderBy) > 0,
		Offset:    q.offset != nil,
		Distinct:  q.distinct,
		Aggregate: q.aggregate,
		GroupBy:   len(q.groupBy) > 0,
		Value:     q.selectValue != nil,
	}
}

// OrderBy returns the ORDER BY terms in order.
func (q *Query) OrderBy() []OrderItem {
	items := make([]OrderItem, len(q.orderBy))
	for i, t := range q.orderBy {
		items[i] = OrderItem{Path: append([]string(nil), t.path...), Descending: t.descending}
	}
	return items
}

// ReferencedParameters returns the parameters the query uses, sorted and
// with their "@" ("@pk"), as they are named in a query request.
func (q *Query) ReferencedParameters() []string {
	return append([]string(nil), q.params...)
}

// Alias returns the FROM alias, the name documents are bound to.
func (q *Query) Alias() string { return q.alias }

// validate runs the checks that need the whole query: identifiers resolve to
// the FROM alias, aggregates appear only where they can be computed, ORDER BY
// terms are property paths, output names are unique.
func (q *Query) validate() error {
	if err := q.resolveIdentifiers(); err != nil {
		return err
	}
	if err := q.checkAggregates(); err != nil {
		return err
	}
	if err := q.resolveOrderPaths(); err != nil {
		return err
	}
	if err := q.nameSelectItems(); err != nil {
		return err
	}
	q.params = q.collectParameters()
	return nil
}

// allExprs lists the root of every expression in the query.
func (q *Query) allExprs() []expr {
	var all []expr
	if q.selectValue != nil {
		all = append(all, q.selectValue)
	}
	for _, item := range q.items {
		all = append(all, item.expr)
	}
	if q.where != nil {
		all = append(all, q.where)
	}
	all = append(all, q.groupBy...)
	for _, t := range q.orderBy {
		all = append(all, t.expr)
	}
	return all
}

func (q *Query) resolveIdentifiers() error {
	var err error
	for _, root := range q.allExprs() {
		walk(root, func(e expr) bool {
			if ref, ok := e.(*rootRef); ok && ref.name != q.alias && err == nil {
				err = syntaxErrorf(ref.at, "identifier %s could not be resolved; the FROM alias is %s", ref.name, q.alias)
			}
			return err == nil
		})
	}
	return err
}

// checkAggregates allows an aggregate only as a whole select item (VALUE
// COUNT(1), COUNT(1) AS n), never nested, and never next to a non-aggregate
// item unless GROUP BY is present (which Run refuses anyway).
func (q *Query) checkAggregates() error {
	selectRoots := map[expr]bool{}
	if q.selectValue != nil {
		selectRoots[q.selectValue] = true
	}
	for _, item := range q.items {
		selectRoots[item.expr] = true
	}
	for _, root := range q.allExprs() {
		if root == q.selectValue && isConstructor(root) && containsAggregate(root) {
			if err := checkConstructedAggregates(root); err != nil {
				return err
			}
			continue
		}
		if err := checkAggregatePlacement(root, selectRoots[root]); err != nil {
			return err
		}
	}
	q.aggregate = q.countAggregateItems() > 0
	if !q.aggregate || len(q.groupBy) > 0 {
		return nil
	}
	for _, item := range q.items {
		if _, ok := item.expr.(*aggregateExpr); !ok {
			return syntaxErrorf(startPos(item.expr), "aggregates cannot be mixed with other select items without GROUP BY")
		}
	}
	return nil
}

func checkAggregatePlacement(root expr, isSelectRoot bool) error {
	var err error
	walk(root, func(e expr) bool {
		agg, ok := e.(*aggregateExpr)
		if !ok || err != nil {
			return err == nil
		}
		if e != root || !isSelectRoot {
			err = syntaxErrorf(agg.at, "%s is supported only as a whole SELECT item (SELECT VALUE %s(...) or %s(...) AS name)", agg.name, agg.name, agg.name)
			return false
		}
		walk(agg.arg, func(inner expr) bool {
			if nested, ok := inner.(*aggregateExpr); ok && err == nil {
				err = syntaxErrorf(nested.at, "aggregates cannot be nested")
			}
			return err == nil
		})
		return false
	})
	return err
}

func isConstructor(e expr) bool {
	switch e.(type) {
	case *arrayExpr, *objectExpr:
		return true
	}
	return false
}

func containsAggregate(root expr) bool {
	found := false
	walk(root, func(e expr) bool {
		if _, ok := e.(*aggregateExpr); ok {
			found = true
		}
		return !found
	})
	return found
}

// checkConstructedAggregates allows SELECT VALUE [{"item": COUNT(1)}], the
// form a query plan rewrites aggregates into: array and object constructors
// whose leaves are whole aggregates or constants. A leaf that reads the
// document would need a row per document, which an aggregate query has not.
func checkConstructedAggregates(root expr) error {
	if isConstructor(root) {
		for _, child := range root.children() {
			if err := checkConstructedAggregates(child); err != nil {
				return err
			}
		}
		return nil
	}
	if _, ok := root.(*aggregateExpr); ok {
		return checkAggregatePlacement(root, true)
	}
	var err error
	walk(root, func(e expr) bool {
		switch e := e.(type) {
		case *rootRef:
			err = syntaxErrorf(e.at, "aggregates cannot be mixed with values of the document in SELECT VALUE")
		case *aggregateExpr:
			err = checkAggregatePlacement(e, false)
		}
		return err == nil
	})
	return err
}

func (q *Query) countAggregateItems() int {
	n := 0
	if q.selectValue != nil && containsAggregate(q.selectValue) {
		n++
	}
	for _, item := range q.items {
		if _, ok := item.expr.(*aggregateExpr); ok {
			n++
		}
	}
	return n
}

// resolveOrderPaths requires each ORDER BY term to be a property path under
// the alias: Cosmos serves ORDER BY from the index, by document path.
func (q *Query) resolveOrderPaths() error {
	for i, t := range q.orderBy {
		path, ok := propertyPath(t.expr)
		if !ok || len(path) == 0 {
			return syntaxErrorf(startPos(t.expr), "ORDER BY supports only property paths such as %s.name", q.alias)
		}
		q.orderBy[i].path = path
	}
	return nil
}

// propertyPath returns the segments of alias.a["b"][0]; ok is false for any
// other expression.
func propertyPath(e expr) ([]string, bool) {
	switch e := e.(type) {
	case *rootRef:
		return []string{}, true
	case *memberExpr:
		parent, ok := propertyPath(e.target)
		return append(parent, e.name), ok
	case *indexExpr:
		lit, isLit := e.index.(*literalExpr)
		if !isLit || kindOf(lit.value) != kindNumber {
			return nil, false
		}
		index, _ := numberOf(lit.value)
		parent, ok := propertyPath(e.target)
		return append(parent, formatNumber(index)), ok
	}
	return nil, false
}

// nameSelectItems gives each select item its output name: the alias, else
// the last property name (c.a.b → "b"), else the alias itself for SELECT c,
// else "$1", "$2", ... as Cosmos names computed items.
func (q *Query) nameSelectItems() error {
	generated := 0
	used := map[string]bool{}
	for i := range q.items {
		item := &q.items[i]
		var pos int
		item.name, pos = item.alias, item.aliasPos
		if item.name == "" {
			switch e := item.expr.(type) {
			case *memberExpr:
				item.name = e.name
			case *rootRef:
				item.name = e.name
			default:
				generated++
				item.name = "$" + strconv.Itoa(generated)
			}
			pos = startPos(item.expr)
		}
		if used[item.name] {
			return syntaxErrorf(pos, "duplicate output property %q in SELECT; add AS to rename it", item.name)
		}
		used[item.name] = true
	}
	return nil
}

func (q *Query) collectParameters() []string {
	seen := map[string]bool{}
	for _, root := range q.allExprs() {
		walk(root, func(e expr) bool {
			if p, ok := e.(*paramExpr); ok {
				seen[p.name] = true
			}
			return true
		})
	}
	for _, c := range []*countSpec{q.top, q.offset, q.limit} {
		if c != nil && c.param != "" {
			seen[c.param] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
