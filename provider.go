package cdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joho/godotenv"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// ProviderName and ProviderVersion identify this provider in diagnostics
// (Provider.Name and Provider.Version); the provider's version is the
// module's.
const (
	ProviderName    = "cosmosdb"
	ProviderVersion = Version
)

// Config configures a CosmosProvider. Either Client is set, or Endpoint and
// Key (or ClientOptions.Credential) are.
type Config struct {
	Endpoint  string
	Key       string
	Database  string // default "duroxide"
	Container string // default "duroxide"

	// Client, when set, is used instead of building one from Endpoint, Key
	// and ClientOptions; FakeAccount.Client() gives one.
	//
	// The provider reports its own metrics (queue depths, the outbox
	// backlog, held messages, lost locks, poison; ARCHITECTURE.md,
	// Telemetry) through the Telemetry of the client it uses: Client's, or
	// ClientOptions.Telemetry for the one it builds. One setting covers the
	// requests and what they were for.
	Client        *Client
	ClientOptions ClientOptions

	// ShortPolling makes a fetch that finds nothing return at once instead
	// of waiting up to its poll timeout.
	ShortPolling bool
	// DisableEagerDispatch makes every start and every worker item wait in
	// the queue for a fetch to find and lock it, and every turn release its
	// instance's lock. By default (with long polling) a start, or a turn's
	// worker item, that a waiting fetch of this process will take is
	// written already locked to it and handed to it without a query or a
	// lock request (handover.go, handover_turns.go), and a turn whose activities
	// this process runs keeps its instance locked for their completions
	// (handover_chains.go).
	DisableEagerDispatch bool
	// PollInterval is how often an idle queue is polled (default 1s),
	// whatever the number of fetches waiting on it.
	PollInterval time.Duration
	// CandidatesPerRange is how many queue items one candidate query reads
	// per partition key range (default 32).
	CandidatesPerRange int
	// MaxMessagesPerTurn bounds the messages one orchestration fetch locks
	// (default 40), so the ack's batch keeps room for the turn's writes. A
	// chained turn (a turn whose activities this process ran, made of
	// their completions as its workers wrote them) is not bounded by it:
	// it takes as many completions as its commit batch has room for (80).
	MaxMessagesPerTurn int
	// ReconcileInterval is how often the outbox reconciler looks for
	// undelivered effects (default 5s); OutboxMinAge is how long the relay
	// delivering an outbox may show no sign of life before another takes it
	// over (default 2s); a delivering relay renews its lease every third of
	// it.
	ReconcileInterval time.Duration
	OutboxMinAge      time.Duration
	// AbandonedDeletionAge is how long a deletion's owner may show no life
	// (it renews its beat every third of it while it works) before another
	// process takes the deletion over and finishes it (default 1m).
	AbandonedDeletionAge time.Duration
	// Retention, when set, is how long a finished instance (Completed or
	// Failed; not ContinuedAsNew, which goes on) stays after the turn that
	// ends it: from then on it reads as gone everywhere (status, lists,
	// history, KV), Cosmos DB removes its documents by their time to live
	// with spare throughput rather than a sweep's requests, and its id can
	// be started again as a new life. 0 (the default) keeps finished
	// instances until they are deleted; otherwise at least a second, in
	// whole seconds as Cosmos DB counts a time to live (retention.go).
	Retention time.Duration
	// Leases spreads dispatch slots over concurrent fetches (default: in
	// memory, this process only).
	Leases LeaseProvider
	// ProcessLeases, when set (not together with Leases), shares the dispatch
	// slots with the other processes on the container through a
	// membership document, so their fetches query disjoint slots
	// (processleases.go). Close gives this process's share back.
	ProcessLeases *ProcessLeaseOptions
	// SkipBootstrap skips creating the database and container.
	SkipBootstrap bool
	// GaugeInterval is how often the gauges that need queries (queue
	// depths and oldest ages, the outbox backlog, held messages) are
	// sampled, by one goroutine, each sample bounded by the interval (at
	// most 30s): 0 takes the default, 60s (duroxide's
	// gauge_poll_interval); a negative value turns sampling off. A sample
	// costs five queries per partition key range (ARCHITECTURE.md,
	// Telemetry). Nothing is sampled, and nothing sent, unless the
	// client's Telemetry has a Meter.
	GaugeInterval time.Duration
	// BackgroundPriority is the priority level of the provider's
	// background work: the reconciler's looks across the container (stale
	// outboxes, abandoned deletions, retention), the retention sweep, the
	// gauges and the index check. Default PriorityLevelLow: an account with
	// priority-based execution on throttles them before turns, fetches,
	// acks and renewals (which stay High), any other account ignores the
	// header, and the client holds them back while the account throttles
	// (ClientOptions.Background). PriorityLevelHigh sends them as every
	// other request.
	BackgroundPriority PriorityLevel

	Logger *slog.Logger
	// Now is this machine's clock (default time.Now), the one its client
	// signs with (ClientOptions.Now). The provider reads the service's
	// time: Now corrected by the client's ClockOffset, so a process whose
	// clock is minutes or hours off writes and judges every time (queue
	// visibility, seqs, lock expiries, timers, leases, beats) as a healthy
	// one does. It is the clock that decides when a durable timer fires:
	// a timer's message becomes visible when this clock passes its due
	// time, at the next poll (PollInterval). The durable runtime reads it
	// too, through ServiceTime, unless durable.Options.Now is set; a test
	// skips time by giving both one manual clock (package
	// durable/durabletest).
	Now func() time.Time
}

