package fakecosmos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// container is a collection resource with its documents. Its identity is
// fixed at creation; everything below mu changes under mu, which also makes
// a transactional batch atomic with respect to every other request.
type container struct {
	id      string
	rid     string
	ridRaw  []byte
	dbRID   string
	created uint64
	offer   *offer // its own throughput; nil: its database's, or none (offers.go)

	mu             sync.Mutex
	etag           string
	ts             int64
	partitionKey   partitionKeyDef
	pkPath         []string
	indexingPolicy map[string]any
	index          indexPolicy
	defaultTTL     json.Number // "" when unset
	ttl            *ttlPolicy  // defaultTTL applied, shared with the documents
	partitions     map[string]*logicalPartition
	values         valueIndex // what queries walk (valueindex.go)
	ranges         []*pkRange
	nextRangeID    int
	nextSeq        uint64
	warmUp         warmUp // document requests still answered 404/1003 after its creation
	// After a split (SplitOptions): the split ranges, listed beside their
	// children for listRetiredFor more reads of the list, and the requests
	// aimed at a range still answered 410/1007.
	retired        []*pkRange
	listRetiredFor int
	completingFor  int
	// The composite indexes the last replace of the indexing policy added,
	// and, while SetIndexTransformationProgress holds it below 100, how
	// far their build is: a building index serves no ORDER BY.
	added    [][]compositePath
	progress *int
}

// partitionKeyDef is the only kind this fake supports: one path, Hash.
type partitionKeyDef struct {
	Paths   []string `json:"paths"`
	Kind    string   `json:"kind"`
	Version int      `json:"version"`
}

// compositePath is one member of a composite index.
type compositePath struct {
	path       []string
	descending bool
}

func (c *container) selfLink() string { return "dbs/" + c.dbRID + "/colls/" + c.rid + "/" }

// resource renders the collection as the service does. Call with c.mu held.
func (c *container) resource() map[string]any {
	r := map[string]any{
		"id":                       c.id,
		"indexingPolicy":           c.indexingPolicy,
		"partitionKey":             c.partitionKey,
		"conflictResolutionPolicy": map[string]any{"mode": "LastWriterWins", "conflictResolutionPath": "/_ts", "conflictResolutionProcedure": ""},
		"geospatialConfig":         map[string]any{"type": "Geography"},
		"_rid":                     c.rid,
		"_ts":                      c.ts,
		"_self":                    c.selfLink(),
		"_etag":                    c.etag,
		"_docs":                    "docs/",
		"_sprocs":                  "sprocs/",
		"_triggers":                "triggers/",
		"_udfs":                    "udfs/",
		"_conflicts":               "conflicts/",
	}
	if c.defaultTTL != "" {
		r["defaultTtl"] = c.defaultTTL
	}
	return r
}

// containerSettings are the mutable, validated parts of a create or
// replace body.
type containerSettings struct {
	id             string
	partitionKey   partitionKeyDef
	pkPath         []string
	indexingPolicy map[string]any
	index          indexPolicy
	defaultTTL     json.Number
}

func parseContainerSettings(body []byte) (containerSettings, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return containerSettings{}, err
	}
	var cs containerSettings
	id, ok := obj["id"].(string)
	if !ok {
		return cs, badRequest("The container id must be a JSON string.")
	}
	if err := validateResourceName("container", id); err != nil {
		return cs, err
	}
	cs.id = id
	if cs.partitionKey, cs.pkPath, err = parsePartitionKeyDef(obj["partitionKey"]); err != nil {
		return cs, err
	}
	if cs.indexingPolicy, cs.index, err = parseIndexingPolicy(obj["indexingPolicy"]); err != nil {
		return cs, err
	}
	if cs.defaultTTL, err = parseDefaultTTL(obj["defaultTtl"]); err != nil {
		return cs, err
	}
	return cs, nil
}

