package sim

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Invariant names, as violations and the report show them.
const (
	invTerminalState              = "terminal-state"        // an instance ended in the state its input determines
	invOutput                     = "output"                // ... with the output its input determines
	invStuck                      = "stuck"                 // an instance did not finish in time
	invEventOnce                  = "event-once-in-order"   // an event raised once is consumed once, in its sender's order
	invCompletionOnce             = "completion-once"       // an activity completion appears once
	invActivityRanAfterCompletion = "no-run-after-complete" // an activity whose completion committed never runs again
	invSessionAffinity            = "session-affinity"      // a session runs on one owner at a time
	invKV                         = "kv"                    // the KV store holds what the orchestration wrote
	invLeftovers                  = "nothing-left"          // no message, work item, outbox, staged part or intent left
	invStartKept                  = "start-kept"            // a start reported accepted is never later NotFound (unless deleted)
	invTimerNotEarly              = "timer-not-early"       // no timer fires before its due time on a node whose clock is right
	invIdleBudget                 = "idle-budget"           // an idle process sends about one request per second per queue
	invOneHolder                  = "one-holder"            // an activity never runs on two nodes while its lock is held
	invFailedReadsFailed          = "failed-reads-failed"   // a failed instance reads as failed, with its name
	invStampHonoured              = "stamp-honoured"        // a process takes most of the queue items it stamps as its own
	invEagerTakenByWriter         = "eager-taken-by-writer" // a process takes most of the worker items its commits lock to it
	invChainClaims                = "chain-claims"          // a completion claimed with a chain is taken or unlocked when the chain ends
	invChainTakenEarly            = "chain-taken-early"     // no lock takes a live writer's chain before it expired
	invChainEndedByWriter         = "chain-ended-by-writer" // a process ends most of the chains its commits keep itself
	invChainReadsOthers           = "chain-reads-others"    // a hold of chained turns reads the instance's partition at least once a poll interval
	invWait                       = "wait"                  // WaitForCompletion returns the end the store holds, soon after it is visible
	invCompensated                = "compensated"           // a Sleeper that handles cancellation ends cancelled only after its compensation ran
	invHarness                    = "harness"               // the harness could not do what the workload asked
)

// Violation is one broken invariant.
type Violation struct {
	Invariant string
	Instance  string
	Detail    string
}

func (v Violation) String() string {
	if v.Instance == "" {
		return fmt.Sprintf("[%s] %s", v.Invariant, v.Detail)
	}
	return fmt.Sprintf("[%s] %s: %s", v.Invariant, v.Instance, v.Detail)
}

type violations struct {
	mu   sync.Mutex
	list []Violation
}

func (v *violations) add(invariant, instance, detail string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, Violation{Invariant: invariant, Instance: instance, Detail: detail})
}

func (v *violations) all() []Violation {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.list)
}

// Stats counts what a run did and injected.
type Stats struct {
	mu          sync.Mutex
	Scenarios   map[string]int            // started, by kind
	Instances   int                       // instances with an expected outcome
	Faults      map[string]int            // injected, by kind
	FaultsByOp  map[string]map[string]int // injected, by operation then kind
	Crashes     map[string]int            // by where the node died
	Nodes       int                       // nodes started, replacements included
	Activities  int                       // activity bodies run
	Commits     int                       // activity completions seen committing
	Retries     int                       // harness calls retried after a retryable error
	Deletes     int
	Prunes      int
	EventsSent  int
	CancelsSent int
	Compensated int    // cancelled Sleepers that handled their cancellation and compensated
	Stamps      string // own-writes stamps by writer: taken by the writer, by others
	Eager       string // eagerly locked worker items: by the writer, by others, taken over
	EagerStarts string // eagerly claimed start messages: the same counts
	Chains      string // instances kept locked for their activities' completions: how the chains ended
	Waits       string // WaitForCompletion through the nodes: told, held polls, reads, redone, excused
	Names       string // the longest document id and lock token on the wire, and how many passed their bounds
	Cancels     string // activities cancelled by acks, instances deleted through a node, and what was handed out after
	Bell        string // the queue bell's listings and rings, and the writes of work judged
	Production  string // the production node, its slow commits, and the overlapping runs one-holder saw
	Closes      string // what clean closes gave back, and what they left locked
	Retention   string // finished instances with a retention, and the documents given its TTL
	Sequences   string // how long each long sequence took, and its longest hold of chained turns
}

func newStats() *Stats {
	return &Stats{Scenarios: map[string]int{}, Faults: map[string]int{}, FaultsByOp: map[string]map[string]int{}, Crashes: map[string]int{}}
}

func (s *Stats) fault(kind, op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Faults[kind]++
	if s.FaultsByOp[op] == nil {
		s.FaultsByOp[op] = map[string]int{}
	}
	s.FaultsByOp[op][kind]++
}

// count adds n to one of the plain counters.
func (s *Stats) count(field *int, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*field += n
}

