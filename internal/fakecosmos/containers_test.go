package fakecosmos

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAccountPropertiesHaveTheShapeAzcosmosParses(t *testing.T) {
	_, c := newTestServer(t, Options{Endpoint: "http://127.0.0.1:9999/"})
	r := c.do("GET", "/", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	var acct struct {
		ID                string `json:"id"`
		WritableLocations []struct {
			Name     string `json:"name"`
			Endpoint string `json:"databaseAccountEndpoint"`
		} `json:"writableLocations"`
		ReadableLocations []struct {
			Name     string `json:"name"`
			Endpoint string `json:"databaseAccountEndpoint"`
		} `json:"readableLocations"`
		EnableMultipleWriteLocations bool `json:"enableMultipleWriteLocations"`
		UserConsistencyPolicy        struct {
			DefaultConsistencyLevel string `json:"defaultConsistencyLevel"`
		} `json:"userConsistencyPolicy"`
		QueryEngineConfiguration string `json:"queryEngineConfiguration"`
	}
	require.NoError(t, json.Unmarshal(r.body, &acct))
	assert.NotEmpty(t, acct.ID)
	require.Len(t, acct.WritableLocations, 1)
	require.Len(t, acct.ReadableLocations, 1)
	assert.Equal(t, "http://127.0.0.1:9999/", acct.WritableLocations[0].Endpoint)
	assert.Equal(t, "http://127.0.0.1:9999/", acct.ReadableLocations[0].Endpoint)
	assert.False(t, acct.EnableMultipleWriteLocations)
	assert.Equal(t, "Session", acct.UserConsistencyPolicy.DefaultConsistencyLevel)
	var qec map[string]any
	require.NoError(t, json.Unmarshal([]byte(acct.QueryEngineConfiguration), &qec), "queryEngineConfiguration is JSON inside a string")
	assert.Contains(t, qec, "maxSqlQueryInputLength")
}

func TestSetEndpointChangesTheAdvertisedLocation(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	assert.Contains(t, string(c.do("GET", "/", nil, nil).body), `"databaseAccountEndpoint":"https://localhost:8081/"`)
	srv.SetEndpoint("http://127.0.0.1:1234/")
	assert.Contains(t, string(c.do("GET", "/", nil, nil).body), `"databaseAccountEndpoint":"http://127.0.0.1:1234/"`)
}

func TestEveryResponseCarriesTheCommonHeaders(t *testing.T) {
	_, c := newTestServer(t, Options{})
	for _, r := range []testResponse{c.do("GET", "/", nil, nil), c.do("GET", "/dbs/missing", nil, nil)} {
		assert.Equal(t, "application/json", r.header.Get("Content-Type"))
		assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, r.header.Get("x-ms-activity-id"))
		assert.NotEmpty(t, r.header.Get("x-ms-request-charge"))
		assert.Regexp(t, `^\d+:-1#\d+$`, r.header.Get("x-ms-session-token"))
		assert.Equal(t, "2020-11-05", r.header.Get("x-ms-version"))
		assert.NotEmpty(t, r.header.Get("lsn"))
	}
}

func TestDatabaseLifecycle(t *testing.T) {
	_, c := newTestServer(t, Options{})
	r := c.do("POST", "/dbs", map[string]any{"id": "db1"}, nil)
	require.Equal(t, http.StatusCreated, r.status)
	db := r.object(t)
	for _, k := range []string{"id", "_rid", "_self", "_etag", "_ts"} {
		assert.Contains(t, db, k)
	}
	assert.Equal(t, db["_etag"], r.header.Get("etag"))

	r = c.do("POST", "/dbs", map[string]any{"id": "db1"}, nil)
	assert.Equal(t, http.StatusConflict, r.status)
	assert.Equal(t, "Conflict", r.object(t)["code"])

	c.createDatabase("db2")
	list := c.do("GET", "/dbs", nil, nil).object(t)
	assert.EqualValues(t, 2, list["_count"])
	assert.Len(t, list["Databases"], 2)

	assert.Equal(t, http.StatusOK, c.do("GET", "/dbs/db1", nil, nil).status)
	assert.Equal(t, http.StatusNoContent, c.do("DELETE", "/dbs/db1", nil, nil).status)
	assert.Equal(t, http.StatusNotFound, c.do("GET", "/dbs/db1", nil, nil).status)
	assert.Equal(t, http.StatusNotFound, c.do("DELETE", "/dbs/db1", nil, nil).status)
}

func TestDeletingADatabaseDeletesItsContainers(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	require.Equal(t, http.StatusNoContent, c.do("DELETE", "/dbs/db", nil, nil).status)
	c.createDatabase("db")
	assert.Equal(t, http.StatusNotFound, c.do("GET", collPath, nil, nil).status)
}

func TestResourceNamesFollowTheServiceRules(t *testing.T) {
	_, c := newTestServer(t, Options{})
	for _, bad := range []string{"", "a/b", `a\b`, "a?b", "a#b", "trailing ", strings.Repeat("x", 256)} {
		assert.Equal(t, http.StatusBadRequest, c.do("POST", "/dbs", map[string]any{"id": bad}, nil).status, "%q", bad)
	}
	assert.Equal(t, http.StatusCreated, c.do("POST", "/dbs", map[string]any{"id": strings.Repeat("x", 255)}, nil).status)
}

