package cdb

import (
	"slices"
	"sync"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// Session work: the queued items of a session that an owner of this
// process holds can be taken by that owner alone, so the partitions that
// hold them are announced to that owner's fetches alone. Announced to the
// queue's fetches (queueSignal), such a partition went to whichever fetch
// waited first, most often one of another owner, whose look leaves the
// session out and finds nothing; the owner's own look, its poll window
// closed by its last one (workView), then waited a poll interval per item:
// a session ran one activity a second. Correctness never depends on these
// announcements: a dropped one is found by the owner's idle poll.
type sessionWork struct {
	mu     sync.Mutex
	owners map[string]*ownerWork
}

// ownerWork is one owner's announcements: the partitions announced while
// none of its fetches waited, the first announced first, and its waiting
// fetches, oldest first.
type ownerWork struct {
	pks     []string
	waiters []chan handoff.Wake
}

// maxOwnerPartitions bounds the partitions kept for one owner, and
// maxWorkOwners the owners with some: past them, announcements are
// dropped and the owners' idle polls find the work.
const (
	maxOwnerPartitions = 64
	maxWorkOwners      = 4096
)

func newSessionWork() *sessionWork { return &sessionWork{owners: map[string]*ownerWork{}} }

// announce says the items of sessions owner holds are queued in pks: each
// partition wakes one of its waiting fetches, or waits, once, for the next.
func (s *sessionWork) announce(owner string, pks ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pk := range pks {
		o := s.owners[owner]
		if o == nil {
			if len(s.owners) >= maxWorkOwners {
				return
			}
			o = &ownerWork{}
			s.owners[owner] = o
		}
		switch {
		case len(o.waiters) > 0:
			o.waiters[0] <- handoff.InPartition(pk) // buffered, and each waiter gets at most one
			o.waiters = o.waiters[1:]
		case len(o.pks) < maxOwnerPartitions && !slices.Contains(o.pks, pk):
			o.pks = append(o.pks, pk)
		}
		s.tidy(owner, o)
	}
}

// take returns a partition announced to owner while none of its fetches
// waited.
func (s *sessionWork) take(owner string) (handoff.Wake, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owners[owner]
	if o == nil || len(o.pks) == 0 {
		return handoff.Wake{}, false
	}
	pk := o.pks[0]
	o.pks = o.pks[1:]
	s.tidy(owner, o)
	return handoff.InPartition(pk), true
}

// await registers a waiting fetch of owner: the channel receives the next
// partition announced to owner. cancel withdraws it and returns a
// partition it was handed meanwhile, so no announcement is lost.
func (s *sessionWork) await(owner string) (<-chan handoff.Wake, func() (handoff.Wake, bool)) {
	ch := make(chan handoff.Wake, 1)
	s.mu.Lock()
	o := s.owners[owner]
	if o == nil && len(s.owners) < maxWorkOwners {
		o = &ownerWork{}
		s.owners[owner] = o
	}
	if o != nil {
		o.waiters = append(o.waiters, ch)
	}
	s.mu.Unlock()
	return ch, func() (handoff.Wake, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if o := s.owners[owner]; o != nil {
			o.waiters = slices.DeleteFunc(o.waiters, func(w chan handoff.Wake) bool { return w == ch })
			s.tidy(owner, o)
		}
		select {
		case w := <-ch:
			return w, true
		default:
			return handoff.Wake{}, false
		}
	}
}

// tidy forgets an owner with nothing announced and no fetch waiting.
// Called with s.mu held.
func (s *sessionWork) tidy(owner string, o *ownerWork) {
	if len(o.pks) == 0 && len(o.waiters) == 0 {
		delete(s.owners, owner)
	}
}

// ownerSignal is what one fetch polls of its session owner's
// announcements; the zero value, for a fetch without a session config (and
// every orchestrator fetch), has none.
type ownerSignal struct {
	work  *sessionWork
	owner string
}

func (o ownerSignal) take() (handoff.Wake, bool) {
	if o.work == nil {
		return handoff.Wake{}, false
	}
	return o.work.take(o.owner)
}

// await is sessionWork.await; without an owner its channel never
// receives.
func (o ownerSignal) await() (<-chan handoff.Wake, func() (handoff.Wake, bool)) {
	if o.work == nil {
		return nil, func() (handoff.Wake, bool) { return handoff.Wake{}, false }
	}
	return o.work.await(o.owner)
}

// giveBack announces again a partition a fetch took but did not look in.
func (o ownerSignal) giveBack(w handoff.Wake) {
	if o.work != nil && w.Partitioned() {
		o.work.announce(o.owner, w.PK)
	}
}

// ownerSignalFor is the owner's announcements a fetch with this session
// config polls.
func (p *CosmosProvider) ownerSignalFor(session *SessionFetchConfig) ownerSignal {
	if session == nil || p.cfg.ShortPolling {
		return ownerSignal{}
	}
	return ownerSignal{work: p.sessionWork, owner: session.OwnerID}
}

// announceSessionWork announces pk to the owner of this process that holds
// session, if one does, and says whether it did: then the item is that
// owner's to take, and no other fetch need look for it.
func (p *CosmosProvider) announceSessionWork(session, pk string) bool {
	if p.cfg.ShortPolling {
		return false // short-polling fetches never wait: an announcement reopens their views
	}
	owner, ok := p.sessions.holderHere(session, p.nowMs())
	if ok {
		p.sessionWork.announce(owner, pk)
	}
	return ok
}
