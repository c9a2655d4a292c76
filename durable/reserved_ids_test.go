package durable

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// The reserved "sub::" marker (duroxide 0.1.30): root ids may neither
// start with it nor contain "::sub::", so no root instance can occupy a
// child id the runtime will generate; an explicit child id may not start
// with it, since that is what marks a generated suffix.

func memoryHarness(t *testing.T) *harness {
	t.Helper()
	p := memprovider.New(memprovider.Options{LongPolling: true})
	t.Cleanup(func() { _ = p.Close() })
	return newHarness(t, p)
}

func TestClientStartRefusesRootIDsWithTheReservedMarker(t *testing.T) {
	h := memoryHarness(t)
	starts := map[string]func(instance string) error{
		"plain": func(instance string) error {
			return h.client.StartOrchestration(h.ctx, instance, "Any", "")
		},
		"versioned": func(instance string) error {
			return h.client.StartOrchestration(h.ctx, instance, "Any", "", WithVersion("1.0.0"))
		},
		"typed": func(instance string) error {
			return h.client.StartOrchestrationTyped(h.ctx, instance, "Any", 42)
		},
	}
	refused := map[string]string{
		"sub::job-1":              `durable: start orchestration: invalid input: instance id "sub::job-1" starts with the reserved sub-orchestration marker "sub::"`,
		"tenant-7::sub::order-42": `durable: start orchestration: invalid input: instance id "tenant-7::sub::order-42" contains the reserved sub-orchestration marker "::sub::"`,
	}
	for how, start := range starts {
		for instance, message := range refused {
			err := start(instance)
			require.ErrorIs(t, err, ErrInvalidInput, "%s start of %s", how, instance)
			assert.EqualError(t, err, message, "%s start of %s", how, instance)
		}
		for _, instance := range []string{"tenant-7::order-42", "order-2026-06-09", "i4::child-1", "subs::x", "a::subway"} {
			assert.NoError(t, start(instance+"-"+how), "%s start of %s", how, instance)
		}
	}
	instances, err := h.client.ListInstances(h.ctx)
	require.NoError(t, err)
	for instance := range refused {
		assert.NotContains(t, instances, instance)
	}
}

// A detached start is a root start too; StartOrchestration returns nothing,
// so the refusal panics, which fails the orchestration (duroxide panics).
func TestDetachedStartWithTheReservedMarkerFailsTheOrchestration(t *testing.T) {
	for _, instance := range []string{"sub::squatter", "victim::sub::2"} {
		t.Run(instance, func(t *testing.T) {
			h := memoryHarness(t)
			h.orchestration("Detached", func(*OrchestrationContext, string) (string, error) { return "detached-done", nil })
			h.orchestration("Parent", func(ctx *OrchestrationContext, _ string) (string, error) {
				ctx.StartOrchestration("Detached", instance, "payload")
				return "scheduled", nil
			})
			h.run()
			h.start("dp", "Parent", "")
			st := h.wait("dp")
			require.Equal(t, StateFailed, st.State)
			require.IsType(t, cdb.ApplicationError{}, st.Error)
			assert.Equal(t, cdb.AppPanicked{}, st.Error.(cdb.ApplicationError).Kind)
			assert.Contains(t, st.Error.DisplayMessage(), "reserved sub-orchestration marker")
			assert.Contains(t, st.Error.DisplayMessage(), instance)
			instances, err := h.client.ListInstances(h.ctx)
			require.NoError(t, err)
			assert.Equal(t, []string{"dp"}, instances, "no detached instance is created")
		})
	}
}

