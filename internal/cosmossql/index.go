package cosmossql

import "slices"

// What an index model needs to know about a query: the top-level AND terms
// of its WHERE clause, which of them a range index could answer, and the
// query evaluated part by part with its parameters bound. The fake uses it
// to charge a query by the documents an index would hand it (fakecosmos's
// RU model); results never depend on it.

// TermKind is what a range index can do with a WHERE term.
type TermKind int

const (
	// TermResidual terms are evaluated on each loaded document: NOT,
	// !=, CONTAINS, comparisons of two properties, and anything else.
	TermResidual TermKind = iota
	// TermEquality is path = constant (either side).
	TermEquality
	// TermRange is path <, <=, >, >= constant, or path BETWEEN constants.
	TermRange
	// TermLookup is any other shape a range index answers: IN with
	// constants, IS_DEFINED, STARTSWITH with a constant prefix,
	// ARRAY_CONTAINS(constant, path), and AND/OR of such terms.
	TermLookup
)

// Term is one top-level AND term of a WHERE clause.
type Term struct {
	Kind TermKind
	// Path is the property the term compares (equality and range).
	Path []string
	// Paths are the properties the term reads; an index answers a term
	// only if it indexes all of them.
	Paths [][]string
	expr  expr
}

// Terms splits the WHERE clause into its top-level AND terms, in order;
// none without WHERE.
func (q *Query) Terms() []Term {
	var terms []Term
	for _, e := range conjuncts(q.where) {
		terms = append(terms, classifyTerm(e))
	}
	return terms
}

func conjuncts(e expr) []expr {
	if e == nil {
		return nil
	}
	if b, ok := e.(*binaryExpr); ok && b.op == "AND" {
		return append(conjuncts(b.left), conjuncts(b.right)...)
	}
	return []expr{e}
}

func classifyTerm(e expr) Term {
	t := Term{Kind: TermResidual, expr: e}
	paths, whole := readPaths(e)
	if whole {
		return t
	}
	t.Paths = paths
	if path, kind, ok := comparedPath(e); ok {
		t.Kind, t.Path = kind, path
		return t
	}
	if lookupShape(e) {
		t.Kind = TermLookup
	}
	return t
}

// readPaths lists the property paths e reads; whole is true when it reads
// the document in a way no path names (c itself, c[@key]).
func readPaths(e expr) (paths [][]string, whole bool) {
	walk(e, func(n expr) bool {
		switch n := n.(type) {
		case *memberExpr, *indexExpr:
			path, ok := propertyPath(n)
			if ok {
				paths = append(paths, path)
				return false
			}
		case *rootRef:
			whole = true
		}
		return true
	})
	return paths, whole
}

// comparedPath recognises path = c, path < c (and the mirrored forms) and
// path BETWEEN c1 AND c2, where the c are constants.
func comparedPath(e expr) ([]string, TermKind, bool) {
	switch e := e.(type) {
	case *binaryExpr:
		kind := TermRange
		switch e.op {
		case "=":
			kind = TermEquality
		case "<", "<=", ">", ">=":
		default:
			return nil, 0, false
		}
		if path, ok := indexedOperand(e.left); ok && constant(e.right) {
			return path, kind, true
		}
		if path, ok := indexedOperand(e.right); ok && constant(e.left) {
			return path, kind, true
		}
	case *betweenExpr:
		if path, ok := indexedOperand(e.operand); ok && !e.negated && constant(e.low) && constant(e.high) {
			return path, TermRange, true
		}
	}
	return nil, 0, false
}

// lookupShape reports the other shapes a range index answers.
func lookupShape(e expr) bool {
	switch e := e.(type) {
	case *binaryExpr:
		if e.op == "AND" || e.op == "OR" {
			return indexAnswers(e.left) && indexAnswers(e.right)
		}
	case *inExpr:
		_, ok := indexedOperand(e.operand)
		return ok && !e.negated && !slices.ContainsFunc(e.list, func(x expr) bool { return !constant(x) })
	case *callExpr:
		return lookupCall(e)
	}
	return false
}

func indexAnswers(e expr) bool {
	_, _, ok := comparedPath(e)
	return ok || lookupShape(e)
}

func lookupCall(e *callExpr) bool {
	switch e.fn.name {
	case "IS_DEFINED":
		_, ok := indexedOperand(e.args[0])
		return ok
	case "STARTSWITH":
		_, ok := indexedOperand(e.args[0])
		return ok && len(e.args) == 2 && constant(e.args[1])
	case "ARRAY_CONTAINS":
		_, ok := indexedOperand(e.args[1])
		return ok && len(e.args) == 2 && constant(e.args[0])
	}
	return false
}

// indexedOperand is a property path below the alias (not the document
// itself).
func indexedOperand(e expr) ([]string, bool) {
	path, ok := propertyPath(e)
	return path, ok && len(path) > 0
}

// constant reports an expression that reads no document.
func constant(e expr) bool {
	reads := false
	walk(e, func(n expr) bool {
		if _, ok := n.(*rootRef); ok {
			reads = true
		}
		return !reads
	})
	return !reads
}

// Bound is a query with its parameters bound, evaluated part by part.
type Bound struct {
	q      *Query
	params map[string]any
}

// Bind checks and binds the parameters as Run does.
func (q *Query) Bind(params map[string]any) (*Bound, error) {
	bound, err := q.bindParameters(params)
	if err != nil {
		return nil, err
	}
	return &Bound{q: q, params: bound}, nil
}

// Holds reports whether doc satisfies every one of terms (terms of this
// query).
func (b *Bound) Holds(doc map[string]any, terms []Term) bool {
	ev := &env{root: doc, params: b.params}
	for _, t := range terms {
		if t.expr.eval(ev) != true {
			return false
		}
	}
	return true
}

// Matches reports whether doc satisfies the whole WHERE clause.
func (b *Bound) Matches(doc map[string]any) bool { return b.q.matches(doc, b.params) }

// CompareOrder compares two documents by the ORDER BY terms, as Run sorts
// them (0 without ORDER BY).
func (b *Bound) CompareOrder(x, y map[string]any) int {
	kx, ky := make([]any, len(b.q.orderBy)), make([]any, len(b.q.orderBy))
	for i, t := range b.q.orderBy {
		kx[i] = t.expr.eval(&env{root: x, params: b.params})
		ky[i] = t.expr.eval(&env{root: y, params: b.params})
	}
	return b.q.compareKeys(kx, ky)
}

// Window is where the result window (OFFSET, LIMIT, TOP) starts and how many
// results it keeps (limit < 0: all). perDocument is true when the results
// are the matching documents one for one (no aggregate, DISTINCT, GROUP BY
// or SELECT VALUE, which may drop undefined values), so that a result
// position names a matching document.
func (b *Bound) Window() (offset, limit int, perDocument bool, err error) {
	w, err := b.q.resultWindow(b.params)
	if err != nil {
		return 0, 0, false, err
	}
	q := b.q
	perDocument = !q.aggregate && !q.distinct && len(q.groupBy) == 0 && q.selectValue == nil
	return w.offset, w.limit, perDocument, nil
}
