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
}

// drawSettings picks a node's settings from rng.
func drawSettings(rng *rand.Rand, cfg Config, r role, id string) nodeSettings {
	f := cfg.Faults
	s := nodeSettings{faultSeed: rng.Int63()}
	if f.ClockSkew > 0 {
		s.skew = time.Duration(rng.Int63n(int64(2*f.ClockSkew))) - f.ClockSkew
	}
	now := func() time.Time { return time.Now().Add(s.skew) }
	s.provider = cdb.Config{
		SkipBootstrap:        true,
		PollInterval:         time.Duration(10+rng.Intn(90)) * time.Millisecond,
		CandidatesPerRange:   []int{4, 8, 32}[rng.Intn(3)],
		ReconcileInterval:    time.Duration(200+rng.Intn(300)) * time.Millisecond,
		OutboxMinAge:         time.Duration(100+rng.Intn(200)) * time.Millisecond,
		AbandonedDeletionAge: 2 * time.Second,
		Now:                  now,
	}
	if cfg.Features.CappedTurns && rng.Intn(2) == 0 {
		s.provider.MaxMessagesPerTurn = 10
	}
	o := rt.Options{
		OrchestrationConcurrency:  1 + rng.Intn(4),
		WorkerConcurrency:         1 + rng.Intn(4),
		MinPollInterval:           10 * time.Millisecond,
		LongPollTimeout:           time.Duration(200+rng.Intn(800)) * time.Millisecond,
		OrchestratorLockTimeout:   3 * time.Second,
		WorkerLockTimeout:         3 * time.Second,
		WorkerLockRenewalBuffer:   time.Second,
		SessionLockTimeout:        2 * time.Second,
		SessionLockRenewalBuffer:  500 * time.Millisecond,
		SessionIdleTimeout:        5 * time.Second,
		SessionCleanupInterval:    2 * time.Second,
		UnregisteredBackoffBase:   50 * time.Millisecond,
		UnregisteredBackoffMax:    time.Second,
		ActivityCancellationGrace: 500 * time.Millisecond,
		Now:                       now,
	}
	if f.ShortLocks && !r.full && rng.Intn(2) == 0 {
		o.OrchestratorLockTimeout = time.Duration(600+rng.Intn(400)) * time.Millisecond
		o.WorkerLockTimeout = time.Duration(400+rng.Intn(400)) * time.Millisecond
	}
	o.WorkerTagFilter = drawTagFilter(rng, cfg.Features.Tags, r.full)
	if !r.full && rng.Intn(4) == 0 {
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
	s.describeSelf = fmt.Sprintf("skew=%s orch=%d(worker-only=%t old=%t) workers=%d filter=%s locks=%s/%s poll=%s lease=%s",
		s.skew, o.OrchestrationConcurrency, o.WorkerOnly, r.oldBuild, o.WorkerConcurrency, o.WorkerTagFilter,
		o.OrchestratorLockTimeout, o.WorkerLockTimeout, s.provider.PollInterval, s.provider.ProcessLeases.LeaseDuration)
	return s
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
	ft := newFaultTransport(e.transport, e.cfg.Faults, s.faultSeed, e.stats)
	ft.commit = e.rec.observeCommits(id)
	ft.quiet.Store(e.quiet.Load())
	client, err := cdb.NewClient(e.endpoint, cdb.ClientOptions{Key: e.key, Transport: ft,
		Retry: cdb.RetryOptions{MaxElapsed: 10 * time.Second, MaxDelay: 500 * time.Millisecond}})
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
	r, err := rt.Start(runCtx, p, reg, ro)
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
}

func newCluster(e *env, rng *rand.Rand) *cluster {
	roles := make([]role, e.cfg.Nodes)
	roles[0].full = true
	if e.cfg.Features.CapabilityFilters {
		roles = append(roles, role{oldBuild: true})
	}
	return &cluster{env: e, rng: rng, roles: roles, nodes: make([]*node, len(roles))}
}

// start starts a node in slot, retrying while faults make the start fail.
func (c *cluster) start(ctx context.Context, slot int) error {
	for {
		c.mu.Lock()
		c.next++
		id := fmt.Sprintf("n%d", c.next)
		s := drawSettings(c.rng, c.env.cfg, c.roles[slot], id)
		c.mu.Unlock()
		n, err := startNode(ctx, c.env, id, slot, s, false)
		if err == nil {
			c.env.logger.Info("node started", "node", id, "slot", slot, "settings", s.describeSelf)
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
		s := drawSettings(c.rng, c.env.cfg, role{}, "app")
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
	if n == nil || n.down.Load() {
		return
	}
	where := make(chan string, 1)
	trig := &crashTrigger{after: after}
	trig.match = func(op string) bool { return op == "Batch" || !batchOnly && isWrite(op) }
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
	c.env.stats.crash(label)
	c.env.rec.nodeCrashed(n.id)
	c.env.logger.Info("node crashed", "node", n.id, "where", label)
	c.mu.Lock()
	c.nodes[slot] = nil
	c.mu.Unlock()
	n.crash()
	// The replacement starts even if the crash loop is stopping: the slot
	// must not stay empty.
	_ = c.start(context.WithoutCancel(ctx), slot)
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
}

// shutdown stops every node gracefully.
func (c *cluster) shutdown() {
	nodes := c.all()
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
