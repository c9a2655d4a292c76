// Command cdb is the project's one CLI: an in-memory Cosmos DB for local
// work (emulator), and the commands newcomers and operators run.
//
// Exit codes: 0 success (and help asked for), 1 failure, 2 usage error,
// 3 the instance already exists (cdb start), 130 interrupted (Ctrl-C; 143
// on SIGTERM). The servers (emulator, sim-node)
// exit 0 when interrupted: that is how they are stopped.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// command is one subcommand: its name, its positional arguments, a one-line
// summary, and how to run it with the arguments after its name.
type command struct {
	name    string
	args    string // e.g. "INSTANCE"; empty when it takes none
	summary string
	// details, when set, follow the summary in the command's help.
	details string
	// server commands run until interrupted, which is their clean exit.
	server bool
	run    func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{name: "demo", summary: "run an order-processing workload through the runtime, on the in-memory Cosmos DB or on COSMOS_ENDPOINT", run: runDemo},
		{name: "emulator", summary: "serve the in-memory Cosmos DB on loopback", server: true, run: runEmulator},
		{name: "instances", summary: "list instances newest first, a page at a time, by status, name and age", run: runInstances,
			details: "The store filters by status, age and name and reads a page as one query per partition key range.\n" +
				"A -name pattern other than a name or a prefix ending in * is matched by its literal prefix there\n" +
				"and whole here, so its page may come back short of -limit. The page's last line (json: next)\n" +
				"names the -after of the next page."},
		{name: "show", args: "INSTANCE", summary: "show an instance: info, executions, history timeline, custom status, KV", run: runShow},
		{name: "start", args: "NAME", summary: "start an orchestration: enqueue its start for the application's runtime and print the instance id", run: runStart,
			details: "The store decides whether the id is taken, in the request that enqueues the start: an instance\n" +
				"takes it, and so does a start still queued (reported as Queued); a taken id exits with code 3.\n" +
				"The input must be JSON (or empty): one that is not is refused with exit code 2 before anything\n" +
				"is sent; -raw sends any text as is."},
		{name: "raise", args: "INSTANCE EVENT [DATA]", summary: "raise an external event on an instance (-queue: put it on the instance's persistent queue)", run: runRaise,
			details: "DATA must be JSON (or left out): DATA that is not is refused with exit code 2 before anything is\n" +
				"sent; -raw sends any text as is. Quote it for the shell: cdb raise ORDER-1 approval '{\"by\":\"ann\"}'."},
		{name: "cancel", args: "INSTANCE", summary: "request an instance's cancellation (it fails with \"canceled: REASON\", its children too)", run: runCancel,
			details: "By default the instance ends in the turn that receives the request: no more of its code runs.\n" +
				"An orchestration whose code calls HandleCancellation first runs its compensation, for at most\n" +
				"the grace it names, then ends the same way. A start still queued (Queued) takes it too."},
		{name: "resume", args: "INSTANCE", summary: "retry a parked instance's turn now, not at its park's retry time (after deploying the fix)", run: runResume,
			details: resumeDetails},
		{name: "metrics", summary: "instance counts, the queues (due now, and not yet due), the outbox and held messages", run: runMetrics},
		{name: "top", summary: "a live view of the queues, outbox, held messages, completions/s and processes", run: runTop,
			details: "Every -interval it reads cdb.CosmosProvider.SampleQueues (6 COUNT queries per partition key range)\n" +
				"and the process lease membership (1 read). Rates are over the last interval (\"-\" on the first\n" +
				"sample). RU/s and 429/s of the application's processes are summed from the totals each process\n" +
				"publishes in its process lease renewals (n/a when none uses Config.ProcessLeases); the view row\n" +
				"is top's own cost. On a terminal it redraws in place; otherwise it prints a block per sample,\n" +
				"and with -o json one object per line."},
		{name: "delete", args: "INSTANCE", summary: "delete a root instance and its sub-orchestrations (-force if running)", run: runDelete},
		{name: "prune", args: "INSTANCE", summary: "delete an instance's old executions", run: runPrune},
		{name: "bench", summary: "run duroxide's stress protocol (in memory, or on COSMOS_ENDPOINT in a container of its own) and print a table", run: runBench},
		{name: "doctor", summary: "check COSMOS_ENDPOINT (or the emulator) and your container (COSMOS_CONTAINER, read only) for the provider, step by step; what must write runs in a throw-away container", run: runDoctor},
		{name: "ui", summary: "serve a dashboard in a browser: instances, one instance's timeline, actions, live charts (127.0.0.1 by default)", server: true, run: runUI,
			details: uiDetails},
		{name: "version", summary: "print the module's and the provider's versions", run: runVersion},
	}
}

