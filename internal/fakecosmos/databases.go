package fakecosmos

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// database is a database resource and its containers (guarded by
// Server.mu).
type database struct {
	id      string
	rid     string
	ridRaw  []byte
	etag    string
	ts      int64
	created uint64 // creation order, for listings
	colls   map[string]*container
	offer   *offer // throughput its containers share; nil: none (offers.go)
}

func (d *database) resource() map[string]any {
	return map[string]any{
		"id":     d.id,
		"_rid":   d.rid,
		"_self":  "dbs/" + d.rid + "/",
		"_etag":  d.etag,
		"_colls": "colls/",
		"_users": "users/",
		"_ts":    d.ts,
	}
}

// validateResourceName applies the service's naming rules for databases
// and containers.
func validateResourceName(kind, id string) error {
	n := utf8.RuneCountInString(id)
	switch {
	case n == 0:
		return badRequest("The %s id must not be empty.", kind)
	case n > 255:
		return badRequest("The %s id must be at most 255 characters, got %d.", kind, n)
	case strings.ContainsAny(id, `/\?#`):
		return badRequest("The %s id %q contains an invalid character ('/', '\\', '?' or '#').", kind, id)
	case strings.HasSuffix(id, " "):
		return badRequest("The %s id %q must not end with a space.", kind, id)
	}
	return nil
}

// decodeObject parses a JSON object body with numbers kept as json.Number
// (as the query engine expects), refusing anything else.
func decodeObject(body []byte) (map[string]any, error) {
	v, err := decodeJSON(body)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest("The request body must be a JSON object.")
	}
	return obj, nil
}

func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, badRequest("The request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, badRequest("The request body holds more than one JSON value.")
	}
	return v, nil
}

// encodeJSON marshals without HTML escaping, so stored strings come back as
// they were sent.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("fakecosmos: encoding a decoded JSON value failed: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func (s *Server) createDatabase(q *request) (*result, error) {
	obj, err := decodeObject(q.body)
	if err != nil {
		return nil, err
	}
	id, ok := obj["id"].(string)
	if !ok {
		return nil, badRequest("The database id must be a JSON string.")
	}
	if err := validateResourceName("database", id); err != nil {
		return nil, err
	}
	shared, err := s.parseOfferHeaders(q, msgServerlessSharedDB)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, exists := s.databases[id]; exists {
		return nil, conflict()
	}
	rid, raw := s.ids.databaseRID()
	ts := s.now().Unix()
	d := &database{id: id, rid: rid, ridRaw: raw, etag: s.ids.etag(ts), ts: ts, created: s.ids.next.Add(1), colls: map[string]*container{}, offer: shared}
	s.databases[id] = d
	s.metadataLSN++
	return &result{status: http.StatusCreated, body: encodeJSON(d.resource()), etag: d.etag, charge: chargeMetadata}, nil
}

func (s *Server) readDatabase(q *request) (*result, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.databases[q.route.database]
	if !ok {
		return nil, notFound()
	}
	return &result{status: http.StatusOK, body: encodeJSON(d.resource()), etag: d.etag, charge: chargeMetadata}, nil
}

// deleteDatabase removes the database with all its containers.
func (s *Server) deleteDatabase(q *request) (*result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.databases[q.route.database]; !ok {
		return nil, notFound()
	}
	delete(s.databases, q.route.database)
	s.metadataLSN++
	return &result{status: http.StatusNoContent, charge: chargeMetadata}, nil
}

// listDatabases answers GET /dbs, and POST /dbs with a query (the SDK's
// NewQueryDatabasesPager).
func (s *Server) listDatabases(q *request) (*result, error) {
	s.mu.RLock()
	dbs := make([]*database, 0, len(s.databases))
	for _, d := range s.databases {
		dbs = append(dbs, d)
	}
	s.mu.RUnlock()
	sort.Slice(dbs, func(i, j int) bool { return dbs[i].created < dbs[j].created })
	resources := make([]map[string]any, len(dbs))
	for i, d := range dbs {
		resources[i] = d.resource()
	}
	return metadataFeed(q, "", "Databases", resources)
}

// metadataFeed renders a database or container listing, filtered by the
// request's query when it is a query.
func metadataFeed(q *request, parentRID, member string, resources []map[string]any) (*result, error) {
	if q.http.Method == http.MethodPost {
		filtered, err := runMetadataQuery(q, resources)
		if err != nil {
			return nil, err
		}
		resources = filtered
	}
	body := encodeJSON(map[string]any{"_rid": parentRID, member: resources, "_count": len(resources)})
	h := http.Header{}
	h.Set(hdrItemCount, strconv.Itoa(len(resources)))
	return &result{status: http.StatusOK, body: body, charge: chargeMetadata, header: h}, nil
}
