package durable

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

func TestEncodeDecodeJSONRoundTrip(t *testing.T) {
	payload, err := EncodeJSON(addReq{A: 2, B: 3})
	require.NoError(t, err)
	assert.Equal(t, `{"a":2,"b":3}`, payload)
	back, err := DecodeJSON[addReq](payload)
	require.NoError(t, err)
	assert.Equal(t, addReq{A: 2, B: 3}, back)
}

func TestDecodeJSONErrorNamesTheType(t *testing.T) {
	for _, payload := range []string{"", "nope", `{"sum":"five"}`} {
		_, err := DecodeJSON[addRes](payload)
		require.Error(t, err, "payload %q", payload)
		assert.Contains(t, err.Error(), "as durable.addRes", "payload %q", payload)
	}
}

func TestDecodeJSONErrorAbbreviatesLongPayloads(t *testing.T) {
	_, err := DecodeJSON[addRes](strings.Repeat("x", 500))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 200)
	assert.Contains(t, err.Error(), `"...`, "the payload is cut")
}

func TestEncodeJSONErrorNamesTheType(t *testing.T) {
	_, err := EncodeJSON(make(chan int))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "chan int")
}

// settled is a future whose result is already known, as after a replay.
func settled(value string, err error) *Future {
	return &Future{octx: &OrchestrationContext{}, done: true, value: value, err: err}
}

func TestAwaitAsDecodesTheResult(t *testing.T) {
	res, err := AwaitAs[addRes](settled(`{"sum":5}`, nil))
	require.NoError(t, err)
	assert.Equal(t, addRes{Sum: 5}, res)

	_, err = AwaitAs[addRes](settled("HELLO", nil))
	assert.ErrorContains(t, err, `decode "HELLO" as durable.addRes`)
}

func TestAwaitAsReturnsTheTaskErrorUnchanged(t *testing.T) {
	failure := &TaskFailedError{Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "boom"}}
	_, err := AwaitAs[addRes](settled("", failure))
	assert.Same(t, failure, err)

	_, err = AwaitAs[addRes](settled("", ErrFutureCancelled))
	assert.ErrorIs(t, err, ErrFutureCancelled)
}

func TestTypedActivity(t *testing.T) {
	add := TypedActivity(func(_ ActivityContext, req addReq) (addRes, error) {
		if req.A < 0 {
			return addRes{}, errors.New("negative")
		}
		return addRes{Sum: req.A + req.B}, nil
	})
	ctx := ActivityContext{Context: context.Background(), name: "Add"}

	out, err := add(ctx, `{"a":2,"b":3}`)
	require.NoError(t, err)
	assert.Equal(t, `{"sum":5}`, out)

	_, err = add(ctx, `{"a":-1}`)
	assert.EqualError(t, err, "negative", "the handler's error is the activity's failure")

	_, err = add(ctx, "2+3")
	assert.ErrorContains(t, err, `activity Add input: durable: decode "2+3" as durable.addReq`)
}

func TestTypedOrchestration(t *testing.T) {
	double := TypedOrchestration(func(_ *OrchestrationContext, req addReq) (addRes, error) {
		return addRes{Sum: 2 * (req.A + req.B)}, nil
	})
	ctx := &OrchestrationContext{name: "Double"}

	out, err := double(ctx, `{"a":1,"b":2}`)
	require.NoError(t, err)
	assert.Equal(t, `{"sum":6}`, out)

	_, err = double(ctx, "")
	assert.ErrorContains(t, err, `orchestration Double input: durable: decode "" as durable.addReq`)
}

func TestRegisterTypedRejectsDuplicatesLikeRegister(t *testing.T) {
	r := NewRegistry()
	noop := func(ActivityContext, addReq) (addRes, error) { return addRes{}, nil }
	require.NoError(t, RegisterTypedActivity(r, "Add", noop))
	assert.ErrorContains(t, RegisterTypedActivity(r, "Add", noop), "already registered")
	require.NoError(t, RegisterTypedOrchestration(r, "Adder", func(*OrchestrationContext, addReq) (addRes, error) { return addRes{}, nil }))
	_, version, ok := r.resolveOrchestration("Adder", nil)
	require.True(t, ok)
	assert.Equal(t, DefaultVersion, version)
}

