package fakecosmos

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSignatureMatchesTheMicrosoftDocsVector(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/t4bQtVNw==")
	require.NoError(t, err)
	payload := stringToSign("GET", "dbs", "dbs/ToDoList", "Thu, 27 Apr 2017 00:51:12 GMT")
	assert.Equal(t, "get\ndbs\ndbs/ToDoList\nthu, 27 apr 2017 00:51:12 gmt\n\n", payload)
	assert.Equal(t, "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c=", signature(key, payload))
}

func TestSignatureMatchesTheSDKVectorsWithTheEmulatorKey(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==")
	require.NoError(t, err)
	const date = "Fri, 17 Dec 1926 03:15:00 GMT"
	for _, v := range []struct{ verb, typ, link, sig string }{
		{"GET", "colls", "dbs/Test Database/colls/Test Collection", "cugjaA51bjCvxVi8LXg3XB+ZVKaFAZshILoJZF9nfEY="},
		{"POST", "colls", "dbs/Test Database", "E92FgDG9JiNX+NfsI+edOFtgkZRDkrrJxIfl12Vsu8A="},
		{"DELETE", "dbs", "dbs/Test Database", "LcuXXg0TcXxZG0kUCj9tZIWRy2yCzim3oiqGiHpRqGs="},
		{"PATCH", "docs", "dbs/test-db/colls/test-coll/docs/67890", "VR1ddfxKBXnoaT+b3WkhyYVc9JmGNpTnaRmyDM44398="},
		{"GET", "pkranges", "m4d+xg08uvm=", "6S5ceZsl2EXWB3Jo5bJcK7zv8NxXnsxWPWD9TH3nNMo="}, // a RID link, lower-cased by the client
	} {
		assert.Equal(t, v.sig, signature(key, stringToSign(v.verb, v.typ, v.link, date)), "%s %s %s", v.verb, v.typ, v.link)
	}
}

func TestAuthTokenAcceptsLowerCaseEscapesAsInTheDocs(t *testing.T) {
	tok, ok := parseAuthToken("type%3dmaster%26ver%3d1.0%26sig%3dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2bc%2bc%3d")
	require.True(t, ok)
	assert.Equal(t, authToken{kind: "master", version: "1.0", sig: "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c="}, tok)
}

