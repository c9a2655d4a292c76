package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// The operator commands look at and tidy a provider's container on any
// endpoint: the account in COSMOS_*, or one given by flags (for example a
// `cdb emulator`).

// operatorRun is an operator command's work, on an open provider.
type operatorRun func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error

// operatorCommand wires a command that needs a provider and n positional
// arguments.
func operatorCommand(name string, flags func(*flag.FlagSet), n int, run operatorRun) func(context.Context, []string, io.Writer, io.Writer) error {
	return operatorCommandBetween(name, flags, n, n, run)
}

// operatorCommandBetween wires a command that needs a provider and least to
// most positional arguments.
func operatorCommandBetween(name string, flags func(*flag.FlagSet), least, most int, run operatorRun) func(context.Context, []string, io.Writer, io.Writer) error {
	return operatorCommandOn(operatorConnection, name, flags, least, most, nil, run)
}

// operatorCommandChecked is operatorCommandBetween with check, which looks
// at the parsed arguments before anything connects (a payload that is not
// JSON, say) and refuses them with its error.
func operatorCommandChecked(name string, flags func(*flag.FlagSet), least, most int, check func(args []string) error, run operatorRun) func(context.Context, []string, io.Writer, io.Writer) error {
	return operatorCommandOn(operatorConnection, name, flags, least, most, check, run)
}

// operatorCommandOn wires a command that needs a provider on the
// connection newConn makes, and least to most positional arguments, which
// check (when not nil) accepts first.
func operatorCommandOn(newConn func() *connection, name string, flags func(*flag.FlagSet), least, most int, check func(args []string) error, run operatorRun) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
		fs := newFlagSet(name, stderr)
		conn := newConn()
		conn.register(fs)
		if flags != nil {
			flags(fs)
		}
		if err := parseBetween(fs, argv, least, most); err != nil {
			return err
		}
		if check != nil {
			if err := check(fs.Args()); err != nil {
				return err
			}
		}
		p, err := conn.open(ctx, stderr)
		if err != nil {
			return err
		}
		defer p.Close()
		return run(ctx, p, p.Client().Endpoint(), fs.Args(), stdout)
	}
}

// outputLabel names what an instance of status keeps as its output: a
// failed one's is its error.
func outputLabel(status string) string {
	if status == string(cdb.StatusFailed) {
		return "error"
	}
	return "output"
}

func formatTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func formatMs(ms uint64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(int64(ms)).UTC().Format(time.RFC3339)
}

func runShow(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var format outputFormat
	return operatorCommand("show", func(fs *flag.FlagSet) {
		registerOutput(fs, &format)
	}, 1, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		shown, err := readInstance(ctx, p, args[0])
		if err != nil {
			return instanceError(endpoint, args[0], err)
		}
		if format == formatJSON {
			return writeJSON(out, shown)
		}
		printInstance(out, shown)
		return nil
	})(ctx, argv, stdout, stderr)
}

// readInstance reads what show prints: an instance's info, executions,
// current history, custom status and KV.
func readInstance(ctx context.Context, p cdb.Provider, id string) (showJSON, error) {
	admin, _ := p.Admin()
	info, err := admin.GetInstanceInfo(ctx, id)
	if err != nil {
		return showJSON{}, err
	}
	shown := showJSON{instanceJSON: instanceToJSON(info), Executions: []executionJSON{}}
	status, _, ok, err := p.GetCustomStatus(ctx, id, 0)
	if err != nil {
		return showJSON{}, err
	}
	if ok {
		shown.CustomStatus = status
	}
	execs, err := admin.ListExecutions(ctx, id)
	if err != nil {
		return showJSON{}, err
	}
	for _, e := range execs {
		ei, err := admin.GetExecutionInfo(ctx, id, e)
		if errors.Is(err, cdb.ErrExecutionNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return showJSON{}, err
		}
		shown.Executions = append(shown.Executions, executionToJSON(ei))
	}
	if shown.History, err = p.Read(ctx, id); err != nil {
		return showJSON{}, err
	}
	if shown.KV, err = p.GetKVAllValues(ctx, id); err != nil {
		return showJSON{}, err
	}
	// Scripts get [] and {} rather than null.
	if shown.History == nil {
		shown.History = []cdb.Event{}
	}
	if shown.KV == nil {
		shown.KV = map[string]string{}
	}
	return shown, nil
}

