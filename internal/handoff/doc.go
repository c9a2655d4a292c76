// Package handoff is the hand-over's process-local state: what a process
// of the Cosmos DB provider locks in the store for its own fetches, and
// hands them without a request. It holds the ready lists (Ready, with the
// Reservation a write takes and ends in one function), the typed wake-ups
// that tell a waiting fetch what was announced (Wake), the chains of
// instances a commit kept locked for its activities' completions (Chains),
// the state of a start written by its first turn (Start), the watches of
// callers waiting for an instance to end (EndWatches), what this process's
// own writes ended (Ended) and the lock table (LockTable). It is memory only: nothing here sends a request; the
// provider decides what to write and calls in here to keep its view.
//
// # The hand-over rules
//
// The provider keeps these; each place that keeps one says so in a line
// ("Keeps: H3"), and ARCHITECTURE.md refers here rather than repeating them.
//
//   - H1 Locked ahead is claimed. Whatever a commit or a start locks ahead
//     for this process (a worker item, a chained instance and the
//     completions claimed with it, an unwritten start) is, in the store,
//     exactly what a claim or lock batch of this process would have
//     written: its token, its expiry counted from before the request, its
//     attempt. So should the process die, it expires and any process takes
//     it, the attempt counted; a cancellation's tombstone or a deletion
//     ends it as it ends a claimed one.
//   - H2 Known before handed out. Nothing is handed out before the write
//     that locked it is known to have applied; one whose ETag the write's
//     answer did not give is read back first, and passed over unless it
//     carries its token.
//   - H3 A whole lock goes out (R19). A lock goes to the runtime with all
//     but a second (a quarter, for a short lock) of its timeout left, and
//     is renewed first otherwise; the provider says how long a lock it
//     handed out has left, so a runtime schedules its first renewal from
//     that.
//   - H4 Never staler than this process's writes (R20). A commit or a
//     deletion of this process that cancels, tombstones or removes an item
//     takes it out of every ready list before its request is sent (a
//     commit that fails puts it back, to be read back), marks it as ending
//     then (so a fetch that took it just before does not hand it out
//     either: the hand-out looks again last), and is remembered
//     for a while (Ended), so that an item locked before it whose commit
//     answered only after it is not handed out either, nor one a fetch
//     claimed before it whose claim answered only after it; a refresh that
//     meets another write (412) or none (404) passes the item over.
//   - H5 Nothing waits for nobody. What no fetch took within its patience
//     (a poll interval; a worker item locked ahead, half its lock timeout
//     if longer, with its lock written that much longer) is given back to
//     the queue (an abandon that counts no attempt); a chain no completion
//     reached within its window is given back; at Close the chain loop
//     stops first, then every chain and everything ready is given back
//     until none is left, and whatever is made ready once Close began is
//     given back by its maker. A give-back
//     runs on a context of its own once its item is off the lists, and one
//     that fails puts it back (an item ready, a chain unconfirmed), read
//     back before the next try, while its lock could still hold.
//   - H6 Every commit found applied is followed (R18). A commit's after
//     duties (its chain, its ready items, its announcements, its end
//     watches, its outbox) follow every path that finds it applied: its
//     answer, a read after a lost answer, a retry that meets it, a start's
//     settle. The tokens a commit derives are a fixed-length function of
//     its ack's token, the same on every try, so a later try or a read
//     recognises what any try locked. A commit whose outcome cannot be
//     told leaves what it may have locked to be read back: its items wait
//     ready, each read before it goes out or back, and the chain it may
//     have kept waits unconfirmed, to be given back once its instance is
//     read (tried again each window while it could still hold, and at
//     Close), never handed over and never claimed into.
//   - H7 A reservation is taken and ended in one function. A write reserves
//     places of this process's fetches before it is planned, defers their
//     release, and settles them with what it locked once it applied; so a
//     failed write never leaves fetches promised to nothing.
//   - H8 A chain is not ended under a writing ack. A worker ack writes its
//     completion claimed with a chain only while the chain is neither
//     handed over nor given back, and neither happens while such an ack is
//     under way: a completion claimed after the chained turn read its batch
//     would stay hidden until the expiry.
//   - H9 A start commits or goes back, never both. A first turn's commit
//     begins only on a pending start, and a start is handed back only while
//     no commit is under way; its caller is told of success only by the
//     committed create of its instance.
package handoff
