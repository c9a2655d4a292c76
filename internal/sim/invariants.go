package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// checkOutcomes compares every expected instance with what it ended as.
func (h *harness) checkOutcomes(ctx context.Context, sendsTwice map[string]bool) {
	for _, e := range h.expectations() {
		st, err := h.observer.GetStatus(ctx, e.instance)
		if err != nil {
			h.viol.add(invHarness, e.instance, fmt.Sprintf("read status: %v", err))
			continue
		}
		h.env.stats.count(&h.env.stats.Instances, 1)
		if st.State == rt.StateNotFound && h.acceptedStart(e.instance) {
			h.viol.add(invStartKept, e.instance, fmt.Sprintf("%s: its start was reported accepted and nothing deleted it, but it reads NotFound", e.spec.Kind))
			continue
		}
		if st.State == rt.StateFailed {
			h.checkFailedReadsFailed(ctx, e.instance, e.spec.Kind)
		}
		if !st.IsTerminal() {
			h.viol.add(invStuck, e.instance, fmt.Sprintf("%s is %s when the run stopped progressing (want %s); %s",
				e.spec.Kind, st.State, e.want.State, h.pending(ctx, e.instance)))
			continue
		}
		if e.sender != "" && st.State == rt.StateFailed && sendsTwice[e.sender] {
			// The sender's activity ran twice (at least once) and sent an
			// event twice: a duplicate the store cannot know of.
			continue
		}
		checkOutcome(h.viol, e, st)
		if checkCompensated(h.viol, e, st) {
			h.env.stats.count(&h.env.stats.Compensated, 1)
		}
		if e.kv != nil && st.State == rt.StateCompleted {
			h.checkKV(ctx, e)
		}
	}
}

// checkCompensated: a Sleeper that handles its cancellation ran its
// compensation before it ended cancelled (HandleCancellation's grace is
// far longer than any run). It reports whether it judged one that did.
func checkCompensated(v *violations, e *expectation, st rt.Status) bool {
	if e.spec.Kind != kindSleeper || !e.spec.Compensate || st.State != rt.StateFailed {
		return false
	}
	if st.CustomStatus == nil || *st.CustomStatus != compensatedStatus {
		v.add(invCompensated, e.instance, fmt.Sprintf("a compensating Sleeper ended %s without its compensation (custom status %v)",
			describeStatus(st), describeCustomStatus(st.CustomStatus)))
		return false
	}
	return true
}

func describeCustomStatus(status *string) string {
	if status == nil {
		return "none"
	}
	return fmt.Sprintf("%q", *status)
}

func checkOutcome(v *violations, e *expectation, st rt.Status) {
	if invariant, detail := outcomeMismatch(e, st); invariant != "" {
		v.add(invariant, e.instance, detail)
	}
}

// outcomeMismatch says how st differs from what e expects: the invariant
// the difference breaks and what it is ("" when st is what e expects).
func outcomeMismatch(e *expectation, st rt.Status) (invariant, detail string) {
	got := describeStatus(st)
	switch {
	case st.State != e.want.State:
		return invTerminalState, fmt.Sprintf("%s ended %s, want %s", e.spec.Kind, got, e.want.State)
	case st.State == rt.StateCompleted && st.Output != e.want.Output:
		return invOutput, fmt.Sprintf("%s output %q, want %q", e.spec.Kind, clip(st.Output), clip(e.want.Output))
	case st.State == rt.StateFailed && !strings.Contains(strings.ToLower(got), e.want.Error):
		return invOutput, fmt.Sprintf("%s failed with %s, want an error containing %q", e.spec.Kind, got, e.want.Error)
	}
	return "", ""
}

func describeStatus(st rt.Status) string {
	switch st.State {
	case rt.StateCompleted:
		return fmt.Sprintf("Completed(%q)", clip(st.Output))
	case rt.StateFailed:
		if st.Error != nil {
			return fmt.Sprintf("Failed(%s)", clip(st.Error.DisplayMessage()))
		}
		return "Failed"
	}
	return string(st.State)
}

