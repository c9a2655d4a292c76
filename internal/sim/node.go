package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// role is what kind of node a slot runs; a replacement keeps its slot's
// role, so every tag and queue keeps a node that serves it.
type role struct {
	// full nodes run orchestrations and every activity tag; slot 0 is one,
	// so the workload can always finish.
	full bool
	// oldBuild nodes' orchestration dispatchers replay no version in use
	// (a rolling upgrade's old build): they must not hold work up.
	oldBuild bool
	// badClock nodes run activities only, on a clock minutes to an hour
	// ahead (Faults.BadClock).
	badClock bool
	// starter nodes (Features.FirstTurnStarts) run orchestrations with
	// long polling and eager dispatch, at least four dispatchers: the
	// first-turn rounds start instances through them, so that their
	// waiting fetches take the starts (first_turn_start.go).
	starter bool
	// production nodes (Features.ProductionLocks) hold locks of
	// production's length, renewed a buffer before they expire; they are
	// never crashed, paused or shut down (prodlocks.go).
	production bool
}

// nodeSettings are one node's random settings.
type nodeSettings struct {
	skew         time.Duration
	provider     cdb.Config
	runtime      rt.Options
	stableOwner  bool
	faultSeed    int64
	describeSelf string
}

// clientMaxDelay is the longest wait of a node's client between two tries
// of a request.
const clientMaxDelay = 500 * time.Millisecond

// node is one provider with its runtime, as a process would run them.
type node struct {
	id        string
	slot      int
	transport *faultTransport
	provider  *cdb.CosmosProvider
	runtime   *rt.Runtime
	client    *rt.Client
	stop      context.CancelFunc
	down      atomic.Bool
	settings  nodeSettings
	// owner is the cluster that replaces the node when it crashes, and
	// role its slot's role; nil for a client-only process.
	owner *cluster
	role  role
}

// env is what nodes share: the account, the recorder, the stats.
type env struct {
	cfg       Config
	endpoint  string
	key       string
	transport http.RoundTripper // the account, no faults
	rec       *recorder
	stats     *Stats
	logger    *slog.Logger
	quiet     atomic.Bool // faults are off for nodes started from now on
	progress  *progress   // the run's heartbeat (progress.go)
	clock     *simClock   // the simulated world's time (clock.go)
	wire      *wireLog    // nil: no wire journal
	flight    *flightRecorder
	polls     sync.Map // node id → its settings, for reports
}

// pollInterval is node's provider's PollInterval (0 for a node it does
// not know).
func (e *env) pollInterval(node string) time.Duration {
	s, _ := e.polls.Load(node)
	settings, _ := s.(nodeSettings)
	return settings.provider.PollInterval
}

// workerLock is node's runtime's worker lock timeout.
func (e *env) workerLock(node string) time.Duration {
	s, _ := e.polls.Load(node)
	settings, _ := s.(nodeSettings)
	return settings.runtime.WorkerLockTimeout
}