// Environment variables read by ConfigFromEnv.
const (
	EnvEndpoint  = "COSMOS_ENDPOINT"
	EnvKey       = "COSMOS_KEY"
	EnvDatabase  = "COSMOS_DATABASE"
	EnvContainer = "COSMOS_CONTAINER"
	EnvSkipTLS   = "COSMOS_INSECURE_SKIP_VERIFY"
	// EnvCAFile names a PEM file of extra trusted roots, e.g. the
	// Microsoft emulator's exported certificate (TLSOptions.CAFile).
	EnvCAFile = "COSMOS_CA_FILE"
)

// ErrEndpointNotSet is what ConfigFromEnv reports when neither the
// environment nor .env names an endpoint, so a program can fall back to the
// in-memory Cosmos DB (NewFakeAccount) and still see a broken .env.
var ErrEndpointNotSet = errors.New("no Cosmos DB endpoint configured")

// ConfigFromEnv reads the COSMOS_* variables from the environment and, for
// those the environment does not set, from a .env file in the working
// directory when there is one. The file is only read: nothing in it is
// exported into the process environment.
func ConfigFromEnv() (Config, error) {
	lookup, err := envWithDotEnv(".env")
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		Endpoint:  lookup(EnvEndpoint),
		Key:       lookup(EnvKey),
		Database:  lookup(EnvDatabase),
		Container: lookup(EnvContainer),
	}
	if cfg.Endpoint == "" {
		return cfg, fmt.Errorf("cdb: %s is not set (in the environment or .env): %w", EnvEndpoint, ErrEndpointNotSet)
	}
	cfg.ClientOptions.TLS.InsecureSkipVerify = lookup(EnvSkipTLS) == "true"
	cfg.ClientOptions.TLS.CAFile = lookup(EnvCAFile)
	return cfg, nil
}

// envWithDotEnv returns a lookup of the environment that falls back to the
// values of the dotenv file at path (a missing file has none). A variable
// set in the environment, even to "", wins, as with godotenv.Load.
func envWithDotEnv(path string) (func(string) string, error) {
	file, err := godotenv.Read(path)
	if errors.Is(err, os.ErrNotExist) {
		file, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdb: read %s: %w", path, err)
	}
	return func(name string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return file[name]
	}, nil
}

