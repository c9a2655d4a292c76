package handoff

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A start's commit and its hand-back exclude each other, however they
// race: exactly one of them wins, and the state says which.
func TestAStartIsCommittedOrHandedBackNeverBoth(t *testing.T) {
	for range 2000 {
		s := NewStart[int]()
		var committing, handedBack bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); committing = s.BeginCommit() }()
		go func() { defer wg.Done(); handedBack = s.HandBack() }()
		wg.Wait()
		assert.NotEqual(t, committing, handedBack, "exactly one wins")
		if committing {
			assert.Equal(t, StartCommitting, s.State())
			s.End(StartCommitted, nil)
			assert.False(t, s.HandBack(), "a committed start is not handed back")
			assert.Equal(t, StartCommitted, s.State())
		} else {
			assert.True(t, s.HandedBack())
			assert.False(t, s.BeginCommit(), "a handed-back start never commits")
		}
	}
}

// A caller waits for a commit under way, however long it takes; a pending
// start is handed back at the wait's end, or at the caller's context's
// with its error; the first end is final.
func TestAStartsOutcome(t *testing.T) {
	pending := NewStart[int]()
	state, err := pending.Outcome(context.Background(), time.Millisecond)
	assert.Equal(t, StartHandedBack, state)
	assert.NoError(t, err)

	cancelled := NewStart[int]()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	state, err = cancelled.Outcome(ctx, time.Hour)
	assert.Equal(t, StartHandedBack, state)
	assert.ErrorIs(t, err, context.Canceled)

	committing := NewStart[int]()
	require.True(t, committing.BeginCommit())
	go func() {
		time.Sleep(5 * time.Millisecond) // past the wait below
		committing.End(StartUnknown, errors.New("lost"))
		committing.End(StartCommitted, nil) // too late: the first end stands
	}()
	state, err = committing.Outcome(context.Background(), time.Millisecond)
	assert.Equal(t, StartUnknown, state)
	assert.EqualError(t, err, "lost")
}
