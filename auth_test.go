package cdb

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type staticTokenCred string

func (s staticTokenCred) Token(context.Context) (string, error) { return string(s), nil }

type failingTokenCred struct{ err error }

func (f failingTokenCred) Token(context.Context) (string, error) { return "", f.err }

func mustMasterKey(t *testing.T, k string) *masterKey {
	t.Helper()
	mk, err := newMasterKey(k)
	require.NoError(t, err)
	return mk
}

// The worked example of Microsoft's REST page on access control
// (learn.microsoft.com/rest/api/cosmos-db/access-control-on-cosmosdb-resources).
func TestSignatureMicrosoftDocsVector(t *testing.T) {
	k := mustMasterKey(t, "dsZQi3KtZmCv1ljt3VNWNm7sQUF1y5rJfC6kv5JiwvW0EndXdDku/dkKBp8/ufDToSxLzR4y+O/0H/t4bQtVNw==")
	date := "Thu, 27 Apr 2017 00:51:12 GMT"
	assert.Equal(t, "c09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu+c+c=", k.signature("GET", "dbs", "dbs/ToDoList", date))

	header, err := k.authorize(context.Background(), "GET", "dbs", "dbs/ToDoList", date)
	require.NoError(t, err)
	assert.Equal(t, "type%3Dmaster%26ver%3D1.0%26sig%3Dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2Bc%2Bc%3D", header)
	// The docs print lowercase escapes; the same string once unescaped.
	docs := "type%3dmaster%26ver%3d1.0%26sig%3dc09PEVJrgp2uQRkr934kFbTqhByc7TVr3OHyqlu%2bc%2bc%3d"
	a, _ := url.QueryUnescape(header)
	b, _ := url.QueryUnescape(docs)
	assert.Equal(t, b, a)
}

// Known signatures under the emulator's well-known key at one fixed date, one
// per verb and resource type, and a RID link that is lowercased before signing.
func TestSignature1926Vectors(t *testing.T) {
	k := mustMasterKey(t, testMasterKey)
	date := "Fri, 17 Dec 1926 03:15:00 GMT"
	cases := []struct{ verb, resourceType, link, want string }{
		{"GET", "colls", "dbs/Test Database/colls/Test Collection", "cugjaA51bjCvxVi8LXg3XB+ZVKaFAZshILoJZF9nfEY="},
		{"POST", "colls", "dbs/Test Database", "E92FgDG9JiNX+NfsI+edOFtgkZRDkrrJxIfl12Vsu8A="},
		{"DELETE", "dbs", "dbs/Test Database", "LcuXXg0TcXxZG0kUCj9tZIWRy2yCzim3oiqGiHpRqGs="},
		{"PATCH", "docs", "dbs/test-db/colls/test-coll/docs/67890", "VR1ddfxKBXnoaT+b3WkhyYVc9JmGNpTnaRmyDM44398="},
		{"GET", "pkranges", ridLink("m4d+xG08uVM="), "6S5ceZsl2EXWB3Jo5bJcK7zv8NxXnsxWPWD9TH3nNMo="},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, k.signature(tc.verb, tc.resourceType, tc.link, date), "%s %s %s", tc.verb, tc.resourceType, tc.link)
	}
}

func TestRIDLinksAreLowercasedNameLinksKeepCase(t *testing.T) {
	k := mustMasterKey(t, testMasterKey)
	date := "Fri, 17 Dec 1926 03:15:00 GMT"
	assert.Equal(t, "m4d+xg08uvm=", ridLink("m4d+xG08uVM="))
	assert.NotEqual(t, k.signature("GET", "pkranges", "m4d+xG08uVM=", date), k.signature("GET", "pkranges", ridLink("m4d+xG08uVM="), date))
	assert.NotEqual(t, k.signature("GET", "colls", "dbs/Test Database", date), k.signature("GET", "colls", "dbs/test database", date),
		"name-based links are case-sensitive")
}

func TestStringToSignLowercasesAllButTheLink(t *testing.T) {
	assert.Equal(t, "get\ndocs\ndbs/MyDb/colls/MyColl\nthu, 27 apr 2017 00:51:12 gmt\n\n",
		stringToSign("GET", "DOCS", "dbs/MyDb/colls/MyColl", "Thu, 27 Apr 2017 00:51:12 GMT"))
	k := mustMasterKey(t, testMasterKey)
	assert.Equal(t, k.signature("GET", "dbs", "dbs/a", "Thu, 27 Apr 2017 00:51:12 GMT"),
		k.signature("get", "DBS", "dbs/a", "thu, 27 apr 2017 00:51:12 gmt"))
}

