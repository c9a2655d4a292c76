package durable

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's samples 14 and 16–19 (its tests/e2e_samples.rs): a detached
// start before an activity, and typed (JSON) payloads.

// addReq, addRes and ack are the samples' serde structs; their JSON field
// names are duroxide's, so the payloads in history are the same bytes.
type addReq struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addRes struct {
	Sum int `json:"sum"`
}

type ack struct {
	Ok bool `json:"ok"`
}

// kindNames lists the serde type tags of a history, in order.
func kindNames(history []cdb.Event) []string {
	names := make([]string, len(history))
	for i, ev := range history {
		names[i] = ev.Kind.Type()
	}
	return names
}

// detached_then_activity: a detached start followed by an awaited activity.
// The start is recorded as OrchestrationChained; the activity's completion
// turn replays it against the start action before reaching the activity, so
// a missing record would fail the parent with nondeterminism.
func TestSampleDetachedThenActivity(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.activity("Echo", func(_ ActivityContext, input string) (string, error) { return input, nil })
		h.orchestration("Child", func(ctx *OrchestrationContext, input string) (string, error) {
			if _, err := ctx.ScheduleTimer(5 * time.Millisecond).Await(); err != nil {
				return "", err
			}
			return "child-" + input, nil
		})
		h.orchestration("Parent", func(ctx *OrchestrationContext, _ string) (string, error) {
			if err := ctx.StartDetached("detached-child", "Child", "payload"); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Echo", "hello").Await()
		})
		h.run()
		h.start("ParentInstance", "Parent", "")
		assert.Equal(t, "hello", h.completed("ParentInstance"))
		assert.Equal(t, "child-payload", h.completed("detached-child"))

		history := h.waitForHistory("ParentInstance", func([]cdb.Event) bool { return true })
		assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationChained", "ActivityScheduled", "ActivityCompleted", "OrchestrationCompleted"},
			kindNames(history), "the completion turn replayed the chained start, then the activity")
		assert.Equal(t, []cdb.OrchestrationChained{{Name: "Child", Instance: "detached-child", Input: "payload"}},
			eventsOf[cdb.OrchestrationChained](history))
		child, err := h.client.GetInstanceInfo(h.ctx, "detached-child")
		require.NoError(t, err)
		assert.Nil(t, child.ParentInstanceID, "a detached start is an independent root")
	})
}

// typed_activity_and_orchestration: a typed orchestration awaits a typed
// activity; inputs and outputs travel as JSON of the structs.
func TestSampleTypedActivityAndOrchestration(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterTypedActivity(h.registry, "Add", func(_ ActivityContext, req addReq) (addRes, error) {
			return addRes{Sum: req.A + req.B}, nil
		}))
		require.NoError(t, RegisterTypedOrchestration(h.registry, "Adder", func(ctx *OrchestrationContext, req addReq) (addRes, error) {
			return AwaitAs[addRes](ctx.ScheduleActivityJSON("Add", req))
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "inst-typed-add", "Adder", addReq{A: 2, B: 3}))
		out, err := WaitForCompletionAs[addRes](h.ctx, h.client, "inst-typed-add", 15*time.Second)
		require.NoError(t, err)
		assert.Equal(t, addRes{Sum: 5}, out)

		history := h.waitForHistory("inst-typed-add", func([]cdb.Event) bool { return true })
		started := eventsOf[cdb.OrchestrationStarted](history)
		require.Len(t, started, 1)
		assert.JSONEq(t, `{"a":2,"b":3}`, started[0].Input)
		assert.Equal(t, []cdb.ActivityScheduled{{Name: "Add", Input: `{"a":2,"b":3}`}}, eventsOf[cdb.ActivityScheduled](history))
		assert.Equal(t, []cdb.ActivityCompleted{{Result: `{"sum":5}`}}, eventsOf[cdb.ActivityCompleted](history))
		assert.Equal(t, []cdb.OrchestrationCompleted{{Output: `{"sum":5}`}}, eventsOf[cdb.OrchestrationCompleted](history))
	})
}

// typed_event: an orchestration awaits a typed external event Ack{ok} and
// returns it re-encoded, as a JSON string.
func TestSampleTypedEvent(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterTypedOrchestration(h.registry, "WaitAck", func(ctx *OrchestrationContext, _ struct{}) (string, error) {
			a, err := WaitForEventAs[ack](ctx, "Ready")
			if err != nil {
				return "", err
			}
			return EncodeJSON(a)
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "inst-typed-ack", "WaitAck", struct{}{}))
		h.waitForHistory("inst-typed-ack", hasEvent[cdb.ExternalSubscribed]) // as duroxide's sample, which drops earlier events
		require.NoError(t, h.client.RaiseEventTyped(h.ctx, "inst-typed-ack", "Ready", ack{Ok: true}))

		out, err := WaitForCompletionAs[string](h.ctx, h.client, "inst-typed-ack", 15*time.Second)
		require.NoError(t, err)
		assert.Equal(t, `{"ok":true}`, out)
		history := h.waitForHistory("inst-typed-ack", func([]cdb.Event) bool { return true })
		assert.Equal(t, []cdb.ExternalEvent{{Name: "Ready", Data: `{"ok":true}`}}, eventsOf[cdb.ExternalEvent](history))
	})
}

