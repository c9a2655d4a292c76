package durable

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Session scenarios from duroxide's (and duroxide-pg's)
// tests/session_e2e_tests.rs: affinity under fan-out, across
// continue-as-new and across runtimes, and the per-runtime session cap.

// sessionRun is one run of a session activity, as the ledger saw it.
type sessionRun struct {
	session   string
	workerID  string
	execution uint64
}

// sessionLedger records which worker ran each session activity and how many
// sessions each runtime had in flight at once.
type sessionLedger struct {
	mu       sync.Mutex
	runs     []sessionRun
	inFlight map[string]map[string]int // runtime → session → activities running
	peak     map[string]int            // runtime → most distinct sessions running at once
	peakOne  int                       // most activities of one session running at once
	total    int                       // distinct (runtime, session) pairs running now

	barrierAt   int           // release Hold activities once this many sessions run at once
	barrierOpen chan struct{} // closed the first time barrierAt is reached
	opened      bool
}

func newSessionLedger(barrierAt int) *sessionLedger {
	return &sessionLedger{inFlight: map[string]map[string]int{}, peak: map[string]int{},
		barrierAt: barrierAt, barrierOpen: make(chan struct{})}
}

// runtimeOf is the runtime part of a worker id "work-{slot}-{node or
// runtime id}" (worker_dispatcher.go): with WorkerNodeID set, the node.
func runtimeOf(workerID string) string {
	parts := strings.SplitN(workerID, "-", 3)
	if len(parts) < 3 {
		return workerID
	}
	return parts[2]
}

func (l *sessionLedger) enter(ctx ActivityContext) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, sessionRun{session: ctx.SessionID(), workerID: ctx.WorkerID(), execution: ctx.ExecutionID()})
	rt := runtimeOf(ctx.WorkerID())
	if l.inFlight[rt] == nil {
		l.inFlight[rt] = map[string]int{}
	}
	if l.inFlight[rt][ctx.SessionID()] == 0 {
		l.total++
	}
	l.inFlight[rt][ctx.SessionID()]++
	l.peak[rt] = max(l.peak[rt], len(l.inFlight[rt]))
	l.peakOne = max(l.peakOne, l.inFlight[rt][ctx.SessionID()])
	if l.total == l.barrierAt && !l.opened {
		l.opened = true
		close(l.barrierOpen)
	}
}

func (l *sessionLedger) leave(ctx ActivityContext) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rt := runtimeOf(ctx.WorkerID())
	if l.inFlight[rt][ctx.SessionID()]--; l.inFlight[rt][ctx.SessionID()] == 0 {
		delete(l.inFlight[rt], ctx.SessionID())
		l.total--
	}
}

// activity is a session activity that records itself while it runs work.
func (l *sessionLedger) activity(work func(ctx ActivityContext, input string) (string, error)) ActivityFunc {
	return func(ctx ActivityContext, input string) (string, error) {
		l.enter(ctx)
		defer l.leave(ctx)
		return work(ctx, input)
	}
}

