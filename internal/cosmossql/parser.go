package cosmossql

import (
	"math"
	"strconv"
	"strings"
)

// maxDepth bounds expression nesting so that hostile input cannot exhaust
// the stack; real queries nest a handful of levels.
const maxDepth = 200

// reservedWords are the grammar's keywords that cannot be identifiers
// (ALL, FIRST and LAST can). They are case-insensitive.
func isReservedWord(upper string) bool {
	switch upper {
	case "AND", "ARRAY", "AS", "ASC", "BETWEEN", "BY", "DESC", "DISTINCT", "ESCAPE", "EXISTS",
		"FROM", "GROUP", "IN", "JOIN", "LEFT", "LIKE", "LIMIT", "NOT", "OFFSET", "OR", "ORDER",
		"RANK", "RIGHT", "SELECT", "TOP", "VALUE", "WHERE":
		return true
	}
	return false
}

// isLiteralWord reports the case-sensitive literal keywords, which the
// grammar defines in lowercase only ('true', not TRUE).
func isLiteralWord(text string) bool {
	switch text {
	case "true", "false", "null", "undefined", "udf":
		return true
	}
	return false
}

type parser struct {
	src   string
	toks  []token
	i     int
	depth int
}

// textSince is the source text from token index start up to the current
// token, trimmed: the written form of what was parsed since, which query
// plans reuse when they rewrite a query.
func (p *parser) textSince(start int) string {
	return strings.TrimSpace(p.src[p.toks[start].pos:p.toks[p.i].pos])
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) peekAt(offset int) token {
	if p.i+offset < len(p.toks) {
		return p.toks[p.i+offset]
	}
	return p.toks[len(p.toks)-1] // EOF
}

func (p *parser) advance() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) isKeyword(word string) bool {
	t := p.peek()
	return t.kind == tokIdent && strings.EqualFold(t.text, word)
}

func (p *parser) acceptKeyword(word string) bool {
	if p.isKeyword(word) {
		p.advance()
		return true
	}
	return false
}

func (p *parser) expectKeyword(word string) error {
	if p.acceptKeyword(word) {
		return nil
	}
	return p.unexpected(word)
}

func (p *parser) isPunct(text string) bool {
	t := p.peek()
	return t.kind == tokPunct && t.text == text
}

func (p *parser) acceptPunct(text string) bool {
	if p.isPunct(text) {
		p.advance()
		return true
	}
	return false
}

func (p *parser) expectPunct(text string) error {
	if p.acceptPunct(text) {
		return nil
	}
	return p.unexpected("'" + text + "'")
}

// unexpected reports the current token against what the grammar expected.
func (p *parser) unexpected(expected string) error {
	t := p.peek()
	return syntaxErrorf(t.pos, "expected %s, found %s", expected, t.describe())
}

// parseQuery parses
//
//	SELECT [DISTINCT] [TOP n] selection FROM ident [[AS] ident]
//	[WHERE expr] [GROUP BY expr, ...] [ORDER BY expr [ASC|DESC], ...] [OFFSET n LIMIT m]
func (p *parser) parseQuery() (*Query, error) {
	q := &Query{}
	if err := p.expectKeyword("SELECT"); err != nil {
		return nil, err
	}
	q.distinct = p.acceptKeyword("DISTINCT")
	if p.acceptKeyword("TOP") {
		top, err := p.parseCount("TOP")
		if err != nil {
			return nil, err
		}
		q.top = top
	}
	if err := p.parseSelection(q); err != nil {
		return nil, err
	}
	if err := p.parseFrom(q); err != nil {
		return nil, err
	}
	if err := p.parseClauses(q); err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, syntaxErrorf(t.pos, "expected end of query, found %s", t.describe())
	}
	return q, nil
}

// parseCount reads the operand of TOP, OFFSET or LIMIT: a non-negative
// integer literal or a parameter.
func (p *parser) parseCount(clause string) (*countSpec, error) {
	t := p.peek()
	switch {
	case t.kind == tokParam:
		p.advance()
		return &countSpec{param: t.text, pos: t.pos}, nil
	case t.kind == tokNumber:
		p.advance()
		n, ok := countFromFloat(parseFloat(t.text))
		if !ok {
			return nil, syntaxErrorf(t.pos, "%s expects a non-negative integer, found %s", clause, t.text)
		}
		return &countSpec{literal: n, pos: t.pos}, nil
	case t.kind == tokPunct && t.text == "-":
		return nil, syntaxErrorf(t.pos, "%s expects a non-negative integer", clause)
	}
	return nil, p.unexpected("a number or a parameter after " + clause)
}

