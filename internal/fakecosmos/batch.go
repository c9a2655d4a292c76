package fakecosmos

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The service's transactional batch limits.
const (
	maxBatchOperations = 100
	maxBatchBytes      = 2 * 1024 * 1024
)

// msgBatchTooManyOperations is the service's text for a batch of more than
// 100 operations (400, no substatus), which clients may match.
const msgBatchTooManyOperations = "Batch request has more operations than what is supported."

// batchOp is one parsed operation of a batch. An operation whose content
// is invalid (say, a patch of 11 operations) keeps its error and fails when
// its turn comes, so the answer is a 207 that points at it.
type batchOp struct {
	kind        string // create, upsert, read, replace, delete, patch
	id          string
	body        map[string]any
	patch       patchSpec
	ifMatch     string
	ifNoneMatch string
	invalid     error
	// partitionKey is the operation's own "partitionKey" (a JSON array in
	// a string), nil when absent. Atomic batches must match the header's;
	// bulk operations are routed by it.
	partitionKey *pkValue
}

// batchResult is one entry of the response array (the shape azcosmos'
// TransactionalBatchResult and Java's BatchResponseParser read).
type batchResult struct {
	StatusCode    int             `json:"statusCode"`
	SubStatusCode int             `json:"subStatusCode,omitempty"`
	RequestCharge float64         `json:"requestCharge"`
	ETag          string          `json:"eTag,omitempty"`
	ResourceBody  json.RawMessage `json:"resourceBody,omitempty"`
}

// executeBatch runs an atomic batch: in order, against a staged copy of the
// logical partition, under the container's lock. The first failure rolls
// everything back (nothing is committed) and answers 207 with that
// operation's own status and 424 for every other one.
func (s *Server) executeBatch(q *request) (*result, error) {
	if !q.flag(hdrBatchAtomic) {
		return s.executeBulk(q)
	}
	if len(q.body) > maxBatchBytes {
		return nil, tooLarge()
	}
	pk, err := requirePartitionKey(q)
	if err != nil {
		return nil, err
	}
	ops, err := parseBatch(q.body)
	if err != nil {
		return nil, err
	}
	if err := checkBatchPartitionKeys(ops, pk); err != nil {
		return nil, err
	}
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.begin(s, pk)
	results := make([]batchResult, len(ops))
	total := 0.0
	for i, op := range ops {
		out, err := t.runBatchOp(op)
		if err != nil {
			return s.rolledBackBatch(t.rangeOf(), results, i, err, total)
		}
		results[i] = renderBatchResult(op, out, q.preferMinimal())
		total += out.charge
	}
	r := t.commit()
	return &result{status: http.StatusOK, body: encodeJSON(results), charge: total,
		session: sessionToken(r.id, r.lsn), lsn: r.lsn}, nil
}

func renderBatchResult(op batchOp, out opResult, minimal bool) batchResult {
	r := batchResult{StatusCode: out.status, RequestCharge: roundCharge(out.charge)}
	if out.doc != nil {
		r.ETag = out.doc.etag
		if out.status != http.StatusNotModified && (op.kind == "read" || !minimal) {
			r.ResourceBody = out.doc.raw
		}
	}
	return r
}

// rolledBackBatch answers 207: the failing operation's own status and
// substatus, 424 Failed Dependency for all the others.
func (s *Server) rolledBackBatch(r *pkRange, results []batchResult, failed int, err error, charged float64) (*result, error) {
	ce, ok := err.(*cosmosError)
	if !ok {
		return nil, err
	}
	for i := range results {
		results[i] = batchResult{StatusCode: http.StatusFailedDependency}
	}
	results[failed] = batchResult{StatusCode: ce.status, SubStatusCode: ce.subStatus, RequestCharge: chargeRefusal}
	return &result{status: http.StatusMultiStatus, body: encodeJSON(results), charge: charged + chargeRefusal,
		session: sessionToken(r.id, r.lsn), lsn: r.lsn}, nil
}

