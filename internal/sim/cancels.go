package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// Cancellations and deletions of eagerly locked work (Features.EagerCancels,
// cancelled-not-started). A commit may lock a turn's worker items to its
// own process, for that process's fetches (Eager activities); such an item
// waits in memory, in a ready list, until a fetch takes it. Should a later
// commit of the same process cancel the activity (a Select the timer or
// another activity won: its tombstone), or a deletion through that process
// remove the instance, the ready list must lose the item too (rule R20):
// handed out afterwards, it runs an activity whose cancellation or
// deletion was committed, and that process knew it. So:
//   - an activity a node's orchestration ack cancelled is never handed to
//     that node's runtime after the ack returned (handoutProvider sees both:
//     the ack returned without error, so its commit applied and the node
//     knew it);
//   - an activity of an instance deleted through a node is never handed to
//     that node's runtime after the deletion returned, nor after the node
//     read the answer of its request that removed the item (give or take a
//     host-scaled 5 ms to read it).
//
// A hand-out after another node's cancellation or deletion is counted, not
// failed: what another process wrote reaches a ready list only through a
// request, which a hand-out without one does not make (the renewal that
// follows fails and cancels the handler). The scenarios aim at it: a
// CancelRace orchestration runs a warm-up fan-out of instant activities,
// so its node's worker dispatchers fetch often and its next commit locks
// many items for them, then races a timer against 12-24 activities
// (whichever wins, the turn that sees it, often the chained turn of the
// process that locked them, cancels the rest while some still wait); an
// EagerDelete deletes such an instance, forced, through the node its
// commit locked several items to, as soon as the transports see them.
const (
	kindCancelRace = "CancelRace" // a timer raced against N activities; the losers are cancelled
	scenarioEager  = "EagerCancel"
	// invCancelledNotStarted: a cancelled or deleted activity is not
	// handed out by the process that cancelled or deleted it.
	invCancelledNotStarted = "cancelled-not-started"
)

// orchCancelRace first runs Batch instant activities at once (a warm-up:
// they keep the worker dispatchers fetching, which is what lets the next
// commit lock many items for them), then races a timer of TimerMs
// against N activities of SleepMs; whichever finishes first, the others
// are cancelled.
func orchCancelRace(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	warm := make([]*rt.Future, s.Batch)
	for i := range warm {
		warm[i] = (spec{Run: s.Run}).work(ctx, s.N+i)
	}
	if _, err := joined(ctx, warm); err != nil {
		return "", err
	}
	futures := []*rt.Future{ctx.ScheduleTimer(time.Duration(s.TimerMs) * time.Millisecond)}
	for i := range s.N {
		futures = append(futures, s.work(ctx, i))
	}
	ctx.Select(futures...)
	return "cancelrace:" + s.Run, nil
}

// eagerCancelEvery: every eagerCancelEvery-th scenario runs an EagerCancel
// beside its own work (a scenario of that kind is drawn too seldom to meet
// a ready list often).
const eagerCancelEvery = 3

// goEagerCancelRound starts scenario idx's EagerCancel round, if it has
// one, beside the scenario's own work; the returned wait returns the
// instances it expects an outcome of once it is done.
func (h *harness) goEagerCancelRound(ctx context.Context, idx int, rng *rand.Rand) (wait func() []string) {
	if !h.env.cfg.Features.EagerCancels || idx%eagerCancelEvery != 1 {
		return func() []string { return nil }
	}
	own := rand.New(rand.NewSource(rng.Int63()))
	done := make(chan []string, 1)
	go func() {
		done <- h.eagerCancelScenario(ctx, fmt.Sprintf("s%d-cancelround", idx), fmt.Sprintf("%d.c", idx), own)
	}()
	return func() []string { return <-done }
}

