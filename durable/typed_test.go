package durable

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
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
