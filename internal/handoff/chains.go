package handoff

import (
	"sync"
	"time"
)

// Chain is an instance a commit of this process kept locked for the
// completions of its activities, which this process's workers write
// already claimed with the chain's lock. L is the chain's lock, A names an
// activity, M is a completion as written.
type Chain[L any, A comparable, M any] struct {
	Lock  L
	PK    string
	Token string // the chain's lock token, which completions are claimed with
	Since int64  // ms: when the commit was planned
	Patience
	// Claimed are the completions written claimed so far, in order.
	Claimed []M
	// Announced says something else was sent to the instance in this
	// process; Unsure that an ack could not tell whether it wrote its
	// completion claimed. Either way its turn reads the partition.
	Announced, Unsure bool
	// Unconfirmed says the commit that would have kept the instance could
	// not be told committed (H6): the chain is only to be given back, once
	// its instance is read, and no completion is claimed into it.
	Unconfirmed bool
	// Refused says the worker ack that opened the chain (Open) could not
	// lock the instance: the completions claimed into it meanwhile are to
	// be released, and no other is claimed into it.
	Refused bool

	until    func() int64 // the lock's expiry (ms), which renewals move
	awaiting map[A]bool   // activities whose completions come here
	writing  int          // worker acks under way that write a completion claimed
	opening  bool         // the worker ack that locks the instance (Open) is under way
	filled   int          // completions settled that may be written claimed
	firstAt  int64        // ms: when the first completion came; 0 before
	lastAt   int64        // ms: when the latest completion came
	done     bool         // handed over or given back
}

// Patience is how long a chain waits, and for how much.
type Patience struct {
	// Window is how long it waits for a first completion before it is
	// given back.
	Window time.Duration
	// Hold is how long it holds its first completion at most while others
	// keep coming (Due); 0 for no limit but the gap.
	Hold time.Duration
	// Room is how many completions one turn of it takes: once it has
	// them, it is handed over and no other is claimed into it; 0 for no
	// limit.
	Room int
}

// NewChain is a chain of pk under token, its lock expiring at until()
// (ms), waiting for the completions of awaiting.
func NewChain[L any, A comparable, M any](lock L, pk, token string, until func() int64, since int64, patience Patience, awaiting []A) *Chain[L, A, M] {
	c := &Chain[L, A, M]{Lock: lock, PK: pk, Token: token, Since: since, Patience: patience, until: until, awaiting: map[A]bool{}}
	for _, a := range awaiting {
		c.awaiting[a] = true
	}
	return c
}

// Chains are this process's chained instances, by partition key. A nil
// one (eager dispatch off) keeps none, and every method of it does
// nothing.
type Chains[L any, A comparable, M any] struct {
	mu   sync.Mutex
	byPK map[string]*Chain[L, A, M]
}

// NewChains is an empty table, nil when off.
func NewChains[L any, A comparable, M any](off bool) *Chains[L, A, M] {
	if off {
		return nil
	}
	return &Chains[L, A, M]{byPK: map[string]*Chain[L, A, M]{}}
}

// Claim is a worker ack's right to write its completion claimed with a
// chain: the chain's token and expiry, which the completion carries.
type Claim[A comparable] struct {
	PK       string
	Token    string
	Until    int64
	Activity A // whose completion the ack writes
}

