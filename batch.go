package cdb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Transactional batch limits of Cosmos DB, checked before sending.
const (
	MaxBatchOperations = 100
	MaxBatchBytes      = 2 * 1024 * 1024 // the encoded request body
)

// TransactionalBatch is a list of operations on one logical partition that
// commit or roll back together. Build it with the Append-style methods, then
// run it with ContainerClient.ExecuteTransactionalBatch. A builder method that
// gets bad input records the error; Execute reports it without sending.
type TransactionalBatch struct {
	pk  PartitionKey
	ops []batchOperation
	err error
}

// TransactionalBatchItemOptions are the per-operation options.
type TransactionalBatchItemOptions struct {
	IfMatch *ETag // replace, upsert, patch and delete only this version
}

// TransactionalBatchOptions are the options of a whole batch.
type TransactionalBatchOptions struct {
	SessionToken string
	// EnableContentResponseOnWrite returns written items in ResourceBody.
	// Reads always return theirs.
	EnableContentResponseOnWrite bool
}

// batchOperation is one element of the batch body. There is no per-operation
// partitionKey: the header carries it for all, as in the Go SDK.
type batchOperation struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id,omitempty"`
	ResourceBody  json.RawMessage `json:"resourceBody,omitempty"`
	IfMatch       ETag            `json:"ifMatch,omitempty"`
}

// NewTransactionalBatch starts an empty batch on partition pk.
func (cc *ContainerClient) NewTransactionalBatch(pk PartitionKey) *TransactionalBatch {
	return &TransactionalBatch{pk: pk}
}

// Len is the number of operations so far.
func (b *TransactionalBatch) Len() int { return len(b.ops) }

// PartitionKey is the partition every operation addresses.
func (b *TransactionalBatch) PartitionKey() PartitionKey { return b.pk }

func (b *TransactionalBatch) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *TransactionalBatch) add(kind, id string, body []byte, o *TransactionalBatchItemOptions) {
	op := batchOperation{OperationType: kind, ID: id, ResourceBody: body}
	if o != nil && o.IfMatch != nil && kind != "Create" && kind != "Read" {
		op.IfMatch = *o.IfMatch
	}
	b.ops = append(b.ops, op)
}

// batchOpOverhead bounds the bytes an operation adds to the batch body
// besides its document and id: its type, its If-Match and the JSON around
// them.
const batchOpOverhead = 128

// encodedBytes bounds the size of the batch's body, as sent.
func (b *TransactionalBatch) encodedBytes() int {
	n := 2
	for _, op := range b.ops {
		n += len(op.ResourceBody) + len(op.ID) + batchOpOverhead
	}
	return n
}

// append adds o's operations after b's, and o's first builder error if b
// has none.
func (b *TransactionalBatch) append(o *TransactionalBatch) {
	b.ops = append(b.ops, o.ops...)
	if o.err != nil {
		b.fail(o.err)
	}
}

// setIfMatch changes the If-Match of operation i: a batch planned before
// the document was last written (by its planner's own renewal) goes with
// the version that write left.
func (b *TransactionalBatch) setIfMatch(i int, etag ETag) {
	if i < len(b.ops) && b.ops[i].IfMatch != "" {
		b.ops[i].IfMatch = etag
	}
}

// field names operation i in validation errors.
func (b *TransactionalBatch) field(kind string) string {
	return fmt.Sprintf("operation %d (%s)", len(b.ops), kind)
}

func (b *TransactionalBatch) checkID(kind, id string) bool {
	if err := validateID(executeBatchOp, id); err != nil {
		b.fail(relabel(err, b.field(kind)))
		return false
	}
	return true
}

func (b *TransactionalBatch) checkDocument(kind string, item []byte) (string, bool) {
	id, err := validateDocument(executeBatchOp, item)
	if err != nil {
		b.fail(relabel(err, b.field(kind)))
		return "", false
	}
	return id, true
}

// relabel prefixes a validation error's field with the operation it concerns.
func relabel(err error, prefix string) error {
	if ve, ok := err.(*ValidationError); ok {
		c := *ve
		c.Field = prefix + ": " + c.Field
		return &c
	}
	return err
}

// CreateItem adds a create of item.
func (b *TransactionalBatch) CreateItem(item []byte, o *TransactionalBatchItemOptions) {
	if _, ok := b.checkDocument("Create", item); ok {
		b.add("Create", "", item, o)
	}
}

// UpsertItem adds an upsert of item.
func (b *TransactionalBatch) UpsertItem(item []byte, o *TransactionalBatchItemOptions) {
	if _, ok := b.checkDocument("Upsert", item); ok {
		b.add("Upsert", "", item, o)
	}
}