func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

func (h *harness) checkKV(ctx context.Context, e *expectation) {
	got, err := h.observer.GetKVAllValues(ctx, e.instance)
	if err != nil {
		h.viol.add(invHarness, e.instance, fmt.Sprintf("read KV: %v", err))
		return
	}
	if !maps.Equal(got, e.kv) {
		h.viol.add(invKV, e.instance, fmt.Sprintf("KV store %v, want %v", got, e.kv))
	}
}

// checkFailedReadsFailed: an instance whose status reads Failed is listed
// as failed, under the orchestration's name, like any other.
func (h *harness) checkFailedReadsFailed(ctx context.Context, id, name string) {
	info, err := h.observer.GetInstanceInfo(ctx, id)
	switch {
	case err != nil:
		h.viol.add(invFailedReadsFailed, id, fmt.Sprintf("%s reads Failed, but its instance info is unreadable: %v", name, err))
	case info.Status != cdb.StatusFailed || info.OrchestrationName != name:
		h.viol.add(invFailedReadsFailed, id, fmt.Sprintf("%s reads Failed, but its instance info says %s %q", name, info.Status, info.OrchestrationName))
	}
}

// checkHistories reads every instance's executions: each completion
// appears once per scheduling, each external event once per name, and no
// instance is left running.
func (h *harness) checkHistories(ctx context.Context) {
	ids, err := h.observer.ListInstances(ctx)
	if err != nil {
		h.viol.add(invHarness, "", fmt.Sprintf("list instances: %v", err))
		return
	}
	for _, id := range ids {
		execs, err := h.observer.ListExecutions(ctx, id)
		if err != nil {
			h.viol.add(invHarness, id, fmt.Sprintf("list executions: %v", err))
			continue
		}
		for _, exec := range execs {
			history, err := h.observer.ReadExecutionHistory(ctx, id, exec)
			if err != nil {
				h.viol.add(invHarness, id, fmt.Sprintf("read execution %d: %v", exec, err))
				continue
			}
			checkHistory(h.viol, id, exec, history, h.timerTolerance())
		}
		st, err := h.observer.GetStatus(ctx, id)
		if err == nil && !st.IsTerminal() {
			h.viol.add(invStuck, id, fmt.Sprintf("still %s at the end; %s", st.State, h.pending(ctx, id)))
		}
	}
}

// timerTolerance is how much earlier than its due time a timer may be
// stamped firing: the creating and the firing node may each be off by the
// ordinary skew, which is under the second from which a process corrects
// its clock to the service's. The one bad clock (Faults.BadClock) is on a
// worker-only node, which runs no turns and so stamps no timer.
func (h *harness) timerTolerance() time.Duration {
	return 2*h.env.cfg.Faults.ClockSkew + 20*time.Millisecond
}

// checkHistory checks one execution's events. A TimerFired event is stamped
// with the clock of the node whose turn consumed it: stamped before the
// timer's due time, the timer fired early on that node.
func checkHistory(v *violations, id string, exec uint64, history []cdb.Event, tolerance time.Duration) {
	completions := map[uint64]int{}
	raised := map[string]int{}
	for _, ev := range history {
		switch k := ev.Kind.(type) {
		case cdb.TimerFired:
			if early := time.Duration(int64(k.FireAtMs)-int64(ev.TimestampMs)) * time.Millisecond; early > tolerance {
				v.add(invTimerNotEarly, id, fmt.Sprintf("execution %d: timer (event %d) due at %s fired %s early", exec, ev.EventID,
					stamp(time.UnixMilli(int64(k.FireAtMs))), early))
			}
			if ev.SourceEventID != nil {
				completions[*ev.SourceEventID]++
			}
		case cdb.ActivityCompleted, cdb.ActivityFailed, cdb.SubOrchestrationCompleted,
			cdb.SubOrchestrationFailed:
			if ev.SourceEventID != nil {
				completions[*ev.SourceEventID]++
			}
		case cdb.ExternalEvent:
			raised[k.Name]++
		}
	}
	for source, n := range completions {
		if n > 1 {
			v.add(invCompletionOnce, id, fmt.Sprintf("execution %d: event %d completed %d times in history", exec, source, n))
		}
	}
	for name, n := range raised {
		if n > 1 {
			v.add(invEventOnce, id, fmt.Sprintf("execution %d: external event %q raised once, delivered %d times", exec, name, n))
		}
	}
}

