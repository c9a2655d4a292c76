package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Service limits the client checks before sending.
const (
	MaxIDLength        = 255             // characters, for item ids and database/container names
	MaxDocumentBytes   = 2 * 1024 * 1024 // one item's JSON
	MaxPatchOperations = 10
)

// Indexing policy values, as the service spells them.
const (
	IndexingModeConsistent    = "consistent"
	IndexingModeNone          = "none"
	CompositeIndexAscending   = "ascending"
	CompositeIndexDescending  = "descending"
	PartitionKeyKindHash      = "Hash"
	PartitionKeyKindMultiHash = "MultiHash"
)

// ContainerClient addresses one container. It is cheap, holds no
// connection and is safe for concurrent use.
type ContainerClient struct {
	client     *Client
	databaseID string
	id         string
}

// ID is the container id.
func (cc *ContainerClient) ID() string { return cc.id }

// DatabaseID is the id of the container's database.
func (cc *ContainerClient) DatabaseID() string { return cc.databaseID }

// sessionLink keys the container's session tokens in the client.
func (cc *ContainerClient) sessionLink() string { return containerRef(cc.databaseID, cc.id).link }

// writeSession: a write's answer moves the container's session.
func (cc *ContainerClient) writeSession() sessionUse { return sessionUse{container: cc.sessionLink()} }

// readSession: a read sends the session token and takes the answer's.
func (cc *ContainerClient) readSession() sessionUse {
	return sessionUse{container: cc.sessionLink(), send: true}
}

// ---------------------------------------------------------------------------
// Container properties and management.

// ContainerProperties describes a container: its id, partition key,
// indexing policy and default time to live.
type ContainerProperties struct {
	ID                string                 `json:"id"`
	PartitionKey      PartitionKeyDefinition `json:"partitionKey"`
	IndexingPolicy    *IndexingPolicy        `json:"indexingPolicy,omitempty"`
	DefaultTimeToLive *int                   `json:"defaultTtl,omitempty"` // seconds; -1 enables per-item TTL without a default
	ResourceID        string                 `json:"_rid,omitempty"`       // set by the service
	ETag              ETag                   `json:"_etag,omitempty"`      // set by the service
	// IndexTransformationProgress is how much of a change to the indexing
	// policy the service has applied, in percent, as a Read reported it:
	// 100 when none is under way, -1 when the service did not say. An
	// index still being built may not serve queries that order by it.
	IndexTransformationProgress int `json:"-"`
}

// PartitionKeyDefinition says where an item's partition key lives.
type PartitionKeyDefinition struct {
	Paths   []string `json:"paths"`             // e.g. ["/pk"]
	Kind    string   `json:"kind,omitempty"`    // "Hash" (default) or "MultiHash" for hierarchical keys
	Version int      `json:"version,omitempty"` // 2 (default): large partition key values
}

// IndexingPolicy is a container's indexing policy.
type IndexingPolicy struct {
	IndexingMode     string             `json:"indexingMode,omitempty"` // "consistent" or "none"
	Automatic        bool               `json:"automatic"`
	IncludedPaths    []IncludedPath     `json:"includedPaths,omitempty"`
	ExcludedPaths    []ExcludedPath     `json:"excludedPaths,omitempty"`
	CompositeIndexes [][]CompositeIndex `json:"compositeIndexes,omitempty"`
}

// IncludedPath is a path the index covers, e.g. "/*".
type IncludedPath struct {
	Path string `json:"path"`
}

// ExcludedPath is a path the index skips, e.g. `/"_etag"/?`.
type ExcludedPath struct {
	Path string `json:"path"`
}

// CompositeIndex is one path of a composite index; ORDER BY on several
// properties needs one.
type CompositeIndex struct {
	Path  string `json:"path"`
	Order string `json:"order,omitempty"` // "ascending" (also when empty, as on the service) or "descending"
}

