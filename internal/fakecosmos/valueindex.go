package fakecosmos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/duroxide-go/cdb/internal/cosmossql"
)

// The value index narrows what a query page evaluates; the RU model
// (queryindex.go) and everything a client sees are computed as without it.
//
// Invariant: for every property path an equality term has sought (built
// from every document on first use) and every entry of the container (a
// stored document, or a tombstone in the stale mode), each version a read
// may see of the entry (the entry itself unless a tombstone, and the
// previous version it keeps) whose value at the path has a
// cosmossql.ValueKey is listed under that key with the entry's partition
// key and id. Every change of an entry goes through applyIndexed or
// reindex, so the lists are exact; they are kept for the whole container,
// not per partition key range, so splits change nothing and a page reads
// the entries of its span by their partition's effective key.
//
// A query page may then walk only the entries listed under the key of one
// equality term of its WHERE clause's top-level ANDs that its index use
// seeks with (use.seek): a document that satisfies the WHERE clause
// satisfies that term, so it holds the value; and every document the RU
// model hands over satisfies the term too, so the charge counts the same
// documents. Anything else (a read feed, a full scan, a term on an array
// element, a constant that is undefined) walks the whole scope.

// QueryIndexMode is how query pages use the value index.
type QueryIndexMode int32

const (
	// QueryIndexOn walks only the documents the value index lists for one
	// of the query's equality seek terms.
	QueryIndexOn QueryIndexMode = iota
	// QueryIndexOff walks every document of the scope.
	QueryIndexOff
	// QueryIndexChecked computes every page both ways, answers the whole
	// walk's, and records the first difference (QueryIndexMismatch): for
	// tests that the index changes nothing.
	QueryIndexChecked
)

// SetQueryIndexMode chooses how later query pages use the value index.
func (s *Server) SetQueryIndexMode(m QueryIndexMode) { s.queryIndex.mode.Store(int32(m)) }

// QueryIndexMismatch is the first page the value index changed under
// QueryIndexChecked, nil if none.
func (s *Server) QueryIndexMismatch() error {
	s.queryIndex.mu.Lock()
	defer s.queryIndex.mu.Unlock()
	return s.queryIndex.mismatch
}

// queryIndexState is the server's mode and the checked mode's finding.
type queryIndexState struct {
	mode     atomic.Int32
	mu       sync.Mutex
	mismatch error
}

func (q *queryIndexState) record(text, difference string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mismatch == nil {
		q.mismatch = fmt.Errorf("the value index changed a page of %q: %s", text, difference)
	}
}

// valueIndex holds, per path sought, the container's entries by value key.
type valueIndex struct {
	paths map[string]*valuePostings // by pathName
}

type valuePostings struct {
	path  []string
	byKey map[string]*keyPostings
}

// keyPostings are the entries whose versions hold one value at a path.
type keyPostings struct {
	entries     int
	byPartition map[string]map[string]struct{} // partition key (canonical) → ids
}

func pathName(path []string) string { return strings.Join(path, "\x00") }

// indexablePath is a path of object properties: an all-digit segment may
// name an array element, which the index does not follow.
func indexablePath(path []string) bool {
	return len(path) > 0 && !slices.ContainsFunc(path, isArrayIndex)
}