func (t *partitionTxn) runBatchOp(op batchOp) (opResult, error) {
	if op.invalid != nil {
		return opResult{}, op.invalid
	}
	switch op.kind {
	case "create":
		return t.create(op.body)
	case "upsert":
		return t.upsert(op.body, op.ifMatch)
	case "read":
		return t.read(op.id, op.ifNoneMatch)
	case "replace":
		return t.replace(op.id, op.body, op.ifMatch)
	case "delete":
		return t.remove(op.id, op.ifMatch)
	case "patch":
		return t.patch(op.id, op.patch, op.ifMatch)
	}
	return opResult{}, badRequest("Unknown batch operation %q.", op.kind)
}

// parseBatch reads the operation array. Malformed requests (not an array,
// too many operations, unknown types, a malformed per-operation partition
// key) fail as a whole with 400 and no array.
func parseBatch(body []byte) ([]batchOp, error) {
	v, err := decodeJSON(body)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, badRequest("The batch request body must be a JSON array of operations.")
	}
	if len(list) == 0 {
		return nil, badRequest("The batch request must have at least one operation.")
	}
	if len(list) > maxBatchOperations {
		return nil, badRequest(msgBatchTooManyOperations)
	}
	ops := make([]batchOp, len(list))
	for i, item := range list {
		if ops[i], err = parseBatchOp(i, item); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

func parseBatchOp(i int, item any) (batchOp, error) {
	obj, ok := item.(map[string]any)
	if !ok {
		return batchOp{}, badRequest("Batch operation %d must be a JSON object.", i)
	}
	opPK, err := parseBatchOpPartitionKey(i, obj)
	if err != nil {
		return batchOp{}, err
	}
	typ, _ := obj["operationType"].(string)
	op := batchOp{kind: strings.ToLower(typ), partitionKey: opPK}
	op.ifMatch, _ = obj["ifMatch"].(string)
	op.ifNoneMatch, _ = obj["ifNoneMatch"].(string)
	switch op.kind {
	case "create", "upsert":
		return op, op.needBody(i, obj)
	case "replace":
		if err := op.needID(i, obj); err != nil {
			return op, err
		}
		return op, op.needBody(i, obj)
	case "read", "delete":
		return op, op.needID(i, obj)
	case "patch":
		if err := op.needID(i, obj); err != nil {
			return op, err
		}
		spec, err := parsePatchValue(obj["resourceBody"])
		op.patch, op.invalid = spec, err
		return op, nil
	}
	return batchOp{}, badRequest("Batch operation %d has an unknown operationType %q (Create, Upsert, Read, Replace, Delete, Patch).", i, typ)
}

func (op *batchOp) needID(i int, obj map[string]any) error {
	id, ok := obj["id"].(string)
	if !ok {
		return badRequest("Batch operation %d (%s) needs an \"id\" string.", i, op.kind)
	}
	op.id = id
	return nil
}

func (op *batchOp) needBody(i int, obj map[string]any) error {
	body, ok := obj["resourceBody"].(map[string]any)
	if !ok {
		return badRequest("Batch operation %d (%s) needs a \"resourceBody\" object.", i, op.kind)
	}
	op.body = body
	return nil
}

// parseBatchOpPartitionKey reads an operation's own partition key, a JSON
// array in a string (nil when absent).
func parseBatchOpPartitionKey(i int, obj map[string]any) (*pkValue, error) {
	raw, present := obj["partitionKey"]
	if !present {
		return nil, nil
	}
	s, ok := raw.(string)
	if !ok {
		return nil, badRequest("Batch operation %d: partitionKey must be a JSON string such as \"[\\\"pk\\\"]\".", i)
	}
	pk, err := parsePartitionKeyHeader(s)
	if err != nil {
		return nil, err
	}
	return &pk, nil
}

// checkBatchPartitionKeys: the operations of an atomic batch may repeat
// the partition key; they must name the header's partition.
func checkBatchPartitionKeys(ops []batchOp, pk pkValue) error {
	for i, op := range ops {
		if op.partitionKey != nil && *op.partitionKey != pk {
			return badRequest("Batch operation %d targets another partition key than the header's, but all operations of a batch must target the header's partition.", i)
		}
	}
	return nil
}
