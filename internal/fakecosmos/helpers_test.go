package fakecosmos

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test client signs requests with its own code (not the server's), so
// that the two implementations of the signature check each other.

// testSignature computes the master-key signature from scratch.
func testSignature(key, verb, resourceType, link, date string) string {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		panic(err)
	}
	payload := fmt.Sprintf("%s\n%s\n%s\n%s\n\n", strings.ToLower(verb), strings.ToLower(resourceType), link, strings.ToLower(date))
	m := hmac.New(sha256.New, k)
	m.Write([]byte(payload))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// signingTarget derives what a client signs from a request path: a path
// that ends in a feed name (dbs, colls, docs, pkranges) is signed with that
// type and its parent's link, any other with its parent feed's type and
// itself.
func signingTarget(escapedPath string) (resourceType, link string) {
	trimmed := strings.Trim(escapedPath, "/")
	if trimmed == "" {
		return "", ""
	}
	segs := strings.Split(trimmed, "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			panic(err)
		}
		segs[i] = u
	}
	if len(segs)%2 == 1 {
		return segs[len(segs)-1], strings.Join(segs[:len(segs)-1], "/")
	}
	return segs[len(segs)-2], strings.Join(segs, "/")
}

type testClient struct {
	t      *testing.T
	srv    *Server
	key    string
	http   *http.Client
	base   string
	dateOf func() time.Time
}

func newTestServer(t *testing.T, opts Options) (*Server, *testClient) {
	t.Helper()
	srv := New(opts)
	return srv, &testClient{
		t: t, srv: srv, key: srv.Key(),
		http:   &http.Client{Transport: srv.Transport()},
		base:   "https://fake.local",
		dateOf: time.Now,
	}
}

type testResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r testResponse) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body %s", r.body)
	return m
}

func (r testResponse) array(t *testing.T) []map[string]any {
	t.Helper()
	var a []map[string]any
	require.NoError(t, json.Unmarshal(r.body, &a), "body %s", r.body)
	return a
}

// errorText digs the error text out of the gateway's error body:
// {"code":..,"message":"Message: {\"Errors\":[\"<text>\"]}\r\nActivityId: .."}.
func errorText(t *testing.T, r testResponse) string {
	t.Helper()
	msg, _ := r.object(t)["message"].(string)
	inner, _, found := strings.Cut(strings.TrimPrefix(msg, "Message: "), "\r\n")
	require.True(t, found, "message %q", msg)
	var errs struct{ Errors []string }
	require.NoError(t, json.Unmarshal([]byte(inner), &errs), "message %q", msg)
	require.Len(t, errs.Errors, 1)
	return errs.Errors[0]
}

func (r testResponse) subStatus() string { return r.header.Get("x-ms-substatus") }

// hdr is a request's extra headers.
type hdr map[string]string

func pkHeader(v any) hdr {
	b, _ := json.Marshal([]any{v})
	return hdr{"x-ms-documentdb-partitionkey": string(b)}
}

func (h hdr) with(k, v string) hdr {
	out := hdr{}
	for a, b := range h {
		out[a] = b
	}
	out[k] = v
	return out
}

// newRequest builds a signed request; body may be nil, []byte, or a value
// to marshal.
func (c *testClient) newRequest(ctx context.Context, method, escapedPath string, body any, h hdr) *http.Request {
	c.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		raw, err = json.Marshal(b)
		require.NoError(c.t, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+escapedPath, bytes.NewReader(raw))
	require.NoError(c.t, err)
	date := c.dateOf().UTC().Format(http.TimeFormat)
	rt, link := signingTarget(escapedPath)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2020-11-05")
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig="+testSignature(c.key, method, rt, link, date)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		if v == "" { // an empty value sends no such header at all
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

func (c *testClient) send(req *http.Request) testResponse {
	c.t.Helper()
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return testResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *testClient) do(method, escapedPath string, body any, h hdr) testResponse {
	c.t.Helper()
	return c.send(c.newRequest(context.Background(), method, escapedPath, body, h))
}

// Fixtures.

const (
	testDB   = "db"
	testColl = "coll"
	collPath = "/dbs/db/colls/coll"
	docsPath = "/dbs/db/colls/coll/docs"
)

func (c *testClient) createDatabase(id string) {
	c.t.Helper()
	r := c.do("POST", "/dbs", map[string]any{"id": id}, nil)
	require.Equal(c.t, http.StatusCreated, r.status, "%s", r.body)
}

func (c *testClient) createContainer(db string, body map[string]any) {
	c.t.Helper()
	r := c.do("POST", "/dbs/"+url.PathEscape(db)+"/colls", body, nil)
	require.Equal(c.t, http.StatusCreated, r.status, "%s", r.body)
}

// standardContainer creates db/coll partitioned on /pk.
func (c *testClient) standardContainer() {
	c.t.Helper()
	c.createDatabase(testDB)
	c.createContainer(testDB, map[string]any{"id": testColl, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}})
}

func (c *testClient) createDoc(doc map[string]any) testResponse {
	c.t.Helper()
	r := c.do("POST", docsPath, doc, pkHeader(doc["pk"]))
	require.Equal(c.t, http.StatusCreated, r.status, "%s", r.body)
	return r
}

func docPath(id string) string { return docsPath + "/" + url.PathEscape(id) }

// query posts a query; extra headers select the scope.
func (c *testClient) query(text string, params map[string]any, h hdr) testResponse {
	c.t.Helper()
	body := map[string]any{"query": text}
	var list []map[string]any
	for k, v := range params {
		list = append(list, map[string]any{"name": k, "value": v})
	}
	if list != nil {
		body["parameters"] = list
	}
	all := hdr{"x-ms-documentdb-isquery": "True", "Content-Type": "application/query+json"}
	for k, v := range h {
		all[k] = v
	}
	return c.do("POST", docsPath, body, all)
}

// queryAll follows continuations and returns every page.
func (c *testClient) queryAll(text string, h hdr) (pages []testResponse, docs []map[string]any) {
	c.t.Helper()
	token := ""
	for i := 0; i < 1000; i++ {
		hh := h
		if token != "" {
			hh = h.with("x-ms-continuation", token)
		}
		r := c.query(text, nil, hh)
		require.Equal(c.t, http.StatusOK, r.status, "%s", r.body)
		pages = append(pages, r)
		for _, d := range r.object(c.t)["Documents"].([]any) {
			m, _ := d.(map[string]any)
			docs = append(docs, m)
		}
		token = r.header.Get("x-ms-continuation")
		if token == "" {
			return pages, docs
		}
	}
	c.t.Fatal("paging did not end")
	return nil, nil
}

func ids(docs []map[string]any) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i], _ = d["id"].(string)
	}
	return out
}