func (c Config) withDefaults() Config {
	if c.Database == "" {
		c.Database = "duroxide"
	}
	if c.Container == "" {
		c.Container = "duroxide"
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.CandidatesPerRange <= 0 {
		c.CandidatesPerRange = 32
	}
	if c.MaxMessagesPerTurn <= 0 {
		c.MaxMessagesPerTurn = 40
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 5 * time.Second
	}
	if c.OutboxMinAge <= 0 {
		c.OutboxMinAge = 2 * time.Second
	}
	if c.AbandonedDeletionAge <= 0 {
		c.AbandonedDeletionAge = time.Minute
	}
	if c.GaugeInterval == 0 {
		c.GaugeInterval = defaultGaugeInterval
	}
	if c.BackgroundPriority == "" {
		c.BackgroundPriority = PriorityLevelLow
	}
	if c.Leases == nil && c.ProcessLeases == nil {
		c.Leases = NewInMemoryLeaseProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// CosmosProvider implements Provider and ProviderAdmin on one Cosmos DB
// container. It is safe for concurrent use. Close stops its background work.
type CosmosProvider struct {
	cfg       Config
	client    *Client
	container *ContainerClient
	log       *slog.Logger
	tel       providerTelemetry // its own metrics, on its client's Meter

	orchSignal *queueSignal
	workSignal *queueSignal
	readyItems *handoff.Ready[*workLock]   // worker items locked ahead for this process's fetches; nil: none
	readyTurns *handoff.Ready[*lockedTurn] // turns made ready for them (starts, chained turns); nil: none
	ended      *handoff.Ended              // what this process's writes ended (deletions, cancellations), for the hand-outs (H4)
	chains     *chainTable                 // nil: no chained turns
	chainRoom  int                         // completions a chained turn takes (chainTurnMessages; tests set fewer)

	orchLocks  handoff.LockTable[*orchestrationLock]
	contended  *contention
	locking    *claimSet // partitions being locked by a fetch of this process
	deleting   *claimSet // deletion intents this process is carrying out
	workLocks  handoff.LockTable[*workLock]
	workClaims *itemClaims // worker items being claimed or held here
	wakeLater  *deferredWakes
	sightings  *sightings   // what the looks at the whole queue saw of the instances they announced
	queueIndex *indexChoice // which composite index the queue queries order by
	sessions   *sessionBook // what this process knows of sessions (sessions.go)
	// sessionWork announces the queued items of sessions this process's
	// owners hold to those owners' fetches alone (sessionwork.go).
	sessionWork *sessionWork
	cache       historyCache
	endings     handoff.EndWatches[OrchestrationStatus] // this process's callers waiting for instances to end (handover_ends.go)

	// filterMisses spaces the looks at instances a capability filter
	// excludes (contention.go).
	filterMisses *filterMisses

	outbox   *relay
	retainer *retainer // nil unless Config.Retention

	processLeases *processLeases // nil unless Config.ProcessLeases
	bell          *queueBell     // the queue bell (bell.go)
	ownWrites     *ownWrites     // nil unless Config.ProcessLeases

	seq atomic.Int64 // last enqueue sequence handed out

	afterPlanForTest func() // runs between an ack's planning and its commit
	closeOnce        sync.Once
	stop             context.CancelFunc
	done             sync.WaitGroup
	// handOverStop ends the chain and give-back loops (handover_chains.go, handover.go)
	// and handOverDone waits for them: Close stops them before it gives
	// back what is left, so nothing is handed over behind its back.
	handOverStop context.CancelFunc
	handOverDone sync.WaitGroup
	// closing is set once Close begins: a chain due from then on, or an
	// item a commit makes ready, is given back rather than made ready for
	// fetches that will not come.
	closing atomic.Bool
	// orchLockTimeout is the lock timeout (ns) this process's orchestration
	// fetches ask for, the last one's; 0 until one came. A chain a worker
	// ack opens locks for it: this process's dispatchers take its turn.
	orchLockTimeout atomic.Int64
}

var (
	_ Provider      = (*CosmosProvider)(nil)
	_ ProviderAdmin = (*CosmosProvider)(nil)
)

// NewProvider connects to the container in cfg and starts the outbox relay.
// Unless cfg.SkipBootstrap is set it creates the database and container
// when they are missing. A container that already exists is checked against
// ProviderContainerProperties (partition key, composite index, time to
// live): one that lacks what the provider needs is refused with a
// *ContainerMismatchError, a missing one with an error naming the database or
// the container.
func NewProvider(ctx context.Context, cfg Config) (*CosmosProvider, error) {
	if cfg.Leases != nil && cfg.ProcessLeases != nil {
		return nil, fmt.Errorf("cdb: new provider: set Config.Leases or Config.ProcessLeases, not both: %w", ErrInvalidInput)
	}
	if err := checkRetention(cfg.Retention); err != nil {
		return nil, fmt.Errorf("cdb: new provider: %w", err)
	}
	if p := cfg.BackgroundPriority; p != "" && p != PriorityLevelHigh && p != PriorityLevelLow {
		return nil, fmt.Errorf("cdb: new provider: Config.BackgroundPriority %q: want %q or %q: %w", p, PriorityLevelHigh, PriorityLevelLow, ErrInvalidInput)
	}
	cfg = cfg.withDefaults()
	var leaseOpts ProcessLeaseOptions
	if cfg.Leases == nil {
		o, err := cfg.ProcessLeases.withDefaults()
		if err != nil {
			return nil, err
		}
		leaseOpts = o
	}
	client := cfg.Client
	if client == nil {
		opts := cfg.ClientOptions
		if cfg.Key != "" {
			opts.Key = cfg.Key
		}
		if opts.Logger == nil {
			opts.Logger = cfg.Logger
		}
		c, err := NewClient(cfg.Endpoint, opts)
		if err != nil {
			return nil, fmt.Errorf("cdb: new provider: %w", err)
		}
		client = c
	}
	container, err := client.NewContainer(cfg.Database, cfg.Container)
	if err != nil {
		return nil, fmt.Errorf("cdb: new provider: %w", err)
	}
	if err := checkAccount(ctx, client); err != nil {
		return nil, err
	}
	queueIndex, waiting, err := openContainer(ctx, client, container, cfg)
	if err != nil {
		return nil, err
	}
	if waiting {
		cfg.Logger.Warn("cdb: the container's (type, visibleAt, seq) index is still being built; the queues order by "+
			"(visibleAt, seq) until the service reports it done", "database", cfg.Database, "container", cfg.Container)
	} else if queueIndex == queueIndexLegacy {
		cfg.Logger.Warn("cdb: the container orders its queues by the composite index (/visibleAt, /seq) only; "+
			"add (/type, /visibleAt, /seq) to its indexing policy so a queue's queries stop paying for the other queue's backlog",
			"database", cfg.Database, "container", cfg.Container)
	}
	// Every fetch queries per range; read the ranges now rather than on the
	// first fetch.
	if _, err := container.ReadPartitionKeyRanges(ctx, false); err != nil {
		return nil, fmt.Errorf("cdb: new provider: read partition key ranges: %w", err)
	}
	p := &CosmosProvider{
		cfg:         cfg,
		client:      client,
		container:   container,
		log:         cfg.Logger,
		tel:         newProviderTelemetry(client.tel),
		orchLocks:   handoff.NewLockTable[*orchestrationLock](),
		contended:   newContention(),
		locking:     newClaimSet(),
		deleting:    newClaimSet(),
		workLocks:   handoff.NewLockTable[*workLock](),
		workClaims:  newItemClaims(),
		queueIndex:  newIndexChoice(queueIndex),
		wakeLater:   newDeferredWakes(),
		sightings:   newSightings(),
		sessions:    newSessionBook(),
		sessionWork: newSessionWork(),
		cache:       newHistoryCache(1024),
	}
	p.filterMisses = newFilterMisses()
	p.orchSignal = newCoalescingQueueSignal(cfg.ShortPolling, cfg.PollInterval, p.now)
	p.workSignal = newQueueSignal(cfg.ShortPolling, cfg.PollInterval, p.now)
	p.readyItems = newReadyItems(cfg.ShortPolling || cfg.DisableEagerDispatch, p.cfg.PollInterval, p.nowMs)
	p.readyTurns = newReadyTurns(cfg.ShortPolling || cfg.DisableEagerDispatch, p.cfg.PollInterval, p.nowMs)
	p.ended = handoff.NewEnded(endedKeep)
	p.chains = handoff.NewChains[*orchestrationLock, activityKey, queueDoc](cfg.ShortPolling || cfg.DisableEagerDispatch)
	p.chainRoom = chainTurnMessages
	bg, stop := context.WithCancel(context.Background())
	p.stop = stop
	if cfg.Leases == nil {
		leases := newProcessLeases(container, leaseOpts, p.now, cfg.Logger)
		if err := leases.renew(ctx); err != nil {
			// Not fatal: until a renewal works the process looks at every
			// slot, as a lone process would.
			cfg.Logger.Warn("cdb: could not join the container's slot leases yet", "process", leaseOpts.ProcessID, "error", err)
		}
		p.cfg.Leases, p.processLeases = leases, leases
		p.ownWrites = newOwnWrites(leaseOpts.ProcessID, p.cfg.PollInterval, !cfg.ShortPolling, p.now)
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			leases.run(bg)
		}()
	}
	p.bell = newQueueBell(container, bellProcessID(leaseOpts.ProcessID), !cfg.ShortPolling, p.now, cfg.PollInterval, cfg.Logger)
	// A write rings the bell only when the view lists another listener:
	// read it now, with the ranges, rather than at the first write.
	if _, err := p.bell.freshView(ctx, bellViewMaxAge); err != nil {
		cfg.Logger.Debug("cdb: could not read the queue bell yet; the first write that may ring reads it", "error", err)
	}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		p.bell.run(bg)
	}()
	go func() {
		defer p.done.Done()
		p.bell.watch(bg, p.rouse)
	}()
	p.outbox = newRelay(p)
	if cfg.Retention > 0 {
		p.retainer = newRetainer(p)
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			p.retainer.run(p.background(bg))
		}()
	}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		p.outbox.run(bg)
	}()
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		p.outbox.reconcileEvery(bg)
	}()
	if waiting {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			p.watchIndexUpgrade(p.background(bg))
		}()
	}
	if p.readyItems != nil {
		handOver, stopHandOver := context.WithCancel(bg)
		p.handOverStop = stopHandOver
		p.handOverDone.Add(2)
		go func() {
			defer p.handOverDone.Done()
			p.runEagerGiveBack(handOver)
		}()
		go func() {
			defer p.handOverDone.Done()
			p.runChains(handOver)
		}()
	}
	if p.tel.on && cfg.GaugeInterval > 0 {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			p.runGauges(p.background(bg), cfg.GaugeInterval)
		}()
	}
	return p, nil
}

