// Package sim is a seeded multi-node simulation of the Cosmos DB provider
// and the runtime: several nodes, each a CosmosProvider with its own
// runtime, share one in-memory account; a random workload runs on them
// while a fault transport injects throttling, timeouts, dropped
// connections, lost responses and latency spikes on every kind of request,
// nodes crash without cleanup and are replaced, locks are short (one node
// holds production's, with commits that take seconds) and clocks skewed,
// and sequences of hundreds of chained turns run beside the scenarios. At
// the end (and, where cheap, while it runs) the harness checks invariants
// that a durable-execution store must keep: every instance
// reaches the state and output its input determines, an event is consumed
// once and in order, an activity whose completion committed never runs
// again, a completion appears once in history, a session runs on one worker
// at a time, and nothing is left behind in the container.
//
// A run is determined by its Config and its seed: the workload, the node
// settings and the fault schedule's probabilities come from the seed.
// Goroutine interleavings are not replayed, so a seed reproduces the same
// conditions, usually the same failure, not the same trace.
//
// Files: config.go (what a run does, with a toggle per feature and fault),
// node.go (a node and its crash), faults.go (the fault transport),
// clock.go (the simulated clock and its jumps), hostspeed.go (timeouts
// scaled to the host), workload.go (orchestrations and activities, each
// with its expected outcome), scenarios.go (the random workload and its
// outside actions), shutdowns.go and trees.go (deploys, deletions of
// trees), values.go (large values), record.go (what the activities and
// transports observed, and what each node's provider handed its runtime),
// wire.go (the wire log), progress.go (the harness's bounded waits),
// invariants.go, and the scenarios and checks of one mechanism each:
// stamps.go (own writes), eager.go (eager activities and starts, and
// items left hidden), chains.go (chained turns), waits.go (completion
// waits), idle.go (the idle budget), sequences.go (long sequences),
// names.go (bounded names on the wire), prodlocks.go (the production node
// and its slow commits), cancels.go (cancellations and deletions of work
// locked eagerly), closes.go (closes racing chains); report.go, sim.go (a
// run), process.go (the two-process scenario over `cdb emulator`).
package sim
