package cosmossql

import "fmt"

// SyntaxError reports a query that cannot be parsed, or that uses a part of
// the language this package does not support. The fake answers it with 400.
type SyntaxError struct {
	Pos int    // byte offset into the query text
	Msg string // what was expected, or what is not supported
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("syntax error at position %d: %s", e.Pos, e.Msg)
}

// EvalError reports a query that parsed but cannot run with the given
// parameters, or that uses a feature only parsed (GROUP BY).
type EvalError struct {
	Param string // the parameter at fault, with its "@", if any
	Msg   string
}

func (e *EvalError) Error() string {
	return "query evaluation failed: " + e.Msg
}

func syntaxErrorf(pos int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}
