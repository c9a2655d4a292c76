package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// activityKey names one scheduling of an activity: its instance, execution
// and ActivityScheduled event id, and the run token of the incarnation that
// scheduled it (an id reused after a delete schedules the same ids again).
type activityKey struct {
	Instance string `json:"instance"`
	Exec     uint64 `json:"exec"`
	ID       uint64 `json:"id"`
	Run      string `json:"run"`
}

func (k activityKey) String() string {
	return fmt.Sprintf("%s exec %d activity %d (run %s)", k.Instance, k.Exec, k.ID, k.Run)
}

// execution is one run of an activity body.
type execution struct {
	Key     activityKey `json:"key"`
	Name    string      `json:"name"`
	Node    string      `json:"node"`
	Owner   string      `json:"owner,omitempty"`   // session owner, for session activities
	Session string      `json:"session,omitempty"` // session id
	Start   time.Time   `json:"start"`
	End     time.Time   `json:"end"`
	// Finished is false when the body stopped early because its context
	// ended (lock lost, node stopping).
	Finished bool `json:"finished"`
}

// commitRecord is an activity completion that a worker's ack committed, as
// the node's transport saw it go through.
type commitRecord struct {
	Key  activityKey `json:"key"`
	At   time.Time   `json:"at"`
	Node string      `json:"node"`
}

// recorder collects what activities and transports observed, and checks
// the cheap invariants as the records arrive. A node of another process
// writes the same records to a file (process.go).
type recorder struct {
	// stalled are the runs whose first turn stalled its dispatcher
	// already (spec.StallMs).
	stalled    sync.Map
	mu         sync.Mutex
	executions []execution
	running    map[activityKey]int // bodies running now
	commits    map[activityKey]commitRecord
	crashed    map[string]bool      // nodes
	crashedAt  map[string]time.Time // when each crash was recorded (wall clock)
	shutdowns  map[string]shutdownRecord
	stalls     map[string][]stallRecord // by node
	nodeOf     map[activityKey]string   // where a key's latest body started
	violations *violations
	sink       func(kind string, v any) // optional: another process's log
	stats      *Stats                   // optional: counts the commits seen
	progress   *progress                // optional: finished bodies and commits are progress
	stamps     *stamps                  // optional: own-writes stamps and who honoured them
	eager      *eagerItems              // optional: eagerly locked worker items and who consumed them
	// eagerStarts: optional, eagerly claimed start messages and who consumed them
	eagerStarts *eagerItems
	chains      *chainedTurns // optional: instances kept locked by a commit, and how each chain ended
	names       *boundedNames // optional: the longest document ids and lock tokens on the wire
}

func newRecorder(v *violations) *recorder {
	return &recorder{running: map[activityKey]int{}, commits: map[activityKey]commitRecord{}, crashed: map[string]bool{},
		crashedAt: map[string]time.Time{}, shutdowns: map[string]shutdownRecord{}, stalls: map[string][]stallRecord{}, nodeOf: map[activityKey]string{}, violations: v}
}

// started notes an activity body starting; an activity whose completion
// already committed must not run again (at least once, but not after it is
// done).
func (r *recorder) started(e execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[e.Key]++
	r.nodeOf[e.Key] = e.Node
	if c, ok := r.commits[e.Key]; ok && c.At.Before(e.Start) {
		r.violations.add(invActivityRanAfterCompletion, e.Key.Instance,
			fmt.Sprintf("%s (%s) started on %s at %s, after its completion committed on %s at %s",
				e.Key, e.Name, e.Node, stamp(e.Start), c.Node, stamp(c.At)))
	}
	if r.sink != nil {
		r.sink("start", e)
	}
}

// ended records a finished or interrupted body.
func (r *recorder) ended(e execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[e.Key]--
	r.executions = append(r.executions, e)
	r.progress.mark()
	if r.sink != nil {
		r.sink("end", e)
	}
}

// committed records a completion committed by node's ack.
func (r *recorder) committed(c commitRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, dup := r.commits[c.Key]; dup {
		r.violations.add(invCompletionOnce, c.Key.Instance,
			fmt.Sprintf("%s: a second completion committed on %s at %s (first on %s at %s)",
				c.Key, c.Node, stamp(c.At), prev.Node, stamp(prev.At)))
		return
	}
	r.commits[c.Key] = c
	r.progress.mark()
	if r.stats != nil {
		r.stats.count(&r.stats.Commits, 1)
	}
	if r.sink != nil {
		r.sink("commit", c)
	}
}

func (r *recorder) nodeCrashed(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashed[node] = true
	if _, ok := r.crashedAt[node]; !ok {
		r.crashedAt[node] = time.Now()
	}
}

// shutdownRecord is a node's runtime told to shut down while work ran.
type shutdownRecord struct {
	At    time.Time
	Grace time.Duration // the runtime's ActivityCancellationGrace
}

func (r *recorder) nodeShutDown(node string, at time.Time, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutdowns[node] = shutdownRecord{At: at, Grace: grace}
}

// stallRecord is a node held back from From until Until (wall times): a
// pause (every request waited: PK "") or a fault drawn for a request of
// partition PK, which delays the work that sent it (a latency spike for
// its length; any other fault, drawn at an instant, by the retry or the
// work given up that follows).
type stallRecord struct {
	PK          string
	From, Until time.Time
	// Pause: the whole node waited (PK is ""), not one request's fault.
	Pause bool
}

