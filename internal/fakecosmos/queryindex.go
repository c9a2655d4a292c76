package fakecosmos

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/duroxide-go/cdb/internal/cosmossql"
)

// indexUse is how the service's index would serve a query: which documents
// it hands to the query engine (those satisfying the seek terms, or all on a
// full scan) and in what order. A query is charged for each document handed
// over, whether the rest of the WHERE clause (the residual terms) keeps it or
// not, and for the bytes it returns; the results never depend on it.
//
//   - ORDER BY walks its index (the composite index, or the path's range
//     index) in order: equality terms on a leading run of the ORDER BY paths,
//     then a range term on the next path, bound the walk; TOP, OFFSET/LIMIT
//     and the page size end it early. Other terms are residual, even on
//     indexed paths: the index being walked does not hold them.
//   - Otherwise every equality, range or lookup term on indexed paths selects
//     from the range index (intersected); with no such term, a full scan of
//     the scope.
type indexUse struct {
	bound    *cosmossql.Bound
	seek     []cosmossql.Term
	ordered  bool
	fullScan bool
}

// planIndexUse decides how c's index serves qr (nil for a read feed, which
// reads every document). Call with c.mu held.
func (c *container) planIndexUse(qr *queryRequest) (*indexUse, error) {
	if qr == nil {
		return &indexUse{fullScan: true}, nil
	}
	bound, err := qr.query.Bind(qr.params)
	if err != nil {
		return nil, badRequest("The query could not be evaluated: %v", err)
	}
	use := &indexUse{bound: bound}
	terms := qr.query.Terms()
	if order := qr.query.OrderBy(); len(order) > 0 && !c.index.none {
		use.ordered = true
		use.seek = orderSeek(terms, order)
		return use, nil
	}
	for _, t := range terms {
		if t.Kind != cosmossql.TermResidual && len(t.Paths) > 0 && !slices.ContainsFunc(t.Paths, func(p []string) bool { return !c.index.indexes(p) }) {
			use.seek = append(use.seek, t)
		}
	}
	use.fullScan = len(use.seek) == 0
	return use, nil
}

// orderSeek picks the terms that bound a walk of the ORDER BY's index.
func orderSeek(terms []cosmossql.Term, order []cosmossql.OrderItem) []cosmossql.Term {
	var seek []cosmossql.Term
	for _, item := range order {
		if t, ok := termOn(terms, cosmossql.TermEquality, item.Path); ok {
			seek = append(seek, t)
			continue
		}
		if t, ok := termOn(terms, cosmossql.TermRange, item.Path); ok {
			seek = append(seek, t)
		}
		break
	}
	return seek
}

func termOn(terms []cosmossql.Term, kind cosmossql.TermKind, path []string) (cosmossql.Term, bool) {
	for _, t := range terms {
		if t.Kind == kind && slices.Equal(t.Path, path) {
			return t, true
		}
	}
	return cosmossql.Term{}, false
}

// handsOver reports whether the index hands d to the query engine.
func (u *indexUse) handsOver(d *document) bool {
	return u.fullScan || u.bound.Holds(d.body, u.seek)
}

// walk is what the index hands over, in the order it does.
func (u *indexUse) walk(docs []*document) []*document {
	var out []*document
	for _, d := range docs {
		if u.handsOver(d) {
			out = append(out, d)
		}
	}
	if u.ordered {
		sort.SliceStable(out, func(i, j int) bool { return u.bound.CompareOrder(out[i].body, out[j].body) < 0 })
	}
	return out
}

// evaluatedFor counts the documents handed over to produce results
// [from, to) of a whole-result query (docs: the scope, in creation order);
// last is true when no page follows. A walk stops at the document that
// gives the page's last result, or at the end of the window; queries whose
// results are not the matching documents one for one (aggregates, DISTINCT,
// SELECT VALUE) walk everything on every page.
func (u *indexUse) evaluatedFor(docs []*document, from, to int, last bool) (int, error) {
	walked := u.walk(docs)
	offset, limit, perDocument, err := u.bound.Window()
	if err != nil {
		return 0, badRequest("The query could not be evaluated: %v", err)
	}
	if !perDocument {
		return len(walked), nil
	}
	start, end := 0, len(walked)
	if from > 0 {
		start = u.afterMatch(walked, offset+from)
	}
	if !last || (limit >= 0 && to >= limit) {
		end = u.afterMatch(walked, offset+to)
	}
	return end - start, nil
}

// afterMatch is the walk position just after its n-th matching document
// (the walk's length if it has fewer).
func (u *indexUse) afterMatch(walked []*document, n int) int {
	seen := 0
	for i, d := range walked {
		if seen == n {
			return i
		}
		if u.bound.Matches(d.body) {
			seen++
		}
	}
	return len(walked)
}

// unindexedFilters lists, as "/a/b", each path that a WHERE term of query
// reads, of a shape an index answers (equality, range or lookup), while the
// container's policy leaves the path out. The service evaluates such a term
// on every document the other terms hand over: right, and dearer the more
// documents the scope holds. Call with c.mu held.
func (c *container) unindexedFilters(query *cosmossql.Query) []string {
	var paths []string
	for _, t := range query.Terms() {
		if t.Kind == cosmossql.TermResidual {
			continue
		}
		for _, p := range t.Paths {
			if !c.index.indexes(p) {
				paths = append(paths, "/"+strings.Join(p, "/"))
			}
		}
	}
	return paths
}

// unindexedFilterLog keeps, for tests of an indexing policy, every path a
// query filtered on without an index (unindexedFilters) and the first query
// that did.
type unindexedFilterLog struct {
	mu    sync.Mutex
	first map[string]string
}

func (l *unindexedFilterLog) record(paths []string, text string) {
	if len(paths) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		l.first = make(map[string]string)
	}
	for _, p := range paths {
		if _, ok := l.first[p]; !ok {
			l.first[p] = text
		}
	}
}

// UnindexedFilters is every path a query filtered on (a term an index could
// answer) while the container's indexing policy leaves it out, each with
// the first such query's text.
func (s *Server) UnindexedFilters() map[string]string {
	s.unindexed.mu.Lock()
	defer s.unindexed.mu.Unlock()
	return maps.Clone(s.unindexed.first)
}