// drawSettings picks a node's settings from rng.
func drawSettings(rng *rand.Rand, cfg Config, clock *simClock, r role, id string) nodeSettings {
	f := cfg.Faults
	s := nodeSettings{faultSeed: rng.Int63()}
	if f.ClockSkew > 0 {
		s.skew = time.Duration(rng.Int63n(int64(2*f.ClockSkew))) - f.ClockSkew
	}
	if r.badClock {
		s.skew = f.BadClock/12 + time.Duration(rng.Int63n(int64(f.BadClock-f.BadClock/12)+1))
	}
	now := func() time.Time { return clock.now().Add(s.skew) }
	s.provider = cdb.Config{
		SkipBootstrap:        true,
		PollInterval:         time.Duration(10+rng.Intn(90)) * time.Millisecond,
		CandidatesPerRange:   []int{4, 8, 32}[rng.Intn(3)],
		ReconcileInterval:    time.Duration(200+rng.Intn(300)) * time.Millisecond,
		OutboxMinAge:         time.Duration(100+rng.Intn(200)) * time.Millisecond,
		AbandonedDeletionAge: deletionAge,
		Now:                  now,
	}
	if cfg.Features.LargeContinueAsNew {
		// Reconcilers nearer the default (5s), so an outbox whose
		// relay died waits for one as it would in production.
		s.provider.ReconcileInterval = time.Duration(1000+rng.Intn(4000)) * time.Millisecond
	}
	if cfg.Features.Retention {
		s.provider.Retention = retentionForRun
	}
	if cfg.Features.CappedTurns && rng.Intn(2) == 0 {
		s.provider.MaxMessagesPerTurn = 10
	}
	o := rt.Options{
		OrchestrationConcurrency: 1 + rng.Intn(4),
		WorkerConcurrency:        1 + rng.Intn(4),
		MinPollInterval:          10 * time.Millisecond,
		LongPollTimeout:          time.Duration(200+rng.Intn(800)) * time.Millisecond,
		OrchestratorLockTimeout:  3 * time.Second,
		WorkerLockTimeout:        3 * time.Second,
		WorkerLockRenewalBuffer:  time.Second,
		// A session lock outlasts a fetch's requests on this host: a claim
		// whose lock ran out before its activity started would let the
		// session move with no crash or fault to explain it.
		SessionLockTimeout:        hostScaled(cfg, 2*time.Second),
		SessionLockRenewalBuffer:  hostScaled(cfg, 500*time.Millisecond),
		SessionIdleTimeout:        5 * time.Second,
		SessionCleanupInterval:    2 * time.Second,
		UnregisteredBackoffBase:   50 * time.Millisecond,
		UnregisteredBackoffMax:    time.Second,
		ActivityCancellationGrace: 500 * time.Millisecond,
		// No Now: the runtime reads the provider's ServiceTime, as an
		// application's runtime does by default.
	}
	if f.ShortLocks && !r.full && rng.Intn(2) == 0 {
		o.OrchestratorLockTimeout = hostScaled(cfg, time.Duration(600+rng.Intn(400))*time.Millisecond)
		o.WorkerLockTimeout = hostScaled(cfg, time.Duration(400+rng.Intn(400))*time.Millisecond)
	}
	o.WorkerTagFilter = drawTagFilter(rng, cfg.Features.Tags, r.full)
	if !r.full && rng.Intn(4) == 0 {
		o.WorkerOnly = true
	}
	if r.badClock {
		o.WorkerOnly = true
	}
	if r.oldBuild {
		o.SupportedReplayVersions = &cdb.SemverRange{Min: cdb.NewSemanticVersion(0, 0, 1), Max: cdb.NewSemanticVersion(0, 1, 0)}
		o.WorkerOnly = false
	}
	if rng.Intn(2) == 0 {
		s.stableOwner = true
		o.WorkerNodeID = id
	}
	s.runtime = o
	// Every node shares the slots through the membership document: a
	// restart joins, a shutdown leaves, a crash (its transport dead first)
	// leaves its entry to expire.
	s.provider.ProcessLeases = &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: time.Duration(1000+rng.Intn(2000)) * time.Millisecond}
	if cfg.Features.MixedNodes {
		mixSettings(rng, &s)
	}
	if r.starter {
		s.runtime.WorkerOnly, s.provider.ShortPolling = false, false
		s.runtime.OrchestrationConcurrency = max(s.runtime.OrchestrationConcurrency, 4)
		o = s.runtime
	}
	if r.production {
		s.runtime.WorkerOnly, s.provider.ShortPolling, s.runtime.SupportedReplayVersions = false, false, nil
		s.runtime.OrchestrationConcurrency = max(s.runtime.OrchestrationConcurrency, 2)
		s.runtime.WorkerConcurrency = max(s.runtime.WorkerConcurrency, 2)
		s.runtime.WorkerTagFilter = cdb.AnyFilter()
		productionLocks(rng, &s.runtime)
		o = s.runtime
	}
	lease := "off"
	if s.provider.ProcessLeases != nil {
		lease = s.provider.ProcessLeases.LeaseDuration.String()
	}
	s.describeSelf = fmt.Sprintf("skew=%s orch=%d(worker-only=%t old=%t) workers=%d filter=%s locks=%s/%s poll=%s short=%t lease=%s",
		s.skew, o.OrchestrationConcurrency, s.runtime.WorkerOnly, r.oldBuild, o.WorkerConcurrency, o.WorkerTagFilter,
		o.OrchestratorLockTimeout, o.WorkerLockTimeout, s.provider.PollInterval, s.provider.ShortPolling, lease)
	if r.production {
		s.describeSelf += fmt.Sprintf(" production(renewal buffers %s/%s)", o.OrchestratorLockRenewalBuffer, o.WorkerLockRenewalBuffer)
	}
	return s
}

