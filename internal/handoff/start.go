package handoff

import (
	"context"
	"sync"
	"time"
)

// StartState is where a start written by its first turn stands.
type StartState int

const (
	StartPending    StartState = iota // in memory; no commit under way
	StartCommitting                   // the first turn's commit is under way
	StartCommitted                    // the commit created the instance
	StartHandedBack                   // the caller writes the start the usual way
	StartUnknown                      // a commit whose outcome cannot be told
)

// Start is one start written by its first turn, shared by its caller and
// its turn's lock: a state under a mutex, so that a commit begins only on
// a pending start and a start is handed back only while no commit is under
// way. P is the first turn's commit as planned, kept for what follows a
// commit found applied later.
type Start[P any] struct {
	mu    sync.Mutex
	state StartState
	err   error         // with StartUnknown: why it cannot be told
	ended chan struct{} // closed once the state is final
	plan  P
}

// NewStart is a pending start.
func NewStart[P any]() *Start[P] {
	return &Start[P]{ended: make(chan struct{})}
}

// Planned notes the first turn's commit as planned.
func (s *Start[P]) Planned(plan P) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = plan
}

// Plan is the plan noted by Planned, the zero P before the first.
func (s *Start[P]) Plan() P {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan
}

// State is where the start stands now.
func (s *Start[P]) State() StartState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// BeginCommit marks the first turn's commit as under way; false when the
// start was handed back (the turn must not commit).
func (s *Start[P]) BeginCommit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StartPending {
		return false
	}
	s.state = StartCommitting
	return true
}

// End makes the state final, once.
func (s *Start[P]) End(state StartState, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(state, err)
}

func (s *Start[P]) endLocked(state StartState, err error) {
	if s.state == StartCommitted || s.state == StartHandedBack || s.state == StartUnknown {
		return
	}
	s.state, s.err = state, err
	close(s.ended)
}

// HandBack gives the start back to its caller unless a commit is under way
// or it ended; it says whether it did. The check and the change are one
// step, so a commit cannot begin between them.
func (s *Start[P]) HandBack() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StartPending {
		return false
	}
	s.endLocked(StartHandedBack, nil)
	return true
}

// HandedBack says the start went back to its caller.
func (s *Start[P]) HandedBack() bool { return s.State() == StartHandedBack }

// Outcome waits for the start's end. A context that ends first hands a
// pending start back (and says so with its error), as does wait (without
// one); a commit under way is waited for, as its answer is the caller's.
func (s *Start[P]) Outcome(ctx context.Context, wait time.Duration) (StartState, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-s.ended:
	case <-timer.C:
		if s.HandBack() {
			return StartHandedBack, nil
		}
		<-s.ended
	case <-ctx.Done():
		if s.HandBack() {
			return StartHandedBack, ctx.Err()
		}
		<-s.ended
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.err
}