// An event whose data is not JSON of the awaited type fails the
// orchestration with an error naming that type.
func TestTypedEventThatDoesNotDecodeFailsNamingType(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterTypedOrchestration(h.registry, "WaitAck", func(ctx *OrchestrationContext, _ struct{}) (ack, error) {
			return AwaitAs[ack](ctx.WaitForEvent("Ready"))
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "inst-bad-ack", "WaitAck", struct{}{}))
		h.waitForHistory("inst-bad-ack", hasEvent[cdb.ExternalSubscribed])
		require.NoError(t, h.client.RaiseEvent(h.ctx, "inst-bad-ack", "Ready", "yes"))

		_, err := WaitForCompletionAs[ack](h.ctx, h.client, "inst-bad-ack", 15*time.Second)
		var failed *OrchestrationFailedError
		require.ErrorAs(t, err, &failed)
		assert.Contains(t, failed.Status.Error.DisplayMessage(), `decode "yes" as durable.ack`)
	})
}

// raceTypedAndString races a typed activity (Add) against a string one
// (Upper) and reports the winner, as samples 18 and 19 do.
func raceTypedAndString(ctx *OrchestrationContext, req addReq, word string) (string, error) {
	typed := ctx.ScheduleActivityJSON("Add", req)
	str := ctx.ScheduleActivity("Upper", word)
	if ctx.Select(typed, str) == 0 {
		res, err := AwaitAs[addRes](typed)
		return fmt.Sprintf("sum=%d", res.Sum), err
	}
	up, err := str.Await()
	return "up=" + up, err
}

// registerMixedActivities registers the string activity Upper and the typed
// activity Add.
func registerMixedActivities(t *testing.T, h *harness) {
	h.activity("Upper", func(_ ActivityContext, input string) (string, error) { return strings.ToUpper(input), nil })
	require.NoError(t, RegisterTypedActivity(h.registry, "Add", func(_ ActivityContext, req addReq) (addRes, error) {
		return addRes{Sum: req.A + req.B}, nil
	}))
}

// requireWinnerRecordedFirst checks that the race's output names the
// activity whose completion the history recorded first: Select picks the
// winner in history order, so replays pick it again.
func requireWinnerRecordedFirst(t *testing.T, h *harness, instance, output, typedWin, stringWin string) {
	t.Helper()
	history := h.waitForHistory(instance, func([]cdb.Event) bool { return true })
	completions := eventsOf[cdb.ActivityCompleted](history)
	require.NotEmpty(t, completions)
	want := stringWin
	if strings.HasPrefix(completions[0].Result, "{") { // Add's JSON, not Upper's word
		want = typedWin
	}
	assert.Equal(t, want, output, "first completion recorded: %q", completions[0].Result)
}

// mixed_string_and_typed_typed_orch: a typed orchestration selects over a
// typed and a string activity.
func TestSampleMixedStringAndTypedTypedOrch(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		registerMixedActivities(t, h)
		require.NoError(t, RegisterTypedOrchestration(h.registry, "MixedTypedOrch", func(ctx *OrchestrationContext, req addReq) (string, error) {
			return raceTypedAndString(ctx, req, "hello")
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "inst-mixed-typed", "MixedTypedOrch", addReq{A: 1, B: 2}))
		out, err := WaitForCompletionAs[string](h.ctx, h.client, "inst-mixed-typed", 15*time.Second)
		require.NoError(t, err)
		assert.Contains(t, []string{"sum=3", "up=HELLO"}, out)
		requireWinnerRecordedFirst(t, h, "inst-mixed-typed", out, "sum=3", "up=HELLO")
		st, err := h.client.GetStatus(h.ctx, "inst-mixed-typed")
		require.NoError(t, err)
		assert.Equal(t, `"`+out+`"`, st.Output, "a typed orchestration's string output is stored as a JSON string")
	})
}

// mixed_string_and_typed_string_orch: the same race in a string
// orchestration.
func TestSampleMixedStringAndTypedStringOrch(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		registerMixedActivities(t, h)
		h.orchestration("MixedStringOrch", func(ctx *OrchestrationContext, _ string) (string, error) {
			return raceTypedAndString(ctx, addReq{A: 5, B: 7}, "race")
		})
		h.run()
		h.start("inst-mixed-string", "MixedStringOrch", "")
		out := h.completed("inst-mixed-string")
		assert.Contains(t, []string{"sum=12", "up=RACE"}, out)
		requireWinnerRecordedFirst(t, h, "inst-mixed-string", out, "sum=12", "up=RACE")
	})
}