// DefaultIndexingPolicy indexes everything but _etag, consistently. The
// provider adds the composite indexes its ORDER BY queries need.
func DefaultIndexingPolicy() IndexingPolicy {
	return IndexingPolicy{
		IndexingMode:  IndexingModeConsistent,
		Automatic:     true,
		IncludedPaths: []IncludedPath{{Path: "/*"}},
		ExcludedPaths: []ExcludedPath{{Path: `/"_etag"/?`}},
	}
}

// Create creates the container; 409 if it exists.
func (cc *ContainerClient) Create(ctx context.Context, props ContainerProperties) (ContainerProperties, error) {
	const op = "CreateContainer"
	body, err := cc.encodeProperties(op, props)
	if err != nil {
		return ContainerProperties{}, err
	}
	resp, err := cc.client.send(ctx, &request{operation: op, method: http.MethodPost,
		ref: containersFeedRef(cc.databaseID), body: body})
	if err != nil {
		return ContainerProperties{}, err
	}
	// A new container starts its own positions and ranges; any kept under
	// its name belong to one deleted before.
	cc.client.sessions.forget(cc.sessionLink())
	cc.client.routing.forget(cc.sessionLink())
	var out ContainerProperties
	if err := decodeJSON(op, resp.Body, &out); err != nil {
		return ContainerProperties{}, err
	}
	cc.keepDefinition(out)
	return out, nil
}

// encodeProperties checks props for this container, fills the defaults and
// encodes them as a create or replace sends them.
func (cc *ContainerClient) encodeProperties(op string, props ContainerProperties) ([]byte, error) {
	props, err := cc.normalizeProperties(op, props)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(props)
	if err != nil {
		return nil, fmt.Errorf("cdb: %s: encoding properties: %w", op, err)
	}
	return body, nil
}

// Read reads the container's properties; 404 if it does not exist.
func (cc *ContainerClient) Read(ctx context.Context) (ContainerProperties, error) {
	h := http.Header{}
	// Asks for the quota headers, the index transformation's progress among them.
	h.Set(headerPopulateQuotaInfo, "True")
	return cc.readProperties(ctx, "ReadContainer", h)
}

// readProperties reads the container's properties with the headers h, and
// keeps its partition key definition for routing.
func (cc *ContainerClient) readProperties(ctx context.Context, op string, h http.Header) (ContainerProperties, error) {
	resp, err := cc.client.send(ctx, &request{operation: op, method: http.MethodGet,
		ref: containerRef(cc.databaseID, cc.id), header: h, idempotent: true})
	if err != nil {
		return ContainerProperties{}, err
	}
	var out ContainerProperties
	if err := decodeJSON(op, resp.Body, &out); err != nil {
		return ContainerProperties{}, err
	}
	out.IndexTransformationProgress = indexTransformationProgress(resp.Header)
	cc.keepDefinition(out)
	return out, nil
}

const (
	headerPopulateQuotaInfo           = "x-ms-documentdb-populatequotainfo"
	headerIndexTransformationProgress = "x-ms-documentdb-collection-index-transformation-progress"
)

// indexTransformationProgress reads the progress header: -1 when it is
// missing or not a percentage.
func indexTransformationProgress(h http.Header) int {
	v, err := strconv.Atoi(strings.TrimSpace(h.Get(headerIndexTransformationProgress)))
	if err != nil || v < 0 || v > 100 {
		return -1
	}
	return v
}

// Replace changes the container's indexing policy and default time to
// live (its id and partition key cannot change). A change to the indexing
// policy is applied by the service in the background: Read reports its
// IndexTransformationProgress.
func (cc *ContainerClient) Replace(ctx context.Context, props ContainerProperties) (ContainerProperties, error) {
	const op = "ReplaceContainer"
	body, err := cc.encodeProperties(op, props)
	if err != nil {
		return ContainerProperties{}, err
	}
	resp, err := cc.client.send(ctx, &request{operation: op, method: http.MethodPut,
		ref: containerRef(cc.databaseID, cc.id), body: body, idempotent: true})
	if err != nil {
		return ContainerProperties{}, err
	}
	var out ContainerProperties
	return out, decodeJSON(op, resp.Body, &out)
}

