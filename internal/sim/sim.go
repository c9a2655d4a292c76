package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// Run runs one simulation on a fresh in-memory account and returns its
// report; an error means the harness itself could not run.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	began := time.Now()
	rng := rand.New(rand.NewSource(cfg.Seed))
	ranges := cfg.PartitionKeyRanges
	if ranges <= 0 {
		ranges = 1 + rng.Intn(4)
	}
	clock := &simClock{}
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges, Now: clock.now})
	logged := slog.Handler(slog.DiscardHandler)
	if cfg.Logger != nil {
		logged = cfg.Logger.Handler()
	}
	flight := newFlightRecorder()
	logger := slog.New(&flightHandler{rec: flight, next: logged})
	viol := &violations{}
	stats := newStats()
	rec := newRecorder(viol)
	rec.stats = stats
	rec.progress = newProgress(cfg.Stall, cfg.HardCap)
	rec.stamps = newStamps(rec.isCrashed)
	rec.eager = newEagerItems(rec.isGone, clock.now)
	rec.eagerStarts = newEagerStartItems(rec.isGone, clock.now)
	rec.names = newBoundedNames()
	rec.cancels = newCancelWatch()
	rec.bell = newBellWatch(clock.now)
	e := &env{cfg: cfg, endpoint: acct.Endpoint(), key: acct.Key(), transport: acct.Transport(),
		rec: rec, stats: stats, logger: logger, progress: rec.progress, clock: clock, flight: flight}
	rec.chains = newChainedTurns(chainNodes{gone: rec.goneBy, stalled: rec.stalledBetween, writeFaulted: rec.writeFaulted, paused: rec.pausedBetween,
		jumped: clock.jumpedBetween, poll: e.pollInterval}, clock.now, cfg.Faults.ClockSkew,
		hostScaled(cfg, chainTurnAllowance))
	if cfg.Wire != nil && cfg.WireMention != "" {
		e.wire = newWireLog(cfg.Wire, cfg.WireMention)
	}

	// The observer bootstraps the container and watches; it sees no fault
	// and reconciles nothing, so it does not change what the nodes do.
	observer, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ReconcileInterval: time.Hour,
		AbandonedDeletionAge: time.Hour, Logger: logger.With("node", "observer"), Now: clock.now})
	if err != nil {
		return Report{}, fmt.Errorf("sim: observer: %w", err)
	}
	defer observer.Close()

	c := newCluster(e, rand.New(rand.NewSource(rng.Int63())))
	for slot := range c.nodes {
		if err := c.start(ctx, slot); err != nil {
			return Report{}, err
		}
	}
	defer c.shutdown()
	if err := c.startApp(ctx); err != nil {
		return Report{}, err
	}
	if err := c.startRaisers(ctx); err != nil {
		return Report{}, err
	}
	// The hooks' background work ends with the run.
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	h := &harness{env: e, caller: c.caller, crash: c.crashOne, observer: rt.NewClient(observer), viol: viol,
		expect: map[string]*expectation{}, eventCaller: c.eventCaller, startCaller: c.startCaller, shutdown: c.shutdownNode, nodes: c.all,
		clientNode: func(ctx context.Context) (*node, error) {
			return c.startClientNode(ctx, role{}, "deleter", func(s *nodeSettings, _ string) { s.provider.ProcessLeases = nil })
		},
		crashCommitting: func(_ context.Context, match func(string, []byte) bool, down time.Duration) {
			c.crashCommitting(runCtx, match, down)
		}}
	h.waits = newCompletionWaits(ctx, e, h.observer, viol, c.all)
	defer h.waits.stop()

	h.runWorkload(ctx, rng)
	logger.Info("workload done; faults off", "elapsed", time.Since(began))
	c.quiet()
	h.waitTerminal(ctx, instancesOf(h.expectations()))
	h.waits.finish(ctx)
	stats.Waits = h.waits.summary()
	h.checkLeftovers(ctx, observer.Container())
	// The quiet phase: with the workload drained (and, with
	// NeverStartedEvents, events held for ids that never start), an idle
	// probe process measures its requests while the checks read.
	held := h.raiseForNeverStarted(ctx, rng)
	probe := h.startIdleProbe(ctx)
	execs, crashed := e.rec.snapshot()
	h.checkOutcomes(ctx, sendsTwice(execs))
	h.checkHistories(ctx)
	checkSessions(viol, execs, crashed, clock)
	holders := &holderNodes{long: func(node string) bool {
		s, _ := e.polls.Load(node)
		settings, _ := s.(nodeSettings)
		return hasProductionLocks(settings.runtime)
	}, paused: rec.pausedBetween, writeFaulted: rec.writeFaulted, jumped: clock.jumpedBetween}
	checkOneHolder(viol, append(execs, e.rec.stillRunning(time.Now())...), e.rec.shutdownsSoFar(), crashed, holders)
	probe.check(ctx, viol, ranges, held)
	describe := func(node string) string {
		s, _ := e.polls.Load(node)
		settings, _ := s.(nodeSettings)
		return settings.describeSelf
	}
	rec.stamps.check(viol, describe)
	stats.Stamps = rec.stamps.summary()
	rec.eager.checkNotHidden(viol, eagerNodes{gone: rec.goneBy, heldBack: rec.lastHeldBack, jumped: clock.jumpedBetween, poll: e.pollInterval, workerLock: e.workerLock,
		slack: hostScaled(cfg, 200*time.Millisecond) + clientMaxDelay + 2*cfg.Faults.ClockSkew,
		slower: func(from, to time.Time) time.Duration {
			return slowerThanMeasured(cfg, h.waits.host, from, to, 200*time.Millisecond)
		}}, time.Now())
	rec.eager.check(viol, describe) // after checkNotHidden, whose excuses it takes
	rec.bell.check(viol, bellNodes{gone: rec.goneBy, stalled: rec.stalledBetween, jumped: clock.jumpedBetween, poll: e.pollInterval,
		slack: hostScaled(cfg, 200*time.Millisecond) + clientMaxDelay + 2*cfg.Faults.ClockSkew,
		slower: func(from, to time.Time) time.Duration {
			return slowerThanMeasured(cfg, h.waits.host, from, to, 200*time.Millisecond)
		}}, time.Now())
	stats.Bell = rec.bell.summary()
	stats.Eager = rec.eager.summary() + "; " + rec.eager.hiddenSummary()
	rec.eagerStarts.check(viol, describe)
	stats.EagerStarts = rec.eagerStarts.summary()
	rec.chains.nodes.slower = func(from, to time.Time, d time.Duration) time.Duration {
		return slowerThanMeasured(cfg, h.waits.host, from, to, d)
	}
	rec.chains.check(viol, describe)
	stats.Chains = rec.chains.summary()
	rec.names.check(viol)
	stats.Names = rec.names.summary()
	stats.Sequences = rec.sequencesSummary(rec.chains)
	locked, removed := rec.eager.lockedIn(isCancelScenario)
	stats.Cancels = rec.checkCancelled(viol, hostScaled(cfg, 5*time.Millisecond)).String() +
		fmt.Sprintf("; the EagerCancel instances' items locked eagerly=%d, removed while they waited=%d", locked, removed)
	stats.Closes = checkCloses(viol, rec.closesSoFar(), rec.pausedBetween, rec.chains, rec.eager, func(node string) time.Duration {
		return e.pollInterval(node) + hostScaled(cfg, 100*time.Millisecond) + 2*cfg.Faults.ClockSkew
	}).String()
	if cfg.Features.Retention {
		summary, err := checkRetention(ctx, viol, observer.Container())
		if err != nil {
			viol.add(invHarness, "", err.Error())
		}
		stats.Retention = summary
	}
	if cfg.Features.ProductionLocks {
		production := ""
		for _, n := range c.all() {
			if n.role.production {
				production = n.id + " " + n.settings.describeSelf
			}
		}
		stats.Production = rec.slow.summary(rec.eager, production) + "; " + holders.summary()
	}

	failing, pending := split(viol.all(), cfg.Pending)
	return Report{Seed: cfg.Seed, Elapsed: time.Since(began), Work: e.progress.work(), Slowness: cfg.HostSlowness, Stats: stats, Violations: failing, Pending: pending,
		Replay: ReplayCommand(cfg.Seed) + cfg.ReplayFlags, Flight: flight.forViolations(failing)}, nil
}

