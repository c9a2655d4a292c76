package cosmostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// vercelWorkarounds adapts requests written to the real protocol to the
// bugs of @vercel/cosmosdb-server 1.0.1:
//
//   - a point read of a missing document answers 500 unless the request
//     carries the cross-partition header, which real Cosmos DB ignores there;
//   - batch operations other than Create need a per-operation "partitionKey"
//     field, which the real service takes from the request header;
//   - a batch holding a Patch operation is refused whole (400 "Operation type
//     'Patch' is not supported in Batch"), so the transport runs such a batch
//     itself, one point request per operation (see executeOneByOne);
//   - a PATCH condition "from c where ..." is lower-cased before it is run
//     (so c.lockedUntil reads c.lockeduntil, undefined, and the condition is
//     never true) and is run against every partition by id alone (so another
//     partition's document with the same id can satisfy it), so the
//     transport rewrites it into the full query form, which the server runs
//     as written, scoped to the document's partition (see scopeCondition);
//   - partition key range ids come back as JSON numbers, where the real
//     service sends strings.
type vercelWorkarounds struct {
	next http.RoundTripper
}

func (w vercelWorkarounds) RoundTrip(req *http.Request) (*http.Response, error) {
	switch {
	case isPointRead(req):
		req = req.Clone(req.Context())
		req.Header.Set("x-ms-documentdb-query-enablecrosspartition", "True")
	case isPointPatch(req):
		scoped, err := w.withScopedCondition(req)
		if err != nil {
			return nil, err
		}
		req = scoped
	case strings.EqualFold(req.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
		body, ops, err := readBatch(req)
		if err != nil {
			return nil, err
		}
		if hasPatch(ops) {
			return w.executeOneByOne(req, body)
		}
		if req, err = withPerOperationPartitionKey(req, body); err != nil {
			return nil, err
		}
	}
	resp, err := w.next.RoundTrip(req)
	if err != nil || !isPartitionKeyRangesRead(req) || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	return withStringRangeIDs(resp)
}

func isPartitionKeyRangesRead(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.EscapedPath(), "/pkranges")
}

// withStringRangeIDs rewrites {"PartitionKeyRanges":[{"id":0,...}]} so each
// id is the string the real service sends.
func withStringRangeIDs(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: read pkranges: %w", err)
	}
	var feed map[string]json.RawMessage
	if err := json.Unmarshal(body, &feed); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode pkranges: %w", err)
	}
	var ranges []map[string]json.RawMessage
	if err := json.Unmarshal(feed["PartitionKeyRanges"], &ranges); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode pkranges: %w", err)
	}
	for _, r := range ranges {
		if id := r["id"]; len(id) > 0 && id[0] != '"' {
			r["id"], _ = json.Marshal(string(id))
		}
	}
	if feed["PartitionKeyRanges"], err = json.Marshal(ranges); err != nil {
		return nil, err
	}
	if body, err = json.Marshal(feed); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

func isPointRead(req *http.Request) bool {
	if req.Method != http.MethodGet {
		return false
	}
	segs := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	return len(segs) == 6 && segs[4] == "docs"
}

// readBatch reads a batch request's body and decodes its operations.
func readBatch(req *http.Request) ([]byte, []map[string]json.RawMessage, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("vercel workaround: read batch body: %w", err)
	}
	_ = req.Body.Close()
	var ops []map[string]json.RawMessage
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, nil, fmt.Errorf("vercel workaround: decode batch body: %w", err)
	}
	return body, ops, nil
}

func hasPatch(ops []map[string]json.RawMessage) bool {
	for _, op := range ops {
		var kind string
		if json.Unmarshal(op["operationType"], &kind) == nil && kind == "Patch" {
			return true
		}
	}
	return false
}

// withPerOperationPartitionKey copies the batch request and adds the
// partition key header's value to every operation that lacks one. body is
// the request's body, already read.
func withPerOperationPartitionKey(req *http.Request, body []byte) (*http.Request, error) {
	var ops []map[string]json.RawMessage
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode batch body: %w", err)
	}
	pk, err := json.Marshal(req.Header.Get("x-ms-documentdb-partitionkey"))
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		if _, ok := op["partitionKey"]; !ok {
			op["partitionKey"] = pk
		}
	}
	patched, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: encode batch body: %w", err)
	}
	return withBody(req, patched), nil
}