// mixSettings (Features.MixedNodes) draws the configurations one run mixes:
// process leases on or off, short polling, a cap on the sessions a
// runtime takes.
func mixSettings(rng *rand.Rand, s *nodeSettings) {
	if rng.Intn(2) == 0 {
		s.provider.ProcessLeases = nil
	}
	s.provider.ShortPolling = rng.Intn(3) == 0
	if rng.Intn(3) == 0 {
		s.runtime.MaxSessionsPerRuntime = 1
	}
}

// tagGPU is the one activity tag the workload uses.
const tagGPU = "gpu"

func drawTagFilter(rng *rand.Rand, tags, full bool) cdb.TagFilter {
	if full {
		return cdb.AnyFilter()
	}
	if !tags {
		return cdb.DefaultOnlyFilter()
	}
	switch rng.Intn(3) {
	case 0:
		f, _ := cdb.TagsFilter(tagGPU)
		return f
	case 1:
		f, _ := cdb.DefaultAndFilter(tagGPU)
		return f
	}
	return cdb.DefaultOnlyFilter()
}

// startNode builds a node's client, provider and runtime over its own
// fault transport; a clientOnly node runs no runtime (an application that
// starts and signals instances). Faults may make the start fail; the
// caller retries.
func startNode(ctx context.Context, e *env, id string, slot int, s nodeSettings, clientOnly bool) (*node, error) {
	ft := newFaultTransport(e.transport, e.cfg.Faults, s.faultSeed, e.stats, !clientOnly)
	e.polls.Store(id, s)
	ft.commit = e.rec.observeCommits(id)
	ft.tried = bothTries(bothTries(e.rec.eagerStarts.triesHook(), e.rec.eager.writeTriesHook(id)), e.rec.writeFaultsFor(id))
	ft.stalled = e.rec.stalledFor(id)
	ft.paused = e.rec.pausedFor(id)
	ft.wire, ft.node, ft.flight = e.wire, id, e.flight
	if e.rec.names != nil {
		ft.sent = e.rec.names.hook(id)
	}
	ft.quiet.Store(e.quiet.Load())
	// The client signs with the node's clock, as on a real host, where the
	// machine's clock is wrong for both; the client corrects it by the
	// account's Date (Client.ClockOffset).
	client, err := cdb.NewClient(e.endpoint, cdb.ClientOptions{Key: e.key, Transport: ft, Now: s.provider.Now,
		Retry: cdb.RetryOptions{MaxElapsed: 10 * time.Second, MaxDelay: clientMaxDelay}})
	if err != nil {
		return nil, fmt.Errorf("sim: node %s: client: %w", id, err)
	}
	pc := s.provider
	pc.Client = client
	pc.Logger = e.logger.With("node", id)
	p, err := cdb.NewProvider(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("sim: node %s: provider: %w", id, err)
	}
	if clientOnly {
		e.stats.count(&e.stats.Nodes, 1)
		return &node{id: id, slot: slot, transport: ft, provider: p, client: rt.NewClient(p), stop: func() {}, settings: s}, nil
	}
	reg := rt.NewRegistry()
	if err := register(reg, &activities{node: id, stableNode: s.stableOwner, rec: e.rec, stats: e.stats}); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("sim: node %s: %w", id, err)
	}
	ro := s.runtime
	ro.Logger = e.logger.With("node", id)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r, err := rt.Start(runCtx, handoutProvider{CosmosProvider: p, node: id, rec: e.rec}, reg, ro)
	if err != nil {
		stop()
		_ = p.Close()
		return nil, fmt.Errorf("sim: node %s: runtime: %w", id, err)
	}
	e.stats.count(&e.stats.Nodes, 1)
	return &node{id: id, slot: slot, transport: ft, provider: p, runtime: r, client: rt.NewClient(p), stop: stop, settings: s}, nil
}

// crash stops the node as a killed process stops: its transport goes dead
// first (nothing more reaches the account, answers in flight are lost),
// then its goroutines are let go without any cleanup reaching the account.
func (n *node) crash() {
	if !n.down.CompareAndSwap(false, true) {
		return
	}
	n.transport.kill()
	n.stop()
	go func() { _ = n.provider.Close() }()
}