// ReplayCommand is the command that runs seed again with the test's
// configuration.
func ReplayCommand(seed int64) string {
	return fmt.Sprintf("go test ./internal/sim -run 'TestSimulation$' -count=1 -v -sim.seed=%d", seed)
}

// runWorkload starts scenarios (InFlight at a time) until Scenarios have
// started or Duration has passed, crashing nodes meanwhile, and waits for
// the scenarios' own steps to end.
func (h *harness) runWorkload(ctx context.Context, rng *rand.Rand) {
	cfg := h.env.cfg
	ks := kinds(cfg.Features, cfg.Faults)
	if len(ks) == 0 {
		return
	}
	crashCtx, stopCrashes := context.WithCancel(ctx)
	crashesDone := make(chan struct{})
	crashRng := rand.New(rand.NewSource(rng.Int63()))
	pauseRng := rand.New(rand.NewSource(rng.Int63()))
	go func() {
		defer close(crashesDone)
		go h.pauseLoop(crashCtx, pauseRng)
		h.crashLoop(crashCtx, crashRng)
	}()

	began := time.Now()
	slots := make(chan struct{}, cfg.InFlight)
	var wg sync.WaitGroup
	h.startLongSequences(ctx, rand.New(rand.NewSource(rng.Int63())), &wg)
	h.startSlowCommitRound(ctx, &wg)
	for idx := 0; ctx.Err() == nil; idx++ {
		if cfg.Duration > 0 && time.Since(began) >= cfg.Duration || cfg.Duration <= 0 && idx >= cfg.Scenarios {
			break
		}
		kind := ks[rng.Intn(len(ks))]
		srng := rand.New(rand.NewSource(rng.Int63()))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			h.scenario(ctx, idx, kind, srng)
		}()
	}
	wg.Wait()
	stopCrashes()
	<-crashesDone
}