// hold waits until barrierAt sessions run at once (or a generous timeout,
// after which the test's assertions report the shortfall).
func (l *sessionLedger) hold(ctx ActivityContext) error {
	select {
	case <-l.barrierOpen:
		return nil
	case <-time.After(10 * time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// workersOf lists the distinct workers that ran the session, and
// runtimesOf the distinct runtimes.
func (l *sessionLedger) workersOf(session string) []string {
	return l.distinct(session, func(r sessionRun) string { return r.workerID })
}

func (l *sessionLedger) runtimesOf(session string) []string {
	return l.distinct(session, func(r sessionRun) string { return runtimeOf(r.workerID) })
}

func (l *sessionLedger) distinct(session string, key func(sessionRun) string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.runs {
		if r.session == session && !slices.Contains(out, key(r)) {
			out = append(out, key(r))
		}
	}
	return out
}

func (l *sessionLedger) executionsOf(session string) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for _, r := range l.runs {
		if r.session == session {
			out = append(out, r.execution)
		}
	}
	return out
}

func (l *sessionLedger) peaks() (perRuntime map[string]int, perSession int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.peak), l.peakOne
}

// joinAll awaits every future and joins their results with "|".
func joinAll(ctx *OrchestrationContext, futures ...*Future) (string, error) {
	var out []string
	for _, r := range ctx.Join(futures...) {
		if r.Err != nil {
			return "", r.Err
		}
		out = append(out, r.Value)
	}
	return strings.Join(out, "|"), nil
}

// pause makes an activity last long enough for other slots to fetch
// meanwhile, so a broken affinity or cap would show.
func pause(d time.Duration) func(ActivityContext, string) (string, error) {
	return func(ctx ActivityContext, input string) (string, error) {
		select {
		case <-time.After(d):
			return "done:" + input, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// Fan-out on one session (test_fan_out_multiple_per_session_mixed): with
// per-slot session owners, every activity of the session runs on the one
// slot that claimed it, one at a time, while plain activities run anywhere.
func TestSessionFanOutRunsOnOneWorker(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		ledger := newSessionLedger(0)
		h.activity("SessionWork", ledger.activity(pause(20*time.Millisecond)))
		h.activity("PlainWork", func(_ ActivityContext, input string) (string, error) { return "plain:" + input, nil })
		h.orchestration("FanOutOnOneSession", func(ctx *OrchestrationContext, _ string) (string, error) {
			var futures []*Future
			for i := range 6 {
				futures = append(futures, ctx.ScheduleActivity("SessionWork", strconv.Itoa(i), WithSession("fan-session")))
			}
			futures = append(futures, ctx.ScheduleActivity("PlainWork", "a"), ctx.ScheduleActivity("PlainWork", "b"))
			return joinAll(ctx, futures...)
		})
		h.run(func(o *Options) { o.WorkerConcurrency = 4 })
		h.start("session-fan-out", "FanOutOnOneSession", "")
		assert.Equal(t, "done:0|done:1|done:2|done:3|done:4|done:5|plain:a|plain:b", h.completed("session-fan-out"))

		assert.Len(t, ledger.workersOf("fan-session"), 1, "the session's activities ran on %v", ledger.workersOf("fan-session"))
		_, perSession := ledger.peaks()
		assert.Equal(t, 1, perSession, "one slot owns the session, so its activities never overlap")
	})
}

// Session survival across continue-as-new
// (test_session_survives_continue_as_new): each execution runs an activity
// on the same session, and all of them run on the worker that claimed it
// in the first execution.
func TestSessionSurvivesContinueAsNew(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		ledger := newSessionLedger(0)
		h.activity("Track", ledger.activity(func(_ ActivityContext, input string) (string, error) {
			return "tracked:" + input, nil
		}))
		h.orchestration("SessionCAN", func(ctx *OrchestrationContext, input string) (string, error) {
			iteration, _ := strconv.Atoi(input)
			r, err := ctx.ScheduleActivity("Track", fmt.Sprintf("iter-%d", iteration), WithSession("persistent-session")).Await()
			if err != nil || iteration == 2 {
				return r, err
			}
			return ctx.ContinueAsNew(strconv.Itoa(iteration + 1))
		})
		h.run(func(o *Options) { o.WorkerConcurrency = 3 })
		h.start("session-can", "SessionCAN", "0")
		assert.Equal(t, "tracked:iter-2", h.completed("session-can"))

		assert.Equal(t, []uint64{1, 2, 3}, ledger.executionsOf("persistent-session"))
		assert.Len(t, ledger.workersOf("persistent-session"), 1,
			"the session stayed pinned across continue-as-new: ran on %v", ledger.workersOf("persistent-session"))
	})
}

