package fakecosmos

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/duroxide-go/cdb/internal/epk"
)

// maxDocumentBytes is the service's document limit, measured on the JSON
// as stored (system properties included).
const maxDocumentBytes = 2 * 1024 * 1024

// isSystemProperty names the properties the server sets on every write;
// whatever a client sends under these names is overwritten.
func isSystemProperty(name string) bool {
	switch name {
	case "_rid", "_self", "_etag", "_ts", "_attachments":
		return true
	}
	return false
}

// pkValue is a partition key value: a string, number, boolean, null, or
// "none" (the document has no property at the key's path, header `[{}]`).
type pkValue struct {
	canonical string // identity: equal values have equal canonical forms
	value     any    // nil (null), bool, string, float64 or epk.Undefined, for hashing
}

// noneCanonical is the canonical form of "none", the partition of documents
// without the key's property.
const noneCanonical = "none"

// nonePartitionKey is the "none" partition key value.
func nonePartitionKey() pkValue { return pkValue{canonical: noneCanonical, value: epk.Undefined{}} }

// pkFromJSON classifies a decoded JSON value (json.Number for numbers).
// Numbers compare by value, so [1] and [1.0] name the same partition.
func pkFromJSON(v any) (pkValue, bool) {
	switch x := v.(type) {
	case nil:
		return pkValue{canonical: "null", value: nil}, true
	case bool:
		return pkValue{canonical: strconv.FormatBool(x), value: x}, true
	case string:
		return pkValue{canonical: "s:" + x, value: x}, true
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return pkValue{}, false
		}
		return pkValue{canonical: "n:" + strconv.FormatFloat(f, 'g', -1, 64), value: f}, true
	case map[string]any:
		if len(x) == 0 { // `{}` is how the header spells "none"
			return nonePartitionKey(), true
		}
	}
	return pkValue{}, false
}