// ReadItem adds a read of item id.
func (b *TransactionalBatch) ReadItem(id string, o *TransactionalBatchItemOptions) {
	if b.checkID("Read", id) {
		b.add("Read", id, nil, o)
	}
}

// ReplaceItem adds a replace of item id with item.
func (b *TransactionalBatch) ReplaceItem(id string, item []byte, o *TransactionalBatchItemOptions) {
	if !b.checkID("Replace", id) {
		return
	}
	bodyID, ok := b.checkDocument("Replace", item)
	if !ok {
		return
	}
	if bodyID != id {
		b.fail(invalid(executeBatchOp, b.field("Replace")+": document", ErrInvalidDocument, "body id %q differs from id %q", bodyID, id))
		return
	}
	b.add("Replace", id, item, o)
}

// DeleteItem adds a delete of item id.
func (b *TransactionalBatch) DeleteItem(id string, o *TransactionalBatchItemOptions) {
	if b.checkID("Delete", id) {
		b.add("Delete", id, nil, o)
	}
}

// PatchItem adds a patch of item id.
func (b *TransactionalBatch) PatchItem(id string, ops PatchOperations, o *TransactionalBatchItemOptions) {
	if !b.checkID("Patch", id) {
		return
	}
	body, err := ops.encode(executeBatchOp)
	if err != nil {
		b.fail(relabel(err, b.field("Patch")))
		return
	}
	b.add("Patch", id, body, o)
}

const executeBatchOp = "ExecuteTransactionalBatch"

// TransactionalBatchResponse is the outcome of a batch that the service
// answered with per-operation results. Success false means the batch did not
// apply (or, on a server without atomic batches, applied only in part); see
// FailedOperation.
type TransactionalBatchResponse struct {
	Success          bool
	OperationResults []TransactionalBatchResult // one per operation, in order
	StatusCode       int                        // 200, or 207 Multi-Status on failure
	RequestCharge    float64
	ActivityID       string
	SessionToken     string
	Attempts         int

	kinds []string // operation types, for messages
}

// TransactionalBatchResult is the result of one operation of a batch.
type TransactionalBatchResult struct {
	StatusCode    int
	SubStatusCode int
	RequestCharge float64
	ETag          ETag
	ResourceBody  []byte // nil when absent
	RetryAfter    time.Duration
}

type batchResultWire struct {
	StatusCode             int             `json:"statusCode"`
	SubStatusCode          int             `json:"subStatusCode"`
	RequestCharge          float64         `json:"requestCharge"`
	ETag                   ETag            `json:"eTag"`
	ResourceBody           json.RawMessage `json:"resourceBody"`
	RetryAfterMilliseconds float64         `json:"retryAfterMilliseconds"`
}

// FailedOperation finds, on a failed batch, the operation that caused it:
// the first one whose status is an error other than 424 Failed Dependency.
// Its error is a *CosmosError, for the predicates (IsPreconditionFailed,
// IsNotFound, IsConflict and the rest) to read; a failed batch whose
// results name no such operation gives index -1 and the batch's own status.
// A batch that committed gives -1 and a nil error.
func (r TransactionalBatchResponse) FailedOperation() (index int, err error) {
	if r.Success {
		return -1, nil
	}
	for i, res := range r.OperationResults {
		if res.StatusCode >= 400 && res.StatusCode != http.StatusFailedDependency {
			return i, r.operationError(i)
		}
	}
	return -1, &CosmosError{Operation: executeBatchOp, StatusCode: r.StatusCode, ActivityID: r.ActivityID,
		RequestCharge: r.RequestCharge, Message: "transactional batch failed without a failed operation"}
}

// readItemsInOneBatch reads several documents of one partition in one
// transactional batch, which the partition's primary serves: unlike a point
// read under Session consistency, it sees every write that committed,
// including one whose response (and session token) was lost. Any missing
// document fails the whole read with its 404.
func (cc *ContainerClient) readItemsInOneBatch(ctx context.Context, pk PartitionKey, ids []string) ([]ItemResponse, error) {
	b := cc.NewTransactionalBatch(pk)
	for _, id := range ids {
		b.ReadItem(id, nil)
	}
	resp, err := cc.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return nil, err
	}
	if !resp.Success {
		return nil, batchError(resp)
	}
	out := make([]ItemResponse, len(resp.OperationResults))
	for i, r := range resp.OperationResults {
		out[i] = ItemResponse{Value: r.ResourceBody, ETag: r.ETag, StatusCode: r.StatusCode, RequestCharge: r.RequestCharge}
	}
	return out, nil
}

