package cdb

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustTags(t *testing.T, tags ...string) TagFilter {
	t.Helper()
	f, err := TagsFilter(tags...)
	require.NoError(t, err)
	return f
}

func mustDefaultAnd(t *testing.T, tags ...string) TagFilter {
	t.Helper()
	f, err := DefaultAndFilter(tags...)
	require.NoError(t, err)
	return f
}

func TestTagFilterZeroValueIsDefaultOnly(t *testing.T) {
	var f TagFilter
	assert.Equal(t, TagFilterDefaultOnly, f.Mode())
	assert.True(t, f.Equal(DefaultOnlyFilter()))
	assert.True(t, f.Matches(nil))
	assert.False(t, f.Matches(ptr("gpu")))
}

// The cases mirror duroxide's TagFilter::matches unit tests.
func TestTagFilterMatches(t *testing.T) {
	cases := []struct {
		name   string
		filter TagFilter
		tag    *string
		want   bool
	}{
		{"DefaultOnly accepts untagged", DefaultOnlyFilter(), nil, true},
		{"DefaultOnly rejects tagged", DefaultOnlyFilter(), ptr("gpu"), false},
		{"Tags accepts a member", mustTags(t, "gpu"), ptr("gpu"), true},
		{"Tags rejects a non-member", mustTags(t, "gpu"), ptr("cpu"), false},
		{"Tags rejects untagged", mustTags(t, "gpu"), nil, false},
		{"DefaultAnd accepts untagged", mustDefaultAnd(t, "gpu"), nil, true},
		{"DefaultAnd accepts a member", mustDefaultAnd(t, "gpu"), ptr("gpu"), true},
		{"DefaultAnd rejects a non-member", mustDefaultAnd(t, "gpu"), ptr("cpu"), false},
		{"Any accepts untagged", AnyFilter(), nil, true},
		{"Any accepts anything", AnyFilter(), ptr("anything"), true},
		{"None rejects untagged", NoneFilter(), nil, false},
		{"None rejects tagged", NoneFilter(), ptr("x"), false},
		{"tags compare exactly", mustTags(t, "gpu"), ptr("GPU"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.filter.Matches(tc.tag))
		})
	}
}

func TestTagFilterConstructorsRejectBadTagSets(t *testing.T) {
	long := strings.Repeat("t", MaxTagNameBytes+1)
	cases := []struct {
		name string
		tags []string
		want string
	}{
		{"empty", nil, "needs at least one tag"},
		{"six tags", []string{"a", "b", "c", "d", "e", "f"}, "at most 5 tags, got 6"},
		{"tag over 256 bytes", []string{"ok", long}, "is 257 bytes, the limit is 256"},
	}
	for _, tc := range cases {
		for name, build := range map[string]func(...string) (TagFilter, error){
			"TagsFilter": TagsFilter, "DefaultAndFilter": DefaultAndFilter,
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				_, err := build(tc.tags...)
				require.ErrorIs(t, err, ErrInvalidTagFilter)
				assert.Contains(t, err.Error(), tc.want)
			})
		}
	}
}

func TestTagFilterCountsDistinctTagsLikeAHashSet(t *testing.T) {
	f, err := TagsFilter("e", "a", "b", "c", "d", "a", "e")
	require.NoError(t, err, "seven names but five distinct tags")
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, f.Tags())
}

func TestTagFilterAcceptsATagOfExactlyTheLimit(t *testing.T) {
	_, err := TagsFilter(strings.Repeat("t", MaxTagNameBytes))
	assert.NoError(t, err)
}

func TestTagFilterTagsReturnsACopy(t *testing.T) {
	f := mustTags(t, "gpu")
	f.Tags()[0] = "cpu"
	assert.True(t, f.Matches(ptr("gpu")))
}

func TestTagFilterModeAndString(t *testing.T) {
	assert.Equal(t, TagFilterTags, mustTags(t, "b", "a").Mode())
	assert.Equal(t, "Tags(a,b)", mustTags(t, "b", "a").String())
	assert.Equal(t, "DefaultAnd(gpu)", mustDefaultAnd(t, "gpu").String())
	assert.Equal(t, "Any", AnyFilter().String())
	assert.Equal(t, "None", NoneFilter().String())
	assert.Equal(t, "DefaultOnly", TagFilter{}.String())
	assert.Nil(t, AnyFilter().Tags())
}

func TestTagFilterEqual(t *testing.T) {
	assert.True(t, mustTags(t, "a", "b").Equal(mustTags(t, "b", "a")))
	assert.False(t, mustTags(t, "a").Equal(mustDefaultAnd(t, "a")))
	assert.False(t, AnyFilter().Equal(NoneFilter()))
}

func mustVersion(t *testing.T, s string) SemanticVersion {
	t.Helper()
	v, err := ParseSemanticVersion(s)
	require.NoError(t, err)
	return v
}

