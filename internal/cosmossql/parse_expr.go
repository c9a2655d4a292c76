package cosmossql

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Expression precedence, loosest first:
//
//	a ? b : c     (right-associative, as in C# and JavaScript)
//	??
//	OR
//	AND
//	[NOT] IN, [NOT] BETWEEN, [NOT] LIKE
//	||            (the grammar puts string concatenation below the comparisons)
//	= != <>
//	< <= > >=
//	+ -
//	* / %
//	unary - + NOT (NOT binds as tightly as unary minus, as in the grammar)
//	postfix .name [index]
func (p *parser) parseExpr() (expr, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, syntaxErrorf(p.peek().pos, "expression nested too deeply")
	}
	return p.parseConditional()
}

func (p *parser) parseConditional() (expr, error) {
	cond, err := p.parseCoalesce()
	if err != nil {
		return nil, err
	}
	if !p.isPunct("?") {
		return cond, nil
	}
	at := p.advance().pos
	ifTrue, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct(":"); err != nil {
		return nil, err
	}
	ifFalse, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	return &conditionalExpr{at: at, cond: cond, ifTrue: ifTrue, ifFalse: ifFalse}, nil
}

func (p *parser) parseCoalesce() (expr, error) {
	left, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isPunct("??") {
		at := p.advance().pos
		right, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		left = &coalesceExpr{at: at, left: left, right: right}
	}
	return left, nil
}

func (p *parser) parseOr() (expr, error) {
	return p.parseLogical("OR", p.parseAnd)
}

func (p *parser) parseAnd() (expr, error) {
	return p.parseLogical("AND", p.parsePredicate)
}

func (p *parser) parseLogical(op string, operand func() (expr, error)) (expr, error) {
	left, err := operand()
	if err != nil {
		return nil, err
	}
	for p.isKeyword(op) {
		at := p.advance().pos
		right, err := operand()
		if err != nil {
			return nil, err
		}
		left = &binaryExpr{at: at, op: op, left: left, right: right}
	}
	return left, nil
}

// parsePredicate reads an operand optionally followed by [NOT] IN (...),
// [NOT] BETWEEN a AND b, or [NOT] LIKE pattern [ESCAPE 'c'].
func (p *parser) parsePredicate() (expr, error) {
	operand, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	negated := false
	if p.acceptKeyword("NOT") {
		if !p.isKeyword("IN") && !p.isKeyword("BETWEEN") && !p.isKeyword("LIKE") {
			return nil, p.unexpected("IN, BETWEEN or LIKE after NOT")
		}
		negated = true
	}
	switch {
	case p.isKeyword("IN"):
		return p.parseIn(operand, negated)
	case p.isKeyword("BETWEEN"):
		return p.parseBetween(operand, negated)
	case p.isKeyword("LIKE"):
		return p.parseLike(operand, negated)
	}
	return operand, nil
}

func (p *parser) parseIn(operand expr, negated bool) (expr, error) {
	at := p.advance().pos // IN
	if err := p.expectPunct("("); err != nil {
		return nil, err
	}
	if p.isKeyword("SELECT") {
		return nil, syntaxErrorf(p.peek().pos, "subqueries are not supported")
	}
	list, err := p.parseExprList()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct(")"); err != nil {
		return nil, err
	}
	return &inExpr{at: at, operand: operand, list: list, negated: negated}, nil
}

func (p *parser) parseBetween(operand expr, negated bool) (expr, error) {
	at := p.advance().pos // BETWEEN
	low, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	if err := p.expectKeyword("AND"); err != nil {
		return nil, err
	}
	high, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	return &betweenExpr{at: at, operand: operand, low: low, high: high, negated: negated}, nil
}

func (p *parser) parseLike(operand expr, negated bool) (expr, error) {
	at := p.advance().pos // LIKE
	pattern, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	like := &likeExpr{at: at, operand: operand, pattern: pattern, negated: negated}
	if p.acceptKeyword("ESCAPE") {
		t := p.peek()
		runes := []rune(t.value)
		if t.kind != tokString || len(runes) != 1 {
			return nil, p.unexpected("a one-character string after ESCAPE")
		}
		p.advance()
		like.escape, like.hasEscape = runes[0], true
	}
	return like, nil
}

// parseBinaryLevel parses one left-associative level of binary operators.
func (p *parser) parseBinaryLevel(ops []string, operand func() (expr, error)) (expr, error) {
	left, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		op, ok := matchOperator(t, ops)
		if !ok {
			return left, nil
		}
		p.advance()
		right, err := operand()
		if err != nil {
			return nil, err
		}
		left = &binaryExpr{at: t.pos, op: op, left: left, right: right}
	}
}