func TestSignedRequestIsAccepted(t *testing.T) {
	_, c := newTestServer(t, Options{})
	r := c.do("GET", "/dbs", nil, nil)
	assert.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

func TestIdsWithEscapedCharactersAreSignedUnescaped(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("name with spaces é")
	r := c.do("GET", "/dbs/"+url.PathEscape("name with spaces é"), nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Equal(t, "name with spaces é", r.object(t)["id"])
}

func TestWrongKeyAnswers401WithThePayloadButNotTheKey(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	c.key = base64.StdEncoding.EncodeToString([]byte("not the key at all, not at all"))
	r := c.do("GET", "/dbs/ToDoList", nil, nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	msg := errorText(t, r)
	assert.Contains(t, msg, `'get\ndbs\ndbs/ToDoList\n`, "the message shows the string to sign with \\n")
	assert.Contains(t, r.object(t)["message"], "ActivityId: "+r.header.Get("x-ms-activity-id"))
	assert.NotContains(t, msg, srv.Key())
	assert.NotContains(t, msg, signature(srv.keyBytes, stringToSign("GET", "dbs", "dbs/ToDoList", r.header.Get("Date"))))
	assert.Equal(t, "Unauthorized", r.object(t)["code"])
}

func TestWrongSignatureDoesNotLeakTheExpectedSignature(t *testing.T) {
	srv, c := newTestServer(t, Options{})
	req := c.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	date := req.Header.Get("x-ms-date")
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig=AAAA"))
	r := c.send(req)
	require.Equal(t, http.StatusUnauthorized, r.status)
	want := signature(srv.keyBytes, stringToSign("GET", "dbs", "", date))
	assert.NotContains(t, string(r.body), want)
	assert.NotContains(t, string(r.body), url.QueryEscape(want))
}

func TestMissingAuthorizationAnswers401(t *testing.T) {
	_, c := newTestServer(t, Options{})
	req := c.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	req.Header.Del("authorization")
	assert.Equal(t, http.StatusUnauthorized, c.send(req).status)
}

func TestStaleDateAnswers403(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.dateOf = func() time.Time { return time.Now().Add(-16 * time.Minute) }
	r := c.do("GET", "/dbs", nil, nil)
	require.Equal(t, http.StatusForbidden, r.status)
	assert.Contains(t, errorText(t, r), "authorization token expired")
}

func TestFutureDateBeyondTheSkewAnswers403(t *testing.T) {
	_, c := newTestServer(t, Options{MaxClockSkew: time.Minute})
	c.dateOf = func() time.Time { return time.Now().Add(2 * time.Minute) }
	assert.Equal(t, http.StatusForbidden, c.do("GET", "/dbs", nil, nil).status)
}

func TestDateWithinTheSkewIsAccepted(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	_, c := newTestServer(t, Options{Now: func() time.Time { return now }})
	c.dateOf = func() time.Time { return now.Add(-14 * time.Minute) }
	assert.Equal(t, http.StatusOK, c.do("GET", "/dbs", nil, nil).status)
}

func TestMissingDateAnswers403(t *testing.T) {
	_, c := newTestServer(t, Options{})
	req := c.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	req.Header.Del("x-ms-date")
	assert.Equal(t, http.StatusForbidden, c.send(req).status)
}

func TestAADTokenIsAcceptedOnlyWhenConfiguredAndEqual(t *testing.T) {
	_, c := newTestServer(t, Options{AADToken: "eyJ0eXAi.token"})
	req := c.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	req.Header.Set("authorization", url.QueryEscape("type=aad&ver=1.0&sig=eyJ0eXAi.token"))
	assert.Equal(t, http.StatusOK, c.send(req).status)

	req = c.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	req.Header.Set("authorization", url.QueryEscape("type=aad&ver=1.0&sig=other"))
	assert.Equal(t, http.StatusUnauthorized, c.send(req).status)

	_, plain := newTestServer(t, Options{})
	req = plain.newRequest(context.Background(), "GET", "/dbs", nil, nil)
	req.Header.Set("authorization", url.QueryEscape("type=aad&ver=1.0&sig=eyJ0eXAi.token"))
	assert.Equal(t, http.StatusUnauthorized, plain.send(req).status, "AAD is refused when no token is configured")
}

// An Entra ID token works in the data plane only: it reads the account,
// databases and containers and reads and writes items, but creating,
// changing or deleting a database or a container answers 403/5300, as
// the real service answers a data-plane role.
func TestAADTokenMayNotWriteMetadata(t *testing.T) {
	const token = "eyJ0eXAi.token"
	_, c := newTestServer(t, Options{AADToken: token})
	c.standardContainer() // with the key
	withToken := func(method, path string, body any, h hdr) testResponse {
		req := c.newRequest(context.Background(), method, path, body, h)
		req.Header.Set("authorization", url.QueryEscape("type=aad&ver=1.0&sig="+token))
		return c.send(req)
	}
	assert.Equal(t, http.StatusOK, withToken("GET", "/", nil, nil).status, "the account")
	assert.Equal(t, http.StatusOK, withToken("GET", "/dbs/"+testDB, nil, nil).status, "a database")
	assert.Equal(t, http.StatusOK, withToken("GET", "/dbs/"+testDB+"/colls/"+testColl, nil, nil).status, "a container")
	doc := map[string]any{"id": "a", "pk": "p"}
	assert.Equal(t, http.StatusCreated, withToken("POST", docsPath, doc, pkHeader("p")).status, "an item")

	refused := withToken("POST", "/dbs", map[string]any{"id": "other"}, nil)
	assert.Equal(t, http.StatusForbidden, refused.status)
	assert.Equal(t, "5300", refused.subStatus())
	assert.Equal(t, "Operation 'POST' on resource '/dbs' is not allowed through Azure Cosmos DB endpoint. "+
		"The given request [POST /dbs] cannot be authorized by AAD token in data plane.", errorText(t, refused))
	for _, r := range []testResponse{
		withToken("POST", "/dbs/"+testDB+"/colls", map[string]any{"id": "c2", "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}}, nil),
		withToken("DELETE", "/dbs/"+testDB+"/colls/"+testColl, nil, nil),
		withToken("DELETE", "/dbs/"+testDB, nil, nil),
	} {
		assert.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
		assert.Equal(t, "5300", r.subStatus())
	}
	assert.Equal(t, http.StatusOK, c.do("GET", "/dbs/"+testDB+"/colls/"+testColl, nil, nil).status, "nothing was deleted")
	assert.Equal(t, http.StatusCreated, c.do("POST", "/dbs", map[string]any{"id": "other"}, nil).status, "the key still may")
}

func TestSigningTheWrongResourceLinkIsRefused(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase("db")
	req := c.newRequest(context.Background(), "GET", "/dbs/db", nil, nil)
	date := req.Header.Get("x-ms-date")
	// Lower-cased name-based link: names keep their case when signed.
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig="+testSignature(c.key, "GET", "dbs", strings.ToUpper("dbs/db"), date)))
	assert.Equal(t, http.StatusUnauthorized, c.send(req).status)
}