// sendsTwice finds the Sender instances one of whose Send activities ran
// more than once (allowed: activities run at least once).
func sendsTwice(execs []execution) map[string]bool {
	runs := map[activityKey]int{}
	out := map[string]bool{}
	for _, e := range execs {
		if e.Name != actSend {
			continue
		}
		runs[e.Key]++
		if runs[e.Key] > 1 {
			out[e.Key.Instance] = true
		}
	}
	return out
}

// sessionHoldGap is how soon after one of a session's activities ends the
// next must still go to the same owner: well inside the session's idle
// timeout and lock (node.go), so only a crash could move it legitimately.
const sessionHoldGap = time.Second

// checkSessions checks session affinity: a session's activities never run
// on two owners at once, and one that starts soon after another ended runs
// on the same owner (executions on crashed nodes aside). duroxide keys a
// session by its id alone, so this holds across instances.
func checkSessions(v *violations, execs []execution, crashed map[string]bool, clock *simClock) {
	bySession := map[string][]execution{}
	for _, e := range execs {
		if e.Session != "" && e.Finished && !crashed[e.Node] {
			bySession[e.Session] = append(bySession[e.Session], e)
		}
	}
	for session, list := range bySession {
		sort.Slice(list, func(i, j int) bool { return list[i].Start.Before(list[j].Start) })
		for i := range list {
			for j := i + 1; j < len(list) && list[j].Start.Before(list[i].End.Add(sessionHoldGap)); j++ {
				if list[i].Owner == list[j].Owner || clock.jumpedBetween(list[i].Start, list[j].Start) {
					continue // a clock jump expires every lock: the session may move
				}
				how := "while"
				if !list[j].Start.Before(list[i].End) {
					how = "just after"
				}
				v.add(invSessionAffinity, list[j].Key.Instance, fmt.Sprintf(
					"session %q ran on %s (%s, %s–%s) %s %s held it (%s, %s–%s)", session,
					list[j].Owner, list[j].Key, stamp(list[j].Start), stamp(list[j].End), how,
					list[i].Owner, list[i].Key, stamp(list[i].Start), stamp(list[i].End)))
			}
		}
	}
}

