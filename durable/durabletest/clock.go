package durabletest

import (
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// Clock is a manual clock: it stands still until Advance moves it. It is
// safe for concurrent use; its zero value is not usable, call NewClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at this machine's current time, to the
// millisecond (the precision histories record).
func NewClock() *Clock { return &Clock{now: time.Now().Truncate(time.Millisecond)} }

// Now is the clock's time; pass the method value (clock.Now) wherever a
// clock is configured.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d. What came due meanwhile (a timer,
// a delayed message) is seen at the provider's next look at its queue: the
// Cosmos DB provider's next poll (Config.PollInterval), the runtime's next
// fetch on a provider that does not wait for work.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Options returns opts with the runtime's clock (durable.Options.Now) set
// to c.
func (c *Clock) Options(opts durable.Options) durable.Options {
	opts.Now = c.Now
	return opts
}

// Config returns cfg with the Cosmos DB provider's clock (cdb.Config.Now)
// set to c.
func (c *Clock) Config(cfg cdb.Config) cdb.Config {
	cfg.Now = c.Now
	return cfg
}

// advanceFrom moves the clock to to if it still stands at from and to is
// later, and reports whether it did: a skip never undoes an Advance made
// since its look, nor moves the clock back.
func (c *Clock) advanceFrom(from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.now.Equal(from) || !to.After(from) {
		return false
	}
	c.now = to
	return true
}
