package durable

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A step that gives up waiting (its context ended while orchestration code
// blocked outside the runtime) leaves the function running; stopping it
// then must not race with the function reaching its next suspension. The
// function is let go once stop has begun (it marked the function aborting),
// so the two overlap; the race detector checks this test.
func TestStopAfterAStepGaveUpDoesNotRace(t *testing.T) {
	c := newCoroutine()
	release := make(chan struct{})
	body := func() (string, error) {
		<-release // code blocking outside the runtime
		c.suspend()
		return "never", nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.step(ctx, body)
	require.ErrorIs(t, err, context.Canceled, "the step gave up: its context had ended")

	go func() {
		for !c.aborting.Load() {
			runtime.Gosched()
		}
		close(release)
	}()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	require.NoError(t, c.stop(stopCtx))
}
