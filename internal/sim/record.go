package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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
	starts     []execution         // every body as it started
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
	// handouts are the work items each node's provider handed its runtime
	// (FetchWorkItem returned them), by activity.
	handouts map[activityKey][]handout
	// cancelAcks are the activities the nodes' orchestration acks
	// cancelled, by instance, with when the ack returned.
	cancelAcks map[cancelledKey][]cancelAck
	cancels    *cancelWatch // optional: the worker items created, the deletions through a node
	bell       *bellWatch   // optional: the queue bell's listings and rings, and the writes of work
	slow       *slowCommitRounds
	closes     map[string]closeRecord // clean closes, by node
	// writeFaults are the tries of each node's writes to worker items that
	// met a fault or whose answer it did not read (a renewal that may have
	// failed), by node and item.
	writeFaults map[string]map[stampKey][]time.Time
	sequences   map[string]sequenceRun // how each long sequence ended, and how long it took
}

func newRecorder(v *violations) *recorder {
	return &recorder{running: map[activityKey]int{}, commits: map[activityKey]commitRecord{}, crashed: map[string]bool{},
		handouts: map[activityKey][]handout{}, cancelAcks: map[cancelledKey][]cancelAck{}, slow: &slowCommitRounds{},
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
	r.starts = append(r.starts, e)
	if c, ok := r.commits[e.Key]; ok && c.At.Before(e.Start) {
		r.violations.add(invActivityRanAfterCompletion, e.Key.Instance,
			fmt.Sprintf("%s (%s) started on %s at %s, after its completion committed on %s at %s",
				e.Key, e.Name, e.Node, stamp(e.Start), c.Node, stamp(c.At)))
	}
	if r.sink != nil {
		r.sink("start", e)
	}
}

// writeFaultsFor is a node transport's hook for every request try: it
// keeps the node's writes (patches) to worker items and instance documents
// (a renewal, a give-back) that met a fault or whose answer the node did
// not read.
func (r *recorder) writeFaultsFor(node string) triesHook {
	return func(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
		if fault == "" && status != 0 && answered {
			return
		}
		pk := partitionKeyOf(req)
		ids := patchedIDs(req, body)
		if len(ids) == 0 {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range ids {
			if !strings.HasPrefix(id, "w|") && id != instanceDocument {
				continue
			}
			if r.writeFaults == nil {
				r.writeFaults = map[string]map[stampKey][]time.Time{}
			}
			if r.writeFaults[node] == nil {
				r.writeFaults[node] = map[stampKey][]time.Time{}
			}
			k := stampKey{pk, id}
			r.writeFaults[node][k] = append(r.writeFaults[node][k], entered)
		}
	}
}

// writeFaulted says node's write to worker item id of partition pk met a
// fault (or lost its answer) between the wall times from and to.
func (r *recorder) writeFaulted(node, pk, id string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.writeFaults[node][stampKey{pk, id}] {
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

// pausedBetween says node was paused at some time between the wall times
// from and to.
func (r *recorder) pausedBetween(node string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.stalls[node] {
		if s.Pause && !s.From.After(to) && !s.Until.Before(from) {
			return true
		}
	}
	return false
}

// startedBefore says a body of key started before (on any node).
func (r *recorder) startedBefore(key activityKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.nodeOf[key]
	return ok
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

// stillRunning are the bodies that started and have not ended, with now
// as their end.
func (r *recorder) stillRunning(now time.Time) []execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	type run struct {
		key   activityKey
		node  string
		start time.Time
	}
	ended := map[run]int{}
	for _, e := range r.executions {
		ended[run{e.Key, e.Node, e.Start}]++
	}
	var out []execution
	for _, e := range r.starts {
		k := run{e.Key, e.Node, e.Start}
		if ended[k] > 0 {
			ended[k]--
			continue
		}
		e.End = now
		out = append(out, e)
	}
	return out
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
			r.eagerStarts.observe(node, req, body, resp.StatusCode, 0)
		}
		if resp.StatusCode < 300 && r.eager != nil {
			lsn, _ := strconv.ParseInt(resp.Header.Get("lsn"), 10, 64)
			r.eager.observe(node, req, body, resp.StatusCode, lsn)
		}
		if resp.StatusCode < 300 && r.chains != nil {
			r.chains.observe(node, req, body, resp, answered)
		}
		if resp.StatusCode < 300 {
			r.cancels.observe(node, req, body, resp.StatusCode, answered)
			r.bell.observe(node, req, body, resp.StatusCode)
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

// handout is a work item a node's provider handed its runtime.
type handout struct {
	Node string
	At   time.Time // when FetchWorkItem returned it (wall clock)
}

// cancelledKey names an activity an orchestration ack cancelled: the
// contract names it without the incarnation's run.
type cancelledKey struct {
	Instance string
	Exec, ID uint64
}

// cancelAck is an ack of node that cancelled an activity and returned
// without error at At (wall clock): the cancellation committed, and node
// knew it.
type cancelAck struct {
	Node string
	At   time.Time
}

// handoutProvider is a node's provider as its runtime sees it: every call
// goes to the provider, and the recorder also learns what FetchWorkItem
// handed out and which activities a successful orchestration ack
// cancelled, and when. Every method of the provider is promoted, so the
// runtime finds the same optional interfaces on it.
type handoutProvider struct {
	*cdb.CosmosProvider
	node string
	rec  *recorder
}

func (p handoutProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	item, token, attempts, err := p.CosmosProvider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
	if act, ok := item.(cdb.ActivityExecuteMessage); ok && err == nil {
		p.rec.handedOut(p.node, act, time.Now())
	}
	return item, token, attempts, err
}

func (p handoutProvider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []cdb.Event,
	workerItems, orchestratorItems []cdb.WorkItem, metadata cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	err := p.CosmosProvider.AckOrchestrationItem(ctx, lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelled)
	if err == nil && len(cancelled) > 0 {
		p.rec.cancelAcked(p.node, cancelled, time.Now())
	}
	return err
}

// handedOut records a work item node's provider handed its runtime.
func (r *recorder) handedOut(node string, act cdb.ActivityExecuteMessage, at time.Time) {
	var in workInput
	_ = json.Unmarshal([]byte(act.Input), &in)
	key := activityKey{Instance: act.Instance, Exec: act.ExecutionID, ID: act.ID, Run: in.Run}
	r.mu.Lock()
	r.handouts[key] = append(r.handouts[key], handout{Node: node, At: at})
	r.mu.Unlock()
	if r.eager != nil {
		r.eager.handedOut(node, instancePK(act.Instance), workDocID(act.ExecutionID, act.ID), at)
	}
}

// cancelAcked records the activities a successful ack of node cancelled.
func (r *recorder) cancelAcked(node string, cancelled []cdb.ScheduledActivityIdentifier, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cancelled {
		k := cancelledKey{Instance: c.Instance, Exec: c.ExecutionID, ID: c.ActivityID}
		r.cancelAcks[k] = append(r.cancelAcks[k], cancelAck{Node: node, At: at})
	}
}

// instancePK is an instance's partition key: its id (the workload's ids
// are short, so the provider does not hash them).
func instancePK(instance string) string { return instance }

// workDocID is the id of an activity's worker item in its instance's
// partition.
func workDocID(exec, activity uint64) string { return fmt.Sprintf("w|%d|%d", exec, activity) }

// patchedIDs are the documents a request patches: a PATCH's, or a batch's
// patch operations' (none when the batch body does not decode).
func patchedIDs(req *http.Request, body []byte) []string {
	var ids []string
	switch operationOf(req) {
	case "PatchItem":
		id, _ := pathDocumentID(req)
		ids = append(ids, id)
	case "Batch":
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil {
			return nil
		}
		for _, o := range ops {
			if strings.EqualFold(o.OperationType, "patch") {
				ids = append(ids, o.ID)
			}
		}
	}
	return ids
}