// versionCommand is the version command, which --version runs too.
func versionCommand() command {
	c, _ := findCommand("version")
	return c
}

// findCommand looks a command up by name, hidden ones included.
func findCommand(name string) (command, bool) {
	for _, c := range append(commands(), hiddenCommands()...) {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	ctx, stop := interruptible(context.Background())
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// interrupted is the cause of a context cancelled by a signal.
type interrupted struct{ signal syscall.Signal }

func (i interrupted) Error() string { return "interrupted (" + i.signal.String() + ")" }

// exitCode is the shell's convention for a process ended by a signal.
func (i interrupted) exitCode() int { return 128 + int(i.signal) }

// interruptible cancels ctx on the first SIGINT or SIGTERM, with the signal
// as its cause; a second one kills the process the default way, for a
// command slow to stop.
func interruptible(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-signals:
			signal.Stop(signals)
			sig, _ := s.(syscall.Signal)
			cancel(interrupted{signal: sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(signals); cancel(nil) }
}

// run dispatches to a subcommand and turns its outcome into an exit code:
// 0 on success or help asked for, 1 on failure, 2 on a usage error, 128+n
// when signal n interrupted it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	case "-version", "--version":
		// The spelling other tools accept, so a script that asks every
		// binary for its version works here too.
		return report(ctx, versionCommand(), runVersion(ctx, args[1:], stdout, stderr), stdout, stderr)
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "cdb: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return report(ctx, c, c.run(ctx, args[1:], stdout, stderr), stdout, stderr)
}

// report prints a command's outcome where it belongs and returns the exit
// code.
func report(ctx context.Context, c command, err error, stdout, stderr io.Writer) int {
	var help helpRequest
	var usageErr usageError
	var exists instanceExists
	var intr interrupted
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, wrapText(help.text, helpWidth(stdout)))
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "cdb %s: %s\n", c.name, usageErr.msg)
		fmt.Fprintln(stderr, usageLine(c))
		fmt.Fprintf(stderr, "Run 'cdb help %s' for details.\n", c.name)
		return 2
	case errors.As(err, &exists):
		fmt.Fprintf(stderr, "cdb %s: %v\n", c.name, exists)
		return exitInstanceExists
	case !c.server && errors.As(context.Cause(ctx), &intr):
		fmt.Fprintf(stderr, "cdb %s: %v\n", c.name, intr)
		return intr.exitCode()
	default:
		fmt.Fprintf(stderr, "cdb %s: %v\n", c.name, err)
		return 1
	}
}

// runHelp is `cdb help [command]`: the overview, or a command's help.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	c, ok := findCommand(args[0])
	if !ok || len(args) > 1 {
		fmt.Fprintf(stderr, "cdb help: unknown command %q\n\n", strings.Join(args, " "))
		usage(stderr)
		return 2
	}
	// Every command parses its flags before doing anything, so -h prints
	// its help and does nothing else.
	return report(ctx, c, c.run(ctx, []string{"-h"}, stdout, stderr), stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cdb <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		printWrapped(w, fmt.Sprintf("  %-10s %s", c.name, c.summary), helpWidth(w), 13)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'cdb help <command>' (or 'cdb <command> -h') for a command's flags;")
	fmt.Fprintln(w, "'cdb --version' is 'cdb version'.")
	fmt.Fprintln(w, "Commands reach COSMOS_ENDPOINT with COSMOS_KEY, or with Entra ID: -auth azcli")
	fmt.Fprintln(w, "(az login) or -auth token (COSMOS_ACCESS_TOKEN); COSMOS_AUTH sets -auth.")
	fmt.Fprintln(w, "Exit codes: 0 done, 1 failed, 2 usage error, 3 the instance already exists")
	fmt.Fprintln(w, "(cdb start), 130 interrupted.")
}

