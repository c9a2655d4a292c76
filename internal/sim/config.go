package sim

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"time"
)

// Config is what a run does. Every feature and fault has its own toggle, so
// a run can be narrowed to what passes today and widened as defects are
// fixed; the invariants are the same whatever is on.
type Config struct {
	Seed int64
	// Nodes is how many nodes run at once (default 3); a crashed node is
	// replaced, so the count stays.
	Nodes int
	// Scenarios is how many workload scenarios a bounded run starts
	// (default 30). When Duration is set, scenarios keep starting until it
	// has passed instead.
	Scenarios int
	Duration  time.Duration
	// InFlight bounds the scenarios running at once (default 8).
	InFlight int
	// PartitionKeyRanges of the account's container; 0 picks 1–4 from the
	// seed.
	PartitionKeyRanges int
	// Stall is how long the whole run may go without any progress (a turn
	// or an activity completion committing, an activity finishing, an
	// instance finishing or its history growing) before the harness stops
	// waiting; what it waited for is then reported (default 60s). Nothing
	// else bounds a wait in a bounded run: a slow machine makes a run
	// longer, never red (progress.go).
	Stall time.Duration
	// HardCap bounds each of the harness's waits by the wall clock as
	// well (0: none). Only the soak sets it, so a livelock that commits
	// forever cannot keep a soak from ending.
	HardCap time.Duration
	// HostSlowness is how many times slower than an idle host without the
	// race detector this one runs (hostspeed.go); short locks are drawn
	// that many times longer. 0: measured when the run starts.
	HostSlowness float64

	Features Features
	Faults   Faults
	// Pending are invariants a defect still open breaks under this
	// configuration's workload: they are checked and their violations
	// printed, but they do not fail the run. A name leaves the list when
	// its fix lands.
	Pending []string

	// ReplayFlags are the test flags that make this configuration (besides
	// the seed), for the replay command a report prints.
	ReplayFlags string

	// Wire, when set, receives a line per request that mentions one of
	// WireMention's comma-separated texts (instance ids, or parts of them)
	// in its partition key, body or answer, from every node (wire.go).
	Wire        io.Writer
	WireMention string

	// Logger receives the providers' and runtimes' logs (default: none).
	Logger *slog.Logger
}

