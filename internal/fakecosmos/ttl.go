package fakecosmos

import (
	"encoding/json"
	"math"
	"time"
)

// Time to live, as the service applies it: a container without defaultTtl
// expires nothing (items' "ttl" is ignored); with defaultTtl -1 only items
// with a positive "ttl" expire; with defaultTtl n an item expires n
// seconds after its last write unless its own "ttl" says otherwise (-1:
// never). An item whose _ts + ttl has passed on the server's clock is gone:
// point reads, queries, read feeds and batches do not see it, and writes
// treat its id as free. The service deletes expired items in the
// background; here they are hidden at once and dropped from memory when a
// container's TTL setting changes, so that turning TTL off does not bring
// them back.

// ttlPolicy is a container's TTL setting and the clock it runs on. Every
// document points at its container's policy, so that its expiry follows
// the setting as it changes (under the container's lock).
type ttlPolicy struct {
	now func() time.Time
	// defaultTTL is 0 when the container has none (TTL off), -1 when
	// items live until their own ttl, else seconds after the last write.
	defaultTTL int64
}

func newTTLPolicy(now func() time.Time, defaultTTL json.Number) *ttlPolicy {
	p := &ttlPolicy{now: now}
	p.set(defaultTTL)
	return p
}

// set applies a container's defaultTtl as parsed by parseDefaultTTL ("",
// -1 or a positive integer).
func (p *ttlPolicy) set(defaultTTL json.Number) {
	p.defaultTTL = 0
	if n, err := defaultTTL.Int64(); err == nil {
		p.defaultTTL = n
	}
}

// itemTTL reads an item's own "ttl": -1 or a positive number of seconds
// (a fraction is cut). Anything else (absent, null, 0, a string) leaves
// the container's default in force.
func itemTTL(body map[string]any) (int64, bool) {
	n, ok := body["ttl"].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	ttl := int64(f)
	if ttl == -1 || ttl > 0 {
		return ttl, true
	}
	return 0, false
}

// expiresAt is when d expires: _ts plus its ttl (its own, else the
// container's default); false when it never does (TTL off, -1, a
// tombstone, a document of no container). Call with the container's lock
// held.
func (d *document) expiresAt() (time.Time, bool) {
	if d == nil || d.tombstone || d.ttl == nil || d.ttl.defaultTTL == 0 {
		return time.Time{}, false
	}
	ttl := d.ttl.defaultTTL
	if own, ok := itemTTL(d.body); ok {
		ttl = own
	}
	return time.Unix(d.ts+ttl, 0), ttl > 0
}

// expiredAt reports whether d has expired at now.
func (d *document) expiredAt(now time.Time) bool {
	at, ok := d.expiresAt()
	return ok && !now.Before(at)
}

// expired is expiredAt on the server's clock.
func (d *document) expired() bool {
	return d != nil && d.ttl != nil && d.expiredAt(d.ttl.now())
}

// unpurged says d has expired but its id still conflicts on create: the
// service purges expired items in the background, and whether an expired
// id is free before its purge is not documented; Options.ExpiredPurgeLag
// takes the cautious view for that long after the expiry.
func (d *document) unpurged(lag time.Duration) bool {
	if lag <= 0 || !d.expired() {
		return false
	}
	at, _ := d.expiresAt()
	return d.ttl.now().Before(at.Add(lag))
}

// live is d unless it has expired.
func live(d *document) *document {
	if d.expired() {
		return nil
	}
	return d
}

// dropExpired deletes the container's expired documents, as the service's
// background deletion does. Call with c.mu held.
func (c *container) dropExpired() {
	for key, p := range c.partitions {
		for id, d := range p.docs {
			if d.expired() {
				delete(p.docs, id)
				c.reindex(key, id, d, p.entry(id))
			}
		}
		if p.empty() {
			delete(c.partitions, key)
		}
	}
}
