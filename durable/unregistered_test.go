package durable

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// quickUnregistered gives work without a handler back after 5 ms, then
// 10 ms, and fails it on the third fetch (the default policy and count).
func quickUnregistered(o *Options) {
	o.UnregisteredBackoffBase, o.UnregisteredBackoffMax = 5*time.Millisecond, 20*time.Millisecond
}

// TestAMisspelledActivityFailsWithTheRegisteredNames: an activity nobody
// registered is given back twice with backoff, then fails (not as poison)
// with an error that names what is registered, suggests the closest
// name, matches ErrNotRegistered and is not retryable.
func TestAMisspelledActivityFailsWithTheRegisteredNames(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.activity("ChargeCard", func(ActivityContext, string) (string, error) { return "charged", nil })
		h.activity("Ship", func(ActivityContext, string) (string, error) { return "shipped", nil })
		h.orchestration("Order", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, err := ctx.ScheduleActivity("ChargeCrad", "").Await()
			if !errors.Is(err, ErrNotRegistered) || !IsNonRetryable(err) {
				return "", errors.New("not a non-retryable ErrNotRegistered")
			}
			return err.Error(), nil
		})
		h.run(quickUnregistered)
		h.start("misspelled-activity", "Order", "")
		assert.Equal(t, `activity "ChargeCrad" is not registered (registered: ChargeCard, Ship); did you mean "ChargeCard"?`+
			` [ApplicationError {"type":"durable.NotRegistered","non_retryable":true}]`, h.completed("misspelled-activity"))
	})
}

// TestAMisspelledOrchestrationFailsTheInstance: a start whose orchestration
// nobody registered fails the instance at once under
// UnregisteredFailAtOnce, named as started, with an error a client can
// branch on; a misspelled child fails its parent's await the same way.
func TestAMisspelledOrchestrationFailsTheInstance(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("OrderFlow", func(*OrchestrationContext, string) (string, error) { return "done", nil })
		h.orchestration("Parent", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, err := ctx.ScheduleSubOrchestration("OrderFlw", "").Await()
			return err.Error(), nil
		})
		h.run(func(o *Options) { o.Unregistered = UnregisteredFailAtOnce })
		h.start("misspelled-orchestration", "OrderFlw", "")
		st := h.wait("misspelled-orchestration")
		require.Equal(t, StateFailed, st.State)
		const message = `orchestration "OrderFlw" is not registered (registered: OrderFlow, Parent); did you mean "OrderFlow"?`
		assert.Equal(t, cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{},
			Message: message + ` [ApplicationError {"type":"durable.NotRegistered","non_retryable":true}]`}, st.Error)
		app, ok := ApplicationErrorOf(st.Error)
		require.True(t, ok)
		assert.ErrorIs(t, app, ErrNotRegistered)
		history, err := h.client.ReadHistory(h.ctx, "misspelled-orchestration")
		require.NoError(t, err)
		require.NotEmpty(t, history)
		started, ok := history[0].Kind.(cdb.OrchestrationStarted)
		require.True(t, ok, "the failure belongs to a started execution: %#v", history[0].Kind)
		assert.Equal(t, "OrderFlw", started.Name)

		h.start("parent", "Parent", "")
		assert.Equal(t, message+` [ApplicationError {"type":"durable.NotRegistered","non_retryable":true}]`, h.completed("parent"))
	})
}

// TestUnregisteredPolicies: when work without a handler fails, by policy.
func TestUnregisteredPolicies(t *testing.T) {
	defaults := Options{}.withDefaults()
	assert.False(t, defaults.failsUnregistered(2))
	assert.True(t, defaults.failsUnregistered(3))
	atOnce := Options{Unregistered: UnregisteredFailAtOnce}.withDefaults()
	assert.True(t, atOnce.failsUnregistered(1))
	duroxide := Options{Unregistered: UnregisteredBackoffUntilPoison}.withDefaults()
	assert.False(t, duroxide.failsUnregistered(1000))
}

// TestClosestNameSuggestsLikelyMisspellingsOnly: a near name is suggested,
// ignoring case; a far one is not.
func TestClosestNameSuggestsLikelyMisspellingsOnly(t *testing.T) {
	registered := []string{"ChargeCard", "Ship", "SendInvoice"}
	for name, want := range map[string]string{"ChargeCrad": "ChargeCard", "chargecard": "ChargeCard", "Shp": "Ship", "SendInvoices": "SendInvoice"} {
		got, ok := closestName(name, registered)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	_, ok := closestName("Refund", registered)
	assert.False(t, ok)
	assert.Equal(t, " (nothing is registered)", alternatives("X", nil))
}

// TestAMissingVersionNamesTheRegisteredOnes: a name registered at other
// versions is reported with those versions, not as a misspelling.
func TestAMissingVersionNamesTheRegisteredOnes(t *testing.T) {
	reg := NewRegistry()
	noop := func(*OrchestrationContext, string) (string, error) { return "", nil }
	require.NoError(t, reg.RegisterOrchestrationVersion("Order", "1.0.0", noop))
	require.NoError(t, reg.RegisterOrchestrationVersion("Order", "1.1.0", noop))
	assert.Equal(t, `orchestration "Order" version 2.0.0 is not registered (registered versions: 1.0.0, 1.1.0)`,
		reg.unregisteredOrchestration("Order", ptr("2.0.0")))
	assert.Equal(t, `activity "Charge" is not registered (nothing is registered)`, reg.unregisteredActivity("Charge"))
}

// TestARunningInstanceWaitsForARuntimeWithItsCode: an instance that has
// run is never failed as not registered, whatever the policy: a runtime
// without its orchestration (an older build during a deploy) gives its
// batch back with backoff, and a runtime with the code finishes it.
func TestARunningInstanceWaitsForARuntimeWithItsCode(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	with := newCosmosHarness(t, acct)
	waits := func(ctx *OrchestrationContext, _ string) (string, error) { return ctx.WaitForEvent("go").Await() }
	with.orchestration("Waits", waits)
	with.run()
	with.start("deployed", "Waits", "")
	with.waitForHistory("deployed", hasEvent[cdb.ExternalSubscribed])
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, with.rt.Shutdown(stop))

	without := newCosmosHarness(t, acct)
	backedOff := newSignalOnMessage(t, "orchestration not registered; abandoning with backoff")
	without.orchestration("SomethingElse", func(*OrchestrationContext, string) (string, error) { return "", nil })
	without.run(func(o *Options) {
		o.Unregistered = UnregisteredFailAtOnce
		o.UnregisteredBackoffBase = 50 * time.Millisecond
		o.Logger = slog.New(backedOff)
	})
	require.NoError(t, without.client.RaiseEvent(without.ctx, "deployed", "go", "approved"))
	awaitSignal(t, backedOff.seen, "the runtime without the code to back off")
	st, err := without.client.GetStatus(without.ctx, "deployed")
	require.NoError(t, err)
	require.Equal(t, StateRunning, st.State, "not failed: %v", st.Error)
	require.NoError(t, without.rt.Shutdown(stop))

	again := newCosmosHarness(t, acct)
	again.orchestration("Waits", waits)
	again.run()
	assert.Equal(t, "approved", again.completed("deployed"))
}