// Features are the workload's kinds of work; a scenario kind runs only when
// its toggle is on.
type Features struct {
	Chains            bool // sequential activities
	FanOuts           bool // parallel activities
	Timers            bool
	SubOrchestrations bool
	DetachedStarts    bool
	QueueEvents       bool // events enqueued from outside, consumed with DequeueEvent, across continue-as-new
	ExternalEvents    bool // RaiseEvent to WaitForEvent subscriptions
	ActivityEvents    bool // events one instance sends another from its activities
	Sessions          bool // sessions shared across instances
	KV                bool
	Cancellation      bool // cancel from outside and Select-loser cascades
	DeleteReuse       bool // delete finished or running instances and start their ids again
	Prune             bool // prune old executions of continue-as-new instances
	Tags              bool // tagged activities and worker tag filters
	// CapabilityFilters gives some extra nodes orchestration dispatchers
	// whose replay range excludes every execution (an old build during a
	// rolling upgrade): the work must flow around them.
	CapabilityFilters bool
	// CappedTurns gives some nodes a cap of 10 messages per turn, so an
	// event backlog overflows a turn's batch (the default cap is 40).
	CappedTurns bool
	// LongActivities makes some activities outlive their worker lock, so
	// the lock is renewed (and renewal faults matter).
	LongActivities bool
	// Retention gives every node a retention of finished instances
	// (retention.go): each finishing commit starts giving its partition
	// TTLs, amid the run's faults, crashes, deletions and restarts.
	Retention bool

	// FanOutMax bounds a fan-out's width (default 20, 150 with wide or
	// large fan-outs). WideFanOuts adds fan-outs of 101–FanOutMax activities
	// with small inputs (their overflow goes through an outbox);
	// LargeFanOuts adds such fan-outs with inputs up to LargePayloadBytes
	// (multi-MB totals).
	FanOutMax         int
	WideFanOuts       bool
	LargeFanOuts      bool
	LargePayloadBytes int
	// BacklogMax bounds the events queued for one instance (default 20);
	// above 60 a continue-as-new meets a capped batch.
	BacklogMax int

	// The toggles below reach paths the ones above do not.
	//
	// TreeDeletes deletes a parent with its child while they run, through
	// a process that crashes part way through the deletion (or, with
	// Faults.Pauses, stalls there longer than AbandonedDeletionAge and then
	// resumes), and starts the parent's id again as soon as it reads
	// NotFound.
	TreeDeletes bool
	// LargeContinueAsNew runs Inboxes whose continue-as-new input is near
	// 1 MB (its ContinueAsNew message goes through an outbox) and crashes
	// the process that commits such a turn; the sim's clock then jumps by
	// minutes (the process is down for minutes) before its replacement
	// starts, while events keep coming.
	LargeContinueAsNew bool
	// MixedNodes mixes every node configuration the provider offers in one
	// run: process leases on and off, ShortPolling, an old build's
	// capability filter next to the new build's, tag filters; and the
	// workload's events are raised through random nodes, not only the
	// application, so each configuration's own writes are exercised.
	MixedNodes bool
	// LargeValues writes KV near its limits (40 keys of 60 KB over 4
	// turns) and outputs of about 1 MB.
	LargeValues bool
	// RefusedTurns runs orchestrations whose first turn the provider
	// refuses (an activity input over a document's size): each must end
	// Failed, readable as failed with its name.
	RefusedTurns bool
	// NeverStartedEvents raises, in the quiet phase, events for ids that
	// never start, and the idle probe then measures what they cost.
	NeverStartedEvents bool
	// FirstTurnStarts adds a node whose fetches wait (a starter: long
	// polling, eager dispatch, four dispatchers at least), and every
	// scenario runs a first-turn round beside its own work: starts through
	// that node, so its waiting fetches take them and their first turns'
	// commits create the instances, in bursts, with faults aimed at the
	// commit, crashes of the node while a start is pending or committing,
	// pauses and stalled turns longer than the provider's wait for the
	// commit, and two starts of one id racing through two nodes
	// (firstturns.go).
	FirstTurnStarts bool
	// LongSequences runs, beside the scenarios, sequential orchestrations
	// of 500 short activities (every tenth raced against a timeout timer,
	// every hundredth after a sleep on a timer): their writer holds the
	// instance through hundreds of chained turns, each derived from the one
	// before (sequences.go; bounded-names).
	LongSequences bool
	// EagerCancels runs scenarios that cancel or delete work a node locked
	// eagerly for its own fetches while it waits in memory: a timer raced
	// against many activities (the losers cancelled by the turn that saw
	// the winner), and a fan-out deleted through the node its first turn
	// locked items to (cancels.go; cancelled-not-started).
	EagerCancels bool
	// ProductionLocks adds a production node (locks of 15-20 s, renewed a
	// buffer before they expire, as production's are; never crashed,
	// paused or shut down) and a slow-commit round: a commit of that node
	// held back for seconds, so the item it locked eagerly is handed out
	// with less than the runtime's renewal interval left (prodlocks.go;
	// one-holder).
	ProductionLocks bool
	// ChainShutdowns shuts a node down while a chain of short activities
	// runs on it, so its provider's Close races the chain's completion and
	// hand-over (closes.go; close-gives-back, which the Shutdowns' closes
	// meet too).
	ChainShutdowns bool
	// LostFirstTurnReads adds a first-turn plan: the first turn's commit
	// applies with its answer lost, and the reads that follow fail a few
	// times before they get through, so the commit is found applied late;
	// the activity it locked eagerly must not stay hidden
	// (firstturns.go; eager-not-hidden).
	LostFirstTurnReads bool
}