// background marks ctx as the provider's background work, whose requests
// go at Config.BackgroundPriority: Low by default, throttled before the
// turns' requests and held back while the account throttles
// (backgroundbudget.go). Turns, fetches, acks, renewals and deliveries
// right after a commit never run under it.
func (p *CosmosProvider) background(ctx context.Context) context.Context {
	if p.cfg.BackgroundPriority == PriorityLevelHigh {
		return ctx
	}
	return ContextWithPriorityLevel(ctx, p.cfg.BackgroundPriority)
}

// runEvery calls fn every interval until ctx ends: a background loop of
// the provider's.
func runEvery(ctx context.Context, interval time.Duration, fn func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
		}
	}
}

// ErrAccountUnsupported is what NewProvider reports for an account whose
// settings break what the provider relies on: a default consistency level
// weaker than Session, or multi-region writes.
var ErrAccountUnsupported = errors.New("account settings the provider cannot run on")

// checkAccount reads the account and refuses the settings under which the
// provider's reads could miss its own writes (Consistent Prefix and
// Eventual ignore session tokens) or two regions could both take a lock
// (multi-region writes settle conflicts after the fact).
func checkAccount(ctx context.Context, client *Client) error {
	account, err := client.ReadAccount(ctx)
	if err != nil {
		return fmt.Errorf("cdb: new provider: read account: %w", err)
	}
	var problems []string
	switch level := account.ConsistencyPolicy.DefaultConsistencyLevel; {
	case strings.EqualFold(level, "Eventual"), strings.EqualFold(level, "ConsistentPrefix"):
		problems = append(problems, fmt.Sprintf("its default consistency level is %s; the provider needs Session (the default), Bounded Staleness or Strong", level))
	}
	if account.EnableMultipleWriteLocations {
		problems = append(problems, "it has multi-region writes on; the provider's locks hold only within one write region")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("cdb: new provider: account at %s: %s (see docs/real-account.md, Consistency and Regions): %w",
		client.Endpoint(), strings.Join(problems, "; "), ErrAccountUnsupported)
}

// openContainer makes sure the container exists with what the provider
// needs (bootstrap.go creates what is missing unless SkipBootstrap), and
// checks a container this call did not create.
// waiting says the queues order by the earlier index until the preferred
// one is built (indexupgrade.go).
func openContainer(ctx context.Context, client *Client, container *ContainerClient, cfg Config) (q queueIndex, waiting bool, err error) {
	if !cfg.SkipBootstrap {
		if err := ensureDatabase(ctx, client, cfg); err != nil {
			return queueIndexByType, false, err
		}
	}
	props, err := container.Read(ctx)
	if err == nil {
		return checkOpened(cfg, props)
	}
	if !IsNotFound(err) || cfg.SkipBootstrap {
		return queueIndexByType, false, explainContainerRead(ctx, client, cfg, err)
	}
	created, err := createContainer(ctx, container, cfg)
	if err != nil {
		return queueIndexByType, false, err
	}
	if !created { // another process created it meanwhile
		if props, err = container.Read(ctx); err != nil {
			return queueIndexByType, false, explainContainerRead(ctx, client, cfg, err)
		}
		return checkOpened(cfg, props)
	}
	return queueIndexByType, false, waitUntilServing(ctx, container, cfg)
}

// checkOpened checks a container the provider did not create, and picks
// the index its queues can order by now.
func checkOpened(cfg Config, props ContainerProperties) (queueIndex, bool, error) {
	preferred, err := checkProviderContainer(cfg.Database, props)
	if err != nil {
		return preferred, false, err
	}
	if paths := unindexedFilterPaths(props.IndexingPolicy); len(paths) > 0 {
		cfg.Logger.Warn("cdb: the container's indexing policy leaves out properties the provider's queries filter on; "+
			"those queries read every document their other filters select, at more RU as the container fills: "+
			"add the paths to its included paths (an index transformation, no new container)",
			"database", cfg.Database, "container", cfg.Container, "paths", strings.Join(paths, " "))
	}
	q, waiting := servingIndex(props, preferred)
	return q, waiting, nil
}

// explainContainerRead turns a failed read of the container into an error
// that names what is missing, the database or the container.
func explainContainerRead(ctx context.Context, client *Client, cfg Config, err error) error {
	if !IsNotFound(err) {
		return fmt.Errorf("cdb: new provider: read container %q in database %q: %w", cfg.Container, cfg.Database, err)
	}
	if _, dbErr := client.ReadDatabase(ctx, cfg.Database); IsNotFound(dbErr) {
		return fmt.Errorf("cdb: new provider: database %q not found: create it and the container with the definition "+
			"in docs/real-account.md, or let NewProvider create them (Config.SkipBootstrap false): %w", cfg.Database, dbErr)
	}
	const fix = "create it with the definition in docs/real-account.md, or let NewProvider create it (Config.SkipBootstrap false)"
	return fmt.Errorf("cdb: new provider: container %q in database %q not found: %s: %w", cfg.Container, cfg.Database, fix, err)
}

// Close stops the outbox relay, the gauge sampling and the wake timers. Undelivered effects stay
// in Cosmos DB for the next process's reconciler.
func (p *CosmosProvider) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true) // Keeps: H5
		if p.handOverStop != nil {
			p.handOverStop()
			p.handOverDone.Wait()
		}
		p.giveBackAllEager()
		p.giveBackGivenUp()
		p.stop()
		p.done.Wait()
		p.orchSignal.stop()
		p.workSignal.stop()
	})
	return nil
}