// StartDetached refuses the same ids with an error the orchestration reads,
// not a panic: nothing is started or recorded, and the orchestration goes on.
func TestStartDetachedRefusesTheReservedMarkerWithAnError(t *testing.T) {
	h := memoryHarness(t)
	h.orchestration("Detached", func(*OrchestrationContext, string) (string, error) { return "detached-done", nil })
	h.orchestration("Parent", func(ctx *OrchestrationContext, _ string) (string, error) {
		err := ctx.StartDetached("sub::squatter", "Detached", "payload")
		if !errors.Is(err, ErrInvalidInput) {
			return "", fmt.Errorf("want ErrInvalidInput, got %v", err)
		}
		return err.Error(), nil
	})
	h.run()
	h.start("dp", "Parent", "")
	assert.Equal(t, `durable: detached start of "Detached": invalid input: instance id "sub::squatter" starts with the reserved sub-orchestration marker "sub::"`,
		h.completed("dp"))
	history := h.waitForHistory("dp", func([]cdb.Event) bool { return true })
	assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationCompleted"}, kindNames(history))
	instances, err := h.client.ListInstances(h.ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"dp"}, instances, "no detached instance is created")
}

// An explicit child id that starts with "sub::" would be rewritten to
// "{parent}::sub::…"; it is refused instead: the future resolves at once
// with the error, nothing is scheduled and nothing is written.
func TestExplicitChildIDWithTheReservedPrefixIsRefused(t *testing.T) {
	h := memoryHarness(t)
	h.orchestration("Child", func(_ *OrchestrationContext, input string) (string, error) { return "child-done:" + input, nil })
	h.orchestration("Parent", func(ctx *OrchestrationContext, id string) (string, error) {
		out, err := ctx.ScheduleSubOrchestration("Child", "child-input", WithInstanceID(id)).Await()
		if errors.Is(err, ErrInvalidInput) {
			return "refused: " + err.Error(), nil
		}
		return "ok:" + out, err
	})
	h.run()
	h.start("p", "Parent", "sub::my-child")
	assert.Equal(t, `refused: durable: schedule sub-orchestration: invalid input: explicit child id "sub::my-child" starts with the reserved marker "sub::" of generated child ids`,
		h.completed("p"))
	history, err := h.client.ReadHistory(h.ctx, "p")
	require.NoError(t, err)
	assert.False(t, hasEvent[cdb.SubOrchestrationScheduled](history), "nothing is scheduled")
	for _, instance := range []string{"p::sub::my-child", "sub::my-child"} {
		st, err := h.client.GetStatus(h.ctx, instance)
		require.NoError(t, err)
		assert.Equal(t, StateNotFound, st.State, instance)
	}

	// The infix stays legal for explicit child ids: the runtime generates it
	// itself for grandchildren.
	h.start("q", "Parent", "tenant::sub::99")
	assert.Equal(t, "ok:child-done:child-input", h.completed("q"))
	assert.Equal(t, "child-done:child-input", h.completed("tenant::sub::99"))
}

// A history recorded before the rule, with a child scheduled under such an
// id, no longer replays: the code no longer schedules what it records, as
// duroxide documents ("rename the id before upgrading").
func TestRecordedChildWithTheReservedPrefixIsNondeterministic(t *testing.T) {
	history := []cdb.Event{
		started(""),
		ev(2, cdb.SubOrchestrationScheduled{Name: "Child", Instance: "sub::my-child", Input: "x"}),
		ev(3, cdb.ActivityScheduled{Name: "A"}),
	}
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		child := ctx.ScheduleSubOrchestration("Child", "x", WithInstanceID("sub::my-child"))
		work := ctx.ScheduleActivity("A", "")
		if _, err := child.Await(); err != nil {
			return work.Await()
		}
		return "child done", nil
	}
	out := turnOn(t, fn, history, cdb.ActivityCompletedMessage{Instance: testInstance, ExecutionID: 1, ID: 3, Result: "r"})
	requireNondeterminism(t, out)
}

func TestReservedMarkerRules(t *testing.T) {
	for id, refused := range map[string]bool{
		"sub::x": true, "a::sub::b": true, "a::sub::": true, "sub::": true,
		"a::sub": false, "subs::x": false, "a:sub::b": false, "tenant::order": false, "": false,
	} {
		assert.Equal(t, refused, checkRootInstanceID(id) != nil, "root id %q", id)
	}
	assert.ErrorIs(t, checkExplicitChildID("sub::x"), ErrInvalidInput)
	assert.NoError(t, checkExplicitChildID("a::sub::x"))
	assert.NoError(t, checkExplicitChildID(""), "no explicit id: the runtime generates one")
}
