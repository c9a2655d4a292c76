package handoff

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// An end wakes every watch of its instance and leaves them its status
// until each is stopped; other instances' watches stay.
func TestAnEndWakesItsInstancesWatches(t *testing.T) {
	var w EndWatches[string]
	a1, stopA1 := w.Watch("a")
	a2, stopA2 := w.Watch("a")
	b, stopB := w.Watch("b")
	defer stopB()
	w.Ended("a", "Completed", true)
	for _, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Fatal("a watch of the ended instance was not woken")
		}
		st, ok := w.Told(ch)
		assert.True(t, ok)
		assert.Equal(t, "Completed", st)
	}
	select {
	case <-b:
		t.Fatal("another instance's watch was woken")
	default:
	}
	stopA1()
	stopA1() // twice is fine
	_, ok := w.Told(a1)
	assert.False(t, ok, "stopped: its status is forgotten")
	stopA2()

	c, stopC := w.Watch("c")
	defer stopC()
	w.Ended("c", "", false)
	<-c
	_, ok = w.Told(c)
	assert.False(t, ok, "an end that left no status: the waiter reads it")
}