// Name identifies the provider.
func (p *CosmosProvider) Name() string { return ProviderName }

// Version is the provider's version.
func (p *CosmosProvider) Version() string { return ProviderVersion }

// Admin returns the provider itself: it implements ProviderAdmin.
func (p *CosmosProvider) Admin() (ProviderAdmin, bool) { return p, true }

// Client is the Cosmos DB client the provider uses (for its diagnostics).
func (p *CosmosProvider) Client() *Client { return p.client }

// Container is the container the provider stores everything in.
func (p *CosmosProvider) Container() *ContainerClient { return p.container }

// now is the service's time as this process reads it (serviceclock.go):
// its clock, corrected by the offset the account's responses show once
// that is over clockTolerance. Every time the provider writes or compares
// comes from here, so every process reads time as the service does.
func (p *CosmosProvider) now() time.Time { return p.cfg.Now().Add(p.client.ClockOffset()) }

func (p *CosmosProvider) nowMs() int64 { return p.now().UnixMilli() }

// Locks are written and taken on the service's clock as this process
// reads it, which a corrected clock (serviceclock.go) reads only to within
// the offset's spread. So a lock this process takes for itself runs from
// the latest the service's time may be (lockUntil), and a lock another
// process may hold is judged expired by the earliest (expiredByMs): a lock
// lasts its length by the service's clock, and is taken only once it
// ended by it, whatever the estimate's error. Both are now() itself for a
// clock within clockTolerance, which is used as it is.