// usageLine is a command's synopsis, e.g. "usage: cdb show [flags] INSTANCE".
func usageLine(c command) string {
	line := "usage: cdb " + c.name + " [flags]"
	if c.args != "" {
		line += " " + c.args
	}
	return line
}

// positiveInt is an int flag that must be at least 1.
type positiveInt int

func (n *positiveInt) String() string { return strconv.Itoa(int(*n)) }

func (n *positiveInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a number")
	}
	if v < 1 {
		return fmt.Errorf("must be at least 1, got %d", v)
	}
	*n = positiveInt(v)
	return nil
}

// exitInstanceExists is the exit code of a start refused because the
// instance id is taken: a script can tell it from any other failure.
const exitInstanceExists = 3

// instanceExists is the refusal to start an instance whose id is taken.
type instanceExists struct {
	id     string
	status string
}

func (e instanceExists) Error() string {
	return takenBy(e.id, e.status) + ": nothing started; pass another -id, or -if-exists ignore to accept the existing one"
}

// usageError marks a mistake in the command line rather than a failure;
// cause is the error that found it, if one did.
type usageError struct {
	msg   string
	cause error
}

func (e usageError) Error() string { return e.msg }
func (e usageError) Unwrap() error { return e.cause }

// helpRequest carries a command's help, asked for with -h: not a failure,
// and printed to stdout.
type helpRequest struct{ text string }

func (h helpRequest) Error() string { return "help requested" }

// newFlagSet builds a flag set that neither prints nor exits: parseArgs
// turns its outcome into a help request or a usage error, and run decides
// where they go (so the writer is not used). No flag's default comes from
// the environment, so no help text can show a secret.
func newFlagSet(name string, _ io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cdb "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseArgs parses flags anywhere among the positional arguments (`cdb
// show ORDER-1 -o json`); after "--" everything is an argument.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpRequest{text: helpText(fs)}
			}
			return nil, usageError{msg: err.Error(), cause: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseExactly(fs, args, 0)
}

// parseExactly parses args and wants exactly n positional arguments, which
// are left in fs.Args().
func parseExactly(fs *flag.FlagSet, args []string, n int) error {
	return parseBetween(fs, args, n, n)
}

// parseBetween parses args and wants least to most positional arguments,
// which are left in fs.Args().
func parseBetween(fs *flag.FlagSet, args []string, least, most int) error {
	positional, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(positional) > most && most == 0:
		return usageError{msg: fmt.Sprintf("unexpected argument %q", positional[0])}
	case least == most && len(positional) != least:
		return usageError{msg: fmt.Sprintf("want %d argument(s), got %d", least, len(positional))}
	case len(positional) < least || len(positional) > most:
		return usageError{msg: fmt.Sprintf("want %d to %d arguments, got %d", least, most, len(positional))}
	}
	// Leave the arguments where callers look for them.
	_ = fs.Parse(append([]string{"--"}, positional...))
	return nil
}

// expandTabs replaces the tabs of PrintDefaults with spaces to the next
// multiple of 8 columns, as a terminal shows them, so that wrapText
// continues a flag's usage at its indentation.
func expandTabs(text string) string {
	var b strings.Builder
	column := 0
	for _, r := range text {
		switch r {
		case '\t':
			n := 8 - column%8
			b.WriteString(strings.Repeat(" ", n))
			column += n
		case '\n':
			b.WriteRune(r)
			column = 0
		default:
			b.WriteRune(r)
			column++
		}
	}
	return b.String()
}

// helpText is a command's help: synopsis, summary, flags. It has the same
// shape for every command.
func helpText(fs *flag.FlagSet) string {
	name := strings.TrimPrefix(fs.Name(), "cdb ")
	c, _ := findCommand(name)
	c.name = name
	var b bytes.Buffer
	fmt.Fprintln(&b, usageLine(c))
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, c.summary)
	if c.details != "" {
		// One paragraph, wrapped where it is printed (report).
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, strings.ReplaceAll(c.details, "\n", " "))
	}
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "flags:")
		var flags bytes.Buffer
		fs.SetOutput(&flags)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		b.WriteString(expandTabs(flags.String()))
	}
	return b.String()
}