// checkOneHolder: an activity whose runtime was shut down while its body
// ran keeps its lock until the body returns or the runtime's cancellation
// grace ends, so no other node starts the same activity before then.
// Overlaps after a lost lock (renewals that failed under faults, a crash)
// are at-least-once and allowed: the shut-down node's transport is quiet
// from the shutdown on, so a lock it lost within the grace was let go by
// its runtime, unless a renewal of it met a fault before the shutdown, the
// node was paused or the clock jumped (lapsed, as with nodes below).
//
// With nodes (Features.ProductionLocks): an activity a node with
// production's locks runs (renewed a buffer before they expire) keeps its
// lock while it runs, so nothing else starts it meanwhile, unless that
// node crashed, was shut down or paused, or a write of it to the item (a
// renewal) met a fault or lost its answer, or the clock jumped, before the
// other start (rule R19: a lock handed out outlives its first renewal).
// Overlaps on the other nodes, whose short locks expire under faults by
// design, are counted.
func checkOneHolder(v *violations, execs []execution, shutdowns map[string]shutdownRecord, crashed map[string]bool, nodes *holderNodes) {
	byKey := map[activityKey][]execution{}
	for _, e := range execs {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	keys := make([]activityKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		list := byKey[k]
		sort.Slice(list, func(i, j int) bool { return list[i].Start.Before(list[j].Start) })
		for _, a := range list {
			sd, ok := shutdowns[a.Node]
			if !ok || crashed[a.Node] || a.End.Before(sd.At) || a.Start.After(sd.At) {
				continue
			}
			heldUntil := a.End
			if until := sd.At.Add(sd.Grace); until.Before(heldUntil) {
				heldUntil = until
			}
			for _, b := range list {
				if b.Node != a.Node && b.Start.After(a.Start) && b.Start.Before(heldUntil) && !nodes.lapsed(a, b.Start) {
					v.add(invOneHolder, a.Key.Instance, fmt.Sprintf("%s ran on %s from %s while %s (shut down at %s, grace %s) still ran it until %s",
						a.Key, b.Node, stamp(b.Start), a.Node, stamp(sd.At), sd.Grace, stamp(a.End)))
				}
			}
		}
		if nodes != nil {
			nodes.checkOverlaps(v, list, shutdowns, crashed)
		}
	}
}

// holderNodes is what one-holder knows of the nodes besides their
// shutdowns and crashes.
type holderNodes struct {
	long         func(node string) bool // its runtime renews a buffer before the lock expires
	paused       func(node string, from, to time.Time) bool
	writeFaulted func(node, pk, id string, from, to time.Time) bool
	jumped       func(from, to time.Time) bool
	// Counts, for the report.
	overlaps, excused, elsewhere int
}

// checkOverlaps checks one activity's runs (sorted by start): a run that
// starts while another runs on a node with production's locks.
func (n *holderNodes) checkOverlaps(v *violations, list []execution, shutdowns map[string]shutdownRecord, crashed map[string]bool) {
	for i, a := range list {
		for _, b := range list[i+1:] {
			if !b.Start.After(a.Start) || !b.Start.Before(a.End) {
				continue
			}
			if !n.long(a.Node) {
				n.elsewhere++
				continue
			}
			n.overlaps++
			sd, shut := shutdowns[a.Node]
			if crashed[a.Node] || shut && !sd.At.After(b.Start) || n.lapsed(a, b.Start) {
				n.excused++
				continue
			}
			v.add(invOneHolder, a.Key.Instance, fmt.Sprintf("%s started on %s at %s while it still ran on %s (%s-%s), whose locks are production's and which was healthy",
				a.Key, b.Node, stamp(b.Start), a.Node, stamp(a.Start), stamp(a.End)))
		}
	}
}

// lapsed says a's lock may have lapsed by the store's clock before until
// without its runtime letting it go: a write of a's node to the item (a
// renewal) met a fault or lost its answer, the node was paused, or the
// clock jumped, in between. Without nodes nothing is known to excuse.
func (n *holderNodes) lapsed(a execution, until time.Time) bool {
	if n == nil {
		return false
	}
	return n.writeFaulted(a.Node, instancePK(a.Key.Instance), workDocID(a.Key.Exec, a.Key.ID), a.Start, until) ||
		n.paused(a.Node, a.Start, until) || n.jumped(a.Start, until)
}

// summary is the counts, for the report.
func (n *holderNodes) summary() string {
	return fmt.Sprintf("overlaps on production nodes=%d (excused %d), on others=%d (their short locks expire under faults)", n.overlaps, n.excused, n.elsewhere)
}

// leftover is a document that should not outlive the work.
type leftover struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Item     string `json:"item"`
	// Queue state, for diagnostics.
	VisibleAt   int64  `json:"visibleAt"`
	LockedUntil int64  `json:"lockedUntil"`
	Attempts    int    `json:"attempts"`
	Writer      string `json:"writer"`
}

