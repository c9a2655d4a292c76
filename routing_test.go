package cdb

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/duroxide-go/cdb/internal/epk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Partition key version 2 EPKs of the keys these tests read (all below
// "40...", as every V2 EPK):
//
//	"d" 037B...  "p" 1D1C...  "a" 3A53...
//
// Before the split: range 0 holds ["", 20...), range 3 [20..., FF).
// After it: 1 holds ["", 10...) and 2 [10..., 20...), both from 0.
const (
	rangesBeforeSplit = `{"PartitionKeyRanges":[` +
		`{"id":"0","minInclusive":"","maxExclusive":"20000000000000000000000000000000","parents":[]},` +
		`{"id":"3","minInclusive":"20000000000000000000000000000000","maxExclusive":"FF","parents":[]}]}`
	rangesAfterSplit = `{"PartitionKeyRanges":[` +
		`{"id":"1","minInclusive":"","maxExclusive":"10000000000000000000000000000000","parents":["0"]},` +
		`{"id":"2","minInclusive":"10000000000000000000000000000000","maxExclusive":"20000000000000000000000000000000","parents":["0"]},` +
		`{"id":"3","minInclusive":"20000000000000000000000000000000","maxExclusive":"FF","parents":[]}]}`
	hashContainer = `{"id":"coll","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2}}`
)

// routedGateway answers a container partitioned by /pk (version 2): its
// properties, its ranges (what ranges holds), and every document request
// with the token next names, recording what was sent.
type routedGateway struct {
	mu        sync.Mutex
	ranges    string
	container string
	metadata  int    // status of the container and range reads; 0 is 200
	next      string // the session token of the next document answer
}

func (g *routedGateway) set(f func(g *routedGateway)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *routedGateway) respond(_ int, r wireRequest) (*http.Response, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	metadata := g.metadata
	if metadata == 0 {
		metadata = http.StatusOK
	}
	switch {
	case strings.HasSuffix(r.Path, "/pkranges"):
		return reply(metadata, g.ranges), nil
	case !strings.Contains(r.Path, "/docs"):
		return reply(metadata, g.container), nil
	case r.Header.Get("x-ms-documentdb-isquery") != "":
		return reply(http.StatusOK, `{"Documents":[]}`, "x-ms-session-token", g.next), nil
	}
	return reply(http.StatusOK, `{"id":"x","pk":"p"}`, "x-ms-session-token", g.next), nil
}

func newRoutedContainer(t *testing.T) (*ContainerClient, *routedGateway, *scriptedTransport) {
	t.Helper()
	g := &routedGateway{ranges: rangesBeforeSplit, container: hashContainer}
	cc, st := newScriptedContainer(t, g.respond)
	return cc, g, st
}

func lastToken(st *scriptedTransport) string {
	sent := sentTokens(st)
	return sent[len(sent)-1]
}

func TestTestKeysLieWhereTheRoutingTestsSay(t *testing.T) {
	assert.True(t, strings.HasPrefix(epk.Hash("d", 2), "037B"))
	assert.True(t, strings.HasPrefix(epk.Hash("p", 2), "1D1C"))
	assert.True(t, strings.HasPrefix(epk.Hash("a", 2), "3A53"))
}

// write creates an item of partition key, answered with token.
func write(t *testing.T, cc *ContainerClient, g *routedGateway, key, token string) {
	t.Helper()
	g.set(func(g *routedGateway) { g.next = token })
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString(key), itemJSON("x", key, 1), nil)
	require.NoError(t, err)
}

func read(t *testing.T, cc *ContainerClient, g *routedGateway, key, answer string) {
	t.Helper()
	g.set(func(g *routedGateway) { g.next = answer })
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString(key), "x", nil)
	require.NoError(t, err)
}

func TestAPointReadSendsTheTokenOfItsKeysRangeOnly(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	ctx := testCtx(t)
	write(t, cc, g, "p", "0:-1#5")
	write(t, cc, g, "a", "3:-1#7")

	read(t, cc, g, "p", "")
	assert.Equal(t, "0:-1#5", lastToken(st), "p lies in range 0")
	read(t, cc, g, "a", "")
	assert.Equal(t, "3:-1#7", lastToken(st), "a lies in range 3")

	a := NewPartitionKeyString("a")
	_, err := cc.QueryItems(ctx, "SELECT * FROM c", nil, &QueryOptions{PartitionKey: &a})
	require.NoError(t, err)
	assert.Equal(t, "3:-1#7", lastToken(st), "a single-partition query reads one range too")
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "0:-1#5,3:-1#7", lastToken(st), "a query across partitions reads them all")
}

