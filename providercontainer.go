package cdb

// The provider's container: the properties it needs, and the check of an
// existing one.

import (
	"fmt"
	"slices"
	"strings"
)

// ProviderContainerProperties is the container the provider needs: partition
// key /pk, per-item TTL enabled (for tombstones), an opt-in indexing policy
// that indexes only the properties the provider's queries filter on
// (providerFilterPaths), and the composite index the queue queries order
// by.
func ProviderContainerProperties(id string) ContainerProperties {
	policy := IndexingPolicy{
		IndexingMode:  IndexingModeConsistent,
		Automatic:     true,
		ExcludedPaths: []ExcludedPath{{Path: "/*"}},
	}
	for _, name := range providerFilterPaths() {
		policy.IncludedPaths = append(policy.IncludedPaths, IncludedPath{Path: "/" + name + "/?"})
	}
	policy.CompositeIndexes = [][]CompositeIndex{queueOrders[queueIndexByType]}
	ttl := -1
	return ContainerProperties{
		ID:                id,
		PartitionKey:      PartitionKeyDefinition{Paths: []string{partitionKeyPath}, Kind: "Hash", Version: 2},
		IndexingPolicy:    &policy,
		DefaultTimeToLive: &ttl,
	}
}

// providerFilterPaths are the top-level properties some query of the
// provider filters on with a term an index answers (equality, range,
// IS_DEFINED, IN, ARRAY_CONTAINS); id and _ts are indexed whatever the
// policy. Every document write pays for an index entry per indexed value,
// so the policy indexes these and nothing else: a property added to a
// query's WHERE clause is added here too, or the query still answers but
// evaluates the term on every document the others select (the validation
// suite fails on such a query, through the fake's UnindexedFilters). The
// blobs (item, data, entries, output, customStatus) are never indexed; the
// one query that looks into a message's item does so among one instance's
// messages.
func providerFilterPaths() []string {
	return []string{
		// the queues: candidates, locks, parking, sessions, own writes
		"type", "visibleAt", "seqVisible", "lockedUntil", "slot", "lockToken", "heldFrom", "session", "owner", "tag",
		// one instance's documents: history, executions, KV
		"pk", "exec", "kv", "first",
		// instance listings, metrics, deletion and retention
		"name", "status", "parent", "parked", "deleting", "createdAt", "updatedAt", "completedAt", "retainUntil",
	}
}

// ContainerMismatchError is NewProvider's refusal of an existing container
// that lacks what the provider needs. Problems says, one entry each, what
// differs and how to fix it.
type ContainerMismatchError struct {
	Database  string
	Container string
	Problems  []string
	pkDiffers bool
}

// Error names the container and every difference, each with its fix.
func (e *ContainerMismatchError) Error() string {
	return fmt.Sprintf("cdb: container %q in database %q cannot hold the provider's documents: %s "+
		"(the definition it needs is ProviderContainerProperties, shown as az CLI and Bicep in docs/real-account.md of github.com/duroxide-go/cdb)",
		e.Container, e.Database, strings.Join(e.Problems, "; "))
}

// Is makes a partition key difference match ErrPartitionKeyPathMismatch, as
// ContainerClient.Ensure's does.
func (e *ContainerMismatchError) Is(target error) bool {
	return target == ErrPartitionKeyPathMismatch && e.pkDiffers
}

// checkProviderContainer compares an existing container with
// ProviderContainerProperties and returns a *ContainerMismatchError listing
// what the provider cannot do without. It asks no more than that: other
// indexes, excluded paths and composite indexes are the owner's business.
func checkProviderContainer(database string, props ContainerProperties) (queueIndex queueIndex, err error) {
	e := &ContainerMismatchError{Database: database, Container: props.ID}
	want := ProviderContainerProperties(props.ID).PartitionKey.Paths
	if !slices.Equal(props.PartitionKey.Paths, want) {
		e.pkDiffers = true
		e.Problems = append(e.Problems, fmt.Sprintf("its partition key path is %s; it must be %s "+
			"(a partition key cannot change: create a new container and point Config.Container at it)",
			strings.Join(props.PartitionKey.Paths, ","), strings.Join(want, ",")))
	}
	queueIndex, problem := queueIndexOf(props.IndexingPolicy)
	if problem != "" {
		e.Problems = append(e.Problems, problem)
	}
	if p := timeToLiveProblem(props.DefaultTimeToLive); p != "" {
		e.Problems = append(e.Problems, p)
	}
	if len(e.Problems) == 0 {
		return queueIndex, nil
	}
	return queueIndex, e
}

// queueIndex is the composite index the queue queries order by.
type queueIndex int

const (
	// queueIndexByType is (type, visibleAt, seq): a queue's candidates are
	// read in index order without stepping over the other queue's items.
	queueIndexByType queueIndex = iota
	// queueIndexLegacy is (visibleAt, seq), which containers created by
	// earlier versions have: it serves the queries, at a cost that grows
	// with the other queue's visible backlog.
	queueIndexLegacy
)

// queueOrders are the ORDER BY paths each index serves.
var queueOrders = map[queueIndex][]CompositeIndex{
	queueIndexByType: {{Path: "/type", Order: CompositeIndexAscending}, {Path: "/visibleAt", Order: CompositeIndexAscending}, {Path: "/seq", Order: CompositeIndexAscending}},
	queueIndexLegacy: {{Path: "/visibleAt", Order: CompositeIndexAscending}, {Path: "/seq", Order: CompositeIndexAscending}},
}