func TestParseSemanticVersionAcceptsValidVersions(t *testing.T) {
	cases := map[string]SemanticVersion{
		"0.1.29":                       {Major: 0, Minor: 1, Patch: 29},
		"1.2.3-alpha.1":                {Major: 1, Minor: 2, Patch: 3, Pre: "alpha.1"},
		"1.2.3+build.5":                {Major: 1, Minor: 2, Patch: 3, Build: "build.5"},
		"1.0.0-rc-1.x-y+exp.sha.5114f": {Major: 1, Pre: "rc-1.x-y", Build: "exp.sha.5114f"},
		"1.0.0+001":                    {Major: 1, Build: "001"},
		"18446744073709551615.0.0":     {Major: 18446744073709551615},
	}
	for text, want := range cases {
		t.Run(text, func(t *testing.T) {
			got := mustVersion(t, text)
			assert.Equal(t, want, got)
			assert.Equal(t, text, got.String(), "String round-trips")
		})
	}
}

func TestParseSemanticVersionRejectsInvalidVersions(t *testing.T) {
	for _, text := range []string{
		"", "1", "1.2", "1.2.3.4", "v1.2.3", " 1.2.3", "1.2.3 ", "01.2.3", "1.02.3", "1.2.03",
		"1.2.3-", "1.2.3+", "1.2.3-a..b", "1.2.3-01", "1.2.3-a_b", "1.2.3+a+b", "-1.2.3", "1.2.x",
		"18446744073709551616.0.0",
	} {
		t.Run(text, func(t *testing.T) {
			_, err := ParseSemanticVersion(text)
			require.ErrorIs(t, err, ErrInvalidSemanticVersion)
			assert.Contains(t, err.Error(), `"`+text+`"`)
		})
	}
}

// The ordering is the example chain of the Semantic Versioning 2.0.0 spec,
// extended with build metadata ordered last, as the semver crate does.
func TestSemanticVersionPrecedence(t *testing.T) {
	ordered := []string{
		"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
		"1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.0+1", "1.0.0+01", "1.0.0+build", "1.0.0+build.2", "1.0.0+build.11",
		"1.0.1", "1.1.0", "1.10.0", "2.0.0",
	}
	for i := 0; i+1 < len(ordered); i++ {
		a, b := mustVersion(t, ordered[i]), mustVersion(t, ordered[i+1])
		assert.Equal(t, -1, a.Compare(b), "%s < %s", a, b)
		assert.Equal(t, 1, b.Compare(a), "%s > %s", b, a)
		assert.True(t, a.Less(b))
	}
	assert.Equal(t, 0, mustVersion(t, "1.0.0-rc.1+b").Compare(mustVersion(t, "1.0.0-rc.1+b")))
}

func TestSemanticVersionEncodesAsItsString(t *testing.T) {
	v := mustVersion(t, "0.1.29-beta.1")
	encoded, err := json.Marshal(v)
	require.NoError(t, err)
	assert.Equal(t, `"0.1.29-beta.1"`, string(encoded))

	var decoded SemanticVersion
	require.NoError(t, json.Unmarshal(encoded, &decoded))
	assert.Equal(t, v, decoded)
	assert.ErrorIs(t, json.Unmarshal([]byte(`"1.2"`), &decoded), ErrInvalidSemanticVersion)
}

func TestPackedVersion(t *testing.T) {
	assert.Equal(t, uint64(1_029), NewSemanticVersion(0, 1, 29).PackedVersion())
	assert.Equal(t, uint64(2_003_004), NewSemanticVersion(2, 3, 4).PackedVersion())
	assert.Equal(t, uint64(0), SemanticVersion{}.PackedVersion())
}

func TestSemverRangeIsInclusiveAtBothEnds(t *testing.T) {
	r := SemverRange{Min: mustVersion(t, "0.1.0"), Max: mustVersion(t, "0.1.29")}
	assert.True(t, r.Contains(mustVersion(t, "0.1.0")))
	assert.True(t, r.Contains(mustVersion(t, "0.1.29")))
	assert.True(t, r.Contains(mustVersion(t, "0.1.15")))
	assert.False(t, r.Contains(mustVersion(t, "0.1.30")))
	assert.False(t, r.Contains(mustVersion(t, "0.0.9")))
	assert.False(t, r.Contains(mustVersion(t, "0.1.0-rc.1")), "a pre-release of Min orders below it")
}

func TestDispatcherCapabilityFilterMatchesAnyRange(t *testing.T) {
	f := DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{
		{Min: mustVersion(t, "0.1.0"), Max: mustVersion(t, "0.1.5")},
		{Min: mustVersion(t, "0.2.0"), Max: mustVersion(t, "0.2.9")},
	}}
	assert.True(t, f.IsCompatible(mustVersion(t, "0.1.3")))
	assert.True(t, f.IsCompatible(mustVersion(t, "0.2.9")))
	assert.False(t, f.IsCompatible(mustVersion(t, "0.1.6")))
	assert.False(t, DispatcherCapabilityFilter{}.IsCompatible(mustVersion(t, "0.0.0")), "no ranges supports nothing")
}

func TestDefaultCapabilityFilterCoversZeroThroughTheBuild(t *testing.T) {
	build := mustVersion(t, "0.1.29")
	f := DefaultCapabilityFilter(build)
	require.Len(t, f.SupportedDuroxideVersions, 1)
	assert.Equal(t, SemverRange{Min: NewSemanticVersion(0, 0, 0), Max: build}, f.SupportedDuroxideVersions[0])
	assert.True(t, f.IsCompatible(NewSemanticVersion(0, 0, 0)))
	assert.True(t, f.IsCompatible(build))
	assert.False(t, f.IsCompatible(mustVersion(t, "0.1.30")))
}