// matchOperator returns the canonical spelling of an operator token; <> is
// another spelling of !=.
func matchOperator(t token, ops []string) (string, bool) {
	if t.kind != tokPunct {
		return "", false
	}
	text := t.text
	if text == "<>" {
		text = "!="
	}
	for _, op := range ops {
		if op == text {
			return op, true
		}
	}
	return "", false
}

func (p *parser) parseConcat() (expr, error) {
	return p.parseBinaryLevel([]string{"||"}, p.parseEquality)
}

func (p *parser) parseEquality() (expr, error) {
	return p.parseBinaryLevel([]string{"=", "!="}, p.parseRelational)
}

func (p *parser) parseRelational() (expr, error) {
	return p.parseBinaryLevel([]string{"<", "<=", ">", ">="}, p.parseAdditive)
}

func (p *parser) parseAdditive() (expr, error) {
	return p.parseBinaryLevel([]string{"+", "-"}, p.parseMultiplicative)
}

func (p *parser) parseMultiplicative() (expr, error) {
	return p.parseBinaryLevel([]string{"*", "/", "%"}, p.parseUnary)
}

func (p *parser) parseUnary() (expr, error) {
	t := p.peek()
	var op string
	switch {
	case t.kind == tokPunct && (t.text == "-" || t.text == "+"):
		op = t.text
	case p.isKeyword("NOT"):
		op = "NOT"
	default:
		return p.parsePostfix()
	}
	p.advance()
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, syntaxErrorf(t.pos, "expression nested too deeply")
	}
	operand, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	if lit, ok := operand.(*literalExpr); ok && op == "-" {
		// Fold -5 into a literal so that it reads as the number it is.
		if n, ok := lit.value.(json.Number); ok {
			f, _ := numberOf(n)
			return &literalExpr{at: t.pos, value: makeNumber(-f)}, nil
		}
	}
	return &unaryExpr{at: t.pos, op: op, operand: operand}, nil
}

func (p *parser) parsePostfix() (expr, error) {
	e, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.isPunct("."):
			at := p.advance().pos
			name, err := p.parsePropertyName()
			if err != nil {
				return nil, err
			}
			e = &memberExpr{at: at, target: e, name: name}
		case p.isPunct("["):
			at := p.advance().pos
			index, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if err := p.expectPunct("]"); err != nil {
				return nil, err
			}
			if lit, ok := index.(*literalExpr); ok {
				if name, ok := lit.value.(string); ok {
					e = &memberExpr{at: at, target: e, name: name}
					continue
				}
			}
			e = &indexExpr{at: at, target: e, index: index}
		default:
			return e, nil
		}
	}
}

// parsePropertyName reads the name after a dot. Reserved words are rejected,
// as in Cosmos: c.value is a syntax error there, c["value"] is not.
func (p *parser) parsePropertyName() (string, error) {
	t := p.peek()
	if t.kind == tokIdent && (isReservedWord(strings.ToUpper(t.text)) || isLiteralWord(t.text)) {
		return "", syntaxErrorf(t.pos, "%s is a reserved word and cannot follow '.'; write [\"%s\"] instead", t.text, t.text)
	}
	if t.kind != tokIdent {
		return "", p.unexpected("a property name after '.'")
	}
	return p.advance().text, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.peek()
	switch t.kind {
	case tokNumber:
		p.advance()
		f := parseFloat(t.text)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, syntaxErrorf(t.pos, "number %s is out of range", t.text)
		}
		return &literalExpr{at: t.pos, value: makeNumber(f)}, nil
	case tokString:
		p.advance()
		return &literalExpr{at: t.pos, value: t.value}, nil
	case tokParam:
		p.advance()
		return &paramExpr{at: t.pos, name: t.text}, nil
	case tokIdent:
		return p.parseWord()
	case tokPunct:
		switch t.text {
		case "(":
			return p.parseParenthesized()
		case "[":
			return p.parseArrayLiteral()
		case "{":
			return p.parseObjectLiteral()
		}
	}
	return nil, p.unexpected("an expression")
}

