package cdb

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb/internal/epk"
)

// Routing a partition key to its range. A read sends the session token of
// the range it reads only, as the official SDKs do: the token of every
// range grows with the container (hundreds of ranges make a header the
// gateway refuses with 400). So the client keeps, per container, its
// partition key definition and its live ranges, and places a key by its
// effective partition key (internal/epk) in the range whose
// [minInclusive, maxExclusive) holds it.

// unresolvableFor is how long a container whose definition or ranges could
// not be read sends the compound token without trying again: a read
// should not pay a failing lookup every time.
const unresolvableFor = time.Minute

// routingCache holds what the client knows of each container's layout, by
// container link.
type routingCache struct {
	mu           sync.Mutex
	lookups      map[string]chan struct{} // one lookup per container at a time
	definitions  map[string]PartitionKeyDefinition
	ranges       map[string][]PartitionKeyRange // live ranges, by lower bound
	unresolvable map[string]time.Time           // until when lookups are not tried
}

func newRoutingCache() *routingCache {
	return &routingCache{
		lookups:      map[string]chan struct{}{},
		definitions:  map[string]PartitionKeyDefinition{},
		ranges:       map[string][]PartitionKeyRange{},
		unresolvable: map[string]time.Time{},
	}
}

func (rc *routingCache) get(link string) ([]PartitionKeyRange, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r, ok := rc.ranges[link]
	return slices.Clone(r), ok
}

func (rc *routingCache) put(link string, r []PartitionKeyRange) {
	sorted := slices.Clone(r)
	slices.SortFunc(sorted, func(a, b PartitionKeyRange) int {
		return strings.Compare(strings.ToUpper(a.MinInclusive), strings.ToUpper(b.MinInclusive))
	})
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ranges[link] = sorted
	delete(rc.unresolvable, link)
}

// rangeByID is a live range; false when the list does not hold it.
func (rc *routingCache) rangeByID(link, id string) (PartitionKeyRange, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, r := range rc.ranges[link] {
		if r.ID == id {
			return r, true
		}
	}
	return PartitionKeyRange{}, false
}

// rangeFor is the live range holding an effective partition key; false
// when no list is kept or none holds it.
func (rc *routingCache) rangeFor(link, hash string) (PartitionKeyRange, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ranges := rc.ranges[link]
	// The first range that ends after hash holds it, if it starts at or before it.
	i, _ := slices.BinarySearchFunc(ranges, hash, func(r PartitionKeyRange, h string) int {
		if lessBound(h, r.MaxExclusive) {
			return 1
		}
		return -1
	})
	if i == len(ranges) || lessBound(hash, ranges[i].MinInclusive) {
		return PartitionKeyRange{}, false
	}
	return ranges[i], true
}

// listsAll reports whether the kept list holds every range id; true when
// no list is kept (nothing to correct).
func (rc *routingCache) listsAll(link string, ids []string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ranges, ok := rc.ranges[link]
	if !ok {
		return true
	}
	for _, id := range ids {
		if !slices.ContainsFunc(ranges, func(r PartitionKeyRange) bool { return r.ID == id }) {
			return false
		}
	}
	return true
}

// invalidate drops a container's range list: the next lookup reads it again.
func (rc *routingCache) invalidate(link string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.ranges, link)
}

func (rc *routingCache) definition(link string) (PartitionKeyDefinition, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	d, ok := rc.definitions[link]
	return d, ok
}

func (rc *routingCache) putDefinition(link string, d PartitionKeyDefinition) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.definitions[link] = d
}

// forget drops everything kept of a container: it was deleted or created.
func (rc *routingCache) forget(link string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.definitions, link)
	delete(rc.ranges, link)
	delete(rc.unresolvable, link)
}

// forgetDatabase drops what is kept of every container of a database.
func (rc *routingCache) forgetDatabase(database string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	prefix := databaseRef(database).link + "/"
	deletePrefixed(rc.definitions, prefix)
	deletePrefixed(rc.ranges, prefix)
	deletePrefixed(rc.unresolvable, prefix)
}

func deletePrefixed[V any](m map[string]V, prefix string) {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			delete(m, k)
		}
	}
}