// stalledFor is a node transport's stall hook.
func (r *recorder) stalledFor(node string) func(pk string, from, until time.Time) {
	return func(pk string, from, until time.Time) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stalls[node] = append(r.stalls[node], stallRecord{PK: pk, From: from, Until: until})
	}
}

// pausedFor is a node transport's pause hook.
func (r *recorder) pausedFor(node string) func(from, until time.Time) {
	return func(from, until time.Time) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stalls[node] = append(r.stalls[node], stallRecord{From: from, Until: until, Pause: true})
	}
}

// lastHeldBack is the latest time between the wall times from and to at
// which node was paused or drew a fault for a request of partition pk
// (exactly: a fault of a cross-partition query holds back no read of pk);
// false when it was neither.
func (r *recorder) lastHeldBack(node, pk string, from, to time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	found := false
	for _, s := range r.stalls[node] {
		if (s.Pause || s.PK == pk) && !s.From.After(to) && !s.Until.Before(from) {
			until := s.Until
			if until.After(to) {
				until = to
			}
			if !found || until.After(last) {
				last, found = until, true
			}
		}
	}
	return last, found
}

// stalledBetween says node was paused, or drew a fault for a request of
// partition pk, at some time between the wall times from and to.
func (r *recorder) stalledBetween(node, pk string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stalls[node] {
		if (s.PK == "" || s.PK == pk) && !s.From.After(to) && !s.Until.Before(from) {
			return true
		}
	}
	return false
}

func (r *recorder) shutdownsSoFar() map[string]shutdownRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]shutdownRecord, len(r.shutdowns))
	for n, s := range r.shutdowns {
		out[n] = s
	}
	return out
}

// runningOn names a node where a body of the incarnation run is running
// now ("" when none).
func (r *recorder) runningOn(run string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, n := range r.running {
		if key.Run == run && n > 0 {
			return r.nodeOf[key]
		}
	}
	return ""
}

func (r *recorder) isCrashed(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.crashed[node]
}

// isGone reports a node that crashed or was shut down: its locks are left
// to expire.
func (r *recorder) isGone(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, shut := r.shutdowns[node]
	return r.crashed[node] || shut
}

// goneBy reports a node that had crashed or been shut down by the wall
// time at.
func (r *recorder) goneBy(node string, at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.crashedAt[node]; ok && !t.After(at) {
		return true
	}
	s, ok := r.shutdowns[node]
	return ok && !s.At.After(at)
}

func (r *recorder) snapshot() ([]execution, map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	crashed := make(map[string]bool, len(r.crashed))
	for n := range r.crashed {
		crashed[n] = true
	}
	return append([]execution(nil), r.executions...), crashed
}

// observeCommits is a node transport's commit hook, called for every
// request the account carried out (queries too, which only the chained
// turns' observer reads): it finds, in a transactional batch that
// committed, the activity completions it creates (the worker's ack) and
// records them; answered says whether the node got the answer.
func (r *recorder) observeCommits(node string) func(req *http.Request, body []byte, resp *http.Response, answered bool) {
	return func(req *http.Request, body []byte, resp *http.Response, answered bool) {
		if resp.StatusCode < 300 && r.stamps != nil {
			r.stamps.observe(node, req, body, resp.StatusCode)
		}
		if resp.StatusCode < 300 && r.eagerStarts != nil {
			r.eagerStarts.observe(node, req, body, resp.StatusCode)
		}
		if resp.StatusCode < 300 && r.eager != nil {
			r.eager.observe(node, req, body, resp.StatusCode)
		}
		if resp.StatusCode < 300 && r.chains != nil {
			r.chains.observe(node, req, body, resp, answered)
		}
		if resp.StatusCode != http.StatusOK || operationOf(req) != "Batch" {
			return
		}
		completions, turns := readCommit(body)
		for _, key := range completions {
			r.committed(commitRecord{Key: key, At: time.Now(), Node: node})
		}
		if turns > 0 {
			r.progress.mark()
		}
	}
}

// readCommit reads, from a committed batch, the activity completions it
// creates and the history documents it creates (turns). It knows the
// provider's documents only as far as "a created document whose item is an
// encoded work item" and "a document of type hist"; a batch it cannot read
// yields nothing, so a format change weakens these checks rather than
// making them lie.
func readCommit(body []byte) (completions []activityKey, turns int) {
	var ops []struct {
		OperationType string          `json:"operationType"`
		ResourceBody  json.RawMessage `json:"resourceBody"`
	}
	if json.Unmarshal(body, &ops) != nil {
		return nil, 0
	}
	for _, op := range ops {
		if !strings.EqualFold(op.OperationType, "Create") && !strings.EqualFold(op.OperationType, "Upsert") {
			continue
		}
		var doc struct {
			Type string `json:"type"`
			Item string `json:"item"`
		}
		if json.Unmarshal(op.ResourceBody, &doc) != nil {
			continue
		}
		if doc.Type == "hist" {
			turns++
		}
		if doc.Item == "" {
			continue
		}
		item, err := cdb.UnmarshalWorkItem([]byte(doc.Item))
		if err != nil {
			continue
		}
		if done, ok := item.(cdb.ActivityCompletedMessage); ok {
			if run, _, ok := splitRun(done.Result); ok {
				completions = append(completions, activityKey{Instance: done.Instance, Exec: done.ExecutionID, ID: done.ID, Run: run})
			}
		}
	}
	return completions, turns
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }
