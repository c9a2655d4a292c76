package cdb

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// headerLog records, for every document request a transport sends, the
// partition key range it targets and the session token it carries.
type headerLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []sentQuery
}

type sentQuery struct {
	rangeID, token string
	query, plan    bool
	headerBytes    int
}

func (h *headerLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/docs") {
		n := 0
		for name, values := range r.Header {
			for _, v := range values {
				n += len(name) + len(v) + 4
			}
		}
		h.mu.Lock()
		h.sent = append(h.sent, sentQuery{
			rangeID:     r.Header.Get("x-ms-documentdb-partitionkeyrangeid"),
			token:       r.Header.Get(headerSessionToken),
			query:       r.Header.Get("x-ms-documentdb-isquery") != "",
			plan:        r.Header.Get("x-ms-cosmos-is-query-plan-request") != "",
			headerBytes: n,
		})
		h.mu.Unlock()
	}
	return h.next.RoundTrip(r)
}

// take returns what was sent since the last take.
func (h *headerLog) take() []sentQuery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.sent
	h.sent = nil
	return out
}

func newLoggedFakeContainer(t *testing.T, acct *FakeAccount) (*ContainerClient, *headerLog) {
	t.Helper()
	log := &headerLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) { o.Transport = log })
	return cc, log
}

// tokenRanges is the range ids a session token names.
func tokenRanges(token string) []string {
	if token == "" {
		return nil
	}
	var ids []string
	for _, seg := range strings.Split(token, ",") {
		id, _, _ := strings.Cut(seg, ":")
		ids = append(ids, id)
	}
	return ids
}

// TestAQueryOfOneRangeOrKeySendsThatRangesTokenOnly: with writes in many of
// a container's ranges, a query addressed to one range, or to one
// partition key, sends the token of that range alone, and reads the write
// before it (R13).
func TestAQueryOfOneRangeOrKeySendsThatRangesTokenOnly(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 16, StaleReadsWithoutSessionToken: true})
	cc, log := newLoggedFakeContainer(t, acct)
	ctx := testCtx(t)
	for i := range 40 {
		key := fmt.Sprintf("p%d", i)
		_, err := cc.CreateItem(ctx, NewPartitionKeyString(key), itemJSON("a", key, 1), nil)
		require.NoError(t, err)
	}
	require.Greater(t, len(tokenRanges(cc.client.sessions.compound(cc.sessionLink()))), 8, "the writes reached most ranges")

	pk := NewPartitionKeyString("p7")
	target, ok := cc.resolveRange(ctx, pk)
	require.True(t, ok)
	_, err := cc.ReplaceItem(ctx, pk, "a", itemJSON("a", "p7", 2), nil)
	require.NoError(t, err)
	log.take()

	res, err := cc.QueryItems(ctx, "SELECT * FROM c WHERE c.pk = 'p7'", nil, &QueryOptions{PartitionKeyRangeID: target.ID})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, 2, versionOf(t, res.Items[0]), "the range's token: the query sees the write before it")
	for _, s := range log.take() {
		assert.Equal(t, []string{target.ID}, tokenRanges(s.token), "a query of range %s sends its token only", target.ID)
	}

	res, err = cc.QueryItems(ctx, "SELECT * FROM c WHERE c.pk = 'p7'", nil, &QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, 2, versionOf(t, res.Items[0]))
	for _, s := range log.take() {
		assert.Equal(t, []string{target.ID}, tokenRanges(s.token), "a query of one partition key sends its range's token only")
	}

	_, err = cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	sent := log.take()
	require.Len(t, sent, 16)
	for _, s := range sent {
		if s.token != "" {
			assert.Equal(t, []string{s.rangeID}, tokenRanges(s.token), "each range's query sends that range's token only")
		}
	}
}

// TestAQueryAcrossPartitionsOfThousandsOfRangesStaysUnderTheHeaderLimit:
// once the client holds a token of each of 5,000 ranges, their compound
// passes the gateway's header limit (which the fake enforces). A query
// across partitions then runs range by range, each request carrying its
// range's token only, and still reads this process's own write.
func TestAQueryAcrossPartitionsOfThousandsOfRangesStaysUnderTheHeaderLimit(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 5000, StaleReadsWithoutSessionToken: true})
	cc, log := newLoggedFakeContainer(t, acct)
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	require.Greater(t, len(cc.client.sessions.compound(cc.sessionLink())), 16*1024, "the compound token alone passes the gateway's limit")
	_, err = cc.ReplaceItem(ctx, pk, "a", itemJSON("a", "p", 2), nil)
	require.NoError(t, err)
	log.take()

	res, err := cc.QueryItems(ctx, "SELECT * FROM c WHERE c.v >= 1", nil, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, 2, versionOf(t, res.Items[0]), "the query reads the write before it")
	sent := log.take()
	require.NotEmpty(t, sent)
	largest := 0
	for _, s := range sent {
		largest = max(largest, s.headerBytes)
		if s.token != "" {
			assert.Equal(t, []string{s.rangeID}, tokenRanges(s.token), "a request of range %q sends its range's token only", s.rangeID)
		}
	}
	assert.Less(t, largest, 4*1024, "every request's headers stay far under the gateway's 16 KB")
}

// TestAQueryAcrossPartitionsSendsTheTokensItStartedWith: a client that
// knows the token of one range of 2,000 sends one request across
// partitions per range; each answer teaches it that range's token, and
// with them the compound token passed the gateway's 16 KB at about the
// 1,700th request (400). A query sends the tokens of the ranges it knew of
// when it started, so its headers stay as small as they began, and it
// still reads this process's write; the next query, knowing them all,
// walks the ranges with each one's own.
func TestAQueryAcrossPartitionsSendsTheTokensItStartedWith(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 2000, StaleReadsWithoutSessionToken: true})
	cc, log := newLoggedFakeContainer(t, acct)
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	require.Len(t, tokenRanges(cc.client.sessions.compound(cc.sessionLink())), 1)
	log.take()

	res, err := cc.QueryItems(ctx, "SELECT * FROM c WHERE c.v >= 1", nil, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, 1, "the query reads the write before it")
	sent := log.take()
	require.Greater(t, len(sent), 1000, "a page per range")
	for _, s := range sent {
		require.LessOrEqual(t, len(tokenRanges(s.token)), 1, "the request sends the one token the query started with")
	}
	require.False(t, cc.client.sessions.compoundFits(cc.sessionLink(), maxCompoundSessionToken), "the walk taught the client every range's token")

	p := cc.NewQueryItemsPager("SELECT * FROM c WHERE c.v >= 1", nil, nil)
	items := 0
	for p.More() {
		page, err := p.NextPage(ctx)
		require.NoError(t, err)
		items += len(page.Items)
	}
	assert.Equal(t, 1, items)
	for _, s := range log.take() {
		if s.token != "" {
			require.Equal(t, []string{s.rangeID}, tokenRanges(s.token), "the next query walks the ranges, each with its own token")
		}
	}
}
