package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/duroxide-go/cdb"
)

// The operator commands look at and tidy a provider's container on any
// endpoint: the account in COSMOS_*, or one given by flags (for example a
// `cdb emulator`).

// connection is the endpoint flags shared by the operator commands.
type connection struct {
	endpoint, key, database, container string
	insecure                           bool
}

func (c *connection) register(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoint, "endpoint", os.Getenv(cdb.EnvEndpoint), "Cosmos DB endpoint (default $COSMOS_ENDPOINT)")
	fs.StringVar(&c.key, "key", os.Getenv(cdb.EnvKey), "master key (default $COSMOS_KEY)")
	fs.StringVar(&c.database, "database", envOr(cdb.EnvDatabase, "duroxide"), "database (default $COSMOS_DATABASE or duroxide)")
	fs.StringVar(&c.container, "container", envOr(cdb.EnvContainer, "duroxide"), "container (default $COSMOS_CONTAINER or duroxide)")
	fs.BoolVar(&c.insecure, "insecure-skip-verify", os.Getenv(cdb.EnvSkipTLS) == "true", "accept the local emulator's self-signed certificate")
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// open connects to the container without creating anything, and turns the
// usual mistakes into errors that say what to fix.
func (c *connection) open(ctx context.Context) (*cdb.CosmosProvider, error) {
	if c.endpoint == "" {
		return nil, usageError{msg: "no endpoint: set COSMOS_ENDPOINT or pass -endpoint"}
	}
	if c.key == "" {
		return nil, usageError{msg: "no key: set COSMOS_KEY or pass -key"}
	}
	opts := cdb.ClientOptions{Key: c.key}
	opts.TLS.InsecureSkipVerify = c.insecure
	opts.TLS.CAFile = os.Getenv(cdb.EnvCAFile) // e.g. an emulator's exported certificate
	client, err := cdb.NewClient(c.endpoint, opts)
	if err != nil {
		return nil, err
	}
	container, err := client.NewContainer(c.database, c.container)
	if err != nil {
		return nil, err
	}
	probe, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := container.Read(probe); err != nil {
		return nil, c.explain(err)
	}
	return cdb.NewProvider(ctx, cdb.Config{Client: client, Database: c.database, Container: c.container, SkipBootstrap: true, ShortPolling: true})
}

// explain names the likely cause of a failed first request.
func (c *connection) explain(err error) error {
	var ce *cdb.CosmosError
	switch {
	case errors.As(err, &ce) && ce.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s refused the key (401): check COSMOS_KEY or -key", c.endpoint)
	case errors.As(err, &ce) && ce.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s refused the request (403): the key's permissions, a firewall, or this machine's clock", c.endpoint)
	case errors.As(err, &ce) && ce.StatusCode == http.StatusNotFound:
		return fmt.Errorf("container %q in database %q not found at %s: check -database/-container (COSMOS_DATABASE/COSMOS_CONTAINER)", c.container, c.database, c.endpoint)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach %s within 30s: check the endpoint and the network", c.endpoint)
	default:
		return fmt.Errorf("cannot reach %s: %w", c.endpoint, err)
	}
}

// operatorCommand wires a command that needs a provider and its arguments.
func operatorCommand(name string, flags func(*flag.FlagSet), args int, argsUsage string,
	run func(ctx context.Context, p *cdb.CosmosProvider, args []string, out io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
		fs := newFlagSet(name, stderr)
		var conn connection
		conn.register(fs)
		if flags != nil {
			flags(fs)
		}
		fs.Usage = func() {
			fmt.Fprintf(stderr, "usage: cdb %s [flags] %s\n", name, argsUsage)
			fs.PrintDefaults()
		}
		if err := fs.Parse(argv); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{msg: err.Error()}
		}
		if fs.NArg() != args {
			return usageError{msg: fmt.Sprintf("want %d argument(s): %s", args, argsUsage)}
		}
		p, err := conn.open(ctx)
		if err != nil {
			return err
		}
		defer p.Close()
		return run(ctx, p, fs.Args(), stdout)
	}
}

