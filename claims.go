package cdb

// Claims in this process: the partitions its fetches are locking, the
// worker items it is claiming, and the wakes deferred while it holds a
// partition.

import "sync"

// claimSet is the partitions this process's fetches are locking right now.
type claimSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func newClaimSet() *claimSet { return &claimSet{m: map[string]bool{}} }

// claim marks pk as being locked by the caller; false when another fetch
// already is.
func (c *claimSet) claim(pk string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[pk] {
		return false
	}
	c.m[pk] = true
	return true
}

// has says a fetch is locking pk.
func (c *claimSet) has(pk string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[pk]
}

func (c *claimSet) release(pk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, pk)
}

// itemClaims are the worker items this process's fetches are claiming or
// hold, so two of its fetches that read the same candidates do not both
// send a claim for one item (the loser's request would only meet a 412).
// An entry lasts until the item is let go, or until the lock it was taken
// with would have expired, whichever comes first.
type itemClaims struct {
	mu    sync.Mutex
	until map[string]int64 // item key → ms
}

func newItemClaims() *itemClaims { return &itemClaims{until: map[string]int64{}} }

// take marks key as claimed until the given time; false when another fetch
// of this process claims or holds it.
func (c *itemClaims) take(key string, now, until int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until[key] > now {
		return false
	}
	c.until[key] = until
	return true
}

// busy says another fetch of this process claims or holds key.
func (c *itemClaims) busy(key string, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.until[key] > now
}

func (c *itemClaims) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.until, key)
}

// itemKey names a queue document within the container.
func itemKey(pk, id string) string { return pk + "/" + id }

// deferredWakes are partitions announced while this process held them:
// their messages wait for the lock to be let go, and are announced then.
type deferredWakes struct {
	mu sync.Mutex
	m  map[string]bool
}

func newDeferredWakes() *deferredWakes { return &deferredWakes{m: map[string]bool{}} }

// deferIfHeld records pk when held says this process holds it. The check
// and the record are one step, so a release that comes after the check
// finds the record (see take).
func (d *deferredWakes) deferIfHeld(pk string, held func(string) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !held(pk) {
		return false
	}
	d.m[pk] = true
	return true
}

// take removes pk's record: call it after the lock is let go.
func (d *deferredWakes) take(pk string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := d.m[pk]
	delete(d.m, pk)
	return was
}