// batchError is the error of a batch that did not commit: its failed
// operation's.
func batchError(r TransactionalBatchResponse) error {
	_, err := r.FailedOperation()
	return err
}

func (r TransactionalBatchResponse) operationError(i int) *CosmosError {
	res := r.OperationResults[i]
	kind := "?"
	if i < len(r.kinds) {
		kind = r.kinds[i]
	}
	ce := &CosmosError{
		Operation:     executeBatchOp,
		StatusCode:    res.StatusCode,
		SubStatusCode: res.SubStatusCode,
		ActivityID:    r.ActivityID,
		RequestCharge: res.RequestCharge,
		RetryAfter:    res.RetryAfter,
		Message:       fmt.Sprintf("operation %d (%s) failed", i, kind),
	}
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(res.ResourceBody, &body) == nil && body.Message != "" {
		ce.Code = body.Code
		ce.Message += ": " + body.Message
	}
	return ce
}

// ExecuteTransactionalBatch sends b, atomically: all its operations commit
// or none does. A batch the service
// answered per operation returns a nil error, Success telling whether it
// committed; a whole-request failure (no per-operation results) returns a
// *CosmosError. Limits are checked before sending.
func (cc *ContainerClient) ExecuteTransactionalBatch(ctx context.Context, b *TransactionalBatch, o *TransactionalBatchOptions) (TransactionalBatchResponse, error) {
	const op = executeBatchOp
	req, err := newBatchRequest(cc, b, o)
	if err != nil {
		return TransactionalBatchResponse{}, err
	}
	resp, err := cc.client.send(ctx, req)
	if err != nil {
		return TransactionalBatchResponse{}, err
	}
	return parseBatchResponse(op, resp, b)
}

func newBatchRequest(cc *ContainerClient, b *TransactionalBatch, o *TransactionalBatchOptions) (*request, error) {
	const op = executeBatchOp
	if b == nil {
		return nil, invalid(op, "batch", ErrBatchEmpty, "nil batch")
	}
	if b.err != nil {
		return nil, b.err
	}
	n := len(b.ops)
	if n == 0 {
		return nil, invalid(op, "batch", ErrBatchEmpty, "no operations")
	}
	if n > MaxBatchOperations {
		return nil, invalid(op, "batch", ErrBatchTooManyOperations,
			"%d operations, %d allowed (%d over)", n, MaxBatchOperations, n-MaxBatchOperations)
	}
	body, err := encodeBatchOperations(b.ops)
	if err != nil {
		return nil, invalid(op, "batch", ErrInvalidDocument, "encoding: %v", err)
	}
	if len(body) > MaxBatchBytes {
		return nil, invalid(op, "batch", ErrBatchTooLarge,
			"encoded body is %d bytes, %d allowed (%d over)", len(body), MaxBatchBytes, len(body)-MaxBatchBytes)
	}
	pkh, err := b.pk.header(op)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("x-ms-documentdb-partitionkey", pkh)
	h.Set("x-ms-cosmos-is-batch-request", "True")
	h.Set("x-ms-cosmos-batch-atomic", "True")
	h.Set("x-ms-cosmos-batch-ordered", "True")
	if o == nil {
		o = &TransactionalBatchOptions{}
	}
	if o.SessionToken != "" {
		h.Set("x-ms-session-token", o.SessionToken)
	}
	reads := b.readCount()
	// A read's result is its body, so any read forces content (as the Go SDK).
	if !o.EnableContentResponseOnWrite && reads == 0 {
		h.Set("Prefer", "return=minimal")
	}
	return &request{
		operation:  op,
		method:     http.MethodPost,
		ref:        documentsFeedRef(cc.databaseID, cc.id),
		header:     h,
		body:       body,
		idempotent: reads == n,
		retryOK:    retryRolledBackBatch,
		// The primary runs a batch, reads included: it needs no token,
		// and its answer moves the session.
		session: cc.writeSession(),
	}, nil
}