// MaxSessionsPerRuntime (test_max_sessions_per_runtime_enforced): a runtime
// never runs activities of more distinct sessions at once than allowed; the
// other sessions wait and still finish. With a stable node id every slot
// may serve any of the node's sessions, so only the cap holds them back.
func TestSessionMaxSessionsPerRuntimeHonoured(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cap    int
		nodeID string
	}{
		{name: "per-slot-owners", cap: 2},
		{name: "stable-node", cap: 1, nodeID: "capped-node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachSample(t, func(t *testing.T, h *harness) {
				ledger := newSessionLedger(0)
				h.activity("SlowSession", ledger.activity(pause(30*time.Millisecond)))
				h.orchestration("FourSessions", func(ctx *OrchestrationContext, _ string) (string, error) {
					var futures []*Future
					for i := range 8 {
						futures = append(futures, ctx.ScheduleActivity("SlowSession", strconv.Itoa(i), WithSession(fmt.Sprintf("session-%d", i%4))))
					}
					return joinAll(ctx, futures...)
				})
				h.run(func(o *Options) {
					o.WorkerConcurrency, o.MaxSessionsPerRuntime, o.WorkerNodeID = 4, tc.cap, tc.nodeID
				})
				h.start("session-cap", "FourSessions", "")
				assert.Equal(t, "done:0|done:1|done:2|done:3|done:4|done:5|done:6|done:7", h.completed("session-cap"))

				perRuntime, _ := ledger.peaks()
				require.Len(t, perRuntime, 1)
				for rt, peak := range perRuntime {
					assert.LessOrEqual(t, peak, tc.cap, "runtime %s ran %d sessions at once", rt, peak)
				}
			})
		})
	}
}

// Two worker runtimes share the work (test_multi_worker_complex_orchestration):
// four sessions are held in flight at once while each runtime may hold only
// two, so each runtime must claim two of them; after continue-as-new, every
// later activity of a session runs on the runtime that claimed it.
func TestSessionAffinityAcrossTwoWorkerRuntimes(t *testing.T) {
	eachSample(t, func(t *testing.T, h *harness) {
		sessions := []string{"sess-alpha", "sess-beta", "sess-gamma", "sess-delta"}
		ledger := newSessionLedger(len(sessions))
		h.activity("Hold", ledger.activity(func(ctx ActivityContext, input string) (string, error) {
			return "held:" + input, ledger.hold(ctx)
		}))
		h.activity("SessionWork", ledger.activity(pause(10*time.Millisecond)))
		h.activity("PlainWork", func(_ ActivityContext, input string) (string, error) { return "plain:" + input, nil })
		h.orchestration("MultiWorkerOrch", func(ctx *OrchestrationContext, input string) (string, error) {
			if input == "0" {
				futures := []*Future{ctx.ScheduleActivity("PlainWork", "p")}
				for _, s := range sessions {
					futures = append(futures, ctx.ScheduleActivity("Hold", s, WithSession(s)))
				}
				if _, err := joinAll(ctx, futures...); err != nil {
					return "", err
				}
				return ctx.ContinueAsNew("1")
			}
			var futures []*Future
			for _, s := range sessions {
				for i := range 2 {
					futures = append(futures, ctx.ScheduleActivity("SessionWork", fmt.Sprintf("%s-%d", s, i), WithSession(s)))
				}
			}
			return joinAll(ctx, futures...)
		})
		for _, node := range []string{"node-A", "node-B"} {
			h.run(func(o *Options) { o.WorkerConcurrency, o.MaxSessionsPerRuntime, o.WorkerNodeID = 2, 2, node })
		}
		h.start("multi-worker", "MultiWorkerOrch", "0")
		var want []string
		for _, s := range sessions {
			want = append(want, "done:"+s+"-0", "done:"+s+"-1")
		}
		assert.Equal(t, strings.Join(want, "|"), h.completed("multi-worker"))

		perRuntime, _ := ledger.peaks()
		assert.Equal(t, map[string]int{"node-A": 2, "node-B": 2}, perRuntime,
			"all four sessions ran at once, two on each runtime, none over its cap")
		for _, s := range sessions {
			assert.Len(t, ledger.runtimesOf(s), 1, "session %s ran on %v", s, ledger.runtimesOf(s))
			assert.Equal(t, []uint64{1, 2, 2}, ledger.executionsOf(s), "session %s: one Hold, then two activities after continue-as-new", s)
		}
	})
}
