package sim

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func namesRequest(t *testing.T, method, path string, batch bool) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "https://acct"+path, nil)
	require.NoError(t, err)
	req.Header.Set("x-ms-documentdb-partitionkey", `["i1"]`)
	if batch {
		req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	}
	return req
}

func TestBoundedNamesFlagALongIDOrTokenWhereverTheWireCarriesIt(t *testing.T) {
	b := newBoundedNames()
	token := "lock_" + strings.Repeat("chain.", 20) + "0123" // 129 characters
	require.Len(t, token, 129)
	id := "m|w|work_" + strings.Repeat("chain.", 41) + "0.1.2" // 260
	// Within the bounds: nothing.
	b.observe("a", namesRequest(t, http.MethodPost, "/dbs/d/colls/c/docs", true),
		[]byte(`[{"operationType":"Create","resourceBody":{"id":"w|1|2","lockToken":"lock_chain.x","lastAck":"lock_y"}}]`))
	v := &violations{}
	b.check(v)
	assert.Empty(t, v.all())

	// A long token in a created document, a patch and a query; a long id in
	// a batch operation and in a path; escapes count as the characters
	// they stand for.
	b.observe("a", namesRequest(t, http.MethodPost, "/dbs/d/colls/c/docs", true),
		[]byte(fmt.Sprintf(`[{"operationType":"Create","resourceBody":{"id":"m|1","lockToken":%q}}]`, token)))
	b.observe("b", namesRequest(t, http.MethodPatch, "/dbs/d/colls/c/docs/inst", false),
		[]byte(fmt.Sprintf(`{"operations":[{"op":"set","path":"/lockToken","value":%q}]}`, token)))
	b.observe("b", namesRequest(t, http.MethodPost, "/dbs/d/colls/c/docs", false),
		[]byte(fmt.Sprintf(`{"query":"SELECT * FROM c","parameters":[{"name":"@token","value":%q}]}`, token)))
	b.observe("c", namesRequest(t, http.MethodPost, "/dbs/d/colls/c/docs", true),
		[]byte(fmt.Sprintf(`[{"operationType":"Create","resourceBody":{"id":%q,"type":"msg"}}]`, id)))
	b.observe("c", namesRequest(t, http.MethodDelete, "/dbs/d/colls/c/docs/"+strings.ReplaceAll(id, "|", "%7C"), false), nil)
	escaped := strings.Repeat(`\u0061`, 200) // 200 characters, 1200 bytes
	b.observe("c", namesRequest(t, http.MethodPost, "/dbs/d/colls/c/docs", true),
		[]byte(`[{"operationType":"Create","resourceBody":{"id":"`+escaped+`"}}]`))

	b.check(v)
	var got []string
	for _, x := range v.all() {
		assert.Equal(t, invBoundedNames, x.Invariant)
		assert.Equal(t, "i1", x.Instance)
		got = append(got, x.Detail[:strings.Index(x.Detail, " characters")])
	}
	assert.Equal(t, []string{
		"a sent a lock token (lockToken) of 129",
		"b sent a lock token (patch /lockToken) of 129",
		"b sent a lock token (query @token) of 129",
		"c sent a document id (id) of 260",
		"c sent a document id (path id) of 260",
	}, got)
	assert.Equal(t, "requests=7 longest-id=260 longest-token=129 ids-over-255=2 tokens-over-128=3", b.summary())
}
