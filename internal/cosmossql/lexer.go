package cosmossql

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

type tokenKind int

const (
	tokEOF    tokenKind = iota
	tokIdent            // identifiers and keywords alike; the parser tells them apart
	tokParam            // @name; text holds the "@"
	tokNumber           // text holds the literal as written
	tokString           // value holds the decoded string
	tokPunct            // operators and punctuation
)

type token struct {
	kind  tokenKind
	text  string // the source text of the token
	value string // decoded contents of a string literal
	pos   int    // byte offset of the token's first character
}

// describe names a token for error messages.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of query"
	case tokString:
		return "string " + t.text
	case tokNumber:
		return "number " + t.text
	default:
		return strconv.Quote(t.text)
	}
}

// tokenize splits the whole query up front, so the parser can look ahead
// freely and a lexical error is reported before any parsing.
func tokenize(text string) ([]token, error) {
	lx := lexer{src: text}
	var toks []token
	for {
		tok, err := lx.next()
		if err != nil {
			return nil, err
		}
		toks = append(toks, tok)
		if tok.kind == tokEOF {
			return toks, nil
		}
	}
}

type lexer struct {
	src string
	pos int
}

func (lx *lexer) next() (token, error) {
	lx.skipSpace()
	if lx.pos >= len(lx.src) {
		return token{kind: tokEOF, pos: lx.pos}, nil
	}
	c := lx.src[lx.pos]
	switch {
	case isIdentStart(c):
		return lx.identifier(), nil
	case isDigit(c):
		return lx.number()
	case c == '@':
		return lx.parameter()
	case c == '"' || c == '\'':
		return lx.stringLiteral(c)
	default:
		return lx.punctuation()
	}
}

func (lx *lexer) skipSpace() {
	for lx.pos < len(lx.src) {
		switch lx.src[lx.pos] {
		case ' ', '\t', '\r', '\n', '\f', '\v':
			lx.pos++
		default:
			return
		}
	}
}

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (lx *lexer) identifier() token {
	start := lx.pos
	for lx.pos < len(lx.src) && isIdentPart(lx.src[lx.pos]) {
		lx.pos++
	}
	return token{kind: tokIdent, text: lx.src[start:lx.pos], pos: start}
}

func (lx *lexer) parameter() (token, error) {
	start := lx.pos
	lx.pos++ // '@'
	if lx.pos >= len(lx.src) || !isIdentStart(lx.src[lx.pos]) {
		return token{}, syntaxErrorf(start, "expected a parameter name after '@'")
	}
	name := lx.identifier()
	return token{kind: tokParam, text: "@" + name.text, pos: start}, nil
}

// number lexes DIGIT+ ('.' DIGIT*)? (E [+-]? DIGIT+)?, the unsigned form of
// the grammar's NUMERIC_LITERAL; signs are unary operators here.
func (lx *lexer) number() (token, error) {
	start := lx.pos
	lx.digits()
	if lx.peekByte() == '.' {
		lx.pos++
		lx.digits()
	}
	if c := lx.peekByte(); c == 'e' || c == 'E' {
		lx.pos++
		if c := lx.peekByte(); c == '+' || c == '-' {
			lx.pos++
		}
		if !isDigit(lx.peekByte()) {
			return token{}, syntaxErrorf(lx.pos, "expected digits in the exponent of number %s", lx.src[start:lx.pos])
		}
		lx.digits()
	}
	return token{kind: tokNumber, text: lx.src[start:lx.pos], pos: start}, nil
}

func (lx *lexer) digits() {
	for isDigit(lx.peekByte()) {
		lx.pos++
	}
}

// peekByte returns 0 at the end of input, which matches no token class.
func (lx *lexer) peekByte() byte {
	if lx.pos < len(lx.src) {
		return lx.src[lx.pos]
	}
	return 0
}

func (lx *lexer) stringLiteral(quote byte) (token, error) {
	start := lx.pos
	lx.pos++ // opening quote
	var b strings.Builder
	for {
		if lx.pos >= len(lx.src) {
			return token{}, syntaxErrorf(start, "unterminated string literal")
		}
		c := lx.src[lx.pos]
		switch {
		case c == quote:
			lx.pos++
			return token{kind: tokString, text: lx.src[start:lx.pos], value: b.String(), pos: start}, nil
		case c == '\\':
			if err := lx.escape(&b); err != nil {
				return token{}, err
			}
		case c < 0x20:
			// The grammar excludes control characters from string literals.
			return token{}, syntaxErrorf(lx.pos, "control character %q in string literal; use an escape sequence", rune(c))
		default:
			r, size := utf8.DecodeRuneInString(lx.src[lx.pos:])
			b.WriteRune(r)
			lx.pos += size
		}
	}
}

// escape decodes one backslash sequence: the JSON escapes, plus \' because
// single-quoted literals need it.
func (lx *lexer) escape(b *strings.Builder) error {
	start := lx.pos
	lx.pos++ // backslash
	if lx.pos >= len(lx.src) {
		return syntaxErrorf(start, "unterminated escape sequence")
	}
	c := lx.src[lx.pos]
	lx.pos++
	switch c {
	case '"', '\'', '\\', '/':
		b.WriteByte(c)
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		r, err := lx.unicodeEscape(start)
		if err != nil {
			return err
		}
		b.WriteRune(r)
	default:
		return syntaxErrorf(start, "invalid escape sequence \\%c", c)
	}
	return nil
}

// unicodeEscape reads the XXXX of \uXXXX (the "\u" is consumed), joining a
// following \uXXXX low surrogate into one code point.
func (lx *lexer) unicodeEscape(start int) (rune, error) {
	r, ok := lx.hex4()
	if !ok {
		return 0, syntaxErrorf(start, "expected four hex digits after \\u")
	}
	if utf16.IsSurrogate(r) && strings.HasPrefix(lx.src[lx.pos:], `\u`) {
		save := lx.pos
		lx.pos += 2
		if low, ok := lx.hex4(); ok {
			if joined := utf16.DecodeRune(r, low); joined != utf8.RuneError {
				return joined, nil
			}
		}
		lx.pos = save
	}
	return r, nil
}

func (lx *lexer) hex4() (rune, bool) {
	if lx.pos+4 > len(lx.src) {
		return 0, false
	}
	n, err := strconv.ParseUint(lx.src[lx.pos:lx.pos+4], 16, 32)
	if err != nil {
		return 0, false
	}
	lx.pos += 4
	return rune(n), true
}

// punctuation matches the longest operator at the current position.
func (lx *lexer) punctuation() (token, error) {
	start := lx.pos
	rest := lx.src[lx.pos:]
	for _, op := range []string{">>>", "<<", ">>"} {
		if strings.HasPrefix(rest, op) {
			return token{}, syntaxErrorf(start, "bitwise operator %q is not supported", op)
		}
	}
	for _, op := range []string{"??", "!=", "<>", "<=", ">=", "||"} {
		if strings.HasPrefix(rest, op) {
			lx.pos += len(op)
			return token{kind: tokPunct, text: op, pos: start}, nil
		}
	}
	c := rest[0]
	switch c {
	case '(', ')', '[', ']', '{', '}', ',', '.', ':', '?', '=', '<', '>', '+', '-', '*', '/', '%':
		lx.pos++
		return token{kind: tokPunct, text: string(c), pos: start}, nil
	case '&', '|', '^', '~':
		return token{}, syntaxErrorf(start, "bitwise operator %q is not supported", string(c))
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return token{}, syntaxErrorf(start, "unexpected character %s", quoteRune(r))
}

func quoteRune(r rune) string { return fmt.Sprintf("%q", r) }
