package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// emulatorOptions are the flags of `cdb emulator`.
type emulatorOptions struct {
	addr       string
	key        string
	aadToken   string // also accepted, as an Entra ID token
	ranges     int
	latency    time.Duration
	staleReads bool
	serverless bool
	tlsCert    string // when set, serve https and write the certificate here
	output     string // emulatorLine or emulatorEnv
}

// What `cdb emulator` prints on stdout: the one line scripts and tests
// parse (endpoint=URL key=KEY), or export lines for a shell to eval.
const (
	emulatorLine = "line"
	emulatorEnv  = "env"
)

func parseEmulatorFlags(args []string, stderr io.Writer) (emulatorOptions, error) {
	var o emulatorOptions
	fs := newFlagSet("emulator", stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	fs.StringVar(&o.key, "key", "", "master key clients must sign with (default: the Cosmos DB emulator's well-known key)")
	fs.StringVar(&o.aadToken, "aad-token", "", "also accept this Entra ID bearer token (for -auth token); "+
		"like a data-plane role it may not create or delete databases and containers (403/5300)")
	fs.IntVar(&o.ranges, "ranges", 1, "partition key ranges per new container")
	fs.DurationVar(&o.latency, "latency", 0, "latency added to every request, e.g. 5ms")
	fs.BoolVar(&o.staleReads, "stale-reads", false, "serve reads without the session token of a document's last write from a lagging replica (Session consistency)")
	fs.BoolVar(&o.serverless, "serverless", false, "act as a serverless account: no offers, no throughput on creates (default: provisioned, 400 RU/s per new container)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve https with a new self-signed certificate for 127.0.0.1 and localhost, written to this PEM file (for COSMOS_CA_FILE)")
	fs.StringVar(&o.output, "o", emulatorLine, "the `format` of stdout: line (endpoint=URL key=KEY) or env (export lines for a shell: "+
		`eval "$(cdb emulator -o env &)"`+` sets COSMOS_ENDPOINT, COSMOS_KEY and with -tls-cert COSMOS_CA_FILE; stdout is closed after them)`)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.output != emulatorLine && o.output != emulatorEnv {
		return o, usageError{msg: fmt.Sprintf("-o must be line or env, got %q", o.output)}
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
// interrupt). Its only stdout is the endpoint and key (printEmulatorAddress),
// so scripts can read it; everything else goes to stderr.
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
	if o.tlsCert != "" {
		cert, err := newSelfSignedCertificate(o.tlsCert)
		if err != nil {
			_ = ln.Close()
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		endpoint = "https://" + ln.Addr().String()
	}
	srv := fakecosmos.New(fakecosmos.Options{
		Key:                o.key,
		AADToken:           o.aadToken,
		PartitionKeyRanges: o.ranges,
		Latency:            o.latency,
		Endpoint:           endpoint + "/",

		StaleReadsWithoutSessionToken: o.staleReads,
		Serverless:                    o.serverless,
	})
	if err := printEmulatorAddress(stdout, o, endpoint, srv.Key()); err != nil {
		_ = ln.Close()
		return err
	}
	return serveUntilDone(ctx, ln, srv)
}

// printEmulatorAddress prints where the emulator serves and its key: the
// line internal/sim, the compatibility tests and scripts parse, or export
// lines for a shell. The key is the emulator's own (by default Microsoft's
// published one), not a secret. After the export lines stdout is closed,
// so that a shell's command substitution ends while the emulator serves
// on in the background.
func printEmulatorAddress(stdout io.Writer, o emulatorOptions, endpoint, key string) error {
	if o.output == emulatorLine {
		_, err := fmt.Fprintf(stdout, "endpoint=%s key=%s\n", endpoint, key)
		return err
	}
	lines := "export " + shellAssignment("COSMOS_ENDPOINT", endpoint) + "\nexport " + shellAssignment("COSMOS_KEY", key) + "\n"
	if o.tlsCert != "" {
		caFile, err := filepath.Abs(o.tlsCert)
		if err != nil {
			return fmt.Errorf("the certificate's path: %w", err)
		}
		lines += "export " + shellAssignment("COSMOS_CA_FILE", caFile) + "\n"
	}
	if _, err := io.WriteString(stdout, lines); err != nil {
		return err
	}
	if f, ok := stdout.(*os.File); ok {
		return f.Close()
	}
	return nil
}

// shellAssignment is name=value for a POSIX shell, the value single-quoted.
func shellAssignment(name, value string) string {
	return name + "='" + strings.ReplaceAll(value, "'", `'\''`) + "'"
}

// newSelfSignedCertificate makes a certificate for the loopback names, as
// the Microsoft emulator has one of its own, and writes it to path (PEM) for
// clients to trust with COSMOS_CA_FILE. The private key stays in memory.
func newSelfSignedCertificate(path string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls certificate: %w", err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "cdb emulator"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // it is its own root, as the file clients trust
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls certificate: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("write the tls certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
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