// eagerCancelScenario runs one EagerCancel scenario: a CancelRace, or an
// EagerDelete, and returns the instances it expects an outcome of.
func (h *harness) eagerCancelScenario(ctx context.Context, id, run string, rng *rand.Rand) []string {
	if rng.Intn(3) == 0 && h.nodes != nil {
		h.eagerDelete(ctx, id, run, rng)
		return nil
	}
	s := spec{Kind: kindCancelRace, Run: run, Batch: 8 + rng.Intn(9), N: 12 + rng.Intn(13), SleepMs: rng.Intn(4), TimerMs: 500 + rng.Intn(500)}
	if rng.Intn(3) == 0 { // the timer wins
		s.SleepMs, s.TimerMs = 30+rng.Intn(50), 1+rng.Intn(10)
	}
	h.startAwaited(ctx, &expectation{instance: id, spec: s, want: expected(s)})
	return []string{id}
}

// eagerDelete starts a CancelRace whose timer does not win and, as soon as
// a commit (its race turn's, mostly: the warm-up's items are taken at
// once) locked several of its activities to a node at once, deletes the
// instance (forced) through that node. The instance expects no outcome: it
// is gone.
func (h *harness) eagerDelete(ctx context.Context, id, run string, rng *rand.Rand) {
	s := spec{Kind: kindCancelRace, Run: run, Batch: 8 + rng.Intn(9), N: 12 + rng.Intn(13), SleepMs: 2 + rng.Intn(8), TimerMs: 10_000}
	if err := h.start(ctx, id, s); err != nil {
		return
	}
	var holder string
	deadline := time.Now().Add(hostScaled(h.env.cfg, 2*time.Second))
	for holder == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		holder = h.env.rec.eager.lockedTo(instancePK(id), 3)
		if holder == "" {
			time.Sleep(time.Millisecond)
		}
	}
	var through *node
	for _, n := range h.nodes() {
		if n.id == holder {
			through = n
		}
	}
	del := func(ctx context.Context, c *rt.Client) error {
		_, err := c.DeleteInstance(ctx, id, true)
		return err
	}
	var err error
	if through != nil {
		err = del(ctx, through.client)
		if err == nil || isNotFound(err) {
			h.env.rec.deletedThrough(holder, id, run, time.Now())
		}
	}
	if through == nil || err != nil && !isNotFound(err) {
		err = h.call(ctx, del) // the holder is gone, or its call failed: through any node
	}
	if err != nil && !isNotFound(err) {
		h.viol.add(invHarness, id, fmt.Sprintf("delete (force=true) of an eagerly locked fan-out: %v", err))
		return
	}
	h.noteAccepted(id, false)
	h.env.stats.count(&h.env.stats.Deletes, 1)
}

// lockedIn counts the worker items commits locked eagerly in the
// partitions pk selects, and those of them that were removed (a
// tombstone, a deletion) before anything else ended their wait.
func (e *eagerItems) lockedIn(pk func(string) bool) (locked, removed int) {
	if e == nil {
		return 0, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, it := range e.items {
		if pk(k.pk) {
			locked++
			if it.how == eagerEndRemoved {
				removed++
			}
		}
	}
	return locked, removed
}

// isCancelScenario says a partition is an EagerCancel scenario's instance.
func isCancelScenario(pk string) bool {
	return strings.HasSuffix(pk, "-cancelround") || strings.HasSuffix(pk, "-"+strings.ToLower(scenarioEager))
}

// lockedTo is the node commits locked at least least worker items of
// partition pk to that wait for it now, "" when none.
func (e *eagerItems) lockedTo(pk string, least int) string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	waiting := map[string]int{}
	for k, it := range e.items {
		if k.pk == pk && it.ended.IsZero() {
			waiting[it.writer]++
			if waiting[it.writer] >= least {
				return it.writer
			}
		}
	}
	return ""
}

// workCreate is a worker item a committed write created, with the run of
// the incarnation that scheduled it.
type workCreate struct {
	at  time.Time
	run string
}

// deletion is an instance deleted through a node: its call returned at At.
type deletion struct {
	Node, Instance, Run string
	At                  time.Time
}

