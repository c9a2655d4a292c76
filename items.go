package cdb

// Items: creating, reading, replacing, deleting and patching one document.

import (
	"context"
	"net/http"
)

// ETag is an opaque version of an item. It is echoed byte for byte: real
// Cosmos DB quotes it, some other servers do not.
type ETag string

// ETagAny matches any version in If-Match.
const ETagAny ETag = "*"

// ItemOptions are the options of single-item operations.
type ItemOptions struct {
	// IfMatch makes replace, upsert, patch and delete conditional on the
	// item's current ETag: 412 when it changed.
	IfMatch *ETag
	// EnableContentResponseOnWrite asks writes to return the item; by
	// default they return no body (Prefer: return=minimal).
	EnableContentResponseOnWrite bool
	// SessionToken is sent as x-ms-session-token (Session consistency)
	// instead of the one the client keeps for the container.
	SessionToken string
}

// ItemResponse is the result of a single-item operation.
type ItemResponse struct {
	Value         []byte // the item; nil when the server sent no body
	ETag          ETag
	StatusCode    int
	RequestCharge float64 // RU, summed over attempts
	ActivityID    string
	SessionToken  string
	Attempts      int
}

func newItemResponse(r *response) ItemResponse {
	return ItemResponse{
		Value:         r.bodyOrNil(),
		ETag:          r.etag(),
		StatusCode:    r.StatusCode,
		RequestCharge: r.RequestCharge,
		ActivityID:    r.ActivityID,
		SessionToken:  r.SessionToken,
		Attempts:      r.Attempts,
	}
}

// itemHeaders renders the partition key and options shared by item
// operations. write selects the write-only headers.
func itemHeaders(op string, pk PartitionKey, o *ItemOptions, write bool) (http.Header, error) {
	pkh, err := pk.header(op)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("x-ms-documentdb-partitionkey", pkh)
	if o == nil {
		o = &ItemOptions{}
	}
	if o.SessionToken != "" {
		h.Set("x-ms-session-token", o.SessionToken)
	}
	if write {
		if o.IfMatch != nil {
			h.Set("If-Match", string(*o.IfMatch))
		}
		if !o.EnableContentResponseOnWrite {
			h.Set("Prefer", "return=minimal")
		}
	}
	return h, nil
}

func (cc *ContainerClient) sendItem(ctx context.Context, r *request) (ItemResponse, error) {
	resp, err := cc.client.send(ctx, r)
	if err != nil {
		return ItemResponse{}, err
	}
	return newItemResponse(resp), nil
}

// CreateItem creates item (a JSON object with an id) in partition pk: 201,
// or 409 when the id exists in that partition.
func (cc *ContainerClient) CreateItem(ctx context.Context, pk PartitionKey, item []byte, o *ItemOptions) (ItemResponse, error) {
	const op = "CreateItem"
	if _, err := validateDocument(op, item); err != nil {
		return ItemResponse{}, err
	}
	var opts ItemOptions
	if o != nil {
		opts = *o
		opts.IfMatch = nil // meaningless on create
	}
	h, err := itemHeaders(op, pk, &opts, true)
	if err != nil {
		return ItemResponse{}, err
	}
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodPost,
		ref: documentsFeedRef(cc.databaseID, cc.id), header: h, body: item, session: cc.writeSession()})
}

// UpsertItem creates or replaces item: 201 or 200. With IfMatch it replaces
// only that version (412 otherwise).
func (cc *ContainerClient) UpsertItem(ctx context.Context, pk PartitionKey, item []byte, o *ItemOptions) (ItemResponse, error) {
	const op = "UpsertItem"
	if _, err := validateDocument(op, item); err != nil {
		return ItemResponse{}, err
	}
	h, err := itemHeaders(op, pk, o, true)
	if err != nil {
		return ItemResponse{}, err
	}
	h.Set("x-ms-documentdb-is-upsert", "True")
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodPost,
		ref: documentsFeedRef(cc.databaseID, cc.id), header: h, body: item, session: cc.writeSession()})
}

// ReadItem reads item id of partition pk: 200, or 404.
func (cc *ContainerClient) ReadItem(ctx context.Context, pk PartitionKey, id string, o *ItemOptions) (ItemResponse, error) {
	const op = "ReadItem"
	if err := validateID(op, id); err != nil {
		return ItemResponse{}, err
	}
	h, err := itemHeaders(op, pk, o, false)
	if err != nil {
		return ItemResponse{}, err
	}
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodGet,
		ref: documentRef(cc.databaseID, cc.id, id), header: h, idempotent: true, session: cc.pointSession(ctx, pk, h)})
}

// ReplaceItem replaces item id with item: 200, 404, or 412 on a stale IfMatch.
func (cc *ContainerClient) ReplaceItem(ctx context.Context, pk PartitionKey, id string, item []byte, o *ItemOptions) (ItemResponse, error) {
	const op = "ReplaceItem"
	if err := validateID(op, id); err != nil {
		return ItemResponse{}, err
	}
	bodyID, err := validateDocument(op, item)
	if err != nil {
		return ItemResponse{}, err
	}
	if bodyID != id {
		return ItemResponse{}, invalid(op, "document", ErrInvalidDocument, "body id %q differs from id %q", bodyID, id)
	}
	h, err := itemHeaders(op, pk, o, true)
	if err != nil {
		return ItemResponse{}, err
	}
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodPut,
		ref: documentRef(cc.databaseID, cc.id, id), header: h, body: item, session: cc.writeSession()})
}

// DeleteItem deletes item id: 204, 404, or 412 on a stale IfMatch.
func (cc *ContainerClient) DeleteItem(ctx context.Context, pk PartitionKey, id string, o *ItemOptions) (ItemResponse, error) {
	const op = "DeleteItem"
	if err := validateID(op, id); err != nil {
		return ItemResponse{}, err
	}
	h, err := itemHeaders(op, pk, o, true)
	if err != nil {
		return ItemResponse{}, err
	}
	h.Del("Prefer") // a delete has no body either way
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodDelete,
		ref: documentRef(cc.databaseID, cc.id, id), header: h, session: cc.writeSession()})
}

// PatchItem applies ops to item id: 200, 404, or 412 when IfMatch is stale or
// the condition is false.
func (cc *ContainerClient) PatchItem(ctx context.Context, pk PartitionKey, id string, ops PatchOperations, o *ItemOptions) (ItemResponse, error) {
	const op = "PatchItem"
	if err := validateID(op, id); err != nil {
		return ItemResponse{}, err
	}
	body, err := ops.encode(op)
	if err != nil {
		return ItemResponse{}, err
	}
	h, err := itemHeaders(op, pk, o, true)
	if err != nil {
		return ItemResponse{}, err
	}
	return cc.sendItem(ctx, &request{operation: op, method: http.MethodPatch,
		ref: documentRef(cc.databaseID, cc.id, id), header: h, body: body, session: cc.writeSession()})
}
