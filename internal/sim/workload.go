package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// Scenario kinds; each is an orchestration of that name, whose outcome is a
// function of its input (a spec), so the harness knows what to expect.
const (
	kindChain    = "Chain"    // N sequential activities
	kindFanOut   = "FanOut"   // N parallel activities
	kindTimer    = "Timer"    // a timer, then an activity
	kindParent   = "Parent"   // N sub-orchestrations (chains)
	kindDetach   = "Detach"   // a detached chain at Target, then an activity
	kindInbox    = "Inbox"    // N queued events in order, Batch per execution (continue-as-new)
	kindWaiter   = "Waiter"   // N external events, each to its own subscription
	kindSender   = "Sender"   // sends N events to the Inbox at Target from activities
	kindSessions = "Sessions" // N activities on the session Session
	kindKV       = "KV"       // N KV writes over executions of Batch steps
	kindRace     = "Race"     // a child (Sleeper at Target) raced against a timer: the child is cancelled
	kindSleeper  = "Sleeper"  // waits forever until cancelled
)

// Activity names.
const (
	actWork   = "Work"
	actSend   = "Send"
	actPinned = "Pinned"
)

// queueName is the persistent queue Inbox instances read.
const queueName = "inbox"

// spec is an orchestration's input: everything its outcome depends on.
type spec struct {
	Kind    string `json:"k"`
	Run     string `json:"r"` // unique per incarnation
	N       int    `json:"n,omitempty"`
	Size    int    `json:"s,omitempty"`  // activity input padding, bytes
	SleepMs int    `json:"ms,omitempty"` // activity duration, or timer delay
	Batch   int    `json:"b,omitempty"`  // steps per execution
	Next    int    `json:"x,omitempty"`  // first step of this execution
	Target  string `json:"t,omitempty"`  // another instance
	Session string `json:"ss,omitempty"`
	Tag     string `json:"tg,omitempty"`
	Child   *spec  `json:"c,omitempty"`
	// Stubborn activities run their whole SleepMs even when cancelled (a
	// handler that does not watch its context).
	Stubborn bool `json:"st,omitempty"`
	// Pad makes the input (and so a continue-as-new's input) this long.
	Pad string `json:"p,omitempty"`
	// StallMs holds the dispatcher of the instance's first turn this long
	// (a Chain's, once per Run): a dispatcher stalled with a start's first
	// turn (firstturns.go).
	StallMs int `json:"sl,omitempty"`
	// A Sequence's timers (sequences.go): every RaceEvery-th step races
	// its activity against a timer of TimeoutMs, every SleepEvery-th
	// sleeps TimerMs first.
	RaceEvery  int `json:"re,omitempty"`
	TimeoutMs  int `json:"to,omitempty"`
	SleepEvery int `json:"se,omitempty"`
	TimerMs    int `json:"tm,omitempty"`
	// FirstMs: the activities run this long on their first run in the run
	// (on whichever node), and return at once on any later one
	// (prodlocks.go).
	FirstMs int `json:"fm,omitempty"`
	// Compensate: a Sleeper that handles its cancellation (HandleCancellation)
	// runs one more activity, its compensation, before it ends cancelled.
	Compensate bool `json:"cp,omitempty"`
}

func (s spec) encode() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("sim: encode spec: %v", err)) // plain struct: cannot fail
	}
	return string(b)
}

func decodeSpec(input string) (spec, error) {
	var s spec
	if err := json.Unmarshal([]byte(input), &s); err != nil {
		return s, fmt.Errorf("sim: decode spec: %w", err)
	}
	return s, nil
}

// workInput is an activity's input.
type workInput struct {
	Run     string `json:"r"`
	I       int    `json:"i"`
	SleepMs int    `json:"ms,omitempty"`
	Target  string `json:"t,omitempty"` // Send: the receiving instance
	Data    string `json:"d,omitempty"` // Send: the event
	Pad     string `json:"p,omitempty"`
	// Stubborn: the body sleeps SleepMs whatever its context says.
	Stubborn bool `json:"st,omitempty"`
	// FirstMs: the body sleeps this long (watching its context) on the
	// activity's first run, and not at all on a later one.
	FirstMs int `json:"fm,omitempty"`
}