func TestContainerLifecycle(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	body := map[string]any{"id": "coll", "partitionKey": map[string]any{"paths": []string{"/tenant/id"}, "kind": "Hash", "version": 2}, "defaultTtl": -1}
	r := c.do("POST", "/dbs/db/colls", body, nil)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	coll := r.object(t)
	for _, k := range []string{"id", "_rid", "_self", "_etag", "_ts", "indexingPolicy"} {
		assert.Contains(t, coll, k)
	}
	assert.Equal(t, map[string]any{"paths": []any{"/tenant/id"}, "kind": "Hash", "version": float64(2)}, coll["partitionKey"])
	assert.EqualValues(t, -1, coll["defaultTtl"])

	assert.Equal(t, http.StatusConflict, c.do("POST", "/dbs/db/colls", body, nil).status)
	assert.Equal(t, http.StatusNotFound, c.do("POST", "/dbs/nodb/colls", body, nil).status)
	assert.Equal(t, http.StatusOK, c.do("GET", collPath, nil, nil).status)

	list := c.do("GET", "/dbs/db/colls", nil, nil).object(t)
	assert.EqualValues(t, 1, list["_count"])
	assert.Len(t, list["DocumentCollections"], 1)

	assert.Equal(t, http.StatusNoContent, c.do("DELETE", collPath, nil, nil).status)
	assert.Equal(t, http.StatusNotFound, c.do("GET", collPath, nil, nil).status)
	assert.Equal(t, http.StatusNotFound, c.do("DELETE", collPath, nil, nil).status)
}

func TestContainerPartitionKeyMustBeOneHashPath(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	for name, pk := range map[string]any{
		"none":      nil,
		"no path":   map[string]any{"paths": []string{}, "kind": "Hash"},
		"multihash": map[string]any{"paths": []string{"/a", "/b"}, "kind": "MultiHash", "version": 2},
		"two paths": map[string]any{"paths": []string{"/a", "/b"}, "kind": "Hash"},
		"version 3": map[string]any{"paths": []string{"/a"}, "kind": "Hash", "version": 3},
		"bad path":  map[string]any{"paths": []string{"a"}, "kind": "Hash"},
	} {
		body := map[string]any{"id": "c"}
		if pk != nil {
			body["partitionKey"] = pk
		}
		assert.Equal(t, http.StatusBadRequest, c.do("POST", "/dbs/db/colls", body, nil).status, name)
	}
}

func TestCompositeIndexesAreValidatedAndStored(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	pk := map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}
	withComposite := func(id string, ci any) map[string]any {
		return map[string]any{"id": id, "partitionKey": pk, "indexingPolicy": map[string]any{
			"indexingMode": "consistent", "automatic": true, "compositeIndexes": ci}}
	}
	one := []any{[]any{map[string]any{"path": "/a", "order": "ascending"}}}
	badOrder := []any{[]any{map[string]any{"path": "/a", "order": "up"}, map[string]any{"path": "/b", "order": "ascending"}}}
	assert.Equal(t, http.StatusBadRequest, c.do("POST", "/dbs/db/colls", withComposite("c1", one), nil).status, "a composite index needs two paths")
	assert.Equal(t, http.StatusBadRequest, c.do("POST", "/dbs/db/colls", withComposite("c2", badOrder), nil).status, "order must be ascending or descending")

	good := []any{[]any{map[string]any{"path": "/a", "order": "ascending"}, map[string]any{"path": "/b", "order": "descending"}}}
	r := c.do("POST", "/dbs/db/colls", withComposite("c3", good), nil)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	read := c.do("GET", "/dbs/db/colls/c3", nil, nil).object(t)
	assert.Len(t, read["indexingPolicy"].(map[string]any)["compositeIndexes"], 1)
}

func TestReplaceContainerChangesTheIndexingPolicyButNotThePartitionKey(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	before := c.do("GET", collPath, nil, nil).object(t)
	policy := map[string]any{"indexingMode": "consistent", "automatic": true, "compositeIndexes": []any{
		[]any{map[string]any{"path": "/a"}, map[string]any{"path": "/b"}}}}
	r := c.do("PUT", collPath, map[string]any{"id": "coll", "partitionKey": before["partitionKey"], "indexingPolicy": policy}, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.NotEqual(t, before["_etag"], r.object(t)["_etag"])

	r = c.do("PUT", collPath, map[string]any{"id": "coll", "partitionKey": map[string]any{"paths": []string{"/other"}, "kind": "Hash", "version": 2}}, nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}

func TestUnknownRoutesAndVerbsAreRefusedWithACosmosBody(t *testing.T) {
	_, c := newTestServer(t, Options{})
	r := c.do("GET", "/nothing/here", nil, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "NotFound", r.object(t)["code"])

	r = c.do("PUT", "/dbs", nil, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.status)
	assert.Contains(t, r.object(t), "message")
}
