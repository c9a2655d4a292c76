package sim

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// newPromptnessCheck is a run's waits with nothing but what checkPrompt
// reads: the recorder, the clock and the configuration.
func newPromptnessCheck(t *testing.T) (*completionWaits, *node) {
	t.Helper()
	viol := &violations{}
	e := &env{cfg: Config{HostSlowness: 1, Faults: Faults{ClockSkew: 50 * time.Millisecond}}, rec: newRecorder(viol), clock: &simClock{}, logger: slog.New(slog.DiscardHandler)}
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

// The bound is drawn for the host as the run measured it at its start; a
// host measured slower while the wait ran widens it in proportion, and a
// wait past the widened bound is still a violation.
func TestAWaitLateWhileTheHostWasMeasuredSlowerIsWithinItsWidenedBound(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	w.host.record(seen.Add(time.Second), 3) // three times slower than at the start (1)
	widened := w.boundOver(n, seen, seen.Add(10*time.Second))
	assert.Equal(t, 3*w.bound(n), widened)

	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, seen.Add(widened), seen, seen)
	assert.Empty(t, w.viol.all())
	assert.Equal(t, 1, w.totals.slowed)

	w.checkPrompt(&waiter{e: &expectation{instance: "i2"}}, n, seen.Add(widened+time.Millisecond), seen, seen)
	vs := w.viol.all()
	require.Len(t, vs, 1, "past the widened bound a wait is late")
	assert.Equal(t, "i2", vs[0].Instance)
}

// Only how the host was while the wait ran counts: a slow sample after it
// returned, or one superseded before it began, widens nothing; the last
// sample before it began still describes the host when it began.
func TestOnlyTheSamplesOfTheWaitsSpanWidenItsBound(t *testing.T) {
	w, n := newPromptnessCheck(t)
	seen := time.Now()
	returned := seen.Add(w.bound(n) + 100*time.Millisecond)
	w.host.record(seen.Add(-4*time.Second), 5) // superseded by the next
	w.host.record(seen.Add(-2*time.Second), 1) // the host when the wait began
	w.host.record(returned.Add(time.Second), 5)
	assert.Equal(t, w.bound(n), w.boundOver(n, seen, returned))
	w.checkPrompt(&waiter{e: &expectation{instance: "i1"}}, n, returned, seen, seen)
	require.Len(t, w.viol.all(), 1)

	w.host.record(seen.Add(-time.Second), 2) // now the last before it began
	assert.Equal(t, 2*w.bound(n), w.boundOver(n, seen, returned))
}

// However slow the host reads, the bound stays finite: a wait that never
// learns of its end is overdue once past it.
func TestTheWidenedBoundHasACeiling(t *testing.T) {
	w, n := newPromptnessCheck(t)
	past := time.Now().Add(-time.Hour)
	w.host.record(past.Add(time.Second), 1e6)
	assert.Equal(t, time.Duration(maxWatchedSlowness)*w.bound(n), w.boundOver(n, past, time.Now()))

	stuck := &waiter{e: &expectation{instance: "i1"}, node: n, began: past, seenEnd: past}
	w.waiters = []*waiter{stuck}
	assert.True(t, w.settled())
	assert.Same(t, n, stuck.overdue)
	assert.Equal(t, time.Duration(maxWatchedSlowness)*w.bound(n), stuck.overdueBound)
}

// A wait still out past the bound drawn at the start, while the host is
// measured slower, is not overdue yet.
func TestAWaitStillOutWhileTheHostIsSlowIsNotOverdueBeforeItsWidenedBound(t *testing.T) {
	w, n := newPromptnessCheck(t)
	from := time.Now().Add(-2 * w.bound(n))
	w.host.record(from.Add(time.Millisecond), 4)
	out := &waiter{e: &expectation{instance: "i1"}, node: n, began: from, seenEnd: from}
	w.waiters = []*waiter{out}
	assert.False(t, w.settled())
	assert.Nil(t, out.overdue)
}

// The watch samples the host while the run's waits go on, and stops with
// them.
func TestTheHostWatchSamplesUntilTheWaitsStop(t *testing.T) {
	w, _ := newPromptnessCheck(t)
	w.host.start(w.ctx, &w.wg)
	require.Eventually(t, func() bool { return w.host.slowest() >= 1 }, time.Minute, 10*time.Millisecond)
	w.stop()
}

func TestAWaitThatMetAnInjectedRefusalBurstIsRedoneAndAnyOtherFailureIsAViolation(t *testing.T) {
	w, n := newPromptnessCheck(t)
	refused := fmt.Errorf("durable: wait for %q: %w", "i1", cdb.ToProviderError("ReadOrchestrationStatus", &cdb.CosmosError{Operation: "ReadItem", StatusCode: 403, Message: injectedFaultMessage}))
	assert.Equal(t, attemptRedo, w.answered(&waiter{e: &expectation{instance: "i1"}}, n, waitAnswer{err: refused}, &waitCounts{}))
	assert.Empty(t, w.viol.all())

	notInjected := fmt.Errorf("durable: wait for %q: %w", "i2", cdb.ToProviderError("ReadOrchestrationStatus", &cdb.CosmosError{Operation: "ReadItem", StatusCode: 403, Message: "Forbidden"}))
	assert.Equal(t, attemptDone, w.answered(&waiter{e: &expectation{instance: "i2"}}, n, waitAnswer{err: notInjected}, &waitCounts{}))
	vs := w.viol.all()
	require.Len(t, vs, 1, "a refusal the run did not inject is the wait's failure")
	assert.Equal(t, invWait, vs[0].Invariant)
}

// The harness's calls (starts, events, deletes) try again after a burst of
// refusals the run injected, past the client's own tries: a start refused
// so was reported as the harness's failure, and its instance as stuck. A
// refusal the run did not inject is returned at once.
func TestTheHarnessTriesACallAgainAfterAnInjectedRefusalBurst(t *testing.T) {
	injected := cdb.ToProviderError("EnqueueForOrchestrator", &cdb.CosmosError{Operation: "CreateItem", StatusCode: 401, Message: injectedFaultMessage})
	tries := 0
	err := retry(context.Background(), newStats(), nil, func(context.Context) error {
		if tries++; tries == 1 {
			return fmt.Errorf("durable: start orchestration: %w", injected)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 2, tries)

	refused := cdb.ToProviderError("EnqueueForOrchestrator", &cdb.CosmosError{Operation: "CreateItem", StatusCode: 401, Message: "Unauthorized"})
	tries = 0
	err = retry(context.Background(), newStats(), nil, func(context.Context) error { tries++; return refused })
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, 1, tries)
}