func parsePartitionKeyDef(v any) (partitionKeyDef, []string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return partitionKeyDef{}, nil, badRequest("The container must have a partitionKey definition with one path; this fake serves partitioned containers only.")
	}
	kind, _ := obj["kind"].(string)
	if kind == "" {
		kind = "Hash"
	}
	if kind != "Hash" {
		return partitionKeyDef{}, nil, badRequest("Partition key kind %q is not supported by this fake: only single-path \"Hash\".", kind)
	}
	paths, _ := obj["paths"].([]any)
	if len(paths) != 1 {
		return partitionKeyDef{}, nil, badRequest("A Hash partition key must have exactly one path, got %d.", len(paths))
	}
	path, _ := paths[0].(string)
	segs, ok := splitPartitionKeyPath(path)
	if !ok {
		return partitionKeyDef{}, nil, badRequest("The partition key path %q is invalid: it must look like /name or /a/b.", path)
	}
	version := 1
	if n, ok := obj["version"].(json.Number); ok {
		v, err := n.Int64()
		if err != nil || (v != 1 && v != 2) {
			return partitionKeyDef{}, nil, badRequest("The partition key version must be 1 or 2, got %s.", n)
		}
		version = int(v)
	}
	return partitionKeyDef{Paths: []string{path}, Kind: kind, Version: version}, segs, nil
}

func splitPartitionKeyPath(path string) ([]string, bool) {
	if !strings.HasPrefix(path, "/") || len(path) < 2 {
		return nil, false
	}
	segs := strings.Split(path[1:], "/")
	for _, s := range segs {
		if s == "" || strings.ContainsAny(s, "*?") {
			return nil, false
		}
	}
	return segs, true
}

// defaultIndexingPolicy is what the service stores when a container is
// created without one.
func defaultIndexingPolicy() map[string]any {
	return map[string]any{
		"indexingMode":  "consistent",
		"automatic":     true,
		"includedPaths": []any{map[string]any{"path": "/*"}},
		"excludedPaths": []any{map[string]any{"path": `/"_etag"/?`}},
	}
}

// parseIndexingPolicy stores the policy as given and reads what the fake
// models of it: the indexing mode, the included and excluded paths (none
// included means "/*", as the service fills in), and the composite indexes:
// at least two paths each, order ascending or descending (absent means
// ascending, as on the service).
func parseIndexingPolicy(v any) (map[string]any, indexPolicy, error) {
	if v == nil {
		v = defaultIndexingPolicy()
	}
	policy, ok := v.(map[string]any)
	if !ok {
		return nil, indexPolicy{}, badRequest("The indexingPolicy must be a JSON object.")
	}
	var ip indexPolicy
	switch mode := policy["indexingMode"]; mode {
	case nil, "consistent", "Consistent", "lazy", "Lazy":
	case "none", "None":
		ip.none = true
	default:
		return nil, indexPolicy{}, badRequest("The indexingMode %v is invalid: use \"consistent\" or \"none\".", mode)
	}
	var err error
	if ip.rules, err = parsePathRules(policy); err != nil {
		return nil, indexPolicy{}, err
	}
	if ip.composites, err = parseCompositeIndexes(policy["compositeIndexes"]); err != nil {
		return nil, indexPolicy{}, err
	}
	return policy, ip, nil
}

func parsePathRules(policy map[string]any) ([]pathRule, error) {
	var rules []pathRule
	for _, list := range []struct {
		key      string
		included bool
	}{{"includedPaths", true}, {"excludedPaths", false}} {
		entries, ok := policy[list.key].([]any)
		if policy[list.key] != nil && !ok {
			return nil, badRequest("The indexingPolicy's %s must be an array of {\"path\"}.", list.key)
		}
		for _, e := range entries {
			obj, _ := e.(map[string]any)
			path, _ := obj["path"].(string)
			r, ok := parseIndexPath(path)
			if !ok {
				return nil, badRequest("The indexing path %q could not be accepted. Please ensure that the path is a valid path: "+
					"\"/\" and names (or \"quoted names\", [] for array elements) separated by \"/\", ending in \"/?\" or \"/*\".", path)
			}
			r.included = list.included
			rules = append(rules, r)
		}
	}
	if !slices.ContainsFunc(rules, func(r pathRule) bool { return r.included }) {
		rules = append(rules, pathRule{included: true}) // the service's default: "/*"
	}
	return rules, nil
}