// Activity results start with the run token, so a committed completion
// names its incarnation (record.go).
func withRun(run, result string) string { return run + "#" + result }

func splitRun(result string) (run, rest string, ok bool) { return strings.Cut(result, "#") }

func stripRun(result string) string {
	if _, rest, ok := splitRun(result); ok {
		return rest
	}
	return result
}

// outcome is what an instance must end with.
type outcome struct {
	State  rt.State
	Output string // Completed
	Error  string // Failed: a substring of the error's message
}

// expected is the outcome a spec determines.
func expected(s spec) outcome {
	done := func(out string) outcome { return outcome{State: rt.StateCompleted, Output: out} }
	switch s.Kind {
	case kindChain:
		return done("chain:" + s.Run + ":" + strings.Join(workResults(s.N, s.Size, "w"), ","))
	case kindFanOut:
		return done("fan:" + strings.Join(workResults(s.N, s.Size, "w"), ","))
	case kindTimer:
		return done("timer:" + strings.Join(workResults(1, s.Size, "w"), ","))
	case kindParent:
		outs := make([]string, s.N)
		for i := range outs {
			outs[i] = expected(childChain(s, i)).Output
		}
		return done("parent:" + strings.Join(outs, "|"))
	case kindDetach:
		return done("detach:" + s.Target)
	case kindInbox:
		return done(fmt.Sprintf("inbox:%d", s.N))
	case kindWaiter:
		return done(fmt.Sprintf("waiter:%d", s.N))
	case kindSender:
		return done(fmt.Sprintf("sender:%d", s.N))
	case kindSessions:
		return done("sess:" + strings.Join(workResults(s.N, 0, "p"), ","))
	case kindKV:
		return done("kv:" + kvSummary(kvFinal(s.N)))
	case kindRace:
		return done("race:timeout")
	case kindSleeper:
		return outcome{State: rt.StateFailed, Error: "cancel"}
	case kindBigKV:
		return done(fmt.Sprintf("bigkv:%dx%d", s.N*s.Batch, s.Size))
	case kindBigOut:
		return done(bigOutput(s.Run, s.Size))
	case kindSequence:
		return done(sequenceOutput(s))
	case kindCancelRace:
		return done("cancelrace:" + s.Run)
	}
	return outcome{State: rt.StateFailed, Error: "unknown scenario kind " + s.Kind}
}

func workResults(n, size int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d:%d", prefix, i, size)
	}
	return out
}

// childChain is the i-th child of a Parent.
func childChain(s spec, i int) spec {
	return spec{Kind: kindChain, Run: fmt.Sprintf("%s.c%d", s.Run, i), N: 2, Size: s.Size, SleepMs: s.SleepMs, Tag: s.Tag}
}

// register adds the workload's orchestrations and, bound to node, its
// activities.
func register(reg *rt.Registry, acts *activities) error {
	orchestrations := map[string]rt.OrchestrationFunc{
		kindChain: acts.stallingFirstTurn(orchChain), kindFanOut: orchFanOut, kindTimer: orchTimer, kindParent: orchParent,
		kindDetach: orchDetach, kindInbox: orchInbox, kindWaiter: orchWaiter, kindSender: orchSender,
		kindSessions: orchSessions, kindKV: orchKV, kindRace: orchRace, kindSleeper: orchSleeper,
		kindBigKV: orchBigKV, kindBigOut: orchBigOut, kindSequence: orchSequence,
		kindCancelRace: orchCancelRace,
	}
	for name, fn := range orchestrations {
		if err := reg.RegisterOrchestration(name, fn); err != nil {
			return err
		}
	}
	for name, fn := range map[string]rt.ActivityFunc{actWork: acts.work, actSend: acts.send, actPinned: acts.pinned} {
		if err := reg.RegisterActivity(name, fn); err != nil {
			return err
		}
	}
	return nil
}

