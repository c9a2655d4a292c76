package cdb

import (
	"maps"
	"sync"
)

// Sightings: a look at the whole queue reads the candidates of many
// instances and locks one; the others are announced to this process's
// fetches (announceOtherInstances), and each fetch woken for one queried
// its partition again before its lock batch. A busy process's dispatchers
// spent a round trip a turn on those queries (at 500 orchestrations in
// flight, about one a turn through the queue, where the lock and the
// commit are the two others). The look keeps what it saw of each instance
// it announces, and the fetch woken for it locks with that instead of
// querying, while it is fresh.
//
// Invariant: a lock batch made from a sighting is the lock batch the look
// that saw it would have sent: its messages are that look's candidates of
// the instance, and its condition is that look's time (the instance free
// by then, lockInstance), so an instance whose lock expired after the look
// read it is not locked without the messages that lock held. A message
// taken meanwhile fails the batch (contended), and the fetch queries as
// before; a message that came after the look waits for the next turn, as
// it would have behind the look's own lock.

// A start this process wrote into a new partition (its batch created the
// instance document and the sequencer, so nothing came before it) is a
// sighting too: a look at its partition right after the batch would have
// seen the start alone and the instance free, which is what the write
// knows already. So the fetch woken for it locks it without a query. A
// message this process writes to a partition afterwards (an event raised
// at once, a completion) forgets the partition's sighting, whatever made
// it: the fetch then queries, and the turn holds the message too rather
// than leaving it to the next.

// sighting is what a look saw of one instance: its candidates, and the
// look's time (ms).
type sighting struct {
	group instanceGroup
	seen  int64
}

// sightings keeps the latest sighting of the instances announced, each
// taken once, and only while fresh (sightingsFrom).
type sightings struct {
	mu sync.Mutex
	by map[string]sighting // by partition
}

// maxSightings bounds the sightings kept: a look announces a few
// instances, and a fetch takes one within a turn or two.
const maxSightings = 1024

func newSightings() *sightings { return &sightings{by: map[string]sighting{}} }

// keep records what a look at seen saw of g's instance. Once maxSightings
// are kept, those from before notBefore (ms), which take would refuse,
// go first, so that a full map is not scanned for its oldest at each look.
func (s *sightings) keep(g instanceGroup, seen, notBefore int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.by) >= maxSightings {
		maps.DeleteFunc(s.by, func(_ string, v sighting) bool { return v.seen < notBefore })
	}
	if len(s.by) >= maxSightings {
		s.dropOldest()
	}
	s.by[g.pk] = sighting{group: g, seen: seen}
}

// take removes and returns pk's sighting, if one was kept since notBefore
// (ms).
func (s *sightings) take(pk string, notBefore int64) (sighting, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.by[pk]
	delete(s.by, pk)
	return v, ok && v.seen >= notBefore
}

// dropOldest forgets the oldest sighting. Called with s.mu held.
func (s *sightings) dropOldest() {
	oldest, first := "", true
	for pk, v := range s.by {
		if first || v.seen < s.by[oldest].seen {
			oldest, first = pk, false
		}
	}
	delete(s.by, oldest)
}

// forget drops pk's sighting: a message was written there since.
func (s *sightings) forget(pk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.by, pk)
}

// sightStart keeps, as a look's sighting, the start w just wrote into a
// new partition, when it is due now.
func (p *CosmosProvider) sightStart(w startWrite) {
	now := p.nowMs()
	if w.visibleAt.UnixMilli() > now {
		return
	}
	p.sightings.keep(instanceGroup{pk: instancePartitionKey(w.instance), docs: []queueDoc{w.doc}}, now, p.sightingsFrom())
}
