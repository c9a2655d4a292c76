package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// emulatorOptions are the flags of `cdb emulator`.
type emulatorOptions struct {
	addr       string
	key        string
	ranges     int
	latency    time.Duration
	staleReads bool
}

func parseEmulatorFlags(args []string, stderr io.Writer) (emulatorOptions, error) {
	var o emulatorOptions
	fs := newFlagSet("emulator", stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	fs.StringVar(&o.key, "key", "", "master key clients must sign with (default: the Cosmos DB emulator's well-known key)")
	fs.IntVar(&o.ranges, "ranges", 1, "partition key ranges per new container")
	fs.DurationVar(&o.latency, "latency", 0, "latency added to every request, e.g. 5ms")
	fs.BoolVar(&o.staleReads, "stale-reads", false, "serve reads without the session token of a document's last write from a lagging replica (Session consistency)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.ranges < 1 {
		return o, usageError{msg: fmt.Sprintf("-ranges must be at least 1, got %d", o.ranges)}
	}
	if o.key != "" {
		if decoded, err := base64.StdEncoding.DecodeString(o.key); err != nil || len(decoded) == 0 {
			return o, usageError{msg: "-key must be a non-empty base64 string (a Cosmos DB master key)"}
		}
	}
	if o.latency < 0 {
		return o, usageError{msg: fmt.Sprintf("-latency must not be negative, got %s", o.latency)}
	}
	return o, nil
}

// runEmulator serves the in-memory Cosmos DB until ctx is cancelled (an
// interrupt). Its only stdout line is the endpoint and key, so scripts can
// read it; everything else goes to stderr.
func runEmulator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseEmulatorFlags(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	endpoint := "http://" + ln.Addr().String()
	srv := fakecosmos.New(fakecosmos.Options{
		Key:                o.key,
		PartitionKeyRanges: o.ranges,
		Latency:            o.latency,
		Endpoint:           endpoint + "/",

		StaleReadsWithoutSessionToken: o.staleReads,
	})
	fmt.Fprintf(stdout, "endpoint=%s key=%s\n", endpoint, srv.Key())
	return serveUntilDone(ctx, ln, srv)
}

// serveUntilDone serves h on ln and shuts down gracefully when ctx ends.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
