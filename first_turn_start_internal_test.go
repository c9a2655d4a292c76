package cdb

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A start's commit and its hand-back exclude each other, however they
// race: exactly one of them wins, and the state says which.
func TestAFirstTurnStartIsCommittedOrHandedBackNeverBoth(t *testing.T) {
	for range 2000 {
		s := newFirstTurnStart()
		var committing, handedBack bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); committing = s.beginCommit() }()
		go func() { defer wg.Done(); handedBack = s.handBack() }()
		wg.Wait()
		assert.NotEqual(t, committing, handedBack, "exactly one wins")
		if committing {
			assert.Equal(t, startCommitting, s.state)
			s.end(startCommitted, nil)
			assert.False(t, s.handBack(), "a committed start is not handed back")
			assert.Equal(t, startCommitted, s.state)
		} else {
			assert.Equal(t, startHandedBack, s.state)
			assert.False(t, s.beginCommit(), "a handed-back start never commits")
		}
	}
}
