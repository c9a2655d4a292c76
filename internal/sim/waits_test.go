package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	rt "github.com/duroxide-go/cdb/durable"
)

// newPromptnessCheck is a run's waits with nothing but what checkPrompt
// reads: the recorder, the clock and the configuration.
func newPromptnessCheck(t *testing.T) (*completionWaits, *node) {
	t.Helper()
	viol := &violations{}
	e := &env{cfg: Config{HostSlowness: 1, Faults: Faults{ClockSkew: 50 * time.Millisecond}}, rec: newRecorder(viol), clock: &simClock{}}
	w := newCompletionWaits(t.Context(), e, nil, viol, func() []*node { return nil })
	n := &node{id: "n1", settings: nodeSettings{runtime: rt.Options{OrchestratorLockTimeout: time.Second}}}
	return w, n
}

func TestAWaitReturningWithinItsBoundOfTheEndIsNoViolation(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, seen.Add(w.bound(n)), seen.Add(-time.Second), seen)
	assert.Empty(t, w.viol.all())
}

func TestAWaitReturningPastItsBoundOfTheEndOnAnUnheldNodeIsAViolation(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	// A fault of a cross-partition query (partition key "") holds back no
	// read of the instance: it excuses nothing.
	w.env.rec.stalledFor(n.id)("", seen.Add(100*time.Millisecond), seen.Add(100*time.Millisecond))
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, seen.Add(w.bound(n)+time.Millisecond), seen, seen)
	vs := w.viol.all()
	require.Len(t, vs, 1)
	assert.Equal(t, invWait, vs[0].Invariant)
	assert.Equal(t, "i1", vs[0].Instance)
}

func TestAWaitLateAfterItsNodesPauseIsExcusedWithinItsBoundOfThePausesEnd(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	pauseEnd := seen.Add(2 * time.Second)
	w.env.rec.pausedFor(n.id)(seen.Add(-time.Second), pauseEnd)
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, pauseEnd.Add(w.bound(n)), seen, seen)
	assert.Empty(t, w.viol.all())
	assert.Equal(t, 1, w.totals.excused)

	w.checkPrompt(&waiter{e: &expectation{instance: "i2"}}, n, pauseEnd.Add(w.bound(n)+time.Millisecond), seen, seen)
	vs := w.viol.all()
	require.Len(t, vs, 1, "the bound counts again from the pause's end")
	assert.Equal(t, "i2", vs[0].Instance)
}

func TestAWaitLateAfterAFaultOnTheInstancesPartitionIsExcused(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	w.env.rec.stalledFor(n.id)("i1", seen.Add(time.Second), seen.Add(time.Second))
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, seen.Add(time.Second+w.bound(n)), seen, seen)
	assert.Empty(t, w.viol.all())
	assert.Equal(t, 1, w.totals.excused)
}

func TestAWaitWhoseNodeWentDownIsNotTimed(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	w.env.rec.nodeCrashed(n.id)
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, time.Now().Add(time.Minute), seen, seen)
	assert.Empty(t, w.viol.all())
}

func TestTheBoundCountsFromTheAttemptWhenItBeganAfterTheEndWasVisible(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	began := seen.Add(5 * time.Second) // a redone wait
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, began.Add(w.bound(n)), began, seen)
	assert.Empty(t, w.viol.all())
}

func TestAWaitStillOutPastItsBoundIsOverdueAndOneHeldBackSinceIsNot(t *testing.T) {
	w, n := newPromptnessCheck(t)
	past := time.Now().Add(-2 * w.bound(n))
	stuck := &waiter{e: &expectation{instance: "i1"}, node: n, began: past, seenEnd: past}
	w.waiters = []*waiter{stuck}
	assert.True(t, w.settled())
	assert.Same(t, n, stuck.overdue)

	paused := &node{id: "n2", settings: n.settings}
	w.env.rec.pausedFor(paused.id)(time.Now().Add(-time.Second), time.Now().Add(time.Second))
	held := &waiter{e: &expectation{instance: "i2"}, node: paused, began: past, seenEnd: past}
	w.waiters = append(w.waiters, held)
	assert.False(t, w.settled(), "a wait whose node is paused now is not overdue")
	assert.Nil(t, held.overdue)
}
