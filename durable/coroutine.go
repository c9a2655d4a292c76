package durable

import (
	"context"
	"fmt"
	"sync/atomic"
)

// coroutine runs an orchestration function in its own goroutine but only
// while the engine waits for it: the engine resumes it, it runs until it
// suspends (an Await on an unfinished future) or returns, and hands control
// back. Exactly one of the two runs at any time, so the state they share
// (the OrchestrationContext) needs no lock; the channel operations order it
// for the memory model and the race detector.
type coroutine struct {
	resume chan struct{}    // engine → function: run until the next suspension
	yield  chan coroutineEv // function → engine: suspended, returned, panicked or aborted

	started  bool
	finished bool
	// aborting is set by the engine before the last resume; the function
	// then unwinds instead of waiting again. It is atomic because the engine
	// may set it while the function still runs: after a step gave up
	// waiting (its context ended), stop aborts a function that is not
	// parked.
	aborting atomic.Bool
	// owed says a step gave up waiting for the function's handoff, which
	// is still to come: it must be received before the function can be
	// resumed (engine side only).
	owed bool
}

// coroutineEvKind says why the function handed control back.
type coroutineEvKind int

const (
	evSuspended coroutineEvKind = iota // waiting for a future
	evReturned                         // the function returned
	evPanicked                         // the function panicked
	evAborted                          // the function unwound after an abort
)

// coroutineEv is one handoff from the function to the engine.
type coroutineEv struct {
	kind   coroutineEvKind
	output string
	err    error
	panic  any
}

// abortTurn is the sentinel panic that unwinds a suspended orchestration
// when its turn ends.
type abortTurn struct{}

func newCoroutine() *coroutine {
	return &coroutine{resume: make(chan struct{}), yield: make(chan coroutineEv)}
}

// step runs the function until its next handoff: the first call starts it,
// later calls resume it. It fails only if ctx ends while the function runs,
// which happens only when orchestration code blocks outside the runtime.
func (c *coroutine) step(ctx context.Context, body func() (string, error)) (coroutineEv, error) {
	if c.finished {
		return coroutineEv{}, fmt.Errorf("durable: orchestration already finished")
	}
	if !c.started {
		c.started = true
		go c.run(body)
	} else {
		select {
		case c.resume <- struct{}{}:
		case <-ctx.Done():
			return coroutineEv{}, fmt.Errorf("durable: resume orchestration: %w", ctx.Err())
		}
	}
	return c.await(ctx)
}

// await receives the function's next handoff.
func (c *coroutine) await(ctx context.Context) (coroutineEv, error) {
	select {
	case ev := <-c.yield:
		c.owed = false
		if ev.kind != evSuspended {
			c.finished = true
		}
		return ev, nil
	case <-ctx.Done():
		c.owed = true
		return coroutineEv{}, fmt.Errorf("durable: wait for orchestration: %w", ctx.Err())
	}
}

// run is the function's goroutine: it reports how the function ended,
// turning the abort sentinel into a clean exit and any other panic into a
// failure the engine records.
func (c *coroutine) run(body func() (string, error)) {
	ev := coroutineEv{kind: evReturned}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(abortTurn); ok {
				ev = coroutineEv{kind: evAborted}
			} else {
				ev = coroutineEv{kind: evPanicked, panic: r}
			}
		}
		c.yield <- ev
	}()
	ev.output, ev.err = body()
	if c.aborting.Load() {
		// The code swallowed the abort panic and returned anyway; the turn
		// is over, so what it returned does not count.
		ev = coroutineEv{kind: evAborted}
	}
}

// suspend is called by the function (inside Await, Select, Join) when it
// cannot make progress: it hands control to the engine and waits to be
// resumed. It does not return once the turn has ended.
func (c *coroutine) suspend() {
	if c.aborting.Load() {
		panic(abortTurn{})
	}
	c.yield <- coroutineEv{kind: evSuspended}
	<-c.resume
	if c.aborting.Load() {
		panic(abortTurn{})
	}
}

// stop ends a function that is still suspended and waits for its goroutine
// to exit, so nothing outlives the turn. ctx bounds the wait for code that
// blocks outside the runtime.
func (c *coroutine) stop(ctx context.Context) error {
	if !c.started || c.finished {
		return nil
	}
	c.aborting.Store(true)
	if c.owed {
		// The function is still running from a step that gave up: take
		// its handoff first, or resuming it would wait forever.
		if _, err := c.await(ctx); err != nil {
			return err
		}
	}
	for !c.finished {
		if _, err := c.step(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}