// versionKeys are the value keys at path of the versions a read may see
// of entry (nil: none).
func versionKeys(entry *document, path []string) []string {
	if entry == nil {
		return nil
	}
	var keys []string
	for _, v := range [...]*document{entry, entry.prev} {
		if v == nil || v.tombstone {
			continue
		}
		value, ok := lookupPath(v.body, path)
		if !ok {
			continue
		}
		if k, ok := cosmossql.ValueKey(value); ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func (ix *valuePostings) add(pk, id string, keys []string) {
	for _, k := range keys {
		kp := ix.byKey[k]
		if kp == nil {
			kp = &keyPostings{byPartition: map[string]map[string]struct{}{}}
			ix.byKey[k] = kp
		}
		ids := kp.byPartition[pk]
		if ids == nil {
			ids = map[string]struct{}{}
			kp.byPartition[pk] = ids
		}
		if _, held := ids[id]; !held {
			ids[id] = struct{}{}
			kp.entries++
		}
	}
}

func (ix *valuePostings) remove(pk, id string, keys []string) {
	for _, k := range keys {
		kp := ix.byKey[k]
		if kp == nil {
			continue
		}
		ids := kp.byPartition[pk]
		if _, held := ids[id]; !held {
			continue
		}
		delete(ids, id)
		kp.entries--
		if len(ids) == 0 {
			delete(kp.byPartition, pk)
		}
		if kp.entries == 0 {
			delete(ix.byKey, k)
		}
	}
}

// applyIndexed commits one staged write to p (logicalPartition.apply) and
// keeps the value index true to it. Call with c.mu held.
func (c *container) applyIndexed(pk string, p *logicalPartition, id string, d *document, lsn int64, keepPrevious bool) {
	old := p.entry(id)
	p.apply(id, d, lsn, keepPrevious)
	c.reindex(pk, id, old, p.entry(id))
}

// reindex moves the entry (pk, id) from old's value keys to cur's (either
// nil: no entry). Call with c.mu held after every change of an entry.
func (c *container) reindex(pk, id string, old, cur *document) {
	for _, ix := range c.values.paths {
		before, after := versionKeys(old, ix.path), versionKeys(cur, ix.path)
		ix.remove(pk, id, without(before, after))
		ix.add(pk, id, without(after, before))
	}
}

func without(keys, drop []string) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains(drop, k) {
			out = append(out, k)
		}
	}
	return out
}

// postingsFor is the index of path, built from every entry on first use.
// Call with c.mu held.
func (c *container) postingsFor(path []string) *valuePostings {
	name := pathName(path)
	if ix := c.values.paths[name]; ix != nil {
		return ix
	}
	ix := &valuePostings{path: slices.Clone(path), byKey: map[string]*keyPostings{}}
	for pk, p := range c.partitions {
		for id, d := range p.docs {
			ix.add(pk, id, versionKeys(d, path))
		}
		for id, g := range p.ghosts {
			ix.add(pk, id, versionKeys(g, path))
		}
	}
	if c.values.paths == nil {
		c.values.paths = map[string]*valuePostings{}
	}
	c.values.paths[name] = ix
	return ix
}

// narrowing picks, among the equality terms use seeks with, the one whose
// value the fewest entries of the scope hold. ok is false when none can
// narrow the walk (kp nil with ok: no entry holds the value). A term on
// the partition key's path narrows nothing within one partition.
func (c *container) narrowing(scope queryScope, use *indexUse) (best *keyPostings, ok bool) {
	if use == nil || use.fullScan {
		return nil, false
	}
	bestSize := 0
	for _, t := range use.seek {
		if t.Kind != cosmossql.TermEquality || !indexablePath(t.Path) ||
			scope.kind == scopePartition && slices.Equal(t.Path, c.pkPath) {
			continue
		}
		key, defined := use.bound.EqualityKey(t)
		if !defined {
			continue
		}
		kp := c.postingsFor(t.Path).byKey[key]
		if size := kp.size(scope); !ok || size < bestSize {
			best, bestSize, ok = kp, size, true
		}
	}
	return best, ok
}

// size is how many entries of the scope kp lists (of the whole container
// outside a partition scope: a bound, cheap to read).
func (kp *keyPostings) size(scope queryScope) int {
	switch {
	case kp == nil:
		return 0
	case scope.kind == scopePartition:
		return len(kp.byPartition[scope.pk.canonical])
	}
	return kp.entries
}

// docsToWalk is what a query page evaluates: the documents of the scope in
// [lo, hi), in creation order, as view sees them (docsIn), or, with
// useIndex and a term to narrow by, only those the value index lists for
// it; narrowed says which. Call with c.mu held.
func (c *container) docsToWalk(view readView, scope queryScope, lo, hi uint64, use *indexUse, useIndex bool) (docs []*document, narrowed bool) {
	if useIndex {
		if kp, ok := c.narrowing(scope, use); ok {
			return c.docsListed(view, scope, lo, hi, kp), true
		}
	}
	return c.docsIn(view, scope, lo, hi), false
}

