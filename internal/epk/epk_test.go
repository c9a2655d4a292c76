package epk

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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
	{"none", Undefined{}, "05C1D529E345DC00", "11622DAA78F835834610ABE56EFF5CB5"},
}

func TestHashIsTheSDKs(t *testing.T) {
	for _, v := range epkVectors {
		assert.Equal(t, v.v1, Hash(v.key, 1), "V1 %s", v.name)
		assert.Equal(t, v.v2, Hash(v.key, 2), "V2 %s", v.name)
	}
}

// Any version but 2 is version 1, as the service reads a container
// created without one.
func TestHashOfAnUnknownVersionIsV1(t *testing.T) {
	assert.Equal(t, Hash("p0", 1), Hash("p0", 0))
}

func TestV1HashLeadsTheV1EPK(t *testing.T) {
	for _, v := range epkVectors {
		lead := strings.ToUpper(hex.EncodeToString(EncodeNumber(float64(V1Hash(v.key)))))
		assert.True(t, strings.HasPrefix(v.v1, lead), "%s: %s starts with %s", v.name, v.v1, lead)
	}
}
