package fakecosmos

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var queryHeaders = hdr{"x-ms-documentdb-isquery": "True", "Content-Type": "application/query+json"}

// queryOffers asks the offers feed for the offers of the resource whose
// rid is rid, as the SDKs' ReadThroughput does.
func (c *testClient) queryOffers(rid string) testResponse {
	c.t.Helper()
	return c.do("POST", "/offers", map[string]any{
		"query":      "SELECT * FROM root WHERE root.offerResourceId = @rid",
		"parameters": []any{map[string]any{"name": "@rid", "value": rid}},
	}, queryHeaders)
}

// offersOf is the offers feed's answer for rid.
func (c *testClient) offersOf(rid string) []map[string]any {
	c.t.Helper()
	r := c.queryOffers(rid)
	require.Equal(c.t, http.StatusOK, r.status, "%s", r.body)
	var feed struct {
		Offers []map[string]any
		Count  int `json:"_count"`
	}
	require.NoError(c.t, json.Unmarshal(r.body, &feed))
	require.Equal(c.t, len(feed.Offers), feed.Count)
	return feed.Offers
}

// createWith creates a resource with extra headers and returns its rid.
func (c *testClient) createWith(path string, body map[string]any, h hdr) (testResponse, string) {
	c.t.Helper()
	r := c.do("POST", path, body, h)
	if r.status != http.StatusCreated {
		return r, ""
	}
	return r, r.object(c.t)["_rid"].(string)
}

func containerBody(id string) map[string]any {
	return map[string]any{"id": id, "partitionKey": map[string]any{"paths": []any{"/pk"}, "kind": "Hash", "version": 2}}
}

// A provisioned account gives a container created without a throughput
// header 400 RU/s of its own (the REST docs' minimum, what the service
// provisions by default), one with x-ms-offer-throughput that much, and one
// with x-ms-cosmos-offer-autopilot-settings an autoscale offer up to its
// maxThroughput; the offers feed answers them in the V2 shape.
func TestContainersGetTheOfferTheirCreateAskedFor(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	_, plain := c.createWith("/dbs/db/colls", containerBody("plain"), nil)
	_, manual := c.createWith("/dbs/db/colls", containerBody("manual"), hdr{"x-ms-offer-throughput": "1000"})
	_, auto := c.createWith("/dbs/db/colls", containerBody("auto"), hdr{"x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":4000}`})

	for rid, want := range map[string]map[string]any{
		plain:  {"offerThroughput": float64(400)},
		manual: {"offerThroughput": float64(1000)},
		auto:   {"offerAutopilotSettings": map[string]any{"maxThroughput": float64(4000)}},
	} {
		offers := c.offersOf(rid)
		require.Len(t, offers, 1, rid)
		o := offers[0]
		assert.Equal(t, want, o["content"], rid)
		assert.Equal(t, "V2", o["offerVersion"])
		assert.Equal(t, rid, o["offerResourceId"])
		assert.True(t, strings.HasSuffix(o["resource"].(string), "/colls/"+rid+"/"), o["resource"])
		assert.Equal(t, "offers/"+o["_rid"].(string)+"/", o["_self"])
		assert.Equal(t, o["_rid"], o["id"])
	}
	all := c.do("GET", "/offers", nil, nil).object(t)
	assert.EqualValues(t, 3, all["_count"], "GET /offers lists every offer")

	c.do("DELETE", "/dbs/db/colls/manual", nil, nil)
	assert.Empty(t, c.offersOf(manual), "an offer goes with its container")
}

// A database created with throughput has an offer its containers share:
// a container created in it without a header has none of its own.
func TestSharedDatabaseThroughputIsTheDatabasesOffer(t *testing.T) {
	_, c := newTestServer(t, Options{})
	_, dbRID := c.createWith("/dbs", map[string]any{"id": testDB}, hdr{"x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":1000}`})
	_, collRID := c.createWith("/dbs/db/colls", containerBody("shared"), nil)
	_, ownRID := c.createWith("/dbs/db/colls", containerBody("own"), hdr{"x-ms-offer-throughput": "500"})

	assert.Empty(t, c.offersOf(collRID))
	db := c.offersOf(dbRID)
	require.Len(t, db, 1)
	assert.Equal(t, map[string]any{"offerAutopilotSettings": map[string]any{"maxThroughput": float64(1000)}}, db[0]["content"])
	assert.Equal(t, "dbs/"+dbRID+"/", db[0]["resource"])
	own := c.offersOf(ownRID)
	require.Len(t, own, 1, "a container of a shared database may still have throughput of its own")
	assert.Equal(t, map[string]any{"offerThroughput": float64(500)}, own[0]["content"])
}

// Throughput outside the documented ranges, or both headers at once, is
// refused with 400, and nothing is created.
func TestInvalidThroughputHeadersAreRefused(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	for name, h := range map[string]hdr{
		"below 400":            {"x-ms-offer-throughput": "300"},
		"not a step of 100":    {"x-ms-offer-throughput": "450"},
		"not a number":         {"x-ms-offer-throughput": "lots"},
		"autoscale below 1000": {"x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":400}`},
		"autoscale step":       {"x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":1500}`},
		"autoscale not JSON":   {"x-ms-cosmos-offer-autopilot-settings": `4000`},
		"both":                 {"x-ms-offer-throughput": "400", "x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":4000}`},
	} {
		r, _ := c.createWith("/dbs/db/colls", containerBody("c"), h)
		assert.Equal(t, http.StatusBadRequest, r.status, name)
		assert.Equal(t, http.StatusNotFound, c.do("GET", "/dbs/db/colls/c", nil, nil).status, name)
	}
}

// A serverless account has no offers: reading them answers 400 with the
// service's message, and so does creating a container or a database with
// throughput; a container created without any is served as usual.
func TestServerlessAccountsHaveNoOffers(t *testing.T) {
	_, c := newTestServer(t, Options{Serverless: true})
	c.createDatabase(testDB)
	_, rid := c.createWith("/dbs/db/colls", containerBody("c"), nil)
	require.NotEmpty(t, rid)

	r := c.queryOffers(rid)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "Reading or replacing offers is not supported for serverless accounts.", errorText(t, r))
	assert.Equal(t, http.StatusBadRequest, c.do("GET", "/offers", nil, nil).status)

	r, _ = c.createWith("/dbs/db/colls", containerBody("d"), hdr{"x-ms-offer-throughput": "400"})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "Setting offer throughput or autopilot on container is not supported for serverless accounts.", errorText(t, r))
	r, _ = c.createWith("/dbs", map[string]any{"id": "shared"}, hdr{"x-ms-cosmos-offer-autopilot-settings": `{"maxThroughput":1000}`})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "Shared throughput database creation is not supported for serverless accounts.", errorText(t, r))
}

// GET /offers/{rid} reads one offer, signed with its rid lower-cased as
// the REST docs say (resource type "offers").
func TestReadOneOfferByItsRID(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	_, rid := c.createWith("/dbs/db/colls", containerBody("c"), nil)
	offers := c.offersOf(rid)
	require.Len(t, offers, 1)
	offerRID := offers[0]["_rid"].(string)

	req := c.newRequest(t.Context(), "GET", "/offers/"+url.PathEscape(offerRID), nil, nil)
	date := req.Header.Get("x-ms-date")
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig="+testSignature(c.key, "GET", "offers", strings.ToLower(offerRID), date)))
	r := c.send(req)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, offers[0], r.object(t))
}
