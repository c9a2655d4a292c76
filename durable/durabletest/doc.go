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
package durabletest
