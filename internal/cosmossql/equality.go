package cosmossql

import "strings"

// What a hash index needs: a key per value such that two values get the
// same key exactly when Cosmos equality (=) holds between them, and the key
// an equality term's constant has. A document whose value at the term's path
// has another key (or none) cannot satisfy the term.

// ValueKey is v's key for equality: numbers by value (1 and 1.0 share one),
// strings exactly, arrays and objects by content. Undefined has no key: it
// equals nothing, not even itself.
func ValueKey(v any) (string, bool) {
	if isUndefined(v) {
		return "", false
	}
	var b strings.Builder
	canonicalKey(&b, v)
	return b.String(), true
}

// EqualityKey is the ValueKey of the constant an equality term (path =
// constant, either side) compares its Path with; false for any other term,
// and for a constant that evaluates to undefined (the term holds for no
// document).
func (b *Bound) EqualityKey(t Term) (string, bool) {
	e, ok := t.expr.(*binaryExpr)
	if t.Kind != TermEquality || !ok || e.op != "=" {
		return "", false
	}
	side := e.right
	if !constant(side) {
		side = e.left
	}
	return ValueKey(side.eval(&env{params: b.params}))
}