// parseWord handles a primary that starts with a word: a literal keyword, a
// function call, one of the unsupported subquery forms, or an identifier.
func (p *parser) parseWord() (expr, error) {
	t := p.peek()
	switch t.text { // case-sensitive, as in the grammar
	case "true", "false":
		p.advance()
		return &literalExpr{at: t.pos, value: t.text == "true"}, nil
	case "null":
		p.advance()
		return &literalExpr{at: t.pos, value: nil}, nil
	case "undefined":
		p.advance()
		return &literalExpr{at: t.pos, value: undefinedValue{}}, nil
	case "udf":
		return nil, syntaxErrorf(t.pos, "user-defined functions are not supported")
	}
	upper := strings.ToUpper(t.text)
	callsSomething := p.peekAt(1).kind == tokPunct && p.peekAt(1).text == "("
	switch {
	case callsSomething && (upper == "EXISTS" || upper == "ARRAY" || upper == "ALL" || upper == "FIRST" || upper == "LAST"):
		return nil, syntaxErrorf(t.pos, "%s subqueries are not supported", upper)
	case callsSomething && (upper == "LEFT" || upper == "RIGHT" || !isReservedWord(upper)):
		return p.parseCall()
	case isReservedWord(upper):
		return nil, syntaxErrorf(t.pos, "expected an expression, found reserved word %s", t.text)
	}
	p.advance()
	return &rootRef{at: t.pos, name: t.text}, nil
}

func (p *parser) parseCall() (expr, error) {
	nameTok := p.advance()
	name := strings.ToUpper(nameTok.text)
	p.advance() // '('
	argsStart := p.i
	var args []expr
	if !p.isPunct(")") {
		var err error
		if args, err = p.parseExprList(); err != nil {
			return nil, err
		}
	}
	argsText := p.textSince(argsStart)
	if err := p.expectPunct(")"); err != nil {
		return nil, err
	}
	if isAggregate(name) {
		if len(args) != 1 {
			return nil, syntaxErrorf(nameTok.pos, "%s takes exactly 1 argument, got %d", name, len(args))
		}
		return &aggregateExpr{at: nameTok.pos, name: name, arg: args[0], argText: argsText}, nil
	}
	fn, ok := lookupBuiltin(name)
	if !ok {
		return nil, syntaxErrorf(nameTok.pos, "unknown or unsupported function %s", nameTok.text)
	}
	if len(args) < fn.minArgs || len(args) > fn.maxArgs {
		return nil, syntaxErrorf(nameTok.pos, "%s takes %s, got %d", name, arity(fn), len(args))
	}
	return &callExpr{at: nameTok.pos, fn: fn, args: args}, nil
}

func arity(fn builtin) string {
	switch {
	case fn.minArgs == fn.maxArgs:
		return strconv.Itoa(fn.minArgs) + " argument(s)"
	case fn.maxArgs == math.MaxInt:
		return "at least " + strconv.Itoa(fn.minArgs) + " arguments"
	default:
		return strconv.Itoa(fn.minArgs) + " to " + strconv.Itoa(fn.maxArgs) + " arguments"
	}
}

func (p *parser) parseParenthesized() (expr, error) {
	p.advance() // '('
	if p.isKeyword("SELECT") {
		return nil, syntaxErrorf(p.peek().pos, "subqueries are not supported")
	}
	e, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct(")"); err != nil {
		return nil, err
	}
	return e, nil
}

func (p *parser) parseArrayLiteral() (expr, error) {
	at := p.advance().pos // '['
	arr := &arrayExpr{at: at}
	if p.acceptPunct("]") {
		return arr, nil
	}
	items, err := p.parseExprList()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct("]"); err != nil {
		return nil, err
	}
	arr.items = items
	return arr, nil
}

// parseObjectLiteral reads {"key": expr, key: expr}; the Microsoft Learn
// examples use bare identifiers as keys, the grammar string literals.
func (p *parser) parseObjectLiteral() (expr, error) {
	at := p.advance().pos // '{'
	obj := &objectExpr{at: at}
	if p.acceptPunct("}") {
		return obj, nil
	}
	seen := map[string]bool{}
	for {
		t := p.peek()
		var key string
		switch {
		case t.kind == tokString:
			key = t.value
		case t.kind == tokIdent:
			key = t.text
		default:
			return nil, p.unexpected("a property name in the object literal")
		}
		if seen[key] {
			return nil, syntaxErrorf(t.pos, "duplicate property %q in object literal", key)
		}
		seen[key] = true
		p.advance()
		if err := p.expectPunct(":"); err != nil {
			return nil, err
		}
		value, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		obj.keys = append(obj.keys, key)
		obj.values = append(obj.values, value)
		if !p.acceptPunct(",") {
			if err := p.expectPunct("}"); err != nil {
				return nil, err
			}
			return obj, nil
		}
	}
}
