package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// connection is the endpoint flags shared by the operator commands and
// bench. Flags win over the environment (COSMOS_*, and .env through
// cdb.ConfigFromEnv). No flag's default is read from the environment: a
// default shows in help and usage text, and the key must not.
type connection struct {
	endpoint, key, database, container string
	// auth is how to sign (credential.go): key, azcli or token.
	auth     string
	insecure bool
	// connectTimeout bounds the wait for the endpoint's first answer
	// (awaitFirstAnswer).
	connectTimeout time.Duration
	// containerFromEnv says whether COSMOS_CONTAINER may name the
	// container: not for bench, which must not write into the
	// application's container.
	containerFromEnv bool
	defaultContainer string
	// noContainer leaves out -container: doctor makes a container of its
	// own.
	noContainer bool
	// watchOnly keeps the provider from reconciling outboxes: a command
	// that runs until interrupted (top) looks, and must neither do the
	// application's work nor count its requests as its own.
	watchOnly bool
}

func (c *connection) register(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoint, "endpoint", "", "Cosmos DB endpoint (default $"+cdb.EnvEndpoint+")")
	fs.StringVar(&c.key, "key", "", "master key (default $"+cdb.EnvKey+"; prefer it: a flag shows in the process list)")
	fs.StringVar(&c.auth, "auth", "", authHelp)
	fs.StringVar(&c.database, "database", "", "database (default $"+cdb.EnvDatabase+" or duroxide)")
	if !c.noContainer {
		containerHelp := "container (default $" + cdb.EnvContainer + " or duroxide)"
		if !c.containerFromEnv {
			containerHelp = "container (default " + c.defaultContainer + ")"
		}
		fs.StringVar(&c.container, "container", "", containerHelp)
	}
	fs.DurationVar(&c.connectTimeout, "connect-timeout", defaultConnectTimeout,
		"how long to wait for the endpoint's first answer; a line on stderr says when it is slow")
	fs.BoolVar(&c.insecure, "insecure-skip-verify", false, "accept the local emulator's self-signed certificate (default $"+cdb.EnvSkipTLS+")")
}

// operatorConnection is the connection of the commands that look at the
// application's container.
func operatorConnection() *connection {
	return &connection{containerFromEnv: true, defaultContainer: "duroxide"}
}

// watchingConnection is the connection of a command that watches the
// application's container for as long as it runs.
func watchingConnection() *connection {
	c := operatorConnection()
	c.watchOnly = true
	return c
}

// demoTarget is where the demo runs, which decides its size and pace.
type demoTarget int

const (
	targetInMemory demoTarget = iota // no COSMOS_ENDPOINT: the embedded in-memory Cosmos DB
	targetLocal                      // an emulator on loopback (cdb emulator, Microsoft's): no RU/s to pay for
	targetAccount                    // any other endpoint: an account with provisioned RU/s
)

// demoTargetFromEnv says where the environment (or .env) points the demo;
// a .env that cannot be read is an error, not "no account".
func demoTargetFromEnv() (demoTarget, error) {
	cfg, err := cdb.ConfigFromEnv()
	switch {
	case errors.Is(err, cdb.ErrEndpointNotSet):
		return targetInMemory, nil
	case err != nil:
		return targetInMemory, err
	case isLoopbackEndpoint(cfg.Endpoint):
		return targetLocal, nil
	}
	return targetAccount, nil
}

// isLoopbackEndpoint reports whether endpoint's host is this machine.
func isLoopbackEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback())
}

// configured reports whether an endpoint is given, by flag or environment.
func (c *connection) configured() bool {
	if c.endpoint != "" {
		return true
	}
	_, err := cdb.ConfigFromEnv()
	return err == nil
}