// cancelWatch keeps what the cancellation check needs beyond the
// recorder's hand-outs and cancelling acks: the worker items created (so a
// cancellation names the incarnation it cancelled) and the deletions made
// through a node.
type cancelWatch struct {
	mu        sync.Mutex
	created   map[stampKey][]workCreate
	deletions []deletion
	// removedBy: when each node first learnt (its request's answer) that
	// its deletion removed a worker item.
	removedBy map[stampKey]map[string]time.Time
}

func newCancelWatch() *cancelWatch {
	return &cancelWatch{created: map[stampKey][]workCreate{}, removedBy: map[stampKey]map[string]time.Time{}}
}

// observe reads the worker items a committed request of node created, and
// those a deletion of node removed (answered: the node read the answer).
func (w *cancelWatch) observe(node string, req *http.Request, body []byte, status int, answered bool) {
	if w == nil {
		return
	}
	if op := operationOf(req); op != "DeleteItem" && !bytes.Contains(body, []byte(`"type":"work"`)) && !bytes.Contains(body, []byte(`"id":"w|`)) {
		return // neither creates a worker item nor removes one: most requests
	}
	pk := partitionKeyOf(req)
	now := time.Now()
	var docs []json.RawMessage
	var removed []string
	switch operationOf(req) {
	case "Batch":
		ops, ok := committedBatch(body, status)
		if !ok {
			return
		}
		for _, o := range ops {
			switch {
			case strings.EqualFold(o.OperationType, "create") || strings.EqualFold(o.OperationType, "upsert"):
				docs = append(docs, o.ResourceBody)
			case strings.EqualFold(o.OperationType, "delete") && strings.HasPrefix(o.ID, "w|") && !isWorkerAck(ops):
				removed = append(removed, o.ID)
			}
		}
	case "CreateItem", "UpsertItem":
		docs = append(docs, body)
	case "DeleteItem":
		if id, _ := pathDocumentID(req); strings.HasPrefix(id, "w|") {
			removed = append(removed, id)
		}
	default:
		return
	}
	if answered && len(removed) > 0 {
		w.mu.Lock()
		for _, id := range removed {
			k := stampKey{pk, id}
			if w.removedBy[k] == nil {
				w.removedBy[k] = map[string]time.Time{}
			}
			if _, seen := w.removedBy[k][node]; !seen {
				w.removedBy[k][node] = now
			}
		}
		w.mu.Unlock()
	}
	for _, d := range docs {
		var doc struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Item string `json:"item"`
		}
		if json.Unmarshal(d, &doc) != nil || doc.Type != "work" {
			continue
		}
		item, err := cdb.UnmarshalWorkItem([]byte(doc.Item))
		if err != nil {
			continue
		}
		act, ok := item.(cdb.ActivityExecuteMessage)
		if !ok {
			continue
		}
		var in workInput
		_ = json.Unmarshal([]byte(act.Input), &in)
		w.mu.Lock()
		k := stampKey{pk, doc.ID}
		w.created[k] = append(w.created[k], workCreate{at: now, run: in.Run})
		w.mu.Unlock()
	}
}

// runAt is the run of the incarnation whose worker item k was created
// last before at ("" when none was seen).
func (w *cancelWatch) runAt(k stampKey, at time.Time) string {
	run := ""
	for _, c := range w.created[k] {
		if !c.at.After(at) {
			run = c.run
		}
	}
	return run
}

// deletedThrough records an instance deleted (forced) through node, whose
// call returned at at; run is the incarnation it deleted.
func (r *recorder) deletedThrough(node, instance, run string, at time.Time) {
	if r.cancels == nil {
		return
	}
	r.cancels.mu.Lock()
	defer r.cancels.mu.Unlock()
	r.cancels.deletions = append(r.cancels.deletions, deletion{Node: node, Instance: instance, Run: run, At: at})
}

// cancelTotals counts what the cancellation check saw.
type cancelTotals struct {
	cancelled, deletions                   int
	afterOwnCancel, afterOwnDeletion       int // violations
	afterOthersCancel, afterOthersDeletion int
	// asItWent are hand-outs of a node's own cancelled activity that
	// returned within the slack of its cancelling ack's return: decided as
	// the cancellation went out, the same race as any claim's with it.
	asItWent int
}