// shutdown stops the node gracefully at the end of a run.
func (n *node) shutdown(ctx context.Context) {
	if !n.down.CompareAndSwap(false, true) {
		return
	}
	if n.runtime != nil {
		_ = n.runtime.Shutdown(ctx)
	}
	n.stop()
	_ = n.provider.Close()
}

// quiet turns the node's random faults off, for the end of a run.
func (n *node) quiet() { n.transport.quiet.Store(true) }

// cluster is the set of live nodes.
type cluster struct {
	env   *env
	mu    sync.Mutex
	rng   *rand.Rand
	roles []role
	nodes []*node // by slot; nil while a slot restarts
	next  int     // node ids
	// app is where the workload's calls from outside come from: one
	// process (one clock, like one application), with faults but never
	// crashed, so a call it retries is a call its caller saw fail.
	app *node
	// raisers are further client-only processes events are raised
	// through (MixedNodes, BadClock), never crashed either.
	raisers []*node
	clients int // client-only processes started (ids)
}

func newCluster(e *env, rng *rand.Rand) *cluster {
	roles := make([]role, e.cfg.Nodes)
	roles[0].full = true
	if e.cfg.Features.CapabilityFilters {
		roles = append(roles, role{oldBuild: true})
	}
	if e.cfg.Faults.BadClock > 0 {
		roles = append(roles, role{badClock: true})
	}
	if e.cfg.Features.FirstTurnStarts {
		roles = append(roles, role{starter: true})
	}
	if e.cfg.Features.ProductionLocks {
		roles = append(roles, role{production: true})
	}
	return &cluster{env: e, rng: rng, roles: roles, nodes: make([]*node, len(roles))}
}

// start starts a node in slot, retrying while faults make the start fail.
func (c *cluster) start(ctx context.Context, slot int) error {
	for {
		c.mu.Lock()
		c.next++
		id := fmt.Sprintf("n%d", c.next)
		s := drawSettings(c.rng, c.env.cfg, c.env.clock, c.roles[slot], id)
		c.mu.Unlock()
		n, err := startNode(ctx, c.env, id, slot, s, false)
		if err == nil {
			c.env.logger.Info("node started", "node", id, "slot", slot, "settings", s.describeSelf)
			n.owner, n.role = c, c.roles[slot]
			c.mu.Lock()
			c.nodes[slot] = n
			c.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sim: start node in slot %d: %w", slot, ctx.Err())
		}
		c.env.logger.Warn("node start failed; retrying", "node", id, "error", err)
		time.Sleep(20 * time.Millisecond)
	}
}