// config is the provider configuration: the flags over the environment.
func (c *connection) config() (cdb.Config, error) {
	cfg, err := cdb.ConfigFromEnv()
	if err != nil && !errors.Is(err, cdb.ErrEndpointNotSet) {
		return cdb.Config{}, err // e.g. a .env that cannot be read
	}
	if err != nil && c.endpoint == "" {
		return cdb.Config{}, usageError{msg: "no endpoint: set " + cdb.EnvEndpoint + " or pass -endpoint"}
	}
	if c.endpoint != "" {
		cfg.Endpoint = c.endpoint
	}
	if c.key != "" {
		cfg.Key = c.key
	}
	lookup, err := dotEnvLookup()
	if err != nil {
		return cdb.Config{}, err
	}
	if err := applyAuth(&cfg, firstOf(c.auth, lookup(envAuth), authKey), lookup); err != nil {
		return cdb.Config{}, err
	}
	cfg.Database = firstOf(c.database, cfg.Database, "duroxide")
	if !c.containerFromEnv {
		cfg.Container = ""
	}
	cfg.Container = firstOf(c.container, cfg.Container, c.defaultContainer)
	if c.insecure {
		cfg.ClientOptions.TLS.InsecureSkipVerify = true
	}
	return cfg, nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// client builds the client of cfg.
func client(cfg cdb.Config) (*cdb.Client, error) {
	opts := cfg.ClientOptions
	opts.Key = cfg.Key
	c, err := cdb.NewClient(cfg.Endpoint, opts)
	switch {
	case endpointRefused(err):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("client for %s: %w", cfg.Endpoint, err)
	}
	return c, nil
}

// endpointRefused reports NewClient refusing the endpoint itself. Its
// error names the endpoint only where that is safe, so the caller must not
// add it: it may carry user information. Any other refusal comes after the
// endpoint passed, so naming it then is safe.
func endpointRefused(err error) bool {
	var ve *cdb.ValidationError
	return errors.As(err, &ve) && ve.Operation == "NewClient" && ve.Field == "endpoint"
}

// open connects to the container without creating anything, and turns the
// usual mistakes into errors that say what to fix. A slow first answer is
// noted on stderr.
func (c *connection) open(ctx context.Context, stderr io.Writer) (*cdb.CosmosProvider, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	cl, err := client(cfg)
	if err != nil {
		return nil, err
	}
	err = c.awaitFirstAnswer(ctx, stderr, cl.Endpoint(), func(probe context.Context) error {
		if err := checkCosmosEndpoint(probe, cl); err != nil {
			return err
		}
		container, err := cl.NewContainer(cfg.Database, cfg.Container)
		if err != nil {
			return err
		}
		if _, err := container.Read(probe); err != nil {
			return explainMissing(probe, cl, cfg, err)
		}
		return nil
	})
	if err != nil {
		return nil, signedWith(cfg, err)
	}
	cfg.Client, cfg.SkipBootstrap, cfg.ShortPolling = cl, true, true
	if c.watchOnly {
		cfg.ReconcileInterval = neverReconcile
	}
	return cdb.NewProvider(ctx, cfg)
}

// neverReconcile is a reconcile interval no command outlives: the
// provider has no setting that turns its outbox reconciler off.
const neverReconcile = time.Duration(math.MaxInt64)

// checkCosmosEndpoint reads the account: a Cosmos DB endpoint answers with
// its regions, and its errors carry an activity id. Anything else is some
// other web server, which would otherwise look like a missing container.
func checkCosmosEndpoint(ctx context.Context, cl *cdb.Client) error {
	account, err := cl.ReadAccount(ctx)
	if problem := credentialProblem(err); problem != nil {
		return problem // no token: nothing was sent
	}
	var ce *cdb.CosmosError
	switch {
	case errors.As(err, &ce) && ce.StatusCode != 0 && ce.ActivityID == "":
		return fmt.Errorf("%s is not a Cosmos DB endpoint: it answered %d %s without Cosmos DB's headers",
			cl.Endpoint(), ce.StatusCode, http.StatusText(ce.StatusCode))
	case err != nil && ce == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return fmt.Errorf("%s is not a Cosmos DB endpoint: %w", cl.Endpoint(), err)
	case err != nil:
		return describe(cl.Endpoint(), err)
	case len(account.WritableLocations) == 0 && len(account.ReadableLocations) == 0:
		return fmt.Errorf("%s is not a Cosmos DB endpoint: it does not describe a database account", cl.Endpoint())
	}
	return nil
}

// explainMissing names what is missing, the database or the container,
// when reading the container failed.
func explainMissing(ctx context.Context, cl *cdb.Client, cfg cdb.Config, err error) error {
	if !cdb.IsNotFound(err) {
		return describe(cfg.Endpoint, err)
	}
	if _, dbErr := cl.ReadDatabase(ctx, cfg.Database); cdb.IsNotFound(dbErr) {
		return fmt.Errorf("database %q not found at %s: check -database (%s)", cfg.Database, cfg.Endpoint, cdb.EnvDatabase)
	}
	return fmt.Errorf("container %q not found in database %q at %s: check -container (%s)", cfg.Container, cfg.Database, cfg.Endpoint, cdb.EnvContainer)
}

// describe says what a failed request means for the user, keeping the
// cause. It never says "not found": only the caller knows what was looked
// for.
func describe(endpoint string, err error) error {
	var ce *cdb.CosmosError
	isCosmos := errors.As(err, &ce)
	switch {
	case isCosmos && ce.StatusCode == http.StatusUnauthorized:
		return refusedKey{endpoint: endpoint, err: err}
	case lacksDataPlaneRole(err):
		return fmt.Errorf("%s refused the request (403): the Entra ID identity has no data-plane role that allows it; %s: %w", endpoint, assignDataPlaneRole, err)
	case isCosmos && ce.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s refused the request (403): the key's permissions, a firewall, or this machine's clock: %w", endpoint, err)
	case isCosmos && ce.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("throttled (429) by %s: the container's throughput (RU/s) is used up; try again later or raise it: %w", endpoint, err)
	case isCosmos && ce.StatusCode >= 500:
		return fmt.Errorf("%s failed (%d %s); try again later: %w", endpoint, ce.StatusCode, http.StatusText(ce.StatusCode), err)
	case isUntrustedCertificate(err):
		return fmt.Errorf("%s's TLS certificate is not trusted: for the local emulator pass -insecure-skip-verify (%s=true): %w", endpoint, cdb.EnvSkipTLS, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach %s in time: check the endpoint and the network: %w", endpoint, err)
	case isCosmos && ce.StatusCode == 0:
		return fmt.Errorf("cannot reach %s (network): %w", endpoint, err)
	default:
		return err
	}
}

// instanceError is the error of an operation on one instance: "not found"
// only when the provider says so.
func instanceError(endpoint, id string, err error) error {
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return notFoundError{fmt.Sprintf("instance %q not found", id)}
	}
	return fmt.Errorf("instance %q: %w", id, describe(endpoint, err))
}

// notFoundError is an instance the store does not know, said as the CLI
// says it; it matches cdb.ErrInstanceNotFound, so callers (the UI's status
// codes) tell it by kind, not by its words.
type notFoundError struct{ message string }

func (e notFoundError) Error() string { return e.message }

func (e notFoundError) Is(target error) bool { return target == cdb.ErrInstanceNotFound }

func isUntrustedCertificate(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname)
}

