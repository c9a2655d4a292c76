package sim

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"time"
)

// Closes racing the chain ticker (Features.ChainShutdowns,
// close-gives-back). A provider that closes gives back what it holds for
// its own fetches: the items and first turns locked eagerly and still
// ready, and the instances its commits kept locked (chains), while its
// tickers may be handing a chain over or giving one back at that very
// moment. What Close leaves locked stays hidden from every other process
// until the lock expires. So a ChainShutdown scenario runs a chain of
// short activities and shuts its node down (shutdownNode: the runtime's
// Shutdown with a short context, then the provider's Close) while one of
// them runs, so its completion, its chain's hand-over and the close race;
// the Shutdown scenarios' closes are checked the same way. After a clean
// close (the node's faults are off first, so every give-back reaches the
// account), nothing the node held stays locked beyond closeBound of the
// close's end: an instance document still locked with its token (read
// from the account's writes, in each partition's order: chains.go), or a
// worker item a commit locked eagerly to it that its runtime never took.
// An item its runtime took and ran is another matter: a running handler
// keeps its item, and at a shutdown its lock lapses (rule R21). So is an
// instance a deletion marked while the node held it: the deletion has it
// from the mark on, whoever's lock it carries (the mark drops the node's
// chain without a write), and a lock left on it hides nothing the mark
// does not; it is counted apart, as is an item of such an instance marked
// before the close ended (a deletion the closing node left half done is
// taken over, and sweeps the item, once its intent's owner lapses). The
// report counts what each close gave back (the patches of the closing
// node that cleared its locks) apart from what was left and then taken
// over by another node after the lock expired.
const (
	scenarioChainShutdown = "ChainShutdown"
	invCloseGivesBack     = "close-gives-back"
)

// closeRecord is a clean close of a node: its runtime's Shutdown began at
// Began and its provider's Close returned at Ended (wall clock), EndedMs on
// the account's clock.
type closeRecord struct {
	Began, Ended time.Time
	EndedMs      int64
}

// nodeClosed records a clean close.
func (r *recorder) nodeClosed(node string, c closeRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closes == nil {
		r.closes = map[string]closeRecord{}
	}
	r.closes[node] = c
}

func (r *recorder) closesSoFar() map[string]closeRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]closeRecord, len(r.closes))
	for n, c := range r.closes {
		out[n] = c
	}
	return out
}