func (s spec) work(ctx *rt.OrchestrationContext, i int) *rt.Future {
	in := workInput{Run: s.Run, I: i, SleepMs: s.SleepMs, Pad: strings.Repeat("x", s.Size), Stubborn: s.Stubborn, FirstMs: s.FirstMs}
	b, _ := json.Marshal(in)
	var opts []rt.ActivityOption
	if s.Tag != "" {
		opts = append(opts, rt.WithTag(s.Tag))
	}
	return ctx.ScheduleActivity(actWork, string(b), opts...)
}

func orchChain(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	outs := make([]string, s.N)
	for i := range outs {
		out, err := s.work(ctx, i).Await()
		if err != nil {
			return "", err
		}
		outs[i] = stripRun(out)
	}
	return "chain:" + s.Run + ":" + strings.Join(outs, ","), nil
}

func orchFanOut(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	futures := make([]*rt.Future, s.N)
	for i := range futures {
		futures[i] = s.work(ctx, i)
	}
	outs, err := joined(ctx, futures)
	if err != nil {
		return "", err
	}
	return "fan:" + strings.Join(outs, ","), nil
}

// joined awaits every future and strips the run tokens of their results.
func joined(ctx *rt.OrchestrationContext, futures []*rt.Future) ([]string, error) {
	outs := make([]string, len(futures))
	for i, r := range ctx.Join(futures...) {
		if r.Err != nil {
			return nil, r.Err
		}
		outs[i] = stripRun(r.Value)
	}
	return outs, nil
}

func orchTimer(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	if _, err := ctx.ScheduleTimer(time.Duration(s.SleepMs) * time.Millisecond).Await(); err != nil {
		return "", err
	}
	out, err := (spec{Run: s.Run, Size: s.Size, Tag: s.Tag}).work(ctx, 0).Await()
	if err != nil {
		return "", err
	}
	return "timer:" + stripRun(out), nil
}

func orchParent(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	futures := make([]*rt.Future, s.N)
	for i := range futures {
		futures[i] = ctx.ScheduleSubOrchestration(kindChain, childChain(s, i).encode())
	}
	outs := make([]string, s.N)
	for i, r := range ctx.Join(futures...) {
		if r.Err != nil {
			return "", r.Err
		}
		outs[i] = r.Value
	}
	return "parent:" + strings.Join(outs, "|"), nil
}

func orchDetach(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	if err := ctx.StartDetached(s.Target, kindChain, s.Child.encode()); err != nil {
		return "", err
	}
	if _, err := (spec{Run: s.Run}).work(ctx, 0).Await(); err != nil {
		return "", err
	}
	return "detach:" + s.Target, nil
}

// orchInbox consumes N events in order, Batch per execution; a duplicate or
// an event out of its sender's order fails it.
func orchInbox(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	next := max(s.Next, 1)
	for taken := 0; next <= s.N; taken++ {
		if taken == s.Batch {
			s.Next = next
			return ctx.ContinueAsNew(s.encode())
		}
		data, err := ctx.DequeueEvent(queueName).Await()
		if err != nil {
			return "", err
		}
		if want := eventData(s.Run, next); data != want {
			return "", fmt.Errorf("event duplicated or out of order: want %q, got %q", want, data)
		}
		next++
	}
	return fmt.Sprintf("inbox:%d", s.N), nil
}

// eventData is the seq-th event sent to the incarnation run.
func eventData(run string, seq int) string { return run + ":" + strconv.Itoa(seq) }

// orchWaiter waits for N events in turn, each by its own name, continuing
// as new every Batch events (never when 0).
func orchWaiter(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	for i := s.Next; i < s.N; i++ {
		if s.Batch > 0 && i > s.Next && (i-s.Next)%s.Batch == 0 {
			// Events raised early and not read yet are carried into the
			// next execution.
			s.Next = i
			return ctx.ContinueAsNew(s.encode())
		}
		data, err := ctx.WaitForEvent(waiterEvent(i)).Await()
		if err != nil {
			return "", err
		}
		if want := eventData(s.Run, i); data != want {
			return "", fmt.Errorf("event %s: want %q, got %q", waiterEvent(i), want, data)
		}
	}
	return fmt.Sprintf("waiter:%d", s.N), nil
}

