package cosmossql

import (
	"encoding/json"
	"math"
	"strings"
	"unicode/utf16"
)

// builtin is a system function. Argument counts are checked at parse time;
// call receives already evaluated arguments and returns undefined for
// arguments of the wrong type, as Cosmos system functions do.
type builtin struct {
	name             string
	minArgs, maxArgs int
	call             func(args []any) any
}

// lookupBuiltin finds a system function by its upper-case name.
func lookupBuiltin(name string) (builtin, bool) {
	switch name {
	case "IS_DEFINED":
		return builtin{name, 1, 1, func(a []any) any { return !isUndefined(a[0]) }}, true
	case "IS_NULL":
		return isKind(name, kindNull), true
	case "IS_STRING":
		return isKind(name, kindString), true
	case "IS_NUMBER":
		return isKind(name, kindNumber), true
	case "IS_BOOL":
		return isKind(name, kindBool), true
	case "IS_ARRAY":
		return isKind(name, kindArray), true
	case "IS_OBJECT":
		return isKind(name, kindObject), true
	case "IS_PRIMITIVE":
		return builtin{name, 1, 1, isPrimitive}, true
	case "ARRAY_CONTAINS":
		return builtin{name, 2, 3, arrayContains}, true
	case "ARRAY_LENGTH":
		return builtin{name, 1, 1, arrayLength}, true
	case "STARTSWITH":
		return stringPredicate(name, strings.HasPrefix), true
	case "ENDSWITH":
		return stringPredicate(name, strings.HasSuffix), true
	case "CONTAINS":
		return stringPredicate(name, strings.Contains), true
	case "LENGTH":
		return builtin{name, 1, 1, stringLength}, true
	case "LOWER":
		return stringMapper(name, strings.ToLower), true
	case "UPPER":
		return stringMapper(name, strings.ToUpper), true
	case "CONCAT":
		return builtin{name, 2, math.MaxInt, concat}, true
	case "SUBSTRING":
		return builtin{name, 3, 3, substring}, true
	case "INDEX_OF":
		return builtin{name, 2, 3, indexOf}, true
	case "TOSTRING":
		return builtin{name, 1, 1, toString}, true
	case "ABS":
		return numberMapper(name, math.Abs), true
	case "FLOOR":
		return numberMapper(name, math.Floor), true
	case "CEILING":
		return numberMapper(name, math.Ceil), true
	}
	return builtin{}, false
}

// isAggregate reports whether an upper-case function name is an aggregate.
func isAggregate(name string) bool {
	switch name {
	case "COUNT", "SUM", "MIN", "MAX", "AVG":
		return true
	}
	return false
}

// isKind builds a type-check function; they are always true or false, never
// undefined, so NOT IS_DEFINED(c.x) works on missing properties.
func isKind(name string, k kind) builtin {
	return builtin{name, 1, 1, func(a []any) any { return kindOf(a[0]) == k }}
}

func isPrimitive(a []any) any {
	switch kindOf(a[0]) {
	case kindNull, kindBool, kindNumber, kindString:
		return true
	}
	return false
}

// arrayContains matches elements by equality, or with partial = true, an
// object element that has at least the properties of the searched object.
func arrayContains(a []any) any {
	arr, ok := a[0].([]any)
	if !ok {
		return undefinedValue{}
	}
	partial := false
	if len(a) == 3 {
		if partial, ok = a[2].(bool); !ok {
			return undefinedValue{}
		}
	}
	for _, elem := range arr {
		if deepEqual(elem, a[1]) || (partial && partialMatch(elem, a[1])) {
			return true
		}
	}
	return false
}

func partialMatch(elem, wanted any) bool {
	e, eok := elem.(map[string]any)
	w, wok := wanted.(map[string]any)
	if !eok || !wok {
		return false
	}
	for k, wv := range w {
		ev, ok := e[k]
		if !ok || !deepEqual(ev, wv) {
			return false
		}
	}
	return true
}

func arrayLength(a []any) any {
	arr, ok := a[0].([]any)
	if !ok {
		return undefinedValue{}
	}
	return makeNumber(float64(len(arr)))
}