// ClaimFor reserves, for a worker ack of an item of pk, the right to write
// its completion claimed with the chain; false when pk is not held here.
// Every true answer is settled with Completed, and neither a hand-over nor
// a give-back ends the chain while one is under way: a completion claimed
// after the chained turn read its batch would stay hidden until the
// expiry.
func (h *Chains[L, A, M]) ClaimFor(pk string, activity A, nowMs int64) (Claim[A], bool) {
	if h == nil {
		return Claim[A]{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claimLocked(h.byPK[pk], activity, nowMs)
}

// claimLocked is ClaimFor's claim on c. Called with h.mu held.
func (h *Chains[L, A, M]) claimLocked(c *Chain[L, A, M], activity A, nowMs int64) (Claim[A], bool) {
	if c == nil || c.done || c.Unconfirmed || c.Refused || c.until() <= nowMs || c.full(c.writing) {
		return Claim[A]{}, false
	}
	c.writing++
	return Claim[A]{PK: c.PK, Token: c.Token, Until: c.until(), Activity: activity}, true
}

// full says c has room for no more completions than it has, with under
// way worker acks writing into it.
func (c *Chain[L, A, M]) full(underWay int) bool {
	return c.Room > 0 && c.filled+underWay >= c.Room
}

// Open is ClaimFor for a worker ack that may lock its instance itself: when
// pk has no chain, open makes one, the ack's claim opens it (opening), and
// the ack's batch must lock the instance with the chain's token; the ack
// says how that went with Opened before it settles its claim. Until then,
// the acks of the instance's other activities claim into it as into any
// chain, and nothing ends it.
func (h *Chains[L, A, M]) Open(pk string, activity A, nowMs int64, open func() *Chain[L, A, M]) (claim Claim[A], opening, ok bool) {
	if h == nil {
		return Claim[A]{}, false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.byPK[pk]; c != nil {
		claim, ok = h.claimLocked(c, activity, nowMs)
		return claim, false, ok
	}
	c := open()
	if c == nil {
		return Claim[A]{}, false, false
	}
	c.opening = true
	h.byPK[pk] = c
	claim, ok = h.claimLocked(c, activity, nowMs)
	return claim, ok, ok
}

// Opened records how the ack that opened claim's chain locked its
// instance: locked it, refused (another held it: the completions claimed
// into it are released once no ack writes into it), or cannot tell
// (unconfirmed: given back from a read of the instance, H6).
func (h *Chains[L, A, M]) Opened(claim Claim[A], locked, refused bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.byPK[claim.PK]
	if c == nil || c.Token != claim.Token {
		return
	}
	c.opening = false
	c.Refused = refused
	c.Unconfirmed = c.Unconfirmed || !locked && !refused
}

// Completed settles a claim: msg is the completion as written (nil when
// the ack did not commit, or cannot tell: unsure). ready is the chain when
// its turn should be handed over now: every awaited completion came (the
// one that ends the fan-in waits for no gap after it), its turn has no
// room for more, or something else was announced for the instance.
func (h *Chains[L, A, M]) Completed(claim Claim[A], msg *M, unsure bool, nowMs int64) (ready *Chain[L, A, M]) {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.byPK[claim.PK]
	if c == nil || c.Token != claim.Token {
		return nil
	}
	c.writing--
	c.Unsure = c.Unsure || unsure
	if msg != nil || unsure {
		// A completion that may be written counts as one: the turn's
		// query finds it by the chain's token.
		if msg != nil {
			c.Claimed = append(c.Claimed, *msg)
		}
		delete(c.awaiting, claim.Activity)
		c.filled++
		if c.firstAt == 0 {
			c.firstAt = nowMs
		}
		c.lastAt = nowMs
	}
	if c.Announced || c.Refused || c.Unconfirmed || c.firstAt != 0 && (len(c.awaiting) == 0 || c.full(0)) {
		return h.takeLocked(c)
	}
	return nil
}

// Want marks pk's chain as wanted now (something else was sent to the
// instance in this process) and says whether pk is held here; ready is the
// chain when it should be handed over now.
func (h *Chains[L, A, M]) Want(pk string) (held bool, ready *Chain[L, A, M]) {
	if h == nil {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.byPK[pk]
	if c == nil {
		return false, nil
	}
	c.Announced = true
	return true, h.takeLocked(c)
}

// Await adds activity, which a worker of this process took just now, to
// the completions pk's chain waits for: the fan-in ends when no activity
// of the instance runs here any more, not when those that ran at the
// chain's start are done.
func (h *Chains[L, A, M]) Await(pk string, activity A) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.byPK[pk]; c != nil && !c.done {
		c.awaiting[activity] = true
	}
}

// Due ends the chains whose time came: those whose completions paused for
// gap since the last one, or that held their first one their Hold, and
// those past their window without any.
func (h *Chains[L, A, M]) Due(nowMs int64, gap time.Duration) []*Chain[L, A, M] {
	return h.End(func(c *Chain[L, A, M]) bool {
		switch {
		case c.firstAt != 0 && nowMs-c.lastAt >= gap.Milliseconds():
			return true
		case c.firstAt != 0 && c.Hold > 0 && nowMs-c.firstAt >= c.Hold.Milliseconds():
			return true
		case c.firstAt == 0 && nowMs-c.Since >= c.Window.Milliseconds():
			return true
		}
		return false
	})
}

// End ends the chains ending selects and no worker ack writes into.
func (h *Chains[L, A, M]) End(ending func(*Chain[L, A, M]) bool) []*Chain[L, A, M] {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Chain[L, A, M]
	for _, c := range h.byPK {
		if !ending(c) {
			continue
		}
		if t := h.takeLocked(c); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// All ends every chain no worker ack writes into, for Close.
func (h *Chains[L, A, M]) All() []*Chain[L, A, M] {
	return h.End(func(*Chain[L, A, M]) bool { return true })
}

// takeLocked ends c, unless a worker ack is still writing into it (its
// settle takes it then). Called with h.mu held.
func (h *Chains[L, A, M]) takeLocked(c *Chain[L, A, M]) *Chain[L, A, M] {
	if c.done || c.writing > 0 || c.opening {
		return nil
	}
	c.done = true
	delete(h.byPK, c.PK)
	return c
}

// Add records a chain.
func (h *Chains[L, A, M]) Add(c *Chain[L, A, M]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byPK[c.PK] = c
}

// AddUnconfirmed records c, a chain to give back whose commit could not be
// told, unless pk has a chain: that one is this process's latest.
func (h *Chains[L, A, M]) AddUnconfirmed(c *Chain[L, A, M]) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byPK[c.PK] != nil {
		return false
	}
	c.Unconfirmed = true
	h.byPK[c.PK] = c
	return true
}

// Empty says no chain is kept.
func (h *Chains[L, A, M]) Empty() bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byPK) == 0
}