// encodeBatchOperations is the batch body: the operations as a JSON array,
// each resource body as it was added. Every body was checked when it was
// added (a document has a string id and is valid JSON; a patch is this
// package's encoding), so it is not scanned again here: encoding/json
// compacts and re-validates a json.RawMessage on every send, a pass over
// every document of every batch.
func encodeBatchOperations(ops []batchOperation) ([]byte, error) {
	size := 2
	for _, op := range ops {
		size += len(op.ResourceBody) + len(op.ID) + len(op.IfMatch) + len(`{"operationType":"","id":"","resourceBody":,"ifMatch":""},`)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, '[')
	var err error
	for i, op := range ops {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"operationType":`...)
		if buf, err = appendJSONString(buf, op.OperationType); err != nil {
			return nil, err
		}
		if op.ID != "" {
			buf = append(buf, `,"id":`...)
			if buf, err = appendJSONString(buf, op.ID); err != nil {
				return nil, err
			}
		}
		if len(op.ResourceBody) > 0 {
			buf = append(buf, `,"resourceBody":`...)
			buf = append(buf, op.ResourceBody...)
		}
		if op.IfMatch != "" {
			buf = append(buf, `,"ifMatch":`...)
			if buf, err = appendJSONString(buf, string(op.IfMatch)); err != nil {
				return nil, err
			}
		}
		buf = append(buf, '}')
	}
	return append(buf, ']'), nil
}

// appendJSONString appends s as a JSON string, as marshalCompact encodes
// it: printable ASCII as it is, quotes and backslashes escaped (an ETag is
// quoted), anything else through the encoder.
func appendJSONString(buf []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			quoted, err := marshalCompact(s)
			return append(buf, quoted...), err
		}
	}
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			buf = append(buf, '\\')
		}
		buf = append(buf, s[i])
	}
	return append(buf, '"'), nil
}

func (b *TransactionalBatch) readCount() int {
	n := 0
	for _, op := range b.ops {
		if op.OperationType == "Read" {
			n++
		}
	}
	return n
}

// retryRolledBackBatch retries a batch the service rolled back (207) because
// one operation was throttled (429) or asked to retry (449): nothing was
// applied, so sending it again is safe. A 200 with failures is never retried:
// it comes from servers without atomic batches.
func retryRolledBackBatch(resp *response) (bool, time.Duration) {
	if resp.StatusCode != http.StatusMultiStatus {
		return false, 0
	}
	var results []batchResultWire
	if json.Unmarshal(resp.Body, &results) != nil {
		return false, 0
	}
	for _, r := range results {
		switch r.StatusCode {
		case http.StatusFailedDependency:
			continue
		case http.StatusTooManyRequests, 449:
			return true, time.Duration(r.RetryAfterMilliseconds * float64(time.Millisecond))
		}
		if r.StatusCode >= 400 {
			return false, 0
		}
	}
	return false, 0
}

// parseBatchResponse reads the per-operation array of a 200 or 207.
func parseBatchResponse(op string, resp *response, b *TransactionalBatch) (TransactionalBatchResponse, error) {
	out := TransactionalBatchResponse{
		StatusCode:    resp.StatusCode,
		RequestCharge: resp.RequestCharge,
		ActivityID:    resp.ActivityID,
		SessionToken:  resp.SessionToken,
		Attempts:      resp.Attempts,
		kinds:         make([]string, len(b.ops)),
	}
	for i, o := range b.ops {
		out.kinds[i] = o.OperationType
	}
	var results []batchResultWire
	if err := json.Unmarshal(resp.Body, &results); err != nil || len(results) != len(b.ops) {
		// The service answered 2xx but we cannot tell what each operation
		// did; on a 200 the batch most likely committed.
		msg := fmt.Sprintf("response holds no result array for the %d operations", len(b.ops))
		if err == nil {
			msg = fmt.Sprintf("response holds %d results for %d operations", len(results), len(b.ops))
		}
		return out, &CosmosError{Operation: op, StatusCode: resp.StatusCode, ActivityID: resp.ActivityID,
			RequestCharge: resp.RequestCharge, Message: msg, OutcomeUnknown: resp.StatusCode != http.StatusMultiStatus}
	}
	out.Success = resp.StatusCode != http.StatusMultiStatus
	out.OperationResults = make([]TransactionalBatchResult, len(results))
	for i, r := range results {
		if r.StatusCode >= 400 {
			// Some servers answer 200 and report failures only per operation.
			out.Success = false
		}
		out.OperationResults[i] = TransactionalBatchResult{
			StatusCode:    r.StatusCode,
			SubStatusCode: r.SubStatusCode,
			RequestCharge: r.RequestCharge,
			ETag:          r.ETag,
			ResourceBody:  rawOrNil(r.ResourceBody),
			RetryAfter:    time.Duration(r.RetryAfterMilliseconds * float64(time.Millisecond)),
		}
	}
	return out, nil
}

func rawOrNil(m json.RawMessage) []byte {
	if len(m) == 0 || string(m) == "null" {
		return nil
	}
	return m
}

// marshalCompact is json.Marshal without HTML escaping of <, > and &: the
// way serde_json encodes (so duroxide's JSON shapes match byte for byte),
// and so that documents embedded as raw JSON keep their bytes and their
// size.
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
