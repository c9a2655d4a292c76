package cdb

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TagFilterMode names a TagFilter variant (duroxide's TagFilter enum).
type TagFilterMode int

const (
	TagFilterDefaultOnly TagFilterMode = iota // untagged activities only (the default)
	TagFilterTags                             // only activities tagged with one of the tags
	TagFilterDefaultAnd                       // untagged activities and the tags
	TagFilterAny                              // every activity
	TagFilterNone                             // no activity (orchestrator-only worker)
)

// String returns the TagFilterMode as text.
func (m TagFilterMode) String() string {
	switch m {
	case TagFilterDefaultOnly:
		return "DefaultOnly"
	case TagFilterTags:
		return "Tags"
	case TagFilterDefaultAnd:
		return "DefaultAnd"
	case TagFilterAny:
		return "Any"
	case TagFilterNone:
		return "None"
	}
	return "TagFilterMode(" + strconv.Itoa(int(m)) + ")"
}

// ErrInvalidTagFilter is wrapped by the errors of TagsFilter and DefaultAndFilter.
var ErrInvalidTagFilter = errors.New("invalid tag filter")

// TagFilter decides which activity tags a worker fetches. The zero value is
// DefaultOnly; build the others with TagsFilter, DefaultAndFilter, AnyFilter
// and NoneFilter. A TagFilter is immutable and safe to share.
type TagFilter struct {
	mode TagFilterMode
	tags []string // sorted, distinct; only for Tags and DefaultAnd
}

// DefaultOnlyFilter matches only untagged activities.
func DefaultOnlyFilter() TagFilter { return TagFilter{} }

// AnyFilter matches every activity.
func AnyFilter() TagFilter { return TagFilter{mode: TagFilterAny} }

// NoneFilter matches nothing: FetchWorkItem returns no work without a storage call.
func NoneFilter() TagFilter { return TagFilter{mode: TagFilterNone} }

// TagsFilter matches activities tagged with one of tags (not untagged ones).
// It fails on an empty set, on more than MaxWorkerTags distinct tags, and on
// a tag longer than MaxTagNameBytes.
func TagsFilter(tags ...string) (TagFilter, error) {
	return newTagSetFilter(TagFilterTags, "use NoneFilter for no activities", tags)
}

// DefaultAndFilter matches untagged activities and those tagged with one of
// tags, with TagsFilter's limits.
func DefaultAndFilter(tags ...string) (TagFilter, error) {
	return newTagSetFilter(TagFilterDefaultAnd, "use DefaultOnlyFilter for untagged activities only", tags)
}

func newTagSetFilter(mode TagFilterMode, emptyHint string, tags []string) (TagFilter, error) {
	set := slices.Clone(tags)
	slices.Sort(set)
	set = slices.Compact(set) // duroxide collects into a HashSet: duplicates count once
	if len(set) == 0 {
		return TagFilter{}, fmt.Errorf("cdb: %s filter: %w: needs at least one tag; %s", mode, ErrInvalidTagFilter, emptyHint)
	}
	if len(set) > MaxWorkerTags {
		return TagFilter{}, fmt.Errorf("cdb: %s filter: %w: a worker can subscribe to at most %d tags, got %d",
			mode, ErrInvalidTagFilter, MaxWorkerTags, len(set))
	}
	for _, tag := range set {
		if len(tag) > MaxTagNameBytes {
			return TagFilter{}, fmt.Errorf("cdb: %s filter: %w: tag %.32q... is %d bytes, the limit is %d",
				mode, ErrInvalidTagFilter, tag, len(tag), MaxTagNameBytes)
		}
	}
	return TagFilter{mode: mode, tags: set}, nil
}

// Mode returns the filter's variant.
func (f TagFilter) Mode() TagFilterMode { return f.mode }

// Tags returns the filter's tags, sorted; nil unless the mode is Tags or DefaultAnd.
func (f TagFilter) Tags() []string { return slices.Clone(f.tags) }

// Matches reports whether an activity with this tag (nil = untagged) passes.
func (f TagFilter) Matches(tag *string) bool {
	switch f.mode {
	case TagFilterAny:
		return true
	case TagFilterNone:
		return false
	case TagFilterDefaultOnly:
		return tag == nil
	case TagFilterTags:
		return tag != nil && slices.Contains(f.tags, *tag)
	case TagFilterDefaultAnd:
		return tag == nil || slices.Contains(f.tags, *tag)
	}
	return false
}

// Equal reports whether two filters select the same activities.
func (f TagFilter) Equal(other TagFilter) bool {
	return f.mode == other.mode && slices.Equal(f.tags, other.tags)
}

// String returns the TagFilter as text.
func (f TagFilter) String() string {
	if f.mode == TagFilterTags || f.mode == TagFilterDefaultAnd {
		return f.mode.String() + "(" + strings.Join(f.tags, ",") + ")"
	}
	return f.mode.String()
}

// ErrInvalidSemanticVersion is wrapped by ParseSemanticVersion's errors.
var ErrInvalidSemanticVersion = errors.New("invalid semantic version")

// SemanticVersion is a Semantic Versioning 2.0.0 version, the Go stand-in
// for the Rust semver::Version duroxide pins executions to. Its JSON and
// text form is the version string, as serde encodes semver::Version.
type SemanticVersion struct {
	Major, Minor, Patch uint64
	Pre                 string // pre-release identifiers without the "-", e.g. "alpha.1"
	Build               string // build metadata without the "+"
}

// NewSemanticVersion returns major.minor.patch.
func NewSemanticVersion(major, minor, patch uint64) SemanticVersion {
	return SemanticVersion{Major: major, Minor: minor, Patch: patch}
}

// ParseSemanticVersion parses "MAJOR.MINOR.PATCH[-PRE][+BUILD]" strictly, as
// the semver crate does: no "v" prefix, no leading zeros in numbers, no
// empty identifiers.
func ParseSemanticVersion(s string) (SemanticVersion, error) {
	fail := func(problem string) (SemanticVersion, error) {
		return SemanticVersion{}, fmt.Errorf("cdb: %w %q: %s", ErrInvalidSemanticVersion, s, problem)
	}
	failWith := func(part string, cause error) (SemanticVersion, error) {
		return SemanticVersion{}, fmt.Errorf("cdb: %w %q: %s%w", ErrInvalidSemanticVersion, s, part, cause)
	}
	core, build, hasBuild := strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(core, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return fail("want MAJOR.MINOR.PATCH")
	}
	var nums [3]uint64
	for i, part := range parts {
		n, err := parseVersionNumber(part)
		if err != nil {
			return failWith("", err)
		}
		nums[i] = n
	}
	if hasPre {
		if err := checkIdentifiers(pre, true); err != nil {
			return failWith("pre-release: ", err)
		}
	}
	if hasBuild {
		if err := checkIdentifiers(build, false); err != nil {
			return failWith("build metadata: ", err)
		}
	}
	return SemanticVersion{Major: nums[0], Minor: nums[1], Patch: nums[2], Pre: pre, Build: build}, nil
}

func parseVersionNumber(s string) (uint64, error) {
	if !isDigits(s) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

// checkIdentifiers validates dot-separated identifiers of [0-9A-Za-z-];
// numeric pre-release identifiers may not have leading zeros.
func checkIdentifiers(s string, numericNoLeadingZero bool) error {
	for _, id := range strings.Split(s, ".") {
		if id == "" {
			return errors.New("empty identifier")
		}
		for _, c := range id {
			if !isIdentifierChar(c) {
				return fmt.Errorf("identifier %q has character %q", id, c)
			}
		}
		if numericNoLeadingZero && isDigits(id) && len(id) > 1 && id[0] == '0' {
			return fmt.Errorf("numeric identifier %q has a leading zero", id)
		}
	}
	return nil
}

func isIdentifierChar(c rune) bool {
	return c == '-' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns the SemanticVersion as text.
func (v SemanticVersion) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// Compare returns -1, 0 or +1. It orders by Semantic Versioning precedence
// and then, like the semver crate, by build metadata, so that Compare is 0
// only for equal versions.
func (v SemanticVersion) Compare(other SemanticVersion) int {
	for _, c := range [...]int{
		compareUint(v.Major, other.Major),
		compareUint(v.Minor, other.Minor),
		compareUint(v.Patch, other.Patch),
		comparePreRelease(v.Pre, other.Pre),
		compareBuild(v.Build, other.Build),
	} {
		if c != 0 {
			return c
		}
	}
	return 0
}

// Less reports whether v orders before other.
func (v SemanticVersion) Less(other SemanticVersion) bool { return v.Compare(other) < 0 }

// PackedVersion encodes major.minor.patch as one comparable integer,
// major*1_000_000 + minor*1_000 + patch, the form providers store for
// capability filtering (it assumes minor and patch stay below 1000).
func (v SemanticVersion) PackedVersion() uint64 {
	return v.Major*1_000_000 + v.Minor*1_000 + v.Patch
}

// MarshalText encodes the version string.
func (v SemanticVersion) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText parses a version string with ParseSemanticVersion.
func (v *SemanticVersion) UnmarshalText(text []byte) error {
	parsed, err := ParseSemanticVersion(string(text))
	if err != nil {
		return err
	}
	*v = parsed
	return nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// comparePreRelease applies semver precedence: a release outranks any
// pre-release; identifiers compare numerically when both are numbers,
// numbers rank below text, and a longer list wins a tie.
func comparePreRelease(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return 1
	case b == "":
		return -1
	}
	return compareIdentifierLists(strings.Split(a, "."), strings.Split(b, "."))
}

// compareBuild orders build metadata as the semver crate does: none first,
// then identifier by identifier like pre-release identifiers (numbers by
// value, leading zeros breaking ties).
func compareBuild(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return -1
	case b == "":
		return 1
	}
	return compareIdentifierLists(strings.Split(a, "."), strings.Split(b, "."))
}

func compareIdentifierLists(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareIdentifier(a[i], b[i]); c != 0 {
			return c
		}
	}
	return compareUint(uint64(len(a)), uint64(len(b)))
}

func compareIdentifier(a, b string) int {
	aNum, bNum := isDigits(a), isDigits(b)
	switch {
	case aNum && bNum:
		return compareNumericIdentifier(a, b)
	case aNum:
		return -1
	case bNum:
		return 1
	}
	return strings.Compare(a, b)
}

// compareNumericIdentifier compares digit strings of any length by value;
// among equal values the one with fewer leading zeros ranks first.
func compareNumericIdentifier(a, b string) int {
	ta, tb := strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if c := compareUint(uint64(len(ta)), uint64(len(tb))); c != 0 {
		return c
	}
	if c := strings.Compare(ta, tb); c != 0 {
		return c
	}
	return compareUint(uint64(len(a)), uint64(len(b)))
}

// SemverRange is an inclusive version range [Min, Max].
type SemverRange struct {
	Min, Max SemanticVersion
}

// Contains reports whether Min <= v <= Max.
func (r SemverRange) Contains(v SemanticVersion) bool {
	return r.Min.Compare(v) <= 0 && v.Compare(r.Max) <= 0
}

// DispatcherCapabilityFilter tells FetchOrchestrationItem which pinned
// duroxide versions the caller can replay. Providers use only the first
// range (duroxide's phase-1 contract); an empty list supports nothing.
type DispatcherCapabilityFilter struct {
	SupportedDuroxideVersions []SemverRange
}

// IsCompatible reports whether any range contains the pinned version.
func (f DispatcherCapabilityFilter) IsCompatible(pinned SemanticVersion) bool {
	for _, r := range f.SupportedDuroxideVersions {
		if r.Contains(pinned) {
			return true
		}
	}
	return false
}

// DefaultCapabilityFilter accepts everything pinned at or below build:
// [0.0.0, build], since replay is backward-compatible.
func DefaultCapabilityFilter(build SemanticVersion) DispatcherCapabilityFilter {
	return DispatcherCapabilityFilter{
		SupportedDuroxideVersions: []SemverRange{{Min: SemanticVersion{}, Max: build}},
	}
}
