package fakecosmos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The vectors come from @azure/cosmos 4.9.2's own hashing functions, run as
//
//	node -e 'const h = ".tools/azure-cosmos/node_modules/@azure/cosmos/dist/commonjs/utils/hashing/";
//	  const v1 = require(h + "v1.js").hashV1PartitionKey, v2 = require(h + "v2.js").hashV2PartitionKey;
//	  for (const k of ["", "a", 42, true, null, {} /* ... the keys below */])
//	    console.log(JSON.stringify(k), v1([k]), v2([k]))'
//
// ({} is the SDK's "none" literal; the long V1 expectations are that output
// written with strings.Repeat).
var epkVectors = []struct {
	name   string
	key    any
	v1, v2 string
}{
	{"empty string", "", "05C1CF33970FF80800", "32E9366E637A71B4E710384B2F4970A0"},
	{"one char", "a", "05C1D78593652C086200", "3A5381E1114EB8D3FCC90795045B49B7"},
	{"bulk", "bulk", "05C1BD5F3337E00863766D6C00", "071F2AE08F8E37C11E9AB302EBE1A52C"},
	{"bulk2", "bulk2", "05C1B1279B47700863766D6C3300", "3154D50177E7CB0E72D8F8D8EBB219FA"},
	{"p0", "p0", "05C1CD3FDB575008713100", "03A4DE7195849FD7388755761E4E5CC0"},
	{"p1", "p1", "05C1CFEDCF076008713200", "062B23DEC15212F01B9A85F4E93A940C"},
	{"latin accents", "héllo wörld", "05C1EF7159DB360869C4AA6D6D702178C4B7736D6500", "3ED662DB76453F5B89C3DE61C1B8A954"},
	{"cjk", "日本語", "05C1E31DE9C91E08E798A6E79DADE9AB9F00", "3F0624929BDE45571F050DCA6A1CB775"},
	{"astral", "😀", "05C1814D5F9C08F1A0998100", "28D7FCB721E75FBE0DAC3D71DAB82766"},
	{"astral inside", "emoji😀tail", "05C1D977EDC17408666E706B6AF1A0998175626A6D00", "21BF6C73D192022F0B65336BFA78F14D"},
	{
		"V1 keeps 100 chars", strings.Repeat("x", 99) + "é" + strings.Repeat("yz", 20),
		"05C1E18D1B81BA08" + strings.Repeat("79", 99) + "C4AA00", "2274C3A27653850BF3CDEF964CDC8907",
	},
	{"100 chars", strings.Repeat("z", 100), "05C1B577E3BD6008" + strings.Repeat("7B", 100) + "00", "22888B8623CB95621D788374408D7600"},
	{"101 chars: V1 as 100", strings.Repeat("z", 101), "05C1B577E3BD6008" + strings.Repeat("7B", 100) + "00", "1333C402845366C885201DF59F588247"},
	{"V1 counts UTF-16 units", strings.Repeat("😀", 60), "05C1DDEBD72DF008" + strings.Repeat("F1A09981", 50) + "00", "260FBD44EF1B0EDBDFC677191331C06E"},
	{
		"V1 cut inside a surrogate pair", "a" + strings.Repeat("😀", 60),
		"05C1DF7F53E53C0862" + strings.Repeat("F1A09981", 49) + "F0C0BE00", "2C20EBF1864341C1961A63F34D96BF24",
	},
	{"zero", 0.0, "05C1BF6DA115600580", "155B95BEDAC4B1E9EC1CDC9BB0DDDE58"},
	{"one", 1.0, "05C1ED172B6B2605BFF0", "20CD98B339BA78A5D0CF6953B87070B0"},
	{"minus one", -1.0, "05C1D1A5BDDF9C054010", "19938E7A936C1C5B9E3AE842BBC16839"},
	{"two", 2.0, "05C1D93569113805C0", "11BEC098BB8A08943F0A144281ACC26C"},
	{"three", 3.0, "05C1E17B81395E05C008", "192FBBAA0435B36FED85610B205D4DC0"},
	{"42", 42.0, "05C1E75FCB273A05C04580", "08E6D561F6FD951DCC25E7E4EA2884B5"},
	{"fraction", 1.5, "05C1E9694167A805BFF8", "35C5DDEB6C795D16A9963C73C54E97BC"},
	{"negative fraction", -2.25, "05C1E9F9A7D7A2053FFE", "150CCB33B83B8BC44A15C6137E58AD08"},
	{"large", 1e21, "05C1E3013BEB6E05C44B8DB99B6F17BDA0", "00F95F627D6884BCDB7D661839BEB420"},
	{"large integer", 123456789012.0, "05C1C55BF5910805C23D5FA723A1A0", "2953C7CD38F0558CAFE671D230C5F1F5"},
	{"inexact", 0.1, "05C1D92733D70405BFB9CD673399CD6734", "21DEBA97B3AF01087F4E1F889B0A7739"},
	{"true", true, "05C1D7C5A903D803", "0E711127C5B5A8E4726AC6DD306A3E59"},
	{"false", false, "05C1DB857D857C02", "2FE1BE91E90A3439635E0E9E37361EF2"},
	{"null", nil, "05C1ED45D7475601", "378867E4430E67857ACE5C908374FE16"},
	{"none", pkNone{}, "05C1D529E345DC00", "11622DAA78F835834610ABE56EFF5CB5"},
}

func TestEffectivePartitionKeyIsTheSDKs(t *testing.T) {
	for _, v := range epkVectors {
		pk := pkValue{value: v.key}
		assert.Equal(t, v.v1, effectivePartitionKey(pk, 1), "V1 %s", v.name)
		assert.Equal(t, v.v2, effectivePartitionKey(pk, 2), "V2 %s", v.name)
	}
}

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
		for _, v := range epkVectors {
			pk := pkValue{value: v.key}
			pos, epk := def.epkPosition(pk), effectivePartitionKey(pk, version)
			for _, b := range bounds {
				assert.Equal(t, pos >= b, epk >= def.formatBound(b), "V%d %s against %s", version, v.name, def.formatBound(b))
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
	keys := []any{0.0, 1.0, -1.0, 2.5, 1e21, true, false, nil, pkNone{}, "", "日本語", strings.Repeat("z", 101)}
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
		if _, none := k.(pkNone); !none {
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
	epk := effectivePartitionKey(pkValue{value: key}, version)
	for _, r := range ranges {
		if epk >= r["minInclusive"].(string) && epk < r["maxExclusive"].(string) {
			return r["id"].(string)
		}
	}
	t.Fatalf("no range holds EPK %s", epk)
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
					if _, none := k.(pkNone); none {
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
