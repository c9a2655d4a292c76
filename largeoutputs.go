package cdb

import (
	"context"
	"encoding/json"
	"fmt"
)

// Large values: an execution's output (a ContinuedAsNew execution's is the
// next one's input) goes into its history, its execution document and its
// instance document. Written whole into both documents, a value of about 1 MB
// overflowed the commit batch. A value larger than inlineValueBytes is
// instead written once, in a value document staged before the commit like a
// history part, which the commit makes permanent and both documents name
// (outputRef); reads resolve the name.

const (
	docValue = "value" // an output too large to repeat in the instance and execution documents

	// inlineValueBytes is the largest output kept in the instance and
	// execution documents themselves. The instance document is patched on
	// every lock, renewal and release, and a write costs by size.
	inlineValueBytes = 64 * 1024
)

// valueDoc holds one large value. Exec ties it to its execution, so
// pruning the execution removes it.
type valueDoc struct {
	ID       string `json:"id"`
	PK       string `json:"pk"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Exec     uint64 `json:"exec"`
	Data     string `json:"data"`
	TTL      int    `json:"ttl,omitempty"`
}

func valueDocID(ackToken string) string { return "v|" + ackToken }

// outputPlacement is where a turn's output goes: the value document to
// stage, if any.
type outputPlacement struct {
	staged  [][]byte // the value document's body
	valueID string
}

// placeOutput moves the output a turn sets (its metadata has a status) out
// of the instance and execution documents into a value document when it is
// larger than inlineValueBytes. A value an earlier turn of the same
// execution set (a second terminal status) is left to the execution's
// pruning or the instance's deletion: deleting it in the commit would make
// the commit fail for good should it be gone.
func placeOutput(inst *instanceDoc, execDoc *executionDoc, md ExecutionMetadata, ackToken string) (outputPlacement, error) {
	var out outputPlacement
	if md.Status == nil {
		return out, nil
	}
	if execDoc.Output == nil || len(*execDoc.Output) <= inlineValueBytes {
		return out, nil
	}
	v := valueDoc{ID: valueDocID(ackToken), PK: execDoc.PK, Type: docValue, Instance: execDoc.Instance, Exec: execDoc.Exec,
		Data: *execDoc.Output, TTL: stagedPartTTL}
	body, err := json.Marshal(v)
	if err != nil {
		return out, fmt.Errorf("encode output value: %w", err)
	}
	if len(body) > MaxDocumentBytes {
		return out, fmt.Errorf("the output is %d bytes; a Cosmos DB document holds %d: %w", len(*execDoc.Output), MaxDocumentBytes, ErrDocumentTooLarge)
	}
	execDoc.Output, execDoc.OutputRef = nil, v.ID
	if inst.CurrentExec == execDoc.Exec {
		inst.Output, inst.OutputRef = nil, v.ID
	}
	out.staged, out.valueID = [][]byte{body}, v.ID
	return out, nil
}

// addTo adds to the commit batch the PATCH that makes the staged value
// permanent.
func (o outputPlacement) addTo(b *TransactionalBatch) {
	if o.valueID != "" {
		keepStaged(b, o.valueID)
	}
}

// keepStaged adds to a commit batch the PATCH that makes a document staged
// before it permanent.
func keepStaged(b *TransactionalBatch, id string) {
	var keep PatchOperations
	keep.AppendSet("/ttl", -1)
	b.PatchItem(id, keep, nil)
}

// resolveOutput is an output as the instance or execution document has it:
// inline, or in the value document it names.
func (p *CosmosProvider) resolveOutput(ctx context.Context, pk string, inline *string, ref string) (*string, error) {
	if ref == "" {
		return inline, nil
	}
	resp, err := p.container.ReadItem(ctx, NewPartitionKeyString(pk), ref, nil)
	if err != nil {
		return nil, fmt.Errorf("read output value %s: %w", ref, err)
	}
	var v valueDoc
	if err := json.Unmarshal(resp.Value, &v); err != nil {
		return nil, fmt.Errorf("decode output value %s: %w", ref, err)
	}
	return &v.Data, nil
}