// orderBy is the queue queries' ORDER BY clause for the index.
func (q queueIndex) orderBy() string {
	paths := queueOrders[q]
	parts := make([]string, len(paths))
	for i, p := range paths {
		parts[i] = "c." + strings.TrimPrefix(p.Path, "/") + " ASC"
	}
	return " ORDER BY " + strings.Join(parts, ", ")
}

// queueIndexOf finds the composite index the queue queries can order by,
// preferring (type, visibleAt, seq); problem says why there is none. A
// policy the service did not return is taken as its default, which has no
// composite index.
func queueIndexOf(policy *IndexingPolicy) (queueIndex, string) {
	if policy == nil {
		p := DefaultIndexingPolicy()
		policy = &p
	}
	want := describeComposite(queueOrders[queueIndexByType])
	if strings.EqualFold(policy.IndexingMode, IndexingModeNone) {
		return queueIndexByType, fmt.Sprintf("its indexing mode is %q: the queue queries need %q indexing with the composite index %s "+
			"(change the indexing policy; no new container needed)", policy.IndexingMode, IndexingModeConsistent, want)
	}
	for _, q := range []queueIndex{queueIndexByType, queueIndexLegacy} {
		for _, ci := range policy.CompositeIndexes {
			if compositeServes(ci, queueOrders[q]) {
				return q, ""
			}
		}
	}
	return queueIndexByType, fmt.Sprintf("it has no composite index %s, which the queue queries' ORDER BY c.type, c.visibleAt, c.seq needs "+
		"(add it to the indexing policy; no new container needed)", want)
}

// compositeServes reports whether a composite index serves an ORDER BY: the
// same paths in the same order, with every direction equal to the query's
// or every one inverted. An empty order is the service's default,
// ascending.
func compositeServes(ci, order []CompositeIndex) bool {
	if len(ci) != len(order) {
		return false
	}
	same, inverted := true, true
	for i, want := range order {
		if ci[i].Path != want.Path {
			return false
		}
		if compositeDescending(ci[i]) == compositeDescending(want) {
			inverted = false
		} else {
			same = false
		}
	}
	return same || inverted
}

func compositeDescending(c CompositeIndex) bool {
	return strings.EqualFold(c.Order, CompositeIndexDescending)
}

func describeComposite(ci []CompositeIndex) string {
	parts := make([]string, len(ci))
	for i, c := range ci {
		order := c.Order
		if order == "" {
			order = CompositeIndexAscending
		}
		parts[i] = c.Path + " " + order
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// timeToLiveProblem: the provider's tombstones, consumed markers and staged
// parts expire by their own ttl, which needs time to live on; everything
// else must never expire, so there must be no default.
func timeToLiveProblem(defaultTTL *int) string {
	switch {
	case defaultTTL == nil:
		return "its time to live is off, so the provider's tombstones, consumed markers and staged parts would never expire " +
			"(set defaultTtl -1: on, with no default; no new container needed)"
	case *defaultTTL != -1:
		return fmt.Sprintf("its default time to live is %d seconds, so every document without a ttl of its own, orchestration "+
			"state included, would expire (set defaultTtl -1: on, with no default; no new container needed)", *defaultTTL)
	}
	return ""
}

// unindexedFilterPaths are the included paths, of the form /name/?, that
// the provider's queries filter on and policy does not index. A container
// so indexed works: those queries evaluate the term on every document their
// other filters select, which costs more RU as the container fills. Nil for
// ProviderContainerProperties' policy and for one that indexes every path.
func unindexedFilterPaths(policy *IndexingPolicy) []string {
	if policy == nil {
		return nil
	}
	var out []string
	for _, name := range providerFilterPaths() {
		if !indexesProperty(policy, name) {
			out = append(out, "/"+name+"/?")
		}
	}
	return out
}

// indexesProperty reports whether policy's range index holds the scalar
// value of the top-level property name. As the service rules, the most
// precise path that covers it decides, an excluded one on a tie: /name/?
// before /name/*, before /*.
func indexesProperty(policy *IndexingPolicy, name string) bool {
	best, included := -1, false
	decide := func(path string, include bool) {
		p := pathPrecision(path, name)
		if p > best || p == best && !include {
			best, included = p, include
		}
	}
	for _, ip := range policy.IncludedPaths {
		decide(ip.Path, true)
	}
	for _, ep := range policy.ExcludedPaths {
		decide(ep.Path, false)
	}
	return best >= 0 && included
}

// pathPrecision ranks how exactly an indexing path covers the top-level
// property name: 2 for /name/?, 1 for /name/*, 0 for /*, -1 when it does
// not cover it.
func pathPrecision(path, name string) int {
	segments := strings.Split(strings.TrimPrefix(path, "/"), "/")
	last := segments[len(segments)-1]
	segments = segments[:len(segments)-1]
	switch {
	case len(segments) == 0 && last == "*":
		return 0
	case len(segments) != 1 || strings.Trim(segments[0], `"`) != name:
		return -1
	case last == "?":
		return 2
	case last == "*":
		return 1
	}
	return -1
}

// CheckProviderContainer is the check NewProvider makes of an existing
// container, without opening a provider: nil when the provider can run on
// props, else a *ContainerMismatchError whose Problems say what to change.
// It sends no request, so a tool may check a container it only reads.
func CheckProviderContainer(database string, props ContainerProperties) error {
	_, err := checkProviderContainer(database, props)
	return err
}

// UnindexedProviderPaths are the included paths (/name/?) the provider's
// queries filter on and policy leaves out, which NewProvider warns about: a
// container so indexed works, at more RU per query as it fills.
func UnindexedProviderPaths(policy *IndexingPolicy) []string {
	return unindexedFilterPaths(policy)
}
