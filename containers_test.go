package cdb

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Databases and containers.

func TestDatabaseOperationsWire(t *testing.T) {
	c, st := newScriptedClient(t, replySequence(
		replyAlways(201, `{"id":"db","_rid":"r1","_etag":"\"e\""}`),
		replyAlways(200, `{"id":"db","_rid":"r1"}`),
		replyAlways(204, ``),
	))
	props, err := c.CreateDatabase(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, DatabaseProperties{ID: "db", ResourceID: "r1", ETag: `"e"`}, props)
	_, err = c.ReadDatabase(testCtx(t), "db")
	require.NoError(t, err)
	require.NoError(t, c.DeleteDatabase(testCtx(t), "db"))

	reqs := st.requests()
	require.Len(t, reqs, 3)
	assert.Equal(t, "POST", reqs[0].Method)
	assert.Equal(t, "/dbs", reqs[0].Path)
	assert.JSONEq(t, `{"id":"db"}`, string(reqs[0].Body))
	assert.Equal(t, "application/json", reqs[0].Header.Get("Content-Type"))
	assertSignedFor(t, reqs[0], "dbs", "")
	assert.Equal(t, "GET", reqs[1].Method)
	assert.Equal(t, "/dbs/db", reqs[1].Path)
	assertSignedFor(t, reqs[1], "dbs", "dbs/db")
	assert.Equal(t, "DELETE", reqs[2].Method)
	assertSignedFor(t, reqs[2], "dbs", "dbs/db")

	ops := c.Stats().ByOperation
	assert.Equal(t, int64(1), ops["CreateDatabase"].Operations)
	assert.Equal(t, int64(1), ops["ReadDatabase"].Operations)
	assert.Equal(t, int64(1), ops["DeleteDatabase"].Operations)
}

func TestEnsureDatabase(t *testing.T) {
	c, _ := newScriptedClient(t, replyAlways(409, `{"code":"Conflict","message":"exists"}`))
	assert.NoError(t, c.EnsureDatabase(testCtx(t), "db"))
	c, _ = newScriptedClient(t, replyAlways(201, `{"id":"db"}`))
	assert.NoError(t, c.EnsureDatabase(testCtx(t), "db"))
	c, _ = newScriptedClient(t, replyAlways(401, `{"code":"Unauthorized","message":"bad"}`))
	assert.True(t, HasStatus(c.EnsureDatabase(testCtx(t), "db"), 401))
}

func TestNamesAreValidated(t *testing.T) {
	c, st := newScriptedClient(t, replyAlways(201, `{}`))
	for _, bad := range []string{"", "a/b", `a\b`, "a?b", "a#b", strings.Repeat("n", 256)} {
		_, err := c.NewContainer("db", bad)
		assert.ErrorIs(t, err, ErrInvalidName, "%q", bad)
		_, err = c.NewContainer(bad, "coll")
		assert.ErrorIs(t, err, ErrInvalidName, "%q", bad)
		_, err = c.CreateDatabase(testCtx(t), bad)
		assert.ErrorIs(t, err, ErrInvalidName, "%q", bad)
	}
	assert.Equal(t, 0, st.count())
	cc, err := c.NewContainer("db", strings.Repeat("n", 255))
	require.NoError(t, err)
	assert.Equal(t, "db", cc.DatabaseID())
}

func TestCreateContainerWire(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(201, `{"id":"coll","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2},"_rid":"x"}`))
	ttl := -1
	policy := DefaultIndexingPolicy()
	policy.CompositeIndexes = [][]CompositeIndex{{{Path: "/status", Order: CompositeIndexAscending}, {Path: "/visibleAt", Order: CompositeIndexAscending}}}
	props, err := cc.Create(testCtx(t), ContainerProperties{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: &policy, DefaultTimeToLive: &ttl})
	require.NoError(t, err)
	assert.Equal(t, "coll", props.ID)
	assert.Equal(t, "x", props.ResourceID)

	r := st.requests()[0]
	assert.Equal(t, "POST", r.Method)
	assert.Equal(t, "/dbs/db/colls", r.Path)
	assertSignedFor(t, r, "colls", "dbs/db")
	assert.JSONEq(t, `{"id":"coll",
		"partitionKey":{"paths":["/pk"],"kind":"Hash","version":2},
		"indexingPolicy":{"indexingMode":"consistent","automatic":true,
			"includedPaths":[{"path":"/*"}],"excludedPaths":[{"path":"/\"_etag\"/?"}],
			"compositeIndexes":[[{"path":"/status","order":"ascending"},{"path":"/visibleAt","order":"ascending"}]]},
		"defaultTtl":-1}`, string(r.Body))
}