// docsListed is docsIn restricted to the entries kp lists.
func (c *container) docsListed(view readView, scope queryScope, lo, hi uint64, kp *keyPostings) []*document {
	if kp == nil {
		return nil
	}
	var docs []*document
	collect := func(pk string, ids map[string]struct{}) {
		p := c.partitions[pk]
		if p == nil || scope.kind != scopePartition && (p.epk < lo || p.epk >= hi) {
			return
		}
		r := c.rangeFor(p.epk)
		for id := range ids {
			if v := view.version(p.entry(id), r); v != nil {
				docs = append(docs, v)
			}
		}
	}
	if scope.kind == scopePartition {
		collect(scope.pk.canonical, kp.byPartition[scope.pk.canonical])
	} else {
		for pk, ids := range kp.byPartition {
			collect(pk, ids)
		}
	}
	slices.SortFunc(docs, func(a, b *document) int { return compareUint(a.seq, b.seq) })
	return docs
}

// anyAfter reports a document of the scope in [lo, hi) that view sees,
// created after seq: a narrowed walk that filled its page asks it to end
// the page as the whole walk would (with a continuation when any document
// follows, matching or not). Call with c.mu held.
func (c *container) anyAfter(view readView, scope queryScope, lo, hi, seq uint64) bool {
	after := func(p *logicalPartition) bool {
		r := c.rangeFor(p.epk)
		for _, entries := range [...]map[string]*document{p.docs, p.ghosts} {
			for _, e := range entries {
				if e.seq > seq && view.version(e, r) != nil {
					return true
				}
			}
		}
		return false
	}
	if scope.kind == scopePartition {
		p := c.partitions[scope.pk.canonical]
		return p != nil && after(p)
	}
	for _, p := range c.partitions {
		if p.epk >= lo && p.epk < hi && after(p) {
			return true
		}
	}
	return false
}

// servePage computes a query page as the server's QueryIndexMode says.
// Call with c.mu held.
func (s *Server) servePage(c *container, view readView, scope queryScope, qr *queryRequest, tok continuation, resumed bool, maxItems int) (*page, error) {
	switch QueryIndexMode(s.queryIndex.mode.Load()) {
	case QueryIndexOff:
		return c.queryPage(view, scope, qr, tok, resumed, maxItems, false)
	case QueryIndexChecked:
		want, wantErr := c.queryPage(view, scope, qr, tok, resumed, maxItems, false)
		got, gotErr := c.queryPage(view, scope, qr, tok, resumed, maxItems, true)
		if d := pageDifference(want, wantErr, got, gotErr); d != "" {
			s.queryIndex.record(qr.text, d)
		}
		return want, wantErr
	}
	return c.queryPage(view, scope, qr, tok, resumed, maxItems, true)
}

// pageDifference describes how got differs from want in anything a client
// or the RU model sees; "" if in nothing.
func pageDifference(want *page, wantErr error, got *page, gotErr error) string {
	switch {
	case wantErr != nil || gotErr != nil:
		if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
			return fmt.Sprintf("error %v, want %v", gotErr, wantErr)
		}
		return ""
	case len(got.results) != len(want.results):
		return fmt.Sprintf("%d results, want %d", len(got.results), len(want.results))
	case got.scanned != want.scanned:
		return fmt.Sprintf("%d documents charged, want %d", got.scanned, want.scanned)
	case got.bytes != want.bytes:
		return fmt.Sprintf("%d bytes, want %d", got.bytes, want.bytes)
	case got.rng != want.rng:
		return fmt.Sprintf("range %s, want %s", got.rng.id, want.rng.id)
	case (got.next == nil) != (want.next == nil) || got.next != nil && *got.next != *want.next:
		return fmt.Sprintf("continuation %+v, want %+v", got.next, want.next)
	}
	for i := range want.results {
		if string(got.results[i]) != string(want.results[i]) {
			return fmt.Sprintf("result %d is %s, want %s", i, got.results[i], want.results[i])
		}
	}
	return ""
}