// Delete deletes the container and its items.
func (cc *ContainerClient) Delete(ctx context.Context) error {
	_, err := cc.client.send(ctx, &request{operation: "DeleteContainer", method: http.MethodDelete,
		ref: containerRef(cc.databaseID, cc.id)})
	if err == nil {
		cc.client.sessions.forget(cc.sessionLink())
		cc.client.routing.forget(cc.sessionLink())
	}
	return err
}

// Ensure creates the container if it is missing. When it exists, its
// partition key paths must equal props'; a container partitioned otherwise
// cannot be used and is reported as a permanent error naming both.
func (cc *ContainerClient) Ensure(ctx context.Context, props ContainerProperties) (ContainerProperties, error) {
	const op = "EnsureContainer"
	props, err := cc.normalizeProperties(op, props)
	if err != nil {
		return ContainerProperties{}, err
	}
	created, err := cc.Create(ctx, props)
	if err == nil {
		return created, nil
	}
	if !IsConflict(err) {
		return ContainerProperties{}, err
	}
	existing, err := cc.Read(ctx)
	if err != nil {
		return ContainerProperties{}, err
	}
	if !slices.Equal(existing.PartitionKey.Paths, props.PartitionKey.Paths) {
		return existing, invalid(op, "partition key", ErrPartitionKeyPathMismatch,
			"container %q exists with partition key path %s, want %s",
			cc.id, strings.Join(existing.PartitionKey.Paths, ","), strings.Join(props.PartitionKey.Paths, ","))
	}
	return existing, nil
}

// EnsureDatabase creates database id unless it exists.
func (c *Client) EnsureDatabase(ctx context.Context, id string) error {
	_, err := c.CreateDatabase(ctx, id)
	if IsConflict(err) {
		return nil
	}
	return err
}

// normalizeProperties fills the defaults and refuses what the service would.
func (cc *ContainerClient) normalizeProperties(op string, p ContainerProperties) (ContainerProperties, error) {
	if p.ID == "" {
		p.ID = cc.id
	}
	if p.ID != cc.id {
		return p, invalid(op, "id", ErrInvalidContainerProperties, "properties name container %q, client addresses %q", p.ID, cc.id)
	}
	pk := &p.PartitionKey
	if len(pk.Paths) == 0 {
		return p, invalid(op, "partition key", ErrInvalidContainerProperties, "no partition key path")
	}
	for _, path := range pk.Paths {
		if !strings.HasPrefix(path, "/") || len(path) < 2 {
			return p, invalid(op, "partition key", ErrInvalidContainerProperties, "path %q must start with '/' and name a property", path)
		}
	}
	if pk.Kind == "" {
		pk.Kind = PartitionKeyKindHash
		if len(pk.Paths) > 1 {
			pk.Kind = PartitionKeyKindMultiHash
		}
	}
	if pk.Version == 0 {
		pk.Version = 2
	}
	if p.IndexingPolicy != nil {
		if err := validateCompositeIndexes(op, p.IndexingPolicy.CompositeIndexes); err != nil {
			return p, err
		}
	}
	return p, nil
}