// TestTheFirstReadOfARangeSendsNoToken: the SDKs send nothing rather than
// the compound token when they know no position of the range read.
func TestTheFirstReadOfARangeSendsNoToken(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	write(t, cc, g, "p", "0:-1#5")
	read(t, cc, g, "a", "")
	assert.Empty(t, lastToken(st))
}

// TestAfterASplitAReadSendsItsParentsTokenThenItsOwn: the kept list predates
// the split; an answer from a range it does not hold has it read again, a
// child without a token of its own sends its parent's (under its own id, as
// the SDKs do), and the parent's token is forgotten once no child needs it.
func TestAfterASplitAReadSendsItsParentsTokenThenItsOwn(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	ctx := testCtx(t)
	write(t, cc, g, "p", "0:-1#5")
	write(t, cc, g, "a", "3:-1#7")
	read(t, cc, g, "p", "0:-1#5")
	assert.Equal(t, "0:-1#5", lastToken(st))

	g.set(func(g *routedGateway) { g.ranges = rangesAfterSplit })
	read(t, cc, g, "p", "2:-1#6") // still resolved on the old list; answered by child 2
	assert.Equal(t, "0:-1#5", lastToken(st))

	read(t, cc, g, "d", "1:-1#9")
	assert.Equal(t, "1:-1#5", lastToken(st), "child 1 has no token: its parent's, under its id")
	read(t, cc, g, "p", "")
	assert.Equal(t, "2:-1#6", lastToken(st), "child 2's own")
	read(t, cc, g, "d", "")
	assert.Equal(t, "1:-1#9", lastToken(st), "child 1's own, once it has one")

	_, err := cc.ReadPartitionKeyRanges(ctx, true)
	require.NoError(t, err)
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "1:-1#9,2:-1#6,3:-1#7", lastToken(st), "the split parent's token is forgotten: both children have their own")
}

func TestAParentsTokenStaysWhileAChildNeedsIt(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	ctx := testCtx(t)
	write(t, cc, g, "p", "0:-1#5")
	write(t, cc, g, "a", "3:-1#7")
	g.set(func(g *routedGateway) { g.ranges = rangesAfterSplit })
	_, err := cc.ReadPartitionKeyRanges(ctx, true)
	require.NoError(t, err)
	read(t, cc, g, "p", "2:-1#6")
	assert.Equal(t, "2:-1#5", lastToken(st))
	_, err = cc.ReadPartitionKeyRanges(ctx, true)
	require.NoError(t, err)
	_, err = cc.QueryItems(ctx, "SELECT * FROM c", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "0:-1#5,2:-1#6,3:-1#7", lastToken(st), "range 1 has no token of its own: 0's stays")
}

// TestRoutingFallsBackToTheCompoundToken: a container whose definition or
// ranges cannot be read, or whose keys the client does not place, still
// reads its own writes, with every range's token.
func TestRoutingFallsBackToTheCompoundToken(t *testing.T) {
	for name, edit := range map[string]func(g *routedGateway){
		"definition and ranges unreadable": func(g *routedGateway) { g.metadata = http.StatusNotFound },
		"ranges unreadable":                func(g *routedGateway) { g.ranges = `{"PartitionKeyRanges":[]}` },
		"hierarchical keys":                func(g *routedGateway) { g.container = hierarchicalContainer },
	} {
		t.Run(name, func(t *testing.T) {
			cc, g, st := newRoutedContainer(t)
			g.set(edit)
			write(t, cc, g, "p", "0:-1#5")
			write(t, cc, g, "a", "3:-1#7")
			read(t, cc, g, "p", "")
			assert.Equal(t, "0:-1#5,3:-1#7", lastToken(st))
			read(t, cc, g, "a", "")
			assert.Equal(t, "0:-1#5,3:-1#7", lastToken(st))
		})
	}
}

// TestAnUnreadableContainerIsNotAskedOnEveryRead: after a failed lookup
// reads go on with the compound token without trying again for a while.
func TestAnUnreadableContainerIsNotAskedOnEveryRead(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	g.set(func(g *routedGateway) { g.metadata = http.StatusNotFound })
	write(t, cc, g, "p", "0:-1#5")
	for range 5 {
		read(t, cc, g, "p", "")
	}
	assert.Equal(t, 1, st.count()-len(documentRequests(st)), "one failed lookup")
}

func TestTheRangesAreReadOncePerContainer(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	write(t, cc, g, "p", "0:-1#5")
	for _, key := range []string{"p", "a", "d", "p"} {
		read(t, cc, g, key, "")
	}
	assert.Equal(t, 2, st.count()-len(documentRequests(st)), "the container's definition and its ranges, once")
}