func runInstances(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var status string
	var limit int
	return operatorCommand("instances", func(fs *flag.FlagSet) {
		fs.StringVar(&status, "status", "", "only instances whose current execution has this status (Running, Completed, Failed, ContinuedAsNew)")
		fs.IntVar(&limit, "limit", 100, "at most this many instances")
	}, 0, "", func(ctx context.Context, p *cdb.CosmosProvider, _ []string, out io.Writer) error {
		var ids []string
		var err error
		if status != "" {
			ids, err = p.ListInstancesByStatus(ctx, status)
		} else {
			ids, err = p.ListInstances(ctx)
		}
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tSTATUS\tORCHESTRATION\tEXECUTION\tCREATED")
		for i, id := range ids {
			if i == limit {
				break
			}
			info, err := p.GetInstanceInfo(ctx, id)
			if err != nil {
				continue // deleted meanwhile
			}
			fmt.Fprintf(tw, "%s\t%s\t%s@%s\t%d\t%s\n", id, info.Status, info.OrchestrationName, info.OrchestrationVersion,
				info.CurrentExecutionID, formatMs(info.CreatedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(ids) > limit {
			fmt.Fprintf(out, "(%d more; raise -limit)\n", len(ids)-limit)
		}
		if len(ids) == 0 {
			fmt.Fprintln(out, "(no instances)")
		}
		return nil
	})(ctx, argv, stdout, stderr)
}

func formatMs(ms uint64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(int64(ms)).UTC().Format(time.RFC3339)
}

func runShow(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	return operatorCommand("show", nil, 1, "INSTANCE", func(ctx context.Context, p *cdb.CosmosProvider, args []string, out io.Writer) error {
		return showInstance(ctx, p, args[0], out)
	})(ctx, argv, stdout, stderr)
}

// showInstance prints an instance's info, executions, current history as a
// timeline, custom status and KV.
func showInstance(ctx context.Context, p cdb.Provider, id string, out io.Writer) error {
	admin, _ := p.Admin()
	info, err := admin.GetInstanceInfo(ctx, id)
	if err != nil {
		return fmt.Errorf("instance %q not found", id)
	}
	fmt.Fprintf(out, "instance   %s\n", info.InstanceID)
	fmt.Fprintf(out, "orchestration %s@%s\n", info.OrchestrationName, info.OrchestrationVersion)
	fmt.Fprintf(out, "status     %s", info.Status)
	if info.Output != nil {
		fmt.Fprintf(out, "  output %s", truncate(*info.Output, 200))
	}
	fmt.Fprintln(out)
	if info.ParentInstanceID != nil {
		fmt.Fprintf(out, "parent     %s\n", *info.ParentInstanceID)
	}
	fmt.Fprintf(out, "created    %s  updated %s\n", formatMs(info.CreatedAt), formatMs(info.UpdatedAt))
	if status, _, ok, err := p.GetCustomStatus(ctx, id, 0); err == nil && ok && status != nil {
		fmt.Fprintf(out, "custom     %s\n", truncate(*status, 200))
	}
	if err := showExecutions(ctx, admin, id, out); err != nil {
		return err
	}
	history, err := p.Read(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nhistory of execution %d (%d events)\n", info.CurrentExecutionID, len(history))
	printTimeline(out, history)
	kv, err := p.GetKVAllValues(ctx, id)
	if err != nil {
		return err
	}
	if len(kv) > 0 {
		fmt.Fprintf(out, "\nkv (%d keys)\n", len(kv))
		for _, k := range sortedKeys(kv) {
			fmt.Fprintf(out, "  %s = %s\n", k, truncate(kv[k], 120))
		}
	}
	return nil
}

func showExecutions(ctx context.Context, admin cdb.ProviderAdmin, id string, out io.Writer) error {
	execs, err := admin.ListExecutions(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nexecutions (%d)\n", len(execs))
	for _, e := range execs {
		ei, err := admin.GetExecutionInfo(ctx, id, e)
		if err != nil {
			continue
		}
		completed := "-"
		if ei.CompletedAt != nil {
			completed = formatMs(*ei.CompletedAt)
		}
		fmt.Fprintf(out, "  #%d %-15s events %-4d started %s completed %s\n", e, ei.Status, ei.EventCount, formatMs(ei.StartedAt), completed)
	}
	return nil
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func runMetrics(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	return operatorCommand("metrics", nil, 0, "", func(ctx context.Context, p *cdb.CosmosProvider, _ []string, out io.Writer) error {
		m, err := p.GetSystemMetrics(ctx)
		if err != nil {
			return err
		}
		d, err := p.GetQueueDepths(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "instances   %d (running %d, completed %d, failed %d)\n", m.TotalInstances, m.RunningInstances, m.CompletedInstances, m.FailedInstances)
		fmt.Fprintf(out, "executions  %d\n", m.TotalExecutions)
		fmt.Fprintf(out, "events      %d\n", m.TotalEvents)
		fmt.Fprintf(out, "queues      orchestrator %d, worker %d (unlocked items)\n", d.OrchestratorQueue, d.WorkerQueue)
		return nil
	})(ctx, argv, stdout, stderr)
}

func runDelete(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var force bool
	return operatorCommand("delete", func(fs *flag.FlagSet) {
		fs.BoolVar(&force, "force", false, "delete even if the instance is still running")
	}, 1, "INSTANCE", func(ctx context.Context, p *cdb.CosmosProvider, args []string, out io.Writer) error {
		if _, err := p.GetInstanceInfo(ctx, args[0]); err != nil {
			return fmt.Errorf("instance %q not found", args[0])
		}
		r, err := p.DeleteInstance(ctx, args[0], force)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deleted %d instance(s), %d execution(s), %d event(s), %d queued message(s)\n",
			r.InstancesDeleted, r.ExecutionsDeleted, r.EventsDeleted, r.QueueMessagesDeleted)
		return nil
	})(ctx, argv, stdout, stderr)
}

func runPrune(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var keepLast uint
	var before string
	return operatorCommand("prune", func(fs *flag.FlagSet) {
		fs.UintVar(&keepLast, "keep-last", 1, "keep this many newest executions (the current one always stays)")
		fs.StringVar(&before, "completed-before", "", "only executions completed before this time (RFC 3339)")
	}, 1, "INSTANCE", func(ctx context.Context, p *cdb.CosmosProvider, args []string, out io.Writer) error {
		opts := cdb.PruneOptions{}
		k := uint32(keepLast)
		opts.KeepLast = &k
		if before != "" {
			t, err := time.Parse(time.RFC3339, before)
			if err != nil {
				return usageError{msg: fmt.Sprintf("-completed-before: %v", err)}
			}
			ms := uint64(t.UnixMilli())
			opts.CompletedBefore = &ms
		}
		if _, err := p.GetInstanceInfo(ctx, args[0]); err != nil {
			return fmt.Errorf("instance %q not found", args[0])
		}
		r, err := p.PruneExecutions(ctx, args[0], opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pruned %d execution(s), %d event(s)\n", r.ExecutionsDeleted, r.EventsDeleted)
		return nil
	})(ctx, argv, stdout, stderr)
}
