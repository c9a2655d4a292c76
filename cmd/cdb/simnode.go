package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/sim"
)

// hiddenCommands run like the others but are left out of the usage: they
// serve the project's own tooling.
func hiddenCommands() []command {
	return []command{
		{name: "sim-node", summary: "a worker process of the simulation (make soak)", run: runSimNode},
		{name: "bench-process", summary: "one process of `cdb bench -processes`", run: runBenchProcess},
	}
}

// runSimNode is the hidden `cdb sim-node`: one worker process of the
// simulation's two-process scenario (internal/sim, `make soak`). It runs the
// simulation's orchestrations and activities against -endpoint until it is
// stopped (SIGTERM: graceful) or killed (SIGKILL: the point of the
// scenario). The key comes from COSMOS_KEY, never from the command line.
func runSimNode(ctx context.Context, args []string, _, stderr io.Writer) error {
	var o sim.NodeOptions
	fs := newFlagSet("sim-node", stderr)
	fs.StringVar(&o.Endpoint, "endpoint", "", "the account's endpoint, e.g. what cdb emulator printed")
	fs.StringVar(&o.ID, "id", "", "this node's id in the records")
	fs.StringVar(&o.RecordPath, "record", "", "file the node appends its activity and ack records to")
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the node's random settings")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.Endpoint == "" || o.ID == "" || o.RecordPath == "" {
		return usageError{msg: "-endpoint, -id and -record are required"}
	}
	o.Key = os.Getenv(cdb.EnvKey)
	if o.Key == "" {
		return usageError{msg: cdb.EnvKey + " must hold the account key"}
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return sim.RunNode(ctx, o)
}