// TestPruneKeepsTokensLearntWhileTheListWasRead: a token captured after the
// mark may be of a range newer than the list, so it stays.
func TestPruneKeepsTokensLearntWhileTheListWasRead(t *testing.T) {
	s := newSessionStore()
	s.capture("c", "0:-1#5,7:-1#1")
	mark := s.mark()
	s.capture("c", "9:-1#3")
	s.prune("c", []PartitionKeyRange{{ID: "3"}}, mark)
	assert.Equal(t, "9:-1#3", s.compound("c"), "0 and 7 are gone; 9 was learnt after the list was asked for")
}

func TestPruneKeepsOnlyTheNearestParentAChildNeeds(t *testing.T) {
	s := newSessionStore()
	s.capture("c", "0:-1#1,2:-1#4,5:-1#6")
	s.prune("c", []PartitionKeyRange{{ID: "7", Parents: []string{"0", "2"}}, {ID: "8", Parents: []string{"0", "2"}}, {ID: "5"}}, s.mark())
	assert.Equal(t, "2:-1#4,5:-1#6", s.compound("c"))
	assert.Equal(t, "7:-1#4", s.forRange("c", "7", []string{"0", "2"}))
}

// TestAReadInAContainerOfThousandsOfRangesStaysUnderTheHeaderLimit: once
// the client holds the token of every range of a large container (a
// per-range query reads them all), their compound passes the gateway's
// header limit, which the fake enforces. Reads send their range's token
// only and succeed, and still read their own writes.
func TestAReadInAContainerOfThousandsOfRangesStaysUnderTheHeaderLimit(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 2000, StaleReadsWithoutSessionToken: true})
	cc := newFakeContainer(t, acct, nil)
	ctx := testCtx(t)
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(ctx, pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	compound := cc.client.sessions.compound(cc.sessionLink())
	require.Greater(t, len(compound), 16*1024, "the compound token alone passes the gateway's limit")

	_, err = cc.ReadItem(ctx, pk, "a", &ItemOptions{SessionToken: compound})
	var ce *CosmosError
	require.True(t, errors.As(err, &ce), "the fake refuses the compound token: %v", err)
	assert.Equal(t, http.StatusBadRequest, ce.StatusCode)

	_, err = cc.ReplaceItem(ctx, pk, "a", itemJSON("a", "p", 2), nil)
	require.NoError(t, err)
	got, err := cc.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, versionOf(t, got.Value), "the range's own token: the read sees the write before it")
	res, err := cc.QueryItems(ctx, "SELECT * FROM c WHERE c.pk = 'p'", nil, &QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	assert.Equal(t, 2, versionOf(t, res.Items[0]))
}

func TestConcurrentFirstReadsLookTheContainerUpOnce(t *testing.T) {
	cc, g, st := newRoutedContainer(t)
	write(t, cc, g, "p", "0:-1#5")
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "x", nil)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	assert.Equal(t, 2, st.count()-len(documentRequests(st)), "the definition and the ranges, once")
	for _, tok := range sentTokens(st)[1:] {
		assert.Equal(t, "0:-1#5", tok)
	}
}

// TestSplitsOnTheFakeLeaveNoParentTokensBehind: reads keep reading their own
// writes across a split that still lists its parents for a while, and once
// every child has a token of its own the parents' are forgotten, so the
// compound token does not grow with the container's history.
func TestSplitsOnTheFakeLeaveNoParentTokensBehind(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: 4, StaleReadsWithoutSessionToken: true})
	cc := newFakeContainer(t, acct, nil)
	ctx := testCtx(t)
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("p%d", i)
		_, err := cc.CreateItem(ctx, NewPartitionKeyString(keys[i]), itemJSON("a", keys[i], 1), nil)
		require.NoError(t, err)
	}
	_, err := cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	require.NoError(t, acct.SplitPartitionKeyRangesWith("db", "coll", FakeSplitOptions{ListParentsFor: 3}))

	for i, key := range keys {
		_, err := cc.ReplaceItem(ctx, NewPartitionKeyString(key), "a", itemJSON("a", key, 2+i%2), nil)
		require.NoError(t, err)
		got, err := cc.ReadItem(ctx, NewPartitionKeyString(key), "a", nil)
		require.NoError(t, err)
		assert.Equal(t, 2+i%2, versionOf(t, got.Value), "key %s reads its write after the split", key)
	}
	_, err = cc.QueryItemsPerRange(ctx, "SELECT VALUE COUNT(1) FROM c", nil, nil)
	require.NoError(t, err)
	_, err = cc.ReadPartitionKeyRanges(ctx, true)
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, seg := range strings.Split(cc.client.sessions.compound(cc.sessionLink()), ",") {
		id, _, _ := strings.Cut(seg, ":")
		ids[id] = true
	}
	assert.Len(t, ids, 8, "the eight children's tokens, no parent's: %v", ids)
	for _, parent := range []string{"0", "1", "2", "3"} {
		assert.False(t, ids[parent], "split parent %s forgotten", parent)
	}
}
