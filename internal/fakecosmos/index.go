package fakecosmos

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// indexPolicy is the container's indexing policy as the RU model and the
// ORDER BY checks read it: which property paths the range index covers,
// and the composite indexes. The fake keeps no range index: it evaluates
// what one would, to charge and refuse as the service does (doc.go,
// Request units); its value index (valueindex.go) only spares it work.
type indexPolicy struct {
	none       bool       // indexingMode "none": nothing is indexed
	rules      []pathRule // included and excluded paths
	composites [][]compositePath
}

// pathRule is one included or excluded path: segments, then "?" (the
// scalar at exactly that path) or "*" (everything at or below it).
type pathRule struct {
	segs     []string
	scalar   bool
	included bool
}

// alwaysIndexed are the system properties the service indexes whatever the
// policy says (with consistent indexing).
var alwaysIndexed = []string{"id", "_ts"}

// systemProperties are stored with every document but are not indexed.
var systemProperties = []string{"_rid", "_self", "_etag", "_attachments"}

// indexes reports whether the range index covers the scalar values at path
// (array elements as "[]"): the most precise matching rule decides (more
// segments, then "?" before "*", then excluded before included), as the
// service resolves overlapping included and excluded paths.
func (p indexPolicy) indexes(path []string) bool {
	if p.none {
		return false
	}
	if len(path) == 1 && slices.Contains(alwaysIndexed, path[0]) {
		return true
	}
	var best *pathRule
	for i := range p.rules {
		r := &p.rules[i]
		if r.matches(path) && (best == nil || r.moreExact(best)) {
			best = r
		}
	}
	return best != nil && best.included
}

func (r pathRule) matches(path []string) bool {
	if r.scalar && len(path) != len(r.segs) || len(path) < len(r.segs) {
		return false
	}
	for i, s := range r.segs {
		if s != path[i] && !(s == "[]" && isArrayIndex(path[i])) {
			return false
		}
	}
	return true
}

func (r *pathRule) moreExact(than *pathRule) bool {
	if len(r.segs) != len(than.segs) {
		return len(r.segs) > len(than.segs)
	}
	if r.scalar != than.scalar {
		return r.scalar
	}
	return !r.included && than.included
}

// isArrayIndex: a query's c.arr[0] names an array element, which the
// policy writes as /arr/[]/?.
func isArrayIndex(seg string) bool {
	if seg == "[]" {
		return true
	}
	return seg != "" && strings.Trim(seg, "0123456789") == ""
}

// indexedTerms counts the index entries a write of body adds: each scalar
// value at an indexed path (each array element counting), and each
// composite index whose paths body all has. Write charges grow with it.
func (p indexPolicy) indexedTerms(body map[string]any) int {
	if p.none {
		return 0
	}
	n := 0
	p.eachTerm(body, func([]string, any) { n++ })
	for _, ci := range p.composites {
		if compositeCovers(ci, body) {
			n++
		}
	}
	return n
}

// changedTerms counts the index entries that overwriting old with next
// removes or adds: the two documents' terms compared as (path, value)
// multisets, composite tuples included, so a property whose value changes
// counts twice (its old entry out, its new one in). _ts is left out: every
// write rewrites it, and counting it would make a replace's charge depend on
// whether a second ticked since the last write.
func (p indexPolicy) changedTerms(old, next map[string]any) int {
	if p.none {
		return 0
	}
	left := p.termKeys(old)
	added := 0
	for k, n := range p.termKeys(next) {
		kept := min(n, left[k])
		left[k] -= kept
		added += n - kept
	}
	removed := 0
	for _, n := range left {
		removed += n
	}
	return added + removed
}

// termKeys lists body's index entries (but _ts's) as comparable keys: the
// path and the value, or the composite index and its tuple.
func (p indexPolicy) termKeys(body map[string]any) map[string]int {
	keys := make(map[string]int)
	p.eachTerm(body, func(path []string, v any) {
		if !(len(path) == 1 && path[0] == "_ts") {
			keys[strings.Join(path, "/")+"="+termValueKey(v)]++
		}
	})
	for i, ci := range p.composites {
		if compositeCovers(ci, body) {
			k := "composite " + strconv.Itoa(i)
			for _, m := range ci {
				v, _ := lookupPath(body, m.path)
				k += "|" + termValueKey(v)
			}
			keys[k]++
		}
	}
	return keys
}

// termValueKey tells values of different JSON types apart ("1" from 1).
func termValueKey(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	default:
		return string(encodeJSON(v))
	}
}

// eachTerm calls visit for each scalar of body at a path the range index
// covers (system properties aside; array elements as "[]").
func (p indexPolicy) eachTerm(body map[string]any, visit func(path []string, v any)) {
	if p.none {
		return
	}
	for k, v := range body {
		if !slices.Contains(systemProperties, k) {
			p.termsBelow([]string{k}, v, visit)
		}
	}
}

func (p indexPolicy) termsBelow(path []string, v any, visit func([]string, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			p.termsBelow(append(slices.Clip(path), k), child, visit)
		}
	case []any:
		for _, child := range v {
			p.termsBelow(append(slices.Clip(path), "[]"), child, visit)
		}
	default:
		if p.indexes(path) {
			visit(path, v)
		}
	}
}

func compositeCovers(ci []compositePath, body map[string]any) bool {
	for _, m := range ci {
		if _, ok := lookupPath(body, m.path); !ok {
			return false
		}
	}
	return true
}

func lookupPath(body map[string]any, path []string) (any, bool) {
	var v any = body
	for _, seg := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[seg]; !ok {
			return nil, false
		}
	}
	return v, true
}

// parseIndexPath reads an included or excluded path: "/" then segments
// (names, "quoted names" or [] for array elements), ending in "/?" or "/*";
// "/*" alone is the root. ok is false for anything else, which the service
// refuses.
func parseIndexPath(path string) (pathRule, bool) {
	var r pathRule
	switch {
	case path == "/*":
		return r, true
	case strings.HasSuffix(path, "/?"):
		r.scalar = true
	case !strings.HasSuffix(path, "/*"):
		return r, false
	}
	body := strings.TrimPrefix(path[:len(path)-2], "/")
	if !strings.HasPrefix(path, "/") || body == "" {
		return r, false
	}
	for _, seg := range strings.Split(body, "/") {
		if unquoted, ok := strings.CutPrefix(seg, `"`); ok {
			seg, ok = strings.CutSuffix(unquoted, `"`)
			if !ok {
				return r, false
			}
		}
		if seg == "" || strings.ContainsAny(seg, `*?"`) {
			return r, false
		}
		r.segs = append(r.segs, seg)
	}
	return r, true
}
