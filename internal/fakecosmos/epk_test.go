package fakecosmos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/duroxide-go/cdb/internal/epk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The position the fake ranges by must sort against every bound it writes
// as the EPK string does, which is how the SDKs pick a key's range.
func TestEPKPositionsSortAsTheEPKsAgainstBounds(t *testing.T) {
	for _, version := range []int{1, 2} {
		def := partitionKeyDef{Version: version}
		end := def.epkSpaceEnd()
		var bounds []uint64
		for i := 1; i < 64; i++ {
			bounds = append(bounds, splitPoint(end, i, 64))
		}
		for _, key := range routingKeys() {
			pk := pkValue{value: key}
			pos, hash := def.epkPosition(pk), epk.Hash(key, version)
			for _, b := range bounds {
				assert.Equal(t, pos >= b, hash >= def.formatBound(b), "V%d %v against %s", version, key, def.formatBound(b))
			}
		}
	}
}

func TestRangeBoundsAreTheServicesForm(t *testing.T) {
	v1, v2 := partitionKeyDef{Version: 1}, partitionKeyDef{Version: 2}
	assert.Equal(t, "", v1.formatBound(0))
	assert.Equal(t, "FF", v1.formatBound(v1.epkSpaceEnd()))
	assert.Equal(t, "FF", v2.formatBound(v2.epkSpaceEnd()))
	// A V1 bound is the number encoding of a hash: 2^31 is "05C1E0".
	assert.Equal(t, "05C1E0", v1.formatBound(1<<31))
	assert.Equal(t, "20000000000000000000000000000000", v2.formatBound(1<<61))
	assert.Equal(t, fmt.Sprintf("%016X%016X", uint64(1)<<60, 0), v2.formatBound(1<<60))
}

// routingKeys are partition key values of every kind, enough of them to
// land in every range of a four-range container.
func routingKeys() []any {
	keys := []any{0.0, 1.0, -1.0, 2.5, 1e21, true, false, nil, epk.Undefined{}, "", "日本語", strings.Repeat("z", 101)}
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("key-%02d", i))
	}
	return keys
}

// routedContainer creates db/coll partitioned on /pk in the given
// partition key version (1 says nothing: the service's default) and one
// document per key, "d<i>" for keys[i] (no pk property for "none").
func routedContainer(t *testing.T, ranges, version int) (*Server, *testClient, []any) {
	t.Helper()
	srv, c := newTestServer(t, Options{PartitionKeyRanges: ranges})
	c.createDatabase(testDB)
	pkDef := map[string]any{"paths": []string{"/pk"}, "kind": "Hash"}
	if version == 2 {
		pkDef["version"] = 2
	}
	c.createContainer(testDB, map[string]any{"id": testColl, "partitionKey": pkDef})
	keys := routingKeys()
	for i, k := range keys {
		doc := map[string]any{"id": fmt.Sprintf("d%02d", i)}
		if _, none := k.(epk.Undefined); !none {
			doc["pk"] = k
		}
		r := c.do("POST", docsPath, doc, pkHeader(k))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	return srv, c, keys
}

func (c *testClient) partitionKeyRanges() []map[string]any {
	c.t.Helper()
	r := c.do("GET", collPath+"/pkranges", nil, nil)
	require.Equal(c.t, http.StatusOK, r.status, "%s", r.body)
	return toMaps(r.object(c.t)["PartitionKeyRanges"].([]any))
}

// sdkRange picks a key's range as the SDKs do (bulk, for one): the range
// whose [minInclusive, maxExclusive) holds the key's EPK, as strings.
func sdkRange(t *testing.T, ranges []map[string]any, key any, version int) string {
	t.Helper()
	hash := epk.Hash(key, version)
	for _, r := range ranges {
		if hash >= r["minInclusive"].(string) && hash < r["maxExclusive"].(string) {
			return r["id"].(string)
		}
	}
	t.Fatalf("no range holds EPK %s", hash)
	return ""
}

// sdkPlacement is the ids of the documents the SDK expects in each range.
func sdkPlacement(t *testing.T, ranges []map[string]any, keys []any, version int) map[string][]string {
	t.Helper()
	want := map[string][]string{}
	for _, r := range ranges {
		want[r["id"].(string)] = nil
	}
	for i, k := range keys {
		id := sdkRange(t, ranges, k, version)
		want[id] = append(want[id], fmt.Sprintf("d%02d", i))
	}
	return want
}

// requireTiling checks the ranges cover "" to "FF" without gaps or overlaps.
func requireTiling(t *testing.T, ranges []map[string]any) {
	t.Helper()
	prev := ""
	for _, r := range ranges {
		require.Equal(t, prev, r["minInclusive"], "range %s starts where the previous ended", r["id"])
		require.Less(t, r["minInclusive"].(string), r["maxExclusive"].(string))
		prev = r["maxExclusive"].(string)
	}
	require.Equal(t, "FF", prev)
}

func TestKeysSpreadOverFourInitialRangesWhereTheSDKLooksForThem(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("V%d", version), func(t *testing.T) {
			_, c, keys := routedContainer(t, 4, version)
			ranges := c.partitionKeyRanges()
			require.Len(t, ranges, 4)
			requireTiling(t, ranges)
			want := sdkPlacement(t, ranges, keys, version)
			for id, docs := range want {
				assert.NotEmpty(t, docs, "range %s holds keys: an even split spreads the hash", id)
				_, got := c.queryAll("SELECT * FROM c", hdr{"x-ms-documentdb-partitionkeyrangeid": id})
				assert.ElementsMatch(t, docs, ids(got), "range %s", id)
			}
		})
	}
}