func waiterEvent(i int) string { return "e" + strconv.Itoa(i) }

// orchSender sends N events to the Inbox at Target (whose run is
// Child.Run), one activity each, in order.
func orchSender(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	for seq := 1; seq <= s.N; seq++ {
		in, _ := json.Marshal(workInput{Run: s.Run, I: seq, Target: s.Target, Data: eventData(s.Child.Run, seq)})
		if _, err := ctx.ScheduleActivity(actSend, string(in)).Await(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("sender:%d", s.N), nil
}

func orchSessions(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	futures := make([]*rt.Future, s.N)
	for i := range futures {
		in, _ := json.Marshal(workInput{Run: s.Run, I: i, SleepMs: s.SleepMs})
		futures[i] = ctx.ScheduleActivity(actPinned, string(in), rt.WithSession(s.Session))
	}
	outs, err := joined(ctx, futures)
	if err != nil {
		return "", err
	}
	return "sess:" + strings.Join(outs, ","), nil
}

// kvStep is the i-th KV operation: keys k0–k2 are set, and every fourth
// step clears one.
func kvStep(i int) (key, value string, clear bool) {
	return "k" + strconv.Itoa(i%3), "v" + strconv.Itoa(i), i%4 == 3
}

// kvFinal is the store after n steps.
func kvFinal(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		key, value, clear := kvStep(i)
		if clear {
			delete(m, key)
		} else {
			m[key] = value
		}
	}
	return m
}

func kvSummary(m map[string]string) string {
	parts := make([]string, 3)
	for i := range parts {
		key := "k" + strconv.Itoa(i)
		v, ok := m[key]
		if !ok {
			v = "-"
		}
		parts[i] = key + "=" + v
	}
	return strings.Join(parts, ",")
}

func orchKV(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	i := s.Next
	for taken := 0; i < s.N; taken++ {
		if taken == s.Batch {
			s.Next = i
			return ctx.ContinueAsNew(s.encode())
		}
		key, value, clear := kvStep(i)
		if clear {
			ctx.ClearKV(key)
		} else {
			ctx.SetKV(key, value)
		}
		if _, err := (spec{Run: s.Run}).work(ctx, i).Await(); err != nil {
			return "", err
		}
		i++
	}
	m := map[string]string{}
	for k := range 3 {
		if v, ok := ctx.GetKV("k" + strconv.Itoa(k)); ok {
			m["k"+strconv.Itoa(k)] = v
		}
	}
	return "kv:" + kvSummary(m), nil
}

func orchRace(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	child := ctx.ScheduleSubOrchestration(kindSleeper, s.Child.encode(), rt.WithInstanceID(s.Target))
	timer := ctx.ScheduleTimer(time.Duration(s.SleepMs) * time.Millisecond)
	if ctx.Select(timer, child) == 0 {
		return "race:timeout", nil
	}
	return "race:child-won", nil
}

// orchSleeper runs a long activity and waits for an event nobody raises.
func orchSleeper(ctx *rt.OrchestrationContext, input string) (string, error) {
	s, err := decodeSpec(input)
	if err != nil {
		return "", err
	}
	if s.Compensate {
		ctx.HandleCancellation(compensationGrace)
	}
	results := ctx.Join(s.work(ctx, 0), ctx.WaitForEvent("never"))
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		if s.Compensate && errors.Is(r.Err, rt.ErrCancelled) {
			compensate(ctx, s)
		}
		return "", r.Err
	}
	return "sleeper:woke", nil
}

// compensationGrace is a compensating Sleeper's grace: far longer than
// its instant compensation takes through crashes and faults, so that a
// cancelled Sleeper that did not compensate is a defect, not a slow run;
// and short enough that its timer, which outlives a compensation that ends
// first, fires and is consumed before the run's end looks for leftovers.
const compensationGrace = 30 * time.Second