// Faults are the failures injected while the workload runs.
type Faults struct {
	// Rate is the probability that a node's request meets a fault (e.g.
	// 0.05); the kind is drawn from the enabled ones.
	Rate                 float64
	Throttle             bool // 429 with retry-after
	Unavailable          bool // 503
	Timeout              bool // 408 without executing
	Gone                 bool // 410/1002 (partition key range gone)
	DropConnection       bool // no response, not executed
	LoseResponse         bool // executed and committed, response lost
	LatencySpike         bool // 20–200 ms before the request
	LatencySpikeMaxDelay time.Duration

	// Crashes makes a node stop without cleanup, on average every
	// CrashEvery (default 3s) and never before the run progressed
	// CrashWork times since the last crash (default 250, about what a run
	// without the race detector does in CrashEvery on an idle 2-core host;
	// progress is a turn or an activity completion committing, an activity
	// finishing, an instance ending or its history growing), part way through an ack or a relay
	// when one comes within a second; a fresh node replaces it. The work
	// bound keeps a slow machine (the race detector, a loaded host) from
	// meeting more crashes per unit of work than a fast one: a turn that
	// takes ten times longer would otherwise meet ten times the crashes,
	// each counting an attempt, until it is poisoned. Pauses are paced the
	// same way.
	Crashes    bool
	CrashEvery time.Duration
	CrashWork  int64
	// ShortLocks gives some nodes lock timeouts of a few hundred ms on an
	// idle host, longer in proportion on a slower one (Config.HostSlowness).
	ShortLocks bool
	// ClockSkew is the most a node's clock is off (each node draws its own
	// offset in ±ClockSkew); keep it well under half the shortest lock.
	ClockSkew time.Duration

	// BadClock, when set, adds one worker-only node whose clock is ahead
	// by a random amount up to it (minutes to an hour), through which the
	// harness also raises some events: one bad clock must not change what
	// the healthy nodes do (timer-not-early), and the node, whose client
	// signs with that clock too, must work as a healthy one (it reads the
	// service's time from the account's answers).
	BadClock time.Duration
	// TransientRefusals adds the refusals a real account gives for a while
	// (401 while a token refreshes, 403 while a role propagates, 404/1003
	// after a container is created, 413 on a large request when its size
	// accounting differs) to the node's fault kinds; the harness's own
	// calls do not meet them, an activity's calls through its node do.
	TransientRefusals bool
	// Shutdowns shuts a node's runtime down (Runtime.Shutdown with a short
	// context) while an activity that does not stop at once runs on it,
	// then replaces the node.
	Shutdowns bool
	// Pauses stalls a node (every request it sends waits) for longer than
	// its locks and leases, then lets it resume.
	Pauses bool
}

// AllFeatures turns every workload feature on.
func AllFeatures() Features {
	return Features{
		Chains: true, FanOuts: true, Timers: true, SubOrchestrations: true, DetachedStarts: true,
		QueueEvents: true, ExternalEvents: true, ActivityEvents: true, Sessions: true, KV: true,
		Cancellation: true, DeleteReuse: true, Prune: true, Tags: true, CapabilityFilters: true,
		LongActivities: true, CappedTurns: true, WideFanOuts: true, LargeFanOuts: true, BacklogMax: 100,
		Retention: true,
	}
}

// AllFaults turns every fault on at rate.
func AllFaults(rate float64) Faults {
	return Faults{
		Rate: rate, Throttle: true, Unavailable: true, Timeout: true, Gone: true, DropConnection: true,
		LoseResponse: true, LatencySpike: true, Crashes: true, ShortLocks: true, ClockSkew: 50 * time.Millisecond,
	}
}

