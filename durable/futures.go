package durable

// futureKind says what a future waits for; it decides how it resolves and
// what cancelling it means.
type futureKind int

const (
	futureActivity futureKind = iota
	futureTimer
	futureExternal
	futureQueue
	futureSubOrchestration
	futureFirstOf      // a wait with a timeout: the first of its parts (events.go)
	futureRetried      // attempts of an activity or child by a RetryPolicy (retry.go)
	futureCancellation // a cancellation request, for code that handles it (cancellation.go)
)

// Future is durable work scheduled by an orchestration. Its result comes
// from the history, so awaiting it is deterministic across replays.
type Future struct {
	octx  *OrchestrationContext
	token uint64
	kind  futureKind
	retry *retrier // futureRetried only

	done  bool
	value string
	err   error

	parts      []*Future // futureFirstOf: the wait, then its timer
	timeoutErr error     // futureFirstOf: the error when the timer wins
}

func (c *OrchestrationContext) newFuture(kind futureKind, a action) *Future {
	return c.track(&Future{octx: c, token: c.emit(a), kind: kind})
}

// refusedFuture is a future for work refused before anything was
// scheduled: it is done, Await returns err, and no action is recorded, so
// every replay refuses it the same way.
func (c *OrchestrationContext) refusedFuture(kind futureKind, err error) *Future {
	return &Future{octx: c, kind: kind, done: true, err: err}
}

// Await blocks until the work is done and returns its result: an activity's
// or sub-orchestration's output (or a *TaskFailedError), an event's data,
// or "" for a timer. A future that lost a Select returns ErrFutureCancelled.
func (f *Future) Await() (string, error) {
	for !f.resolve() {
		f.octx.co.suspend()
	}
	return f.value, f.err
}

// resolve reports whether the result is available, caching it.
func (f *Future) resolve() bool {
	if f.done {
		return true
	}
	c := f.octx
	switch f.kind {
	case futureRetried:
		if !f.retry.advance() {
			return false
		}
		f.value, f.err = f.retry.value, f.retry.err
	case futureActivity, futureTimer, futureSubOrchestration:
		r, ok := c.results[f.token]
		if !ok {
			return false
		}
		f.value, f.err = r.value, r.err
	case futureExternal:
		id, bound := c.bindings[f.token]
		if !bound {
			return false
		}
		data, ok := c.external.lookup(id)
		if !ok {
			return false
		}
		f.value = data
		c.external.read[id] = true
	case futureQueue:
		id, bound := c.bindings[f.token]
		if !bound {
			return false
		}
		data, ok := c.queue.lookup(id)
		if !ok {
			return false
		}
		f.value = data
		c.queueRead[id] = true
	case futureFirstOf:
		if !f.resolveFirstOf() {
			return false
		}
	case futureCancellation:
		if !c.cancellation.requested {
			return false
		}
		f.value = c.cancellation.reason
	}
	f.done = true
	return true
}

// drop cancels a future that lost a Select: its scheduled work is cancelled
// at the end of the turn and Await returns ErrFutureCancelled. A
// cancellation request's future never loses: the request still comes.
func (f *Future) drop() {
	if f.kind == futureCancellation {
		return
	}
	f.cancel(droppedFutureReason, ErrFutureCancelled)
}

// cancel ends a future with err and cancels its work at the end of the
// turn, recording reason in the breadcrumbs.
func (f *Future) cancel(reason string, err error) {
	f.done, f.value, f.err = true, "", err
	switch {
	case f.kind == futureFirstOf:
		for _, part := range f.parts { // its own work is its parts'
			if !part.done {
				part.cancel(reason, err)
			}
		}
	case f.retry != nil:
		f.retry.cancelAttempt(reason, err)
	default:
		f.octx.dropped = append(f.octx.dropped, droppedFuture{token: f.token, kind: f.kind, reason: reason})
		f.octx.cancelAtDrop(f)
	}
}

// Result is one future's outcome, as Join returns it.
type Result struct {
	Value string // the future's output, as Await returns it
	Err   error  // the future's error, as Await returns it
}

// Select blocks until one of the futures is done and returns its index; the
// first in argument order wins when several are. The others lose: their
// activities and sub-orchestrations are cancelled, their subscriptions
// dropped. Read the winner with Await, which then returns at once.
func (c *OrchestrationContext) Select(futures ...*Future) int {
	if len(futures) == 0 {
		panic("durable: Select needs at least one future")
	}
	for {
		for i, f := range futures {
			if f.resolve() {
				c.dropLosers(futures, i)
				return i
			}
		}
		c.co.suspend()
	}
}

func (c *OrchestrationContext) dropLosers(futures []*Future, winner int) {
	for i, f := range futures {
		if i != winner && !f.done {
			f.drop()
		}
	}
}

// Join blocks until every future is done and returns their results in
// argument order.
func (c *OrchestrationContext) Join(futures ...*Future) []Result {
	for {
		all := true
		for _, f := range futures {
			if !f.resolve() {
				all = false // keep resolving the rest: results are cached
			}
		}
		if all {
			break
		}
		c.co.suspend()
	}
	out := make([]Result, len(futures))
	for i, f := range futures {
		out[i] = Result{Value: f.value, Err: f.err}
	}
	return out
}
