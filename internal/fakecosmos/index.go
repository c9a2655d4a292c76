package fakecosmos

import (
	"slices"
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
	for k, v := range body {
		if !slices.Contains(systemProperties, k) {
			n += p.termsBelow([]string{k}, v)
		}
	}
	for _, ci := range p.composites {
		if compositeCovers(ci, body) {
			n++
		}
	}
	return n
}

func (p indexPolicy) termsBelow(path []string, v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			n += p.termsBelow(append(slices.Clip(path), k), child)
		}
	case []any:
		for _, child := range v {
			n += p.termsBelow(append(slices.Clip(path), "[]"), child)
		}
	default:
		if p.indexes(path) {
			n++
		}
	}
	return n
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
