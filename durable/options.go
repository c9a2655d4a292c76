package durable

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/duroxide-go/cdb"
)

// DuroxideVersion is the duroxide version this runtime implements, with
// the revision of this runtime's own replay rules as semantic-versioning
// build metadata ("+cdb.N"; see the package doc's "Events"). It is stamped
// on every event it writes and pinned on every execution it starts, and it
// bounds the executions it will replay by default. Build metadata takes no
// part in version ranges, so providers and duroxide's capability filters
// see 0.1.32.
const DuroxideVersion = "0.1.32+" + cdbRulesMark + ".1"

// duroxideSemver is DuroxideVersion parsed.
var duroxideSemver = cdb.SemanticVersion{Major: 0, Minor: 1, Patch: 32, Build: cdbRulesMark + ".1"}

// Options configures a Runtime. The zero value of every field means its
// default, so Options{} is a working configuration.
type Options struct {
	// OrchestrationConcurrency is the number of orchestration turns run at
	// once (default 2).
	OrchestrationConcurrency int
	// OrchestrationAcksInFlight is how many commits of a dispatcher's
	// turns may be on their way to the store while it fetches and runs the
	// next turn (default 4; 1 keeps one commit under way a dispatcher),
	// as WorkerAcksInFlight is for activities. A turn waiting for its
	// commit keeps its instance locked (its lock renewed), so the next
	// turn of the same instance waits for it as before; a dispatcher whose
	// commits are all under way waits for one before it runs the next.
	OrchestrationAcksInFlight int
	// WorkerOnly runs no orchestration turns: a process that only runs
	// activities.
	WorkerOnly bool
	// WorkerConcurrency is the number of activities run at once (default 2).
	WorkerConcurrency int
	// WorkerAcksInFlight is how many results of a worker slot's finished
	// activities may be on their way to the store while the slot runs the
	// next (default 4; 1 keeps one ack under way a slot). An ack is a round
	// trip, often longer than a short activity: with one under way, a slot
	// ran one activity per round trip whatever the activity's length. Each
	// result waiting for its ack is held in memory and its lock renewed; a
	// slot whose acks are all under way waits for one before it runs the
	// next, so a slow store slows the fetching.
	WorkerAcksInFlight int
	// MinPollInterval is the least time between two fetches of a dispatcher
	// that found no work (default 100ms). How soon new work is seen also
	// depends on the provider: cdb.Config.PollInterval for the Cosmos DB
	// provider, which wakes waiting fetches at once for work enqueued by
	// the same process.
	MinPollInterval time.Duration
	// LongPollTimeout is how long a fetch may wait in the provider for
	// work to arrive (default 30s). Shutdown interrupts it.
	LongPollTimeout time.Duration

	// OrchestratorLockTimeout is how long a fetched instance stays locked
	// to this runtime (default 5s); the lock is renewed while the turn
	// runs.
	OrchestratorLockTimeout time.Duration
	// OrchestratorLockRenewalBuffer is how long before its expiry a long
	// instance lock is renewed (default 2s).
	OrchestratorLockRenewalBuffer time.Duration
	// WorkerLockTimeout is how long a fetched activity stays locked to this
	// runtime (default 30s); the lock is renewed while the activity runs.
	// Another runtime runs the activity again if the lock expires.
	WorkerLockTimeout time.Duration
	// WorkerLockRenewalBuffer is how long before its expiry a long
	// activity lock is renewed (default 5s).
	WorkerLockRenewalBuffer time.Duration

	// MaxAttempts is the poison threshold: a message fetched more often
	// than this fails its orchestration or activity (default 10).
	MaxAttempts uint32
	// ActivityCancellationGrace is how long a cancelled activity (its
	// runtime shutting down, or its lock lost) may keep running before its
	// result is dropped (default 10s); a shutting-down runtime keeps
	// renewing the activity's lock meanwhile. A handler that ignores its
	// cancellation past the grace keeps its item hidden until its lock
	// expires (at most WorkerLockTimeout later: the lock is neither renewed
	// nor released), and its result is dropped. The lock is not renewed
	// until the handler returns, so that Shutdown returns at most a grace
	// after its context ends.
	ActivityCancellationGrace time.Duration
	// ShutdownTimeout is how long Run lets the turns and activities in
	// flight finish once its context ends, before it abandons them
	// (default 30s; see Shutdown).
	ShutdownTimeout time.Duration

	// SessionLockTimeout is how long a session (see WithSession) stays
	// locked to this runtime without a renewal (default 30s).
	SessionLockTimeout time.Duration
	// SessionLockRenewalBuffer is how long before its expiry a session
	// lock is renewed (default 5s).
	SessionLockRenewalBuffer time.Duration
	// SessionIdleTimeout is how long a session without work stays pinned
	// to this runtime (default 5m); it must exceed WorkerLockTimeout -
	// WorkerLockRenewalBuffer.
	SessionIdleTimeout time.Duration
	// SessionCleanupInterval is how often sessions nobody owns any more are
	// deleted (default 5m).
	SessionCleanupInterval time.Duration
	// MaxSessionsPerRuntime bounds the distinct sessions with activities
	// in flight in this runtime (default 10).
	MaxSessionsPerRuntime int
	// WorkerNodeID is a stable session owner for all worker slots, so a
	// restarted process keeps its sessions; empty gives each slot an
	// owner of its own that ends with the runtime.
	WorkerNodeID string
	// WorkerTagFilter selects the activity tags this runtime runs (see
	// WithTag); the zero value runs untagged activities only.
	WorkerTagFilter cdb.TagFilter
	// SupportedReplayVersions bounds the duroxide versions whose executions
	// this runtime replays (default 0.0.0 to 0.1.32); executions pinned to
	// other versions are left to other runtimes. Versions compare without
	// build metadata, as the providers' filters compare them, so 0.1.32
	// includes this runtime's own 0.1.32+cdb.1.
	SupportedReplayVersions *cdb.SemverRange

	// UnregisteredBackoffBase is the first wait before retrying work whose
	// orchestration or activity is not registered here (default 1s):
	// another runtime, or a later registration, may run it. The wait
	// doubles up to UnregisteredBackoffMax (default 60s). A turn parked
	// for nondeterminism (NondeterminismPolicy) is retried on the same
	// schedule.
	UnregisteredBackoffBase time.Duration
	// UnregisteredBackoffMax is the longest wait between such retries.
	UnregisteredBackoffMax time.Duration
	// Unregistered says when such work stops being retried and fails
	// (default UnregisteredFailAfterBackoff): activities, and first starts
	// of an orchestration name with no version registered here. The
	// default fails a misspelled name within seconds, but also new work
	// that an old process of a rolling deploy fetches that many times in a
	// row: ship a registration one deploy before the code that uses it, or
	// use UnregisteredBackoffUntilPoison while builds are mixed.
	Unregistered UnregisteredPolicy
	// UnregisteredAttempts is the fetch on which such work fails under
	// UnregisteredFailAfterBackoff (default 3: given back after 1s and 2s
	// with the default backoff, failed on the third fetch).
	UnregisteredAttempts uint32

	// NondeterminismPolicy says what a turn whose code no longer matches
	// the instance's history does: park the instance and retry with
	// backoff until matching code runs it (ParkOnNondeterminism, the
	// default), or fail it (FailOnNondeterminism).
	NondeterminismPolicy NondeterminismPolicy

	// Telemetry receives the runtime's metrics through its Meter and its
	// spans (each turn, activity execution and fired timer) through its
	// Tracer; see the package doc's "Telemetry". The zero value records
	// nothing. The Cosmos DB requests of a turn or an activity are
	// measured by the provider's client, through its own telemetry option,
	// its request spans children of the turn's or activity's span.
	Telemetry cdb.Telemetry

	// Logger receives the runtime's logs (default: discarded).
	Logger *slog.Logger
	// Now is the runtime's clock: it stamps events, gives
	// OrchestrationContext.UtcNow its value and computes the instant a
	// timer is due (its FireAtMs). It does not decide when a timer fires:
	// the provider makes the timer's message visible by its own clock
	// (cdb.Config.Now for the Cosmos DB provider), so a test that skips
	// time moves both (package durabletest). By default it is the
	// provider's ServiceTime when the provider has one (the Cosmos DB
	// provider: the account's time, whatever this machine's clock says, so
	// a timer fires when its delay has passed for every process), else
	// time.Now.
	Now func() time.Time

	// sessionRenewalAfter waits out the delay before the next session
	// renewal (time.After); a test fires it by hand, so what it checks
	// about when renewals come does not hang on this machine's load.
	sessionRenewalAfter func(time.Duration) <-chan time.Time
	// lockRenewalAfter does the same for the renewals of instance and
	// worker locks (renewEvery).
	lockRenewalAfter func(time.Duration) <-chan time.Time
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	setDuration := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setInt := func(n *int, def int) {
		if *n <= 0 {
			*n = def
		}
	}
	setInt(&o.OrchestrationConcurrency, 2)
	setInt(&o.WorkerConcurrency, 2)
	setInt(&o.WorkerAcksInFlight, 4)
	setInt(&o.OrchestrationAcksInFlight, 4)
	setDuration(&o.MinPollInterval, 100*time.Millisecond)
	setDuration(&o.LongPollTimeout, 30*time.Second)
	setDuration(&o.OrchestratorLockTimeout, 5*time.Second)
	setDuration(&o.OrchestratorLockRenewalBuffer, 2*time.Second)
	setDuration(&o.WorkerLockTimeout, 30*time.Second)
	setDuration(&o.WorkerLockRenewalBuffer, 5*time.Second)
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	setDuration(&o.ActivityCancellationGrace, 10*time.Second)
	setDuration(&o.ShutdownTimeout, 30*time.Second)
	setDuration(&o.SessionLockTimeout, 30*time.Second)
	setDuration(&o.SessionLockRenewalBuffer, 5*time.Second)
	setDuration(&o.SessionIdleTimeout, 5*time.Minute)
	setDuration(&o.SessionCleanupInterval, 5*time.Minute)
	setInt(&o.MaxSessionsPerRuntime, 10)
	if o.sessionRenewalAfter == nil {
		o.sessionRenewalAfter = time.After
	}
	if o.lockRenewalAfter == nil {
		o.lockRenewalAfter = time.After
	}
	setDuration(&o.UnregisteredBackoffBase, time.Second)
	setDuration(&o.UnregisteredBackoffMax, time.Minute)
	if o.UnregisteredAttempts == 0 {
		o.UnregisteredAttempts = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// validate rejects combinations duroxide refuses at start.
func (o Options) validate() error {
	renewedBefore := o.WorkerLockTimeout - o.WorkerLockRenewalBuffer
	if o.SessionIdleTimeout <= renewedBefore {
		// An activity renewing its lock keeps its session busy; a session
		// idle timeout shorter than that would unpin live sessions.
		return fmt.Errorf("durable: options: SessionIdleTimeout (%v) must exceed WorkerLockTimeout - WorkerLockRenewalBuffer (%v)",
			o.SessionIdleTimeout, renewedBefore)
	}
	if o.SupportedReplayVersions != nil && o.SupportedReplayVersions.Max.Less(o.SupportedReplayVersions.Min) {
		return errors.New("durable: options: SupportedReplayVersions has Max below Min")
	}
	return nil
}

// capabilityFilter is the filter every orchestration fetch passes.
func (o Options) capabilityFilter() cdb.DispatcherCapabilityFilter {
	return cdb.DispatcherCapabilityFilter{SupportedDuroxideVersions: []cdb.SemverRange{o.replayRange()}}
}

// replayRange is the range of pinned versions this runtime replays.
func (o Options) replayRange() cdb.SemverRange {
	if o.SupportedReplayVersions != nil {
		return *o.SupportedReplayVersions
	}
	return cdb.SemverRange{Max: withoutBuild(duroxideSemver)}
}

// renewalInterval is how often a lock of this timeout is renewed: duroxide
// renews long locks buffer before they expire and short ones at half their
// timeout, in whole seconds. Locks of less than three seconds (tests use
// them, and a lock handed out with little left is renewed by this rule,
// see renewalSchedule) are renewed at half their timeout exactly: rounded
// up, a lock of 2.1 s would be renewed 0.1 s before its expiry, whereas
// from three seconds on the rounding leaves at least a second.
func renewalInterval(timeout, buffer time.Duration) time.Duration {
	if timeout >= 15*time.Second {
		return max(timeout-min(buffer, timeout), time.Second)
	}
	if timeout < 3*time.Second {
		return max(timeout/2, 10*time.Millisecond)
	}
	return time.Duration(math.Ceil(timeout.Seconds()/2)) * time.Second
}

// unregisteredBackoff spaces retries of work without a registered handler:
// base·2^(attempt-1), the exponent capped at 6, at most max.
func (o Options) unregisteredBackoff(attempt uint32) time.Duration {
	exp := min(max(int(attempt)-1, 0), 6)
	return min(o.UnregisteredBackoffBase<<exp, o.UnregisteredBackoffMax)
}
