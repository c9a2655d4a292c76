package durable

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// What ContinueAsNew's doc promises: the call never returns; the turn ends
// as continue-as-new, deferred calls run and what they do is not recorded.

func TestContinueAsNewNeverReturns(t *testing.T) {
	var after, deferred int
	fn := func(ctx *OrchestrationContext, _ string) (string, error) {
		defer func() {
			deferred++
			ctx.SetCustomStatus(ptr("set by a deferred call"))
		}()
		out, err := ctx.ContinueAsNew("next")
		after++
		return out, err
	}

	out := turnOn(t, fn, nil, startMessage("first"))
	require.Equal(t, turnContinueAsNew, out.result.kind)
	assert.Equal(t, "next", out.result.input)
	assert.Equal(t, []string{"OrchestrationStarted", "OrchestrationContinuedAsNew"}, kinds(out.delta),
		"the deferred call's custom status is not recorded")
	assert.Zero(t, after, "code after the call never ran")
	assert.Equal(t, 1, deferred, "the deferred call ran when the turn ended")

	// Replay, which a Replayer runs, ends the turn the same way.
	res, err := Replay(context.Background(), testInstance, 1, []cdb.Event{started("first")}, nil, fn)
	require.NoError(t, err)
	assert.Equal(t, StateContinuedAsNew, res.State)
	assert.Equal(t, "next", res.Output)
	assert.Empty(t, res.Delta)
	assert.Zero(t, after)
	assert.Equal(t, 2, deferred)
}

func TestContinueAsNewCannotBeUndoneByRecover(t *testing.T) {
	fn := func(ctx *OrchestrationContext, _ string) (out string, err error) {
		defer func() {
			if recover() != nil {
				out, err = "swallowed", nil
			}
		}()
		return ctx.ContinueAsNew("next")
	}
	out := turnOn(t, fn, nil, startMessage("first"))
	require.Equal(t, turnContinueAsNew, out.result.kind)
	assert.Equal(t, "next", out.result.input)
}
