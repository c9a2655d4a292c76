package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// `cdb ui` serves a dashboard of the container the connection flags name:
// the instance list, one instance with its history as a timeline, the
// actions of start, raise, cancel, resume and delete, and a live page of the
// numbers cdb top shows. It reads and acts through the same functions as
// those commands. Its security rules are in ui_security.go and docs/ui.md.

// envUIToken is the environment variable that gives cdb ui its token.
const envUIToken = "CDB_UI_TOKEN"

// uiOptions are cdb ui's flags.
type uiOptions struct {
	addr           string
	readOnly       bool
	token          string
	tlsCert        string
	tlsKey         string
	behindTLSProxy bool
}

const uiDetails = "Safe binding: by default it listens on 127.0.0.1 only, and anyone who can reach that port on this machine can act. " +
	"Bound to any other address it requires a token (from $" + envUIToken + ", or -token, or a new one printed once at start) " +
	"and TLS (-tls-cert and -tls-key), unless -behind-tls-proxy says a proxy terminates TLS in front of it. " +
	"-read-only serves no action at all. The actions (start, raise, cancel, resume a parked instance, delete) are the CLI's commands; " +
	"each is a POST with a CSRF token, behind a page that names the instance. " +
	"With no endpoint set it serves the embedded in-memory Cosmos DB, seeded with cdb demo's orders. See docs/ui.md."

func runUI(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var o uiOptions
	// It runs until interrupted, as top does: it looks and acts, and leaves
	// the application's outbox reconciling to the application.
	conn := watchingConnection()
	fs := newFlagSet("ui", stderr)
	conn.register(fs)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "`host:port` to listen on; any host but a loopback one needs a token and TLS")
	fs.BoolVar(&o.readOnly, "read-only", false, "serve the pages only: no start, raise, cancel, resume or delete")
	fs.StringVar(&o.token, "token", "", "the `token` a browser must present (default $"+envUIToken+"; prefer it: a flag shows in the process list)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this certificate `file` (PEM), with -tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the private key `file` (PEM) of -tls-cert")
	fs.BoolVar(&o.behindTLSProxy, "behind-tls-proxy", false, "serve plain HTTP on a non-loopback address because a proxy in front terminates TLS")
	if err := parseFlags(fs, argv); err != nil {
		return err
	}
	if o.token == "" {
		o.token = os.Getenv(envUIToken)
	}
	printToken, err := o.check()
	if err != nil {
		return err
	}
	p, where, stop, err := uiProvider(ctx, conn, stderr)
	if err != nil {
		return err
	}
	defer stop()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	srv, err := newUIServer(p, p.Client().Endpoint(), o, stderr)
	if err != nil {
		_ = ln.Close()
		return err
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "cdb ui: %s on %s://%s/\n", where, scheme, ln.Addr())
	if printToken {
		// Once, here: a page, a log or an error never shows it.
		fmt.Fprintf(stdout, "token (shown once; set %s to choose it): open %s://%s/login?token=%s\n", envUIToken, scheme, ln.Addr(), o.token)
	}
	return serveUI(ctx, ln, srv.routes(), o)
}

// check refuses an unsafe binding and makes the token a non-loopback
// address needs; printToken says the token is new and must be shown once.
func (o *uiOptions) check() (printToken bool, err error) {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return false, usageError{msg: "-tls-cert and -tls-key go together"}
	}
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return false, usageError{msg: fmt.Sprintf("-addr %q: %v", o.addr, err), cause: err}
	}
	if isLoopbackHost(host) {
		return false, nil
	}
	if o.tlsCert == "" && !o.behindTLSProxy {
		return false, usageError{msg: fmt.Sprintf("-addr %s is reachable from other machines: pass -tls-cert and -tls-key, "+
			"or -behind-tls-proxy when a proxy in front terminates TLS", o.addr)}
	}
	if o.token != "" {
		return false, nil
	}
	o.token, err = newUIToken()
	return err == nil, err
}

// isLoopbackHost reports whether host names this machine only; an empty
// host (":8080") listens on every interface.
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// newUIToken is 32 random bytes in hex: a token or a CSRF token.
func newUIToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// serveUI serves h on ln until ctx ends, over TLS when o names a
// certificate.
func serveUI(ctx context.Context, ln net.Listener, h http.Handler, o uiOptions) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			done <- srv.ServeTLS(ln, o.tlsCert, o.tlsKey)
			return
		}
		done <- srv.Serve(ln)
	}()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(stop)
		return nil
	}
}

// uiProvider is the provider the connection names or, with none set, one
// on the embedded in-memory Cosmos DB where cdb demo's orders run, so that
// a newcomer sees something; stop closes it.
func uiProvider(ctx context.Context, conn *connection, stderr io.Writer) (*cdb.CosmosProvider, string, func(), error) {
	if conn.configured() {
		p, err := conn.open(ctx, stderr)
		if err != nil {
			return nil, "", nil, err
		}
		return p, fmt.Sprintf("%s/%s at %s", p.Container().DatabaseID(), p.Container().ID(), p.Client().Endpoint()), func() { _ = p.Close() }, nil
	}
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 4})
	open := func(leases *cdb.ProcessLeaseOptions) (*cdb.CosmosProvider, error) {
		return cdb.NewProvider(ctx, cdb.Config{Endpoint: acct.Endpoint(), Key: acct.Key(), GaugeInterval: -1, ProcessLeases: leases,
			ClientOptions: cdb.ClientOptions{Transport: acct.Transport()}})
	}
	p, err := open(nil)
	if err != nil {
		return nil, "", nil, err
	}
	// The demo runs as an application would, in a process of its own: its
	// own provider, whose RU is not the UI's, publishing its totals with a
	// process lease, so that the live page has the application's RU/s.
	app, err := open(&cdb.ProcessLeaseOptions{ProcessID: "cdb-demo"})
	if err != nil {
		_ = p.Close()
		return nil, "", nil, err
	}
	demoCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := runDemoWorkload(demoCtx, app); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "cdb ui: the demo's workload: %v\n", err)
		}
	}()
	stop := func() { cancel(); <-done; _ = app.Close(); _ = p.Close() }
	return p, "the embedded in-memory Cosmos DB with cdb demo's orders (set COSMOS_ENDPOINT for an account)", stop, nil
}

// runDemoWorkload runs cdb demo's orders on p, then keeps a runtime with
// the demo's orchestrations running until ctx ends, so that what the UI
// starts or raises on the embedded account runs too.
func runDemoWorkload(ctx context.Context, p *cdb.CosmosProvider) error {
	seed := newDemo(p, demoDefaultsFor(targetInMemory).orders, io.Discard)
	if err := seed.run(ctx, 4); err != nil {
		return err
	}
	reg, err := newDemo(p, 0, io.Discard).registry()
	if err != nil {
		return err
	}
	rt, err := durable.Start(ctx, p, reg, durable.Options{OrchestrationConcurrency: 2, WorkerConcurrency: 2})
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rt.Shutdown(stop)
}
