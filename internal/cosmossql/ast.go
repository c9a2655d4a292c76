package cosmossql

// expr is a node of a scalar expression. Nodes are immutable after parsing;
// eval never fails, because every runtime problem Cosmos knows (wrong types,
// missing properties) evaluates to undefined, and missing parameters are
// checked before evaluation starts.
type expr interface {
	pos() int
	children() []expr
	eval(env *env) any
}

// env is what an expression sees while evaluating against one document.
type env struct {
	root   any            // the document bound to the FROM alias
	params map[string]any // normalized, keyed by name with its "@"
	// aggregates holds the computed aggregates while an aggregate query's
	// SELECT VALUE builds its row; nil otherwise.
	aggregates map[*aggregateExpr]any
}

type literalExpr struct {
	at    int
	value any
}

type paramExpr struct {
	at   int
	name string // with its "@"
}

// rootRef is an identifier in an expression; validation checks that it names
// the FROM alias, the only identifier a query without JOIN can resolve.
type rootRef struct {
	at   int
	name string
}

// memberExpr is a property access with a name known at parse time: c.a or c["a"].
type memberExpr struct {
	at     int
	target expr
	name   string
}

// indexExpr is c[expr] where expr is not a string literal: c.arr[0], c[@key].
type indexExpr struct {
	at     int
	target expr
	index  expr
}

type unaryExpr struct {
	at      int
	op      string // "-", "+", "NOT"
	operand expr
}

type binaryExpr struct {
	at          int
	op          string // "AND", "OR", "=", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "||"
	left, right expr
}

type inExpr struct {
	at      int
	operand expr
	list    []expr
	negated bool
}

type betweenExpr struct {
	at        int
	operand   expr
	low, high expr
	negated   bool
}

type likeExpr struct {
	at        int
	operand   expr
	pattern   expr
	escape    rune
	hasEscape bool
	negated   bool
}

type conditionalExpr struct {
	at                    int
	cond, ifTrue, ifFalse expr
}

type coalesceExpr struct {
	at          int
	left, right expr
}

type callExpr struct {
	at   int
	fn   builtin
	args []expr
}

// aggregateExpr is COUNT, SUM, MIN, MAX or AVG. Validation allows it as a
// whole select item, or inside the array and object constructors of SELECT
// VALUE (the form query plans rewrite aggregates into); the aggregation pass
// computes it and eval reads the result from env.
type aggregateExpr struct {
	at      int
	name    string // upper case
	arg     expr
	argText string // the argument as written
}

type arrayExpr struct {
	at    int
	items []expr
}

type objectExpr struct {
	at     int
	keys   []string
	values []expr
}

func (e *literalExpr) pos() int     { return e.at }
func (e *paramExpr) pos() int       { return e.at }
func (e *rootRef) pos() int         { return e.at }
func (e *memberExpr) pos() int      { return e.at }
func (e *indexExpr) pos() int       { return e.at }
func (e *unaryExpr) pos() int       { return e.at }
func (e *binaryExpr) pos() int      { return e.at }
func (e *inExpr) pos() int          { return e.at }
func (e *betweenExpr) pos() int     { return e.at }
func (e *likeExpr) pos() int        { return e.at }
func (e *conditionalExpr) pos() int { return e.at }
func (e *coalesceExpr) pos() int    { return e.at }
func (e *callExpr) pos() int        { return e.at }
func (e *aggregateExpr) pos() int   { return e.at }
func (e *arrayExpr) pos() int       { return e.at }
func (e *objectExpr) pos() int      { return e.at }

func (e *literalExpr) children() []expr     { return nil }
func (e *paramExpr) children() []expr       { return nil }
func (e *rootRef) children() []expr         { return nil }
func (e *memberExpr) children() []expr      { return []expr{e.target} }
func (e *indexExpr) children() []expr       { return []expr{e.target, e.index} }
func (e *unaryExpr) children() []expr       { return []expr{e.operand} }
func (e *binaryExpr) children() []expr      { return []expr{e.left, e.right} }
func (e *betweenExpr) children() []expr     { return []expr{e.operand, e.low, e.high} }
func (e *likeExpr) children() []expr        { return []expr{e.operand, e.pattern} }
func (e *conditionalExpr) children() []expr { return []expr{e.cond, e.ifTrue, e.ifFalse} }
func (e *coalesceExpr) children() []expr    { return []expr{e.left, e.right} }
func (e *callExpr) children() []expr        { return e.args }
func (e *aggregateExpr) children() []expr   { return []expr{e.arg} }
func (e *arrayExpr) children() []expr       { return e.items }
func (e *objectExpr) children() []expr      { return e.values }
func (e *inExpr) children() []expr          { return append([]expr{e.operand}, e.list...) }

// walk visits e and its descendants depth-first; visit returns false to skip
// a node's children.
func walk(e expr, visit func(expr) bool) {
	if e == nil || !visit(e) {
		return
	}
	for _, c := range e.children() {
		walk(c, visit)
	}
}

// startPos is where the text of an expression begins, for error messages;
// pos is the operator's position for postfix and binary nodes.
func startPos(e expr) int {
	switch e := e.(type) {
	case *memberExpr:
		return startPos(e.target)
	case *indexExpr:
		return startPos(e.target)
	case *binaryExpr:
		return startPos(e.left)
	case *inExpr:
		return startPos(e.operand)
	case *betweenExpr:
		return startPos(e.operand)
	case *likeExpr:
		return startPos(e.operand)
	case *conditionalExpr:
		return startPos(e.cond)
	case *coalesceExpr:
		return startPos(e.left)
	}
	return e.pos()
}
