package fakecosmos

import (
	"errors"
	"net/http"
)

// hdrBatchContinueOnError asks a bulk (non-atomic) batch to run the
// operations after a failed one; without it they answer 424.
const hdrBatchContinueOnError = "x-ms-cosmos-batch-continue-on-error"

// bulkTarget is what a bulk request addresses: one logical partition (the
// pk header) or one partition key range (the range id header, as the
// SDKs' bulk executors send it, each operation naming its partition key).
type bulkTarget struct {
	pk  *pkValue // the pk header's partition, or nil
	rng *pkRange
}

// executeBulk runs a non-atomic batch (x-ms-cosmos-batch-atomic absent or
// False): every operation in order, each committed on its own, so a
// failure undoes nothing. The answer is the per-operation array, 200 when
// every operation succeeded and 207 otherwise. Without continue-on-error
// the operations after the first failure do not run and answer 424.
// Request-level refusals (size, count, malformed body, addressing) answer
// as for an atomic batch, with no array.
func (s *Server) executeBulk(q *request) (*result, error) {
	if len(q.body) > maxBatchBytes {
		return nil, tooLarge()
	}
	ops, err := parseBatch(q.body)
	if err != nil {
		return nil, err
	}
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	target, err := resolveBulkTarget(q, c)
	if err != nil {
		return nil, err
	}
	results := make([]batchResult, len(ops))
	total, failed := 0.0, false
	for i, op := range ops {
		if failed && !q.flag(hdrBatchContinueOnError) {
			results[i] = batchResult{StatusCode: http.StatusFailedDependency}
			continue
		}
		res, charge, err := s.runBulkOp(c, target, op, q.preferMinimal())
		if err != nil {
			return nil, err
		}
		results[i], total = res, total+charge
		failed = failed || res.StatusCode >= 400
	}
	status := http.StatusOK
	if failed {
		status = http.StatusMultiStatus
	}
	return &result{status: status, body: encodeJSON(results), charge: total,
		session: sessionToken(target.rng.id, target.rng.lsn), lsn: target.rng.lsn}, nil
}

// resolveBulkTarget reads the addressing headers. Call with c.mu held.
func resolveBulkTarget(q *request, c *container) (bulkTarget, error) {
	if header := q.header(hdrPartitionKey); header != "" {
		pk, err := parsePartitionKeyHeader(header)
		if err != nil {
			return bulkTarget{}, err
		}
		return bulkTarget{pk: &pk, rng: c.rangeFor(c.epkPosition(pk))}, nil
	}
	if id := q.header(hdrPartitionKeyRangeID); id != "" {
		rng := c.rangeByID(id)
		if rng == nil {
			return bulkTarget{}, newSubError(http.StatusGone, subStatusRangeGone, msgRangeGone)
		}
		return bulkTarget{rng: rng}, nil
	}
	return bulkTarget{}, badRequest("A bulk (non-atomic) batch must carry x-ms-documentdb-partitionkey or x-ms-documentdb-partitionkeyrangeid.")
}

// runBulkOp runs one operation in its own transaction and renders its
// result; a refusal of the operation is its result, not an error.
func (s *Server) runBulkOp(c *container, target bulkTarget, op batchOp, minimal bool) (batchResult, float64, error) {
	pk, err := bulkOpPartition(c, target, op)
	if err == nil {
		t := c.begin(s, pk)
		var out opResult
		if out, err = t.runBatchOp(op); err == nil {
			t.commit()
			return renderBatchResult(op, out, minimal), out.charge, nil
		}
	}
	var ce *cosmosError
	if !errors.As(err, &ce) {
		return batchResult{}, 0, err
	}
	return batchResult{StatusCode: ce.status, SubStatusCode: ce.subStatus, RequestCharge: chargeRefusal}, chargeRefusal, nil
}

// bulkOpPartition is the logical partition an operation writes: its own
// partitionKey, else the header's, else (creates and upserts) its body's.
// An operation whose partition lies outside the addressed range answers
// 410/1002, as a request to a range that no longer holds it does, so that
// an SDK re-reads the ranges and sends it again.
func bulkOpPartition(c *container, target bulkTarget, op batchOp) (pkValue, error) {
	switch {
	case target.pk != nil && op.partitionKey != nil && *op.partitionKey != *target.pk:
		return pkValue{}, badRequest("The operation's partitionKey differs from the request's x-ms-documentdb-partitionkey.")
	case target.pk != nil:
		return *target.pk, nil
	case op.partitionKey != nil:
		return inRange(c, target.rng, *op.partitionKey)
	case op.body != nil:
		pk, err := partitionKeyOf(op.body, c.pkPath)
		if err != nil {
			return pkValue{}, err
		}
		return inRange(c, target.rng, pk)
	}
	return pkValue{}, badRequest("A bulk %s operation addressed by partition key range needs a \"partitionKey\".", op.kind)
}

func inRange(c *container, rng *pkRange, pk pkValue) (pkValue, error) {
	if c.rangeFor(c.epkPosition(pk)) != rng {
		return pkValue{}, newSubError(http.StatusGone, subStatusRangeGone, msgRangeGone)
	}
	return pk, nil
}
