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

// DuroxideVersion is the duroxide version this runtime implements. It is
// stamped on every event it writes and pinned on every execution it starts,
// and it bounds the executions it will replay by default.
const DuroxideVersion = "0.1.29"

// duroxideSemver is DuroxideVersion parsed.
var duroxideSemver = cdb.NewSemanticVersion(0, 1, 29)

// Options configures a Runtime. The zero value of each field means
// duroxide's default (contract §5.1).
type Options struct {
	OrchestrationConcurrency int // orchestration dispatcher loops (default 2)
	// WorkerOnly runs no orchestration dispatchers: a node that only runs
	// activities (duroxide's orchestration_concurrency = 0).
	WorkerOnly        bool
	WorkerConcurrency int           // worker dispatcher loops (default 2)
	MinPollInterval   time.Duration // least time between two fetches that found nothing (default 100ms)
	LongPollTimeout   time.Duration // poll timeout passed to the provider's fetches (default 30s)

	OrchestratorLockTimeout       time.Duration // instance lock per fetch (default 5s)
	OrchestratorLockRenewalBuffer time.Duration // renew this long before expiry, for long locks (default 2s)
	WorkerLockTimeout             time.Duration // worker item lock per fetch (default 30s)
	WorkerLockRenewalBuffer       time.Duration // (default 5s)

	// MaxAttempts is the poison threshold: a message fetched more often
	// than this fails its orchestration or activity (default 10).
	MaxAttempts uint32
	// ActivityCancellationGrace is how long a cancelled activity may keep
	// running before its result is dropped (default 10s).
	ActivityCancellationGrace time.Duration

	SessionLockTimeout       time.Duration // (default 30s)
	SessionLockRenewalBuffer time.Duration // (default 5s)
	SessionIdleTimeout       time.Duration // an idle session is left to expire (default 5m)
	SessionCleanupInterval   time.Duration // how often orphaned sessions are deleted (default 5m)
	MaxSessionsPerRuntime    int           // distinct sessions in flight (default 10)
	// WorkerNodeID is a stable session owner for all worker slots; empty
	// gives each slot an ephemeral owner "work-{slot}-{runtime id}".
	WorkerNodeID string
	// WorkerTagFilter selects the activity tags this runtime runs (zero
	// value: untagged activities only).
	WorkerTagFilter cdb.TagFilter
	// SupportedReplayVersions bounds the pinned duroxide versions this
	// runtime replays (default [0.0.0, DuroxideVersion]).
	SupportedReplayVersions *cdb.SemverRange

	// UnregisteredBackoffBase and UnregisteredBackoffMax space the retries
	// of work whose handler is not registered here (default 1s and 60s).
	UnregisteredBackoffBase time.Duration
	UnregisteredBackoffMax  time.Duration

	Logger *slog.Logger     // default: discard
	Now    func() time.Time // clock for timers and timestamps (default time.Now)
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
	setDuration(&o.SessionLockTimeout, 30*time.Second)
	setDuration(&o.SessionLockRenewalBuffer, 5*time.Second)
	setDuration(&o.SessionIdleTimeout, 5*time.Minute)
	setDuration(&o.SessionCleanupInterval, 5*time.Minute)
	setInt(&o.MaxSessionsPerRuntime, 10)
	setDuration(&o.UnregisteredBackoffBase, time.Second)
	setDuration(&o.UnregisteredBackoffMax, time.Minute)
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
	return cdb.SemverRange{Max: duroxideSemver}
}

// renewalInterval is how often a lock of this timeout is renewed: duroxide
// renews long locks buffer before they expire and short ones at half their
// timeout, in whole seconds. Locks of two seconds or less (tests use them)
// are renewed at half their timeout exactly, so a renewal always lands
// before the expiry.
func renewalInterval(timeout, buffer time.Duration) time.Duration {
	if timeout >= 15*time.Second {
		return max(timeout-min(buffer, timeout), time.Second)
	}
	if timeout <= 2*time.Second {
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