func (s *Stats) scenario(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Scenarios[kind]++
}

func (s *Stats) crash(where string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Crashes[where]++
}

// Report is a run's outcome.
type Report struct {
	Seed       int64
	Elapsed    time.Duration
	Work       int64   // how many times the run progressed (progress.go)
	Slowness   float64 // the host's measured slowness (Config.HostSlowness)
	Stats      *Stats
	Violations []Violation
	// Pending are the violations of Config.Pending's invariants: printed,
	// not failing the run.
	Pending []Violation
	// Replay is the command that runs this seed again.
	Replay string
	// Flight is what the nodes logged about each violating scenario, its
	// last records (flight.go): a round does not replay exactly.
	Flight map[string][]string
}

// OK reports a run without violations.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Print writes the summary: what ran, what was injected, what broke.
func (r Report) Print(w io.Writer) {
	s := r.Stats
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(w, "sim seed=%d elapsed=%s progress=%d (%.0f/s) host-slowness=%.1f\n", r.Seed, r.Elapsed.Round(time.Millisecond), r.Work,
		float64(r.Work)/max(r.Elapsed.Seconds(), 0.001), r.Slowness)
	fmt.Fprintf(w, "  orchestrations: %d scenarios (%s), %d instances checked\n", sum(s.Scenarios), counts(s.Scenarios), s.Instances)
	fmt.Fprintf(w, "  activities run: %d (%d completions seen committing); events sent: %d; cancels: %d (compensated: %d); deletes: %d; prunes: %d; harness retries: %d\n",
		s.Activities, s.Commits, s.EventsSent, s.CancelsSent, s.Compensated, s.Deletes, s.Prunes, s.Retries)
	fmt.Fprintf(w, "  faults injected: %d (%s)\n", sum(s.Faults), counts(s.Faults))
	var ops []string
	for op, kinds := range s.FaultsByOp {
		ops = append(ops, fmt.Sprintf("%s: %s", op, counts(kinds)))
	}
	sort.Strings(ops)
	for _, op := range ops {
		fmt.Fprintf(w, "    %s\n", op)
	}
	// The checks' own lines, each shown when its check ran.
	for _, line := range []struct{ label, text string }{
		{"own-writes stamps", s.Stamps}, {"eager starts", s.EagerStarts}, {"eager activities", s.Eager},
		{"chained turns", s.Chains}, {"completion waits", s.Waits}, {"long sequences", s.Sequences},
		{"closes", s.Closes}, {"retention", s.Retention}, {"production locks", s.Production}, {"cancellations", s.Cancels}, {"queue bell", s.Bell},
		{"names on the wire", s.Names},
	} {
		if line.text != "" {
			fmt.Fprintf(w, "  %s: %s\n", line.label, line.text)
		}
	}
	fmt.Fprintf(w, "  nodes started: %d; crashes: %d (%s)\n", s.Nodes, sum(s.Crashes), counts(s.Crashes))
	if len(r.Pending) > 0 {
		fmt.Fprintf(w, "  pending invariants (a known open defect; not failing the run): %d\n", len(r.Pending))
		for i, v := range r.Pending {
			if i == 10 {
				fmt.Fprintf(w, "    ... %d more\n", len(r.Pending)-i)
				break
			}
			fmt.Fprintf(w, "    %s\n", v)
		}
	}
	fmt.Fprintf(w, "  invariant violations: %d%s\n", len(r.Violations), byInvariant(r.Violations))
	for i, v := range r.Violations {
		if i == 50 {
			fmt.Fprintf(w, "    ... %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "    %s\n", v)
	}
	if !r.OK() {
		fmt.Fprintf(w, "  replay: %s\n", r.Replay)
		if ids := violatingInstances(r.Violations); ids != "" {
			fmt.Fprintf(w, "  trace: %s -sim.log -sim.trace=%s -sim.wire=%s\n", r.Replay, ids, ids)
		}
		printFlight(w, r.Flight)
	}
}

// violatingInstances are the instances the violations name, comma-separated
// as -sim.trace and -sim.wire take them (at most five).
func violatingInstances(vs []Violation) string {
	var ids []string
	for _, v := range vs {
		if v.Instance != "" && !slices.Contains(ids, v.Instance) && len(ids) < 5 {
			ids = append(ids, v.Instance)
		}
	}
	return strings.Join(ids, ",")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// split parts the violations of the pending invariants from the others.
func split(all []Violation, pending []string) (failing, known []Violation) {
	for _, v := range all {
		if slices.Contains(pending, v.Invariant) {
			known = append(known, v)
		} else {
			failing = append(failing, v)
		}
	}
	return failing, known
}

// byInvariant counts violations by invariant, for the summary line.
func byInvariant(vs []Violation) string {
	if len(vs) == 0 {
		return ""
	}
	m := map[string]int{}
	for _, v := range vs {
		m[v.Invariant]++
	}
	return " (" + counts(m) + ")"
}