func TestContainerPropertiesAreValidated(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(201, `{}`))
	bad := []ContainerProperties{
		{},
		{PartitionKey: PartitionKeyDefinition{Paths: []string{"pk"}}},
		{ID: "other", PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}},
		{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: &IndexingPolicy{CompositeIndexes: [][]CompositeIndex{{{Path: "/a"}}}}},
		{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}, IndexingPolicy: &IndexingPolicy{CompositeIndexes: [][]CompositeIndex{{{Path: "/a", Order: "up"}, {Path: "/b"}}}}},
	}
	for i, p := range bad {
		_, err := cc.Create(testCtx(t), p)
		assert.ErrorIs(t, err, ErrInvalidContainerProperties, "case %d", i)
	}
	assert.Equal(t, 0, st.count())
}

func TestReadAndDeleteContainerWire(t *testing.T) {
	cc, st := newScriptedContainer(t, replySequence(replyAlways(200, `{"id":"coll","partitionKey":{"paths":["/pk"]}}`), replyAlways(204, ``)))
	props, err := cc.Read(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"/pk"}, props.PartitionKey.Paths)
	require.NoError(t, cc.Delete(testCtx(t)))
	reqs := st.requests()
	assert.Equal(t, "GET", reqs[0].Method)
	assert.Equal(t, "/dbs/db/colls/coll", reqs[0].Path)
	assertSignedFor(t, reqs[0], "colls", "dbs/db/colls/coll")
	assert.Equal(t, "DELETE", reqs[1].Method)
	assertSignedFor(t, reqs[1], "colls", "dbs/db/colls/coll")
}

func TestEnsureContainer(t *testing.T) {
	want := ContainerProperties{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}}

	cc, st := newScriptedContainer(t, replyAlways(201, `{"id":"coll","partitionKey":{"paths":["/pk"]}}`))
	_, err := cc.Ensure(testCtx(t), want)
	require.NoError(t, err)
	assert.Equal(t, 1, st.count())

	cc, st = newScriptedContainer(t, replySequence(
		replyAlways(409, `{"code":"Conflict","message":"exists"}`),
		replyAlways(200, `{"id":"coll","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2}}`),
	))
	got, err := cc.Ensure(testCtx(t), want)
	require.NoError(t, err)
	assert.Equal(t, "coll", got.ID)
	require.Len(t, st.requests(), 2)
	assert.Equal(t, "GET", st.requests()[1].Method)

	cc, _ = newScriptedContainer(t, replySequence(
		replyAlways(409, `{"code":"Conflict","message":"exists"}`),
		replyAlways(200, `{"id":"coll","partitionKey":{"paths":["/tenant"]}}`),
	))
	_, err = cc.Ensure(testCtx(t), want)
	require.ErrorIs(t, err, ErrPartitionKeyPathMismatch)
	assert.Contains(t, err.Error(), "/tenant")
	assert.Contains(t, err.Error(), "/pk")
	assert.False(t, IsRetryable(ToProviderError("create", err)))
}

func TestDefaultIndexingPolicyJSON(t *testing.T) {
	b, err := json.Marshal(DefaultIndexingPolicy())
	require.NoError(t, err)
	assert.JSONEq(t, `{"indexingMode":"consistent","automatic":true,"includedPaths":[{"path":"/*"}],"excludedPaths":[{"path":"/\"_etag\"/?"}]}`, string(b))
}

// ---------------------------------------------------------------------------
// Items: wire format.