// A payload that does not encode is refused before anything is enqueued.
func TestTypedClientCallsRefuseUnencodablePayloads(t *testing.T) {
	p := memprovider.New(memprovider.Options{})
	t.Cleanup(func() { _ = p.Close() })
	c := NewClient(p)
	ctx := context.Background()

	assert.ErrorContains(t, c.StartOrchestrationTyped(ctx, "i", "Adder", make(chan int)), `start orchestration "i"`)
	assert.ErrorContains(t, c.RaiseEventTyped(ctx, "i", "Ready", func() {}), `raise event "Ready" on "i"`)
	depths, err := c.GetQueueDepths(ctx)
	require.NoError(t, err)
	assert.Zero(t, depths.OrchestratorQueue)
}

// A value json cannot encode is refused where the call's result comes: a
// future's at Await, StartDetachedJSON's and ContinueAsNewJSON's at return;
// nothing is emitted, so nothing can be recorded.
func TestTypedContextCallsRefuseUnencodableInputs(t *testing.T) {
	ctx := &OrchestrationContext{} // no engine: a refused call never suspends
	var unsupportedType *json.UnsupportedTypeError
	var unsupportedValue *json.UnsupportedValueError

	_, err := ctx.ScheduleActivityJSON("Add", make(chan int)).Await()
	assert.EqualError(t, err, `durable: schedule activity "Add": durable: encode chan int as JSON: json: unsupported type: chan int`)
	assert.ErrorAs(t, err, &unsupportedType)

	_, err = ctx.ScheduleSubOrchestrationJSON("Double", math.Inf(1)).Await()
	assert.EqualError(t, err, `durable: schedule sub-orchestration "Double": durable: encode float64 as JSON: json: unsupported value: +Inf`)
	assert.ErrorAs(t, err, &unsupportedValue)

	err = ctx.StartDetachedJSON("never", "Record", make(chan int))
	assert.EqualError(t, err, `durable: detached start of "Record" as "never": durable: encode chan int as JSON: json: unsupported type: chan int`)

	_, err = ctx.ContinueAsNewJSON(math.NaN())
	assert.EqualError(t, err, `durable: continue as new: durable: encode float64 as JSON: json: unsupported value: NaN`)

	f, err := ctx.ScheduleActivityTyped("Add", make(chan int))
	assert.Nil(t, f, "the deprecated call still refuses before it returns a future")
	assert.EqualError(t, err, `durable: schedule activity "Add": durable: encode chan int as JSON: json: unsupported type: chan int`)

	assert.Empty(t, ctx.drainEmitted())
}

// The same refusals in a running orchestration: the history holds its
// start and its end alone, and the detached instance was never created.
func TestTypedContextCallsThatDoNotEncodeRecordNothing(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		h.orchestration("Refusals", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, activityErr := ctx.ScheduleActivityJSON("Add", make(chan int)).Await()
			_, childErr := ctx.ScheduleSubOrchestrationJSON("Double", math.Inf(1)).Await()
			startErr := ctx.StartDetachedJSON("never", "Record", make(chan int))
			_, continueErr := ctx.ContinueAsNewJSON(make(chan int))
			return errors.Join(activityErr, childErr, startErr, continueErr).Error(), nil
		})
		h.run()
		h.start("refusals", "Refusals", "")
		assert.Equal(t, strings.Join([]string{
			`durable: schedule activity "Add": durable: encode chan int as JSON: json: unsupported type: chan int`,
			`durable: schedule sub-orchestration "Double": durable: encode float64 as JSON: json: unsupported value: +Inf`,
			`durable: detached start of "Record" as "never": durable: encode chan int as JSON: json: unsupported type: chan int`,
			`durable: continue as new: durable: encode chan int as JSON: json: unsupported type: chan int`,
		}, "\n"), h.completed("refusals"))

		history := h.waitForHistory("refusals", func([]cdb.Event) bool { return true })
		assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationCompleted"}, kindNames(history))
		instances, err := h.client.ListInstances(h.ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"refusals"}, instances)
	})
}