// startApp starts the application node the workload calls through.
func (c *cluster) startApp(ctx context.Context) error {
	for {
		c.mu.Lock()
		s := drawSettings(c.rng, c.env.cfg, c.env.clock, role{}, "app")
		c.mu.Unlock()
		n, err := startNode(ctx, c.env, "app", -1, s, true)
		if err == nil {
			c.app = n
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sim: start the application node: %w", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startClientNode starts a client-only process on settings drawn for r,
// retrying while faults make the start fail.
func (c *cluster) startClientNode(ctx context.Context, r role, name string, adjust func(s *nodeSettings, id string)) (*node, error) {
	for {
		c.mu.Lock()
		c.clients++
		id := fmt.Sprintf("%s%d", name, c.clients)
		s := drawSettings(c.rng, c.env.cfg, c.env.clock, r, id)
		c.mu.Unlock()
		if adjust != nil {
			adjust(&s, id)
		}
		s.describeSelf = fmt.Sprintf("client-only skew=%s short=%t leases=%t", s.skew, s.provider.ShortPolling, s.provider.ProcessLeases != nil)
		n, err := startNode(ctx, c.env, id, -1, s, true)
		if err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sim: start client process %s: %w", id, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRaisers starts the client-only processes events are also raised
// through: with MixedNodes one with process leases and short polling (a
// process that writes but never fetches), with BadClock one on the bad
// clock.
func (c *cluster) startRaisers(ctx context.Context) error {
	if c.env.cfg.Features.MixedNodes {
		n, err := c.startClientNode(ctx, role{}, "raiser", func(s *nodeSettings, id string) {
			s.provider.ShortPolling = true
			s.provider.ProcessLeases = &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: 2 * time.Second}
		})
		if err != nil {
			return err
		}
		c.raisers = append(c.raisers, n)
	}
	if c.env.cfg.Faults.BadClock > 0 {
		n, err := c.startClientNode(ctx, role{badClock: true}, "badclock", nil)
		if err != nil {
			return err
		}
		c.raisers = append(c.raisers, n)
	}
	return nil
}

// eventCaller picks the application or one of the raisers.
func (c *cluster) eventCaller() *rt.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := c.rng.Intn(len(c.raisers) + 1); i < len(c.raisers) {
		return c.raisers[i].client
	}
	return c.app.client
}

// startCaller picks the client a start goes through: the application's,
// or half of the time a live node's, whose runtime's waiting fetches may
// take the start eagerly (eager_start.go), and which may crash with it.
func (c *cluster) startCaller() *rt.Client {
	up := c.all()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(up) == 0 || c.rng.Intn(2) == 0 {
		return c.app.client
	}
	return up[c.rng.Intn(len(up))].client
}

// shutdownNode shuts the node's runtime down while it works, as a deploy
// does (its faults off first: only the runtime can let a lock go), and
// starts a replacement in its slot; false when the node is not up.
func (c *cluster) shutdownNode(ctx context.Context, id string) bool {
	c.mu.Lock()
	var n *node
	for _, cand := range c.nodes {
		if cand != nil && cand.id == id && !cand.down.Load() && !cand.role.production {
			n = cand
		}
	}
	if n != nil {
		c.nodes[n.slot] = nil
	}
	c.mu.Unlock()
	if n == nil || !n.down.CompareAndSwap(false, true) {
		return false
	}
	n.quiet()
	began := time.Now()
	c.env.rec.nodeShutDown(n.id, began, n.settings.runtime.ActivityCancellationGrace)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Millisecond)
	_ = n.runtime.Shutdown(stopCtx)
	cancel()
	n.stop()
	_ = n.provider.Close()
	c.env.rec.nodeClosed(n.id, closeRecord{Began: began, Ended: time.Now(), EndedMs: c.env.clock.now().UnixMilli()})
	_ = c.start(context.WithoutCancel(ctx), n.slot)
	return true
}

// crashCommitting arms every live node to crash after the first batch
// that matches commits; the simulated clock then jumps by down (minutes in
// which the committer was down and nobody else acted: clock.go) and the
// replacement starts a moment later.
func (c *cluster) crashCommitting(ctx context.Context, match func(op string, body []byte) bool, down time.Duration) {
	fired := make(chan *node, 1)
	var won atomic.Bool
	for _, n := range c.all() {
		if n.role.production {
			continue // never crashed
		}
		trig := &crashTrigger{after: true}
		trig.match = func(op string, body []byte) bool { return !won.Load() && match(op, body) }
		trig.fired = func() {
			if won.CompareAndSwap(false, true) {
				n.transport.kill()
				fired <- n
			}
		}
		n.transport.crashOn.Store(trig)
	}
	var n *node
	if !c.env.progress.waitUntil(ctx, 10*time.Millisecond, func() bool {
		select {
		case n = <-fired:
			return true
		default:
			return false
		}
	}) {
		return
	}
	c.env.stats.crash("after-continue-as-new-outbox")
	c.env.rec.nodeCrashed(n.id)
	c.env.logger.Info("node crashed committing a continue-as-new; the clock jumps", "node", n.id, "down", down)
	c.mu.Lock()
	restartIn := time.Duration(500+c.rng.Intn(1500)) * time.Millisecond // c.rng is shared: drawn under c.mu
	c.mu.Unlock()
	replace := c.takeSlot(n)
	n.crash()
	c.env.clock.jump(down)
	if !replace {
		return // another crash of the same node replaced it
	}
	sleepCtx(ctx, restartIn)
	_ = c.start(context.WithoutCancel(ctx), n.slot)
}

// caller is the application's client.
func (c *cluster) caller() *rt.Client { return c.app.client }

// all returns the nodes up now.
func (c *cluster) all() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []*node
	for _, n := range c.nodes {
		if n != nil && !n.down.Load() {
			up = append(up, n)
		}
	}
	return up
}

// crashOne arms a crash on a random node: it dies at its next write (before
// the write, or after the write committed, drawn at random), or after a
// second if no write comes; a fresh node then takes its slot.
func (c *cluster) crashOne(ctx context.Context) {
	c.mu.Lock()
	slot := c.rng.Intn(len(c.nodes))
	n := c.nodes[slot]
	after := c.rng.Intn(2) == 0
	batchOnly := c.rng.Intn(2) == 0
	c.mu.Unlock()
	if n == nil || n.down.Load() || n.role.production {
		return
	}
	where := make(chan string, 1)
	trig := &crashTrigger{after: after}
	trig.match = func(op string, _ []byte) bool { return op == "Batch" || !batchOnly && isWrite(op) }
	trig.fired = func() {
		n.transport.kill()
		label := "before-write"
		if after {
			label = "after-write-committed"
		}
		where <- label
	}
	n.transport.crashOn.Store(trig)
	label := "idle"
	select {
	case label = <-where:
	case <-time.After(time.Second):
		trig.once.Do(func() {})
	case <-ctx.Done():
		return
	}
	c.replaceCrashed(ctx, n, label)
}

// replaceCrashed records n's crash (its transport dead already), lets it
// go and starts a fresh node in its slot, unless another crash of the
// same node did so first.
func (c *cluster) replaceCrashed(ctx context.Context, n *node, label string) {
	c.env.stats.crash(label)
	c.env.rec.nodeCrashed(n.id)
	c.env.logger.Info("node crashed", "node", n.id, "where", label)
	replace := c.takeSlot(n)
	n.crash()
	if !replace {
		return
	}
	// The replacement starts even if the crash loop is stopping: the slot
	// must not stay empty.
	_ = c.start(context.WithoutCancel(ctx), n.slot)
}

// takeSlot empties n's slot for a replacement; false when n no longer
// holds it (a crash or a shutdown of n replaced it already), so a node is
// replaced once and no replacement is left running outside the slots.
func (c *cluster) takeSlot(n *node) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[n.slot] != n {
		return false
	}
	c.nodes[n.slot] = nil
	return true
}