// withBody is a copy of req that sends body.
func withBody(req *http.Request, body []byte) *http.Request {
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return out
}

// batchOperation is one operation of a batch body, as the library sends it.
type batchOperation struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
	IfMatch       string          `json:"ifMatch"`
	PartitionKey  *string         `json:"partitionKey"` // a JSON string holding the header's value
}

// batchResult is one element of a batch response.
type batchResult struct {
	StatusCode             int             `json:"statusCode"`
	SubStatusCode          int             `json:"subStatusCode,omitempty"`
	RequestCharge          float64         `json:"requestCharge"`
	ETag                   string          `json:"eTag,omitempty"`
	ResourceBody           json.RawMessage `json:"resourceBody,omitempty"`
	RetryAfterMilliseconds float64         `json:"retryAfterMilliseconds,omitempty"`
}

// batchHeaders are the headers that make a request a batch, or that belong
// to the batch request as a whole; point requests built from a batch drop
// them.
var batchHeaders = []string{
	"x-ms-cosmos-is-batch-request", "x-ms-cosmos-batch-atomic", "x-ms-cosmos-batch-ordered",
	"x-ms-cosmos-batch-continue-on-error", "Content-Length", "Content-Type", "Prefer",
	"If-Match", "If-None-Match", "x-ms-documentdb-is-upsert",
}

// executeOneByOne runs a batch the server would refuse (it holds a Patch)
// as point requests to the same server, in order, through this transport
// (so the point-read and PATCH-condition workarounds apply to them). Each
// request reuses the batch request's headers, so it is signed like the
// original: the signature covers the batch, not the point request, which
// this server does not notice because it checks no signature. It stops at
// the first operation that fails and answers as the real service answers a
// failed batch: 207 Multi-Status, the failing operation's own status, 424
// for every other operation. On success it answers 200 with each
// operation's {statusCode, requestCharge, eTag, resourceBody}.
//
// The operations before a failure are NOT rolled back: they stay applied
// although the response reports them as 424. That is exactly what the
// server does with the batches it accepts (no atomicity, no rollback); only
// the HTTP status differs, 207 here where the server says 200. Tests that
// need a rolled-back batch cannot run on this server.
func (w vercelWorkarounds) executeOneByOne(req *http.Request, body []byte) (*http.Response, error) {
	var ops []batchOperation
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode batch body: %w", err)
	}
	minimal := strings.EqualFold(strings.TrimSpace(req.Header.Get("Prefer")), "return=minimal")
	results := make([]batchResult, len(ops))
	failed := -1
	var charge float64
	var activityID string
	for i, op := range ops {
		sub, err := pointRequest(req, op)
		if err != nil {
			msg, _ := json.Marshal(map[string]string{"code": "BadRequest", "message": err.Error()})
			results[i] = batchResult{StatusCode: http.StatusBadRequest, ResourceBody: msg}
			failed = i
			break
		}
		resp, err := w.RoundTrip(sub)
		if err != nil {
			return nil, fmt.Errorf("vercel workaround: batch operation %d (%s), the %d before it applied: %w",
				i, op.OperationType, i, err)
		}
		res, err := batchResultOf(resp)
		if err != nil {
			return nil, fmt.Errorf("vercel workaround: batch operation %d (%s), the %d before it applied: %w",
				i, op.OperationType, i, err)
		}
		charge += res.RequestCharge
		if id := resp.Header.Get("x-ms-activity-id"); id != "" {
			activityID = id
		}
		if res.StatusCode >= 400 {
			results[i] = res
			failed = i
			break
		}
		if minimal && op.OperationType != "Read" {
			res.ResourceBody = nil // as the service does with Prefer: return=minimal
		}
		results[i] = res
	}
	status := http.StatusOK
	if failed >= 0 {
		status = http.StatusMultiStatus
		for i := range results {
			if i != failed {
				results[i] = batchResult{StatusCode: http.StatusFailedDependency}
			}
		}
	}
	out, err := json.Marshal(results)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: encode batch response: %w", err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h.Set("x-ms-request-charge", strconv.FormatFloat(charge, 'f', -1, 64))
	if activityID != "" {
		h.Set("x-ms-activity-id", activityID)
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(out)),
		ContentLength: int64(len(out)),
		Request:       req,
	}, nil
}