func TestItemOperationsWire(t *testing.T) {
	etag := ETag(`"00000000-0000-0000-1234-000000000000"`)
	item := []byte(`{"id":"a b","pk":"p","n":1}`)
	pk := NewPartitionKeyString("p")
	cases := []struct {
		name    string
		call    func(cc *ContainerClient) (ItemResponse, error)
		method  string
		path    string
		link    string
		headers map[string]string // "" means absent
		body    []byte
	}{
		{"create", func(cc *ContainerClient) (ItemResponse, error) {
			return cc.CreateItem(testCtx(t), pk, item, &ItemOptions{SessionToken: "0:1#5"})
		}, "POST", "/dbs/db/colls/coll/docs", "dbs/db/colls/coll",
			map[string]string{"Prefer": "return=minimal", "x-ms-session-token": "0:1#5", "If-Match": "", "x-ms-documentdb-is-upsert": "", "Content-Type": "application/json"}, item},
		{"upsert", func(cc *ContainerClient) (ItemResponse, error) {
			return cc.UpsertItem(testCtx(t), pk, item, &ItemOptions{IfMatch: &etag})
		}, "POST", "/dbs/db/colls/coll/docs", "dbs/db/colls/coll",
			map[string]string{"Prefer": "return=minimal", "x-ms-documentdb-is-upsert": "True", "If-Match": string(etag)}, item},
		{"read", func(cc *ContainerClient) (ItemResponse, error) {
			return cc.ReadItem(testCtx(t), pk, "a b", nil)
		}, "GET", "/dbs/db/colls/coll/docs/a%20b", "dbs/db/colls/coll/docs/a b",
			map[string]string{"Prefer": "", "If-Match": "", "Content-Type": ""}, nil},
		{"replace", func(cc *ContainerClient) (ItemResponse, error) {
			return cc.ReplaceItem(testCtx(t), pk, "a b", item, &ItemOptions{IfMatch: &etag, EnableContentResponseOnWrite: true})
		}, "PUT", "/dbs/db/colls/coll/docs/a%20b", "dbs/db/colls/coll/docs/a b",
			map[string]string{"Prefer": "", "If-Match": string(etag)}, item},
		{"delete", func(cc *ContainerClient) (ItemResponse, error) {
			return cc.DeleteItem(testCtx(t), pk, "a b", &ItemOptions{IfMatch: &etag})
		}, "DELETE", "/dbs/db/colls/coll/docs/a%20b", "dbs/db/colls/coll/docs/a b",
			map[string]string{"Prefer": "", "If-Match": string(etag)}, nil},
		{"patch", func(cc *ContainerClient) (ItemResponse, error) {
			var ops PatchOperations
			ops.AppendSet("/status", "leased")
			return cc.PatchItem(testCtx(t), pk, "a b", ops, nil)
		}, "PATCH", "/dbs/db/colls/coll/docs/a%20b", "dbs/db/colls/coll/docs/a b",
			map[string]string{"Prefer": "return=minimal", "If-Match": "", "Content-Type": "application/json"},
			[]byte(`{"operations":[{"op":"set","path":"/status","value":"leased"}]}`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc, st := newScriptedContainer(t, replyAlways(200, ``, "etag", `"e2"`))
			_, err := tc.call(cc)
			require.NoError(t, err)
			r := st.requests()[0]
			assert.Equal(t, tc.method, r.Method)
			assert.Equal(t, tc.path, r.Path)
			assertSignedFor(t, r, "docs", tc.link)
			assert.Equal(t, `["p"]`, r.Header.Get("x-ms-documentdb-partitionkey"))
			for k, v := range tc.headers {
				assert.Equal(t, v, r.Header.Get(k), "header %s", k)
			}
			assert.Equal(t, string(tc.body), string(r.Body))
		})
	}
}