// pauseLoop (Faults.Pauses) stalls a random live node every 4·CrashEvery
// on average (4·CrashWork units of progress apart at least), for longer than its locks and its process lease, then lets
// it resume.
func (h *harness) pauseLoop(ctx context.Context, rng *rand.Rand) {
	f := h.env.cfg.Faults
	if !f.Pauses || h.nodes == nil {
		return
	}
	for {
		since := h.env.progress.work()
		if !sleepCtx(ctx, time.Duration(rng.ExpFloat64()*float64(4*f.CrashEvery))) || !h.env.progress.awaitWork(ctx, since, 4*f.CrashWork) {
			return
		}
		up := h.nodes()
		if len(up) == 0 {
			continue
		}
		n := up[rng.Intn(len(up))]
		if n.role.production {
			continue // never paused
		}
		d := max(n.settings.runtime.OrchestratorLockTimeout, n.settings.runtime.WorkerLockTimeout) + time.Second
		if pl := n.settings.provider.ProcessLeases; pl != nil {
			d = max(d, pl.LeaseDuration+time.Second)
		}
		n.transport.pause(d)
		h.env.stats.crash("paused")
		h.env.logger.Info("node paused", "node", n.id, "for", d)
	}
}

// crashLoop crashes a node every CrashEvery on average, CrashWork units
// of progress apart at least.
func (h *harness) crashLoop(ctx context.Context, rng *rand.Rand) {
	f := h.env.cfg.Faults
	if !f.Crashes {
		return
	}
	for {
		since := h.env.progress.work()
		wait := time.Duration(rng.ExpFloat64() * float64(f.CrashEvery))
		if !sleepCtx(ctx, wait) || !h.env.progress.awaitWork(ctx, since, f.CrashWork) {
			return
		}
		h.crash(ctx)
	}
}

func instancesOf(es []*expectation) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.instance
	}
	return out
}