// refusedKey is a 401 as the CLI prints it: what to check, and the
// server's first sentence. The server's whole message echoes the payload it
// signed, some 400 characters that help no operator; it stays in the
// *cdb.CosmosError behind this error, for code (errors.As). The payload
// holds the verb, the resource and the date, never the key.
type refusedKey struct {
	endpoint string
	err      error
	// entraID says the request carried an Entra ID token, not a
	// signature of the key.
	entraID bool
}

func (e refusedKey) Error() string {
	var msg string
	switch {
	case e.entraID:
		msg = fmt.Sprintf("%s refused the request's Entra ID token (401 Unauthorized): it is expired or not for this account; "+
			"check %s (-auth token) or the Azure CLI's login (-auth azcli)", e.endpoint, envAccessToken)
	case keysDisabled(e.err):
		msg = fmt.Sprintf("%s refused the key (401 Unauthorized): the account disables key authentication (disableLocalAuth); %s",
			e.endpoint, signWithEntraID)
	default:
		msg = fmt.Sprintf("%s refused the request's signature (401 Unauthorized): the key or this machine's clock is wrong; check %s or -key",
			e.endpoint, cdb.EnvKey)
	}
	var ce *cdb.CosmosError
	if !errors.As(e.err, &ce) {
		return msg
	}
	if said := firstSentence(ce.Message); said != "" {
		msg += fmt.Sprintf(". The server said: %q", said)
	}
	if ce.ActivityID != "" {
		msg += " (activity id " + ce.ActivityID + ")"
	}
	return msg
}

func (e refusedKey) Unwrap() error { return e.err }

// signedWith says a refusal in the words of cfg's credential: a 401 of a
// request that carried an Entra ID token is about the token, not the key.
func signedWith(cfg cdb.Config, err error) error {
	var refused refusedKey
	if cfg.ClientOptions.Credential != nil && errors.As(err, &refused) {
		refused.entraID = true
		return refused
	}
	return err
}

// firstSentence is the first sentence of a Cosmos DB error message, which
// comes as `Message: {"Errors":["..."]}` and then the request's details,
// cut to a line's length.
func firstSentence(message string) string {
	s := strings.TrimPrefix(strings.TrimSpace(message), "Message: ")
	s = strings.TrimPrefix(s, `{"Errors":["`)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	return fitWidth(strings.TrimSuffix(s, `"]}`), 160)
}
