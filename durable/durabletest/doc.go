// Package durabletest helps unit tests of orchestrations skip time: a
// manual Clock that the runtime and the provider both read, and a Cosmos DB
// provider on the in-memory account that runs on it.
//
// Two clocks decide when a durable timer fires, and a test must move both:
// the runtime's (durable.Options.Now) computes the instant a timer is due
// and stamps events, and the provider's (cdb.Config.Now) decides when the
// timer's message becomes visible, so the timer fires. A runtime on the
// Cosmos DB provider takes the provider's clock by default, so a provider
// on the Clock is enough there; with any other provider set both:
//
//	clock := durabletest.NewClock()
//	provider := durabletest.NewProvider(t, clock)
//	rt, err := durable.Start(ctx, provider, registry, clock.Options(durable.Options{}))
//	...
//	clock.Advance(time.Hour) // a one-hour timer fires at the provider's next poll
//
// Several processes share one store as they would a container: NewAccount
// makes the in-memory account on the clock, and NewProviderOn a process's
// provider on it. NewProviderOn says how a test crashes a process.
//
// Clock.AutoSkip moves the clock by itself, as Temporal's test environment
// skips time: once every process on the account is idle (nothing ready,
// nothing locked, nothing undelivered) for a short settle period, it
// advances the clock exactly to the next timer, retry backoff or delayed
// message, so a test needs no Advance and no synchronisation of its own:
//
//	clock := durabletest.NewClock()
//	provider := durabletest.NewProvider(t, clock)
//	rt, err := durable.Start(ctx, provider, registry, clock.Options(durable.Options{}))
//	...
//	skipper := clock.AutoSkip(t, provider) // stops when the test ends
//	skipper.AfterFunc(2*time.Hour, func() { client.RaiseEvent(ctx, "order-1", "paid", "") })
//
// It never skips while a turn or an activity runs (an activity's lock
// holds the clock still, however long it takes in real time), nor to a
// lock's expiry: a test that crashes a process advances past the lock
// timeouts itself. An instance waiting for an event with no timer leaves
// nothing to skip to; Skipper.WaitIdle waits for that state, and
// Skipper.AfterFunc raises the event at a time of the test clock. One
// more move: work one process wrote that another must take is seen by the
// other only as the clock passes its poll interval, so ready work that
// nobody takes for a while moves the clock that much (10 ms), never past
// the next timer.
package durabletest