// lockUntil is when a lock this process takes now for d ends (ms).
func (p *CosmosProvider) lockUntil(d time.Duration) int64 {
	return p.nowMs() + p.client.service.spread().Milliseconds() + d.Milliseconds()
}

// leftOn is how long a lock this process holds until then (ms) has left
// by the service's clock, at least.
func (p *CosmosProvider) leftOn(until int64) time.Duration {
	left := until - p.nowMs() - p.client.service.spread().Milliseconds()
	return max(time.Duration(left)*time.Millisecond, 0)
}

// expiredBy is the time (ms) by which, at now, a lock's expiry is judged
// passed when the lock may be another process's: a candidate query's, a
// lock batch's, a claim's. What is visible is judged by now itself.
func (p *CosmosProvider) expiredBy(now int64) int64 {
	return now - p.client.service.spread().Milliseconds()
}

// expiredByMs is expiredBy now.
func (p *CosmosProvider) expiredByMs() int64 { return p.expiredBy(p.nowMs()) }

// ServiceTime is the account's time as this process reads it: Config.Now
// corrected by the client's ClockOffset (Client.ServiceTime). The durable
// runtime takes it as its clock unless told otherwise, so the timers an
// orchestration sets are due on the service's time too.
func (p *CosmosProvider) ServiceTime() time.Time { return p.now() }