func TestItemResponseParsing(t *testing.T) {
	pk := NewPartitionKeyString("p")
	// Real Cosmos: quoted ETag, minimal write without a body.
	cc, _ := newScriptedContainer(t, replyAlways(201, ``, "etag", `"00000000-0000-0000-abcd-000000000000"`,
		"x-ms-request-charge", "6.29", "x-ms-activity-id", "act", "x-ms-session-token", "0:-1#12"))
	resp, err := cc.CreateItem(testCtx(t), pk, []byte(`{"id":"a"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, ItemResponse{Value: nil, ETag: `"00000000-0000-0000-abcd-000000000000"`, StatusCode: 201,
		RequestCharge: 6.29, ActivityID: "act", SessionToken: "0:-1#12", Attempts: 1}, resp)

	// A server that ignores Prefer and sends unquoted ETags.
	cc, _ = newScriptedContainer(t, replyAlways(200, `{"id":"a","_etag":"3f0c"}`, "etag", `3f0c`))
	resp, err = cc.ReplaceItem(testCtx(t), pk, "a", []byte(`{"id":"a"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, ETag("3f0c"), resp.ETag)
	assert.JSONEq(t, `{"id":"a","_etag":"3f0c"}`, string(resp.Value))

	// Delete: 204 and nothing else.
	cc, _ = newScriptedContainer(t, replyAlways(204, ``))
	resp, err = cc.DeleteItem(testCtx(t), pk, "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 204, resp.StatusCode)
	assert.Nil(t, resp.Value)
	assert.Equal(t, ETag(""), resp.ETag)
}

func TestETagIsEchoedByteForByte(t *testing.T) {
	for _, etag := range []ETag{`"00000000-0000-0000-1234-000000000000"`, `5e1f8a52-2c4a-4cb5-a7f3-aaaaaaaaaaaa`, `W/"x"`} {
		cc, st := newScriptedContainer(t, replyAlways(200, ``, "etag", string(etag)))
		resp, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
		require.NoError(t, err)
		_, err = cc.ReplaceItem(testCtx(t), NewPartitionKeyString("p"), "a", []byte(`{"id":"a"}`), &ItemOptions{IfMatch: &resp.ETag})
		require.NoError(t, err)
		assert.Equal(t, string(etag), st.requests()[1].Header.Get("If-Match"))
	}
}

func TestNotFoundAndPreconditionFailed(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(404, `{"code":"NotFound","message":"Entity with the specified id does not exist in the system."}`))
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	assert.True(t, IsNotFound(err))
	assert.False(t, IsRetryable(ToProviderError("Read", err)))

	cc, _ = newScriptedContainer(t, replyAlways(412, `{"code":"PreconditionFailed","message":"x"}`))
	etag := ETag(`"old"`)
	_, err = cc.DeleteItem(testCtx(t), NewPartitionKeyString("p"), "a", &ItemOptions{IfMatch: &etag})
	assert.True(t, IsPreconditionFailed(err))
	assert.False(t, IsRetryable(ToProviderError("ack", err)))
}

// ---------------------------------------------------------------------------
// Items: what the service cannot store is refused before sending.

func TestItemInputIsValidatedBeforeSending(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{}`))
	pk := NewPartitionKeyString("p")
	big := []byte(`{"id":"a","x":"` + strings.Repeat("x", MaxDocumentBytes) + `"}`)
	var tooMany PatchOperations
	for i := range 11 {
		tooMany.AppendIncrement("/n"+string(rune('a'+i)), 1)
	}
	var badPath PatchOperations
	badPath.AppendSet("status", 1)
	var badMove PatchOperations
	badMove.AppendMove("from", "/to")

	cases := []struct {
		name     string
		err      error
		sentinel error
	}{
		{"empty id", errOf(cc.ReadItem(testCtx(t), pk, "", nil)), ErrInvalidID},
		{"long id", errOf(cc.ReadItem(testCtx(t), pk, strings.Repeat("i", 256), nil)), ErrInvalidID},
		{"slash", errOf(cc.DeleteItem(testCtx(t), pk, "a/b", nil)), ErrInvalidID},
		{"backslash", errOf(cc.DeleteItem(testCtx(t), pk, `a\b`, nil)), ErrInvalidID},
		{"question", errOf(cc.ReadItem(testCtx(t), pk, "a?b", nil)), ErrInvalidID},
		{"hash", errOf(cc.ReadItem(testCtx(t), pk, "a#b", nil)), ErrInvalidID},
		{"body id", errOf(cc.CreateItem(testCtx(t), pk, []byte(`{"id":"a/b"}`), nil)), ErrInvalidID},
		{"no id", errOf(cc.CreateItem(testCtx(t), pk, []byte(`{"x":1}`), nil)), ErrInvalidDocument},
		{"id not string", errOf(cc.UpsertItem(testCtx(t), pk, []byte(`{"id":5}`), nil)), ErrInvalidDocument},
		{"not object", errOf(cc.CreateItem(testCtx(t), pk, []byte(`[1]`), nil)), ErrInvalidDocument},
		{"not json", errOf(cc.CreateItem(testCtx(t), pk, []byte(`{"id":`), nil)), ErrInvalidDocument},
		{"too large", errOf(cc.CreateItem(testCtx(t), pk, big, nil)), ErrDocumentTooLarge},
		{"replace id mismatch", errOf(cc.ReplaceItem(testCtx(t), pk, "a", []byte(`{"id":"b"}`), nil)), ErrInvalidDocument},
		{"patch none", errOf(cc.PatchItem(testCtx(t), pk, "a", PatchOperations{}, nil)), ErrInvalidPatch},
		{"patch too many", errOf(cc.PatchItem(testCtx(t), pk, "a", tooMany, nil)), ErrTooManyPatchOperations},
		{"patch path", errOf(cc.PatchItem(testCtx(t), pk, "a", badPath, nil)), ErrInvalidPatch},
		{"patch move from", errOf(cc.PatchItem(testCtx(t), pk, "a", badMove, nil)), ErrInvalidPatch},
	}
	for _, tc := range cases {
		var ve *ValidationError
		require.ErrorAs(t, tc.err, &ve, tc.name)
		assert.ErrorIs(t, tc.err, tc.sentinel, tc.name)
		assert.NotEmpty(t, ve.Operation, tc.name)
		assert.False(t, IsRetryable(ToProviderError("x", tc.err)), tc.name)
	}
	assert.Equal(t, 0, st.count(), "nothing was sent")

	_, err := cc.PatchItem(testCtx(t), pk, "a", tooMany, nil)
	assert.Contains(t, err.Error(), "11 operations, 10 allowed (1 over)")
	_, err = cc.CreateItem(testCtx(t), pk, big, nil)
	assert.Contains(t, err.Error(), "2097152 allowed")
}

func errOf[T any](_ T, err error) error { return err }

func TestLongestValidIDIsAccepted(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(200, `{}`))
	id := strings.Repeat("é", MaxIDLength) // 255 characters, 510 bytes
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), id, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, st.count())
}

// ---------------------------------------------------------------------------
// PATCH bodies.

func TestPatchBodyShape(t *testing.T) {
	var ops PatchOperations
	ops.AppendAdd("/tags/-", "x")
	ops.AppendSet("/owner", nil)
	ops.AppendReplace("/status", "leased")
	ops.AppendRemove("/lock")
	ops.AppendIncrement("/attempts", 1)
	ops.AppendMove("/a", "/b")
	ops.SetCondition(`from c where c.status = 'queued' AND c.note = "say \"hi\""`)
	assert.Equal(t, 6, ops.Len())

	b, err := json.Marshal(ops)
	require.NoError(t, err)
	assert.JSONEq(t, `{"condition":"from c where c.status = 'queued' AND c.note = \"say \\\"hi\\\"\"",
		"operations":[
		{"op":"add","path":"/tags/-","value":"x"},
		{"op":"set","path":"/owner","value":null},
		{"op":"replace","path":"/status","value":"leased"},
		{"op":"remove","path":"/lock"},
		{"op":"incr","path":"/attempts","value":1},
		{"op":"move","from":"/a","path":"/b"}]}`, string(b))

	var back struct {
		Condition string `json:"condition"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, `from c where c.status = 'queued' AND c.note = "say \"hi\""`, back.Condition)
}

func TestPatchValueThatCannotBeEncoded(t *testing.T) {
	var ops PatchOperations
	ops.AppendSet("/f", func() {})
	cc, st := newScriptedContainer(t, replyAlways(200, ``))
	_, err := cc.PatchItem(testCtx(t), NewPartitionKeyString("p"), "a", ops, nil)
	assert.ErrorIs(t, err, ErrInvalidPatch)
	assert.Equal(t, 0, st.count())
}

func TestPatchPreconditionFailedFromCondition(t *testing.T) {
	var ops PatchOperations
	ops.AppendSet("/status", "leased")
	ops.SetCondition("from c where c.status = 'queued'")
	cc, st := newScriptedContainer(t, replyAlways(http.StatusPreconditionFailed, `{"code":"PreconditionFailed","message":"Condition specified in the patch request is not satisfied."}`))
	_, err := cc.PatchItem(testCtx(t), NewPartitionKeyString("p"), "a", ops, nil)
	assert.True(t, IsPreconditionFailed(err))
	assert.Equal(t, 1, st.count())
}