// leftoversQuery finds queue messages, worker items, outboxes and the
// outbox parts a commit made permanent, deletion intents, instances marked
// for deletion and instance documents no start ever named. Staged parts a
// commit never made permanent (a crash between staging and committing) are
// not leftovers: they keep their TTL and expire (the fake does not expire
// documents, a real account does), and nothing names them.
const leftoversQuery = `SELECT c.id, c.type, c.instance, c.item, c.visibleAt, c.lockedUntil, c.attempts, c.writer FROM c WHERE c.type IN ('msg', 'work', 'outbox', 'delete')
 OR (c.type = 'outbox-part' AND c.ttl = -1)
 OR (c.type = 'inst' AND (NOT IS_DEFINED(c.name) OR IS_DEFINED(c.deleting)))`

// checkLeftovers waits for the container to drain (until the run stalls:
// progress.go), then reports what is left. A leftover count that fell is
// progress.
func (h *harness) checkLeftovers(ctx context.Context, container *cdb.ContainerClient) {
	var left []leftover
	var queryErr error
	fewest := -1
	h.env.progress.waitUntil(ctx, 200*time.Millisecond, func() bool {
		left, queryErr = queryLeftovers(ctx, container)
		if queryErr != nil {
			return true
		}
		if fewest < 0 || len(left) < fewest {
			if fewest >= 0 {
				h.env.progress.mark()
			}
			fewest = len(left)
		}
		return len(left) == 0
	})
	if queryErr != nil {
		h.viol.add(invHarness, "", fmt.Sprintf("query leftovers: %v", queryErr))
		return
	}
	described := map[string]bool{}
	for _, l := range left {
		if !described[l.Instance] {
			described[l.Instance] = true
			h.viol.add(invLeftovers, l.Instance, fmt.Sprintf("instance left with documents: %s", h.describeInstance(ctx, l.Instance)))
		}
		h.viol.add(invLeftovers, l.Instance, fmt.Sprintf("%s document %q left with faults off (%s)%s%s", l.Type, l.ID, h.env.progress.why(), itemKind(l.Item), l.queueState()))
	}
}

func queryLeftovers(ctx context.Context, container *cdb.ContainerClient) ([]leftover, error) {
	res, err := container.QueryItems(ctx, leftoversQuery, nil, nil)
	if err != nil {
		return nil, err
	}
	out := make([]leftover, 0, len(res.Items))
	for _, raw := range res.Items {
		var l leftover
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("decode leftover: %w", err)
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b leftover) int { return strings.Compare(a.Instance+a.ID, b.Instance+b.ID) })
	return out, nil
}

// queueState describes a leftover queue document's visibility and lock
// relative to now.
func (l leftover) queueState() string {
	if l.Type != "msg" && l.Type != "work" {
		return ""
	}
	now := time.Now().UnixMilli()
	return fmt.Sprintf(" visible %+dms, locked %+dms, %d attempts, writer %q", l.VisibleAt-now, l.LockedUntil-now, l.Attempts, l.Writer)
}

// itemKind names the work item a queue document carries, for diagnostics.
func itemKind(item string) string {
	if item == "" {
		return ""
	}
	w, err := cdb.UnmarshalWorkItem([]byte(item))
	if err != nil {
		return " (undecodable item)"
	}
	return fmt.Sprintf(" (%s)", w.Kind())
}

// describeInstance says an instance's state and its latest execution's
// history, for a diagnostic.
func (h *harness) describeInstance(ctx context.Context, id string) string {
	st, err := h.observer.GetStatus(ctx, id)
	if err != nil {
		return fmt.Sprintf("status unreadable (%v)", err)
	}
	return fmt.Sprintf("%s; %s", describeStatus(st), h.pending(ctx, id))
}

// pending describes what an unfinished instance still has queued.
func (h *harness) pending(ctx context.Context, id string) string {
	history, err := h.observer.ReadHistory(ctx, id)
	if err != nil {
		return "history unreadable"
	}
	last := "none"
	if len(history) > 0 {
		b, _ := json.Marshal(history[len(history)-1])
		last = clip(string(b))
	}
	return fmt.Sprintf("%d events in its latest execution, last %s", len(history), last)
}