func validateCompositeIndexes(op string, indexes [][]CompositeIndex) error {
	for i, ci := range indexes {
		if len(ci) < 2 {
			return invalid(op, "indexing policy", ErrInvalidContainerProperties, "composite index %d has %d paths, at least 2 needed", i, len(ci))
		}
		for _, p := range ci {
			if p.Order != CompositeIndexAscending && p.Order != CompositeIndexDescending && p.Order != "" {
				return invalid(op, "indexing policy", ErrInvalidContainerProperties, "composite index %d: order %q is neither ascending nor descending", i, p.Order)
			}
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Validation of ids and names (R6): refused before anything is sent.

// validateID checks an item id: 1 to 255 characters, valid UTF-8, none of
// the characters the service reserves (/ \ ? #).
func validateID(op, id string) error { return validateResourceID(op, "id", id, ErrInvalidID) }

// validateName checks a database or container id by the same rules.
func validateName(op, field, name string) error {
	return validateResourceID(op, field, name, ErrInvalidName)
}

func validateResourceID(op, field, id string, sentinel error) error {
	if id == "" {
		return invalid(op, field, sentinel, "empty")
	}
	if !utf8.ValidString(id) {
		return invalid(op, field, sentinel, "not valid UTF-8")
	}
	if n := utf8.RuneCountInString(id); n > MaxIDLength {
		return invalid(op, field, sentinel, "%d characters, %d allowed (%d over)", n, MaxIDLength, n-MaxIDLength)
	}
	if i := strings.IndexAny(id, `/\?#`); i >= 0 {
		return invalid(op, field, sentinel, "contains %q at byte %d; / \\ ? # are not allowed", id[i], i)
	}
	return nil
}

// validateDocument checks an item body: at most 2 MB, a JSON object with a
// valid string id. It returns the id.
func validateDocument(op string, item []byte) (string, error) {
	if len(item) > MaxDocumentBytes {
		return "", invalid(op, "document", ErrDocumentTooLarge,
			"%d bytes, %d allowed (%d over)", len(item), MaxDocumentBytes, len(item)-MaxDocumentBytes)
	}
	var doc struct {
		ID *string `json:"id"`
	}
	if err := json.Unmarshal(item, &doc); err != nil {
		return "", invalid(op, "document", ErrInvalidDocument, "not a JSON object with a string id: %v", err)
	}
	if doc.ID == nil {
		return "", invalid(op, "document", ErrInvalidDocument, "no id property")
	}
	return *doc.ID, validateID(op, *doc.ID)
}

// ---------------------------------------------------------------------------
// Items.

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

// ---------------------------------------------------------------------------
// Partial document update.

// PatchOperations is a list of partial-update operations, at most 10, with
// an optional condition. Paths are JSON Pointers ("/a/b"; escape ~ as ~0 and
// / as ~1).
type PatchOperations struct {
	condition  *string
	operations []patchOperation
}

type patchOperation struct {
	op       string
	path     string
	from     string
	value    any
	hasValue bool
}

func (p *PatchOperations) append(op, path string, value any, hasValue bool) {
	p.operations = append(p.operations, patchOperation{op: op, path: path, value: value, hasValue: hasValue})
}

// AppendAdd adds or replaces a property; in an array it inserts ("/-" appends).
func (p *PatchOperations) AppendAdd(path string, value any) { p.append("add", path, value, true) }

// AppendSet sets a property; in an array it replaces the element.
func (p *PatchOperations) AppendSet(path string, value any) { p.append("set", path, value, true) }

// AppendReplace replaces a property that must exist.
func (p *PatchOperations) AppendReplace(path string, value any) {
	p.append("replace", path, value, true)
}

// AppendRemove removes a property that must exist.
func (p *PatchOperations) AppendRemove(path string) { p.append("remove", path, nil, false) }

// AppendIncrement adds by to a number, creating it when absent.
func (p *PatchOperations) AppendIncrement(path string, by int64) { p.append("incr", path, by, true) }

// AppendMove moves the value at from to path.
func (p *PatchOperations) AppendMove(from, path string) {
	p.operations = append(p.operations, patchOperation{op: "move", path: path, from: from})
}

// SetCondition makes the patch conditional on a "FROM c WHERE ..." predicate:
// 412 when it is false.
func (p *PatchOperations) SetCondition(cond string) { p.condition = &cond }

// Len is the number of operations.
func (p PatchOperations) Len() int { return len(p.operations) }

// MarshalJSON renders the PATCH body: {"condition":..,"operations":[..]}.
func (p PatchOperations) MarshalJSON() ([]byte, error) { return p.encode("PatchOperations") }

type patchOperationWire struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from,omitempty"`
	Value json.RawMessage `json:"value,omitempty"` // "null" is kept: a set to null is a value
}

type patchBodyWire struct {
	Condition  *string              `json:"condition,omitempty"`
	Operations []patchOperationWire `json:"operations"`
}

// encode validates and renders the operations. The condition is JSON-encoded
// like any string (the Go SDK's sprintf would break on a quote).
func (p PatchOperations) encode(op string) ([]byte, error) {
	if err := p.validate(op); err != nil {
		return nil, err
	}
	wire := patchBodyWire{Condition: p.condition, Operations: make([]patchOperationWire, len(p.operations))}
	for i, o := range p.operations {
		w := patchOperationWire{Op: o.op, Path: o.path, From: o.from}
		if o.hasValue {
			v, err := json.Marshal(o.value)
			if err != nil {
				return nil, invalid(op, "patch", ErrInvalidPatch, "operation %d (%s %s): value: %v", i, o.op, o.path, err)
			}
			w.Value = v
		}
		wire.Operations[i] = w
	}
	b, err := json.Marshal(wire)
	if err != nil {
		return nil, fmt.Errorf("cdb: %s: encoding patch: %w", op, err)
	}
	return b, nil
}

func (p PatchOperations) validate(op string) error {
	n := len(p.operations)
	if n == 0 {
		return invalid(op, "patch", ErrInvalidPatch, "no operations")
	}
	if n > MaxPatchOperations {
		return invalid(op, "patch", ErrTooManyPatchOperations, "%d operations, %d allowed (%d over)", n, MaxPatchOperations, n-MaxPatchOperations)
	}
	for i, o := range p.operations {
		if !strings.HasPrefix(o.path, "/") {
			return invalid(op, "patch", ErrInvalidPatch, "operation %d (%s): path %q is not a JSON Pointer", i, o.op, o.path)
		}
		if o.op == "move" && !strings.HasPrefix(o.from, "/") {
			return invalid(op, "patch", ErrInvalidPatch, "operation %d (move): from %q is not a JSON Pointer", i, o.from)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// The provider's container, and the check of an existing one.

// ContainerMismatchError is NewProvider's refusal of an existing container
// that lacks what the provider needs. Problems says, one entry each, what
// differs and how to fix it.
type ContainerMismatchError struct {
	Database  string
	Container string
	Problems  []string
	pkDiffers bool
}

// Error names the container and every difference, each with its fix.
func (e *ContainerMismatchError) Error() string {
	return fmt.Sprintf("cdb: container %q in database %q cannot hold the provider's documents: %s "+
		"(the definition it needs is ProviderContainerProperties, shown as az CLI and Bicep in docs/real-account.md of github.com/duroxide-go/cdb)",
		e.Container, e.Database, strings.Join(e.Problems, "; "))
}

// Is makes a partition key difference match ErrPartitionKeyPathMismatch, as
// ContainerClient.Ensure's does.
func (e *ContainerMismatchError) Is(target error) bool {
	return target == ErrPartitionKeyPathMismatch && e.pkDiffers
}

// checkProviderContainer compares an existing container with
// ProviderContainerProperties and returns a *ContainerMismatchError listing
// what the provider cannot do without. It asks no more than that: other
// indexes, excluded paths and composite indexes are the owner's business.
func checkProviderContainer(database string, props ContainerProperties) (queueIndex queueIndex, err error) {
	e := &ContainerMismatchError{Database: database, Container: props.ID}
	want := ProviderContainerProperties(props.ID).PartitionKey.Paths
	if !slices.Equal(props.PartitionKey.Paths, want) {
		e.pkDiffers = true
		e.Problems = append(e.Problems, fmt.Sprintf("its partition key path is %s; it must be %s "+
			"(a partition key cannot change: create a new container and point Config.Container at it)",
			strings.Join(props.PartitionKey.Paths, ","), strings.Join(want, ",")))
	}
	queueIndex, problem := queueIndexOf(props.IndexingPolicy)
	if problem != "" {
		e.Problems = append(e.Problems, problem)
	}
	if p := timeToLiveProblem(props.DefaultTimeToLive); p != "" {
		e.Problems = append(e.Problems, p)
	}
	if len(e.Problems) == 0 {
		return queueIndex, nil
	}
	return queueIndex, e
}

// queueIndex is the composite index the queue queries order by.
type queueIndex int

const (
	// queueIndexByType is (type, visibleAt, seq): a queue's candidates are
	// read in index order without stepping over the other queue's items.
	queueIndexByType queueIndex = iota
	// queueIndexLegacy is (visibleAt, seq), which containers created by
	// earlier versions have: it serves the queries, at a cost that grows
	// with the other queue's visible backlog.
	queueIndexLegacy
)

// queueOrders are the ORDER BY paths each index serves.
var queueOrders = map[queueIndex][]CompositeIndex{
	queueIndexByType: {{Path: "/type", Order: CompositeIndexAscending}, {Path: "/visibleAt", Order: CompositeIndexAscending}, {Path: "/seq", Order: CompositeIndexAscending}},
	queueIndexLegacy: {{Path: "/visibleAt", Order: CompositeIndexAscending}, {Path: "/seq", Order: CompositeIndexAscending}},
}

// orderBy is the queue queries' ORDER BY clause for the index.
func (q queueIndex) orderBy() string {
	paths := queueOrders[q]
	parts := make([]string, len(paths))
	for i, p := range paths {
		parts[i] = "c." + strings.TrimPrefix(p.Path, "/") + " ASC"
	}
	return " ORDER BY " + strings.Join(parts, ", ")
}

// queueIndexOf finds the composite index the queue queries can order by,
// preferring (type, visibleAt, seq); problem says why there is none. A
// policy the service did not return is taken as its default, which has no
// composite index.
func queueIndexOf(policy *IndexingPolicy) (queueIndex, string) {
	if policy == nil {
		p := DefaultIndexingPolicy()
		policy = &p
	}
	want := describeComposite(queueOrders[queueIndexByType])
	if strings.EqualFold(policy.IndexingMode, IndexingModeNone) {
		return queueIndexByType, fmt.Sprintf("its indexing mode is %q: the queue queries need %q indexing with the composite index %s "+
			"(change the indexing policy; no new container needed)", policy.IndexingMode, IndexingModeConsistent, want)
	}
	for _, q := range []queueIndex{queueIndexByType, queueIndexLegacy} {
		for _, ci := range policy.CompositeIndexes {
			if compositeServes(ci, queueOrders[q]) {
				return q, ""
			}
		}
	}
	return queueIndexByType, fmt.Sprintf("it has no composite index %s, which the queue queries' ORDER BY c.type, c.visibleAt, c.seq needs "+
		"(add it to the indexing policy; no new container needed)", want)
}

// compositeServes reports whether a composite index serves an ORDER BY: the
// same paths in the same order, with every direction equal to the query's
// or every one inverted. An empty order is the service's default,
// ascending.
func compositeServes(ci, order []CompositeIndex) bool {
	if len(ci) != len(order) {
		return false
	}
	same, inverted := true, true
	for i, want := range order {
		if ci[i].Path != want.Path {
			return false
		}
		if compositeDescending(ci[i]) == compositeDescending(want) {
			inverted = false
		} else {
			same = false
		}
	}
	return same || inverted
}

func compositeDescending(c CompositeIndex) bool {
	return strings.EqualFold(c.Order, CompositeIndexDescending)
}

func describeComposite(ci []CompositeIndex) string {
	parts := make([]string, len(ci))
	for i, c := range ci {
		order := c.Order
		if order == "" {
			order = CompositeIndexAscending
		}
		parts[i] = c.Path + " " + order
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// timeToLiveProblem: the provider's tombstones, consumed markers and staged
// parts expire by their own ttl, which needs time to live on; everything
// else must never expire, so there must be no default.
func timeToLiveProblem(defaultTTL *int) string {
	switch {
	case defaultTTL == nil:
		return "its time to live is off, so the provider's tombstones, consumed markers and staged parts would never expire " +
			"(set defaultTtl -1: on, with no default; no new container needed)"
	case *defaultTTL != -1:
		return fmt.Sprintf("its default time to live is %d seconds, so every document without a ttl of its own, orchestration "+
			"state included, would expire (set defaultTtl -1: on, with no default; no new container needed)", *defaultTTL)
	}
	return ""
}