func TestSplitKeepsEveryDocumentWhereTheSDKLooksForIt(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("V%d", version), func(t *testing.T) {
			srv, c, keys := routedContainer(t, 4, version)
			require.NoError(t, srv.SplitPartitionKeyRanges(testDB, testColl))
			ranges := c.partitionKeyRanges()
			require.Len(t, ranges, 8)
			requireTiling(t, ranges)
			for i, k := range keys {
				r := c.do("GET", docPath(fmt.Sprintf("d%02d", i)), nil, pkHeader(k))
				assert.Equal(t, http.StatusOK, r.status, "point read of key %v", k)
			}
			for id, docs := range sdkPlacement(t, ranges, keys, version) {
				rangeID := hdr{"x-ms-documentdb-partitionkeyrangeid": id}
				_, got := c.queryAll("SELECT * FROM c", rangeID)
				assert.ElementsMatch(t, docs, ids(got), "query of range %s", id)
				feed := c.changes(rangeID, "")
				require.Equal(t, http.StatusOK, feed.status, "%s", feed.body)
				assert.ElementsMatch(t, docs, docIDs(t, feed), "change feed of range %s", id)
			}
		})
	}
}

func TestBulkRoutedByTheSDKsRangeChoiceSucceeds(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("V%d", version), func(t *testing.T) {
			srv, c, keys := routedContainer(t, 4, version)
			sendBulks := func(round string) {
				byRange := map[string][]any{}
				for i, k := range keys {
					id := sdkRange(t, c.partitionKeyRanges(), k, version)
					body := map[string]any{"id": fmt.Sprintf("%s-%02d", round, i), "pk": k}
					if _, none := k.(epk.Undefined); none {
						delete(body, "pk")
					}
					pk, err := json.Marshal([]any{k})
					require.NoError(t, err)
					byRange[id] = append(byRange[id], map[string]any{"operationType": "Create", "partitionKey": string(pk), "resourceBody": body})
				}
				for id, ops := range byRange {
					r := c.do("POST", docsPath, ops, bulkHeaders(id, true))
					require.Equal(t, http.StatusOK, r.status, "range %s: %s", id, r.body)
					for _, s := range statuses(t, r) {
						assert.Equal(t, http.StatusCreated, s, "range %s", id)
					}
				}
			}
			sendBulks("before")
			require.NoError(t, srv.SplitPartitionKeyRanges(testDB, testColl))
			sendBulks("after")
			assert.Equal(t, 3*len(keys), srv.Documents(testDB, testColl))
		})
	}
}