// Passing is the configuration `go test` runs: every feature and fault, at
// a 5% fault rate, with wide and large fan-outs kept narrow enough (just
// over a batch's 100 operations) for a bounded run's time.
func Passing(seed int64) Config {
	f := AllFeatures()
	f.FanOutMax = 120
	f.LargePayloadBytes = 16 * 1024
	f.MixedNodes, f.LargeValues, f.RefusedTurns, f.NeverStartedEvents = true, true, true, true
	f.FirstTurnStarts = true
	// A long sequence is 500 turns one after another, about as long as the
	// rest of a run under the race detector: odd seeds run one (three of
	// go test's five, every other soak round), as LargeContinueAsNew runs
	// on even ones.
	f.LongSequences = seed%2 == 1
	f.EagerCancels = true
	f.ProductionLocks = true
	f.ChainShutdowns = true
	f.LostFirstTurnReads = true
	// TreeDeletes found a restarted parent taking its previous life's child
	// completion (fixed: lives.go) and a child started late that the
	// deletion missed (fixed: adoptLateChildren).
	f.TreeDeletes = true
	faults := AllFaults(0.05)
	faults.TransientRefusals, faults.Shutdowns, faults.Pauses = true, true, true
	// LargeContinueAsNew found a fetch that handed over a lock already
	// expired (fixed: ARCHITECTURE.md, Locks) and a batch handed over
	// without its instance's ContinueAsNew message (fixed: the fetch holds
	// it back); BadClock found a bad node's own items visible at its own
	// time (fixed: serviceclock.go). Under the race detector both poisoned
	// instances by host speed alone, short locks expiring under healthy
	// work: short locks now scale with the host (Config.HostSlowness).
	// LargeContinueAsNew runs on even seeds (two of go test's five, every
	// other soak round): its megabyte turns and the production-like
	// reconcilers it gives every node (1–5 s) make a run several times
	// longer under the race detector.
	f.LargeContinueAsNew = seed%2 == 0
	faults.BadClock = time.Hour
	// stamp-honoured is reported, not failed: it measures whether own-writes
	// stamps pay off (a writer takes most of what it stamps), and on a
	// loaded machine (the race detector, a busy CI host) a writer's fetch
	// is often too slow to. A wrong stamp costs at most a poll interval
	// (TestAStreamOfStampedMessagesHoldsAnInstanceBackOnePollIntervalAtMost);
	// -sim.strict fails on it.
	return Config{Seed: seed, Features: f, Faults: faults, Pending: []string{invStampHonoured}}
}

func (c Config) withDefaults() Config {
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDuration := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	if c.HostSlowness <= 0 {
		c.HostSlowness = measureHostSlowness()
	}
	setInt(&c.Nodes, 3)
	setInt(&c.Scenarios, 30)
	setInt(&c.InFlight, 8)
	setDuration(&c.Stall, time.Minute)
	setInt(&c.Features.FanOutMax, 20)
	setInt(&c.Features.LargePayloadBytes, 25*1024)
	setInt(&c.Features.BacklogMax, 20)
	setDuration(&c.Faults.CrashEvery, 3*time.Second)
	if c.Faults.CrashWork <= 0 {
		c.Faults.CrashWork = 250
	}
	setDuration(&c.Faults.LatencySpikeMaxDelay, 200*time.Millisecond)
	if (c.Features.LargeFanOuts || c.Features.WideFanOuts) && c.Features.FanOutMax <= 100 {
		c.Features.FanOutMax = 150
	}
	return c
}

// Enable turns on the named toggles of Features and Faults (field names,
// e.g. "Sessions", "LoseResponse", "Crashes"), so a command line can widen a
// run: -sim.enable=Sessions,Crashes.
func (c *Config) Enable(names ...string) error {
	for _, name := range names {
		if name == "" {
			continue
		}
		if name == "BadClock" { // a duration: on means an hour
			c.Faults.BadClock = time.Hour
			continue
		}
		if !setToggle(reflect.ValueOf(&c.Features).Elem(), name) && !setToggle(reflect.ValueOf(&c.Faults).Elem(), name) {
			return fmt.Errorf("sim: no toggle named %q (see Features and Faults)", name)
		}
	}
	return nil
}

func setToggle(v reflect.Value, name string) bool {
	f := v.FieldByName(name)
	if !f.IsValid() || f.Kind() != reflect.Bool {
		return false
	}
	f.SetBool(true)
	return true
}

// ProcessFeatures is the workload of the two-process scenario: what holds
// today, plus fan-outs over 100 activities (whose overflow goes through an
// outbox, so a kill can land mid-delivery) with small inputs.
func ProcessFeatures() Features {
	f := Passing(0).Features
	f.Tags = false // every worker process runs every activity
	f.WideFanOuts = true
	return f
}
