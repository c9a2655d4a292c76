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
	return cc.create(ctx, props, nil)
}

// create creates the container with the request headers h (its
// throughput, throughput.go).
func (cc *ContainerClient) create(ctx context.Context, props ContainerProperties, h http.Header) (ContainerProperties, error) {
	const op = "CreateContainer"
	body, err := cc.encodeProperties(op, props)
	if err != nil {
		return ContainerProperties{}, err
	}
	resp, err := cc.client.send(ctx, &request{operation: op, method: http.MethodPost,
		ref: containersFeedRef(cc.databaseID), header: h, body: body})
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
// Validation of ids and names: what the service cannot store is refused
// before anything is sent.

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
