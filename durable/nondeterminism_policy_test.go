package durable

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// reserveThenApprove is an order workflow: one activity, then an approval.
// Deploying it with another first activity changes the code under the same
// name and version.
func reserveThenApprove(activity string) OrchestrationFunc {
	return func(ctx *OrchestrationContext, input string) (string, error) {
		if _, err := ctx.ScheduleActivity(activity, input).Await(); err != nil {
			return "", err
		}
		approval, err := ctx.WaitForEvent("approve").Await()
		if err != nil {
			return "", err
		}
		return "approved " + approval, nil
	}
}

// deployment is a harness on p running the Order workflow whose first
// activity is activity.
func deployment(t *testing.T, p cdb.Provider, activity string, tweak ...func(*Options)) *harness {
	h := newHarness(t, p)
	h.orchestration("Order", reserveThenApprove(activity))
	for _, name := range []string{"Reserve", "Charge"} {
		h.activity(name, func(_ ActivityContext, input string) (string, error) { return input, nil })
	}
	h.run(append([]func(*Options){retryParkedQuickly}, tweak...)...)
	return h
}

// retryParkedQuickly retries parked turns every few milliseconds, and would
// poison an instance after two counted attempts.
func retryParkedQuickly(o *Options) {
	o.UnregisteredBackoffBase, o.UnregisteredBackoffMax = 5*time.Millisecond, 20*time.Millisecond
	o.MaxAttempts = 2
}

// waitingForApproval runs the original Order workflow on p until instance
// waits for its approval, then stops that runtime (the deploy).
func waitingForApproval(t *testing.T, p cdb.Provider, instance string) {
	before := deployment(t, p, "Reserve")
	before.start(instance, "Order", "42")
	before.waitForHistory(instance, hasEvent[cdb.ExternalSubscribed])
	require.NoError(t, before.rt.Shutdown(context.Background()))
}

// waitParked waits until rt has parked instance at least parks times.
func waitParked(t *testing.T, rt *Runtime, instance string, parks uint32) ParkedInstance {
	var got ParkedInstance
	require.Eventually(t, func() bool {
		for _, p := range rt.ParkedInstances() {
			if p.Instance == instance && p.Parks >= parks {
				got = p
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "instance %s parked %d times", instance, parks)
	return got
}

const orderDivergence = `schedule mismatch at event 2: history has activity "Reserve", the code scheduled activity "Charge"`

// A deploy that changes the workflow parks the instance waiting for its
// approval instead of failing it: the approval's turn is retried, never
// counted as an attempt (it is parked more often than MaxAttempts), and the
// runtime's client says why it waits. Rolling the deploy back runs the
// parked turn with the approval, and the order completes.
func TestAChangedOrchestrationParksAndRollingBackHealsIt(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			p := pc.new(t)
			waitingForApproval(t, p, "order")

			changed := deployment(t, p, "Charge")
			require.NoError(t, changed.client.RaiseEvent(context.Background(), "order", "approve", "yes"))
			parked := waitParked(t, changed.rt, "order", 4)
			assert.Equal(t, orderDivergence, parked.Error)
			assert.Equal(t, "Order", parked.Orchestration)

			st, err := changed.rt.Client().GetStatus(context.Background(), "order")
			require.NoError(t, err)
			assert.Equal(t, StateRunning, st.State)
			require.NotNil(t, st.Parked, "the runtime's client shows the instance parked")
			assert.Equal(t, orderDivergence, st.Parked.Error)
			require.NoError(t, changed.rt.Shutdown(context.Background()))

			rolledBack := deployment(t, p, "Reserve")
			assert.Equal(t, "approved yes", rolledBack.completed("order"))
		})
	}
}

// A parked instance can still be ended: its cancellation fails it with the
// nondeterminism it was parked for, and it leaves the parked list.
func TestCancellingAParkedInstanceFailsIt(t *testing.T) {
	p := testProviders[0].new(t)
	waitingForApproval(t, p, "order")

	changed := deployment(t, p, "Charge")
	require.NoError(t, changed.client.RaiseEvent(context.Background(), "order", "approve", "yes"))
	waitParked(t, changed.rt, "order", 1)
	require.NoError(t, changed.client.CancelInstance(context.Background(), "order", "rolled forward"))
	st := changed.wait("order")
	require.Equal(t, StateFailed, st.State)
	assert.Equal(t, nondeterminism(orderDivergence), st.Error)
	assert.Empty(t, changed.rt.ParkedInstances())
}