// pointRequest is the REST request that performs op on its own: the batch
// request's URL (the documents feed) and headers, minus the batch headers,
// plus the operation's If-Match and partition key.
func pointRequest(batch *http.Request, op batchOperation) (*http.Request, error) {
	feed := batch.URL.Scheme + "://" + batch.URL.Host + batch.URL.EscapedPath()
	id := op.ID
	if id == "" && op.OperationType == "Replace" {
		var doc struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(op.ResourceBody, &doc)
		id = doc.ID
	}
	doc := feed + "/" + url.PathEscape(id)
	var method, target string
	var body []byte
	switch op.OperationType {
	case "Create", "Upsert":
		method, target, body = http.MethodPost, feed, op.ResourceBody
	case "Read":
		method, target = http.MethodGet, doc
	case "Replace":
		method, target, body = http.MethodPut, doc, op.ResourceBody
	case "Delete":
		method, target = http.MethodDelete, doc
	case "Patch":
		method, target, body = http.MethodPatch, doc, op.ResourceBody
	default:
		return nil, fmt.Errorf("operation type %q is not supported in Batch", op.OperationType)
	}
	if target == doc && id == "" {
		return nil, fmt.Errorf("%s operation without an id", op.OperationType)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	sub, err := http.NewRequestWithContext(batch.Context(), method, target, rd)
	if err != nil {
		return nil, err
	}
	sub.Header = batch.Header.Clone()
	for _, k := range batchHeaders {
		sub.Header.Del(k)
	}
	if op.PartitionKey != nil {
		sub.Header.Set("x-ms-documentdb-partitionkey", *op.PartitionKey)
	}
	if op.IfMatch != "" {
		sub.Header.Set("If-Match", op.IfMatch)
	}
	if op.OperationType == "Upsert" {
		sub.Header.Set("x-ms-documentdb-is-upsert", "True")
	}
	if body != nil {
		sub.Header.Set("Content-Type", "application/json")
	}
	return sub, nil
}

// batchResultOf turns a point response into a batch operation's result.
// A failing operation keeps the server's error body as its resourceBody, so
// the client's error carries the server's message.
func batchResultOf(resp *http.Response) (batchResult, error) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return batchResult{}, err
	}
	res := batchResult{StatusCode: resp.StatusCode}
	res.RequestCharge, _ = strconv.ParseFloat(resp.Header.Get("x-ms-request-charge"), 64)
	res.SubStatusCode, _ = strconv.Atoi(resp.Header.Get("x-ms-substatus"))
	res.RetryAfterMilliseconds, _ = strconv.ParseFloat(resp.Header.Get("x-ms-retry-after-ms"), 64)
	if body = bytes.TrimSpace(body); len(body) > 0 && json.Valid(body) && string(body) != "{}" {
		res.ResourceBody = body
	}
	res.ETag = resp.Header.Get("etag")
	if res.ETag == "" && res.StatusCode < 400 {
		var doc struct {
			ETag string `json:"_etag"`
		}
		_ = json.Unmarshal(body, &doc)
		res.ETag = doc.ETag
	}
	return res, nil
}

func isPointPatch(req *http.Request) bool {
	if req.Method != http.MethodPatch {
		return false
	}
	segs := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	return len(segs) == 6 && segs[4] == "docs"
}

// fromWhere matches the condition form the service documents,
// "from c where <predicate>" (the where part optional).
var fromWhere = regexp.MustCompile(`(?is)^\s*from\s+([a-z_][a-z0-9_]*)(?:\s+where\s+(.*?))?\s*$`)