// lookup takes the container's lookup turn, so that the reads of many
// goroutines that find nothing kept read the definition and ranges once;
// release gives it back. False when ctx ended first.
func (rc *routingCache) lookup(ctx context.Context, link string) (release func(), ok bool) {
	rc.mu.Lock()
	turn, found := rc.lookups[link]
	if !found {
		turn = make(chan struct{}, 1)
		rc.lookups[link] = turn
	}
	rc.mu.Unlock()
	select {
	case turn <- struct{}{}:
		return func() { <-turn }, true
	case <-ctx.Done():
		return nil, false
	}
}

func (rc *routingCache) markUnresolvable(link string, until time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.unresolvable[link] = until
}

func (rc *routingCache) resolvable(link string, now time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return !now.Before(rc.unresolvable[link])
}

// hashRoutable reports the definitions the client places keys for: one
// path, Hash. Hierarchical keys (MultiHash) hash otherwise, so their reads
// send the compound token.
func hashRoutable(d PartitionKeyDefinition) bool {
	return len(d.Paths) == 1 && (d.Kind == "" || d.Kind == PartitionKeyKindHash)
}

// pointSession is how a read of partition pk takes part in the session:
// with the token of pk's range only (or of its nearest parent, after a
// split), or, when the range cannot be resolved, the compound token. A
// caller's own token, or no token kept, needs no resolving.
func (cc *ContainerClient) pointSession(ctx context.Context, pk PartitionKey, h http.Header) sessionUse {
	s := cc.readSession()
	if h.Get(headerSessionToken) != "" || !cc.client.sessions.holds(s.container) {
		return s
	}
	if r, ok := cc.resolveRange(ctx, pk); ok {
		s.rangeID, s.parents = r.ID, r.Parents
	}
	return s
}

// resolveRange is the live range holding pk's documents, reading the
// container's definition and ranges when the client keeps neither, and the
// ranges again when the kept list holds no range for pk.
func (cc *ContainerClient) resolveRange(ctx context.Context, pk PartitionKey) (PartitionKeyRange, bool) {
	link := cc.sessionLink()
	rc := cc.client.routing
	if d, ok := rc.definition(link); ok {
		if !hashRoutable(d) {
			return PartitionKeyRange{}, false
		}
		if r, ok := rc.rangeFor(link, epk.Hash(pk.epkValue(), d.Version)); ok {
			return r, true // the common case: nothing to read
		}
	}
	release, ok := rc.lookup(ctx, link)
	if !ok {
		return PartitionKeyRange{}, false
	}
	defer release()
	if !rc.resolvable(link, time.Now()) {
		return PartitionKeyRange{}, false
	}
	def, err := cc.partitionKeyDefinition(ctx)
	if err != nil {
		cc.lookupFailed(ctx)
		return PartitionKeyRange{}, false
	}
	if !hashRoutable(def) {
		return PartitionKeyRange{}, false
	}
	hash := epk.Hash(pk.epkValue(), def.Version)
	if r, ok := rc.rangeFor(link, hash); ok {
		return r, true // another goroutine read the ranges while this one waited
	}
	if _, err := cc.ReadPartitionKeyRanges(ctx, true); err != nil {
		cc.lookupFailed(ctx)
		return PartitionKeyRange{}, false
	}
	return rc.rangeFor(link, hash)
}

// lookupFailed holds off the container's lookups for a while, unless the
// caller gave up (its next read may well succeed).
func (cc *ContainerClient) lookupFailed(ctx context.Context) {
	if ctx.Err() == nil {
		cc.client.routing.markUnresolvable(cc.sessionLink(), time.Now().Add(unresolvableFor))
	}
}

// partitionKeyDefinition is the container's, read once per client (any
// Read, Create or Ensure of the container also keeps it).
func (cc *ContainerClient) partitionKeyDefinition(ctx context.Context) (PartitionKeyDefinition, error) {
	if d, ok := cc.client.routing.definition(cc.sessionLink()); ok {
		return d, nil
	}
	// Without the quota headers Read asks for: the service computes them.
	props, err := cc.readProperties(ctx, "ReadContainer", nil)
	if err != nil {
		return PartitionKeyDefinition{}, err
	}
	return props.PartitionKey, nil
}

// keepDefinition records a container's partition key definition from
// properties the service answered with.
func (cc *ContainerClient) keepDefinition(props ContainerProperties) {
	cc.client.routing.putDefinition(cc.sessionLink(), props.PartitionKey)
}
