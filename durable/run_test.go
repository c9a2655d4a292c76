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

// Run's context ending (a SIGTERM through signal.NotifyContext) lets the
// activity in flight finish and its result be stored, where Start's
// context ending abandons it.
func TestRunLetsTheWorkInFlightFinishWhenItsContextEnds(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h.activity("Pack", func(ctx ActivityContext, _ string) (string, error) {
		if runs.Add(1) == 1 {
			close(started)
		}
		select {
		case <-release:
			return "packed", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	h.orchestration("Order", func(ctx *OrchestrationContext, _ string) (string, error) {
		return ctx.ScheduleActivity("Pack", "").Await()
	})
	ctx, sigterm := context.WithCancel(context.Background())
	opts := fastOptions(t)
	opts.ShutdownTimeout = time.Minute
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, h.provider, h.registry, opts) }()
	h.start("order-run", "Order", "")
	<-started

	sigterm()
	time.AfterFunc(100*time.Millisecond, func() { close(release) })

	require.NoError(t, <-ran, "everything in flight finished in time")
	h.run() // the next process
	assert.Equal(t, "packed", h.completed("order-run"))
	assert.Equal(t, int32(1), runs.Load(), "the result stored before Run returned: no second run")
}

func TestRunReturnsStartsRefusal(t *testing.T) {
	err := Run(context.Background(), nil, NewRegistry(), Options{})
	assert.ErrorIs(t, err, ErrInvalidInput)
}