// A seq orders queue items: it is a hybrid logical clock, microsecond shaped
// (as the seqs of earlier versions, which were the clock in µs): the
// milliseconds of this process's clock, or of the highest seq it has seen
// from another process (observeSeq) where that is ahead, times 1000, plus a
// counter for the seqs handed out within one millisecond. What it takes over
// from others is bounded (maxSeqLead): a seq further ahead of this process's
// clock comes from a clock that is wrong, and adopting it would spread that
// clock to every partition this process writes to and every fetch it serves,
// and one process's wrong clock must not change what the healthy ones do. So
// its millisecond part (seqMs) runs ahead of the clock by at most maxSeqLead
// (or past 1000 seqs in one millisecond), and a queue item may be made
// visible at it (sequencedVisibleAt) without hiding it from its own writer.

// maxSeqLead is how far ahead of this process's clock a seq it takes over
// from another process may be. Processes whose clocks agree within it keep
// their messages' order (sequencer.go); one further ahead is a wrong clock,
// whose seqs are neither adopted nor followed.
const maxSeqLead = time.Second

// nextSeq hands out the next seq.
func (p *CosmosProvider) nextSeq() int64 { return p.reserveSeqs(1) }

// reserveSeqs hands out n consecutive seqs at once and returns the first.
func (p *CosmosProvider) reserveSeqs(n int) int64 {
	for {
		last := p.seq.Load()
		first := max(p.nowMs()*1000, last+1)
		if p.seq.CompareAndSwap(last, first+int64(n)-1) {
			return first
		}
	}
}

// seqCeiling is the highest seq this process takes over from another:
// its clock plus maxSeqLead.
func (p *CosmosProvider) seqCeiling() int64 {
	return (p.nowMs()+maxSeqLead.Milliseconds())*1000 + 999
}

// observeSeq moves the seqs this process hands out past seen, unless seen
// is beyond seqCeiling: a wrong clock's, which this process ignores.
func (p *CosmosProvider) observeSeq(seen int64) {
	if seen > p.seqCeiling() {
		return
	}
	for {
		last := p.seq.Load()
		if seen <= last || p.seq.CompareAndSwap(last, seen) {
			return
		}
	}
}

func seqMs(seq int64) int64 { return seq / 1000 }

// visibleHorizon is the latest visibility time a fetch serves an immediate
// item at (queueDoc.SeqVisible): now, or the millisecond of the highest seq
// this process has handed out or seen where that is ahead, so its own
// items, and those sequenced after one it has seen, are never hidden from
// it by a clock that lags (or, in a test, stands still). Items with a due
// time (timers, delays) are served by the clock alone, never before it.
func (p *CosmosProvider) visibleHorizon(now int64) int64 {
	return max(now, seqMs(p.seq.Load()))
}

// partitionKey is the PartitionKey of an instance's documents.
func partitionKey(instance string) PartitionKey {
	return NewPartitionKeyString(instancePartitionKey(instance))
}
