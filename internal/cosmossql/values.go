package cosmossql

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// undefinedValue is the Cosmos "undefined": a missing property, or the result
// of an operation on mismatched types. It never appears in results: projections
// omit it and SELECT VALUE drops it.
type undefinedValue struct{}

// kind classifies a value. The order of the constants is the Cosmos
// cross-type sort order used by ORDER BY (undefined < null < boolean < number
// < string < array < object; arrays and objects after strings as in
// azure-cosmos-dotnet-v3 PR #853).
type kind int

const (
	kindUndefined kind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// kindOf classifies any value. Go types that JSON cannot produce count as
// undefined rather than panicking; parameters are normalized before use, so
// only odd documents can hold them.
func kindOf(v any) kind {
	switch v := v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBool
	case string:
		return kindString
	case []any:
		return kindArray
	case map[string]any:
		return kindObject
	case json.Number:
		if _, ok := numberOf(v); ok {
			return kindNumber
		}
		return kindUndefined
	case float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return kindNumber
	default:
		return kindUndefined
	}
}

func isUndefined(v any) bool { return kindOf(v) == kindUndefined }

// numberOf returns a numeric value as the IEEE double Cosmos would store.
func numberOf(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		if f, ok := smallInteger(string(n)); ok {
			return f, true
		}
		f, err := strconv.ParseFloat(string(n), 64)
		return f, err == nil && !math.IsInf(f, 0)
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	case float32:
		return numberOf(float64(n))
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	}
	return 0, false
}

// smallInteger reads an integer of at most 15 digits (an optional minus
// sign before them), the common number in documents (times, counters),
// without strconv.ParseFloat, which dominated query evaluation: every such
// integer is below 2^53, so the double is exact and equal to ParseFloat's.
func smallInteger(s string) (float64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 15 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	f := float64(n)
	if len(digits) < len(s) {
		f = -f
	}
	return f, true
}

// makeNumber turns a computed double into a result value: json.Number, or
// undefined when the double cannot be written as JSON (1/0, for example).
func makeNumber(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return undefinedValue{}
	}
	return json.Number(formatNumber(f))
}

// formatNumber writes a double the way JavaScript and encoding/json do:
// integral values without ".0" (Cosmos returns 3, not 3.0), exponents only
// for very large or very small magnitudes.
func formatNumber(f float64) string {
	if f == 0 {
		return "0" // also turns -0 into 0
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	s := strconv.FormatFloat(f, format, -1, 64)
	if format == 'e' {
		// strconv writes e-07; JavaScript writes e-7.
		n := len(s)
		if n >= 4 && s[n-4] == 'e' && s[n-3] == '-' && s[n-2] == '0' {
			s = s[:n-2] + s[n-1:]
		}
	}
	return s
}

// compareScalars orders two values of the same scalar kind (null, boolean,
// number or string); strings compare ordinally.
func compareScalars(a, b any, k kind) int {
	switch k {
	case kindBool:
		ab, bb := a.(bool), b.(bool)
		switch {
		case ab == bb:
			return 0
		case !ab:
			return -1
		default:
			return 1
		}
	case kindNumber:
		af, _ := numberOf(a)
		bf, _ := numberOf(b)
		switch {
		case af < bf:
			return -1
		case af > bf:
			return 1
		default:
			return 0
		}
	case kindString:
		return strings.Compare(a.(string), b.(string))
	default: // null: all nulls are equal
		return 0
	}
}

// deepEqual is Cosmos equality on two defined values: same kind, and equal
// content; numbers numerically, objects regardless of key order.
func deepEqual(a, b any) bool {
	ka, kb := kindOf(a), kindOf(b)
	if ka != kb || ka == kindUndefined {
		return false
	}
	switch ka {
	case kindArray:
		return arraysEqual(a.([]any), b.([]any))
	case kindObject:
		return objectsEqual(a.(map[string]any), b.(map[string]any))
	default:
		return compareScalars(a, b, ka) == 0
	}
}

func arraysEqual(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !deepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func objectsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || !deepEqual(av, bv) {
			return false
		}
	}
	return true
}

// orderCompare is the ORDER BY comparison: first by kind in the Cosmos
// cross-type order, then by value. Cosmos orders arrays and objects by hash,
// an order no caller can rely on, so they compare equal here and the stable
// sort keeps them in input order.
func orderCompare(a, b any) int {
	ka, kb := kindOf(a), kindOf(b)
	if ka != kb {
		return int(ka) - int(kb)
	}
	if ka == kindArray || ka == kindObject || ka == kindUndefined {
		return 0
	}
	return compareScalars(a, b, ka)
}

// canonicalKey writes a value so that two values get the same key exactly
// when deepEqual holds; DISTINCT uses it to deduplicate in linear time.
func canonicalKey(b *strings.Builder, v any) {
	k := kindOf(v)
	b.WriteByte(byte('0' + k))
	switch k {
	case kindBool:
		b.WriteString(strconv.FormatBool(v.(bool)))
	case kindNumber:
		f, _ := numberOf(v)
		b.WriteString(formatNumber(f))
	case kindString:
		b.WriteString(strconv.Quote(v.(string)))
	case kindArray:
		b.WriteByte('[')
		for _, e := range v.([]any) {
			canonicalKey(b, e)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case kindObject:
		m := v.(map[string]any)
		b.WriteByte('{')
		for _, key := range sortedKeys(m) {
			b.WriteString(strconv.Quote(key))
			b.WriteByte(':')
			canonicalKey(b, m[key])
			b.WriteByte(',')
		}
		b.WriteByte('}')
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalizeValue converts a parameter value into the shapes encoding/json
// produces with UseNumber, so that evaluation and results see one
// representation whatever Go types the caller passed.
func normalizeValue(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string:
		return v, nil
	case json.Number:
		if _, ok := numberOf(v); !ok {
			return nil, fmt.Errorf("%q is not a valid number", string(v))
		}
		return v, nil
	case float64, float32:
		f, ok := numberOf(v)
		if !ok {
			return nil, fmt.Errorf("%v cannot be represented in JSON", v)
		}
		return json.Number(formatNumber(f)), nil
	case int, int8, int16, int32, int64:
		return json.Number(fmt.Sprint(v)), nil
	case uint, uint8, uint16, uint32, uint64:
		return json.Number(fmt.Sprint(v)), nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			n, err := normalizeValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			n, err := normalizeValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	default:
		return normalizeViaJSON(v)
	}
}

// normalizeViaJSON handles any other Go value ([]string, structs, ...) the
// way the gateway would see it: as its JSON encoding.
func normalizeViaJSON(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