// twoProcesses are two providers on one store: for the memory provider
// the same one twice, for Cosmos two providers on one fake account.
func twoProcesses(t *testing.T, name string) (a, b cdb.Provider) {
	if name == "memory" {
		p := testProviders[0].new(t)
		return p, p
	}
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	open := func() cdb.Provider {
		p, err := cdb.NewProvider(context.Background(), cdb.Config{
			Client: acct.Client(), PollInterval: 20 * time.Millisecond,
			ReconcileInterval: 100 * time.Millisecond, OutboxMinAge: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	return open(), open()
}

// divergedElsewhere is "order" waiting for its approval on p, then the
// changed deployment running there with event raised to it (its turn
// diverges), and a client of another process on the same store.
func divergedElsewhere(t *testing.T, provider, event, data string) (p cdb.Provider, changed *harness, other *Client) {
	p, elsewhere := twoProcesses(t, provider)
	waitingForApproval(t, p, "order")
	changed = deployment(t, p, "Charge")
	require.NoError(t, changed.client.RaiseEvent(context.Background(), "order", event, data))
	return p, changed, NewClient(elsewhere)
}

// A park is recorded in the store (cdb.ParkRecorder): a client with no
// runtime, on another provider over the same store, sees the instance
// parked, why, since when and how often; once rolling back heals it, the
// committed turn clears the record.
func TestAParkIsSeenByAClientOfAnotherProcess(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p, changed, other := divergedElsewhere(t, pc.name, "approve", "yes")
			var st Status
			require.Eventually(t, func() bool {
				var err error
				st, err = other.GetStatus(ctx, "order")
				return err == nil && st.Parked != nil && st.Parked.Parks >= 2
			}, 30*time.Second, 5*time.Millisecond, "another process's client reads the park, counted, from the store")
			assert.Equal(t, StateRunning, st.State)
			assert.Equal(t, "order", st.Parked.Instance)
			assert.Equal(t, orderDivergence, st.Parked.Error)
			assert.False(t, st.Parked.Since.IsZero())
			assert.True(t, st.Parked.RetryAt.After(st.Parked.Since), "retry %v after since %v", st.Parked.RetryAt, st.Parked.Since)
			assert.Empty(t, st.Parked.Orchestration, "only the parking runtime knows which registration diverged")

			own, err := changed.rt.Client().GetStatus(ctx, "order")
			require.NoError(t, err)
			require.NotNil(t, own.Parked)
			assert.Equal(t, "Order", own.Parked.Orchestration, "the parking runtime's client adds what it remembers")
			require.NoError(t, changed.rt.Shutdown(ctx))

			rolledBack := deployment(t, p, "Reserve")
			assert.Equal(t, "approved yes", rolledBack.completed("order"))
			st, err = other.GetStatus(ctx, "order")
			require.NoError(t, err)
			assert.Equal(t, StateCompleted, st.State)
			assert.Nil(t, st.Parked)
		})
	}
}

// The committed turn that heals a parked instance clears its record before
// the instance ends: a healed instance still running is not shown parked.
func TestAHealedInstanceIsNoLongerParkedInTheStore(t *testing.T) {
	for _, pc := range testProviders {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p, changed, other := divergedElsewhere(t, pc.name, "unrelated", "x")
			require.Eventually(t, func() bool {
				st, err := other.GetStatus(ctx, "order")
				return err == nil && st.Parked != nil
			}, 30*time.Second, 5*time.Millisecond, "the store records the park")
			require.NoError(t, changed.rt.Shutdown(ctx))

			rolledBack := deployment(t, p, "Reserve")
			require.Eventually(t, func() bool {
				st, err := other.GetStatus(ctx, "order")
				return err == nil && st.State == StateRunning && st.Parked == nil
			}, 30*time.Second, 5*time.Millisecond, "the healing turn committed and cleared the park")
			require.NoError(t, rolledBack.client.RaiseEvent(ctx, "order", "approve", "yes"))
			assert.Equal(t, "approved yes", rolledBack.completed("order"))
		})
	}
}

// refusedParks is a store that refuses every park record.
type refusedParks struct {
	cdb.Provider
	parks atomic.Int32
}

func (p *refusedParks) ParkOrchestrationItem(context.Context, string, time.Duration, string) error {
	p.parks.Add(1)
	return cdb.Retryable("park_orchestration_item", "service unavailable")
}

// A park the store refuses to record still gives the batch back with its
// attempt undone: the instance is parked more often than MaxAttempts and
// never made poison, and rolling back heals it.
func TestAParkTheStoreRefusesToRecordNeverCountsAnAttempt(t *testing.T) {
	mem := testProviders[0].new(t)
	waitingForApproval(t, mem, "order")

	p := &refusedParks{Provider: mem}
	changed := deployment(t, p, "Charge")
	require.NoError(t, changed.client.RaiseEvent(context.Background(), "order", "approve", "yes"))
	waitParked(t, changed.rt, "order", 4)
	assert.GreaterOrEqual(t, p.parks.Load(), int32(4), "every park tried the record first")
	st, err := changed.client.GetStatus(context.Background(), "order")
	require.NoError(t, err)
	assert.Equal(t, StateRunning, st.State, "not failed as poison")
	require.NoError(t, changed.rt.Shutdown(context.Background()))

	rolledBack := deployment(t, mem, "Reserve")
	assert.Equal(t, "approved yes", rolledBack.completed("order"))
}

// After the deploy that fixes its code, an operator resumes a parked
// instance (cdb.CosmosProvider.ResumeParked, cdb resume): the runtime with
// the matching code runs its parked turn at its next poll, not at the
// park's retry time an hour away.
func TestAResumedParkedInstanceRunsBeforeItsRetryTime(t *testing.T) {
	p := testProviders[1].new(t)
	cp := p.(*cdb.CosmosProvider)
	ctx := context.Background()
	retryInAnHour := func(o *Options) { o.UnregisteredBackoffBase, o.UnregisteredBackoffMax = time.Hour, time.Hour }
	waitingForApproval(t, p, "order")

	changed := deployment(t, p, "Charge", retryInAnHour)
	require.NoError(t, changed.client.RaiseEvent(ctx, "order", "approve", "yes"))
	waitParked(t, changed.rt, "order", 1)
	require.NoError(t, changed.rt.Shutdown(ctx))
	info, err := cp.GetInstanceInfo(ctx, "order")
	require.NoError(t, err)
	require.NotNil(t, info.Parked)
	require.WithinDuration(t, time.Now().Add(time.Hour), info.Parked.RetryAt, time.Minute, "parked for an hour")

	fixed := deployment(t, p, "Reserve", retryInAnHour)
	n, err := cp.ResumeParked(ctx, "order")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the approval")
	assert.Equal(t, "approved yes", fixed.completed("order"), "run now, not in an hour")
}
