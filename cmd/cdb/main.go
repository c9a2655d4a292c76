// Command cdb is the project's one CLI: an in-memory Cosmos DB for local
// work (emulator), and the commands newcomers and operators run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/joho/godotenv"
)

// command is one subcommand: its name, a one-line summary, and how to run it
// with the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{name: "demo", summary: "walk through the storage layer on the in-memory Cosmos DB, or on COSMOS_ENDPOINT", run: runDemo},
		{name: "emulator", summary: "serve the in-memory Cosmos DB on loopback", run: runEmulator},
		{name: "instances", summary: "list instances (-status to filter)", run: runInstances},
		{name: "show", summary: "show an instance: info, executions, history timeline, custom status, KV", run: runShow},
		{name: "metrics", summary: "system metrics and queue depths", run: runMetrics},
		{name: "delete", summary: "delete a root instance and its sub-orchestrations (-force if running)", run: runDelete},
		{name: "prune", summary: "delete an instance's old executions", run: runPrune},
		{name: "bench", summary: "run duroxide's stress protocol and print a table", run: runBench},
	}
}

func main() {
	if err := loadDotEnv(".env"); err != nil {
		fmt.Fprintf(os.Stderr, "cdb: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and turns its error into an exit code:
// 2 for usage errors, 1 for failures.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range append(commands(), hiddenCommands()...) {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "cdb %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "cdb %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "cdb: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cdb <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'cdb <command> -h' for a command's flags.")
}

// loadDotEnv reads COSMOS_* settings from a .env file when there is one;
// variables already set in the environment win.
func loadDotEnv(path string) error {
	err := godotenv.Load(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("read %s: %w", path, err)
}

// usageError marks a mistake in the command line rather than a failure.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// newFlagSet builds a flag set that reports errors instead of exiting, so
// run decides the exit code.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cdb "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and refuses stray positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}