// compensate runs a cancelled Sleeper's compensation, an instant activity,
// and says so in its custom status once it ran (checkCompensated).
func compensate(ctx *rt.OrchestrationContext, s spec) {
	s.SleepMs = 0
	if _, err := s.work(ctx, 1).Await(); err == nil {
		status := compensatedStatus
		ctx.SetCustomStatus(&status)
	}
}

// compensatedStatus is the custom status of a Sleeper whose compensation ran.
const compensatedStatus = "compensated"

// activities are one node's activity bodies: they record each execution.
type activities struct {
	node       string
	stableNode bool // the runtime's session owner is the node, not the slot
	rec        *recorder
	stats      *Stats
}

func (a *activities) run(actx rt.ActivityContext, input string, body func(workInput) (string, error)) (string, error) {
	var in workInput
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		return "", fmt.Errorf("sim: activity input: %w", err)
	}
	e := execution{
		Key:  activityKey{Instance: actx.InstanceID(), Exec: actx.ExecutionID(), ID: actx.ActivityID(), Run: in.Run},
		Name: actx.ActivityName(), Node: a.node, Session: actx.SessionID(), Start: time.Now(),
	}
	if e.Session != "" {
		e.Owner = actx.WorkerID()
		if a.stableNode {
			e.Owner = a.node
		}
	}
	if in.FirstMs > 0 && !a.rec.startedBefore(e.Key) {
		in.SleepMs = in.FirstMs
	}
	a.rec.started(e)
	a.stats.count(&a.stats.Activities, 1)
	out, err := a.sleepThen(actx, in, body)
	e.End, e.Finished = time.Now(), err == nil
	a.rec.ended(e)
	return out, err
}

func (a *activities) sleepThen(actx rt.ActivityContext, in workInput, body func(workInput) (string, error)) (string, error) {
	if in.SleepMs > 0 && in.Stubborn {
		time.Sleep(time.Duration(in.SleepMs) * time.Millisecond)
	} else if in.SleepMs > 0 {
		t := time.NewTimer(time.Duration(in.SleepMs) * time.Millisecond)
		defer t.Stop()
		select {
		case <-actx.Done():
			return "", fmt.Errorf("sim: activity interrupted: %w", actx.Err())
		case <-t.C:
		}
	}
	return body(in)
}

func (a *activities) work(actx rt.ActivityContext, input string) (string, error) {
	return a.run(actx, input, func(in workInput) (string, error) {
		return withRun(in.Run, fmt.Sprintf("w%d:%d", in.I, len(in.Pad))), nil
	})
}

func (a *activities) pinned(actx rt.ActivityContext, input string) (string, error) {
	return a.run(actx, input, func(in workInput) (string, error) {
		return withRun(in.Run, fmt.Sprintf("p%d:0", in.I)), nil
	})
}

// send enqueues one event for another instance; a retryable error is
// retried, as any caller would.
func (a *activities) send(actx rt.ActivityContext, input string) (string, error) {
	return a.run(actx, input, func(in workInput) (string, error) {
		err := retry(actx, a.stats, nil, func(ctx context.Context) error {
			return actx.Client().EnqueueEvent(ctx, in.Target, queueName, in.Data)
		})
		if err != nil {
			return "", err
		}
		return withRun(in.Run, fmt.Sprintf("sent%d", in.I)), nil
	})
}

// retry calls f until it succeeds, fails permanently, ctx ends or the run
// stalls (p, when not nil: progress.go), and counts the retries (each one
// is a caller that saw a retryable error).
func retry(ctx context.Context, stats *Stats, p *progress, f func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := f(ctx)
		// A burst of refusals the run injected is a moment's, as on a real
		// account (a credential or a role propagating): the application
		// tries again later, as a wait does (isInjectedRefusal).
		if err == nil || !cdb.IsRetryable(err) && !errors.Is(err, errNodeDown) && !isInjectedRefusal(err) {
			return err
		}
		if p != nil && p.stalled() {
			return fmt.Errorf("sim: retry: %s (last error: %w)", p.why(), err)
		}
		stats.count(&stats.Retries, 1)
		t := time.NewTimer(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sim: retry: %w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