// shutdownWhileChained (ChainShutdown) waits for an activity of the
// incarnation run to run, and a few milliseconds later shuts its node down:
// the chain its commit kept waits for that completion.
func (h *harness) shutdownWhileChained(ctx context.Context, id, run string, rng *rand.Rand) {
	if h.shutdown == nil {
		return
	}
	// Its activities are short: look every millisecond, and give up once
	// the chain ended (or after a while: it may have run already).
	var on string
	deadline := time.Now().Add(hostScaled(h.env.cfg, 5*time.Second))
	for i := 0; on == "" && ctx.Err() == nil && time.Now().Before(deadline); i++ {
		if on = h.env.rec.runningOn(run); on != "" {
			break
		}
		if i%50 == 49 {
			if st, err := h.observer.GetStatus(ctx, id); err == nil && st.IsTerminal() {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	if on == "" {
		return
	}
	sleepCtx(ctx, time.Duration(rng.Intn(15))*time.Millisecond)
	if h.shutdown(ctx, on) {
		h.env.stats.crash("shutdown-with-chain")
		h.env.logger.Info("node shut down while a chain ran", "node", on, "instance", id)
	}
}

// closeTotals counts what the closes gave back and left.
type closeTotals struct {
	closes, paused                         int
	instancesGivenBack, instancesLeft      int
	instancesTakenOver, instancesExpiring  int
	instancesMarked                        int
	itemsMarked                            int
	itemsGivenBack, itemsLeft, itemsLapsed int
	itemsExpiring                          int
}

func (t closeTotals) String() string {
	return fmt.Sprintf("closes=%d (and %d while paused) instances: given-back=%d left=%d (taken over after expiry %d) expiring-within-bound=%d marked-for-deletion=%d; eager items: given-back=%d left=%d expiring-within-bound=%d handed-out-unacked=%d marked-for-deletion=%d",
		t.closes, t.paused, t.instancesGivenBack, t.instancesLeft, t.instancesTakenOver, t.instancesExpiring, t.instancesMarked, t.itemsGivenBack, t.itemsLeft, t.itemsExpiring, t.itemsLapsed, t.itemsMarked)
}

// closeBound is how long after its close's end a closed node's lock may
// still hold: a poll interval, and the clocks' skew and the host's
// scheduling as margin.
type closeBound func(node string) time.Duration

// checkCloses reports what clean closes left locked. A close during which
// its node was paused (its requests held back: Faults.Pauses) could not
// give anything back in time; it is counted, not judged.
func checkCloses(v *violations, closes map[string]closeRecord, paused func(node string, from, to time.Time) bool, c *chainedTurns, e *eagerItems, bound closeBound) closeTotals {
	t := closeTotals{}
	judged := map[string]closeRecord{}
	for n, cl := range closes {
		if paused(n, cl.Began, cl.Ended) {
			t.paused++
			continue
		}
		judged[n] = cl
	}
	closes = judged
	t.closes = len(closes)
	if len(closes) == 0 {
		return t
	}
	if c != nil {
		c.instancesLeftByCloses(v, closes, bound, &t)
	}
	if e != nil {
		marked := func(string, time.Time, time.Time) bool { return false }
		if c != nil {
			marked = c.markedBetween
		}
		e.itemsLeftByCloses(v, closes, bound, marked, &t)
	}
	return t
}

// instanceHolder is who holds an instance document's lock, as the replay
// goes.
type instanceHolder struct {
	node, token string
	until       int64
	at          time.Time
	judged      bool
	// marked says a deletion marked the instance while the lock held: the
	// deletion has it from then on, and the lock hides nothing the mark
	// does not (the mark drops the holder's chain without a write).
	marked bool
}

// instancesLeftByCloses replays every partition's instance writes in the
// account's order and judges the locks a closed node held when its close
// ended.
func (c *chainedTurns) instancesLeftByCloses(v *violations, closes map[string]closeRecord, bound closeBound, t *closeTotals) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pks := make([]string, 0, len(c.writes))
	for pk := range c.writes {
		pks = append(pks, pk)
	}
	sort.Strings(pks)
	for _, pk := range pks {
		writes := slices.Clone(c.writes[pk])
		sort.SliceStable(writes, func(i, j int) bool {
			if writes[i].lsn != writes[j].lsn {
				return writes[i].lsn < writes[j].lsn
			}
			return writes[i].arrival < writes[j].arrival
		})
		var holder *instanceHolder
		judge := func(next *chainWrite) {
			if holder == nil || holder.judged {
				return
			}
			cl, closed := closes[holder.node]
			if !closed || holder.at.After(cl.Ended) || next != nil && (next.node == holder.node || !next.at.After(cl.Ended)) {
				return
			}
			holder.judged = true
			if next != nil && next.inst.lockToken != nil && *next.inst.lockToken != "" {
				t.instancesTakenOver++
			}
			if holder.marked {
				t.instancesMarked++
				return
			}
			over := time.Duration(holder.until-cl.EndedMs) * time.Millisecond
			if over <= bound(holder.node) {
				t.instancesExpiring++
				return
			}
			t.instancesLeft++
			v.add(invCloseGivesBack, pk, fmt.Sprintf("%s closed at %s (shut down from %s) with the instance still locked with its token %s until %s later (the write that locked it: %s)",
				holder.node, stamp(cl.Ended), stamp(cl.Began), clipName(holder.token), over.Round(time.Millisecond), stamp(holder.at)))
		}
		for i := range writes {
			w := &writes[i]
			if w.inst == nil {
				continue
			}
			judge(w)
			ch := w.inst
			if ch.marked && holder != nil {
				holder.marked = true
			}
			switch {
			case ch.kind == "delete":
				holder = nil
			case ch.kind == "write" && *ch.lockToken != "":
				holder = &instanceHolder{node: w.node, token: *ch.lockToken, until: *ch.lockedUntil, at: w.at}
			case ch.kind == "write":
				holder = nil
			case ch.lockToken == nil:
				if holder != nil && ch.lockedUntil != nil {
					holder.until = *ch.lockedUntil // a renewal
				}
			case *ch.lockToken == "":
				if cl, ok := closes[w.node]; ok && holder != nil && holder.node == w.node && !w.at.Before(cl.Began) && !w.at.After(cl.Ended) {
					t.instancesGivenBack++
				}
				holder = nil
			default:
				until := int64(0)
				if ch.lockedUntil != nil {
					until = *ch.lockedUntil
				}
				holder = &instanceHolder{node: w.node, token: *ch.lockToken, until: until, at: w.at}
			}
		}
		judge(nil)
	}
}

// itemsLeftByCloses judges the worker items a closed node's commits locked
// eagerly that were still waiting for it when its close ended.
func (e *eagerItems) itemsLeftByCloses(v *violations, closes map[string]closeRecord, bound closeBound, marked func(pk string, from, to time.Time) bool, t *closeTotals) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]stampKey, 0, len(e.items))
	for k := range e.items {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].pk+keys[i].id < keys[j].pk+keys[j].id })
	for _, k := range keys {
		it := e.items[k]
		cl, closed := closes[it.writer]
		if !closed || it.created.After(cl.Ended) {
			continue
		}
		switch {
		case it.how == eagerEndGivenBack && !it.ended.Before(cl.Began) && !it.ended.After(cl.Ended):
			t.itemsGivenBack++
			continue
		case it.handedOut && !it.consumed:
			t.itemsLapsed++ // its runtime took it, and its handler may have held it (R21)
			continue
		case !it.ended.IsZero() && !it.ended.After(cl.Ended):
			continue // it had ended before the close did
		case marked(k.pk, it.created, cl.Ended):
			t.itemsMarked++ // its instance's deletion has it
			continue
		}
		over := time.Duration(it.until-cl.EndedMs) * time.Millisecond
		if over <= bound(it.writer) {
			t.itemsExpiring++
			continue
		}
		t.itemsLeft++
		v.add(invCloseGivesBack, k.pk, fmt.Sprintf("%s closed at %s (shut down from %s) with worker item %s, which its commit locked to it eagerly and its runtime never took, still locked until %s later",
			it.writer, stamp(cl.Ended), stamp(cl.Began), k.id, over.Round(time.Millisecond)))
	}
}

// markedBetween says a write marked pk's instance for a deletion between
// from and to (wall clock).
func (c *chainedTurns) markedBetween(pk string, from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.writes[pk] {
		if w.inst != nil && w.inst.marked && !w.at.Before(from) && !w.at.After(to) {
			return true
		}
	}
	return false
}