// stringPredicate builds STARTSWITH, ENDSWITH and CONTAINS with their
// optional ignoreCase argument.
func stringPredicate(name string, test func(s, sub string) bool) builtin {
	return builtin{name, 2, 3, func(a []any) any {
		s, sok := a[0].(string)
		sub, subok := a[1].(string)
		if !sok || !subok {
			return undefinedValue{}
		}
		if len(a) == 3 {
			ignoreCase, ok := a[2].(bool)
			if !ok {
				return undefinedValue{}
			}
			if ignoreCase {
				s, sub = strings.ToLower(s), strings.ToLower(sub)
			}
		}
		return test(s, sub)
	}}
}

func stringMapper(name string, f func(string) string) builtin {
	return builtin{name, 1, 1, func(a []any) any {
		s, ok := a[0].(string)
		if !ok {
			return undefinedValue{}
		}
		return f(s)
	}}
}

func numberMapper(name string, f func(float64) float64) builtin {
	return builtin{name, 1, 1, func(a []any) any {
		if kindOf(a[0]) != kindNumber {
			return undefinedValue{}
		}
		n, _ := numberOf(a[0])
		return makeNumber(f(n))
	}}
}

// stringLength counts UTF-16 code units, as Cosmos (a .NET and JavaScript
// engine) does; SUBSTRING and INDEX_OF use the same units.
func stringLength(a []any) any {
	s, ok := a[0].(string)
	if !ok {
		return undefinedValue{}
	}
	return makeNumber(float64(len(utf16.Encode([]rune(s)))))
}

func concat(a []any) any {
	var b strings.Builder
	for _, v := range a {
		s, ok := v.(string)
		if !ok {
			return undefinedValue{}
		}
		b.WriteString(s)
	}
	return b.String()
}

// substring takes a zero-based start and a length, clamped to the string.
func substring(a []any) any {
	s, ok := a[0].(string)
	if !ok || kindOf(a[1]) != kindNumber || kindOf(a[2]) != kindNumber {
		return undefinedValue{}
	}
	units := utf16.Encode([]rune(s))
	start, _ := numberOf(a[1])
	length, _ := numberOf(a[2])
	from := clampIndex(start, len(units))
	to := clampIndex(math.Trunc(start)+math.Trunc(length), len(units))
	if to <= from {
		return ""
	}
	return string(utf16.Decode(units[from:to]))
}

// clampIndex truncates f and clamps it into [0, n] without overflowing int.
func clampIndex(f float64, n int) int {
	f = math.Trunc(f)
	switch {
	case f <= 0:
		return 0
	case f >= float64(n):
		return n
	default:
		return int(f)
	}
}

// indexOf returns the UTF-16 offset of the first occurrence at or after the
// optional start, or -1.
func indexOf(a []any) any {
	s, sok := a[0].(string)
	sub, subok := a[1].(string)
	if !sok || !subok {
		return undefinedValue{}
	}
	units := utf16.Encode([]rune(s))
	subUnits := utf16.Encode([]rune(sub))
	from := 0
	if len(a) == 3 {
		if kindOf(a[2]) != kindNumber {
			return undefinedValue{}
		}
		start, _ := numberOf(a[2])
		from = clampIndex(start, len(units))
	}
	for i := from; i+len(subUnits) <= len(units); i++ {
		if equalUnits(units[i:i+len(subUnits)], subUnits) {
			return makeNumber(float64(i))
		}
	}
	return makeNumber(-1)
}

func equalUnits(a, b []uint16) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// toString writes numbers in their JSON form, and arrays and objects as
// compact JSON.
func toString(a []any) any {
	switch kindOf(a[0]) {
	case kindUndefined:
		return undefinedValue{}
	case kindString:
		return a[0]
	case kindNumber:
		n, _ := numberOf(a[0])
		return formatNumber(n)
	case kindBool:
		if a[0].(bool) {
			return "true"
		}
		return "false"
	case kindNull:
		return "null"
	default:
		raw, err := json.Marshal(a[0])
		if err != nil {
			return undefinedValue{}
		}
		return string(raw)
	}
}
