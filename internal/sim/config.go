package sim

import (
	"fmt"
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

	Features Features
	Faults   Faults

	// ReplayFlags are the test flags that make this configuration (besides
	// the seed), for the replay command a report prints.
	ReplayFlags string

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
	// CrashEvery (default 3s), part way through an ack or a relay when
	// one comes within a second; a fresh node replaces it.
	Crashes    bool
	CrashEvery time.Duration
	// ShortLocks gives some nodes lock timeouts of a few hundred ms.
	ShortLocks bool
	// ClockSkew is the most a node's clock is off (each node draws its own
	// offset in ±ClockSkew); keep it well under half the shortest lock.
	ClockSkew time.Duration
}

// AllFeatures turns every workload feature on.
func AllFeatures() Features {
	return Features{
		Chains: true, FanOuts: true, Timers: true, SubOrchestrations: true, DetachedStarts: true,
		QueueEvents: true, ExternalEvents: true, ActivityEvents: true, Sessions: true, KV: true,
		Cancellation: true, DeleteReuse: true, Prune: true, Tags: true, CapabilityFilters: true,
		LongActivities: true, CappedTurns: true, WideFanOuts: true, LargeFanOuts: true, BacklogMax: 100,
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
	return Config{Seed: seed, Features: f, Faults: AllFaults(0.05)}
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
	setInt(&c.Nodes, 3)
	setInt(&c.Scenarios, 30)
	setInt(&c.InFlight, 8)
	setDuration(&c.Stall, time.Minute)
	setInt(&c.Features.FanOutMax, 20)
	setInt(&c.Features.LargePayloadBytes, 25*1024)
	setInt(&c.Features.BacklogMax, 20)
	setDuration(&c.Faults.CrashEvery, 3*time.Second)
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