// printInstance prints an instance's info, executions, current history as
// a timeline, custom status and KV, each line within the terminal's width
// (80 columns when out is none), a long one going on under its value.
func printInstance(out io.Writer, s showJSON) {
	width := terminalWidth(out)
	info := func(format string, args ...any) {
		printWrapped(out, fmt.Sprintf(format, args...), width, infoIndent)
	}
	info("instance   %s", s.InstanceID)
	info("orchestration %s@%s", s.OrchestrationName, s.OrchestrationVersion)
	if s.Output != nil {
		info("status     %s  %s %s", s.Status, outputLabel(s.Status), truncate(*s.Output, 200))
	} else {
		info("status     %s", s.Status)
	}
	if s.Parked != nil {
		printParked(out, *s.Parked, width)
	}
	if s.ParentInstanceID != nil {
		info("parent     %s", *s.ParentInstanceID)
	}
	info("created    %s  updated %s", formatTime(s.CreatedAt), formatTime(s.UpdatedAt))
	if s.CustomStatus != nil {
		info("custom     %s", truncate(*s.CustomStatus, 200))
	}
	fmt.Fprintf(out, "\nexecutions (%d)\n", len(s.Executions))
	for _, e := range s.Executions {
		span := formatTime(e.StartedAt)
		if e.CompletedAt != nil {
			span += " to " + formatTime(e.CompletedAt)
		}
		info("  #%d %-14s %4d events  %s", e.ExecutionID, e.Status, e.EventCount, span)
	}
	fmt.Fprintf(out, "\nhistory of execution %d (%d events)\n", s.CurrentExecutionID, len(s.History))
	printTimeline(out, s.InstanceID, s.History)
	if len(s.KV) > 0 {
		fmt.Fprintf(out, "\nkv (%d keys)\n", len(s.KV))
		for _, k := range sortedKeys(s.KV) {
			info("  %s = %s", k, truncate(s.KV[k], 120))
		}
	}
}

// infoIndent is where a long line of show's info goes on: under the
// values.
const infoIndent = 11

// printParked says why a running instance makes no progress: its code no
// longer matches its history, and a runtime retries its turn.
func printParked(out io.Writer, p parkedJSON, width int) {
	printWrapped(out, fmt.Sprintf("parked     since %s, %d parks, next retry %s", formatTime(&p.Since), p.Count, formatTime(&p.RetryAt)), width, infoIndent)
	printWrapped(out, "  reason   "+truncate(p.Reason, 400), width, infoIndent)
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// runMetrics prints the instance counts and the queues. A queue is what a
// fetch could take now, as cdb top counts it (SampleQueues); what waits by
// design (timers, delayed retries, parked messages) is counted apart as not
// due: GetQueueDepths' unlocked items less the due ones.
func runMetrics(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var format outputFormat
	return operatorCommand("metrics", func(fs *flag.FlagSet) {
		registerOutput(fs, &format)
	}, 0, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, _ []string, out io.Writer) error {
		m, err := p.GetSystemMetrics(ctx)
		if err != nil {
			return describe(endpoint, err)
		}
		unlocked, err := p.GetQueueDepths(ctx)
		if err != nil {
			return describe(endpoint, err)
		}
		q, err := p.SampleQueues(ctx, time.Time{})
		if err != nil {
			return describe(endpoint, err)
		}
		j := metricsJSON{
			TotalInstances: m.TotalInstances, RunningInstances: m.RunningInstances, CompletedInstances: m.CompletedInstances,
			FailedInstances: m.FailedInstances, TotalExecutions: m.TotalExecutions, TotalEvents: m.TotalEvents,
			OrchestratorQueue: int(q.Orchestrator.Count), WorkerQueue: int(q.Worker.Count),
			OrchestratorNotDue: notDue(unlocked.OrchestratorQueue, q.Orchestrator), WorkerNotDue: notDue(unlocked.WorkerQueue, q.Worker),
			Outbox:         q.Outbox.Count,
			ParkedMessages: q.Parked.Count, OldestParked: oldestOf(q.Time, q.Parked),
			PoisonMessages: q.Poison.Count, OldestPoison: oldestOf(q.Time, q.Poison),
		}
		if format == formatJSON {
			return writeJSON(out, j)
		}
		width := terminalWidth(out)
		for _, line := range []string{
			fmt.Sprintf("instances   %d (running %d, completed %d, failed %d)", j.TotalInstances, j.RunningInstances, j.CompletedInstances, j.FailedInstances),
			fmt.Sprintf("executions  %d", j.TotalExecutions),
			fmt.Sprintf("events      %d", j.TotalEvents),
			fmt.Sprintf("queues      orchestrator %d, worker %d (due: what a fetch could take now)", j.OrchestratorQueue, j.WorkerQueue),
			fmt.Sprintf("not due     orchestrator %d, worker %d (timers, retries, parked: later)", j.OrchestratorNotDue, j.WorkerNotDue),
			fmt.Sprintf("outbox      %d (effects on other instances not yet delivered)", j.Outbox),
			fmt.Sprintf("held        parked %d%s, poison %d%s (orchestrator messages out of the queue's way)",
				j.ParkedMessages, oldestNote(j.OldestParked), j.PoisonMessages, oldestNote(j.OldestPoison)),
		} {
			printWrapped(out, line, width, 12)
		}
		return nil
	})(ctx, argv, stdout, stderr)
}