// double is a typed orchestration for the children of the tests below.
func double(_ *OrchestrationContext, in addRes) (addRes, error) { return addRes{Sum: 2 * in.Sum}, nil }

func TestScheduleActivityAndSubOrchestrationJSON(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		registerMixedActivities(t, h)
		require.NoError(t, RegisterTypedOrchestration(h.registry, "Double", double))
		require.NoError(t, RegisterTypedOrchestration(h.registry, "AddThenDouble", func(ctx *OrchestrationContext, req addReq) (addRes, error) {
			sum, err := AwaitAs[addRes](ctx.ScheduleActivityJSON("Add", req))
			if err != nil {
				return addRes{}, err
			}
			return AwaitAs[addRes](ctx.ScheduleSubOrchestrationJSON("Double", sum, WithInstanceID("typed-double")))
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "typed-parent", "AddThenDouble", addReq{A: 2, B: 3}))
		out, err := WaitForCompletionAs[addRes](h.ctx, h.client, "typed-parent", hostspeed.Scale(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, addRes{Sum: 10}, out)

		history := h.waitForHistory("typed-parent", func([]cdb.Event) bool { return true })
		assert.Equal(t, []cdb.ActivityScheduled{{Name: "Add", Input: `{"a":2,"b":3}`}}, eventsOf[cdb.ActivityScheduled](history))
		assert.Equal(t, []cdb.SubOrchestrationScheduled{{Name: "Double", Instance: "typed-double", Input: `{"sum":5}`}},
			eventsOf[cdb.SubOrchestrationScheduled](history))
	})
}

// A typed wait reads a typed event, and a typed detached start passes it on.
func TestWaitForEventAsAndStartDetachedJSON(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterTypedOrchestration(h.registry, "Record", func(_ *OrchestrationContext, a ack) (ack, error) { return a, nil }))
		require.NoError(t, RegisterTypedOrchestration(h.registry, "Relay", func(ctx *OrchestrationContext, _ struct{}) (string, error) {
			a, err := WaitForEventAs[ack](ctx, "Ready")
			if err != nil {
				return "", err
			}
			return "relayed", ctx.StartDetachedJSON("typed-detached", "Record", a)
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "typed-relay", "Relay", struct{}{}))
		require.NoError(t, h.client.RaiseEventTyped(h.ctx, "typed-relay", "Ready", ack{Ok: true}))

		out, err := WaitForCompletionAs[string](h.ctx, h.client, "typed-relay", hostspeed.Scale(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, "relayed", out)
		recorded, err := WaitForCompletionAs[ack](h.ctx, h.client, "typed-detached", hostspeed.Scale(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, ack{Ok: true}, recorded)
		history := h.waitForHistory("typed-relay", func([]cdb.Event) bool { return true })
		assert.Equal(t, []cdb.OrchestrationChained{{Name: "Record", Instance: "typed-detached", Input: `{"ok":true}`}},
			eventsOf[cdb.OrchestrationChained](history))
	})
}

// countdown is a typed loop's state, carried from execution to execution.
type countdown struct {
	Left  int `json:"left"`
	Turns int `json:"turns"`
}

func TestContinueAsNewJSON(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterTypedOrchestration(h.registry, "Countdown", func(ctx *OrchestrationContext, c countdown) (countdown, error) {
			if c.Left == 0 {
				return c, nil
			}
			_, err := ctx.ContinueAsNewJSON(countdown{Left: c.Left - 1, Turns: c.Turns + 1})
			return countdown{}, err
		}))
		h.run()
		require.NoError(t, h.client.StartOrchestrationTyped(h.ctx, "typed-countdown", "Countdown", countdown{Left: 2}))
		out, err := WaitForCompletionAs[countdown](h.ctx, h.client, "typed-countdown", hostspeed.Scale(time.Minute))
		require.NoError(t, err)
		assert.Equal(t, countdown{Left: 0, Turns: 2}, out)

		history := h.waitForHistory("typed-countdown", func([]cdb.Event) bool { return true })
		assert.Equal(t, uint64(3), history[0].ExecutionID)
		assert.Equal(t, `{"left":0,"turns":2}`, eventsOf[cdb.OrchestrationStarted](history)[0].Input)
	})
}