func TestWrongKeyGivesADifferentSignature(t *testing.T) {
	right := mustMasterKey(t, testMasterKey)
	raw, _ := base64.StdEncoding.DecodeString(testMasterKey)
	raw[0] ^= 1
	wrong := mustMasterKey(t, base64.StdEncoding.EncodeToString(raw))
	date := "Fri, 17 Dec 1926 03:15:00 GMT"
	assert.NotEqual(t, right.signature("GET", "dbs", "dbs/a", date), wrong.signature("GET", "dbs", "dbs/a", date))
}

func TestResourceRefsPerOperation(t *testing.T) {
	cases := []struct {
		name               string
		ref                resourceRef
		typ, link, urlPath string
	}{
		{"account", accountRef(), "", "", "/"},
		{"databases", databasesFeedRef(), "dbs", "", "/dbs"},
		{"database", databaseRef("My Db"), "dbs", "dbs/My Db", "/dbs/My%20Db"},
		{"containers", containersFeedRef("db"), "colls", "dbs/db", "/dbs/db/colls"},
		{"container", containerRef("db", "Coll"), "colls", "dbs/db/colls/Coll", "/dbs/db/colls/Coll"},
		{"documents", documentsFeedRef("db", "c"), "docs", "dbs/db/colls/c", "/dbs/db/colls/c/docs"},
		{"document", documentRef("db", "c", "a b+ü%"), "docs", "dbs/db/colls/c/docs/a b+ü%", "/dbs/db/colls/c/docs/a%20b+%C3%BC%25"},
		{"pkranges", pkRangesRef("db", "c"), "pkranges", "dbs/db/colls/c", "/dbs/db/colls/c/pkranges"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.typ, tc.ref.resourceType, tc.name)
		assert.Equal(t, tc.link, tc.ref.link, tc.name)
		assert.Equal(t, tc.urlPath, tc.ref.path, tc.name)
	}
}

func TestIDsArePathEscapedOnTheWireAndSignedRaw(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{"id":"my doc+ü%"}`))
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "my doc+ü%", nil)
	require.NoError(t, err)
	r := st.requests()[0]
	assert.Equal(t, "/dbs/db/colls/coll/docs/my%20doc+%C3%BC%25", r.Path)
	assertSignedFor(t, r, "docs", "dbs/db/colls/coll/docs/my doc+ü%")
}

func TestAADTokenHeader(t *testing.T) {
	c, st := newScriptedClient(t, replyAlways(200, `{}`), func(o *ClientOptions) {
		o.Key = ""
		o.Credential = staticTokenCred("eyJ0eXAi.token")
	})
	_, err := c.ReadAccount(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, "type=aad&ver=1.0&sig=eyJ0eXAi.token", st.requests()[0].Header.Get("Authorization"))
}

// The key never shows, in errors, logs or printed values.
func TestKeyNeverAppearsInErrorsLogsOrPrintedClient(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, st := newScriptedClient(t, replySequence(
		replyAlways(401, `{"code":"Unauthorized","message":"The input authorization token can't serve the request."}`),
		func(int, wireRequest) (*http.Response, error) { return nil, errors.New("connection reset") },
		replyAlways(404, `{"code":"NotFound","message":"nope"}`),
	), func(o *ClientOptions) { o.Logger = logger; o.Retry.MaxAttempts = 1 })
	cc, err := c.NewContainer("db", "coll")
	require.NoError(t, err)

	var errs []string
	_, err = c.ReadAccount(testCtx(t))
	errs = append(errs, err.Error(), ToProviderError("x", err).Error())
	_, err = cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	errs = append(errs, err.Error())
	_, err = cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	errs = append(errs, err.Error())

	raw, _ := base64.StdEncoding.DecodeString(testMasterKey)
	forbidden := []string{testMasterKey, fmt.Sprint(raw), fmt.Sprintf("%x", raw), string(raw)}
	for _, r := range st.requests() {
		forbidden = append(forbidden, r.Header.Get("Authorization"))
		sig, _ := url.QueryUnescape(r.Header.Get("Authorization"))
		forbidden = append(forbidden, strings.TrimPrefix(sig, "type=master&ver=1.0&sig="))
	}
	printed := []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), fmt.Sprintf("%v %#v", c.auth, c.auth)}

	require.NotEmpty(t, logs.String())
	haystacks := append(append(errs, logs.String()), printed...)
	for _, h := range haystacks {
		for _, f := range forbidden {
			assert.NotContains(t, h, f)
		}
		assert.NotContains(t, strings.ToLower(h), "authorization:")
	}
	assert.NotContains(t, strings.ToLower(logs.String()), "authorization")
}