// notDue is a queue's unlocked items (GetQueueDepths) that are not due
// (SampleQueues). The two counts are read one after the other, so work
// that came due or was taken between them could make it negative: 0 then.
func notDue(unlocked int, due cdb.Backlog) int {
	return max(unlocked-int(due.Count), 0)
}

// oldestOf is the time of a backlog's oldest, in RFC 3339, from its age at
// the sample's time; empty when there is none.
func oldestOf(sampled time.Time, b cdb.Backlog) string {
	if b.Count == 0 {
		return ""
	}
	oldest := sampled.Add(-b.OldestAge)
	return timestamp(&oldest)
}

// timestamp is t in RFC 3339, UTC, or empty for none.
func timestamp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// oldestNote names the oldest of some held messages, if any.
func oldestNote(oldest string) string {
	if oldest == "" {
		return ""
	}
	return " (oldest " + oldest + ")"
}

func runDelete(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var force bool
	return operatorCommand("delete", func(fs *flag.FlagSet) {
		fs.BoolVar(&force, "force", false, "delete even if the instance is still running")
	}, 1, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		r, err := deleteInstance(ctx, p, endpoint, args[0], force)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d instance(s), %d execution(s), %d event(s), %d queued message(s)\n",
			r.InstancesDeleted, r.ExecutionsDeleted, r.EventsDeleted, r.QueueMessagesDeleted)
		return nil
	})(ctx, argv, stdout, stderr)
}

// deleteInstance deletes a root instance and its sub-orchestrations, a
// running one only with force: cdb delete, and the UI's delete.
func deleteInstance(ctx context.Context, p *cdb.CosmosProvider, endpoint, id string, force bool) (cdb.DeleteInstanceResult, error) {
	if _, err := p.GetInstanceInfo(ctx, id); err != nil {
		return cdb.DeleteInstanceResult{}, instanceError(endpoint, id, err)
	}
	r, err := p.DeleteInstance(ctx, id, force)
	if err != nil {
		return cdb.DeleteInstanceResult{}, instanceError(endpoint, id, err)
	}
	return r, nil
}

func runPrune(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var keepLast uint
	var before string
	return operatorCommand("prune", func(fs *flag.FlagSet) {
		fs.UintVar(&keepLast, "keep-last", 1, "keep this many newest executions (the current one always stays)")
		fs.StringVar(&before, "completed-before", "", "only executions completed before this time (RFC 3339)")
	}, 1, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		opts := cdb.PruneOptions{}
		k := uint32(keepLast)
		opts.KeepLast = &k
		if before != "" {
			t, err := time.Parse(time.RFC3339, before)
			if err != nil {
				return usageError{msg: fmt.Sprintf("-completed-before: %v", err), cause: err}
			}
			ms := uint64(t.UnixMilli())
			opts.CompletedBefore = &ms
		}
		if _, err := p.GetInstanceInfo(ctx, args[0]); err != nil {
			return instanceError(endpoint, args[0], err)
		}
		r, err := p.PruneExecutions(ctx, args[0], opts)
		if err != nil {
			return instanceError(endpoint, args[0], err)
		}
		fmt.Fprintf(out, "pruned %d execution(s), %d event(s)\n", r.ExecutionsDeleted, r.EventsDeleted)
		return nil
	})(ctx, argv, stdout, stderr)
}