// withScopedCondition copies a PATCH request, rewriting a "from c where P"
// condition into "SELECT * FROM c WHERE c.id = @id AND c[pk path] = <pk>
// AND (P)". The server lower-cases the short form before running it and
// runs it on every document with that id, whatever its partition; a
// condition that contains SELECT it runs as written with @id bound, so the
// long form is evaluated as the real service evaluates the short one: on
// this one document, case intact.
func (w vercelWorkarounds) withScopedCondition(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: read patch body: %w", err)
	}
	_ = req.Body.Close()
	var doc map[string]json.RawMessage
	var cond string
	if json.Unmarshal(body, &doc) != nil || json.Unmarshal(doc["condition"], &cond) != nil || cond == "" {
		return withBody(req, body), nil
	}
	paths, err := w.partitionKeyPaths(req)
	if err != nil {
		return withBody(req, body), nil // e.g. no such container: let the server answer
	}
	var values []json.RawMessage
	_ = json.Unmarshal([]byte(req.Header.Get("x-ms-documentdb-partitionkey")), &values)
	scoped, ok := scopeCondition(cond, paths, values)
	if !ok {
		return withBody(req, body), nil
	}
	if doc["condition"], err = json.Marshal(scoped); err != nil {
		return nil, err
	}
	rewritten, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: encode patch body: %w", err)
	}
	return withBody(req, rewritten), nil
}

// scopeCondition is the long form of a "from c where P" condition, scoped
// to the document's id and partition key values (JSON literals, one per
// path). ok is false when cond is not in the short form.
func scopeCondition(cond string, paths []string, values []json.RawMessage) (string, bool) {
	m := fromWhere.FindStringSubmatch(cond)
	if m == nil {
		return cond, false
	}
	alias := m[1]
	clauses := []string{alias + ".id = @id"}
	if len(values) == len(paths) {
		for i, p := range paths {
			v := bytes.TrimSpace(values[i])
			if len(v) == 0 || v[0] == '{' || v[0] == '[' {
				continue // the "none" partition key: leave it unscoped
			}
			clauses = append(clauses, propertyExpr(alias, p)+" = "+string(v))
		}
	}
	q := "SELECT * FROM " + alias + " WHERE " + strings.Join(clauses, " AND ")
	if pred := strings.TrimSpace(m[2]); pred != "" {
		q += " AND (" + pred + ")"
	}
	return q, true
}

// propertyExpr is the SQL for the property at JSON Pointer path under
// alias: /a/b gives alias["a"]["b"].
func propertyExpr(alias, path string) string {
	var b strings.Builder
	b.WriteString(alias)
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		quoted, _ := json.Marshal(seg)
		b.WriteString("[" + string(quoted) + "]")
	}
	return b.String()
}

// pkPathCache caches each container's partition key paths, by
// container URL.
var pkPathCache sync.Map

// partitionKeyPaths reads (once per container) the partition key paths of
// the container a document request addresses, with the request's headers.
func (w vercelWorkarounds) partitionKeyPaths(req *http.Request) ([]string, error) {
	segs := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	if len(segs) < 4 {
		return nil, fmt.Errorf("vercel workaround: %s is not under a container", req.URL.EscapedPath())
	}
	coll := req.URL.Scheme + "://" + req.URL.Host + "/" + strings.Join(segs[:4], "/")
	if v, ok := pkPathCache.Load(coll); ok {
		return v.([]string), nil
	}
	get, err := http.NewRequestWithContext(req.Context(), http.MethodGet, coll, nil)
	if err != nil {
		return nil, err
	}
	get.Header = req.Header.Clone()
	for _, k := range append(batchHeaders, "x-ms-documentdb-partitionkey") {
		get.Header.Del(k)
	}
	resp, err := w.next.RoundTrip(get)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("vercel workaround: read container %s: status %d", coll, resp.StatusCode)
	}
	var c struct {
		PartitionKey struct {
			Paths []string `json:"paths"`
		} `json:"partitionKey"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode container %s: %w", coll, err)
	}
	pkPathCache.Store(coll, c.PartitionKey.Paths)
	return c.PartitionKey.Paths, nil
}