// armCrash arms n to crash at the first request match accepts (before it
// is sent, or once the account carried it out: after). The returned wait
// waits up to within (or until ctx ends) for the crash and replaces n; it
// says whether n crashed (a request that never came disarms the trigger).
func (c *cluster) armCrash(n *node, match func(op string, body []byte) bool, after bool, label string) (wait func(ctx context.Context, within time.Duration) bool) {
	fired := make(chan struct{})
	trig := &crashTrigger{after: after, match: match}
	trig.fired = func() {
		n.transport.kill()
		close(fired)
	}
	n.transport.crashOn.Store(trig)
	return func(ctx context.Context, within time.Duration) bool {
		timer := time.NewTimer(within)
		defer timer.Stop()
		select {
		case <-fired:
		case <-timer.C:
		case <-ctx.Done():
		}
		trig.once.Do(func() {}) // disarmed, unless it fired
		select {
		case <-fired:
		default:
			return false
		}
		c.replaceCrashed(context.WithoutCancel(ctx), n, label)
		return true
	}
}

// crashNow kills n at once (a process that dies while a call through it
// waits) and replaces it.
func (c *cluster) crashNow(ctx context.Context, n *node, label string) {
	n.transport.kill()
	c.replaceCrashed(ctx, n, label)
}

// quiet turns faults off on every live node, and on nodes started later.
func (c *cluster) quiet() {
	c.env.quiet.Store(true)
	for _, n := range c.all() {
		n.quiet()
	}
	if c.app != nil {
		c.app.quiet()
	}
	for _, n := range c.raisers {
		n.quiet()
	}
}

// shutdown stops every node gracefully.
func (c *cluster) shutdown() {
	nodes := append(c.all(), c.raisers...)
	if c.app != nil {
		nodes = append(nodes, c.app)
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n.shutdown(ctx)
		}()
	}
	wg.Wait()
}

// hostScaled is d on an idle host, longer in proportion on a slower one
// (Config.HostSlowness).
func hostScaled(cfg Config, d time.Duration) time.Duration {
	return time.Duration(float64(d) * max(cfg.HostSlowness, 1))
}