func parseFloat(text string) float64 {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// countFromFloat accepts integral values from 0 to MaxInt32.
func countFromFloat(f float64) (int, bool) {
	if math.IsNaN(f) || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

func (p *parser) parseSelection(q *Query) error {
	switch {
	case p.acceptPunct("*"):
		q.selectStar = true
		return nil
	case p.acceptKeyword("VALUE"):
		if p.isPunct("*") {
			return syntaxErrorf(p.peek().pos, "SELECT VALUE * is not valid; use SELECT * or SELECT VALUE c")
		}
		start := p.i
		e, err := p.parseExpr()
		if err != nil {
			return err
		}
		q.selectValue = e
		q.source.selectValue = p.textSince(start)
		return nil
	}
	for {
		item, err := p.parseSelectItem()
		if err != nil {
			return err
		}
		q.items = append(q.items, item)
		if !p.acceptPunct(",") {
			return nil
		}
	}
}

func (p *parser) parseSelectItem() (selectItem, error) {
	if p.isPunct("*") {
		return selectItem{}, syntaxErrorf(p.peek().pos, "'*' must be the only item in SELECT")
	}
	start := p.i
	e, err := p.parseExpr()
	if err != nil {
		return selectItem{}, err
	}
	item := selectItem{expr: e, text: p.textSince(start)}
	if p.acceptKeyword("AS") {
		name, err := p.parseIdentifier("an alias after AS")
		if err != nil {
			return selectItem{}, err
		}
		item.alias = name.text
		item.aliasPos = name.pos
	}
	return item, nil
}

// parseIdentifier reads an identifier that is not a reserved word.
func (p *parser) parseIdentifier(what string) (token, error) {
	t := p.peek()
	if t.kind != tokIdent || isLiteralWord(t.text) {
		return token{}, p.unexpected(what)
	}
	if isReservedWord(strings.ToUpper(t.text)) {
		return token{}, syntaxErrorf(t.pos, "expected %s, found reserved word %s", what, t.text)
	}
	return p.advance(), nil
}

// parseFrom reads FROM ident [[AS] ident]; the last identifier is the alias.
func (p *parser) parseFrom(q *Query) error {
	start := p.i
	defer func() { q.source.from = p.textSince(start) }()
	if err := p.expectKeyword("FROM"); err != nil {
		return err
	}
	if p.isPunct("(") {
		return syntaxErrorf(p.peek().pos, "subqueries are not supported")
	}
	collection, err := p.parseIdentifier("a collection name after FROM")
	if err != nil {
		return err
	}
	q.alias = collection.text
	switch {
	case p.isPunct(".") || p.isPunct("["):
		return syntaxErrorf(p.peek().pos, "FROM with a path (FROM c.children) is not supported")
	case p.isKeyword("IN"):
		return syntaxErrorf(p.peek().pos, "FROM x IN y iteration is not supported")
	}
	hasAS := p.acceptKeyword("AS")
	if t := p.peek(); hasAS || (t.kind == tokIdent && !isReservedWord(strings.ToUpper(t.text)) && !isLiteralWord(t.text)) {
		alias, err := p.parseIdentifier("an alias for the collection")
		if err != nil {
			return err
		}
		q.alias = alias.text
	}
	if p.isKeyword("JOIN") {
		return syntaxErrorf(p.peek().pos, "JOIN is not supported")
	}
	return nil
}

// parseClauses reads the optional clauses after FROM, in grammar order.
func (p *parser) parseClauses(q *Query) error {
	var err error
	if p.acceptKeyword("WHERE") {
		start := p.i
		if q.where, err = p.parseExpr(); err != nil {
			return err
		}
		q.source.where = p.textSince(start)
	}
	if p.isKeyword("GROUP") {
		if q.groupBy, err = p.parseGroupBy(); err != nil {
			return err
		}
	}
	if p.isKeyword("ORDER") {
		start := p.i
		if q.orderBy, err = p.parseOrderBy(); err != nil {
			return err
		}
		q.source.orderBy = p.textSince(start)
	}
	if p.acceptKeyword("OFFSET") {
		if q.offset, err = p.parseCount("OFFSET"); err != nil {
			return err
		}
		if err := p.expectKeyword("LIMIT"); err != nil {
			return err
		}
		if q.limit, err = p.parseCount("LIMIT"); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) parseGroupBy() ([]expr, error) {
	p.advance() // GROUP
	if err := p.expectKeyword("BY"); err != nil {
		return nil, err
	}
	return p.parseExprList()
}

func (p *parser) parseOrderBy() ([]orderTerm, error) {
	p.advance() // ORDER
	if err := p.expectKeyword("BY"); err != nil {
		return nil, err
	}
	if p.isKeyword("RANK") {
		return nil, syntaxErrorf(p.peek().pos, "ORDER BY RANK is not supported")
	}
	var terms []orderTerm
	for {
		start := p.i
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		term := orderTerm{expr: e, text: p.textSince(start)}
		if p.acceptKeyword("DESC") {
			term.descending = true
		} else {
			p.acceptKeyword("ASC")
		}
		terms = append(terms, term)
		if !p.acceptPunct(",") {
			return terms, nil
		}
	}
}

func (p *parser) parseExprList() ([]expr, error) {
	var list []expr
	for {
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		list = append(list, e)
		if !p.acceptPunct(",") {
			return list, nil
		}
	}
}