// checkCancelled reports hand-outs of activities their node had cancelled
// or deleted, and counts those another node had. slack is what a node may
// take, after its request's answer reached its transport, to read it, and
// so what a hand-out decided before a cancellation went out may take to
// return after the cancelling ack did.
func (r *recorder) checkCancelled(v *violations, slack time.Duration) cancelTotals {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t cancelTotals
	if r.cancels == nil {
		return t
	}
	r.cancels.mu.Lock()
	defer r.cancels.mu.Unlock()
	started := map[activityKey][]execution{}
	for _, e := range r.executions {
		started[e.Key] = append(started[e.Key], e)
	}
	keys := make([]activityKey, 0, len(r.handouts))
	for k := range r.handouts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, ck := range sortedCancelKeys(r.cancelAcks) {
		t.cancelled++
		for _, ack := range r.cancelAcks[ck] {
			run := r.cancels.runAt(stampKey{instancePK(ck.Instance), workDocID(ck.Exec, ck.ID)}, ack.At)
			key := activityKey{Instance: ck.Instance, Exec: ck.Exec, ID: ck.ID, Run: run}
			for _, ho := range r.handouts[key] {
				if !ho.At.After(ack.At) {
					continue
				}
				if ho.Node != ack.Node {
					t.afterOthersCancel++
					continue
				}
				if !ho.At.After(ack.At.Add(slack)) {
					t.asItWent++
					continue
				}
				t.afterOwnCancel++
				v.add(invCancelledNotStarted, ck.Instance, fmt.Sprintf("%s was handed to %s's runtime at %s%s, after %s's ack that cancelled it returned at %s",
					key, ho.Node, stamp(ho.At), handlerStarted(started[key], ho), ack.Node, stamp(ack.At)))
			}
		}
	}
	for _, d := range r.cancels.deletions {
		t.deletions++
		for _, key := range keys {
			if key.Instance != d.Instance || key.Run != d.Run {
				continue
			}
			// The node knew once its deletion's call returned, or once it
			// read the answer to its request that removed the item.
			knew := d.At
			if at, ok := r.cancels.removedBy[stampKey{instancePK(key.Instance), workDocID(key.Exec, key.ID)}][d.Node]; ok && at.Add(slack).Before(knew) {
				knew = at.Add(slack)
			}
			for _, ho := range r.handouts[key] {
				if !ho.At.After(knew) {
					continue
				}
				if ho.Node != d.Node {
					t.afterOthersDeletion++
					continue
				}
				t.afterOwnDeletion++
				v.add(invCancelledNotStarted, d.Instance, fmt.Sprintf("%s was handed to %s's runtime at %s%s, after its instance's deletion through %s removed it (its answer read by %s; the call returned at %s)",
					key, ho.Node, stamp(ho.At), handlerStarted(started[key], ho), d.Node, stamp(knew), stamp(d.At)))
			}
		}
	}
	return t
}

// handlerStarted says whether a handler of the hand-out's node started
// then (its execution record).
func handlerStarted(execs []execution, ho handout) string {
	for _, e := range execs {
		if e.Node == ho.Node && !e.Start.Before(ho.At) {
			return fmt.Sprintf(" (its handler started at %s)", stamp(e.Start))
		}
	}
	return ""
}

func sortedCancelKeys(m map[cancelledKey][]cancelAck) []cancelledKey {
	out := make([]cancelledKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Instance != b.Instance {
			return a.Instance < b.Instance
		}
		if a.Exec != b.Exec {
			return a.Exec < b.Exec
		}
		return a.ID < b.ID
	})
	return out
}

func (t cancelTotals) String() string {
	return fmt.Sprintf("cancelled=%d handed-out-after-own-cancel=%d (as it went out %d) after-another-node's=%d; deletions-through-holder=%d handed-out-after-own-deletion=%d after-another-node's=%d",
		t.cancelled, t.afterOwnCancel, t.asItWent, t.afterOthersCancel, t.deletions, t.afterOwnDeletion, t.afterOthersDeletion)
}