func parseCompositeIndexes(raw any) ([][]compositePath, error) {
	if raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, badRequest("The indexingPolicy's compositeIndexes must be an array of arrays.")
	}
	composites := make([][]compositePath, 0, len(list))
	for i, entry := range list {
		ci, err := parseCompositeIndex(i, entry)
		if err != nil {
			return nil, err
		}
		composites = append(composites, ci)
	}
	return composites, nil
}

func parseCompositeIndex(i int, entry any) ([]compositePath, error) {
	members, ok := entry.([]any)
	if !ok || len(members) < 2 {
		return nil, badRequest("The number of paths in composite index %d must be at least 2.", i)
	}
	out := make([]compositePath, 0, len(members))
	for _, m := range members {
		obj, _ := m.(map[string]any)
		path, _ := obj["path"].(string)
		segs, ok := splitPartitionKeyPath(path)
		if !ok {
			return nil, badRequest("The composite index path %q is invalid.", path)
		}
		order, present := obj["order"]
		desc := false
		switch {
		case !present || order == "ascending":
		case order == "descending":
			desc = true
		default:
			return nil, badRequest("The composite index order %v is invalid: use \"ascending\" or \"descending\".", order)
		}
		out = append(out, compositePath{path: segs, descending: desc})
	}
	return out, nil
}

func parseDefaultTTL(v any) (json.Number, error) {
	if v == nil {
		return "", nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return "", badRequest("defaultTtl must be an integer.")
	}
	ttl, err := n.Int64()
	if err != nil || ttl == 0 || ttl < -1 {
		return "", badRequest("defaultTtl must be -1 or a positive number of seconds, got %s.", n)
	}
	return n, nil
}

