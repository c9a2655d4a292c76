package cdb

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Reading our own writes on the strict fake: its lagging replica serves
// whatever read does not carry the session token of a document's last write.

func staleContainer(t *testing.T, ranges int) (*FakeAccount, *ContainerClient) {
	t.Helper()
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: ranges, StaleReadsWithoutSessionToken: true})
	return acct, newFakeContainer(t, acct, nil)
}

func itemJSON(id, pk string, v int) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"pk":%q,"v":%d}`, id, pk, v))
}

func versionOf(t *testing.T, raw []byte) int {
	t.Helper()
	var doc struct{ V int }
	require.NoError(t, json.Unmarshal(raw, &doc), "%s", raw)
	return doc.V
}

func versionsByID(t *testing.T, items []json.RawMessage) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, raw := range items {
		var doc struct {
			ID string
			V  int
		}
		require.NoError(t, json.Unmarshal(raw, &doc))
		out[doc.ID] = doc.V
	}
	return out
}

// TestClientReadsItsOwnWritesUnderStaleReads: every kind of read the client
// has sees the writes before it, in every range, because the client sends
// the session tokens its writes returned.
func TestClientReadsItsOwnWritesUnderStaleReads(t *testing.T) {
	_, cc := staleContainer(t, 3)
	ctx := testCtx(t)
	want := map[string]int{}
	for i := range 12 {
		pk := fmt.Sprintf("p%d", i)
		_, err := cc.CreateItem(ctx, NewPartitionKeyString(pk), itemJSON(pk, pk, 1), nil)
		require.NoError(t, err)
		got, err := cc.ReadItem(ctx, NewPartitionKeyString(pk), pk, nil)
		require.NoError(t, err, "read after create of %s", pk)
		assert.Equal(t, 1, versionOf(t, got.Value))

		_, err = cc.ReplaceItem(ctx, NewPartitionKeyString(pk), pk, itemJSON(pk, pk, 2), nil)
		require.NoError(t, err)
		got, err = cc.ReadItem(ctx, NewPartitionKeyString(pk), pk, nil)
		require.NoError(t, err)
		assert.Equal(t, 2, versionOf(t, got.Value), "read after replace of %s", pk)

		key := NewPartitionKeyString(pk)
		res, err := cc.QueryItems(ctx, "SELECT * FROM c WHERE c.pk = @pk", []QueryParameter{{Name: "@pk", Value: pk}}, &QueryOptions{PartitionKey: &key})
		require.NoError(t, err)
		assert.Equal(t, map[string]int{pk: 2}, versionsByID(t, res.Items), "single-partition query after replace")
		want[pk] = 2
	}

	res, err := cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, want, versionsByID(t, res.Items), "cross-partition query")

	perRange, err := cc.QueryItemsPerRange(ctx, "SELECT * FROM c ORDER BY c.id", nil, nil)
	require.NoError(t, err)
	require.Len(t, perRange, 3)
	merged := map[string]int{}
	for _, r := range perRange {
		for id, v := range versionsByID(t, r.Items) {
			merged[id] = v
		}
	}
	assert.Equal(t, want, merged, "range-targeted queries")

	_, err = cc.DeleteItem(ctx, NewPartitionKeyString("p0"), "p0", nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, NewPartitionKeyString("p0"), "p0", nil)
	assert.True(t, IsNotFound(err), "read after delete: %v", err)

	// A batch's answer moves the session too.
	b := cc.NewTransactionalBatch(NewPartitionKeyString("p1"))
	b.ReplaceItem("p1", itemJSON("p1", "p1", 3), nil)
	resp, err := cc.ExecuteTransactionalBatch(ctx, b, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)
	got, err := cc.ReadItem(ctx, NewPartitionKeyString("p1"), "p1", nil)
	require.NoError(t, err)
	assert.Equal(t, 3, versionOf(t, got.Value), "read after batch")
}

// TestClientWithoutSessionTokensReadsStaleData shows the fake's lagging
// replica is real: the same reads, with propagation switched off, miss the
// writes.
func TestClientWithoutSessionTokensReadsStaleData(t *testing.T) {
	_, cc := staleContainer(t, 1)
	cc.client.sessions.disable()
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	assert.True(t, IsNotFound(err), "just created, not on the lagging replica: %v", err)
	_, err = cc.ReplaceItem(ctx, pk, "a", itemJSON("a", "p", 2), nil)
	require.NoError(t, err)
	got, err := cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 1, versionOf(t, got.Value), "the version before the replace")
	res, err := cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1}, versionsByID(t, res.Items))
}

// ---------------------------------------------------------------------------
// What goes on the wire.

// hierarchicalContainer is a container's properties with a hierarchical
// (MultiHash) key: the client does not place its keys, so its reads send the
// compound token.
const hierarchicalContainer = `{"id":"coll","partitionKey":{"paths":["/t","/pk"],"kind":"MultiHash","version":2}}`

// documentsOnly answers what is not a document request (the container's
// properties and ranges a read resolves its range from) with container and
// the ranges of sessionScript, and hands the document requests to respond,
// counted from 0 among themselves.
func documentsOnly(container string, respond func(int, wireRequest) (*http.Response, error)) func(int, wireRequest) (*http.Response, error) {
	var mu sync.Mutex
	docs := 0
	return func(_ int, r wireRequest) (*http.Response, error) {
		switch {
		case strings.HasSuffix(r.Path, "/pkranges"):
			return reply(http.StatusOK, `{"PartitionKeyRanges":[{"id":"0","minInclusive":"","maxExclusive":"80","parents":[]},{"id":"1","minInclusive":"80","maxExclusive":"FF","parents":[]},{"id":"5","minInclusive":"80","maxExclusive":"C0","parents":["1","3"]},{"id":"6","minInclusive":"C0","maxExclusive":"FF","parents":["1","3"]}]}`), nil
		case !strings.Contains(r.Path, "/docs"):
			return reply(http.StatusOK, container), nil
		}
		mu.Lock()
		n := docs
		docs++
		mu.Unlock()
		return respond(n, r)
	}
}

// sessionScript answers every document request with the next token of
// tokens (the last repeating), in a container of hierarchicalContainer.
func sessionScript(tokens ...string) func(int, wireRequest) (*http.Response, error) {
	return documentsOnly(hierarchicalContainer, func(i int, r wireRequest) (*http.Response, error) {
		tok := tokens[min(i, len(tokens)-1)]
		body := `{"id":"a","pk":"p"}`
		if r.Header.Get("x-ms-documentdb-isquery") != "" {
			body = `{"Documents":[]}`
		}
		return reply(http.StatusOK, body, "x-ms-session-token", tok), nil
	})
}

// documentRequests is what went on the wire for documents.
func documentRequests(st *scriptedTransport) []wireRequest {
	var out []wireRequest
	for _, r := range st.requests() {
		if strings.Contains(r.Path, "/docs") {
			out = append(out, r)
		}
	}
	return out
}

// sentTokens is the session token of every document request, in order.
func sentTokens(st *scriptedTransport) []string {
	var out []string
	for _, r := range documentRequests(st) {
		out = append(out, r.Header.Get("x-ms-session-token"))
	}
	return out
}

func TestSessionTokensGoOnReadsNotWrites(t *testing.T) {
	cc, st := newScriptedContainer(t, sessionScript("0:-1#5", "1:-1#7", "0:-1#3", "0:-1#6"))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.ReadItem(ctx, pk, "a", nil) // nothing known yet; learns 0:5
	require.NoError(t, err)
	_, err = cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil) // learns 1:7
	require.NoError(t, err)
	_, err = cc.UpsertItem(ctx, pk, itemJSON("a", "p", 1), nil) // 0:3 is older than 0:5
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, &QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "", "", "0:-1#5,1:-1#7", "0:-1#6,1:-1#7", "0:-1#6,1:-1#7"}, sentTokens(st),
		"reads and queries of a container whose keys the client does not place send the compound token, highest LSN per range; writes send none")
}

func TestRangeTargetedQueriesSendTheirRangesToken(t *testing.T) {
	cc, st := newScriptedContainer(t, sessionScript("0:-1#5", "1:-1#7", "3:-1#2", "", "", "", "", ""))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	for range 3 {
		_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
		require.NoError(t, err)
	}
	_, err := cc.ReadPartitionKeyRanges(ctx, false)
	require.NoError(t, err)
	for _, id := range []string{"0", "5", "6", "1", "9"} {
		_, err := cc.QueryItems(ctx, "SELECT * FROM c", nil, &QueryOptions{PartitionKeyRangeID: id})
		require.NoError(t, err)
	}
	for _, r := range st.requests() {
		if strings.HasSuffix(r.Path, "/pkranges") {
			assert.Empty(t, r.Header.Get("x-ms-session-token"), "no token on the ranges read")
		}
	}
	assert.Equal(t, []string{"0:-1#5", "5:-1#2", "6:-1#2", "", ""}, sentTokens(st)[3:],
		"a range's own token; a split child's from its nearest parent, under its own id; nothing for a range gone (1, split: its token was forgotten with the list that no longer holds it) or unknown")
}

func TestCallersSessionTokenWins(t *testing.T) {
	cc, st := newScriptedContainer(t, sessionScript("0:-1#5"))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "a", &ItemOptions{SessionToken: "0:-1#1"})
	require.NoError(t, err)
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, &QueryOptions{SessionToken: "0:-1#2"})
	require.NoError(t, err)
	assert.Equal(t, []string{"", "0:-1#1", "0:-1#2"}, sentTokens(st))
}

// TestSessionTokensToleratesServersWithoutThem: no token, or one in a form
// we do not know, is never sent back.
func TestSessionTokensToleratesServersWithoutThem(t *testing.T) {
	for _, tok := range []string{"", "garbage", "a:b:c", "0:x#y", ":-1#4", "0:-1#4#nonsense"} {
		cc, st := newScriptedContainer(t, sessionScript(tok))
		ctx := testCtx(t)
		pk := NewPartitionKeyString("p")
		_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
		require.NoError(t, err)
		_, err = cc.ReadItem(ctx, pk, "a", nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"", ""}, sentTokens(st), "server token %q", tok)
	}
}

func TestSessionTokensAreKeptPerContainer(t *testing.T) {
	c, st := newScriptedClient(t, sessionScript("0:-1#5", "0:-1#9"))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	a, err := c.NewContainer("db", "a")
	require.NoError(t, err)
	b, err := c.NewContainer("db", "b")
	require.NoError(t, err)
	_, err = a.CreateItem(ctx, pk, itemJSON("x", "p", 1), nil)
	require.NoError(t, err)
	_, err = b.CreateItem(ctx, pk, itemJSON("x", "p", 1), nil)
	require.NoError(t, err)
	a2, err := c.NewContainer("db", "a") // a new handle on the same container shares its session
	require.NoError(t, err)
	_, err = a2.ReadItem(ctx, pk, "x", nil)
	require.NoError(t, err)
	_, err = b.ReadItem(ctx, pk, "x", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "", "0:-1#5", "0:-1#9"}, sentTokens(st))
}

func TestSessionTokensFromRefusalsCount(t *testing.T) {
	answers := []*http.Response{
		reply(http.StatusPreconditionFailed, `{"code":"PreconditionFailed"}`, "x-ms-session-token", "0:-1#8"),
		reply(http.StatusNotFound, `{}`, "x-ms-session-token", "0:-1#9", "x-ms-substatus", "1002"),
		reply(http.StatusOK, `{"id":"a"}`),
	}
	cc, st := newScriptedContainer(t, documentsOnly(hierarchicalContainer, func(i int, _ wireRequest) (*http.Response, error) {
		return answers[min(i, len(answers)-1)], nil
	}))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	etag := ETag(`"old"`)
	_, err := cc.ReplaceItem(ctx, pk, "a", itemJSON("a", "p", 1), &ItemOptions{IfMatch: &etag})
	require.True(t, IsPreconditionFailed(err))
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err, "404/1002 is retried")
	assert.Equal(t, []string{"", "0:-1#8", "0:-1#8"}, sentTokens(st), "a 412 names a position; a 404/1002 does not")
}

// TestReadSessionNotAvailableIsRetriedThenForgetsTheTokens: a replica that
// never reaches our position (the container was created again elsewhere)
// fails the read after bounded retries, and later reads start afresh.
func TestReadSessionNotAvailableIsRetriedThenForgetsTheTokens(t *testing.T) {
	cc, st := newScriptedContainer(t, documentsOnly(hierarchicalContainer, func(n int, r wireRequest) (*http.Response, error) {
		switch {
		case n == 0:
			return reply(http.StatusCreated, "", "x-ms-session-token", "0:-1#50"), nil
		case r.Header.Get("x-ms-session-token") == "0:-1#50":
			return reply(http.StatusNotFound, `{"code":"NotFound"}`, "x-ms-substatus", "1002"), nil
		}
		return reply(http.StatusOK, `{"id":"a"}`, "x-ms-session-token", "0:-1#2"), nil
	}))
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.Error(t, err)
	assert.False(t, IsNotFound(err), "404/1002 says nothing about the item's existence")
	assert.True(t, IsRetryable(ToProviderError("Read", err)))
	assert.Len(t, documentRequests(st), 1+fastRetryOptions().MaxAttempts, "bounded retries")

	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	sent := sentTokens(st)
	assert.Empty(t, sent[len(sent)-1], "the tokens no replica could serve are gone")
	_, err = cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	sent = sentTokens(st)
	assert.Equal(t, "0:-1#2", sent[len(sent)-1], "and new ones are learnt")
}

func TestContainerDeletionForgetsItsSessionTokens(t *testing.T) {
	acct, cc := staleContainer(t, 1)
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	for i := range 5 {
		_, err := cc.CreateItem(ctx, pk, itemJSON(fmt.Sprint(i), "p", 1), nil)
		require.NoError(t, err)
	}
	// Delete and create the container again: its LSNs start over, below
	// the tokens the client holds.
	require.NoError(t, cc.Delete(ctx))
	_, err := cc.Create(ctx, ContainerProperties{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}})
	require.NoError(t, err)
	for i := range 3 {
		_, err = cc.CreateItem(ctx, pk, itemJSON(fmt.Sprint("a", i), "p", 1), nil)
		require.NoError(t, err)
		_, err = cc.ReadItem(ctx, pk, fmt.Sprint("a", i), nil)
		require.NoError(t, err, "no token left over from the deleted container")
	}

	// Another client recreating it: ours learns from the 404/1002.
	other := acct.Client()
	otherCC, err := other.NewContainer("db", "coll")
	require.NoError(t, err)
	require.NoError(t, otherCC.Delete(ctx))
	_, err = otherCC.Create(ctx, ContainerProperties{PartitionKey: PartitionKeyDefinition{Paths: []string{"/pk"}}})
	require.NoError(t, err)
	_, err = otherCC.CreateItem(ctx, pk, itemJSON("b", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "b", nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce, "our token is ahead of the new container's range")
	require.Equal(t, [2]int{http.StatusNotFound, SubStatusReadSessionNotAvailable}, [2]int{ce.StatusCode, ce.SubStatusCode}, "%v", err)
	_, err = cc.ReadItem(ctx, pk, "b", nil)
	assert.True(t, IsNotFound(err), "tokens forgotten: a lagging read, no longer a 1002: %v", err)
}

// ---------------------------------------------------------------------------
// Tokens.

func TestSessionTokenMergeKeepsTheHighestPosition(t *testing.T) {
	merge := func(a, b string) string {
		s := newSessionStore()
		s.capture("c", a)
		s.capture("c", b)
		return s.compound("c")
	}
	cases := []struct{ a, b, want string }{
		{"0:-1#5", "0:-1#3", "0:-1#5"},
		{"0:-1#3", "0:-1#5", "0:-1#5"},
		{"0:7", "0:4", "0:7"},
		{"0:1#10#1=5#2=8", "0:1#9#1=7#2=3", "0:1#10#1=7#2=8"},
		{"0:1#10#1=5", "0:2#9#1=4#2=3", "0:2#10#1=5#2=3"},
		{"0:-1#5", "1:-1#2,2:-1#9", "0:-1#5,1:-1#2,2:-1#9"},
		{"0:-1#5,0:-1#8", "", "0:-1#8"},
		{"0:4", "0:-1#2", "0:-1#2"}, // forms that do not compare: the newer
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, merge(tc.a, tc.b), "%s + %s", tc.a, tc.b)
	}
}

func TestSessionTokenRendersWhatItParsed(t *testing.T) {
	for _, tok := range []string{"-1#12", "3#100#1=20#2=5", "42"} {
		parsed, ok := parseSessionToken(tok)
		require.True(t, ok, tok)
		assert.Equal(t, tok, parsed.String())
	}
	for _, bad := range []string{"", "x", "-1#", "#5", "1#2#3", "1#2#a=1", "1#-5", "-3"} {
		_, ok := parseSessionToken(bad)
		assert.False(t, ok, bad)
	}
}

func TestDatabaseDeletionForgetsItsContainersTokens(t *testing.T) {
	s := newSessionStore()
	for _, link := range []string{"dbs/a/colls/x", "dbs/a/colls/y", "dbs/ab/colls/x"} {
		s.capture(link, "0:-1#1")
	}
	s.forgetDatabase("a")
	var left []string
	for link := range s.tokens {
		left = append(left, link)
	}
	sort.Strings(left)
	assert.Equal(t, []string{"dbs/ab/colls/x"}, left)
}

func TestCompoundFitsMeasuresTheCompoundToken(t *testing.T) {
	s := newSessionStore()
	assert.True(t, s.compoundFits("c", 0), "no token fits anywhere")
	s.capture("c", "0:-1#1,12:-1#40")
	n := len(s.compound("c"))
	assert.True(t, s.compoundFits("c", n))
	assert.False(t, s.compoundFits("c", n-1))
}