// parsePartitionKeyHeader reads x-ms-documentdb-partitionkey: a JSON array
// of exactly one value.
func parsePartitionKeyHeader(header string) (pkValue, error) {
	v, err := decodeJSON([]byte(header))
	if err != nil {
		return pkValue{}, badRequest("The partition key header %q is not valid JSON.", header)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 1 {
		return pkValue{}, badRequest("The partition key header %q must be a JSON array of one value; this fake supports single-path partition keys only.", header)
	}
	pk, ok := pkFromJSON(arr[0])
	if !ok {
		return pkValue{}, badRequest("The partition key value in %q must be a string, number, boolean, null or {} (none).", header)
	}
	return pk, nil
}

// requirePartitionKey reads the header that point operations and batches
// must carry.
func requirePartitionKey(q *request) (pkValue, error) {
	header := q.header(hdrPartitionKey)
	if header == "" {
		return pkValue{}, badRequest("PartitionKey value must be supplied for this operation (header x-ms-documentdb-partitionkey).")
	}
	return parsePartitionKeyHeader(header)
}

// partitionKeyOf reads the value at the container's key path; a missing
// property (or a missing parent) means "none".
func partitionKeyOf(doc map[string]any, path []string) (pkValue, error) {
	var node any = doc
	for _, seg := range path {
		obj, ok := node.(map[string]any)
		if !ok {
			return nonePartitionKey(), nil
		}
		if node, ok = obj[seg]; !ok {
			return nonePartitionKey(), nil
		}
	}
	if m, isObject := node.(map[string]any); isObject && len(m) == 0 {
		return pkValue{}, badRequest("The partition key property of the document must be a string, number, boolean or null, not an object.")
	}
	pk, ok := pkFromJSON(node)
	if !ok {
		return pkValue{}, badRequest("The partition key property of the document must be a string, number, boolean or null.")
	}
	return pk, nil
}

// validateDocumentID applies the service's id rules.
func validateDocumentID(v any, present bool) (string, error) {
	if !present {
		return "", badRequest("The input content is invalid because the required properties - 'id; ' - are missing.")
	}
	id, ok := v.(string)
	switch {
	case !ok:
		return "", badRequest("The id of a document must be a JSON string.")
	case id == "":
		return "", badRequest("The id of a document must not be empty.")
	case utf8.RuneCountInString(id) > 255:
		return "", badRequest("The id of a document must be at most 255 characters, got %d.", utf8.RuneCountInString(id))
	case strings.ContainsAny(id, `/\?#`):
		return "", badRequest("The id %q contains an invalid character ('/', '\\', '?' or '#').", id)
	}
	return id, nil
}

// logicalPartition holds the documents sharing one partition key value.
type logicalPartition struct {
	epk  uint64 // position in the EPK space (partitionKeyDef.epkPosition)
	docs map[string]*document
	// ghosts are the tombstones of deleted documents, kept in the stale
	// mode only, for the lagging replica that has not applied the delete.
	ghosts map[string]*document
}

// entry is the document or tombstone stored under id, if any.
func (p *logicalPartition) entry(id string) *document {
	if d := p.docs[id]; d != nil {
		return d
	}
	return p.ghosts[id]
}

func (p *logicalPartition) empty() bool { return len(p.docs) == 0 && len(p.ghosts) == 0 }

// apply commits one staged write (d nil: a delete) at lsn. keepPrevious
// keeps what a lagging replica still serves: the version it replaced, or
// the deleted document behind a tombstone.
func (p *logicalPartition) apply(id string, d *document, lsn int64, keepPrevious bool) {
	cur := p.docs[id]
	if d != nil {
		d.lsn = lsn
		if keepPrevious {
			d.prev = cur.previous()
		}
		p.docs[id] = d
		delete(p.ghosts, id)
		return
	}
	delete(p.docs, id)
	if keepPrevious && cur != nil {
		if p.ghosts == nil {
			p.ghosts = map[string]*document{}
		}
		p.ghosts[id] = &document{id: id, seq: cur.seq, lsn: lsn, prev: cur.previous(), tombstone: true}
	}
}

// document is a stored document. It is never modified after it is
// committed: a write stores a new one, so a reader (query, staged batch)
// can hold it without copying.
type document struct {
	id   string
	body map[string]any // as stored, system properties included
	raw  []byte         // body encoded
	etag string
	rid  string
	seq  uint64     // creation order in the container; replaces keep it
	lsn  int64      // the range's LSN of the write that stored it
	ts   int64      // _ts
	ttl  *ttlPolicy // its container's, for expiry (ttl.go)
	// prev is the version this one replaced (nil: none), kept in the stale
	// mode for reads that do not cover lsn; tombstone marks a deletion.
	prev      *document
	tombstone bool
}

// previous is d as the lagging replica keeps it: without its own previous
// version, so versions never chain.
func (d *document) previous() *document {
	if d == nil {
		return nil
	}
	cp := *d
	cp.prev = nil
	return &cp
}

// etagMatches is If-Match: "*" matches any existing document, otherwise the
// value must equal the etag byte for byte (etags are opaque).
func etagMatches(ifMatch, etag string) bool {
	ifMatch = strings.TrimSpace(ifMatch)
	return ifMatch == "*" || ifMatch == etag
}

// partitionTxn stages writes to one logical partition. Point operations
// commit one operation, batches many; a batch that fails is simply not
// committed. Use with c.mu held from begin to commit.
type partitionTxn struct {
	s      *Server
	c      *container
	pk     pkValue
	staged map[string]*document // nil value: deleted
}

func (c *container) begin(s *Server, pk pkValue) *partitionTxn {
	return &partitionTxn{s: s, c: c, pk: pk, staged: map[string]*document{}}
}

func (t *partitionTxn) get(id string) *document {
	if d, ok := t.staged[id]; ok {
		return d
	}
	if p := t.c.partitions[t.pk.canonical]; p != nil {
		return live(p.docs[id]) // an expired document is gone
	}
	return nil
}

// unpurged says id belongs to an expired document whose purge lag
// (Options.ExpiredPurgeLag) has not passed, and that this transaction has
// not written.
func (t *partitionTxn) unpurged(id string) bool {
	if _, ok := t.staged[id]; ok {
		return false
	}
	p := t.c.partitions[t.pk.canonical]
	return p != nil && p.docs[id].unpurged(t.s.expiredPurgeLag)
}

// rangeOf is the range holding the transaction's partition.
func (t *partitionTxn) rangeOf() *pkRange {
	return t.c.rangeFor(t.c.epkPosition(t.pk))
}

// commit applies the staged writes under a new LSN of the partition's
// range and returns that range: its id and LSN are the session position.
func (t *partitionTxn) commit() *pkRange {
	c := t.c
	r := t.rangeOf()
	if len(t.staged) == 0 {
		return r
	}
	p := c.partitions[t.pk.canonical]
	if p == nil {
		p = &logicalPartition{epk: c.epkPosition(t.pk), docs: map[string]*document{}}
	}
	r.lsn++
	for id, d := range t.staged {
		c.applyIndexed(t.pk.canonical, p, id, d, r.lsn, t.s.staleReads)
	}
	if p.empty() {
		delete(c.partitions, t.pk.canonical)
	} else {
		c.partitions[t.pk.canonical] = p
	}
	return r
}

// opResult is the outcome of one document operation.
type opResult struct {
	status int
	doc    *document // written or read; nil after a delete
	charge float64
}

// store builds the stored form of body (system properties set, a new etag)
// and stages it. prev, when set, is the document being replaced: its _rid
// and creation order carry over.
func (t *partitionTxn) store(id string, body map[string]any, prev *document) (*document, error) {
	stored := make(map[string]any, len(body)+5)
	for k, v := range body {
		stored[k] = v
	}
	ts := t.s.now().Unix()
	d := &document{id: id, etag: t.s.ids.etag(ts), ts: ts, ttl: t.c.ttl}
	if prev != nil {
		d.rid, d.seq = prev.rid, prev.seq
	} else {
		d.rid = t.s.ids.documentRID(t.c.ridRaw)
		t.c.nextSeq++
		d.seq = t.c.nextSeq
	}
	stored["_rid"] = d.rid
	stored["_self"] = t.c.selfLink() + "docs/" + d.rid + "/"
	stored["_etag"] = d.etag
	stored["_ts"] = json.Number(strconv.FormatInt(ts, 10))
	stored["_attachments"] = "attachments/"
	d.body = stored
	d.raw = encodeJSON(stored)
	if len(d.raw) > maxDocumentBytes {
		return nil, tooLarge()
	}
	t.staged[id] = d
	return d, nil
}

// checkBody validates a write body against the partition: a valid id and a
// partition key value equal to the header's.
func (t *partitionTxn) checkBody(body map[string]any) (string, error) {
	raw, present := body["id"]
	id, err := validateDocumentID(raw, present)
	if err != nil {
		return "", err
	}
	pk, err := partitionKeyOf(body, t.c.pkPath)
	if err != nil {
		return "", err
	}
	if pk != t.pk {
		return "", newSubError(http.StatusBadRequest, subStatusPartitionKeyMismatch, msgPartitionKeyMismatch)
	}
	return id, nil
}

func (t *partitionTxn) create(body map[string]any) (opResult, error) {
	id, err := t.checkBody(body)
	if err != nil {
		return opResult{}, err
	}
	if t.get(id) != nil || t.unpurged(id) {
		return opResult{}, conflict()
	}
	d, err := t.store(id, body, nil)
	if err != nil {
		return opResult{}, err
	}
	return opResult{status: http.StatusCreated, doc: d, charge: t.c.createCharge(d)}, nil
}

// upsert replaces (200) or creates (201). With If-Match it only replaces:
// a missing document, like a stale etag, fails with 412.
func (t *partitionTxn) upsert(body map[string]any, ifMatch string) (opResult, error) {
	id, err := t.checkBody(body)
	if err != nil {
		return opResult{}, err
	}
	prev := t.get(id)
	if ifMatch != "" && (prev == nil || !etagMatches(ifMatch, prev.etag)) {
		return opResult{}, preconditionFailed()
	}
	d, err := t.store(id, body, prev)
	if err != nil {
		return opResult{}, err
	}
	if prev == nil {
		return opResult{status: http.StatusCreated, doc: d, charge: t.c.createCharge(d)}, nil
	}
	return opResult{status: http.StatusOK, doc: d, charge: t.c.replaceCharge(prev, d)}, nil
}

// read is a batch's read: the primary's current state, staged writes
// included.
func (t *partitionTxn) read(id, ifNoneMatch string) (opResult, error) {
	return readResult(t.get(id), ifNoneMatch)
}

// readAs is a point read through v: possibly a lagging replica's version.
func (t *partitionTxn) readAs(v readView, id, ifNoneMatch string) (opResult, error) {
	r := t.rangeOf()
	if err := v.checkReachable(r); err != nil {
		return opResult{}, err
	}
	var entry *document
	if p := t.c.partitions[t.pk.canonical]; p != nil {
		entry = p.entry(id)
	}
	return readResult(v.version(entry, r), ifNoneMatch)
}

func readResult(d *document, ifNoneMatch string) (opResult, error) {
	if d == nil {
		return opResult{}, notFound()
	}
	if ifNoneMatch != "" && strings.TrimSpace(ifNoneMatch) == d.etag {
		return opResult{status: http.StatusNotModified, doc: d, charge: chargeMetadata}, nil
	}
	return opResult{status: http.StatusOK, doc: d, charge: readCharge(d)}, nil
}

func (t *partitionTxn) replace(id string, body map[string]any, ifMatch string) (opResult, error) {
	bodyID, err := t.checkBody(body)
	if err != nil {
		return opResult{}, err
	}
	if bodyID != id {
		return opResult{}, badRequest("The id in the body (%q) does not match the id addressed (%q).", bodyID, id)
	}
	prev := t.get(id)
	if prev == nil {
		return opResult{}, notFound()
	}
	if ifMatch != "" && !etagMatches(ifMatch, prev.etag) {
		return opResult{}, preconditionFailed()
	}
	d, err := t.store(id, body, prev)
	if err != nil {
		return opResult{}, err
	}
	return opResult{status: http.StatusOK, doc: d, charge: t.c.replaceCharge(prev, d)}, nil
}

func (t *partitionTxn) remove(id, ifMatch string) (opResult, error) {
	prev := t.get(id)
	if prev == nil {
		return opResult{}, notFound()
	}
	if ifMatch != "" && !etagMatches(ifMatch, prev.etag) {
		return opResult{}, preconditionFailed()
	}
	t.staged[id] = nil
	return opResult{status: http.StatusNoContent, charge: t.c.deleteCharge(prev)}, nil
}

// itemOperation runs one point operation in its own transaction under the
// container's lock and renders the answer.
func (s *Server) itemOperation(q *request, run func(t *partitionTxn) (opResult, error)) (*result, error) {
	pk, err := requirePartitionKey(q)
	if err != nil {
		return nil, err
	}
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.begin(s, pk)
	out, err := run(t)
	if err != nil {
		return nil, withSession(err, t.rangeOf())
	}
	r := t.commit()
	res := &result{status: out.status, charge: out.charge, session: sessionToken(r.id, r.lsn), lsn: r.lsn}
	if out.doc != nil {
		res.etag = out.doc.etag
		if out.status != http.StatusNotModified && !(q.op != OpReadItem && q.preferMinimal()) {
			res.body = out.doc.raw
		}
	}
	return res, nil
}

func (s *Server) createOrUpsertItem(q *request) (*result, error) {
	body, err := decodeObject(q.body)
	if err != nil {
		return nil, err
	}
	return s.itemOperation(q, func(t *partitionTxn) (opResult, error) {
		if q.op == OpUpsertItem {
			return t.upsert(body, q.header(hdrIfMatch))
		}
		return t.create(body)
	})
}

func (s *Server) readItem(q *request) (*result, error) {
	view, err := s.newReadView(q)
	if err != nil {
		return nil, err
	}
	return s.itemOperation(q, func(t *partitionTxn) (opResult, error) {
		return t.readAs(view, q.route.item, q.header(hdrIfNoneMatch))
	})
}

func (s *Server) replaceItem(q *request) (*result, error) {
	body, err := decodeObject(q.body)
	if err != nil {
		return nil, err
	}
	return s.itemOperation(q, func(t *partitionTxn) (opResult, error) {
		return t.replace(q.route.item, body, q.header(hdrIfMatch))
	})
}

func (s *Server) deleteItem(q *request) (*result, error) {
	return s.itemOperation(q, func(t *partitionTxn) (opResult, error) {
		return t.remove(q.route.item, q.header(hdrIfMatch))
	})
}

func (s *Server) patchItem(q *request) (*result, error) {
	if err := checkPatchContentType(q); err != nil {
		return nil, err
	}
	spec, err := parsePatchBody(q.body)
	if err != nil {
		return nil, err
	}
	return s.itemOperation(q, func(t *partitionTxn) (opResult, error) {
		return t.patch(q.route.item, spec, q.header(hdrIfMatch))
	})
}

// checkPatchContentType accepts the JSON media types and no Content-Type at
// all: the JavaScript SDK sends none, and real accounts take the body as
// JSON. Any other type is refused.
func checkPatchContentType(q *request) error {
	if strings.TrimSpace(q.header("Content-Type")) == "" {
		return nil
	}
	if mt := mediaType(q.http); mt != "application/json" && mt != "application/json_patch+json" {
		return badRequest("A patch request must have Content-Type application/json or application/json_patch+json (or none), got %q.", q.header("Content-Type"))
	}
	return nil
}