func (s *Server) createContainer(q *request) (*result, error) {
	cs, err := parseContainerSettings(q.body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.databases[q.route.database]
	if !ok {
		return nil, notFound()
	}
	if _, exists := d.colls[cs.id]; exists {
		return nil, conflict()
	}
	o, err := s.containerOffer(q, d)
	if err != nil {
		return nil, err
	}
	c := s.newContainer(d, cs)
	c.offer = o
	c.warmUp.left.Store(int64(s.newContainerWarmUp))
	d.colls[cs.id] = c
	s.metadataLSN++
	return &result{status: http.StatusCreated, body: encodeJSON(c.resource()), etag: c.etag, charge: chargeMetadata}, nil
}

func (s *Server) newContainer(d *database, cs containerSettings) *container {
	rid, raw := s.ids.containerRID(d.ridRaw)
	ts := s.now().Unix()
	c := &container{
		id: cs.id, rid: rid, ridRaw: raw, dbRID: d.rid, created: s.ids.next.Add(1),
		etag: s.ids.etag(ts), ts: ts,
		partitionKey: cs.partitionKey, pkPath: cs.pkPath,
		indexingPolicy: cs.indexingPolicy, index: cs.index, defaultTTL: cs.defaultTTL,
		partitions: map[string]*logicalPartition{},
		ttl:        newTTLPolicy(s.now, cs.defaultTTL),
	}
	c.ranges = initialRanges(s.rangesPerNew, cs.partitionKey.epkSpaceEnd(), ts, s.ids.etag)
	c.nextRangeID = len(c.ranges)
	return c
}

// lookupContainer finds the addressed container (404 if it or its
// database is missing).
func (s *Server) lookupContainer(rt route) (*container, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.databases[rt.database]
	if !ok {
		return nil, notFound()
	}
	c, ok := d.colls[rt.container]
	if !ok {
		return nil, notFound()
	}
	return c, nil
}

func (s *Server) readContainer(q *request) (*result, error) {
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &result{status: http.StatusOK, body: encodeJSON(c.resource()), etag: c.etag, charge: chargeMetadata, header: c.quotaHeaders()}, nil
}

// The quota headers of a container read (kept here, not with the other
// header names in routes.go, because only container reads send them).
const (
	hdrResourceQuota = "x-ms-resource-quota"
	hdrResourceUsage = "x-ms-resource-usage"
)

// containerQuota is what x-ms-resource-quota advertises for a container:
// the service's per-document limit (in MB, as the service states it), and
// no limit on the documents' count or size (-1).
const containerQuota = "documentSize=2;documentsSize=-1;documentsCount=-1;collectionSize=-1"

// quotaHeaders are x-ms-resource-quota and x-ms-resource-usage, which the
// service sends on a container read and SDKs read the document count and
// size from ("name=value;" pairs; sizes in KB, started KB counted as
// whole). The fake has no index, so collectionSize is the documents' size.
// Call with c.mu held.
func (c *container) quotaHeaders() http.Header {
	count, size := 0, 0
	for _, p := range c.partitions {
		for _, d := range p.docs {
			if !d.expired() {
				count++
				size += len(d.raw)
			}
		}
	}
	kb := (size + 1023) / 1024
	h := http.Header{}
	h.Set(hdrResourceQuota, containerQuota)
	h.Set(hdrResourceUsage, fmt.Sprintf("documentSize=%d;documentsSize=%d;documentsCount=%d;collectionSize=%d", (kb+1023)/1024, kb, count, kb))
	h.Set(hdrIndexTransformationProgress, strconv.Itoa(c.transformProgress()))
	return h
}

// replaceContainer changes the indexing policy and default TTL; the id and
// partition key cannot change.
func (s *Server) replaceContainer(q *request) (*result, error) {
	cs, err := parseContainerSettings(q.body)
	if err != nil {
		return nil, err
	}
	if cs.id != q.route.container {
		return nil, badRequest("The id in the body (%q) does not match the container addressed (%q).", cs.id, q.route.container)
	}
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ifMatch := q.header(hdrIfMatch); ifMatch != "" && !etagMatches(ifMatch, c.etag) {
		return nil, preconditionFailed()
	}
	if !reflect.DeepEqual(cs.partitionKey, c.partitionKey) {
		return nil, badRequest("The partition key of a container cannot change.")
	}
	c.dropExpired() // what expired under the old setting stays gone
	c.added = addedComposites(c.index.composites, cs.index.composites)
	c.indexingPolicy, c.index, c.defaultTTL = cs.indexingPolicy, cs.index, cs.defaultTTL
	c.ttl.set(cs.defaultTTL)
	c.ts = s.now().Unix()
	c.etag = s.ids.etag(c.ts)
	return &result{status: http.StatusOK, body: encodeJSON(c.resource()), etag: c.etag, charge: chargeMetadata}, nil
}

func (s *Server) deleteContainer(q *request) (*result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.databases[q.route.database]
	if !ok {
		return nil, notFound()
	}
	if _, ok := d.colls[q.route.container]; !ok {
		return nil, notFound()
	}
	delete(d.colls, q.route.container)
	s.metadataLSN++
	return &result{status: http.StatusNoContent, charge: chargeMetadata}, nil
}

// listContainers answers GET .../colls, and POST with a query (the SDK's
// NewQueryContainersPager).
func (s *Server) listContainers(q *request) (*result, error) {
	s.mu.RLock()
	d, ok := s.databases[q.route.database]
	if !ok {
		s.mu.RUnlock()
		return nil, notFound()
	}
	colls := make([]*container, 0, len(d.colls))
	for _, c := range d.colls {
		colls = append(colls, c)
	}
	dbRID := d.rid
	s.mu.RUnlock()
	sort.Slice(colls, func(i, j int) bool { return colls[i].created < colls[j].created })
	resources := make([]map[string]any, len(colls))
	for i, c := range colls {
		c.mu.Lock()
		resources[i] = c.resource()
		c.mu.Unlock()
	}
	return metadataFeed(q, dbRID, "DocumentCollections", resources)
}

// Documents counts the documents of a container (0 if it does not exist).
func (s *Server) Documents(database, container string) int {
	c, err := s.lookupContainer(route{database: database, container: container})
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.partitions {
		for _, d := range p.docs {
			if !d.expired() {
				n++
			}
		}
	}
	return n
}
