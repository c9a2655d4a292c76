package cosmossql

import "math"

func (e *literalExpr) eval(*env) any { return e.value }

func (e *paramExpr) eval(env *env) any {
	if v, ok := env.params[e.name]; ok {
		return v
	}
	return undefinedValue{} // unreachable: Run and Matches check parameters first
}

func (e *rootRef) eval(env *env) any { return env.root }

func (e *memberExpr) eval(env *env) any {
	return property(e.target.eval(env), e.name)
}

func (e *indexExpr) eval(env *env) any {
	target := e.target.eval(env)
	index := e.index.eval(env)
	switch kindOf(index) {
	case kindString:
		return property(target, index.(string))
	case kindNumber:
		return element(target, index)
	default:
		return undefinedValue{}
	}
}

// property reads a property of an object; anything else has no properties.
func property(target any, name string) any {
	obj, ok := target.(map[string]any)
	if !ok {
		return undefinedValue{}
	}
	v, ok := obj[name]
	if !ok {
		return undefinedValue{}
	}
	return v
}

// element reads an array element at an integral, in-range index.
func element(target any, index any) any {
	arr, ok := target.([]any)
	if !ok {
		return undefinedValue{}
	}
	f, _ := numberOf(index)
	if f != math.Trunc(f) || f < 0 || f >= float64(len(arr)) {
		return undefinedValue{}
	}
	return arr[int(f)]
}

func (e *unaryExpr) eval(env *env) any {
	v := e.operand.eval(env)
	switch e.op {
	case "NOT":
		return not(v)
	case "-":
		if f, ok := numberOf(v); ok && kindOf(v) == kindNumber {
			return makeNumber(-f)
		}
	case "+":
		if kindOf(v) == kindNumber {
			return v
		}
	}
	return undefinedValue{}
}

func (e *binaryExpr) eval(env *env) any {
	switch e.op {
	case "AND":
		return and(e.left.eval(env), func() any { return e.right.eval(env) })
	case "OR":
		return or(e.left.eval(env), func() any { return e.right.eval(env) })
	}
	left, right := e.left.eval(env), e.right.eval(env)
	switch e.op {
	case "=", "!=", "<", "<=", ">", ">=":
		return compare(e.op, left, right)
	case "||":
		return concatStrings(left, right)
	default:
		return arithmetic(e.op, left, right)
	}
}

// boolOf reads a logical operand; Cosmos treats any non-boolean as undefined.
func boolOf(v any) (value, ok bool) {
	b, ok := v.(bool)
	return b, ok
}

// and follows the Cosmos truth table: false wins over undefined, so the
// right side is not needed once the left is false.
func and(left any, right func() any) any {
	l, lok := boolOf(left)
	if lok && !l {
		return false
	}
	r, rok := boolOf(right())
	switch {
	case rok && !r:
		return false
	case lok && rok:
		return true
	default:
		return undefinedValue{}
	}
}

// or follows the Cosmos truth table: true wins over undefined.
func or(left any, right func() any) any {
	l, lok := boolOf(left)
	if lok && l {
		return true
	}
	r, rok := boolOf(right())
	switch {
	case rok && r:
		return true
	case lok && rok:
		return false
	default:
		return undefinedValue{}
	}
}

func not(v any) any {
	if b, ok := boolOf(v); ok {
		return !b
	}
	return undefinedValue{}
}

// compare implements = != < <= > >=. Per the Cosmos equality table, values
// of different kinds, or undefined, compare as undefined. = compares arrays
// and objects deeply; the ordering operators and != give undefined on them,
// as the Microsoft Learn page on equality and comparison operators says.
func compare(op string, left, right any) any {
	k := kindOf(left)
	if k == kindUndefined || k != kindOf(right) {
		return undefinedValue{}
	}
	if op == "=" {
		return deepEqual(left, right)
	}
	if k == kindArray || k == kindObject {
		return undefinedValue{}
	}
	c := compareScalars(left, right, k)
	switch op {
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	default: // ">="
		return c >= 0
	}
}

func concatStrings(left, right any) any {
	l, lok := left.(string)
	r, rok := right.(string)
	if !lok || !rok {
		return undefinedValue{}
	}
	return l + r
}

// arithmetic needs two numbers; anything else, and results JSON cannot hold
// (division by zero), are undefined.
func arithmetic(op string, left, right any) any {
	if kindOf(left) != kindNumber || kindOf(right) != kindNumber {
		return undefinedValue{}
	}
	l, _ := numberOf(left)
	r, _ := numberOf(right)
	switch op {
	case "+":
		return makeNumber(l + r)
	case "-":
		return makeNumber(l - r)
	case "*":
		return makeNumber(l * r)
	case "/":
		return makeNumber(l / r)
	default: // "%": the sign follows the dividend, as in JavaScript
		return makeNumber(math.Mod(l, r))
	}
}

// eval of IN is the OR of the equalities, so an operand that matches nothing
// gives false, or undefined if some comparison was undefined.
func (e *inExpr) eval(env *env) any {
	operand := e.operand.eval(env)
	var result any = false
	for _, item := range e.list {
		eq := compare("=", operand, item.eval(env))
		result = or(result, func() any { return eq })
		if result == true {
			break
		}
	}
	if e.negated {
		return not(result)
	}
	return result
}

func (e *betweenExpr) eval(env *env) any {
	operand := e.operand.eval(env)
	result := and(compare(">=", operand, e.low.eval(env)), func() any {
		return compare("<=", operand, e.high.eval(env))
	})
	if e.negated {
		return not(result)
	}
	return result
}

func (e *likeExpr) eval(env *env) any {
	s, sok := e.operand.eval(env).(string)
	pattern, pok := e.pattern.eval(env).(string)
	if !sok || !pok {
		return undefinedValue{}
	}
	matched := likeMatch(s, pattern, e.escape, e.hasEscape)
	if e.negated {
		return !matched
	}
	return matched
}

// eval of the ternary takes the false branch for anything but true, which is
// what the "bool_expr evaluates to true" wording of the docs implies for
// undefined conditions.
func (e *conditionalExpr) eval(env *env) any {
	if e.cond.eval(env) == true {
		return e.ifTrue.eval(env)
	}
	return e.ifFalse.eval(env)
}

// eval of ?? replaces only undefined: null is a defined value.
func (e *coalesceExpr) eval(env *env) any {
	if v := e.left.eval(env); !isUndefined(v) {
		return v
	}
	return e.right.eval(env)
}

func (e *callExpr) eval(env *env) any {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		args[i] = a.eval(env)
	}
	return e.fn.call(args)
}

// eval of an aggregate reads what the aggregation pass computed; outside it
// (which validation rules out) undefined keeps it harmless.
func (e *aggregateExpr) eval(env *env) any {
	if v, ok := env.aggregates[e]; ok {
		return v
	}
	return undefinedValue{}
}

// eval of an array literal drops undefined items, which JSON cannot hold.
func (e *arrayExpr) eval(env *env) any {
	out := make([]any, 0, len(e.items))
	for _, item := range e.items {
		if v := item.eval(env); !isUndefined(v) {
			out = append(out, v)
		}
	}
	return out
}

// eval of an object literal omits undefined properties, as projections do.
func (e *objectExpr) eval(env *env) any {
	out := make(map[string]any, len(e.keys))
	for i, key := range e.keys {
		if v := e.values[i].eval(env); !isUndefined(v) {
			out[key] = v
		}
	}
	return out
}
