package fakecosmos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected charges below are worked out from the documented model
// (doc.go, Request units): W(size) and R(size) from the table of RU by
// item size, 0.2 RU per index entry added or removed, 0.4 RU per patch
// operation. Every document here is under 1 KB unless it says otherwise,
// so W = 4.95 and R = 1.

func chargeOf(t *testing.T, r testResponse) string {
	t.Helper()
	require.Less(t, r.status, 300, "%s", r.body)
	return r.header.Get("x-ms-request-charge")
}

func TestAReplaceIsChargedForTheOldAndNewDocumentsAndTheChangedTerms(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "status": "new", "n": 1})

	changed := map[string]any{"id": "a", "pk": "p", "status": "done", "n": 1, "extra": true}
	assert.Equal(t, "10.5", chargeOf(t, c.do("PUT", docPath("a"), changed, pkHeader("p"))),
		"4.95 (old) + 4.95 (new) + 0.2 * 3 (status new out, status done in, extra in)")
	assert.Equal(t, "9.9", chargeOf(t, c.do("PUT", docPath("a"), changed, pkHeader("p"))),
		"the same body again: 4.95 + 4.95, no entry changes (_ts left out)")
}

func TestAnUpsertOverAnItemIsChargedAsAReplace(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	upsert := func(body map[string]any) string {
		return chargeOf(t, c.do("POST", docsPath, body, pkHeader("p").with("x-ms-documentdb-is-upsert", "True")))
	}
	assert.Equal(t, "5.75", upsert(map[string]any{"id": "a", "pk": "p", "n": 1}),
		"creates: 4.95 + 0.2 * 4 (id, pk, _ts, n)")
	assert.Equal(t, "10.3", upsert(map[string]any{"id": "a", "pk": "p", "n": 2}),
		"replaces: 4.95 + 4.95 + 0.2 * 2 (n 1 out, n 2 in)")
}

func TestAPatchAddsAChargePerOperation(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "status": "new", "attempts": 0})
	patch := map[string]any{"operations": []any{
		map[string]any{"op": "set", "path": "/status", "value": "locked"},
		map[string]any{"op": "incr", "path": "/attempts", "value": 1},
		map[string]any{"op": "set", "path": "/owner", "value": "w1"},
	}}
	assert.Equal(t, "12.1", chargeOf(t, c.do("PATCH", docPath("a"), patch, pkHeader("p"))),
		"4.95 + 4.95 + 0.2 * 5 (status and attempts out and in, owner in) + 0.4 * 3 operations")

	inBatch := []any{map[string]any{"operationType": "Patch", "id": "a", "resourceBody": map[string]any{"operations": []any{
		map[string]any{"op": "set", "path": "/status", "value": "locked"},
	}}}}
	r := c.do("POST", docsPath, inBatch, batchHeaders("p"))
	assert.Equal(t, "10.3", chargeOf(t, r), "in a batch too: 4.95 + 4.95 + 0.4 * 1, nothing changed in the index")
}

func TestADeleteIsChargedForTheSizeAndTheTermsItRemoves(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "x": 1, "y": []any{"a", "b", "c"}})
	assert.Equal(t, "6.35", chargeOf(t, c.do("DELETE", docPath("a"), nil, pkHeader("p"))),
		"4.95 + 0.2 * 7 (id, pk, _ts, x and y's three elements)")

	big := c.createDoc(map[string]any{"id": "b", "pk": "p", "data": strings.Repeat("x", 40*1024)})
	kb := float64(len(big.body)) / 1024
	require.True(t, kb > 32 && kb < 64, "stored size %.2f KB, between the table's 32 and 64 KB rows", kb)
	want := 11.23 + (22.67-11.23)*(kb-32)/(64-32) + 0.2*4 // id, pk, _ts, data
	assert.Equal(t, formatCharge(want), chargeOf(t, c.do("DELETE", docPath("b"), nil, pkHeader("p"))), "%.2f KB", kb)
}

func TestLargeDocumentsFollowTheDocumentedSizeCurve(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.createDatabase(testDB)
	c.createContainer(testDB, map[string]any{"id": testColl,
		"partitionKey":   map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2},
		"indexingPolicy": map[string]any{"indexingMode": "none", "automatic": false}})

	for _, tc := range []struct {
		name             string
		bytes            int
		lo, hi           float64 // the table's rows around the size, KB
		readLo, readHi   float64
		writeLo, writeHi float64
	}{
		{name: "100 KB", bytes: 100 * 1024, lo: 64, hi: 128, readLo: 4.76, readHi: 9.95, writeLo: 22.67, writeHi: 48.19},
		{name: "1.5 MB", bytes: 1536 * 1024, lo: 1024, hi: 2048, readLo: 145.90, readHi: 291.80, writeLo: 625.00, writeHi: 1250.00},
	} {
		id := strings.ReplaceAll(tc.name, " ", "")
		created := c.createDoc(map[string]any{"id": id, "pk": "p", "data": strings.Repeat("x", tc.bytes)})
		kb := float64(len(created.body)) / 1024
		require.True(t, kb > tc.lo && kb < tc.hi, "%s: stored size %.2f KB", tc.name, kb)
		at := (kb - tc.lo) / (tc.hi - tc.lo)
		write := tc.writeLo + (tc.writeHi-tc.writeLo)*at // nothing indexed: the size alone
		read := tc.readLo + (tc.readHi-tc.readLo)*at
		assert.Equal(t, formatCharge(write), chargeOf(t, created), "%s: create", tc.name)
		assert.Equal(t, formatCharge(read), chargeOf(t, c.do("GET", docPath(id), nil, pkHeader("p"))), "%s: read", tc.name)
	}
}

func TestAQueryIsChargedATenthOfAnRUPerKBItReturns(t *testing.T) {
	_, c := newTestServer(t, Options{})
	c.standardContainer()
	c.createDoc(map[string]any{"id": "a", "pk": "p", "data": strings.Repeat("x", 9*1024)})
	q := c.query("SELECT * FROM c", nil, pkHeader("p"))
	assert.Equal(t, "3.35", chargeOf(t, q), "2.3 + 0.05 * 1 evaluated + 0.1 * 10 started KB returned")
}

func TestChangedTermsCompareTheIndexEntriesAsMultisets(t *testing.T) {
	p := indexPolicy{rules: []pathRule{{included: true}},
		composites: [][]compositePath{{{path: []string{"type"}}, {path: []string{"seq"}}}}}
	old := map[string]any{"id": "a", "type": "msg", "seq": 1, "ids": []any{1, 2}, "_ts": 100}
	for _, tc := range []struct {
		name string
		next map[string]any
		want int
	}{
		{"nothing changed, whatever _ts says", map[string]any{"id": "a", "type": "msg", "seq": 1, "ids": []any{1, 2}, "_ts": 200}, 0},
		{"an array element added", map[string]any{"id": "a", "type": "msg", "seq": 1, "ids": []any{1, 2, 2}, "_ts": 100}, 1},
		{"a value changed: out and in, and the composite tuple too", map[string]any{"id": "a", "type": "msg", "seq": 2, "ids": []any{1, 2}, "_ts": 100}, 4},
		{"a property removed, with the composite it completed", map[string]any{"id": "a", "type": "msg", "ids": []any{1, 2}, "_ts": 100}, 2},
		{"a number becomes a string", map[string]any{"id": "a", "type": "msg", "seq": "1", "ids": []any{1, 2}, "_ts": 100}, 4},
	} {
		assert.Equal(t, tc.want, p.changedTerms(old, tc.next), tc.name)
	}
	assert.Zero(t, indexPolicy{none: true}.changedTerms(old, map[string]any{"id": "a"}), "nothing indexed, nothing changes")
}
